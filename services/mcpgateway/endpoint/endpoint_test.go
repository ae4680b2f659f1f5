package endpoint

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/yosida95/uritemplate/v3"
	"google.golang.org/grpc"

	"github.com/hermes-agent/hermes/internal/testenv"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

func TestToMCPResult(t *testing.T) {
	plain, structured, content := &servedTool{}, &servedTool{structured: true}, &servedTool{content: true}
	text := func(s string) []mcp.Content { return []mcp.Content{&mcp.TextContent{Text: s}} }
	validation := "The arguments for tool \"add\" do not match its input schema (2 problems):\n- /a: want number\n- (the arguments object): missing b\nCorrect the arguments so they match the schema and call add again."
	tests := []struct {
		name string
		in   *toolsv1.ToolResult
		tool *servedTool
		want *mcp.CallToolResult
	}{
		{
			name: "text output",
			in:   &toolsv1.ToolResult{Success: true, Output: `"The sum is 5."`},
			tool: plain,
			want: &mcp.CallToolResult{Content: text("The sum is 5.")},
		},
		{
			name: "object output is also structured",
			in:   &toolsv1.ToolResult{Success: true, Output: `{"n":1}`},
			tool: structured,
			want: &mcp.CallToolResult{Content: text(`{"n":1}`), StructuredContent: json.RawMessage(`{"n":1}`)},
		},
		{
			name: "a preview of a tool without output schema is text",
			in:   &toolsv1.ToolResult{Success: true, Output: `"{\"n\":[1,2,\n[output truncated: showing the first 10 of 99 bytes]"`, Truncated: true, OutputBytes: 99},
			tool: plain,
			want: &mcp.CallToolResult{Content: text("{\"n\":[1,2,\n[output truncated: showing the first 10 of 99 bytes]")},
		},
		{
			name: "a preview of a tool with an output schema is an error, never success without structured content",
			in:   &toolsv1.ToolResult{Success: true, Output: `"{\"n\":[1,2,"`, Truncated: true, OutputBytes: 99},
			tool: structured,
			want: errorResult("The tool succeeded, but its output (99 bytes) is larger than the 50 bytes this MCP endpoint passes on (mcpgateway.mcp-max-result-bytes), so its structured result cannot be sent; the start of it follows.\n{\"n\":[1,2,"),
		},
		{
			name: "a preview cut by a smaller cap on the way names that cap and the whole size",
			in:   &toolsv1.ToolResult{Success: true, Output: `"{\"n\":[1,2,"`, Truncated: true, OutputBytes: 388901, OutputLimitBytes: 20},
			tool: structured,
			want: errorResult("The tool succeeded, but its output (388901 bytes) is larger than the 20-byte cap that applied on the way (tools.max-response-bytes or mcpgateway.max-text-bytes), so its structured result cannot be sent; the start of it follows.\n{\"n\":[1,2,"),
		},
		{
			name: "media follow the text as MCP blocks, and their descriptions leave the text",
			in: &toolsv1.ToolResult{Success: true, Output: `"a logo\n[image image/png 3 bytes]\n[audio audio/wav 9 bytes; not passed on: too big]\n[resource text/plain file:///a 2 bytes] hi\n[resource_link https://x/y] y"`,
				Media: []*toolsv1.Media{
					{Type: "image", MimeType: "image/png", Size: 3, Data: []byte("png")},
					{Type: "audio", MimeType: "audio/wav", Size: 9, Omitted: "too big"},
					{Type: "resource", MimeType: "text/plain", Uri: "file:///a", Size: 2, Text: "hi"},
					{Type: "resource_link", Uri: "https://x/y", Text: "y"},
				}},
			tool: plain,
			want: &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "a logo"},
				&mcp.ImageContent{MIMEType: "image/png", Data: []byte("png")},
				&mcp.TextContent{Text: "[audio audio/wav 9 bytes; not passed on: too big]"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "file:///a", MIMEType: "text/plain", Text: "hi"}},
				&mcp.ResourceLink{URI: "https://x/y", Name: "y"},
			}},
		},
		{
			name: "violations the message lists are not listed again",
			in: &toolsv1.ToolResult{Error: &toolsv1.ToolError{Code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION, Message: validation,
				Violations: []*toolsv1.Violation{{Pointer: "/a", Message: "want number"}, {Message: "missing b"}}}},
			tool: plain,
			want: errorResult(validation),
		},
		{
			name: "violations the message leaves out are added",
			in: &toolsv1.ToolResult{Error: &toolsv1.ToolError{Code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION, Message: "fix the arguments",
				Violations: []*toolsv1.Violation{{Pointer: "/a", Message: "want number"}, {Message: "missing b"}}}},
			tool: plain,
			want: errorResult("fix the arguments\n- /a: want number\n- (arguments): missing b"),
		},
		{
			name: "an MCP result output passes its content blocks on",
			in:   &toolsv1.ToolResult{Success: true, Output: `{"content":[{"type":"text","text":"a chart:"},{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"}]}`},
			tool: content,
			want: &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "a chart:"}, &mcp.ImageContent{Data: []byte("\x89PNG\r\n\x1a\n"), MIMEType: "image/png"}}},
		},
		{
			name: "an MCP result output that is not one is text",
			in:   &toolsv1.ToolResult{Success: true, Output: `{"n":1}`},
			tool: content,
			want: &mcp.CallToolResult{Content: text(`{"n":1}`), StructuredContent: json.RawMessage(`{"n":1}`)},
		},
		{
			name: "an MCP result without the structured content its schema requires is an error",
			in:   &toolsv1.ToolResult{Success: true, Output: `{"content":[{"type":"text","text":"hi"}]}`},
			tool: &servedTool{content: true, structured: true},
			want: errorResult("The tool declares an output schema, but its result has no structuredContent."),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := toMCPResult(tt.in, tt.tool, 50)
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(mcp.CallToolResult{})); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestMCPToolAnnotationsAndSchema(t *testing.T) {
	in := `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","$defs":{"a":{"type":"string"}},"properties":{"x":{"$ref":"#/$defs/a"}},"required":["x"],"additionalProperties":false}`
	spec := &toolsv1.ToolSpec{Name: "rm", Description: "removes", InputSchema: in,
		OutputSchema: `{"type":"object"}`,
		Labels:       map[string]string{"mcp.title": "old title"},
		Annotations: &toolsv1.ToolAnnotations{Title: new("Remove a file"), ReadOnlyHint: new(false), DestructiveHint: new(true),
			IdempotentHint: new(true)}}
	tool, st, err := mcpTool(spec)
	if err != nil {
		t.Fatal(err)
	}
	want := &mcp.ToolAnnotations{Title: "Remove a file", DestructiveHint: new(true), IdempotentHint: true}
	if diff := cmp.Diff(want, tool.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if tool.Title != "Remove a file" || string(tool.InputSchema.(json.RawMessage)) != in || !st.structured || st.content {
		t.Errorf("tool %+v, served %+v", tool, st)
	}
	if diff := cmp.Diff([]string{"x"}, st.required); diff != "" {
		t.Errorf("required (-want +got):\n%s", diff)
	}
	// Without annotations there are none, and the label still gives the title.
	spec.Annotations = nil
	tool, _, _ = mcpTool(spec)
	if tool.Annotations != nil || tool.Title != "old title" {
		t.Errorf("without annotations: %+v, title %q", tool.Annotations, tool.Title)
	}
}

func TestElicitable(t *testing.T) {
	for schema, want := range map[string]bool{
		`{"type":"string"}`: true,
		`{"type":"string","enum":["a","b"],"default":"a"}`:               true,
		`{"type":"integer","default":3}`:                                 true,
		`{"type":"boolean"}`:                                             true,
		`{"type":"array","items":{"type":"string","enum":["a"]}}`:        true,
		`{"type":"array","items":{"anyOf":[{"const":"a","title":"A"}]}}`: true,
		`{"type":"array","items":{"type":"string"}}`:                     false,
		`{"type":"object","properties":{"a":{"type":"string"}}}`:         false,
		`{"properties":{"a":{"type":"string"}}}`:                         false,
		`{"$ref":"#/$defs/a"}`:                                           false,
		`{"type":["string","null"]}`:                                     false,
		`not json`:                                                       false,
	} {
		if got := elicitable(json.RawMessage(schema)); got != want {
			t.Errorf("elicitable(%s) = %v, want %v", schema, got, want)
		}
	}
}

// TestOriginAllowed: the endpoint's guard lets loopback and configured origins through, and a
// setting that is not an origin is refused at start.
func TestOriginAllowed(t *testing.T) {
	g, err := newGuard(Config{AllowedOrigins: " https://App.Example.com , http://dev.example.com:8080/,"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for origin, want := range map[string]bool{
		"http://localhost:6274":        true,
		"http://127.0.0.1:7071":        true,
		"http://127.8.0.1":             true,
		"http://[::1]:3000":            true,
		"https://app.example.com":      true,
		"https://app.example.com:443":  true,
		"http://dev.example.com:8080":  true,
		"http://dev.example.com":       false,
		"http://app.example.com":       false,
		"https://evil.example.com":     false,
		"http://localhost.evil.com":    false,
		"http://127.0.0.1.nip.io":      false,
		"null":                         false,
		"file://":                      false,
		"https://user@app.example.com": false,
	} {
		if got, _ := g.OriginAllowed(origin, "127.0.0.1:7071"); got != want {
			t.Errorf("OriginAllowed(%q) = %v, want %v", origin, got, want)
		}
	}
	if _, err := newGuard(Config{AllowedOrigins: "https://app.example.com,not a url"}, nil); err == nil || !strings.Contains(err.Error(), "--mcp-allowed-origins") {
		t.Errorf("a setting that is not an origin: %v", err)
	}
}

// TestEventStoreLimits: each of the three bounds drops the oldest events, and a resumption from
// before a dropped event is refused rather than given a stream with a gap.
func TestEventStoreLimits(t *testing.T) {
	ctx := context.Background()
	clock := time.Unix(1000, 0)
	collect := func(s *eventStore, session, stream string, after int) ([]string, error) {
		var out []string
		for d, err := range s.After(ctx, session, stream, after) {
			if err != nil {
				return out, err
			}
			out = append(out, string(d))
		}
		return out, nil
	}
	t.Run("per stream", func(t *testing.T) {
		s := newEventStore(1<<20, 3, time.Hour)
		_ = s.Open(ctx, "s", "a")
		for _, d := range []string{"0", "1", "2", "3", "4"} {
			_ = s.Append(ctx, "s", "a", []byte(d))
		}
		if got, err := collect(s, "s", "a", 1); err != nil || !cmp.Equal(got, []string{"2", "3", "4"}) {
			t.Errorf("after 1: %v, %v", got, err)
		}
		if _, err := collect(s, "s", "a", 0); !errors.Is(err, mcp.ErrEventsPurged) {
			t.Errorf("after 0 (event 1 dropped): %v, want ErrEventsPurged", err)
		}
		if got, err := collect(s, "s", "a", 4); err != nil || len(got) != 0 {
			t.Errorf("after the last: %v, %v", got, err)
		}
	})
	t.Run("bytes, oldest anywhere first", func(t *testing.T) {
		s := newEventStore(10, 100, time.Hour)
		_ = s.Open(ctx, "s", "a")
		_ = s.Open(ctx, "s", "b")
		_ = s.Append(ctx, "s", "a", []byte("aaaa"))
		_ = s.Append(ctx, "s", "b", []byte("bbbb"))
		_ = s.Append(ctx, "s", "a", []byte("cccc")) // 12 bytes: the first "aaaa" goes
		if got, err := collect(s, "s", "b", -1); err != nil || !cmp.Equal(got, []string{"bbbb"}) {
			t.Errorf("stream b: %v, %v", got, err)
		}
		if _, err := collect(s, "s", "a", -1); !errors.Is(err, mcp.ErrEventsPurged) {
			t.Errorf("stream a from the start: %v, want ErrEventsPurged", err)
		}
		if got, err := collect(s, "s", "a", 0); err != nil || !cmp.Equal(got, []string{"cccc"}) {
			t.Errorf("stream a after 0: %v, %v", got, err)
		}
		if n, b := s.size(); n != 2 || b != 8 {
			t.Errorf("size %d events, %d bytes", n, b)
		}
	})
	t.Run("age", func(t *testing.T) {
		s := newEventStore(1<<20, 100, time.Minute)
		s.now = func() time.Time { return clock }
		_ = s.Open(ctx, "s", "a")
		_ = s.Append(ctx, "s", "a", []byte("old"))
		clock = clock.Add(2 * time.Minute)
		_ = s.Append(ctx, "s", "a", []byte("new"))
		if got, err := collect(s, "s", "a", 0); err != nil || !cmp.Equal(got, []string{"new"}) {
			t.Errorf("after 0: %v, %v", got, err)
		}
		if _, err := collect(s, "s", "a", -1); !errors.Is(err, mcp.ErrEventsPurged) {
			t.Errorf("from the start: %v, want ErrEventsPurged", err)
		}
		clock = clock.Add(2 * time.Minute)
		// Everything aged out: the stream is forgotten, and events it gets later cannot be
		// resumed (their indexes are unknown).
		if _, err := collect(s, "s", "a", 1); !errors.Is(err, mcp.ErrEventsPurged) {
			t.Errorf("an aged-out stream: %v, want ErrEventsPurged", err)
		}
		_ = s.Append(ctx, "s", "a", []byte("later"))
		if _, err := collect(s, "s", "a", 1); !errors.Is(err, mcp.ErrEventsPurged) {
			t.Errorf("a forgotten stream: %v, want ErrEventsPurged", err)
		}
	})
	t.Run("closed session", func(t *testing.T) {
		s := newEventStore(1<<20, 100, time.Hour)
		_ = s.Open(ctx, "s", "a")
		_ = s.Append(ctx, "s", "a", []byte("x"))
		_ = s.Open(ctx, "t", "a")
		_ = s.Append(ctx, "t", "a", []byte("y"))
		_ = s.SessionClosed(ctx, "s")
		if n, b := s.size(); n != 1 || b != 1 {
			t.Errorf("size %d events, %d bytes", n, b)
		}
		if _, err := collect(s, "s", "a", -1); err == nil {
			t.Error("a closed session's stream resumed")
		}
	})
}

func TestParseCatalog(t *testing.T) {
	good := `
resources:
  - {uri: "docs://readme", name: readme, mime_type: text/plain, text: hello}
  - {uri: "docs://logo", name: logo, mime_type: image/png, blob: iVBORw0KGgo=}
resource_templates:
  - {uri_template: "orders://{id}", name: order, text: 'order {id}'}
prompts:
  - name: greet
    arguments: [{name: who, required: true, values: [Ada, Alan]}]
    messages:
      - {role: user, text: "Hello {who}, {unknown}"}
      - {role: assistant, image: {mime_type: image/png, data: iVBORw0KGgo=}}
      - {role: user, resource: {uri: "docs://{who}", mime_type: text/plain, text: "about {who}"}}
`
	c, err := parseCatalog(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Resources) != 2 || len(c.ResourceTemplates) != 1 || len(c.Prompts) != 1 {
		t.Fatalf("catalog %+v", c)
	}
	res, err := renderPrompt(c.Prompts[0])(context.Background(), &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"who": "Ada"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Messages[0].Content.(*mcp.TextContent).Text; got != "Hello Ada, {unknown}" {
		t.Errorf("text %q", got)
	}
	if r := res.Messages[2].Content.(*mcp.EmbeddedResource).Resource; r.URI != "docs://Ada" || r.Text != "about Ada" {
		t.Errorf("embedded %+v", r)
	}
	if _, err := renderPrompt(c.Prompts[0])(context.Background(), &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "greet"}}); err == nil || !strings.Contains(err.Error(), `needs the argument "who"`) {
		t.Errorf("missing required argument: %v", err)
	}
	long := strings.Repeat("x", maxPromptArgBytes+1)
	if _, err := renderPrompt(c.Prompts[0])(context.Background(), &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: "greet", Arguments: map[string]string{"who": long}}}); err == nil {
		t.Error("an argument over the limit was accepted")
	}

	for name, bad := range map[string]string{
		"unknown key":         "resources: [{uri: 'a://b', name: b, txt: x}]",
		"relative uri":        "resources: [{uri: 'readme', name: b}]",
		"duplicate uri":       "resources: [{uri: 'a://b', name: b}, {uri: 'a://b', name: c}]",
		"bad blob":            "resources: [{uri: 'a://b', name: b, blob: '***'}]",
		"bad template":        "resource_templates: [{uri_template: 'a://{', name: b}]",
		"no messages":         "prompts: [{name: p}]",
		"two contents":        "prompts: [{name: p, messages: [{role: user, text: a, image: {mime_type: image/png, data: AA==}}]}]",
		"bad role":            "prompts: [{name: p, messages: [{role: system, text: a}]}]",
		"duplicate prompt":    "prompts: [{name: p, messages: [{role: user, text: a}]}, {name: p, messages: [{role: user, text: a}]}]",
		"image without data":  "prompts: [{name: p, messages: [{role: user, image: {mime_type: image/png}}]}]",
		"unnamed argument":    "prompts: [{name: p, arguments: [{required: true}], messages: [{role: user, text: a}]}]",
		"not yaml":            "resources: [",
		"template not scheme": "resource_templates: [{uri_template: '{id}', name: b}]",
	} {
		if _, err := parseCatalog(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: accepted %q", name, bad)
		}
	}
}

