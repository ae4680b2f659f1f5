// Package mcpgateway is the only part of Hermes that speaks MCP. It keeps one supervised
// connection per MCP server (stdio or Streamable HTTP, through the official Go SDK), gives the
// discovered tools namespaced names and registers them in the tool service with their
// annotations, calls them with an absolute timeout (as MCP tasks when a tool requires it, with
// progress passed on) and normalizes their results to {success, output}, serves resources,
// templates, subscriptions, completions and prompts as cleaned text, answers the servers'
// sampling (when the operator allows it), elicitation and roots requests, and serves Hermes' own
// tools as an MCP server.
//
// Files: conn.go (a connection's state), supervisor.go (connect, watch, reconnect),
// transport.go, stdio.go and side.go (transports and the side channel for what the SDK lacks),
// listing.go and regsync.go (tools and their registration), calls.go, stdiocall.go (a stdio
// server's tools/call on the side channel) and tasks.go (tool calls),
// resources.go, handlers.go (server-initiated requests and notifications), oauth.go,
// servers.go and serversfile.go (the set of servers), server.go (the gRPC service).
package mcpgateway

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hermes-agent/hermes/internal/secretenv"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"

	"github.com/hermes-agent/hermes/internal/backoff"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// Options are a Gateway's dependencies.
type Options struct {
	Logger *slog.Logger
	// Registry receives the discovered tools; nil registers them nowhere (the gateway's own
	// RPCs still work).
	Registry Registry
	// Getenv reads the gateway's environment (bearer tokens, PATH and HOME for stdio servers);
	// nil means os.Getenv.
	Getenv func(string) string
	// Version is reported to MCP servers as the client version.
	Version string
	// Store shares the servers added with AddServer between replicas and across restarts; nil
	// keeps them in this process only.
	Store ServerStore
	// HTTPClient sends every outbound HTTP request of the gateway (Streamable HTTP servers,
	// OAuth token endpoints), so an egress policy plugged into its transport applies to all of
	// them; nil means a client with http.DefaultTransport's settings.
	HTTPClient *http.Client
	// Sampler answers MCP sampling requests of the servers whose spec allows it; nil refuses
	// them all.
	Sampler Sampler
	// ElicitRelay carries answers to servers' requests for user input between replicas; nil
	// delivers only the answers that reach this replica.
	ElicitRelay ElicitRelay
	// Secrets reads the secrets specs name (bearer_token_env, OAuth client_secret_env) from the
	// variables the operator allowed; nil allows none (the servers file may still name its own).
	Secrets *secretenv.Reader
	// OAuthKey seals the users' OAuth tokens of per-user OAuth servers (ParseOAuthKey); nil
	// leaves those servers unusable.
	OAuthKey []byte
	// Connections stores the users' connections; nil uses Store when it implements
	// ConnectionStore, else memory.
	Connections ConnectionStore
	// OnUserConnected, when set, is called after the OAuth callback stored a user's connection
	// to a server (in the process that took the callback): Hermes' MCP endpoint then tells the
	// user's sessions that the URL elicitation is complete. It must not block.
	OnUserConnected func(ctx context.Context, server, user string)
}

// Gateway holds the MCP server connections.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	reg     Registry
	getenv  func(string) string
	version string
	store   ServerStore
	sampler Sampler
	// httpBase is the transport of Options.HTTPClient, traced; every outbound request uses it.
	httpBase   http.RoundTripper
	httpClient *http.Client
	reconnect  backoff.Policy
	// reconnectHTTP is reconnect for Streamable HTTP servers, capped at cfg.HTTPReconnectMax.
	reconnectHTTP backoff.Policy
	progress      *progressHub
	elicits       *elicitHub
	watches       *watchHub

	// powers are the operator's allowlists; set before any server connects.
	powers *powers
	// sealer seals per-user OAuth records (nil: no key configured); conns stores them.
	sealer *sealer
	// oauth are per-user OAuth's limits (oauthLimitsDefault; tests shorten them before adding
	// servers); discoFails remembers failed OAuth discoveries for a while.
	oauth      oauthLimits
	discoFails failCache
	conns      ConnectionStore
	// onUserConnected is Options.OnUserConnected (nil: nobody listens).
	onUserConnected func(ctx context.Context, server, user string)

	// addMu orders AddServer, RemoveServer and the store sync, so a server being added here is
	// not also picked up from the store half-way. It is held across connecting and the tool
	// service's calls, and taken before mu.
	addMu sync.Mutex
	// progressEvery overrides progressEvery (tests).
	progressEvery time.Duration
	// rejected are the stored specs that failed to connect, retried with back-off; guarded by
	// addMu.
	rejected rejections

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards the fields below. Lock order: addMu, then mu, then a serverConn's mu (see
	// serverConn). The hubs' locks (progress, elicits, watches), a callClock's, a stdio side's
	// and a tailBuffer's are leaves: nothing else is taken while one is held.
	mu      sync.Mutex
	servers map[string]*serverConn
	tools   map[string]*toolEntry // namespaced name → tool, across servers
	badFile []*pb.Server          // entries of the servers file that could not be used
	closed  bool
}

