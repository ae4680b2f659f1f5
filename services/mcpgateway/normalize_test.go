package mcpgateway

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/testing/protocmp"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

func TestNormalizeResult(t *testing.T) {
	size := int64(2048)
	out, err := compileSchema(`{"type":"object","required":["n"],"properties":{"n":{"type":"integer"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	opts := CleanOptions{MaxBytes: 1 << 10, CompactJSONOver: 16}
	tests := []struct {
		name string
		res  *mcp.CallToolResult
		want *pb.CallToolResponse
	}{
		{
			name: "text blocks joined and cleaned",
			res:  &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "one\u200b"}, &mcp.TextContent{Text: "two"}}},
			want: &pb.CallToolResponse{Success: true, Output: "one\ntwo"},
		},
		{
			name: "every kind of block described",
			res: &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "here"},
				&mcp.ImageContent{MIMEType: "image/png", Data: make([]byte, 10)},
				&mcp.AudioContent{MIMEType: "audio/wav", Data: make([]byte, 20)},
				&mcp.ResourceLink{URI: "file:///a.txt", Name: "a", MIMEType: "text/plain", Size: &size},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///b.html", MIMEType: "text/html", Text: "<p>hi</p>"}},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///c.bin", MIMEType: "application/octet-stream", Blob: make([]byte, 5)}},
			}},
			want: &pb.CallToolResponse{Success: true, Output: "here", Contents: []*pb.Content{
				{Type: "image", MimeType: "image/png", Size: 10},
				{Type: "audio", MimeType: "audio/wav", Size: 20},
				{Type: "resource_link", MimeType: "text/plain", Uri: "file:///a.txt", Size: 2048, Text: "a"},
				{Type: "resource", MimeType: "text/html", Uri: "file:///b.html", Size: 9, Text: "hi"},
				{Type: "resource", MimeType: "application/octet-stream", Uri: "file:///c.bin", Size: 5},
			}},
		},
		{
			name: "isError with the server's message",
			res:  &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "rate limited"}}},
			want: &pb.CallToolResponse{Output: "rate limited"},
		},
		{
			name: "isError without a message",
			res:  &mcp.CallToolResult{IsError: true},
			want: &pb.CallToolResponse{Output: "the tool reported an error without a message"},
		},
		{
			name: "structured content matching the schema",
			res:  &mcp.CallToolResult{StructuredContent: map[string]any{"n": 3}, Content: []mcp.Content{&mcp.TextContent{Text: `{"n": 3}`}}},
			want: &pb.CallToolResponse{Success: true, Structured: true, Output: `{"n":3}`},
		},
		{
			name: "structured content breaking the schema",
			res:  &mcp.CallToolResult{StructuredContent: map[string]any{"n": "three"}},
			want: &pb.CallToolResponse{ErrorCode: codeInvalidOutput},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := normalizeResult(tt.res, out, opts, mediaCaps{})
			if tt.want.ErrorCode == codeInvalidOutput {
				if got.Success || got.ErrorCode != codeInvalidOutput || got.Output == "" {
					t.Errorf("got %+v, want invalid_output with the violation", got)
				}
				return
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if got := describeContent(&pb.Content{Type: "image", MimeType: "image/png", Size: 10}); got != "[image: image/png, 10 bytes]" {
		t.Errorf("describeContent = %q", got)
	}
}

func TestObjectSchema(t *testing.T) {
	for _, tt := range []struct {
		in any
		ok bool
	}{
		{map[string]any{"type": "object", "properties": map[string]any{}}, true},
		{map[string]any{"type": "string"}, false},
		{map[string]any{"type": []any{"object", "null"}}, false},
		{map[string]any{"properties": map[string]any{}}, false},
		{true, false},
		{nil, false},
		{[]any{1}, false},
	} {
		if _, err := objectSchema(tt.in); (err == nil) != tt.ok {
			t.Errorf("objectSchema(%v) error = %v, want ok=%v", tt.in, err, tt.ok)
		}
	}
}

// TestIdempotentHintMakesToolIdempotent: an MCP tool that declares idempotentHint is registered
// as idempotent, so the tool service runs it once per idempotency key.
func TestIdempotentHintMakesToolIdempotent(t *testing.T) {
	c := newServerConn(New(testConfig(), Options{Logger: testLogger(t)}), httpSpec("s", "s", "http://127.0.0.1:1/mcp"))
	e := &toolEntry{name: "s_t", inputSchema: `{"type":"object"}`}
	for _, tc := range []struct {
		ann  *mcp.ToolAnnotations
		want bool
	}{{nil, false}, {&mcp.ToolAnnotations{}, false}, {&mcp.ToolAnnotations{IdempotentHint: true}, true}} {
		if got := c.toolSpec(e, &mcp.Tool{Name: "t", Annotations: tc.ann}).GetIdempotent(); got != tc.want {
			t.Errorf("annotations %+v: idempotent = %v, want %v", tc.ann, got, tc.want)
		}
	}
}