func TestSubstitute(t *testing.T) {
	vars := map[string]string{"id": "123", "a.b": "x"}
	for in, want := range map[string]string{
		`{"id":"{id}"}`:      `{"id":"123"}`,
		"{a.b}-{missing}-{}": "x-{missing}-{}",
		"no braces":          "no braces",
		"{{id}}":             "{123}",
	} {
		if got := substitute(in, vars); got != want {
			t.Errorf("substitute(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestCatalogReload: a changed catalog file is served on the next reload; a subscriber of a
// resource whose content changed is notified, a removed resource is gone, and an invalid file
// leaves the last good catalog served.
func TestCatalogReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("resources:\n  - {uri: 'docs://a', name: a, text: one}\n  - {uri: 'docs://b', name: b, text: bee}\n")
	s, err := New(Options{
		Tools:  func() (ToolClient, error) { return nil, errors.New("no tool service in this test") },
		Logger: testenv.Logger(t),
		Config: Config{Catalog: path},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	updated := make(chan string, 10)
	ts := httptest.NewServer(s.HTTPHandler())
	defer ts.Close()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) { updated <- req.Params.URI },
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ts.URL}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	read := func(uri string) (string, error) {
		res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			return "", err
		}
		return res.Contents[0].Text, nil
	}
	if got, err := read("docs://a"); err != nil || got != "one" {
		t.Fatalf("docs://a = %q, %v", got, err)
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "docs://a"}); err != nil {
		t.Fatal(err)
	}
	if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: "docs://nope"}); err == nil {
		t.Error("subscribed to a resource the catalog does not have")
	}

	write("resources:\n  - {uri: 'docs://a', name: a, text: two, mime_type: text/plain}\n")
	if err := s.reloadCatalog(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case uri := <-updated:
		if uri != "docs://a" {
			t.Errorf("updated %q", uri)
		}
	case <-ctx.Done():
		t.Fatal("no notifications/resources/updated for the changed resource")
	}
	if got, err := read("docs://a"); err != nil || got != "two" {
		t.Errorf("docs://a after the change = %q, %v", got, err)
	}
	if _, err := read("docs://b"); err == nil {
		t.Error("a removed resource is still served")
	}

	write("resources: [{uri: 'docs://a'}]\n")
	if err := s.reloadCatalog(ctx); err == nil {
		t.Error("an invalid catalog was accepted")
	}
	if got, err := read("docs://a"); err != nil || got != "two" {
		t.Errorf("docs://a after an invalid change = %q, %v; want the last good catalog", got, err)
	}
}

