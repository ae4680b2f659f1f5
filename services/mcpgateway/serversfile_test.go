package mcpgateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
)

func TestParseServers(t *testing.T) {
	env := map[string]string{"GITHUB_TOKEN": "ghp_x", "HOST": "mcp.example.com"}
	getenv := func(k string) string { return env[k] }
	tests := []struct {
		name    string
		in      string
		want    []*pb.ServerSpec
		wantErr string
	}{
		{
			name: "Claude Desktop stdio entries, with env expansion",
			in: `{"mcpServers": {
				"github": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-github"], "env": {"GITHUB_PERSONAL_ACCESS_TOKEN": "${GITHUB_TOKEN}"}},
				"memory": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"], "autoApprove": ["read_graph"]}
			}}`,
			want: []*pb.ServerSpec{
				{Name: "github", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-github"}, Env: map[string]string{"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_x"}}}},
				{Name: "memory", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{Command: "npx", Args: []string{"-y", "@modelcontextprotocol/server-memory"}, Env: map[string]string{}}}},
			},
		},
		{
			name: "Streamable HTTP with headers, Hermes keys, a disabled entry and a name to clean",
			in: `{"mcpServers": {
				"jira.cloud": {"type": "http", "url": "https://${HOST}/mcp", "headers": {"X-Team": "a"}, "bearerTokenEnv": "JIRA_TOKEN",
					"prefix": "jira", "include": ["search_*"], "callTimeout": "45s", "protocolVersion": "2025-06-18", "groups": ["tickets"]},
				"off": {"command": "x", "disabled": true},
				"cline": {"url": "http://127.0.0.1:3001/mcp", "timeout": 60}
			}}`,
			want: []*pb.ServerSpec{
				{Name: "cline", CallTimeout: durationpb.New(time.Minute), Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: "http://127.0.0.1:3001/mcp", Headers: map[string]string{}}}},
				{Name: "jira_cloud", Prefix: "jira", Include: []string{"search_*"}, CallTimeout: durationpb.New(45 * time.Second), ProtocolVersion: "2025-06-18", Groups: []string{"tickets"},
					Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: "https://mcp.example.com/mcp", Headers: map[string]string{"X-Team": "a"}, BearerTokenEnv: "JIRA_TOKEN"}}},
			},
		},
		{
			name: "VS Code servers key",
			in:   `{"servers": {"time": {"type": "stdio", "command": "uvx", "args": ["mcp-server-time"], "cwd": "/srv"}}}`,
			want: []*pb.ServerSpec{{Name: "time", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{Command: "uvx", Args: []string{"mcp-server-time"}, WorkingDir: "/srv", Env: map[string]string{}}}}},
		},
		{name: "not JSON", in: `{"mcpServers":`, wantErr: "not valid JSON"},
		{name: "no servers", in: `{"other": {}}`, wantErr: "mcpServers"},
		{name: "SSE is refused", in: `{"mcpServers": {"old": {"type": "sse", "url": "http://x/sse"}}}`, wantErr: "deprecated HTTP+SSE"},
		{name: "both command and url", in: `{"mcpServers": {"x": {"command": "a", "url": "http://x"}}}`, wantErr: "not both"},
		{name: "invalid entry is named", in: `{"mcpServers": {"x": {"command": ""}}}`, wantErr: "stdio.command"},
		{name: "names that clean alike", in: `{"mcpServers": {"a.b": {"command": "x"}, "a_b": {"command": "y"}}}`, wantErr: "both become"},
		{name: "bad timeout", in: `{"mcpServers": {"x": {"command": "a", "callTimeout": "soon"}}}`, wantErr: "neither a duration"},
		{name: "an unknown type with a URL is refused", in: `{"mcpServers": {"x": {"type": "websocket", "url": "ws://x"}}}`, wantErr: `unknown type "websocket"`},
		{name: "http without a url", in: `{"mcpServers": {"x": {"type": "http"}}}`, wantErr: `needs "url"`},
		{
			name: "Windsurf serverUrl",
			in:   `{"mcpServers": {"remote": {"serverUrl": "https://mcp.example.com/mcp"}}}`,
			want: []*pb.ServerSpec{{Name: "remote", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: "https://mcp.example.com/mcp", Headers: map[string]string{}}}}},
		},
		{
			name: "JSONC comments and trailing commas",
			in: `{
				// servers of the team
				"mcpServers": {
					/* a local one */
					"time": {"command": "uvx", "args": ["mcp-server-time", "--tz=//UTC"],},
				},
			}`,
			want: []*pb.ServerSpec{{Name: "time", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{Command: "uvx", Args: []string{"mcp-server-time", "--tz=//UTC"}, Env: map[string]string{}}}}},
		},
		{
			name: "roots, sampling and OAuth",
			in: `{"mcpServers": {"r": {"url": "https://mcp.example.com/mcp", "roots": [{"uri": "file:///srv/data", "name": "data"}],
				"sampling": {"allow": true, "maxTokens": 200, "perMinute": 5, "askCaller": true},
				"oauth": {"tokenUrl": "https://auth.example.com/token", "clientId": "hermes", "clientSecretEnv": "R_SECRET", "scopes": ["mcp"]}}}}`,
			want: []*pb.ServerSpec{{Name: "r", Roots: []*pb.Root{{Uri: "file:///srv/data", Name: "data"}}, Sampling: &pb.SamplingPolicy{Allow: true, MaxTokens: 200, PerMinute: 5, AskCaller: true},
				Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: "https://mcp.example.com/mcp", Headers: map[string]string{},
					Oauth: &pb.OAuthClientCredentials{TokenUrl: "https://auth.example.com/token", ClientId: "hermes", ClientSecretEnv: "R_SECRET", Scopes: []string{"mcp"}}}}}},
		},
		{
			name: "enterprise-managed authorization and workload identity",
			in: `{"mcpServers": {"e": {"url": "https://mcp.example.com/mcp", "enterpriseOauth": {"idpIssuer": "https://idp.example.com", "idpTokenUrl": "https://idp.example.com/token",
				"idpClientId": "hermes-idp", "idpClientSecretEnv": "IDP_SECRET", "clientId": "hermes", "clientSecretEnv": "E_SECRET", "scopes": ["read"]}},
				"w": {"url": "https://w.example.com/mcp", "oauth": {"clientId": "wl", "assertionEnv": "WORKLOAD_JWT"}}}}`,
			want: []*pb.ServerSpec{
				{Name: "e", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: "https://mcp.example.com/mcp", Headers: map[string]string{},
					EnterpriseOauth: &pb.OAuthEnterprise{IdpIssuer: "https://idp.example.com", IdpTokenUrl: "https://idp.example.com/token", IdpClientId: "hermes-idp",
						IdpClientSecretEnv: "IDP_SECRET", ClientId: "hermes", ClientSecretEnv: "E_SECRET", Scopes: []string{"read"}}}}},
				{Name: "w", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: "https://w.example.com/mcp", Headers: map[string]string{},
					Oauth: &pb.OAuthClientCredentials{ClientId: "wl", AssertionEnv: "WORKLOAD_JWT"}}}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseServers([]byte(tt.in), getenv)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want it to mention %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestExpandEnv(t *testing.T) {
	getenv := func(k string) string { return map[string]string{"A": "1"}[k] }
	for in, want := range map[string]string{
		"${A}":          "1",
		"x${A}y${A}":    "x1y1",
		"${B:-def}":     "def",
		"${B}":          "",
		"$A and ${A:-}": "$A and 1",
		"no refs":       "no refs",
	} {
		if got := expandEnv(in, getenv); got != want {
			t.Errorf("expandEnv(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestServersFileAtStart declares the everything server in an mcpServers file, as a user would
// paste it, and starts the gateway with it.
func TestServersFileAtStart(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mcp.json")
	body := `{"mcpServers": {"everything": {"command": "` + mcpgatewaytest.Node(t) + `", "args": ["` +
		mcpgatewaytest.NodeScript(t, "@modelcontextprotocol/server-everything/dist/index.js") + `", "stdio"], "prefix": "ev"}}}`
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.ServersFile = file
	c, g := startGateway(t, cfg, Options{})
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 60*time.Second, "the file's server to be ready", func() bool {
		return serverState(t, c, "everything").GetState() == pb.ServerState_SERVER_STATE_READY
	})
	if r := call(t, c, "ev_echo", `{"message":"from file"}`); r.GetOutput() != "Echo: from file" {
		t.Errorf("ev_echo = %+v", r)
	}
	// One bad entry is a failed server; the others start.
	bad := filepath.Join(t.TempDir(), "mixed.json")
	body = `{"mcpServers": {"good": {"command": "` + mcpgatewaytest.Node(t) + `", "args": ["` +
		mcpgatewaytest.NodeScript(t, "@modelcontextprotocol/server-everything/dist/index.js") + `", "stdio"], "prefix": "good"},
		"broken": {"type": "carrier-pigeon", "url": "http://x"}}}`
	if err := os.WriteFile(bad, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.ServersFile = bad
	c3, g3 := startGateway(t, cfg, Options{})
	if err := g3.Start(); err != nil {
		t.Fatalf("Start with one bad entry: %v", err)
	}
	if s := serverState(t, c3, "broken"); s.GetState() != pb.ServerState_SERVER_STATE_FAILED || !strings.Contains(s.GetLastError(), "carrier-pigeon") {
		t.Errorf("the bad entry: %v", s)
	}
	testenv.WaitFor(t, 60*time.Second, "the good entry to be ready", func() bool {
		return serverState(t, c3, "good").GetState() == pb.ServerState_SERVER_STATE_READY
	})

	cfg.ServersFile = filepath.Join(t.TempDir(), "missing.json")
	g2 := New(cfg, Options{})
	defer g2.Close()
	if err := g2.Start(); err == nil || !strings.Contains(err.Error(), "missing.json") {
		t.Errorf("Start with a missing file: %v", err)
	}
}

// FuzzParseServers: any input either parses or is refused with an error; it never panics, and
// whatever parses passes the spec check every server passes.
func FuzzParseServers(f *testing.F) {
	f.Add(`{"mcpServers": {"a": {"command": "x", "args": ["//", "/*"]}}}`)
	f.Add(`{"servers": {"b": {"type": "http", "url": "http://h/mcp",}}, /* c */ }`)
	f.Add(`{"mcpServers": {"w": {"serverUrl": "https://x", "oauth": {"tokenUrl": "https://t"}}}}`)
	f.Add("{\"mcpServers\": {\"a\": {\"command\": \"x\\\"//\"}} // end")
	f.Fuzz(func(t *testing.T, in string) {
		specs, _, err := parseServerEntries([]byte(in), func(string) string { return "" })
		if err != nil {
			return
		}
		for _, s := range specs {
			if err := checkSpec("spec", s); err != nil {
				t.Fatalf("a parsed spec fails the check: %v", err)
			}
		}
	})
}

func TestStripJSONC(t *testing.T) {
	for in, want := range map[string]string{
		`{"a": "//not a comment", "b": "/*nor this*/"}`: `{"a": "//not a comment", "b": "/*nor this*/"}`,
		`{"a": 1, // c` + "\n" + `}`:                    `{"a": 1  ` + "    \n" + `}`,
		`[1, 2, ]`:                                      `[1, 2  ]`,
		`{"a": "\"//"} /* x */`:                         `{"a": "\"//"}        `,
	} {
		if got := string(stripJSONC([]byte(in))); got != want {
			t.Errorf("stripJSONC(%q) = %q, want %q", in, got, want)
		}
	}
}
