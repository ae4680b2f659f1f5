package mcpgateway

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/rpc"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// violationsOf runs one part of the spec check and returns its violations as
// "field: description" in the order they were recorded.
func violationsOf(check func(v *rpc.Violations)) []string {
	var v rpc.Violations
	check(&v)
	var out []string
	for _, f := range rpc.FieldViolations(v.Err()) {
		out = append(out, f.GetField()+": "+f.GetDescription())
	}
	return out
}

func TestValidateNames(t *testing.T) {
	tests := []struct {
		name string
		spec *pb.ServerSpec
		want []string
	}{
		{"valid", &pb.ServerSpec{Name: "ev", Prefix: "e_v-1"}, nil},
		{"no prefix", &pb.ServerSpec{Name: "ev"}, nil},
		{"missing name", &pb.ServerSpec{}, []string{"s.name: is required"}},
		{"bad name", &pb.ServerSpec{Name: "a b"}, []string{"s.name: must match ^[a-zA-Z0-9_-]{1,32}$"}},
		{"long name", &pb.ServerSpec{Name: strings.Repeat("a", 33)}, []string{"s.name: must match ^[a-zA-Z0-9_-]{1,32}$"}},
		{"bad prefix", &pb.ServerSpec{Name: "ev", Prefix: "x.y"}, []string{"s.prefix: must match ^[a-zA-Z0-9_-]{1,32}$"}},
		{"both", &pb.ServerSpec{Prefix: "x.y"}, []string{"s.name: is required", "s.prefix: must match ^[a-zA-Z0-9_-]{1,32}$"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violationsOf(func(v *rpc.Violations) { validateNames(v, "s", tt.spec) })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("validateNames (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateStdio(t *testing.T) {
	tests := []struct {
		name string
		st   *pb.StdioTransport
		want []string
	}{
		{"valid", &pb.StdioTransport{Command: "npx", Args: []string{"-y", "pkg"}, Env: map[string]string{"TOKEN": "x"}, WorkingDir: "/tmp"}, nil},
		{"nil", nil, []string{"s.stdio.command: is required"}},
		{"missing command", &pb.StdioTransport{}, []string{"s.stdio.command: is required"}},
		{"long command", &pb.StdioTransport{Command: strings.Repeat("c", maxCommand+1)}, []string{"s.stdio.command: is longer than 4096 bytes"}},
		{"too many args", &pb.StdioTransport{Command: "c", Args: make([]string, maxArgs+1)}, []string{"s.stdio.args: has 257 arguments; at most 256 are allowed"}},
		{"NUL in arg", &pb.StdioTransport{Command: "c", Args: []string{"ok", "a\x00b"}}, []string{"s.stdio.args[1]: must be at most 8192 bytes without NUL"}},
		{"long arg", &pb.StdioTransport{Command: "c", Args: []string{strings.Repeat("a", maxArg+1)}}, []string{"s.stdio.args[0]: must be at most 8192 bytes without NUL"}},
		{"env name with =", &pb.StdioTransport{Command: "c", Env: map[string]string{"A=B": "x"}}, []string{"s.stdio.env[A=B]: needs a name without '=' or NUL and a value of at most 32768 bytes"}},
		{"empty env name", &pb.StdioTransport{Command: "c", Env: map[string]string{"": "x"}}, []string{"s.stdio.env[]: needs a name without '=' or NUL and a value of at most 32768 bytes"}},
		{"long env value", &pb.StdioTransport{Command: "c", Env: map[string]string{"A": strings.Repeat("v", maxEnvValue+1)}}, []string{"s.stdio.env[A]: needs a name without '=' or NUL and a value of at most 32768 bytes"}},
		{"long working dir", &pb.StdioTransport{Command: "c", WorkingDir: strings.Repeat("d", maxCommand+1)}, []string{"s.stdio.working_dir: is longer than 4096 bytes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violationsOf(func(v *rpc.Violations) { validateStdio(v, "s.stdio", tt.st) })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("validateStdio (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateHTTP(t *testing.T) {
	tests := []struct {
		name string
		ht   *pb.HTTPTransport
		want []string
	}{
		{"valid", &pb.HTTPTransport{Url: "https://mcp.example.com/mcp", BearerTokenEnv: "MCP_TOKEN"}, nil},
		{"plain http", &pb.HTTPTransport{Url: "http://127.0.0.1:8080/mcp"}, nil},
		{"nil", nil, []string{"s.http.url: is required"}},
		{"missing url", &pb.HTTPTransport{}, []string{"s.http.url: is required"}},
		{"long url", &pb.HTTPTransport{Url: "https://h/" + strings.Repeat("p", maxURL)}, []string{"s.http.url: is longer than 2048 bytes"}},
		{"relative url", &pb.HTTPTransport{Url: "/mcp"}, []string{"s.http.url: must be an absolute http or https URL"}},
		{"other scheme", &pb.HTTPTransport{Url: "ftp://h/mcp"}, []string{"s.http.url: must be an absolute http or https URL"}},
		{"unparsable url", &pb.HTTPTransport{Url: "http://h/%zz"}, []string{"s.http.url: must be an absolute http or https URL"}},
		{"bad bearer env", &pb.HTTPTransport{Url: "https://h", BearerTokenEnv: "A B"}, []string{"s.http.bearer_token_env: must be an environment variable name"}},
		{"long bearer env", &pb.HTTPTransport{Url: "https://h", BearerTokenEnv: strings.Repeat("E", 257)}, []string{"s.http.bearer_token_env: must be an environment variable name"}},
		{"headers checked", &pb.HTTPTransport{Url: "https://h", Headers: map[string]string{"X-A": "1\n2"}}, []string{"s.http.headers[X-A]: needs a header name and a single-line value of at most 8192 bytes"}},
		{"oauth not checked here", &pb.HTTPTransport{Url: "https://h", Oauth: &pb.OAuthClientCredentials{}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violationsOf(func(v *rpc.Violations) { validateHTTP(v, "s.http", tt.ht) })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("validateHTTP (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateHeaders(t *testing.T) {
	many := map[string]string{}
	for i := range maxHeaders + 1 {
		many["X-"+strings.Repeat("h", i+1)] = "v"
	}
	const bad = "needs a header name and a single-line value of at most 8192 bytes"
	tests := []struct {
		name    string
		headers map[string]string
		want    []string
	}{
		{"none", nil, nil},
		{"valid", map[string]string{"X-Api-Key": "k", "Accept-Language": "de"}, nil},
		{"too many", many, []string{"h: has 65 headers; at most 64 are allowed"}},
		{"empty name", map[string]string{"": "v"}, []string{"h[]: " + bad}},
		{"colon in name", map[string]string{"X:Y": "v"}, []string{"h[X:Y]: " + bad}},
		{"space in name", map[string]string{"X Y": "v"}, []string{"h[X Y]: " + bad}},
		{"CR in value", map[string]string{"X": "a\rb"}, []string{"h[X]: " + bad}},
		{"NUL in value", map[string]string{"X": "a\x00b"}, []string{"h[X]: " + bad}},
		{"long value", map[string]string{"X": strings.Repeat("v", maxHeaderValue+1)}, []string{"h[X]: " + bad}},
		{"long name abbreviated", map[string]string{strings.Repeat("n", 100) + ":": "v"}, []string{"h[" + abbreviate(strings.Repeat("n", 100)+":", 64) + "]: " + bad}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violationsOf(func(v *rpc.Violations) { validateHeaders(v, "h", tt.headers) })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("validateHeaders (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateOAuth(t *testing.T) {
	ok := func(edit func(o *pb.OAuthClientCredentials)) *pb.OAuthClientCredentials {
		o := &pb.OAuthClientCredentials{TokenUrl: "https://auth.example.com/token", ClientId: "hermes", ClientSecretEnv: "MCP_SECRET", Scopes: []string{"read", "write:all"}}
		if edit != nil {
			edit(o)
		}
		return o
	}
	tests := []struct {
		name string
		o    *pb.OAuthClientCredentials
		want []string
	}{
		{"valid", ok(nil), nil},
		{"discovered token url", ok(func(o *pb.OAuthClientCredentials) { o.TokenUrl = "" }), nil},
		{"post", ok(func(o *pb.OAuthClientCredentials) { o.AuthMethod = "client_secret_post" }), nil},
		{"basic", ok(func(o *pb.OAuthClientCredentials) { o.AuthMethod = "client_secret_basic" }), nil},
		{"relative token url", ok(func(o *pb.OAuthClientCredentials) { o.TokenUrl = "/token" }), []string{"o.token_url: must be an absolute http or https URL of at most 2048 bytes"}},
		{"long token url", ok(func(o *pb.OAuthClientCredentials) { o.TokenUrl = "https://h/" + strings.Repeat("t", maxURL) }), []string{"o.token_url: must be an absolute http or https URL of at most 2048 bytes"}},
		{"missing client id", ok(func(o *pb.OAuthClientCredentials) { o.ClientId = "" }), []string{"o.client_id: is required, at most 256 bytes"}},
		{"long client id", ok(func(o *pb.OAuthClientCredentials) { o.ClientId = strings.Repeat("c", maxPattern+1) }), []string{"o.client_id: is required, at most 256 bytes"}},
		{"missing secret env", ok(func(o *pb.OAuthClientCredentials) { o.ClientSecretEnv = "" }), []string{"o.client_secret_env: must name an environment variable (or set private_key_env)"}},
		{"bad secret env", ok(func(o *pb.OAuthClientCredentials) { o.ClientSecretEnv = "A=B" }), []string{"o.client_secret_env: must name an environment variable (or set private_key_env)"}},
		{"too many scopes", ok(func(o *pb.OAuthClientCredentials) { o.Scopes = slicesOf("s", maxPatterns+1) }), []string{"o.scopes: has 65 scopes; at most 64 are allowed"}},
		{"bad scopes", ok(func(o *pb.OAuthClientCredentials) { o.Scopes = []string{"ok", "", "a b", `q"`} }), []string{
			"o.scopes[1]: must be a scope token of at most 256 bytes",
			"o.scopes[2]: must be a scope token of at most 256 bytes",
			"o.scopes[3]: must be a scope token of at most 256 bytes",
		}},
		{"bad auth method", ok(func(o *pb.OAuthClientCredentials) { o.AuthMethod = "private_key_jwt" }), []string{`o.auth_method: must be "client_secret_basic" or "client_secret_post"`}},
		{"all at once, in order", &pb.OAuthClientCredentials{TokenUrl: "ftp://h", AuthMethod: "x", Scopes: []string{""}}, []string{
			"o.token_url: must be an absolute http or https URL of at most 2048 bytes",
			"o.client_id: is required, at most 256 bytes",
			"o.client_secret_env: must name an environment variable (or set private_key_env)",
			"o.scopes[0]: must be a scope token of at most 256 bytes",
			`o.auth_method: must be "client_secret_basic" or "client_secret_post"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violationsOf(func(v *rpc.Violations) { validateOAuth(v, "o", tt.o) })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("validateOAuth (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateFilters(t *testing.T) {
	tests := []struct {
		name string
		spec *pb.ServerSpec
		want []string
	}{
		{"valid", &pb.ServerSpec{Include: []string{"read_*"}, Exclude: []string{"*_delete"}}, nil},
		{"too many", &pb.ServerSpec{Exclude: slicesOf("p", maxPatterns+1)}, []string{"s.exclude: has 65 patterns; at most 64 are allowed"}},
		{"long pattern", &pb.ServerSpec{Include: []string{strings.Repeat("p", maxPattern+1)}}, []string{"s.include[0]: is longer than 256 bytes"}},
		{"bad glob", &pb.ServerSpec{Include: []string{"ok", "[a"}}, []string{"s.include[1]: is not a valid glob: " + globError(t, "[a")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violationsOf(func(v *rpc.Violations) { validateFilters(v, "s", tt.spec) })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("validateFilters (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateCalls(t *testing.T) {
	tests := []struct {
		name string
		spec *pb.ServerSpec
		want []string
	}{
		{"valid", &pb.ServerSpec{CallTimeout: durationpb.New(time.Minute), Groups: []string{"dev", "read-only"}}, nil},
		{"zero timeout", &pb.ServerSpec{CallTimeout: durationpb.New(0)}, []string{"s.call_timeout: must be between 0 and 10m0s"}},
		{"long timeout", &pb.ServerSpec{CallTimeout: durationpb.New(maxCallTimeout + time.Second)}, []string{"s.call_timeout: must be between 0 and 10m0s"}},
		{"malformed timeout", &pb.ServerSpec{CallTimeout: &durationpb.Duration{Seconds: 1, Nanos: -1}}, []string{"s.call_timeout: must be between 0 and 10m0s"}},
		{"unknown protocol", &pb.ServerSpec{ProtocolVersion: "1999-01-01"}, []string{"s.protocol_version: must be one of " + strings.Join(mcp.SupportedProtocolVersions(), ", ")}},
		{"too many groups", &pb.ServerSpec{Groups: slicesOf("g", maxGroups+1)}, []string{"s.groups: has 17 groups; at most 16 are allowed"}},
		{"bad group", &pb.ServerSpec{Groups: []string{"ok", "a b"}}, []string{"s.groups[1]: must match ^[a-zA-Z0-9_-]{1,64}$"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violationsOf(func(v *rpc.Violations) { validateCalls(v, "s", tt.spec) })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("validateCalls (-want +got):\n%s", diff)
			}
		})
	}
}

func TestValidateClientFeatures(t *testing.T) {
	const badRoot = "needs a file:// URI of at most 4096 bytes and a name of at most 256"
	tests := []struct {
		name string
		spec *pb.ServerSpec
		want []string
	}{
		{"valid", &pb.ServerSpec{Sampling: &pb.SamplingPolicy{Allow: true, MaxTokens: 1000, PerMinute: 10}, Elicitation: "ask", Roots: []*pb.Root{{Uri: "file:///work", Name: "work"}}}, nil},
		{"sampling out of range", &pb.ServerSpec{Sampling: &pb.SamplingPolicy{MaxTokens: -1, PerMinute: maxSamplingRate + 1}}, []string{
			"s.sampling.max_tokens: must be between 0 and 32000",
			"s.sampling.per_minute: must be between 0 and 600",
		}},
		{"bad elicitation", &pb.ServerSpec{Elicitation: "accept"}, []string{`s.elicitation: must be "decline", "defaults" or "ask"`}},
		{"too many roots", &pb.ServerSpec{Roots: rootsOf(maxRoots + 1)}, []string{"s.roots: has 65 roots; at most 64 are allowed"}},
		{"http root", &pb.ServerSpec{Roots: []*pb.Root{{Uri: "file:///ok"}, {Uri: "https://h/x"}}}, []string{"s.roots[1]: " + badRoot}},
		{"long root name", &pb.ServerSpec{Roots: []*pb.Root{{Uri: "file:///ok", Name: strings.Repeat("n", maxPattern+1)}}}, []string{"s.roots[0]: " + badRoot}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violationsOf(func(v *rpc.Violations) { validateClientFeatures(v, "s", tt.spec) })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("validateClientFeatures (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidateSpecOrder pins the order in which the parts report, so a bad spec keeps
// getting its first violation from the same field.
func TestValidateSpecOrder(t *testing.T) {
	tests := []struct {
		name string
		spec *pb.ServerSpec
		want []string
	}{
		{"nil", nil, []string{"spec: is required"}},
		{"valid stdio", &pb.ServerSpec{Name: "ev", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{Command: "npx"}}}, nil},
		{"valid http with oauth", &pb.ServerSpec{Name: "ev", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: "https://h/mcp", Oauth: &pb.OAuthClientCredentials{ClientId: "c", ClientSecretEnv: "S"}}}}, nil},
		{"no transport", &pb.ServerSpec{Name: "ev"}, []string{"spec.transport: set stdio or http"}},
		{"everything wrong, stdio", &pb.ServerSpec{
			Prefix:          "x.y",
			Transport:       &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{}},
			Include:         []string{"[a"},
			CallTimeout:     durationpb.New(0),
			Elicitation:     "x",
			ProtocolVersion: "0",
		}, []string{
			"spec.name: is required",
			"spec.prefix: must match ^[a-zA-Z0-9_-]{1,32}$",
			"spec.stdio.command: is required",
			"spec.include[0]: is not a valid glob: " + globError(t, "[a"),
			"spec.call_timeout: must be between 0 and 10m0s",
			"spec.protocol_version: must be one of " + strings.Join(mcp.SupportedProtocolVersions(), ", "),
			`spec.elicitation: must be "decline", "defaults" or "ask"`,
		}},
		{"everything wrong, http", &pb.ServerSpec{
			Name:      "a b",
			Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: "/x", Oauth: &pb.OAuthClientCredentials{ClientSecretEnv: "S"}}},
			Groups:    []string{"."},
			Roots:     []*pb.Root{{Uri: "/x"}},
		}, []string{
			"spec.name: must match ^[a-zA-Z0-9_-]{1,32}$",
			"spec.http.url: must be an absolute http or https URL",
			"spec.groups[0]: must match ^[a-zA-Z0-9_-]{1,64}$",
			"spec.roots[0]: needs a file:// URI of at most 4096 bytes and a name of at most 256",
			"spec.http.oauth.client_id: is required, at most 256 bytes",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := violationsOf(func(v *rpc.Violations) { ValidateSpec(v, "spec", tt.spec) })
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ValidateSpec (-want +got):\n%s", diff)
			}
		})
	}
}

func slicesOf(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func rootsOf(n int) []*pb.Root {
	out := make([]*pb.Root, n)
	for i := range out {
		out[i] = &pb.Root{Uri: "file:///r"}
	}
	return out
}

// globError is the error validatePatterns gives pat, which the spec check quotes.
func globError(t *testing.T, pat string) string {
	t.Helper()
	err := validatePatterns([]string{pat})
	if err == nil {
		t.Fatalf("validatePatterns(%q) = nil, want an error", pat)
	}
	return err.Error()
}
