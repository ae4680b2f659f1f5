package mcpgateway

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"flag"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/secretenv"
	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
)

// The conformance suite's client mode starts the client under test as a command with the
// server's URL as its last argument. The command here is this test binary re-run with
// -test.run=TestConformanceClientHelper: it adds the suite's server to a Gateway over Streamable
// HTTP and drives it through the gateway's own API, so what is checked is the gateway as an
// MCP client.

// TestConformanceClientHelper is the client command; it does nothing in a normal test run.
func TestConformanceClientHelper(t *testing.T) {
	url := os.Getenv("HERMES_CONFORMANCE_URL")
	if args := flag.Args(); url == "" && len(args) > 0 && strings.HasPrefix(args[len(args)-1], "http") {
		url = args[len(args)-1]
	}
	if os.Getenv("HERMES_CONFORMANCE_CLIENT") != "1" || url == "" {
		t.Skip("run by TestConformanceClient")
	}
	scenario := os.Getenv("MCP_CONFORMANCE_SCENARIO")
	// The suite hands over credentials in MCP_CONFORMANCE_CONTEXT; the gateway reads secrets
	// from its environment, like an operator's.
	var conf struct {
		ClientID      string `json:"client_id"`
		ClientSecret  string `json:"client_secret"`
		PrivateKeyPEM string `json:"private_key_pem"`
		// Enterprise-managed authorization (SEP-990): the IdP, and the user's ID token.
		IdpClientID      string `json:"idp_client_id"`
		IdpIDToken       string `json:"idp_id_token"`
		IdpIssuer        string `json:"idp_issuer"`
		IdpTokenEndpoint string `json:"idp_token_endpoint"`
		// Workload identity federation: the workload's JWT.
		ValidJWT string `json:"valid_jwt"`
	}
	_ = json.Unmarshal([]byte(os.Getenv("MCP_CONFORMANCE_CONTEXT")), &conf)
	getenv := func(k string) string {
		switch k {
		case "CONFORMANCE_CLIENT_SECRET":
			return conf.ClientSecret
		case "CONFORMANCE_PRIVATE_KEY":
			return conf.PrivateKeyPEM
		case "CONFORMANCE_WORKLOAD_JWT":
			return conf.ValidJWT
		}
		return os.Getenv(k)
	}
	cfg := testConfig()
	enterprise := conf.IdpIDToken != ""
	authCode := strings.HasPrefix(scenario, "auth/") && !strings.HasPrefix(scenario, "auth/client-credentials") && !enterprise && scenario != "auth/wif-jwt-bearer"
	var key []byte
	if enterprise {
		key, _ = ParseOAuthKey(rand.Text() + rand.Text())
	}
	if authCode {
		// The suite's authorization server redirects at once; the helper plays the browser and
		// reads the redirect, so the redirect URI is never dialled.
		cfg.OAuthRedirectURL = "http://127.0.0.1:1/callback"
		if scenario == "auth/basic-cimd" {
			// The operator publishes Hermes' client metadata document at the URL the
			// scenario's authorization server expects.
			cfg.OAuthClientMetadataURL = "https://conformance-test.local/client-metadata.json"
		}
		key, _ = ParseOAuthKey(rand.Text() + rand.Text())
	}
	g := New(cfg, Options{Logger: testLogger(t), Getenv: getenv, Secrets: secretenv.New([]string{"CONFORMANCE_CLIENT_SECRET", "CONFORMANCE_PRIVATE_KEY", "CONFORMANCE_WORKLOAD_JWT"}, nil), OAuthKey: key})
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	spec := &pb.ServerSpec{Name: "conformance", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: url}}}
	if enterprise {
		spec.GetHttp().EnterpriseOauth = &pb.OAuthEnterprise{IdpIssuer: conf.IdpIssuer, IdpTokenUrl: conf.IdpTokenEndpoint, IdpClientId: conf.IdpClientID,
			ClientId: conf.ClientID, ClientSecretEnv: "CONFORMANCE_CLIENT_SECRET"}
		conformanceEnterprise(ctx, t, g, spec, conf.IdpIDToken)
		return
	}
	if authCode {
		uo := &pb.OAuthAuthorizationCode{ClientId: conf.ClientID}
		if conf.ClientID != "" && conf.ClientSecret != "" {
			uo.ClientSecretEnv = "CONFORMANCE_CLIENT_SECRET"
		}
		spec.GetHttp().UserOauth = uo
		conformanceUserOAuth(ctx, t, g, spec)
		return
	}
	switch {
	case scenario == "elicitation-sep1034-client-defaults":
		spec.Elicitation = "defaults"
	case scenario == "auth/wif-jwt-bearer":
		spec.GetHttp().Oauth = &pb.OAuthClientCredentials{ClientId: conf.ClientID, AssertionEnv: "CONFORMANCE_WORKLOAD_JWT"}
	case scenario == "auth/client-credentials-jwt":
		spec.GetHttp().Oauth = &pb.OAuthClientCredentials{ClientId: conf.ClientID, PrivateKeyEnv: "CONFORMANCE_PRIVATE_KEY"}
	case strings.HasPrefix(scenario, "auth/client-credentials"):
		spec.GetHttp().Oauth = &pb.OAuthClientCredentials{ClientId: conf.ClientID, ClientSecretEnv: "CONFORMANCE_CLIENT_SECRET"}
	}
	srv, err := g.AddServer(ctx, spec, true)
	if err != nil || srv.GetState() != pb.ServerState_SERVER_STATE_READY {
		t.Fatalf("connect: %v %v", srv, err)
	}
	switch scenario {
	case "elicitation-sep1034-client-defaults":
		r, err := g.CallTool(ctx, &pb.CallToolRequest{Server: "conformance", Tool: "test_client_elicitation_defaults", Arguments: `{}`})
		if err != nil || !r.GetSuccess() {
			t.Fatalf("test_client_elicitation_defaults: %v %v", r, err)
		}
	case "tools_call":
		r, err := g.CallTool(ctx, &pb.CallToolRequest{Server: "conformance", Tool: "add_numbers", Arguments: `{"a": 2, "b": 3}`})
		if err != nil || !r.GetSuccess() {
			t.Fatalf("add_numbers: %v %v", r, err)
		}
	case "sse-retry":
		r, err := g.CallTool(ctx, &pb.CallToolRequest{Server: "conformance", Tool: "test_reconnection", Arguments: `{}`})
		if err != nil || !r.GetSuccess() {
			t.Fatalf("test_reconnection: %v %v", r, err)
		}
	}
}

