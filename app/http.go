package app

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/hermes-agent/hermes/internal/browserguard"
	"github.com/hermes-agent/hermes/internal/config"
	"github.com/hermes-agent/hermes/internal/console"
	"github.com/hermes-agent/hermes/internal/httpapi"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/services/mcpgateway"
)

// HTTPConfig is the listener of the HTTP/JSON API.
type HTTPConfig struct {
	// Listen is the HTTP address; empty disables the API.
	Listen string
	// AllowedHosts and AllowedOrigins configure the browser guard of every HTTP listener of
	// the process (the API, the profiler, the metrics listener): see internal/browserguard.
	AllowedHosts   []string
	AllowedOrigins []string
}

// RegisterFlags registers the HTTP API's settings.
func (c *HTTPConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "http-listen", "", "HTTP address serving the API as JSON, RunTurn as server-sent events, GET /openapi.json and the web console at /ui/ (for example 127.0.0.1:8080); empty disables it")
	fs.Func("http-allowed-hosts", "comma list of host names (hermes.example.com, host:port, *.example.com; * for any) clients use to reach --http-listen, --pprof-listen and --metrics-listen besides loopback names and IP addresses; "+
		"a request with another Host header is refused with 403 (DNS rebinding protection)", func(v string) error {
		c.AllowedHosts = config.SplitList(v)
		return nil
	})
	fs.Func("http-allowed-origins", "comma list of browser origins (https://app.example.com) whose pages may call the HTTP listeners and get CORS answers; "+
		"requests with another Origin header than the listener's own are refused with 403; none by default", func(v string) error {
		c.AllowedOrigins = config.SplitList(v)
		return nil
	})
}

// Guard is the browser guard of the process's HTTP listeners (the API, the profiler, the
// metrics listener): Host allowlist, Origin check, JSON writes, CORS for configured origins.
// writeTypes are media types a write may carry besides JSON (see browserguard.Config).
func (c *HTTPConfig) Guard(log *slog.Logger, writeTypes ...string) (*browserguard.Guard, error) {
	g, err := browserguard.New(browserguard.Config{
		AllowedHosts:   c.AllowedHosts,
		AllowedOrigins: c.AllowedOrigins,
		HostsSetting:   "--http-allowed-hosts (HERMES_HTTP_ALLOWED_HOSTS)",
		OriginsSetting: "--http-allowed-origins (HERMES_HTTP_ALLOWED_ORIGINS)",
		// The event stream resumes with Last-Event-ID; Grpc-Timeout shortens a call.
		CORSHeaders: []string{"Grpc-Timeout", "Last-Event-ID"},
		WriteTypes:  writeTypes,
		Logger:      log,
	})
	if err != nil {
		return nil, fmt.Errorf("--http-allowed-hosts, --http-allowed-origins: %w", err)
	}
	return g, nil
}

// httpAPI is the HTTP/JSON API of a process: its listener and server.
type httpAPI struct {
	lis  net.Listener
	srv  *httpapi.Server
	addr string
}

// initHTTP opens the HTTP API's listener. Its calls go to this process's gRPC server over the
// in-process channel for outside callers, so each is authenticated and authorized from its own
// Authorization header by the same interceptors as a call on the gRPC listener; it exposes the
// services this process serves. Without API keys it listens on loopback only (checkListen).
func (a *App) initHTTP() error {
	if a.cfg.HTTP.Listen == "" {
		return nil
	}
	if err := a.sec.checkListen("http-listen", a.cfg.HTTP.Listen, a.keys != nil); err != nil {
		return err
	}
	guard, err := a.cfg.HTTP.Guard(a.log.With("component", "http"))
	if err != nil {
		return err
	}
	routes := map[string]http.Handler{console.Prefix: console.Handler()}
	if a.cfg.MCPGateway.ServesClientMetadata() {
		// The OAuth client metadata document of per-user MCP OAuth: public, as the
		// authorization servers fetch it without credentials; it holds configuration only.
		routes["GET "+mcpgateway.ClientMetadataPath] = mcpgateway.ClientMetadataHandler(a.cfg.MCPGateway)
	}
	srv, err := httpapi.New(a.InProcessPublic(), httpapi.Options{
		Guard:           guard,
		Services:        a.srv.Services(),
		Omit:            a.edgeOmitted,
		Logger:          a.log.With("component", "http"),
		ShutdownTimeout: a.cfg.ShutdownTimeout,
		Routes:          routes,
	})
	if err != nil {
		return err
	}
	lis, err := net.Listen("tcp", a.cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("http listen on %s: %w", a.cfg.HTTP.Listen, err)
	}
	if lis, err = a.tlsListener(lis); err != nil {
		return err
	}
	a.onClose(func() { _ = lis.Close() })
	a.http = &httpAPI{lis: lis, srv: srv, addr: dialable(lis.Addr().String())}
	return nil
}

// HTTPAddr is the address of the HTTP/JSON API, dialable from this host; empty when it is off.
func (a *App) HTTPAddr() string {
	if a.http == nil {
		return ""
	}
	return a.http.addr
}

// serveHTTP serves the HTTP API until ctx ends; the returned function waits for its shutdown.
func (a *App) serveHTTP(ctx context.Context) (wait func()) {
	if a.http == nil {
		return func() {}
	}
	a.log.Info("http api serving", "addr", a.http.addr, "openapi", "http://"+a.http.addr+"/openapi.json")
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.http.srv.Serve(ctx, a.http.lis); err != nil {
			a.log.Error("http api", "error", err)
		}
	}()
	return func() { <-done }
}

// DialableAddr turns a listen address into one this host can dial (":7070" → "127.0.0.1:7070").
func DialableAddr(addr string) string { return dialable(addr) }

// tlsListener serves an HTTP listener of the process (the HTTP API, the MCP endpoint) over TLS
// with the process's certificate when one is configured; their clients authenticate with keys,
// not client certificates.
func (a *App) tlsListener(lis net.Listener) (net.Listener, error) {
	tc := a.cfg.TLS()
	if !tc.Server() {
		return lis, nil
	}
	cfg, err := (rpc.TLSConfig{CertFile: tc.CertFile, KeyFile: tc.KeyFile}).ServerTLS(a.log)
	if err != nil {
		_ = lis.Close()
		return nil, err
	}
	return tls.NewListener(lis, cfg), nil
}
