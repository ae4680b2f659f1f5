package app

import (
	"context"

	"github.com/hermes-agent/hermes/internal/rpc"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway"
	"github.com/hermes-agent/hermes/services/tools"
)

// initTools registers the tool service: its registry and idempotency records in Redis when a
// Redis URL is set (shared by every replica), else in tools.db in the data directory. Builtins
// and the --tools-file tools are registered at start-up. MCP-backed tools reach the gateway
// through a connection made on first use, so the gateway may start later or live elsewhere.
func (a *App) initTools(ctx context.Context) error {
	tok, err := a.Tokenizer()
	if err != nil {
		return err
	}
	rdb, err := a.Redis(ctx)
	if err != nil {
		return err
	}
	var store tools.Store
	if rdb != nil {
		rs := tools.NewRedisStore(rdb, a.cfg.RedisPrefix+"tools:")
		a.onClose(func() { _ = rs.Close() })
		store = rs
		a.watchRedis(toolsv1.ToolService_ServiceDesc.ServiceName, rdb)
	} else if store, err = openInDataDir(a, "tools.db", tools.OpenBoltStore); err != nil {
		return err
	}
	svc, err := tools.NewService(a.cfg.Tools, tools.Options{
		Store:     store,
		Tokenizer: tok,
		Logger:    a.log.With("service", "tools"),
		Egress:    a.sec.egress,
		Secrets:   a.sec.secrets,
		// In one process the gateway's CallTool is called directly (localGateway), its streams on
		// the in-process channel (no network, the same interceptors).
		MCP: func() (tools.MCPCaller, error) {
			if gw := a.localGateway.Load(); gw != nil {
				return *gw, nil
			}
			conn, err := a.Conn(TargetMCPGateway)
			if err != nil {
				return nil, err
			}
			return mcpgatewayv1.NewMCPGatewayServiceClient(conn), nil
		},
	})
	if err != nil {
		return err
	}
	if err := svc.RegisterBuiltins(ctx); err != nil {
		return err
	}
	if f := a.cfg.Tools.File; f != "" {
		n, err := svc.LoadToolsFile(ctx, f)
		if err != nil {
			return err
		}
		a.log.Info("tools file loaded", "file", f, "tools", n)
	}
	a.srv.Register(&toolsv1.ToolService_ServiceDesc, svc)
	return nil
}

// useLocalGateway makes the tool service of this process call the gateway's CallTool directly
// when the gateway is this process's (no --mcpgateway-addr): one pass of the interceptors (the
// in-process principal, authorization against the policy table, recovery, classification)
// instead of two, and no stats handler or message copies (the gateway records its own call
// duration). Streams stay on the in-process channel.
func (a *App) useLocalGateway(gw *mcpgateway.Server) error {
	if a.cfg.MCPGatewayAddr != "" {
		return nil
	}
	conn, err := a.Conn(TargetMCPGateway)
	if err != nil {
		return err
	}
	local := tools.LocalMCP(rpc.LocalUnary(a.srv, mcpgatewayv1.MCPGatewayService_CallTool_FullMethodName, gw.CallTool),
		mcpgatewayv1.NewMCPGatewayServiceClient(conn))
	a.localGateway.Store(&local)
	return nil
}
