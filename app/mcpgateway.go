package app

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hermes-agent/hermes/internal/model"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway"
	"github.com/hermes-agent/hermes/services/mcpgateway/endpoint"
)

// initMCPGateway registers the MCP gateway: connections to MCP servers (from --mcp-servers and
// AddServer), whose tools it registers in the tool service, and, with --mcp-listen, Hermes' own
// tools served over MCP Streamable HTTP.
func (a *App) initMCPGateway(ctx context.Context) error {
	cfg := a.cfg.MCPGateway
	// The tool service may be another process that starts later: dial on first use.
	tools := func() (toolsv1.ToolServiceClient, error) {
		conn, err := a.Conn(TargetTools)
		if err != nil {
			return nil, err
		}
		return toolsv1.NewToolServiceClient(conn), nil
	}
	// Servers added at run time are stored, so every replica connects to them and they survive
	// a restart: in Redis when configured, else in a file of the data directory.
	var store mcpgateway.ServerStore
	rdb, err := a.Redis(ctx)
	if err != nil {
		return err
	}
	if rdb != nil {
		store = mcpgateway.NewRedisServerStore(rdb, a.cfg.RedisPrefix+"mcpgateway:")
		a.watchRedis(mcpgatewayv1.MCPGatewayService_ServiceDesc.ServiceName, rdb)
	} else if store, err = openInDataDir(a, "mcpgateway.db", mcpgateway.OpenBoltServerStore); err != nil {
		return err
	}
	// MCP servers the operator allows to use sampling get Hermes' configured model.
	var sampler mcpgateway.Sampler
	if mc, err := model.New(model.Config{BaseURL: a.cfg.ModelBaseURL, APIKey: a.cfg.APIKey(a.getenv), Model: a.cfg.Model}); err == nil {
		sampler = mc
	} else if !errors.Is(err, model.ErrNotConfigured) {
		return err
	}
	// Answers to servers' requests for user input may reach another replica than the one
	// holding the request: the cluster's NATS carries them there. Without one (a single
	// process), the replica that gets an answer holds the request.
	var relay *mcpgateway.NATSElicitRelay
	if a.cfg.NATSURL != "" {
		// The gateway's tools work without NATS: only answers that reach another replica are lost.
		if nc, _, err := a.NATS(ctx); err != nil {
			a.log.Warn("answers to MCP servers' requests for input reach only the replica that gets them", "reason", err)
		} else {
			relay = mcpgateway.NewNATSElicitRelay(nc, a.EventNames().ElicitationPrefix)
		}
	}
	var elicitRelay mcpgateway.ElicitRelay
	if relay != nil {
		elicitRelay = relay
	}
	connectedSubject, replica := a.EventNames().AccountConnected, rand.Text()
	oauthKey, err := mcpOAuthKey(cfg)
	if err != nil {
		return err
	}
	// The MCP endpoint, started after the gateway, learns of the accounts users connect here.
	var connected atomic.Pointer[endpoint.Server]
	gw := mcpgateway.New(cfg, mcpgateway.Options{
		OnUserConnected: func(ctx context.Context, server, user string) {
			// The session that was sent the link may be held by another replica's endpoint: with
			// NATS the others hear of the connection; this one's is told directly.
			if relay != nil {
				if err := relay.AnnounceConnected(connectedSubject, replica, server, user); err != nil {
					a.log.Warn("the MCP endpoints of other replicas do not hear of a connected account", "server", server, "error", err)
				}
			}
			if ep := connected.Load(); ep != nil {
				// The callback's answer to the browser does not wait for the notifications.
				go ep.UserConnected(context.WithoutCancel(ctx), user, server)
			}
		},
		OAuthKey: oauthKey,
		Logger:   a.log.With("service", "mcpgateway"),
		Registry: mcpgateway.NewToolServiceRegistry(tools),
		Getenv:   a.getenv,
		Version:  a.cfg.Version,
		Store:    store,
		// Every outbound request of the gateway (Streamable HTTP servers, OAuth token endpoints)
		// goes through the operator's egress policy, checked on the address dialled.
		HTTPClient:  &http.Client{Transport: a.sec.egress.Transport()},
		Sampler:     sampler,
		Secrets:     a.sec.secrets,
		ElicitRelay: elicitRelay,
	})
	if err := gw.Start(); err != nil {
		gw.Close()
		return err
	}
	a.onClose(gw.Close)
	gws := mcpgateway.NewServer(gw)
	a.srv.Register(&mcpgatewayv1.MCPGatewayService_ServiceDesc, gws)
	if err := a.useLocalGateway(gws); err != nil {
		return err
	}
	if cfg.MCPListen == "" {
		return nil
	}
	ep, err := a.serveMCPEndpoint(tools)
	if err != nil {
		return err
	}
	connected.Store(ep)
	if relay != nil {
		stop, err := relay.ListenConnected(connectedSubject, replica, func(server, user string) {
			go ep.UserConnected(context.WithoutCancel(ctx), user, server)
		})
		if err != nil {
			return fmt.Errorf("listening for connected MCP accounts: %w", err)
		}
		a.onClose(stop)
	}
	return nil
}

