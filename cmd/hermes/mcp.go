package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/backoff"
	"github.com/hermes-agent/hermes/internal/config"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/telemetry"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"

	"github.com/hermes-agent/hermes/services/mcpgateway/endpoint"
)

// runMCP implements "hermes mcp serve": Hermes' tools served to an MCP client, over stdio (for
// clients that start their servers as subprocesses, like desktop MCP clients) or Streamable
// HTTP, with every call going to a running tool service through ToolService.ExecuteTool.
func runMCP(ctx context.Context, env *cliEnv, args []string) error {
	if len(args) == 0 || args[0] != "serve" {
		return errUsage{"usage: hermes mcp serve --stdio [--tools-addr host:port] (or --mcp-listen host:port for Streamable HTTP)"}
	}
	fs := newFlagSet("mcp serve")
	stdio := fs.Bool("stdio", false, "serve one MCP session on stdin/stdout")
	listen := fs.String("mcp-listen", "", "serve MCP Streamable HTTP on this address instead of stdio (for example 127.0.0.1:7071)")
	path := fs.String("mcpgateway.mcp-path", "/mcp", "HTTP path of the endpoint with --mcp-listen")
	toolsAddr := fs.String("tools-addr", "127.0.0.1:7070", "gRPC address of the Hermes tool service")
	refresh := fs.Duration("mcpgateway.tools-refresh", 5*time.Second, "how often the tool list is re-read")
	wait := fs.Duration("tools-wait", 10*time.Second, "how long to wait at start for the tool service to answer before giving up")
	logLevel := fs.String("log-level", "warn", "log level (logs go to stderr): debug, info, warn, error")
	var epCfg endpoint.Config
	epCfg.RegisterFlags(fs)
	fs.VisitAll(func(f *flag.Flag) { f.Usage += " [" + config.EnvName(f.Name) + "]" })
	if err := config.Load(fs, args[1:], env.getenv, ""); err != nil {
		return parseErr("mcp serve", fs, env, err)
	}
	if fs.NArg() > 0 {
		return errUsage{fmt.Sprintf("unexpected argument %q (run hermes mcp serve -h)", fs.Arg(0))}
	}
	if !*stdio && *listen == "" {
		return errUsage{"give --stdio or --mcp-listen (run hermes mcp serve -h)"}
	}
	// stdout carries the protocol with --stdio: logs go to stderr only.
	log, err := telemetry.NewLogger(env.stderr, *logLevel, "text")
	if err != nil {
		return errUsage{err.Error()}
	}
	conn, err := rpc.Dial(*toolsAddr)
	if err != nil {
		return err
	}
	defer conn.Close()
	client := toolsv1.NewToolServiceClient(conn)
	srv, err := endpoint.New(endpoint.Options{
		Tools:   func() (endpoint.ToolClient, error) { return client, nil },
		Logger:  log,
		Version: versionString(),
		Refresh: *refresh,
		Config:  epCfg,
	})
	if err != nil {
		return err
	}
	// An MCP client shows a server with no tools as working: without the tool service there is
	// nothing to serve, so say so and exit. Later outages are answered per call, and the
	// connection comes back by itself.
	if err := firstSync(ctx, srv, *wait); err != nil {
		return fmt.Errorf("the Hermes tool service at %s is unreachable: %w", *toolsAddr, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.Run(ctx)
	if *stdio {
		err := srv.ServeStdio(ctx, env.stdin, env.stdout)
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(*path, srv.HTTPHandler())
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, stop := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer stop()
		if hs.Shutdown(sctx) != nil {
			_ = hs.Close()
		}
	}()
	log.Info("serving Hermes tools over MCP", "url", "http://"+lis.Addr().String()+*path, "tools_addr", *toolsAddr)
	if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// firstSync reads the tool list, retrying for up to wait while the tool service does not
// answer (it may be starting next to this command).
func firstSync(ctx context.Context, srv *endpoint.Server, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	retry := backoff.Policy{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.2}
	var why error // the last error that says more than "out of time"
	for attempt := 0; ; attempt++ {
		err := srv.Sync(ctx)
		if err == nil {
			return nil
		}
		if st, ok := status.FromError(errors.Unwrap(err)); ok && errors.Unwrap(err) != nil {
			err = errors.New(st.Message())
		}
		if why == nil || ctx.Err() == nil {
			why = err
		}
		if !backoff.Sleep(ctx, retry.Delay(attempt)) {
			return why
		}
	}
}
