package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/testenv"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
)

// sseEvent is one server-sent event as a client reads it.
type sseEvent struct {
	id, data, retry string
}

// readEvent reads the next SSE event; io.EOF at the end of the stream.
func readEvent(r *bufio.Reader) (sseEvent, error) {
	var e sseEvent
	seen := false
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return e, err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			if seen {
				return e, nil
			}
			continue
		}
		seen = true
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimPrefix(v, " ")
		switch k {
		case "id":
			e.id = v
		case "data":
			e.data += v
		case "retry":
			e.retry = v
		}
	}
}

// mcpHTTP is a raw Streamable HTTP client, for what the SDK clients do not let a test control:
// cutting a stream, resuming it, sending headers.
type mcpHTTP struct {
	t       *testing.T
	url     string
	session string
}

func (c *mcpHTTP) post(body string, header map[string]string) *http.Response {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.url, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if c.session != "" {
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	return resp
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`

// initialize opens a session.
func (c *mcpHTTP) initialize() {
	c.t.Helper()
	resp := c.post(initializeBody, nil)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		c.t.Fatalf("initialize: HTTP %d %s", resp.StatusCode, b)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	c.session = resp.Header.Get("Mcp-Session-Id")
	if c.session == "" {
		c.t.Fatal("no Mcp-Session-Id")
	}
	r := c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`, nil)
	r.Body.Close()
	if r.StatusCode != http.StatusAccepted {
		c.t.Fatalf("notifications/initialized: HTTP %d", r.StatusCode)
	}
}

