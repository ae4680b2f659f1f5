// Command hermes is the Hermes agent runtime: one binary whose subcommands serve the gRPC
// services (all in one process, or one target per process), talk to a running server, and run
// an offline demo.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	// Ctrl-C is delivered to the command: most stop on it, hermes chat cancels the running turn.
	interrupts := make(chan os.Signal, 1)
	signal.Notify(interrupts, os.Interrupt)
	code := runEnv(ctx, &cliEnv{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv, interrupts: interrupts}, os.Args[1:])
	stop()
	os.Exit(code)
}

// command is one subcommand.
type command struct {
	name  string
	short string
	run   func(ctx context.Context, env *cliEnv, args []string) error
	// interactive commands read env.interrupts themselves; the others end on the first.
	interactive bool
}

// cliEnv is what a subcommand may touch of the outside world; tests substitute it.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// interrupts carries Ctrl-C (SIGINT); nil when nothing delivers them (tests).
	interrupts <-chan os.Signal
}

func commands() []command {
	return []command{
		{"serve", "run the gRPC services (all in one process, or --target=<service>)", runServe, false},
		{"chat", "chat with a running server: streams answers, shows tool calls, filled arguments and memories", runChat, true},
		{"demo", "play the article's restaurant example offline (scripted model, embedded stack, demo MCP server)", runDemo, false},
		{"mcp", "serve Hermes' tools to MCP clients (hermes mcp serve --stdio)", runMCP, false},
		{"certs", "make a development CA and service certificates for mutual TLS", runCerts, false},
		{"version", "print the version, VCS revision and Go version of this binary", runVersion, false},
	}
}

// errUsage marks an error whose message already says what to do; it exits with code 2.
type errUsage struct{ msg string }

func (e errUsage) Error() string { return e.msg }

// run runs a command line without interrupts, for tests.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	return runEnv(ctx, &cliEnv{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}, args)
}

// runEnv runs a command line and returns its exit code: 0, 1 for a failure, 2 for a usage error.
func runEnv(ctx context.Context, env *cliEnv, args []string) int {
	stdout, stderr := env.stdout, env.stderr
	switch {
	case len(args) == 0:
		usage(stderr)
		return 2
	case args[0] == "-h" || args[0] == "--help" || args[0] == "-help":
		usage(stdout)
		return 0
	case args[0] == "help":
		// "hermes help chat" is "hermes chat -h".
		if len(args) == 1 {
			usage(stdout)
			return 0
		}
		args = []string{args[1], "-h"}
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		if !c.interactive && env.interrupts != nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithCancel(ctx)
			defer cancel()
			go func() {
				select {
				case <-env.interrupts:
					cancel()
				case <-ctx.Done():
				}
			}()
		}
		err := c.run(ctx, env, args[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			return 0
		default:
			fmt.Fprintf(stderr, "hermes %s: %v\n", c.name, err)
			var u errUsage
			if errors.As(err, &u) {
				return 2
			}
			return 1
		}
	}
	fmt.Fprintf(stderr, "hermes: unknown command %q (run hermes help)\n", args[0])
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Hermes is an agent runtime: sessions, tools, MCP and memory as gRPC services.")
	fmt.Fprintln(w, "\nUsage: hermes <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.short)
	}
	fmt.Fprintln(w, "\nRun hermes <command> -h for its flags.")
}

// newFlagSet returns a flag set that reports errors as one line instead of printing usage;
// parseErr prints the usage for -h.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("hermes "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parseErr turns a flag parsing error into a one-line usage error, and -h into the command's
// help.
func parseErr(name string, fs *flag.FlagSet, env *cliEnv, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		printHelp(env.stdout, name, fs, "")
		return err
	}
	return errUsage{fmt.Sprintf("%v (run hermes %s -h)", err, name)}
}
