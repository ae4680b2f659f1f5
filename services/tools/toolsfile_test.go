package tools

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/hermes-agent/hermes/internal/secretenv"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

const toolsYAML = `
tools:
  - name: get_weather
    description: Current weather for a city.
    input_schema:
      type: object
      properties:
        city: {type: string, description: "City name"}
        units: {type: string, enum: [metric, imperial]}
        days: {type: integer, minimum: 1}
      required: [city]
      additionalProperties: false
    timeout: 5s
    attempt_timeout: 2s
    max_retries: 1
    idempotent: true
    groups: [weather]
    labels: {team: travel}
    http:
      url: https://weather.example.com/v1/current
      headers: {X-Region: eu}
      secret_env: WEATHER_TOKEN
  - name: github_list_issues
    description: List issues of a repository.
    input_schema: '{"type":"object","properties":{"repo":{"type":"string"}}}'
    mcp: {server: github, tool: list_issues}
  - name: time_now
    description: The time.
    input_schema: {type: object}
    builtin: {name: current_time}
`

func TestParseToolsFile(t *testing.T) {
	specs, err := ParseToolsFile(strings.NewReader(toolsYAML))
	if err != nil {
		t.Fatal(err)
	}
	want := []*toolsv1.ToolSpec{
		{
			Name:        "get_weather",
			Description: "Current weather for a city.",
			// Key order is kept: it is the order a model reads the properties in.
			InputSchema:    `{"type":"object","properties":{"city":{"type":"string","description":"City name"},"units":{"type":"string","enum":["metric","imperial"]},"days":{"type":"integer","minimum":1}},"required":["city"],"additionalProperties":false}`,
			Timeout:        dur(5 * time.Second),
			AttemptTimeout: dur(2 * time.Second),
			MaxRetries:     i32(1),
			Idempotent:     true,
			Groups:         []string{"weather"},
			Labels:         map[string]string{"team": "travel"},
			Executor: &toolsv1.ToolSpec_Http{Http: &toolsv1.HTTPExecutor{
				Url: "https://weather.example.com/v1/current", Headers: map[string]string{"X-Region": "eu"}, SecretEnv: "WEATHER_TOKEN",
			}},
		},
		{
			Name: "github_list_issues", Description: "List issues of a repository.",
			InputSchema: `{"type":"object","properties":{"repo":{"type":"string"}}}`,
			Executor:    &toolsv1.ToolSpec_Mcp{Mcp: &toolsv1.MCPExecutor{Server: "github", Tool: "list_issues"}},
		},
		{
			Name: "time_now", Description: "The time.", InputSchema: `{"type":"object"}`,
			Executor: &toolsv1.ToolSpec_Builtin{Builtin: &toolsv1.BuiltinExecutor{Name: "current_time"}},
		},
	}
	if diff := cmp.Diff(want, specs, protocmp.Transform()); diff != "" {
		t.Errorf("specs (-want +got):\n%s", diff)
	}

	// JSON is YAML too.
	specs, err = ParseToolsFile(strings.NewReader(`{"tools":[{"name":"a","description":"d","input_schema":{"type":"object"},"builtin":{"name":"calculator"}}]}`))
	if err != nil || len(specs) != 1 || specs[0].GetInputSchema() != `{"type":"object"}` {
		t.Errorf("JSON file: %v %v", specs, err)
	}

	for _, bad := range []struct{ text, want string }{
		{"tools:\n  - name: a\n    descripton: typo\n", "field descripton not found"},
		{"tools:\n  - name: a\n    timeout: soon\n", "timeout"},
		{"tools:\n  - name: a\n    builtin: {name: x}\n    mcp: {server: s, tool: t}\n", "exactly one of http, mcp and builtin"},
		{"tools: [", "did not find expected"},
	} {
		if _, err := ParseToolsFile(strings.NewReader(bad.text)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: %v, want %q", bad.text, err, bad.want)
		}
	}
}

func TestLoadToolsFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tools.yaml")
	if err := os.WriteFile(path, []byte(toolsYAML), 0o600); err != nil {
		t.Fatal(err)
	}
	c, svc := newClient(t, Options{Secrets: secretenv.New([]string{"WEATHER_TOKEN"}, nil)})
	ctx := context.Background()
	mustRegister(t, c, httpSpec("from_api", "http://127.0.0.1:1/", emptyObjectSchema))
	n, err := svc.LoadToolsFile(ctx, path)
	if err != nil || n != 3 {
		t.Fatalf("load: %d %v", n, err)
	}
	got, err := c.GetTool(ctxTimeout(t, 5*time.Second), &toolsv1.GetToolRequest{Name: "get_weather"})
	if err != nil || got.GetTool().GetSource() != "file" {
		t.Fatalf("get_weather: %v %v", got, err)
	}
	if res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "time_now", Arguments: `{}`}); !res.GetSuccess() {
		t.Errorf("time_now: %v", res)
	}

	// A second start-up with a shorter file drops the tools it no longer declares, not others.
	short := toolsYAML[:strings.Index(toolsYAML, "  - name: github_list_issues")]
	if err := os.WriteFile(path, []byte(short), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, err := svc.LoadToolsFile(ctx, path); err != nil || n != 1 {
		t.Fatalf("reload: %d %v", n, err)
	}
	list, _ := c.ListTools(ctxTimeout(t, 5*time.Second), &toolsv1.ListToolsRequest{})
	var names []string
	for _, tl := range list.GetTools() {
		names = append(names, tl.GetSpec().GetName())
	}
	if diff := cmp.Diff([]string{"from_api", "get_weather"}, names); diff != "" {
		t.Errorf("after reload (-want +got):\n%s", diff)
	}

	// A file with an invalid spec registers nothing and names every problem.
	bad := "tools:\n  - name: ok_one\n    description: fine\n    input_schema: {type: object}\n    builtin: {name: calculator}\n" +
		"  - name: bad one\n    description: x\n    input_schema: {type: string}\n    builtin: {name: calculator}\n"
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = svc.LoadToolsFile(ctx, path)
	if err == nil || !strings.Contains(err.Error(), "tools[1] (bad one): name:") || !strings.Contains(err.Error(), "input_schema: must describe an object") {
		t.Errorf("bad file: %v", err)
	}
	if _, err := c.GetTool(ctxTimeout(t, 5*time.Second), &toolsv1.GetToolRequest{Name: "ok_one"}); err == nil {
		t.Error("a valid tool of an invalid file was registered")
	}
}
