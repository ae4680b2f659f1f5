package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/toolmedia"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// MCPCaller is the part of the MCP gateway's client the mcp executor needs.
type MCPCaller interface {
	CallTool(ctx context.Context, in *mcpgatewayv1.CallToolRequest, opts ...grpc.CallOption) (*mcpgatewayv1.CallToolResponse, error)
	CallToolStream(ctx context.Context, in *mcpgatewayv1.CallToolStreamRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[mcpgatewayv1.CallToolStreamResponse], error)
}

// LocalMCP is an MCPCaller for a gateway in the same process: CallTool is call (the gateway's
// handler called directly, rpc.LocalUnary: authorized, recovered and classified as on the
// in-process channel, without its stats handler and message copies), CallToolStream goes
// through streams (the in-process channel). Call options are ignored: the executor passes none.
func LocalMCP(call func(context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error), streams MCPCaller) MCPCaller {
	return localMCP{call: call, MCPCaller: streams}
}

type localMCP struct {
	MCPCaller
	call func(context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error)
}

func (l localMCP) CallTool(ctx context.Context, in *mcpgatewayv1.CallToolRequest, _ ...grpc.CallOption) (*mcpgatewayv1.CallToolResponse, error) {
	return l.call(ctx, in)
}

// mcpExecutor runs a tool that lives on an MCP server through MCPGatewayService.CallTool. The
// gateway client is obtained on first use, so the tool service starts without the gateway and
// its tools answer "unavailable" until it is reachable.
type mcpExecutor struct {
	connect func() (MCPCaller, error)
}

func (x *mcpExecutor) attempt(ctx context.Context, c *call) ([]byte, error) {
	m := c.tool.GetSpec().GetMcp()
	if x.connect == nil {
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, msg: "no MCP gateway is configured for the tool service"}
	}
	client, err := x.connect()
	if err != nil {
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, msg: "the MCP gateway is not reachable: " + err.Error()}
	}
	// The user travels with the call: a server with per-user OAuth is called with that user's
	// own connection only.
	// A caller that answers sampling (Hermes' MCP endpoint for a client with the capability)
	// is asked through the stream's progress events, so only a streamed call says so.
	req := &mcpgatewayv1.CallToolRequest{Server: m.GetServer(), Tool: m.GetTool(), Arguments: string(c.args), UserId: c.req.GetUserId(),
		AnswersSampling: c.req.GetAnswersSampling() && progressFrom(ctx) != nil}
	if c.req.GetMaxOutputBytes() > 0 {
		// A caller that passes output on (Hermes' MCP endpoint) gets it whole up to its limit,
		// not cut to the gateway's cap for text a model reads.
		req.MaxOutputBytes = int32(min(c.outputLimit, math.MaxInt32))
	}
	if c.deadline != nil {
		req.Timeout = durationpb.New(max(c.deadline.until(), time.Millisecond))
	} else if dl, ok := ctx.Deadline(); ok {
		req.Timeout = durationpb.New(max(time.Until(dl), time.Millisecond))
	}
	resp, err := callGateway(ctx, client, req, c.deadline)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, mcpStatusError(err)
	}
	if resp.GetSuccess() {
		out, cut := mcpOutput(resp)
		c.outputCut = cut
		if cut {
			c.originalBytes, c.cutAt = int(resp.GetOriginalBytes()), int(resp.GetLimitBytes())
		}
		c.media = mcpMedia(resp.GetContents())
		return out, nil
	}
	// A call that may have run is retried only when running it twice is harmless: the tool is
	// read-only or declared idempotent.
	ran := resp.GetMayHaveRun()
	retrySafe := !ran || retrySafe(c.tool.GetSpec())
	switch resp.GetErrorCode() {
	case "unavailable":
		msg := fmt.Sprintf("the MCP server %q is unavailable%s", m.GetServer(), suffix(resp.GetOutput()))
		if ran && !retrySafe {
			msg += "; it was not retried because the tool may have acted: check its effect before calling it again"
		}
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, transient: retrySafe, mayHaveRun: ran, msg: msg}
	case "timeout":
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_TIMEOUT, mayHaveRun: true, msg: fmt.Sprintf("the MCP server %q did not answer in time%s", m.GetServer(), suffix(resp.GetOutput()))}
	case "unknown_tool":
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, msg: fmt.Sprintf("the MCP server %q no longer offers the tool %q", m.GetServer(), m.GetTool())}
	case "authorization_required":
		// The message names the link for a model to relay; the URL travels apart for callers
		// that show it to the user themselves (URL-mode elicitation).
		msg := strings.TrimSpace(resp.GetOutput())
		if msg == "" {
			msg = fmt.Sprintf("the MCP server %q needs the user to connect their account: %s", m.GetServer(), resp.GetAuthorizationUrl())
		}
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: msg, authorizationURL: resp.GetAuthorizationUrl()}
	case "invalid_output":
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: "the MCP tool returned output that does not match its output schema" + suffix(resp.GetOutput())}
	default:
		msg := strings.TrimSpace(resp.GetOutput())
		if msg == "" {
			msg = "the MCP tool reported an error without a message"
		}
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, mayHaveRun: ran, msg: msg}
	}
}

// retrySafe reports whether calling a tool again after an attempt that may have acted is
// harmless: the tool is declared idempotent, or its annotations say it is read-only or
// idempotent.
func retrySafe(spec *toolsv1.ToolSpec) bool {
	a := spec.GetAnnotations()
	return spec.GetIdempotent() || a.GetReadOnlyHint() || a.GetIdempotentHint()
}