// FuzzParseCatalog: any input is accepted or refused with an error, never a panic, and an
// accepted catalog can be served: its templates compile and its prompts render.
func FuzzParseCatalog(f *testing.F) {
	f.Add("resources: [{uri: 'a://b', name: b, text: x}]")
	f.Add("resource_templates: [{uri_template: 'a://{x}/{+y}', name: t, text: '{x}'}]")
	f.Add("prompts: [{name: p, arguments: [{name: a, values: [x]}], messages: [{role: user, text: '{a}'}, {role: user, resource: {uri: '{a}', blob: AA==}}]}]")
	f.Add("{}")
	f.Fuzz(func(t *testing.T, in string) {
		c, err := parseCatalog(strings.NewReader(in))
		if err != nil {
			return
		}
		for _, tm := range c.ResourceTemplates {
			_ = templateResource(tm, uritemplateMustNew(t, tm.URITemplate))
		}
		for _, p := range c.Prompts {
			args := map[string]string{}
			for _, a := range p.Arguments {
				args[a.Name] = "v{" + a.Name + "}"
			}
			if _, err := renderPrompt(p)(context.Background(), &mcp.GetPromptRequest{Params: &mcp.GetPromptParams{Name: p.Name, Arguments: args}}); err != nil {
				t.Errorf("prompt %q with every argument: %v", p.Name, err)
			}
		}
	})
}