// conformanceUserOAuth connects a user's account through the authorization URL, as the user's
// browser would, and calls the server's first tool as that user.
func conformanceUserOAuth(ctx context.Context, t *testing.T, g *Gateway, spec *pb.ServerSpec) {
	if _, err := g.AddServer(ctx, spec, false); err != nil {
		t.Fatalf("add: %v", err)
	}
	authURL, _, err := g.ConnectServer(ctx, "conformance", "user-1")
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	conformanceConsent(ctx, t, g, authURL)
	reconnects := 0
	testenv.WaitFor(t, 15*time.Second, "the server's tools", func() bool {
		if tools, _ := g.Tools("conformance"); len(tools) > 0 {
			return true
		}
		// The server may refuse the user's new token (it moved to another authorization
		// server, SEP-2352): the connection ends and the user connects again, at most twice.
		if u, connected, err := g.ConnectServer(ctx, "conformance", "user-1"); err == nil && !connected && reconnects < 2 {
			reconnects++
			conformanceConsent(ctx, t, g, u)
		}
		return false
	})
	tools, _ := g.Tools("conformance")
	// A call may ask the user to consent to more scopes (step-up); the user does, at most
	// twice more, and calls again.
	for round := 0; ; round++ {
		r, err := g.CallTool(ctx, &pb.CallToolRequest{Name: tools[0].GetName(), Arguments: `{}`, UserId: "user-1"})
		if err == nil && r.GetErrorCode() == codeAuthRequired && r.GetAuthorizationUrl() != "" && round < 2 {
			conformanceConsent(ctx, t, g, r.GetAuthorizationUrl())
			continue
		}
		if err != nil || !r.GetSuccess() {
			t.Fatalf("%s: %v %v", tools[0].GetName(), r, err)
		}
		return
	}
}

// conformanceEnterprise connects a user with their ID token (as the user's application would,
// through ConnectServer) and calls the server's first tool as that user.
func conformanceEnterprise(ctx context.Context, t *testing.T, g *Gateway, spec *pb.ServerSpec, idToken string) {
	if _, err := g.AddServer(ctx, spec, false); err != nil {
		t.Fatalf("add: %v", err)
	}
	if err := g.ConnectEnterprise(ctx, "conformance", "user-1", idToken); err != nil {
		t.Fatalf("connect: %v", err)
	}
	testenv.WaitFor(t, 15*time.Second, "the server's tools", func() bool {
		tools, _ := g.Tools("conformance")
		return len(tools) > 0
	})
	tools, _ := g.Tools("conformance")
	r, err := g.CallTool(ctx, &pb.CallToolRequest{Name: tools[0].GetName(), Arguments: `{}`, UserId: "user-1"})
	if err != nil || !r.GetSuccess() {
		t.Fatalf("%s: %v %v", tools[0].GetName(), r, err)
	}
}