// New returns a Gateway with no servers; Close disconnects everything.
func New(cfg Config, opts Options) *Gateway {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	ctx, cancel := context.WithCancel(context.Background())
	cfg = cfg.withDefaults()
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	conns := opts.Connections
	if cs, ok := opts.Store.(ConnectionStore); ok && conns == nil {
		conns = cs
	}
	if conns == nil {
		conns = newMemConnStore()
	}
	var seal *sealer
	if len(opts.OAuthKey) > 0 {
		var err error
		if seal, err = newSealer(opts.OAuthKey); err != nil {
			log.Error("MCP OAuth key unusable; per-user OAuth servers cannot be called", "error", err)
		}
	}
	return &Gateway{
		sealer:          seal,
		oauth:           oauthLimitsDefault,
		conns:           conns,
		onUserConnected: opts.OnUserConnected,
		cfg:             cfg,
		sampler:         opts.Sampler,
		httpClient:      hc,
		// otelhttp continues the caller's trace on the server (traceparent) and times requests.
		httpBase:      otelhttp.NewTransport(base),
		reconnect:     backoff.Policy{Initial: cfg.ReconnectMin, Max: cfg.ReconnectMax, Jitter: 0.2},
		reconnectHTTP: backoff.Policy{Initial: cfg.ReconnectMin, Max: cfg.HTTPReconnectMax, Jitter: 0.2},
		progress:      newProgressHub(),
		elicits:       newElicitHub(opts.ElicitRelay),
		watches:       newWatchHub(),
		log:           log,
		reg:           opts.Registry,
		store:         opts.Store,
		getenv:        getenv,
		powers:        newPowers(cfg.StdioAllow, opts.Secrets),
		version:       cmp.Or(opts.Version, "dev"),
		ctx:           ctx,
		cancel:        cancel,
		servers:       map[string]*serverConn{},
		tools:         map[string]*toolEntry{},
		rejected:      rejections{},
	}
}

// Close disconnects every server and stops their processes. Registered tools stay in the tool
// service, so a restart with the same servers changes nothing there.
func (g *Gateway) Close() {
	g.mu.Lock()
	g.closed = true
	conns := make([]*serverConn, 0, len(g.servers))
	for _, c := range g.servers {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	g.cancel()
	for _, c := range conns {
		<-c.done
	}
	g.wg.Wait()
}

// Start connects the servers of the configured mcpServers file and, when enabled, prunes tool
// registrations left behind by servers the gateway no longer has. Servers connect in the
// background; a server that cannot connect is retried and does not fail Start.
func (g *Gateway) Start() error {
	if g.cfg.ServersFile != "" {
		specs, bad, err := LoadServersFile(g.cfg.ServersFile, g.getenv)
		if err != nil {
			return err
		}
		g.powers.allowFile(specs)
		for _, spec := range specs {
			if _, err := g.connect(withDefaultPrefix(spec), true); err != nil {
				bad = append(bad, badEntry{name: spec.Name, err: err.Error()})
			}
		}
		g.mu.Lock()
		for _, b := range bad {
			g.log.Error("MCP servers file: entry not used", "file", g.cfg.ServersFile, "server", b.name, "error", b.err)
			g.badFile = append(g.badFile, &pb.Server{Spec: &pb.ServerSpec{Name: b.name}, State: pb.ServerState_SERVER_STATE_FAILED,
				LastError: "not started: the entry in " + g.cfg.ServersFile + " cannot be used: " + abbreviate(b.err, 1000)})
		}
		g.mu.Unlock()
		g.log.Info("MCP servers from file", "file", g.cfg.ServersFile, "servers", len(specs), "failed", len(bad))
	}
	if g.store != nil {
		ctx, cancel := context.WithTimeout(g.ctx, registryTimeout)
		err := g.syncStore(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("stored MCP servers: %w", err)
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			t := time.NewTicker(g.cfg.SyncInterval)
			defer t.Stop()
			for {
				select {
				case <-g.ctx.Done():
					return
				case <-t.C:
				}
				ctx, cancel := context.WithTimeout(g.ctx, registryTimeout)
				if err := g.syncStore(ctx); err != nil {
					g.log.Debug("MCP server store sync failed; retrying", "error", err)
				}
				cancel()
			}
		}()
	}
	if g.reg != nil && g.cfg.PruneStale {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.prune()
		}()
	}
	return nil
}

// prune unregisters, once the tool service answers, the MCP tools whose server the gateway does
// not have (added at run time before a restart, or removed from the file). It retries with
// backoff until it succeeds or the gateway closes.
func (g *Gateway) prune() {
	for attempt := 0; ; attempt++ {
		ctx, cancel := context.WithTimeout(g.ctx, registryTimeout)
		existing, err := g.reg.BySource(ctx, "mcp:")
		if err == nil {
			removed := 0
			for name, src := range existing {
				server := strings.TrimPrefix(src, "mcp:")
				g.mu.Lock()
				_, have := g.servers[server]
				g.mu.Unlock()
				if have {
					continue
				}
				if err = g.reg.Unregister(ctx, name, src); err != nil {
					break
				}
				removed++
			}
			if removed > 0 {
				g.log.Info("unregistered tools of MCP servers the gateway no longer has", "tools", removed)
			}
		}
		cancel()
		if err == nil || g.ctx.Err() != nil {
			return
		}
		if !backoff.Sleep(g.ctx, g.reconnect.Delay(attempt)) {
			return
		}
	}
}