// mcpOAuthKey is the operator's key that seals per-user OAuth tokens of MCP servers before they
// are stored; without one, servers with user_oauth answer that it is missing.
func mcpOAuthKey(cfg mcpgateway.Config) ([]byte, error) {
	if u := cfg.OAuthRedirectURL; u != "" && !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		return nil, fmt.Errorf("--mcpgateway.oauth-redirect-url must be an http(s) URL, got %q", u)
	}
	if err := mcpgateway.CheckClientMetadataURL(cfg.OAuthClientMetadataURL, cfg.OAuthRedirectURL); err != nil {
		return nil, err
	}
	if cfg.OAuthKeyFile == "" {
		return nil, nil
	}
	key, err := mcpgateway.LoadOAuthKey(cfg.OAuthKeyFile)
	if err != nil {
		return nil, fmt.Errorf("--mcpgateway.oauth-key-file: %w", err)
	}
	return key, nil
}

// serveMCPEndpoint serves Hermes' own MCP endpoint on --mcp-listen.
func (a *App) serveMCPEndpoint(tools func() (toolsv1.ToolServiceClient, error)) (*endpoint.Server, error) {
	cfg := a.cfg.MCPGateway
	// The endpoint runs Hermes' tools for its clients: the power of ExecuteTool, checked with the
	// same keys and policy as the gRPC listener.
	if err := a.sec.checkListen("mcp-listen", cfg.MCPListen, a.keys != nil); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.MCPListen)
	if err != nil {
		return nil, fmt.Errorf("MCP endpoint: listen on %s: %w", cfg.MCPListen, err)
	}
	ep, err := endpoint.New(endpoint.Options{
		Tools: func() (endpoint.ToolClient, error) {
			return tools()
		},
		// The answers of the endpoint's clients to MCP servers' sampling requests go back
		// through AnswerSampling, which any replica's gateway forwards to the one holding the
		// request.
		Gateway: func() (endpoint.Answers, error) {
			conn, err := a.Conn(TargetMCPGateway)
			if err != nil {
				return nil, err
			}
			return mcpgatewayv1.NewMCPGatewayServiceClient(conn), nil
		},
		Logger:  a.log.With("service", "mcp-endpoint"),
		Version: a.cfg.Version,
		Refresh: cfg.ToolsRefresh,
		Config:  cfg.Endpoint,
	})
	if err != nil {
		_ = lis.Close()
		return nil, fmt.Errorf("MCP endpoint: %w", err)
	}
	path := cfg.MCPPath
	if path == "" {
		path = "/mcp"
	}
	mux := http.NewServeMux()
	// The endpoint runs tools for its callers, each for one user, as the policy table says
	// (auth.MCPEndpointMethod, or MCPEndpointUsersMethod when the operator lets user keys in);
	// the calls go to ExecuteTool with that user.
	mux.Handle(path, endpoint.Authenticated(a.sec.authn, cfg.Endpoint.UserKeys, ep.HTTPHandler()))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	scheme := "http"
	if a.cfg.TLS().Server() {
		scheme = "https"
	}
	if lis, err = a.tlsListener(lis); err != nil {
		return nil, fmt.Errorf("MCP endpoint: %w", err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	go ep.Run(runCtx)
	go func() {
		if err := hs.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("MCP endpoint stopped", "error", err)
		}
	}()
	a.log.Info("MCP endpoint serving Hermes tools", "url", scheme+"://"+dialable(lis.Addr().String())+path)
	a.onClose(func() {
		stop()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		// SSE streams never end by themselves; close what is left after the grace period.
		if err := hs.Shutdown(sctx); err != nil {
			_ = hs.Close()
		}
	})
	return ep, nil
}