// conformanceConsent opens authURL as the user's browser would (the suite's authorization
// server approves at once) and hands the redirect to the callback's handler.
func conformanceConsent(ctx context.Context, t *testing.T, g *Gateway, authURL string) {
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(authURL)
	if err != nil {
		t.Fatalf("authorize: %v", err)
	}
	_ = resp.Body.Close()
	loc, err := neturl.Parse(resp.Header.Get("Location"))
	if err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("authorize answered %s, Location %q", resp.Status, resp.Header.Get("Location"))
	}
	q := loc.Query()
	if _, err := g.CompleteAuthorization(ctx, &pb.CompleteAuthorizationRequest{State: q.Get("state"), Code: q.Get("code"), Iss: q.Get("iss")}); err != nil {
		t.Fatalf("callback: %v", err)
	}
}

// TestConformanceClient runs the client scenarios of the official conformance suite that apply
// to the gateway against it (CONFORMANCE.md lists the others and why they do not apply).
func TestConformanceClient(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance suite takes a few seconds; skipped with -short")
	}
	scenarios := []string{"initialize", "tools_call", "sse-retry", "elicitation-sep1034-client-defaults", "auth/client-credentials-basic", "auth/client-credentials-jwt",
		// Per-user OAuth (user_oauth): the helper connects a user through the authorization URL.
		"auth/metadata-default", "auth/metadata-var1", "auth/metadata-var2", "auth/metadata-var3",
		"auth/offline-access-scope", "auth/offline-access-not-supported", "auth/scope-from-www-authenticate", "auth/scope-from-scopes-supported",
		"auth/scope-omitted-when-undefined", "auth/scope-retry-limit", "auth/token-endpoint-auth-basic", "auth/token-endpoint-auth-post",
		"auth/token-endpoint-auth-none", "auth/resource-mismatch", "auth/pre-registration",
		"auth/2025-03-26-oauth-metadata-backcompat", "auth/2025-03-26-oauth-endpoint-fallback",
		"auth/scope-step-up", "auth/basic-cimd",
		// Enterprise-managed authorization (enterprise_oauth, SEP-990): the helper connects a
		// user with the suite's ID token.
		"auth/cross-app-access-complete-flow"}
	if s := os.Getenv("HERMES_CONFORMANCE_SCENARIOS"); s != "" {
		scenarios = strings.Split(s, ",") // a subset, to reproduce one scenario
	}
	runConformanceClient(t, "@modelcontextprotocol/conformance", scenarios)
}

// runConformanceClient runs each scenario with the suite installed as the npm package suite,
// the client command being TestConformanceClientHelper; a scenario fails the test on any
// FAILURE or WARNING check (a SHOULD the client misses is a WARNING: basic-cimd's client id,
// scope-step-up's escalation).
func runConformanceClient(t *testing.T, suite string, scenarios []string) {
	index := filepath.Join(mcpgatewaytest.NPMDir(t), "node_modules", suite, "dist/index.js")
	if _, err := os.Stat(index); err != nil {
		t.Fatalf("the suite %s is not installed: %v", suite, err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, scenario := range scenarios {
		t.Run(scenario, func(t *testing.T) {
			// Each scenario is its own suite process (its servers on ports of their own) and its
			// own client process, mostly waiting: two at a time halve the suite's wall time.
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, mcpgatewaytest.ConformanceNode(t), index,
				"client", "--scenario", scenario, "-o", t.TempDir(),
				"--command", self+" -test.run=^TestConformanceClientHelper$ -test.count=1 --")
			cmd.Env = append(os.Environ(), "HERMES_CONFORMANCE_CLIENT=1")
			out, err := cmd.CombinedOutput()
			if err != nil || strings.Contains(string(out), "FAILURE") || strings.Contains(string(out), "WARNING") {
				t.Fatalf("scenario %s: %v\n%s", scenario, err, out)
			}
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, "Passed:") || strings.Contains(l, "SUCCESS") {
					t.Log(strings.TrimSpace(l))
				}
			}
		})
	}
}
