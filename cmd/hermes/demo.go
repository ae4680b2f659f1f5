package main

import (
	"context"
	"fmt"

	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/internal/telemetry"
)

// runDemo plays the article's restaurant example on a fresh embedded stack with the scripted
// model and the demo MCP server; it exits non-zero when the example does not work.
func runDemo(ctx context.Context, env *cliEnv, args []string) error {
	fs := newFlagSet("demo")
	verbose := fs.Bool("v", false, "print every model step's tools")
	logLevel := fs.String("log-level", "error", "log level of the services: debug, info, warn, error")
	dataDir := fs.String("data-dir", "", "keep the embedded stores in this directory instead of a temporary one")
	serve := fs.String("serve", "", "after the demo, keep serving on this gRPC address (for example 127.0.0.1:7070) until Ctrl-C")
	httpListen := fs.String("http-listen", "", "with -serve, also serve the HTTP/JSON API on this address (for example 127.0.0.1:8080)")
	if err := fs.Parse(args); err != nil {
		return parseErr("demo", fs, env, err)
	}
	if fs.NArg() > 0 {
		return errUsage{fmt.Sprintf("unexpected argument %q (run hermes demo -h)", fs.Arg(0))}
	}
	log, err := telemetry.NewLogger(env.stderr, *logLevel, "text")
	if err != nil {
		return errUsage{err.Error()}
	}
	if *httpListen != "" && *serve == "" {
		return errUsage{"-http-listen needs -serve (run hermes demo -h)"}
	}
	return demo.Run(ctx, demo.Options{Out: env.stdout, Log: log, DataDir: *dataDir, Verbose: *verbose, Serve: *serve, HTTPListen: *httpListen})
}