func uritemplateMustNew(t *testing.T, s string) *uritemplate.Template {
	t.Helper()
	ut, err := uritemplate.New(s)
	if err != nil {
		t.Fatalf("an accepted template does not compile: %q: %v", s, err)
	}
	return ut
}

// listOnly is a tool service that lists tools and does nothing else.
type listOnly struct {
	ToolClient
	tools []*toolsv1.Tool
}

func (l listOnly) ListTools(context.Context, *toolsv1.ListToolsRequest, ...grpc.CallOption) (*toolsv1.ListToolsResponse, error) {
	return &toolsv1.ListToolsResponse{Tools: l.tools}, nil
}

// TestToolCallableOnlyOnceAdded replays a flaky "unknown tool" of a call that arrived while a
// Sync had put the tool's entry in place but not yet added it to the SDK server: the call saw
// the entry, skipped its own Sync and reached the SDK first. A tool counts as added (what a
// call's freshen checks) only once the SDK has it.
func TestToolCallableOnlyOnceAdded(t *testing.T) {
	tool := &toolsv1.Tool{Version: 1, Spec: &toolsv1.ToolSpec{Name: "rows", InputSchema: `{"type":"object"}`}}
	s, err := New(Options{
		Tools:  func() (ToolClient, error) { return listOnly{tools: []*toolsv1.Tool{tool}}, nil },
		Logger: testenv.Logger(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	var during []bool
	s.beforeAdd = func(name string) {
		during = append(during, s.served(name) != nil, s.added(name))
	}
	if err := s.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]bool{true, false}, during); diff != "" {
		t.Errorf("between the entry and AddTool, (known, added) (-want +got):\n%s", diff)
	}
	if !s.added("rows") {
		t.Error("after Sync the tool is not counted as added")
	}
}
