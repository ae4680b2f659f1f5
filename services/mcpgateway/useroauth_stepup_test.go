package mcpgateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// stepUpMCP is protectedMCP with a second tool, publish, that needs the scope docs:write: a
// call with a token without it is answered 403 insufficient_scope asking for challenge (the
// MCP authorization spec's step-up). whoami needs docs:read only.
func stepUpMCP(t *testing.T, a *fakeAS, challenge string) *httptest.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "account " + req.Extra.TokenInfo.UserID}}}, nil, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "publish"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "published by " + req.Extra.TokenInfo.UserID}}}, nil, nil
	})
	mux := http.NewServeMux()
	var srv *httptest.Server
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"resource": srv.URL + "/mcp", "authorization_servers": []string{a.srv.URL}})
	})
	inner := auth.RequireBearerToken(a.verify, &auth.RequireBearerTokenOptions{Scopes: []string{"docs:read"}})(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil))
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		a.mu.Lock()
		grant, known := a.access[tok]
		a.mu.Unlock()
		if !ok || !known {
			w.Header().Set("WWW-Authenticate", `Bearer scope="docs:read", resource_metadata="`+srv.URL+`/.well-known/oauth-protected-resource/mcp"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if bytes.Contains(body, []byte(`"name":"publish"`)) && !slices.Contains(strings.Fields(grant.scope), "docs:write") {
			w.Header().Set("WWW-Authenticate", `Bearer error="insufficient_scope", scope="`+challenge+`", resource_metadata="`+srv.URL+`/.well-known/oauth-protected-resource/mcp"`)
			http.Error(w, "insufficient scope", http.StatusForbidden)
			return
		}
		inner.ServeHTTP(w, r)
	})
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// waitDocsTools waits until the gateway lists n tools of the server docs (the shared session
// lists them with the first connected user's token).
func waitDocsTools(t *testing.T, g *Gateway, n int) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, "the docs tools", func() bool {
		tools, _ := g.Tools("docs")
		return len(tools) == n
	})
}

// TestUserOAuthStepUp: a 403 insufficient_scope to a user's call asks that user (only) to
// consent to the union of their scopes and the challenged ones; the old connection serves
// until the new one lands; another user's connection is never widened by it, and a widened
// token is never used for another user. A server that asks for scopes the connection already
// asked for is not asked again (no loop).
func TestUserOAuthStepUp(t *testing.T) {
	type step struct {
		user, tool string
		consent    bool   // the user opens the last authorization URL they were given
		want       string // "ok:<text>", "consent:<scopes asked>", or an error code
	}
	for _, tc := range []struct {
		name      string
		challenge string // the scope of the 403 challenge
		steps     []step
	}{
		{"step-up per user", "docs:read docs:write", []step{
			{user: "alice", tool: "whoami", want: "ok:account alice@provider"},
			{user: "bob", tool: "whoami", want: "ok:account bob@provider"},
			{user: "alice", tool: "publish", want: "consent:docs:read docs:write"},
			{user: "alice", tool: "whoami", want: "ok:account alice@provider"}, // the old connection serves meanwhile
			{user: "bob", tool: "publish", want: "consent:docs:read docs:write"},
			{user: "alice", consent: true},
			{user: "alice", tool: "publish", want: "ok:published by alice@provider"},
			{user: "bob", tool: "publish", want: "consent:docs:read docs:write"}, // alice's consent did not widen bob's
			{user: "bob", tool: "whoami", want: "ok:account bob@provider"},
			{user: "bob", consent: true},
			{user: "bob", tool: "publish", want: "ok:published by bob@provider"},
			{user: "alice", tool: "publish", want: "ok:published by alice@provider"},
		}},
		{"challenge of only the new scope: the union is asked", "docs:write", []step{
			{user: "中文用户", tool: "publish", want: "consent:docs:read docs:write"},
			{user: "中文用户", consent: true},
			{user: "中文用户", tool: "publish", want: "ok:published by 中文用户@provider"},
		}},
		{"a scope already asked for is not asked again", "docs:read", []step{
			{user: "carol", tool: "publish", want: codeRejected},
			{user: "carol", tool: "whoami", want: "ok:account carol@provider"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			as := newFakeAS(t)
			srv := stepUpMCP(t, as, tc.challenge)
			cfg := testConfig()
			cfg.OAuthRedirectURL = testRedirect
			key, _ := ParseOAuthKey(strings.Repeat("k", 40))
			store, err := OpenBoltServerStore(filepath.Join(t.TempDir(), "gw.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			client, g := startGateway(t, cfg, Options{Store: store, OAuthKey: key})
			if _, err := client.AddServer(ctx, &pb.AddServerRequest{Spec: userOAuthSpec(srv.URL + "/mcp")}); err != nil {
				t.Fatal(err)
			}
			var answers strings.Builder // every call's answer, checked for tokens at the end
			lastURL := map[string]string{}
			connected := map[string]bool{}
			connect := func(user, authURL string) {
				t.Helper()
				if _, err := client.CompleteAuthorization(ctx, browser(t, authURL, user+"@provider")); err != nil {
					t.Fatalf("%s consents: %v", user, err)
				}
			}
			for i, st := range tc.steps {
				if !connected[st.user] {
					cs, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: st.user})
					if err != nil {
						t.Fatal(err)
					}
					connect(st.user, cs.GetAuthorizationUrl())
					connected[st.user] = true
					waitDocsTools(t, g, 2)
				}
				if st.consent {
					connect(st.user, lastURL[st.user])
					continue
				}
				r, err := client.CallTool(ctx, &pb.CallToolRequest{Server: "docs", Tool: st.tool, Arguments: `{}`, UserId: st.user})
				if err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				answers.WriteString(r.String())
				var got string
				switch {
				case r.GetSuccess():
					got = "ok:" + r.GetOutput()
				case r.GetErrorCode() == codeAuthRequired:
					u, err := url.Parse(r.GetAuthorizationUrl())
					if err != nil || !strings.Contains(r.GetOutput(), r.GetAuthorizationUrl()) {
						t.Fatalf("step %d: authorization URL %q, output %q", i, r.GetAuthorizationUrl(), r.GetOutput())
					}
					lastURL[st.user] = r.GetAuthorizationUrl()
					got = "consent:" + u.Query().Get("scope")
				default:
					got = r.GetErrorCode()
				}
				if diff := cmp.Diff(st.want, got); diff != "" {
					t.Fatalf("step %d: %s calls %s (-want +got):\n%s\n%s", i, st.user, st.tool, diff, r.GetOutput())
				}
			}
			// No token the authorization server issued reaches the results.
			as.mu.Lock()
			issued := slices.Clone(as.issued)
			as.mu.Unlock()
			if len(issued) == 0 {
				t.Fatal("no token issued")
			}
			for _, tok := range issued {
				if strings.Contains(answers.String(), tok) {
					t.Fatalf("a token reached a call's answer")
				}
			}
		})
	}
}

// TestUserOAuthClientID: the client id per-user OAuth uses, by what the operator configured
// and what the authorization server supports: a preregistered client first, then the
// operator's Client ID Metadata Document when the server supports such documents, else
// dynamic registration.
func TestUserOAuthClientID(t *testing.T) {
	const docURL = "https://hermes.example.com/v1/mcp/oauth/client-metadata.json"
	for _, tc := range []struct {
		name          string
		asSupports    bool
		metadataURL   string
		preregistered string
		want          string // the client id at authorize; "registered" for a registered one
	}{
		{"supported and configured", true, docURL, "", docURL},
		{"supported, not configured", true, "", "", "registered"},
		{"configured, not supported", false, docURL, "", "registered"},
		{"preregistered client wins", true, docURL, "hermes-客户端", "hermes-客户端"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			as := newFakeAS(t)
			as.mu.Lock()
			as.cimd = tc.asSupports
			// The authorization server has fetched the document, or knows the preregistered
			// client; both name the gateway's redirect URI.
			as.clients[docURL] = testRedirect
			if tc.preregistered != "" {
				as.clients[tc.preregistered] = testRedirect
			}
			as.mu.Unlock()
			srv := protectedMCP(t, as)
			cfg := testConfig()
			cfg.OAuthRedirectURL = testRedirect
			cfg.OAuthClientMetadataURL = tc.metadataURL
			key, _ := ParseOAuthKey(strings.Repeat("k", 40))
			store, err := OpenBoltServerStore(filepath.Join(t.TempDir(), "gw.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			client, g := startGateway(t, cfg, Options{Store: store, OAuthKey: key})
			spec := userOAuthSpec(srv.URL + "/mcp")
			spec.GetHttp().GetUserOauth().ClientId = tc.preregistered
			if _, err := client.AddServer(ctx, &pb.AddServerRequest{Spec: spec}); err != nil {
				t.Fatal(err)
			}
			cs, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "dana"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.CompleteAuthorization(ctx, browser(t, cs.GetAuthorizationUrl(), "dana@provider")); err != nil {
				t.Fatal(err)
			}
			waitDocsTools(t, g, 1)
			r, err := client.CallTool(ctx, &pb.CallToolRequest{Server: "docs", Tool: "whoami", Arguments: `{}`, UserId: "dana"})
			if err != nil || r.GetOutput() != "account dana@provider" {
				t.Fatalf("call: %v %v", r, err)
			}
			as.mu.Lock()
			got := as.clientIDs[0]
			if got != docURL && got != tc.preregistered {
				got = "registered"
			}
			as.mu.Unlock()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("client id (-want +got):\n%s", diff)
			}
		})
	}
}

// TestClientMetadataDocument: the URL the operator gives is checked, and the document Hermes
// serves names that URL as its client id and the redirect URI.
func TestClientMetadataDocument(t *testing.T) {
	for _, tc := range []struct {
		url, redirect string
		ok, served    bool
	}{
		{"https://hermes.example.com" + ClientMetadataPath, testRedirect, true, true},
		{"https://static.example.com/hermes/客户端.json", testRedirect, true, false},
		{"", "", true, false},
		{"http://hermes.example.com" + ClientMetadataPath, testRedirect, false, false},
		{"https://hermes.example.com/", testRedirect, false, false},
		{"https://hermes.example.com/doc.json#x", testRedirect, false, false},
		{"https://user:pw@hermes.example.com/doc.json", testRedirect, false, false},
		{"https://hermes.example.com/doc.json", "", false, false},
	} {
		err := CheckClientMetadataURL(tc.url, tc.redirect)
		if (err == nil) != tc.ok {
			t.Errorf("CheckClientMetadataURL(%q, %q) = %v, want ok %v", tc.url, tc.redirect, err, tc.ok)
		}
		cfg := Config{OAuthClientMetadataURL: tc.url, OAuthRedirectURL: tc.redirect}
		if got := tc.ok && cfg.ServesClientMetadata(); got != tc.served {
			t.Errorf("%q served = %v, want %v", tc.url, got, tc.served)
		}
		if !tc.ok || tc.url == "" {
			continue
		}
		rec := httptest.NewRecorder()
		ClientMetadataHandler(cfg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, ClientMetadataPath, nil))
		var doc struct {
			ClientID     string   `json:"client_id"`
			RedirectURIs []string `json:"redirect_uris"`
			AuthMethod   string   `json:"token_endpoint_auth_method"`
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		want := struct {
			ClientID     string   `json:"client_id"`
			RedirectURIs []string `json:"redirect_uris"`
			AuthMethod   string   `json:"token_endpoint_auth_method"`
		}{tc.url, []string{tc.redirect}, "none"}
		if diff := cmp.Diff(want, doc); diff != "" || rec.Header().Get("Content-Type") != "application/json" {
			t.Errorf("document (-want +got):\n%s", diff)
		}
	}
}
