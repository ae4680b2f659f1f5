package mcpgateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	otelcodes "go.opentelemetry.io/otel/codes"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// maxRequestedOutput caps CallToolRequest.max_output_bytes, well inside gRPC's message limit.
const maxRequestedOutput = 16 << 20

// lookup finds a tool by namespaced name, or by server and original name.
func (g *Gateway) lookup(name, server, tool string) *toolEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	if name != "" {
		return g.tools[name]
	}
	for _, e := range g.tools {
		if e.conn.spec.Name == server && e.original == tool {
			return e
		}
	}
	return nil
}

// CallTool calls a tool and normalizes its result. A call that cannot reach the tool (server
// not connected, connection broken, timeout) is a response with success=false and an error
// code, not an error: the tool service passes it to the model like any failed tool. The error
// return is for a caller that gave up (its context ended) and for invalid arguments.
func (g *Gateway) CallTool(ctx context.Context, req *pb.CallToolRequest) (*pb.CallToolResponse, error) {
	return g.CallToolProgress(ctx, req, nil)
}

// CallToolProgress is CallTool that passes the progress the tool reports to onProgress (which
// may be nil), from the goroutine that receives it.
func (g *Gateway) CallToolProgress(ctx context.Context, req *pb.CallToolRequest, onProgress func(*pb.Progress)) (*pb.CallToolResponse, error) {
	ctx, span := tracer.Start(ctx, "mcp tools/call", trace.WithAttributes(
		attribute.String("mcp.tool", req.GetName()),
		attribute.String("mcp.server", req.GetServer()),
		attribute.String("mcp.original_tool", req.GetTool()),
	))
	defer span.End()
	start := time.Now()
	resp, err := g.callTool(ctx, req, onProgress)
	if resp != nil {
		resp.Duration = durationpb.New(time.Since(start))
		span.SetAttributes(attribute.Bool("mcp.success", resp.GetSuccess()), attribute.String("mcp.error_code", resp.GetErrorCode()))
		if !resp.GetSuccess() {
			span.SetStatus(otelcodes.Error, resp.GetErrorCode())
		}
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	}
	return resp, err
}

var tracer = otel.Tracer("github.com/hermes-agent/hermes/services/mcpgateway")

