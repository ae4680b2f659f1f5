package tools

import (
	"bytes"
	"context"
	"strings"
	"testing"

	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// TestMCPCutOutputNamesTrueSize replays issue 27: the gateway cut a 388,901-byte result to its
// 64 KiB cap, and ExecuteTool's preview said "first 15026 of 65535 bytes". The preview, the
// output_bytes and the limit now name the whole output and the cap that applied.
func TestMCPCutOutputNamesTrueSize(t *testing.T) {
	cut := strings.Repeat("x", 65535)
	g := &fakeGateway{script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
		return &mcpgatewayv1.CallToolResponse{Success: true, Truncated: true, Output: cut, OriginalBytes: 388901, LimitBytes: 65536}, nil
	}}
	gw := startGateway(t, g)
	c, _ := newClient(t, Options{MCP: func() (MCPCaller, error) { return gw, nil }})
	mustRegister(t, c, mcpSpec("github_list_issues"))

	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "github_list_issues", Arguments: `{"repo":"hermes"}`})
	if !res.GetSuccess() || !res.GetTruncated() || res.GetOutputBytes() != 388901 || res.GetOutputLimitBytes() != 16<<10 {
		t.Fatalf("success %v truncated %v output_bytes %d limit %d; want true true 388901 16384",
			res.GetSuccess(), res.GetTruncated(), res.GetOutputBytes(), res.GetOutputLimitBytes())
	}
	if !strings.Contains(res.GetOutput(), "of 388901 bytes;") || !strings.Contains(res.GetOutput(), "by the 16384-byte cap") {
		t.Errorf("the preview's note: …%s", res.GetOutput()[len(res.GetOutput())-160:])
	}

	// A caller that passes output on asks the gateway for it whole, up to its own limit; the
	// gateway's cut is then the one reported.
	res = execute(t, c, &toolsv1.ExecuteToolRequest{Name: "github_list_issues", Arguments: `{"repo":"hermes"}`, MaxOutputBytes: 1 << 20})
	g.mu.Lock()
	asked := g.requests[len(g.requests)-1].GetMaxOutputBytes()
	g.mu.Unlock()
	if asked != 1<<20 {
		t.Errorf("the gateway was asked for %d bytes, want 1048576", asked)
	}
	if res.GetOutputBytes() != 388901 || res.GetOutputLimitBytes() != 65536 {
		t.Errorf("output_bytes %d limit %d; want 388901 65536", res.GetOutputBytes(), res.GetOutputLimitBytes())
	}
}

// TestMCPMediaPassesThrough: the bytes of an image the gateway passed on reach the caller in
// media, and the output describes it for a model.
func TestMCPMediaPassesThrough(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nnot really")
	g := &fakeGateway{script: func(int64, context.Context, *mcpgatewayv1.CallToolRequest) (*mcpgatewayv1.CallToolResponse, error) {
		return &mcpgatewayv1.CallToolResponse{Success: true, Output: "a picture", Contents: []*mcpgatewayv1.Content{
			{Type: "image", MimeType: "image/png", Size: int64(len(png)), Data: png},
			{Type: "audio", MimeType: "audio/wav", Size: 9 << 20, Omitted: "over the cap"},
		}}, nil
	}}
	gw := startGateway(t, g)
	c, _ := newClient(t, Options{MCP: func() (MCPCaller, error) { return gw, nil }})
	mustRegister(t, c, mcpSpec("github_list_issues"))
	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "github_list_issues", Arguments: `{"repo":"hermes"}`})
	want := `"a picture\n[image image/png 18 bytes]\n[audio audio/wav 9437184 bytes; not passed on: over the cap]"`
	if !res.GetSuccess() || res.GetOutput() != want {
		t.Fatalf("output %s, want %s", res.GetOutput(), want)
	}
	m := res.GetMedia()
	if len(m) != 2 || !bytes.Equal(m[0].GetData(), png) || m[0].GetMimeType() != "image/png" || len(m[1].GetData()) != 0 || m[1].GetOmitted() == "" {
		t.Errorf("media %v", m)
	}
}
