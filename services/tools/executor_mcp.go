package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// MCPCaller is the part of the MCP gateway's client the mcp executor needs.
type MCPCaller interface {
	CallTool(ctx context.Context, in *mcpgatewayv1.CallToolRequest, opts ...grpc.CallOption) (*mcpgatewayv1.CallToolResponse, error)
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
	req := &mcpgatewayv1.CallToolRequest{Server: m.GetServer(), Tool: m.GetTool(), Arguments: string(c.args)}
	if dl, ok := ctx.Deadline(); ok {
		req.Timeout = durationpb.New(max(time.Until(dl), time.Millisecond))
	}
	resp, err := client.CallTool(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, mcpStatusError(err)
	}
	if resp.GetSuccess() {
		return mcpOutput(resp), nil
	}
	switch resp.GetErrorCode() {
	case "unavailable":
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, transient: true, msg: fmt.Sprintf("the MCP server %q is unavailable%s", m.GetServer(), suffix(resp.GetOutput()))}
	case "timeout":
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_TIMEOUT, mayHaveRun: true, msg: fmt.Sprintf("the MCP server %q did not answer in time%s", m.GetServer(), suffix(resp.GetOutput()))}
	case "unknown_tool":
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, msg: fmt.Sprintf("the MCP server %q no longer offers the tool %q", m.GetServer(), m.GetTool())}
	case "invalid_output":
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: "the MCP tool returned output that does not match its output schema" + suffix(resp.GetOutput())}
	default:
		msg := strings.TrimSpace(resp.GetOutput())
		if msg == "" {
			msg = "the MCP tool reported an error without a message"
		}
		return nil, &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: msg}
	}
}

func suffix(s string) string {
	if s = strings.TrimSpace(s); s != "" {
		return ": " + truncateRunes(s, 500)
	}
	return ""
}

// mcpStatusError classifies a failed CallTool RPC.
func mcpStatusError(err error) error {
	st := status.Convert(err)
	switch st.Code() {
	case codes.Unavailable:
		return &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, transient: true, msg: "the MCP gateway is unavailable: " + st.Message()}
	case codes.DeadlineExceeded:
		return &execError{code: toolsv1.ErrorCode_ERROR_CODE_TIMEOUT, mayHaveRun: true, msg: "the MCP gateway did not answer in time"}
	case codes.NotFound, codes.FailedPrecondition, codes.Unimplemented:
		return &execError{code: toolsv1.ErrorCode_ERROR_CODE_UNAVAILABLE, msg: "the MCP gateway cannot run the tool: " + st.Message()}
	default:
		return &execError{code: toolsv1.ErrorCode_ERROR_CODE_EXECUTION, msg: fmt.Sprintf("the MCP gateway failed the call (%s): %s", st.Code(), st.Message())}
	}
}

// mcpOutput turns a normalized result into output JSON: structured content as is, text as a
// JSON string, with non-text content described after the text.
func mcpOutput(resp *mcpgatewayv1.CallToolResponse) []byte {
	if resp.GetStructured() && json.Valid([]byte(resp.GetOutput())) {
		if b, err := compactJSON(resp.GetOutput()); err == nil {
			return []byte(b)
		}
	}
	text := resp.GetOutput()
	for _, c := range resp.GetContents() {
		var d []string
		d = append(d, c.GetType())
		if c.GetMimeType() != "" {
			d = append(d, c.GetMimeType())
		}
		if c.GetUri() != "" {
			d = append(d, c.GetUri())
		}
		if c.GetSize() > 0 {
			d = append(d, fmt.Sprintf("%d bytes", c.GetSize()))
		}
		line := "[" + strings.Join(d, " ") + "]"
		if c.GetText() != "" {
			line += " " + c.GetText()
		}
		if text != "" {
			text += "\n"
		}
		text += line
	}
	b, _ := json.Marshal(text)
	return b
}
