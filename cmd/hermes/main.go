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
	"runtime/debug"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=v1.2.3".
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// command is one subcommand.
type command struct {
	name  string
	short string
	run   func(ctx context.Context, env *cliEnv, args []string) error
}

// cliEnv is what a subcommand may touch of the outside world; tests substitute it.
type cliEnv struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

func commands() []command {
	return []command{
		{"serve", "run the gRPC services (all in one process, or --target=<service>)", runServe},
		{"chat", "chat with a running server: streams answers, shows tool calls, filled arguments and memories", runChat},
		{"demo", "play the article's restaurant example offline (scripted model, embedded stack, demo MCP server)", runDemo},
		{"mcp", "serve Hermes' tools to MCP clients (hermes mcp serve --stdio)", runMCP},
		{"certs", "make a development CA and service certificates for mutual TLS", runCerts},
		{"version", "print the version", runVersion},
	}
}

// errUsage marks an error whose message already says what to do; it exits with code 2.
type errUsage struct{ msg string }

func (e errUsage) Error() string { return e.msg }

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	env := &cliEnv{stdin: stdin, stdout: stdout, stderr: stderr, getenv: getenv}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
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

// parseErr turns a flag parsing error into a one-line usage error, and -h into the usage.
func parseErr(name string, fs *flag.FlagSet, env *cliEnv, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(env.stdout, "Usage: hermes %s [flags]\n\nEvery flag can also be set by the environment variable shown, or in the --config YAML file.\n\n", name)
		fs.SetOutput(env.stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		return err
	}
	return errUsage{fmt.Sprintf("%v (run hermes %s -h)", err, name)}
}

func versionString() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

func runVersion(_ context.Context, env *cliEnv, _ []string) error {
	fmt.Fprintf(env.stdout, "hermes %s\n", versionString())
	return nil
}
