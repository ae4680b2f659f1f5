package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
)

// connectMCP connects an MCP client (the Go SDK's) to Hermes' MCP endpoint.
func connectMCP(t *testing.T, h *hermes) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).
		Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.mcpURL}, nil)
	if err != nil {
		t.Fatalf("connecting to %s: %v", h.mcpURL, err)
	}
	t.Cleanup(func() { _ = sess.Close() })
	return sess
}

// TestImagePassesThrough is issue 27's check: an image from the reference everything server
// reaches an MCP client of Hermes as an image, with the bytes the server sent (compared with a
// direct call of the same server), not as a "[image image/png 4033 bytes]" placeholder.
func TestImagePassesThrough(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	script := mcpgatewaytest.NodeScript(t, "@modelcontextprotocol/server-everything/dist/index.js")
	direct, err := mcp.NewClient(&mcp.Implementation{Name: "direct", Version: "1"}, nil).
		Connect(ctx, &mcp.CommandTransport{Command: exec.Command(mcpgatewaytest.Node(t), script, "stdio")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	want, err := direct.CallTool(ctx, &mcp.CallToolParams{Name: "get-tiny-image", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	wantImg := imageOf(want)
	if wantImg == nil {
		t.Fatalf("the everything server's get-tiny-image has no image: %+v", want.Content)
	}

	h := startHermes(t, t.TempDir())
	spec := everything(t, "everything")
	spec.Prefix = "ev"
	h.addReady(t, spec)
	got, err := connectMCP(t, h).CallTool(ctx, &mcp.CallToolParams{Name: "ev_get-tiny-image", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	img := imageOf(got)
	if got.IsError || img == nil {
		t.Fatalf("ev_get-tiny-image through Hermes: %s", dump(got))
	}
	if img.MIMEType != wantImg.MIMEType || !bytes.Equal(img.Data, wantImg.Data) {
		t.Errorf("image through Hermes: %s, %d bytes; direct: %s, %d bytes (identical: %v)",
			img.MIMEType, len(img.Data), wantImg.MIMEType, len(wantImg.Data), bytes.Equal(img.Data, wantImg.Data))
	}
	for _, c := range got.Content {
		if tc, ok := c.(*mcp.TextContent); ok && strings.Contains(tc.Text, "[image ") {
			t.Errorf("the image is described in the text as well: %q", tc.Text)
		}
	}
	// A model still gets the text form.
	r := h.execute(t, "ev_get-tiny-image", `{}`)
	if !r.GetSuccess() || !strings.Contains(r.GetOutput(), fmt.Sprintf("[image image/png %d bytes]", len(wantImg.Data))) || len(r.GetMedia()) != 1 {
		t.Errorf("ExecuteTool: output %q, %d media", r.GetOutput(), len(r.GetMedia()))
	}
}

// TestMediaOverCap: an image over the per-block cap reaches the MCP client as the text that
// says the cap and the true size.
func TestMediaOverCap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	h := startHermes(t, t.TempDir(), "--mcpgateway.max-media-item-bytes=100")
	spec := everything(t, "everything")
	spec.Prefix = "ev"
	h.addReady(t, spec)
	got, err := connectMCP(t, h).CallTool(ctx, &mcp.CallToolParams{Name: "ev_get-tiny-image", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if imageOf(got) != nil || !strings.Contains(dump(got), "over the 100-byte cap on one media block") {
		t.Errorf("an image over the cap: %s", dump(got))
	}
}

// TestLargeStructuredResult replays issue 27: a structured result over the gateway's 64 KiB
// text cap became an isError result quoting the endpoint's 1 MiB limit, and ExecuteTool said
// "first 15026 of 65535 bytes" for an original of 388,901. Now an MCP client gets the whole
// result up to the endpoint's limit (here 400,000 bytes), a larger one is refused naming that
// limit and the true size, and a model's preview names the true size.
func TestLargeStructuredResult(t *testing.T) {
	srv := mcp.NewServer(&mcp.Implementation{Name: "big", Version: "1"}, nil)
	srv.AddTool(&mcp.Tool{Name: "rows", Description: "n rows", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}}}`),
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"rows":{"type":"array"}}}`)},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args struct{ N int }
			_ = json.Unmarshal(req.Params.Arguments, &args)
			raw := rowsJSON(args.N)
			return &mcp.CallToolResult{StructuredContent: json.RawMessage(raw), Content: []mcp.Content{&mcp.TextContent{Text: raw}}}, nil
		})
	ts := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	defer ts.Close()

	// The endpoint's limit lowered from 1 MiB, so the test moves less data.
	h := startHermes(t, t.TempDir(), "--mcpgateway.mcp-max-result-bytes=400000")
	h.addReady(t, &pb.ServerSpec{Name: "big", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: ts.URL}}})
	sess := connectMCP(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	const n = 4861 // 388,895 bytes
	size := len(rowsJSON(n))
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "big_rows", Arguments: map[string]any{"n": n}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || res.StructuredContent == nil {
		t.Fatalf("a %d-byte structured result through the endpoint: %s", size, abbreviate(dump(res), 600))
	}
	if b, _ := json.Marshal(res.StructuredContent); len(b) != size {
		t.Errorf("structured content of %d bytes, want %d", len(b), size)
	}

	const huge = 6000 // 480,000 bytes, over the endpoint's limit
	hugeSize := len(rowsJSON(huge))
	res, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "big_rows", Arguments: map[string]any{"n": huge}})
	if err != nil {
		t.Fatal(err)
	}
	if msg := dump(res); !res.IsError || !strings.Contains(msg, fmt.Sprintf("output (%d bytes)", hugeSize)) || !strings.Contains(msg, "400000 bytes this MCP endpoint passes on") {
		t.Errorf("a %d-byte structured result: %s", hugeSize, abbreviate(msg, 600))
	}

	r := h.execute(t, "big_rows", fmt.Sprintf(`{"n": %d}`, n))
	if !r.GetTruncated() || r.GetOutputBytes() != int64(size) || r.GetOutputLimitBytes() != 16<<10 {
		t.Errorf("ExecuteTool: truncated %v, output_bytes %d (want %d), limit %d", r.GetTruncated(), r.GetOutputBytes(), size, r.GetOutputLimitBytes())
	}
	if !strings.Contains(r.GetOutput(), fmt.Sprintf(" of %d bytes;", size)) {
		t.Errorf("the preview's note does not name the original size %d: …%s", size, tail(r.GetOutput(), 200))
	}
}

func rowsJSON(n int) string {
	var b strings.Builder
	b.WriteString(`{"rows":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"i":%d,"text":"row %06d of the report, with some padding to make it long"}`, i, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

func imageOf(r *mcp.CallToolResult) *mcp.ImageContent {
	for _, c := range r.Content {
		if img, ok := c.(*mcp.ImageContent); ok {
			return img
		}
	}
	return nil
}

func dump(r *mcp.CallToolResult) string {
	b, _ := json.Marshal(r)
	return string(b)
}

func abbreviate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