// TestStreamResumption: a client whose SSE stream breaks in the middle of a tool call resumes
// it with Last-Event-ID and receives every message the server sent meanwhile, once and in
// order: the progress notifications and the result.
func TestStreamResumption(t *testing.T) {
	release := make(chan struct{})
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
			fmt.Fprint(w, "released")
		case <-r.Context().Done():
		}
	}))
	defer hook.Close()
	h := startHermes(t, t.TempDir(), "--mcpgateway.mcp-progress-interval=20ms", "--mcpgateway.mcp-sse-retry=1500ms")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := h.tools.RegisterTool(ctx, &toolsv1.RegisterToolRequest{Spec: &toolsv1.ToolSpec{
		Name: "blocker", Description: "waits to be released", InputSchema: `{"type":"object"}`,
		Timeout: durationpb.New(time.Minute), MaxRetries: new(int32(0)),
		Executor: &toolsv1.ToolSpec_Http{Http: &toolsv1.HTTPExecutor{Url: hook.URL}},
	}}); err != nil {
		t.Fatal(err)
	}
	c := &mcpHTTP{t: t, url: h.mcpURL}
	c.initialize()

	resp := c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"blocker","arguments":{},"_meta":{"progressToken":"p"}}}`, nil)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("tools/call: HTTP %d %s", resp.StatusCode, ct)
	}
	r := bufio.NewReader(resp.Body)
	prime, err := readEvent(r)
	if err != nil {
		t.Fatal(err)
	}
	if prime.id == "" || prime.data != "" || prime.retry != "1500" {
		t.Fatalf("first event %+v, want a priming event (id, empty data) with retry 1500", prime)
	}
	var events []sseEvent
	for len(events) < 3 {
		e, err := readEvent(r)
		if err != nil {
			t.Fatalf("reading progress before the cut: %v", err)
		}
		events = append(events, e)
	}
	// The stream breaks; the tool finishes while no client is connected.
	resp.Body.Close()
	close(release)

	last := events[len(events)-1].id
	// The server notices the cut stream a moment after the client: until then it answers a
	// resume with 409 (the stream is still open on its side), and a client tries again.
	var resumed *http.Response
	testenv.Poll(time.Minute, func() bool {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.mcpURL, nil)
		req.Header.Set("Accept", "text/event-stream")
		req.Header.Set("Mcp-Session-Id", c.session)
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		req.Header.Set("Last-Event-ID", last)
		var err error
		if resumed, err = http.DefaultClient.Do(req); err != nil {
			t.Fatal(err)
		}
		if resumed.StatusCode != http.StatusConflict || ctx.Err() != nil {
			return true
		}
		resumed.Body.Close()
		return false
	})
	defer resumed.Body.Close()
	if resumed.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resumed.Body)
		t.Fatalf("resume: HTTP %d %s", resumed.StatusCode, b)
	}
	r = bufio.NewReader(resumed.Body)
	var result json.RawMessage
	for result == nil {
		e, err := readEvent(r)
		if err != nil {
			t.Fatalf("reading the resumed stream: %v (events so far %d)", err, len(events))
		}
		events = append(events, e)
		var msg struct {
			ID     int             `json:"id"`
			Result json.RawMessage `json:"result"`
		}
		if json.Unmarshal([]byte(e.data), &msg) == nil && msg.ID == 2 {
			result = msg.Result
		}
	}

	// Event ids are <stream>_<index>: the indexes run on without a gap or a repeat across the
	// break, and the progress values only grow.
	stream, idx, _ := strings.Cut(prime.id, "_")
	want, _ := strconv.Atoi(idx)
	progress := -1.0
	for _, e := range events {
		want++
		if e.id != fmt.Sprintf("%s_%d", stream, want) {
			t.Fatalf("event id %q, want %s_%d (events: %+v)", e.id, stream, want, events)
		}
		var n struct {
			Method string `json:"method"`
			Params struct {
				Progress float64 `json:"progress"`
			} `json:"params"`
		}
		if json.Unmarshal([]byte(e.data), &n) == nil && n.Method == "notifications/progress" {
			if n.Params.Progress <= progress {
				t.Errorf("progress %v after %v", n.Params.Progress, progress)
			}
			progress = n.Params.Progress
		}
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(result, &res); err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "released" {
		t.Errorf("result after resuming: %s (%v)", result, err)
	}
}

// TestEndpointHTTPLimits replays what a hostile or runaway client sends: a request from a
// foreign page (DNS rebinding), more sessions than allowed, a body over the limit.
func TestEndpointHTTPLimits(t *testing.T) {
	h := startHermes(t, t.TempDir(), "--mcp-allowed-origins=https://app.example.com", "--mcpgateway.mcp-max-sessions=3", "--mcpgateway.mcp-max-body-bytes=65536")
	c := &mcpHTTP{t: t, url: h.mcpURL}
	session := ""
	for _, tc := range []struct {
		origin string
		status int
	}{
		{"http://evil.example.com", http.StatusForbidden},
		{"null", http.StatusForbidden},
		{"http://app.example.com", http.StatusForbidden}, // not the allowed scheme
		{"https://app.example.com", http.StatusOK},
		{"http://localhost:6274", http.StatusOK},
		{"", http.StatusOK},
	} {
		header := map[string]string{}
		if tc.origin != "" {
			header["Origin"] = tc.origin
		}
		resp := c.post(initializeBody, header)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if id := resp.Header.Get("Mcp-Session-Id"); id != "" {
			session = id
		}
		if resp.StatusCode != tc.status {
			t.Errorf("Origin %q: HTTP %d %s, want %d", tc.origin, resp.StatusCode, body, tc.status)
		}
		if tc.status == http.StatusForbidden && !strings.Contains(string(body), "--mcp-allowed-origins") {
			t.Errorf("Origin %q: the refusal does not say how to allow it: %s", tc.origin, body)
		}
	}

	// The three accepted requests above opened the three sessions allowed: a fourth is refused.
	resp := c.post(initializeBody, nil)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a session over the cap: HTTP %d, want 503 with Retry-After", resp.StatusCode)
	}

	big := `{"jsonrpc":"2.0","id":9,"method":"ping","params":{"_meta":{"pad":"` + strings.Repeat("x", 70000) + `"}}}`
	req, _ := http.NewRequest(http.MethodPost, h.mcpURL, bytes.NewReader([]byte(big)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Session-Id", session)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the limit: HTTP %d, want 413", resp.StatusCode)
	}
}

// startRowsHermes starts Hermes with the tools rows_100 and rows_300, which return objects of
// 100 and 300 rows of 1000 bytes and declare an output schema, and an MCP endpoint that passes
// on results up to 200,000 bytes.
func startRowsHermes(t *testing.T) *hermes {
	t.Helper()
	row := strings.Repeat("x", 1000)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("rows"))
		rows := make([]string, n)
		for i := range rows {
			rows[i] = row
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"rows": rows})
	}))
	t.Cleanup(hook.Close)
	h := startHermes(t, t.TempDir(), "--mcpgateway.mcp-max-result-bytes=200000")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out := `{"type":"object","properties":{"rows":{"type":"array","items":{"type":"string"}}},"required":["rows"]}`
	for name, rows := range map[string]int{"rows_100": 100, "rows_300": 300} {
		spec := &toolsv1.ToolSpec{Name: name, Description: "returns rows", InputSchema: `{"type":"object"}`, OutputSchema: out,
			Executor:    &toolsv1.ToolSpec_Http{Http: &toolsv1.HTTPExecutor{Url: fmt.Sprintf("%s/?rows=%d", hook.URL, rows)}},
			Annotations: &toolsv1.ToolAnnotations{Title: new("Rows"), ReadOnlyHint: new(true), OpenWorldHint: new(false)}}
		if _, err := h.tools.RegisterTool(ctx, &toolsv1.RegisterToolRequest{Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// TestEndpointTools: annotations and output schemas reach MCP clients; a result far beyond the
// tool service's preview size keeps its structured content, and one beyond the endpoint's limit
// is an error that says so, never a success without the structured content its schema requires.
func TestEndpointTools(t *testing.T) {
	h := startRowsHermes(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.mcpURL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	var tool *mcp.Tool
	for tl, err := range sess.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tl.Name == "rows_100" {
			tool = tl
		}
	}
	if tool == nil {
		t.Fatal("rows_100 not listed")
	}
	if diff := cmp.Diff(&mcp.ToolAnnotations{Title: "Rows", ReadOnlyHint: true, OpenWorldHint: new(false)}, tool.Annotations); diff != "" || tool.Title != "Rows" || tool.OutputSchema == nil {
		t.Errorf("rows_100 as listed: title %q, output schema %v, annotations (-want +got):\n%s", tool.Title, tool.OutputSchema, diff)
	}
	// 100 KB: six times the tool service's 16 KiB preview, within the endpoint's limit.
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "rows_100", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("rows_100: %v (the SDK client checks structured content against the output schema)", err)
	}
	if res.IsError || res.StructuredContent == nil || len(res.StructuredContent.(map[string]any)["rows"].([]any)) != 100 {
		t.Errorf("rows_100: isError %v, structured %v", res.IsError, res.StructuredContent != nil)
	}
	// 300 KB: over the endpoint's limit of 200,000 bytes.
	res, err = sess.CallTool(ctx, &mcp.CallToolParams{Name: "rows_300", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("rows_300: %v", err)
	}
	if !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "larger than the 200000 bytes") {
		t.Errorf("rows_300: isError %v, %.200s", res.IsError, res.Content[0].(*mcp.TextContent).Text)
	}
}

// TestInspectorAcceptsLargeResults runs the MCP Inspector's CLI mode against the endpoint: a
// large result of a tool with an output schema is accepted (the Inspector's client rejects a
// success without structured content with -32600), and so is the error for one over the
// endpoint's limit.
func TestInspectorAcceptsLargeResults(t *testing.T) {
	cli := mcpgatewaytest.NodeScript(t, "@modelcontextprotocol/inspector-cli/build/index.js")
	h := startRowsHermes(t)
	for _, tc := range []struct {
		tool    string
		isError bool
	}{{"rows_100", false}, {"rows_300", true}} {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		cmd := exec.CommandContext(ctx, mcpgatewaytest.Node(t), cli, h.mcpURL, "--method", "tools/call", "--tool-name", tc.tool)
		// The CLI finds its own package.json relative to the working directory.
		cmd.Dir = filepath.Dir(cli)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("inspector tools/call %s: %v\n%s", tc.tool, err, stderr.String())
		}
		var res struct {
			IsError           bool           `json:"isError"`
			StructuredContent map[string]any `json:"structuredContent"`
			Content           []struct {
				Text string `json:"text"`
			} `json:"content"`
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("inspector output for %s is not a result: %v\n%.500s", tc.tool, err, out)
		}
		if res.IsError != tc.isError || (!tc.isError && len(res.StructuredContent["rows"].([]any)) != 100) {
			t.Errorf("%s through the Inspector: isError %v, structured %v", tc.tool, res.IsError, res.StructuredContent != nil)
		}
	}
}
