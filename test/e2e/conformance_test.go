package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hermes-agent/hermes/internal/testenv"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
)

// TestConformance runs the official MCP conformance suite (server mode, the active scenarios
// and the pending ones) against Hermes' Streamable HTTP endpoint, with the suite's fixture
// tools registered from testdata/conformance/tools.yaml (webhook tools whose endpoint is the
// fixture server below) and its resources and prompts served from
// testdata/conformance/catalog.yaml; the sampling scenario's tool test_sampling is the tool
// sampling of the MCP server "test" (conformanceSamplingServer) behind Hermes' gateway, which
// passes its sampling request to the suite's client. The suite compares its results with
// testdata/conformance/baseline.yml and exits non-zero on a failure that is not listed there
// and on a listed one that now passes, so the baseline (and CONFORMANCE.md) stays the true
// record of what passes.
func TestConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite takes a minute; skipped with -short")
	}
	dir := mcpgatewaytest.NPMDir(t)
	h := startConformanceHermes(t)
	baseline, err := filepath.Abs("testdata/conformance/baseline.yml")
	if err != nil {
		t.Fatal(err)
	}
	for _, suite := range []string{"active", "pending"} {
		t.Run(suite, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, mcpgatewaytest.ConformanceNode(t), filepath.Join(dir, "node_modules/@modelcontextprotocol/conformance/dist/index.js"),
				"server", "--url", h.mcpURL, "--suite", suite, "--expected-failures", baseline, "-o", t.TempDir())
			out, err := cmd.CombinedOutput()
			summary := regexp.MustCompile(`(?m)^[✓✗] .*$|^Total: .*$`).FindAllString(string(out), -1)
			t.Logf("conformance summary (%s):\n%s", suite, strings.Join(summary, "\n"))
			if err != nil {
				t.Fatalf("conformance suite: %v\n%s", err, out)
			}
			if !strings.Contains(string(out), "Baseline check passed") {
				t.Fatalf("the suite did not confirm the baseline:\n%s", out)
			}
		})
	}
}

// startConformanceHermes starts a whole Hermes process serving the suite's fixtures.
func startConformanceHermes(t *testing.T) *hermes {
	t.Helper()
	fixtures := httptest.NewServer(conformanceFixtures())
	t.Cleanup(fixtures.Close)
	tmpl, err := os.ReadFile("testdata/conformance/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	toolsFile := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(toolsFile, []byte(strings.ReplaceAll(string(tmpl), "{{FIXTURES}}", fixtures.URL)), 0o600); err != nil {
		t.Fatal(err)
	}
	catalog, err := filepath.Abs("testdata/conformance/catalog.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The sampling fixture is an MCP server behind the gateway, configured as an operator would:
	// its sampling requests go to the MCP client that called the tool (askCaller), never to a
	// model of Hermes' (allow is off, and the test's Hermes has none).
	servers := filepath.Join(t.TempDir(), "servers.json")
	cfg := fmt.Sprintf(`{"mcpServers": {"test": {"url": %q, "sampling": {"askCaller": true}}}}`, conformanceSamplingServer(t))
	if err := os.WriteFile(servers, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	h := startHermes(t, t.TempDir(), "--tools-file="+toolsFile, "--mcp-catalog="+catalog, "--mcpgateway.mcp-progress-interval=50ms", "--mcp-servers="+servers)
	testenv.WaitFor(t, 30*time.Second, "the gateway to register test_sampling", func() bool {
		_, err := h.tools.GetTool(context.Background(), &toolsv1.GetToolRequest{Name: "test_sampling"})
		return err == nil
	})
	return h
}

// conformanceSamplingServer serves the MCP server "test" of the sampling scenario over
// Streamable HTTP and returns its URL: its tool sampling asks the client's model for a
// completion of the prompt it is given (sampling/createMessage) and returns the completion,
// as the suite's reference server does.
func conformanceSamplingServer(t *testing.T) string {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: "conformance-sampling", Version: "1"}, nil)
	type args struct {
		Prompt string `json:"prompt" jsonschema:"the prompt to send to the model"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "sampling", Description: "Asks the MCP client's model to complete the prompt (MCP sampling) and returns the completion."},
		func(ctx context.Context, req *mcp.CallToolRequest, a args) (*mcp.CallToolResult, any, error) {
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 100,
				Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: a.Prompt}}}})
			if err != nil {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "sampling failed: " + err.Error()}}}, nil, nil
			}
			text, ok := res.Content.(*mcp.TextContent)
			if !ok {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "sampling answered without text"}}}, nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "LLM response: " + text.Text}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)
	return hs.URL
}

// Fixture content of the suite's tools.
const (
	pngBase64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	wavBase64 = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAEAfAAABAAgAZGF0YQAAAAA="
)

// conformanceFixtures is the webhook endpoint of the fixture tools: a webhook tool's output is
// its response body, and the image, audio and resource tools (labelled mcp.output=content)
// answer with an MCP tool result.
func conformanceFixtures() http.Handler {
	mux := http.NewServeMux()
	text := func(s string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, s)
		}
	}
	content := func(blocks string) http.HandlerFunc {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"content":[%s]}`, blocks)
		}
	}
	image := fmt.Sprintf(`{"type":"image","data":%q,"mimeType":"image/png"}`, pngBase64)
	mux.Handle("POST /test_simple_text", text("This is a simple text response for testing."))
	mux.Handle("POST /test_image_content", content(image))
	mux.Handle("POST /test_audio_content", content(fmt.Sprintf(`{"type":"audio","data":%q,"mimeType":"audio/wav"}`, wavBase64)))
	mux.Handle("POST /test_embedded_resource", content(`{"type":"resource","resource":{"uri":"test://embedded-resource","mimeType":"text/plain","text":"This is an embedded resource content."}}`))
	mux.Handle("POST /test_multiple_content_types", content(`{"type":"text","text":"Multiple content types test:"},`+image+
		`,{"type":"resource","resource":{"uri":"test://mixed-content-resource","mimeType":"application/json","text":"{\"test\":\"data\",\"value\":123}"}}`))
	mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		// Long enough for the endpoint's progress and log reports (every 50 ms in the test)
		// to be sent while the tool runs, even on a loaded machine.
		select {
		case <-time.After(time.Second):
		case <-r.Context().Done():
			return
		}
		text("Tool executed successfully.")(w, r)
	})
	mux.HandleFunc("POST /test_error_handling", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "This tool intentionally returns an error for testing", http.StatusBadRequest)
	})
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		args, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		text("Completed with arguments "+string(args))(w, r)
	})
	return mux
}