func (g *Gateway) callTool(ctx context.Context, req *pb.CallToolRequest, onProgress func(*pb.Progress)) (*pb.CallToolResponse, error) {
	e := g.lookup(req.GetName(), req.GetServer(), req.GetTool())
	if e == nil {
		what := req.GetName()
		if what == "" {
			what = req.GetServer() + "/" + req.GetTool()
		}
		return failed(codeUnknownTool, fmt.Sprintf("no MCP tool %q is known to the gateway; MCPGatewayService.ListTools lists the tools it has", what)), nil
	}
	args := json.RawMessage(strings.TrimSpace(req.GetArguments()))
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	c := e.conn
	timeout := c.callTimeout
	if d := req.GetTimeout(); d != nil && d.AsDuration() > 0 && d.AsDuration() < timeout {
		timeout = d.AsDuration()
	}
	start := time.Now()
	var l *live
	var us *userSession // the calling user's own session, for a per-user OAuth server
	if perUserOAuth(c.spec.GetHttp()) {
		var resp *pb.CallToolResponse
		if us, resp = g.userLive(ctx, c, req.GetUserId(), timeout); resp != nil {
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return resp, nil
		}
		l = us.l
	} else {
		var why string
		if l, why = c.waitReady(ctx, min(g.cfg.ReadyWait, timeout/2)); l == nil {
			if ctx.Err() != nil {
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			return failed(codeUnavailable, fmt.Sprintf("MCP server %q is not connected (%s); it is reconnected automatically, try again shortly", c.spec.Name, why)), nil
		}
	}
	timeout -= time.Since(start)
	cctx, clock := newCallClock(ctx, timeout)
	defer clock.stop()
	token, done := g.progress.register(c, onProgress, clock, req.GetAnswersSampling())
	defer done()
	var res *mcp.CallToolResult
	var err error
	for try := 0; ; try++ {
		if e.taskSupport == "required" {
			res, err = g.callTask(cctx, l, e, args, token, onProgress)
		} else {
			if side := sideToolCall(l); side != nil {
				res, err = side.callTool(cctx, l.sess, e.original, args, token)
			} else {
				params := &mcp.CallToolParams{Name: e.original, Arguments: args}
				if token != "" {
					params.SetProgressToken(token)
				}
				res, err = l.sess.CallTool(cctx, params)
			}
		}
		if err == nil || try > 0 || !notSent(err) || cctx.Err() != nil || us != nil {
			break
		}
		// The request never reached the tool (an HTTP server restarted and forgot the session,
		// or refuses connections while it restarts): once a new session is up, send it again.
		c.requestProbe()
		next, _ := c.waitNewSession(cctx, min(g.cfg.ReadyWait, clock.remaining()/2), l)
		if next == nil {
			break
		}
		l = next
	}
	if err == nil {
		opts := g.cfg.cleanOptions()
		if n := int(req.GetMaxOutputBytes()); n > opts.MaxBytes {
			opts.MaxBytes = min(n, maxRequestedOutput)
		}
		return normalizeResult(res, e.outSchema, opts, mediaCaps{item: g.cfg.MaxMediaItemBytes, total: g.cfg.MaxMediaBytes}), nil
	}
	if us != nil && us.unauthorized.Get() {
		// The server refused the user's token (revoked at the provider, or the grant ended).
		c.dropUserSession(req.GetUserId())
		c.asw.stale.Store(true) // the server may have moved to another authorization server
		_, _ = g.conns.DeleteConnection(ctx, c.spec.Name, req.GetUserId())
		return g.connectPrompt(ctx, c, req.GetUserId()), nil
	}
	if us != nil {
		if scopes := us.stepUp.Get(); len(scopes) > 0 {
			// The token lacks a scope this call needs: the user consents to more (step-up).
			c.dropUserSession(req.GetUserId())
			return g.stepUpPrompt(ctx, c, req.GetUserId(), scopes), nil
		}
	}
	if ctx.Err() != nil {
		// The caller gave up; the server was told to cancel the request.
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return callFailure(cctx, c, e, l, timeout, err), nil
}

// callFailure is the result of a call to c's tool e that failed with err (the caller still
// waiting): a timeout, the server's rejection, or a connection that failed before or during it.
func callFailure(cctx context.Context, c *serverConn, e *toolEntry, l *live, timeout time.Duration, err error) *pb.CallToolResponse {
	if timedOut(cctx) {
		c.requestProbe()
		r := failed(codeTimeout, fmt.Sprintf("the MCP tool %s did not answer within %s; the call was cancelled on the server", e.name, timeout.Round(time.Millisecond)))
		r.MayHaveRun = true
		return r
	}
	var rpcErr *jsonrpc.Error
	// The SDK reports its HTTP transport's failures (a dropped connection included) as JSON-RPC
	// errors with the code codeTransportRejected: those are not the server's answer.
	if errors.As(err, &rpcErr) && rpcErr.Code != codeTransportRejected && !errors.Is(err, mcp.ErrConnectionClosed) && c.alive(l.sess) {
		r := failed(codeRejected, fmt.Sprintf("MCP server %q rejected the call: %s", c.spec.Name, abbreviate(rpcErr.Message, 2000)))
		// Invalid request, unknown method or tool, invalid arguments: refused before it ran.
		r.MayHaveRun = rpcErr.Code != jsonrpc.CodeInvalidParams && rpcErr.Code != jsonrpc.CodeMethodNotFound && rpcErr.Code != jsonrpc.CodeInvalidRequest
		return r
	}
	c.requestProbe()
	if notSent(err) {
		return failed(codeUnavailable, fmt.Sprintf("MCP server %q could not be reached (%s); the tool did not run; it is reconnected automatically, try again shortly", c.spec.Name, abbreviate(err.Error(), 500)))
	}
	r := failed(codeUnavailable, fmt.Sprintf("the connection to MCP server %q broke during the call (%s); the tool may have run", c.spec.Name, abbreviate(err.Error(), 500)))
	r.MayHaveRun = true
	return r
}

// codeTransportRejected is the code of the SDK's jsonrpc2.ErrRejected ("rejected by
// transport"), which wraps every failure of an HTTP request the SDK sends: a refused or dropped
// connection, a 429 or 5xx answer. Unless notSent says otherwise, the request may have reached
// the server before it failed.
const codeTransportRejected = -32005

// notSent reports whether a failed request certainly never reached the server: the HTTP
// server no longer knows the session (it answers 404 before reading the request), or it
// refused the connection. The SDK does not wrap the dial error, so that one is recognised by
// its text.
func notSent(err error) bool {
	return errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, syscall.ECONNREFUSED) || strings.Contains(err.Error(), "connection refused")
}

func failed(code, msg string) *pb.CallToolResponse {
	return &pb.CallToolResponse{Success: false, ErrorCode: code, Output: msg}
}
