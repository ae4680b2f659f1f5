package mcpgateway

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"
)

// A stdio server's tools/call goes on the side channel, not through the SDK's ClientSession:
// the SDK decodes each response four times over (the frame, the message, the result, its
// content), each time with a fresh 32 KiB buffer, and passes it through two goroutines before
// the caller has it. On the side channel the line filter hands the response line to the waiting
// caller, which decodes it once. Measured with BenchmarkStdioInterleaved (bench/README.md).
//
// Sessions on protocol 2026-07-28 or later stay on the SDK, whose multi-round-trip middleware
// answers a result's input requests; their progress, elicitation and sampling requests reach
// the gateway's handlers either way, since only responses to the side channel's ids are taken.

// toolCallParams is tools/call's params as the side channel sends them.
type toolCallParams struct {
	Meta      map[string]any  `json:"_meta,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// sideToolCaller is a side channel that can send a plain tools/call.
type sideToolCaller interface {
	callTool(ctx context.Context, sess *mcp.ClientSession, name string, args json.RawMessage, token string) (*mcp.CallToolResult, error)
}

// callTool sends tools/call and decodes its result. A call the caller gives up on is cancelled
// on the server.
func (s *stdioSide) callTool(ctx context.Context, sess *mcp.ClientSession, name string, args json.RawMessage, token string) (*mcp.CallToolResult, error) {
	params := toolCallParams{Name: name, Arguments: args}
	if token != "" {
		params.Meta = map[string]any{"progressToken": token}
	}
	raw, err := s.request(ctx, sess, "tools/call", params, true)
	if err != nil {
		return nil, err
	}
	return decodeCallResult(raw)
}

// decodeCallResult decodes a tools/call result as the SDK does (field names match exactly,
// nesting is bounded), without the SDK's decoder for the common result of text blocks only;
// a result with other blocks goes through the SDK's own decoding of them.
func decodeCallResult(raw json.RawMessage) (*mcp.CallToolResult, error) {
	if err := checkJSONDepth(raw, maxResultDepth); err != nil {
		return nil, fmt.Errorf("calling %q: %w", "tools/call", err)
	}
	var w wireTextResult
	if _, err := segjson.Parse(raw, &w, segjson.DontMatchCaseInsensitiveStructFields); err == nil && w.textOnly() {
		res := &mcp.CallToolResult{Meta: w.Meta, StructuredContent: w.StructuredContent, IsError: w.IsError}
		res.Content = make([]mcp.Content, len(w.Content)) // never nil, as from the SDK
		for i, c := range w.Content {
			res.Content[i] = &mcp.TextContent{Text: c.Text, Meta: c.Meta, Annotations: c.Annotations}
		}
		return res, nil
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("calling %q: the result is not a tool result: %w", "tools/call", err)
	}
	return &res, nil
}

// wireTextResult is a CallToolResult as it is on the wire, as far as a result of text blocks
// has fields (see textOnly).
type wireTextResult struct {
	Meta              mcp.Meta   `json:"_meta,omitempty"`
	Content           []wireText `json:"content"`
	StructuredContent any        `json:"structuredContent,omitempty"`
	IsError           bool       `json:"isError,omitempty"`
}

type wireText struct {
	Type        string           `json:"type"`
	Text        string           `json:"text"`
	Meta        mcp.Meta         `json:"_meta,omitempty"`
	Annotations *mcp.Annotations `json:"annotations,omitempty"`
}

// textOnly reports whether every block is text, so that nothing of the result was dropped.
func (w *wireTextResult) textOnly() bool {
	for _, c := range w.Content {
		if c.Type != "text" {
			return false
		}
	}
	return true
}

// maxResultDepth bounds the nesting of a result, as the SDK's decoder does.
const maxResultDepth = 1000

// checkJSONDepth reports JSON nested deeper than limit (which would only cost stack to decode).
func checkJSONDepth(data []byte, limit int) error {
	depth := 0
	inString, escaped := false, false
	for _, b := range data {
		switch {
		case inString && escaped:
			escaped = false
		case inString && b == '\\':
			escaped = true
		case inString:
			inString = b != '"'
		case b == '"':
			inString = true
		case b == '{' || b == '[':
			if depth++; depth > limit {
				return fmt.Errorf("the result is nested deeper than %d levels", limit)
			}
		case b == '}' || b == ']':
			depth = max(depth-1, 0)
		}
	}
	return nil
}

// sideToolCall returns the side channel that carries l's plain tools/call, or nil when the SDK
// carries it.
func sideToolCall(l *live) sideToolCaller {
	s, ok := l.side.(sideToolCaller)
	if !ok || statelessProtocol(l.sess) {
		return nil
	}
	return s
}