// callGateway calls the tool through the gateway: streaming when someone listens for progress,
// unary otherwise (one round trip less).
// A request for user input pushes the call's deadline back by the time the person has to
// answer, as the gateway stops the call's clock while it waits.
func callGateway(ctx context.Context, client MCPCaller, req *mcpgatewayv1.CallToolRequest, dl *callDeadline) (*mcpgatewayv1.CallToolResponse, error) {
	progress := progressFrom(ctx)
	if progress == nil {
		return client.CallTool(ctx, req)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := client.CallToolStream(ctx, &mcpgatewayv1.CallToolStreamRequest{Request: req})
	if err != nil {
		return nil, err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil, errclass.New(errclass.Unavailable, "the MCP gateway ended the call without a result", nil)
			}
			return nil, err
		}
		if p := ev.GetProgress(); p != nil {
			tp := &toolsv1.ToolProgress{Progress: p.GetProgress(), Total: p.GetTotal(), Message: p.GetMessage()}
			if e := p.GetElicitation(); e != nil {
				if exp := e.GetExpiresAt(); exp != nil {
					dl.pushBack(min(time.Until(exp.AsTime()), maxElicitHold))
				}
				tp.Elicitation = &toolsv1.Elicitation{Id: e.GetId(), Server: e.GetServer(), Message: e.GetMessage(), RequestedSchema: e.GetRequestedSchema(), Url: e.GetUrl(), ExpiresAt: e.GetExpiresAt()}
			}
			if sm := p.GetSampling(); sm != nil {
				// The gateway's clock stands still while the caller's model answers, as for a
				// person's answer.
				if exp := sm.GetExpiresAt(); exp != nil {
					dl.pushBack(min(time.Until(exp.AsTime()), maxElicitHold))
				}
				tp.Sampling = toolSampling(sm)
			}
			progress(tp)
		}
		if r := ev.GetResponse(); r != nil {
			return r, nil
		}
	}
}

// toolSampling is a gateway's sampling request as the tool service passes it on.
func toolSampling(s *mcpgatewayv1.Sampling) *toolsv1.Sampling {
	out := &toolsv1.Sampling{Id: s.GetId(), Server: s.GetServer(), SystemPrompt: s.GetSystemPrompt(), MaxTokens: s.GetMaxTokens(),
		Temperature: s.Temperature, StopSequences: s.GetStopSequences(), ExpiresAt: s.GetExpiresAt()}
	for _, m := range s.GetMessages() {
		out.Messages = append(out.Messages, &toolsv1.SamplingMessage{Role: m.GetRole(), Text: m.GetText()})
	}
	return out
}

// maxElicitHold bounds how far one request for user input pushes a call's deadline back,
// whatever expiry the gateway states.
const maxElicitHold = 15 * time.Minute

func suffix(s string) string {
	if s = strings.TrimSpace(s); s != "" {
		return ": " + truncateRunes(s, 500)
	}
	return ""
}

// mcpStatusError classifies a failed CallTool RPC.
func mcpStatusError(err error) error {
	st := status.Convert(err)
	switch rpc.ClassOf(err) {
	case errclass.Unavailable:
		return &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, transient: true, msg: "the MCP gateway is unavailable: " + st.Message()}
	case context.DeadlineExceeded:
		return &execError{code: toolsv1.ErrorCode_ERROR_CODE_TIMEOUT, mayHaveRun: true, msg: "the MCP gateway did not answer in time"}
	case errclass.NotFound, errclass.Precondition: // UNIMPLEMENTED reads as Precondition
		return &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, msg: "the MCP gateway cannot run the tool: " + st.Message()}
	default:
		return &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: fmt.Sprintf("the MCP gateway failed the call (%s): %s", st.Code(), st.Message())}
	}
}

// mcpOutput turns a normalized result into output JSON: structured content as is; text that is
// a JSON object or array as that JSON (so the model reads it once, not escaped inside a
// string); other text as a JSON string, with non-text content described after it. cut reports
// that the gateway cut the output to its size cap (a preview, which an output schema cannot
// describe).
func mcpOutput(resp *mcpgatewayv1.CallToolResponse) (out []byte, cut bool) {
	// json.Compact checks the JSON as json.Valid does: one pass, straight into the output.
	if resp.GetStructured() {
		if b, err := compactJSONBytes(resp.GetOutput()); err == nil {
			return b, false
		}
	}
	text := resp.GetOutput()
	if len(resp.GetContents()) == 0 && !resp.GetTruncated() {
		if t := strings.TrimSpace(text); len(t) > 1 && (t[0] == '{' || t[0] == '[') {
			if b, err := compactJSONBytes(t); err == nil {
				return b, false
			}
		}
	}
	for _, c := range resp.GetContents() {
		if text != "" {
			text += "\n"
		}
		text += toolmedia.Describe(c.GetType(), c.GetMimeType(), c.GetUri(), c.GetText(), c.GetSize(), c.GetOmitted())
	}
	b, _ := json.Marshal(text)
	return b, resp.GetTruncated()
}

// mcpMedia is the gateway's description of a result's non-text blocks as ToolResult.media.
func mcpMedia(contents []*mcpgatewayv1.Content) []*toolsv1.Media {
	var out []*toolsv1.Media
	for _, c := range contents {
		out = append(out, &toolsv1.Media{Type: c.GetType(), MimeType: c.GetMimeType(), Uri: c.GetUri(), Data: c.GetData(),
			Text: c.GetText(), Size: c.GetSize(), Omitted: c.GetOmitted()})
	}
	return out
}
