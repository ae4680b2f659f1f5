package mcpgateway

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// fakeAS is an OAuth authorization server with dynamic client registration, PKCE, refresh
// (rotating refresh tokens) and revocation. Its authorize endpoint logs the browser in as the
// account of the X-Login header and redirects at once.
type fakeAS struct {
	srv *httptest.Server

	mu sync.Mutex // guards everything below
	// firstExpiry is the expires_in of the next token issued by a code exchange (then 3600).
	firstExpiry int
	clients     map[string]string // client id → redirect URI
	codes       map[string]asCode
	access      map[string]asToken // access token → grant
	refresh     map[string]string  // refresh token → account
	issued      []string           // every token issued, for the leak checks
	grants      map[string]int     // grant_type → count
	revoked     []string
	resources   []string // resource parameters seen (authorize and token)
	scopes      []string // scope parameters seen at authorize
	clientIDs   []string // client_id parameters seen at authorize
	// cimd makes the metadata advertise client_id_metadata_document_supported.
	cimd bool
}

type asCode struct {
	account, challenge, redirect, client, scope string
}

type asToken struct {
	account string
	scope   string // the scopes granted, space-separated
	expires time.Time
}

func newFakeAS(t *testing.T) *fakeAS {
	a := &fakeAS{clients: map[string]string{}, codes: map[string]asCode{}, access: map[string]asToken{}, refresh: map[string]string{}, grants: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		cimd := a.cimd
		a.mu.Unlock()
		writeJSON(w, map[string]any{
			"client_id_metadata_document_supported": cimd,
			"issuer":                                a.srv.URL,
			"authorization_endpoint":                a.srv.URL + "/authorize",
			"token_endpoint":                        a.srv.URL + "/token",
			"registration_endpoint":                 a.srv.URL + "/register",
			"revocation_endpoint":                   a.srv.URL + "/revoke",
			"response_types_supported":              []string{"code"},
			"code_challenge_methods_supported":      []string{"S256"},
		})
	})
	mux.HandleFunc("/register", func(w http.ResponseWriter, r *http.Request) {
		var m oauthex.ClientRegistrationMetadata
		_ = json.NewDecoder(r.Body).Decode(&m)
		id := randomText()
		a.mu.Lock()
		a.clients[id] = m.RedirectURIs[0]
		a.mu.Unlock()
		writeJSONStatus(w, http.StatusCreated, map[string]any{"client_id": id, "redirect_uris": m.RedirectURIs, "token_endpoint_auth_method": "none"})
	})
	mux.HandleFunc("/authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.clients[q.Get("client_id")] != q.Get("redirect_uri") || q.Get("code_challenge_method") != "S256" || q.Get("response_type") != "code" {
			http.Error(w, "bad authorization request", http.StatusBadRequest)
			return
		}
		a.resources = append(a.resources, q.Get("resource"))
		a.scopes = append(a.scopes, q.Get("scope"))
		a.clientIDs = append(a.clientIDs, q.Get("client_id"))
		code := randomText()
		a.codes[code] = asCode{account: r.Header.Get("X-Login"), challenge: q.Get("code_challenge"), redirect: q.Get("redirect_uri"), client: q.Get("client_id"), scope: q.Get("scope")}
		http.Redirect(w, r, q.Get("redirect_uri")+"?code="+code+"&state="+url.QueryEscape(q.Get("state")), http.StatusFound)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		a.mu.Lock()
		defer a.mu.Unlock()
		gt := r.PostForm.Get("grant_type")
		a.grants[gt]++
		var account, scope string
		expiry := 3600
		switch gt {
		case "authorization_code":
			c, ok := a.codes[r.PostForm.Get("code")]
			delete(a.codes, r.PostForm.Get("code"))
			sum := sha256.Sum256([]byte(r.PostForm.Get("code_verifier")))
			if !ok || base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge || r.PostForm.Get("redirect_uri") != c.redirect || r.PostForm.Get("client_id") != c.client {
				writeJSONStatus(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
				return
			}
			a.resources = append(a.resources, r.PostForm.Get("resource"))
			account, scope = c.account, c.scope
			if a.firstExpiry > 0 {
				expiry, a.firstExpiry = a.firstExpiry, 0
			}
		case "refresh_token":
			rt := r.PostForm.Get("refresh_token")
			var ok bool
			if account, ok = a.refresh[rt]; !ok {
				writeJSONStatus(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
				return
			}
			delete(a.refresh, rt) // rotation: a refresh token works once
		default:
			writeJSONStatus(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type"})
			return
		}
		at, rt := "at-"+randomText(), "rt-"+randomText()
		a.access[at] = asToken{account: account, scope: scope, expires: time.Now().Add(time.Duration(expiry) * time.Second)}
		a.refresh[rt] = account
		a.issued = append(a.issued, at, rt)
		writeJSON(w, map[string]any{"access_token": at, "refresh_token": rt, "token_type": "Bearer", "expires_in": expiry})
	})
	mux.HandleFunc("/revoke", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		a.mu.Lock()
		defer a.mu.Unlock()
		tok := r.PostForm.Get("token")
		a.revoked = append(a.revoked, tok)
		delete(a.access, tok)
		delete(a.refresh, tok)
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *fakeAS) verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	g, ok := a.access[token]
	if !ok || time.Now().After(g.expires) {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{UserID: g.account, Expiration: g.expires, Scopes: []string{"docs:read"}}, nil
}

func writeJSON(w http.ResponseWriter, v any) { writeJSONStatus(w, http.StatusOK, v) }

func writeJSONStatus(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func randomText() string { return rand.Text() }

// protectedMCP is an MCP server at /mcp that requires the fake AS's tokens; its tool whoami
// answers with the account of the token it was called with.
func protectedMCP(t *testing.T, a *fakeAS) *httptest.Server {
	return bearerMCP(t, func() string { return a.srv.URL }, a.verify, []string{"docs:read", "docs:write"}, []string{"docs:read"})
}

// bearerMCP is an MCP server at /mcp whose protected resource metadata names the authorization
// server as returns (asked at each request) and scopesSupported (none: the key left out); /mcp
// takes the tokens verify accepts, with the required scopes; its tool whoami answers with the
// token's account.
func bearerMCP(t *testing.T, as func() string, verify auth.TokenVerifier, scopesSupported, required []string) *httptest.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "docs", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "the account"}, func(_ context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "account " + req.Extra.TokenInfo.UserID}}}, nil, nil
	})
	mux := http.NewServeMux()
	var srv *httptest.Server
	mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
		prm := map[string]any{"resource": srv.URL + "/mcp", "authorization_servers": []string{as()}}
		if scopesSupported != nil {
			prm["scopes_supported"] = scopesSupported
		}
		writeJSON(w, prm)
	})
	var opts *auth.RequireBearerTokenOptions
	if required != nil {
		opts = &auth.RequireBearerTokenOptions{Scopes: required}
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	mux.Handle("/mcp", auth.RequireBearerToken(verify, opts)(h))
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// browser follows an authorization URL as the account's browser would, and returns the
// authorization response the redirect carries.
func browser(t *testing.T, authURL, account string) *pb.CompleteAuthorizationRequest {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, authURL, nil)
	req.Header.Set("X-Login", account)
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("authorize answered %s", resp.Status)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(loc.String(), testRedirect) {
		t.Fatalf("redirected to %s, not the gateway's redirect URI", loc)
	}
	return &pb.CompleteAuthorizationRequest{State: loc.Query().Get("state"), Code: loc.Query().Get("code")}
}

const testRedirect = "http://hermes.test/v1/mcp/oauth/callback"

// syncBuffer is a log sink written from many goroutines.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func userOAuthSpec(url string) *pb.ServerSpec {
	return &pb.ServerSpec{Name: "docs", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: url, UserOauth: &pb.OAuthAuthorizationCode{}}}}
}

// TestUserOAuth: users connect their own accounts through the authorization URL; each user's
// calls use only their own token; tokens are refreshed, revoked on disconnect, and never in
// clear in the store, the logs or an RPC response. Run on both stores.
func TestUserOAuth(t *testing.T) {
	for name, open := range map[string]func(t *testing.T) (ServerStore, func() []byte){
		"bolt": func(t *testing.T) (ServerStore, func() []byte) {
			path := filepath.Join(t.TempDir(), "mcpgateway.db")
			s, err := OpenBoltServerStore(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s, func() []byte {
				// bbolt holds the file open; its bytes are on disk after each commit.
				raw, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				return raw
			}
		},
		"redis": func(t *testing.T) (ServerStore, func() []byte) {
			rdb, prefix := testenv.Redis(t)
			s := NewRedisServerStore(rdb, prefix+"mcpgateway:")
			return s, func() []byte {
				var all bytes.Buffer
				keys, err := rdb.Keys(context.Background(), prefix+"*").Result()
				if err != nil {
					t.Fatal(err)
				}
				for _, k := range keys {
					switch rdb.Type(context.Background(), k).Val() {
					case "hash":
						for f, v := range rdb.HGetAll(context.Background(), k).Val() {
							all.WriteString(f + v)
						}
					case "string":
						all.WriteString(rdb.Get(context.Background(), k).Val())
					}
				}
				return all.Bytes()
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			store, dump := open(t)
			testUserOAuth(t, store, dump)
		})
	}
}

func testUserOAuth(t *testing.T, store ServerStore, dump func() []byte) {
	ctx := context.Background()
	as := newFakeAS(t)
	mcpSrv := protectedMCP(t, as)
	logs := &syncBuffer{}
	cfg := testConfig()
	cfg.OAuthRedirectURL = testRedirect
	key, err := ParseOAuthKey(strings.Repeat("k", 40))
	if err != nil {
		t.Fatal(err)
	}
	client, g := startGateway(t, cfg, Options{
		Store:    store,
		OAuthKey: key,
		Logger:   slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	var responses []proto.Message // every RPC answer, checked for tokens at the end
	if _, err := client.AddServer(ctx, &pb.AddServerRequest{Spec: userOAuthSpec(mcpSrv.URL + "/mcp")}); err != nil {
		t.Fatal(err)
	}

	// Alice connects first, through ConnectServer; her first token expires at once, so her first
	// call refreshes it.
	as.mu.Lock()
	as.firstExpiry = 1
	as.mu.Unlock()
	cs, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "alice"})
	if err != nil || cs.GetAuthorizationUrl() == "" {
		t.Fatalf("ConnectServer: %v %v", cs, err)
	}
	responses = append(responses, cs)
	// Asking again while the link is pending gives the same link (a second call must not break
	// the one the user is about to open); its state is kept sealed, never in clear.
	again, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "alice"})
	if err != nil || again.GetAuthorizationUrl() != cs.GetAuthorizationUrl() {
		t.Fatalf("ConnectServer again: %v %v, want the pending link %s", again, err, cs.GetAuthorizationUrl())
	}
	if u, err := url.Parse(cs.GetAuthorizationUrl()); err != nil || len(u.Query().Get("state")) < 32 || bytes.Contains(dump(), []byte(u.Query().Get("state"))) {
		t.Fatalf("the pending state is in the store in clear (or the link has none): %v", err)
	}
	aliceResp := browser(t, cs.GetAuthorizationUrl(), "alice@provider")
	done, err := client.CompleteAuthorization(ctx, aliceResp)
	if err != nil || done.GetServer() != "docs" {
		t.Fatalf("CompleteAuthorization: %v %v", done, err)
	}
	responses = append(responses, done)

	// The callback's state works once.
	if _, err := client.CompleteAuthorization(ctx, aliceResp); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("replayed state: %v, want invalid", err)
	}
	// A state nobody issued is refused.
	if _, err := client.CompleteAuthorization(ctx, &pb.CompleteAuthorizationRequest{State: randomText(), Code: "x"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("forged state: %v, want invalid", err)
	}

	// The tools are listed once a user has connected.
	testenv.WaitFor(t, 30*time.Second, "the docs tools", func() bool {
		tools, _ := g.Tools("docs")
		return len(tools) == 1
	})
	call := func(user string) *pb.CallToolResponse {
		t.Helper()
		r, err := client.CallTool(ctx, &pb.CallToolRequest{Server: "docs", Tool: "whoami", UserId: user})
		if err != nil {
			t.Fatal(err)
		}
		responses = append(responses, r)
		return r
	}
	if r := call("alice"); !r.GetSuccess() || r.GetOutput() != "account alice@provider" {
		t.Fatalf("alice's call: %v", r)
	}
	as.mu.Lock()
	refreshes := as.grants["refresh_token"]
	as.mu.Unlock()
	if refreshes == 0 {
		t.Fatal("alice's expired token was not refreshed")
	}

	// Bob has no connection: his call answers with the URL to connect, never with alice's account.
	r := call("bob")
	if r.GetSuccess() || r.GetErrorCode() != codeAuthRequired || r.GetAuthorizationUrl() == "" || !strings.Contains(r.GetOutput(), r.GetAuthorizationUrl()) {
		t.Fatalf("bob's call before connecting: %v", r)
	}
	// A call without a user never borrows anyone's connection.
	if r := call(""); r.GetSuccess() || r.GetErrorCode() != codeAuthRequired {
		t.Fatalf("call without a user: %v", r)
	}
	// Bob's state carries bob: completing it connects bob, and alice keeps her own account.
	bobResp := browser(t, r.GetAuthorizationUrl(), "bob@provider")
	if _, err := client.CompleteAuthorization(ctx, bobResp); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := call("bob"); r.GetOutput() != "account bob@provider" {
			t.Fatalf("bob's call: %v", r)
		}
		if r := call("alice"); r.GetOutput() != "account alice@provider" {
			t.Fatalf("alice's call after bob connected: %v", r)
		}
	}
	// Another replica with the same store and key serves alice's connection (a callback may
	// land on any replica, a call on any other).
	g2 := New(cfg, Options{Store: store, OAuthKey: key, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	t.Cleanup(g2.Close)
	if err := g2.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the second replica's docs tools", func() bool {
		tools, _ := g2.Tools("docs")
		return len(tools) == 1
	})
	call2 := func(user string) *pb.CallToolResponse {
		t.Helper()
		r, err := g2.CallTool(ctx, &pb.CallToolRequest{Server: "docs", Tool: "whoami", UserId: user})
		if err != nil {
			t.Fatal(err)
		}
		responses = append(responses, r)
		return r
	}
	if r := call2("alice"); r.GetOutput() != "account alice@provider" {
		t.Fatalf("alice's call on the second replica: %v", r)
	}

	// A sealed record moved to another user's key does not open: bob's record under carol.
	conns := store.(ConnectionStore)
	sealed, err := conns.GetConnection(ctx, "docs", "bob")
	if err != nil || sealed == nil {
		t.Fatal("bob's connection is not stored", err)
	}
	if err := conns.PutConnection(ctx, "docs", "carol", sealed); err != nil {
		t.Fatal(err)
	}
	if r := call("carol"); r.GetErrorCode() != codeAuthRequired {
		t.Fatalf("carol with bob's sealed record: %v", r)
	}

	// Resources of the shared session are not served: they would be a connected user's.
	if _, err := client.ListResources(ctx, &pb.ListResourcesRequest{Server: "docs"}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("ListResources of a per-user server: %v", err)
	}
	list, err := client.ListServers(ctx, &pb.ListServersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	responses = append(responses, list)

	// Alice disconnects: her tokens are revoked and her next call asks her to connect again.
	dis, err := client.DisconnectServer(ctx, &pb.DisconnectServerRequest{Server: "docs", UserId: "alice"})
	if err != nil || !dis.GetDisconnected() || !dis.GetRevoked() {
		t.Fatalf("DisconnectServer: %v %v", dis, err)
	}
	responses = append(responses, dis)
	if r := call("alice"); r.GetErrorCode() != codeAuthRequired {
		t.Fatalf("alice's call after disconnecting: %v", r)
	}
	if r := call2("alice"); r.GetErrorCode() != codeAuthRequired {
		t.Fatalf("alice's call on the second replica after disconnecting on the first: %v", r)
	}
	if r := call("bob"); r.GetOutput() != "account bob@provider" {
		t.Fatalf("bob's call after alice disconnected: %v", r)
	}
	// A token revoked at the provider (not through Hermes) ends bob's connection at his next call.
	as.mu.Lock()
	for tok, gr := range as.access {
		if gr.account == "bob@provider" {
			delete(as.access, tok)
		}
	}
	as.mu.Unlock()
	if r := call("bob"); r.GetErrorCode() != codeAuthRequired {
		t.Fatalf("bob's call with a token revoked at the provider: %v", r)
	}

	// A refresh the provider refuses ends the connection: dave's token expires at once and his
	// refresh token is no longer valid.
	as.mu.Lock()
	as.firstExpiry = 1
	as.mu.Unlock()
	dc, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "dave"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.CompleteAuthorization(ctx, browser(t, dc.GetAuthorizationUrl(), "dave@provider")); err != nil {
		t.Fatal(err)
	}
	as.mu.Lock()
	for rt, acct := range as.refresh {
		if acct == "dave@provider" {
			delete(as.refresh, rt)
		}
	}
	as.mu.Unlock()
	if r := call("dave"); r.GetErrorCode() != codeAuthRequired {
		t.Fatalf("dave's call after the provider refused his refresh: %v", r)
	}
	if sealed, _ := conns.GetConnection(ctx, "docs", "dave"); sealed != nil {
		t.Fatal("dave's dead connection is still stored")
	}

	// No token the authorization server issued is in clear anywhere.
	as.mu.Lock()
	issued := append([]string(nil), as.issued...)
	revokedN := len(as.revoked)
	resources := append([]string(nil), as.resources...)
	scopes := append([]string(nil), as.scopes...)
	as.mu.Unlock()
	if revokedN < 2 {
		t.Fatalf("%d tokens revoked, want alice's access and refresh tokens", revokedN)
	}
	for _, res := range resources {
		if res != mcpSrv.URL+"/mcp" {
			t.Fatalf("resource parameter %q, want the server's URL", res)
		}
	}
	for _, sc := range scopes {
		if sc != "docs:read" {
			t.Fatalf("scope %q, want the challenge's", sc)
		}
	}
	var rpcText strings.Builder
	for _, m := range responses {
		rpcText.WriteString(protojson.Format(m))
	}
	stored, logged := string(dump()), logs.String()
	for _, tok := range issued {
		for where, text := range map[string]string{"the store": stored, "the logs": logged, "an RPC response": rpcText.String()} {
			if strings.Contains(text, tok) {
				t.Errorf("a token is in clear in %s", where)
			}
		}
	}
	if !strings.Contains(logged, "a user connected an account") {
		t.Error("the log does not record connections (is the capture working?)")
	}
}

// TestConnectionStoreConformance runs the same checks on both stores' connection records and
// pending authorizations.
func TestConnectionStoreConformance(t *testing.T) {
	stores := map[string]func(t *testing.T) ConnectionStore{
		"bolt": func(t *testing.T) ConnectionStore {
			s, err := OpenBoltServerStore(filepath.Join(t.TempDir(), "s.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"redis":  func(t *testing.T) ConnectionStore { return testRedisStore(t) },
		"memory": func(*testing.T) ConnectionStore { return newMemConnStore() },
	}
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			users := []string{"alice", "用户甲", "bob@example.com", "a\x00b"}
			for i, u := range users {
				if err := s.PutConnection(ctx, "docs", u, []byte(fmt.Sprint("sealed-", i))); err != nil {
					t.Fatal(err)
				}
			}
			for i, u := range users {
				got, err := s.GetConnection(ctx, "docs", u)
				if err != nil || string(got) != fmt.Sprint("sealed-", i) {
					t.Fatalf("GetConnection(%q) = %q, %v", u, got, err)
				}
			}
			if got, err := s.GetConnection(ctx, "other", "alice"); err != nil || got != nil {
				t.Fatalf("another server's connection: %q, %v", got, err)
			}
			got, err := s.ConnectionUsers(ctx, "docs", 100)
			if err != nil || len(got) != len(users) {
				t.Fatalf("ConnectionUsers = %q, %v", got, err)
			}
			if got, _ := s.ConnectionUsers(ctx, "docs", 2); len(got) > 2 || len(got) == 0 {
				t.Fatalf("ConnectionUsers(max 2) = %q", got)
			}
			if ok, err := s.DeleteConnection(ctx, "docs", "alice"); !ok || err != nil {
				t.Fatalf("DeleteConnection = %v, %v", ok, err)
			}
			if ok, err := s.DeleteConnection(ctx, "docs", "alice"); ok || err != nil {
				t.Fatalf("second DeleteConnection = %v, %v", ok, err)
			}
			// Compare-and-swap on the record: only over the record read, never over a newer one.
			if ok, err := s.SwapConnection(ctx, "docs", "bob@example.com", []byte("stale"), []byte("new")); ok || err != nil {
				t.Fatalf("SwapConnection over another record = %v, %v", ok, err)
			}
			if ok, err := s.SwapConnection(ctx, "docs", "nobody", nil, []byte("new")); ok || err != nil {
				t.Fatalf("SwapConnection of no record = %v, %v", ok, err)
			}
			if ok, err := s.SwapConnection(ctx, "docs", "bob@example.com", []byte("sealed-2"), []byte("sealed-2b")); !ok || err != nil {
				t.Fatalf("SwapConnection = %v, %v", ok, err)
			}
			if got, _ := s.GetConnection(ctx, "docs", "bob@example.com"); string(got) != "sealed-2b" {
				t.Fatalf("after SwapConnection: %q", got)
			}
			if ok, err := s.DeleteConnectionIf(ctx, "docs", "bob@example.com", []byte("sealed-2")); ok || err != nil {
				t.Fatalf("DeleteConnectionIf of an older record = %v, %v", ok, err)
			}
			if got, _ := s.GetConnection(ctx, "docs", "bob@example.com"); string(got) != "sealed-2b" {
				t.Fatalf("a newer record was deleted: %q", got)
			}
			if ok, err := s.DeleteConnectionIf(ctx, "docs", "bob@example.com", []byte("sealed-2b")); !ok || err != nil {
				t.Fatalf("DeleteConnectionIf = %v, %v", ok, err)
			}
			if got, _ := s.GetConnection(ctx, "docs", "bob@example.com"); got != nil {
				t.Fatalf("after DeleteConnectionIf: %q", got)
			}
			// Of two writers swapping over the same record, one wins.
			if err := s.PutConnection(ctx, "docs", "race", []byte("v0")); err != nil {
				t.Fatal(err)
			}
			var swapWG sync.WaitGroup
			var swapMu sync.Mutex
			swaps := 0
			for i := range 8 {
				swapWG.Go(func() {
					if ok, err := s.SwapConnection(ctx, "docs", "race", []byte("v0"), []byte(fmt.Sprint("v1-", i))); err == nil && ok {
						swapMu.Lock()
						swaps++
						swapMu.Unlock()
					}
				})
			}
			swapWG.Wait()
			if swaps != 1 {
				t.Fatalf("%d swaps over one record succeeded, want 1", swaps)
			}
			put := func(id, server, user string, ttl time.Duration, max int) error {
				return s.PutAuthState(ctx, PendingAuth{ID: id, Server: server, User: user, Sealed: []byte("state " + id), TTL: ttl}, max)
			}
			take := func(id string) string {
				t.Helper()
				got, err := s.TakeAuthState(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				return string(got)
			}
			// One pending authorization per user and server: a new one replaces the old, whose
			// id stops working; another server's or another user's is kept.
			for _, p := range []struct{ id, server, user string }{{"p1", "docs", "alice"}, {"p2", "docs", "alice"}, {"p3", "mail", "alice"}, {"p4", "docs", "a\x00b"}} {
				if err := put(p.id, p.server, p.user, time.Minute, 10); err != nil {
					t.Fatal(err)
				}
			}
			pendingOf := func(server, user string) string {
				t.Helper()
				id, sealed, err := s.PendingAuthState(ctx, server, user)
				if err != nil {
					t.Fatal(err)
				}
				if id != "" && string(sealed) != "state "+id {
					t.Fatalf("PendingAuthState(%s, %s) = %s with %q", server, user, id, sealed)
				}
				return id
			}
			if got := pendingOf("docs", "alice") + " " + pendingOf("mail", "alice") + " " + pendingOf("docs", "a\x00b") + " " + pendingOf("docs", "a") + "."; got != "p2 p3 p4 ." {
				t.Fatalf("pending ids %q, want the latest of each user and server", got)
			}
			if got := take("p1"); got != "" {
				t.Fatalf("a replaced state was taken: %q", got)
			}
			for _, id := range []string{"p2", "p3", "p4"} {
				if got := take(id); got != "state "+id {
					t.Fatalf("TakeAuthState(%s) = %q", id, got)
				}
			}
			// A bound per server: with 2 users pending, a third is refused; a user replacing
			// theirs is not; a taken or expired authorization frees its place.
			for _, u := range []string{"u1", "u2"} {
				if err := put("q-"+u, "cap", u, time.Minute, 2); err != nil {
					t.Fatal(err)
				}
			}
			if err := put("q-u3", "cap", "u3", time.Minute, 2); !errors.Is(err, errPendingFull) {
				t.Fatalf("a third pending authorization with a bound of 2: %v", err)
			}
			if got := take("q-u3"); got != "" {
				t.Fatalf("a refused state was stored: %q", got)
			}
			if err := put("q-u1b", "cap", "u1", time.Minute, 2); err != nil {
				t.Fatalf("a user replacing theirs at the bound: %v", err)
			}
			if err := put("q-other", "other", "u3", time.Minute, 2); err != nil {
				t.Fatalf("another server's bound: %v", err)
			}
			if got := take("q-u2"); got != "state q-u2" {
				t.Fatalf("TakeAuthState = %q", got)
			}
			if err := put("q-u3", "cap", "u3", time.Minute, 2); err != nil {
				t.Fatalf("after a state was taken: %v", err)
			}
			if err := put("e1", "short", "u1", time.Millisecond, 1); err != nil {
				t.Fatal(err)
			}
			putAt := time.Now()
			testenv.WaitFor(t, 10*time.Second, "the state's lifetime to pass", func() bool { return time.Since(putAt) > 20*time.Millisecond })
			if err := put("e2", "short", "u2", time.Minute, 1); err != nil {
				t.Fatalf("after the only pending authorization expired: %v", err)
			}
			// States: single use, expire.
			if err := put("s1", "docs", "s1", time.Minute, 10); err != nil {
				t.Fatal(err)
			}
			if got, err := s.TakeAuthState(ctx, "s1"); err != nil || string(got) != "state s1" {
				t.Fatalf("TakeAuthState = %q, %v", got, err)
			}
			if got, err := s.TakeAuthState(ctx, "s1"); err != nil || got != nil {
				t.Fatalf("second TakeAuthState = %q, %v", got, err)
			}
			if err := put("s2", "docs", "s2", time.Millisecond, 10); err != nil {
				t.Fatal(err)
			}
			// Expiry is about the clock: wait for it to pass the state's lifetime.
			putAt = time.Now()
			testenv.WaitFor(t, 10*time.Second, "the state's lifetime to pass", func() bool { return time.Since(putAt) > 20*time.Millisecond })
			if id := pendingOf("docs", "s2"); id != "" {
				t.Fatalf("an expired state is pending: %s", id)
			}
			if got, err := s.TakeAuthState(ctx, "s2"); err != nil || got != nil {
				t.Fatalf("expired state = %q, %v", got, err)
			}
			if id := pendingOf("docs", "s1"); id != "" {
				t.Fatalf("a taken state is pending: %s", id)
			}
			// Concurrent takers: exactly one gets the state.
			if err := put("s3", "docs", "s3", time.Minute, 10); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var mu sync.Mutex
			wins := 0
			for range 8 {
				wg.Go(func() {
					if got, err := s.TakeAuthState(ctx, "s3"); err == nil && got != nil {
						mu.Lock()
						wins++
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			if wins != 1 {
				t.Fatalf("%d takers got the state, want 1", wins)
			}
		})
	}
}

// TestSealer: records open only with their key and their purpose.
func TestSealer(t *testing.T) {
	k1, _ := ParseOAuthKey(strings.Repeat("a", 32))
	k2, _ := ParseOAuthKey("\n  " + strings.Repeat("b", 64) + "\n")
	if _, err := ParseOAuthKey("short"); err == nil {
		t.Fatal("a short key was accepted")
	}
	if _, err := ParseOAuthKey("\n\n"); err == nil {
		t.Fatal("an empty key was accepted")
	}
	s1, _ := newSealer(k1)
	s2, _ := newSealer(k2)
	for _, text := range []string{"secret-token", "令牌 with 中文", strings.Repeat("x", 10000)} {
		sealed, err := s1.seal(text, connAAD("docs", "alice"))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(sealed, []byte(text)) {
			t.Fatal("the plain text is in the sealed record")
		}
		var got string
		if err := s1.open(sealed, connAAD("docs", "alice"), &got); err != nil || got != text {
			t.Fatalf("open = %q, %v", got, err)
		}
		for name, try := range map[string]func() error{
			"another key":    func() error { return s2.open(sealed, connAAD("docs", "alice"), &got) },
			"another user":   func() error { return s1.open(sealed, connAAD("docs", "bob"), &got) },
			"another server": func() error { return s1.open(sealed, connAAD("mail", "alice"), &got) },
			"truncated":      func() error { return s1.open(sealed[:5], connAAD("docs", "alice"), &got) },
		} {
			if try() == nil {
				t.Errorf("a record opened with %s", name)
			}
		}
	}
}

// TestValidateUserOAuth: the spec's per-user OAuth block.
func TestValidateUserOAuth(t *testing.T) {
	for _, tc := range []struct {
		name string
		ht   *pb.HTTPTransport
		want string
	}{
		{"dynamic client", &pb.HTTPTransport{Url: "https://x.example/mcp", UserOauth: &pb.OAuthAuthorizationCode{}}, ""},
		{"preregistered", &pb.HTTPTransport{Url: "https://x.example/mcp", UserOauth: &pb.OAuthAuthorizationCode{ClientId: "c", ClientSecretEnv: "S", Scopes: []string{"a:b"}}}, ""},
		{"with client credentials", &pb.HTTPTransport{Url: "https://x.example/mcp", Oauth: &pb.OAuthClientCredentials{ClientId: "c", ClientSecretEnv: "S"}, UserOauth: &pb.OAuthAuthorizationCode{}}, "cannot be combined"},
		{"with a bearer token", &pb.HTTPTransport{Url: "https://x.example/mcp", BearerTokenEnv: "T", UserOauth: &pb.OAuthAuthorizationCode{}}, "cannot be combined"},
		{"secret without client", &pb.HTTPTransport{Url: "https://x.example/mcp", UserOauth: &pb.OAuthAuthorizationCode{ClientSecretEnv: "S"}}, "needs client_id"},
		{"bad scope", &pb.HTTPTransport{Url: "https://x.example/mcp", UserOauth: &pb.OAuthAuthorizationCode{Scopes: []string{"a b"}}}, "scope token"},
		{"private key JWT", &pb.HTTPTransport{Url: "https://x.example/mcp", Oauth: &pb.OAuthClientCredentials{ClientId: "c", PrivateKeyEnv: "K"}}, ""},
		{"private key and secret", &pb.HTTPTransport{Url: "https://x.example/mcp", Oauth: &pb.OAuthClientCredentials{ClientId: "c", PrivateKeyEnv: "K", ClientSecretEnv: "S"}}, "cannot be combined with client_secret_env"},
		{"private key with a secret method", &pb.HTTPTransport{Url: "https://x.example/mcp", Oauth: &pb.OAuthClientCredentials{ClientId: "c", PrivateKeyEnv: "K", AuthMethod: "client_secret_post"}}, "private_key_jwt"},
		{"neither secret nor key", &pb.HTTPTransport{Url: "https://x.example/mcp", Oauth: &pb.OAuthClientCredentials{ClientId: "c"}}, "or set private_key_env"},
		{"issuer pinned", &pb.HTTPTransport{Url: "https://x.example/mcp", UserOauth: &pb.OAuthAuthorizationCode{ClientId: "c", ClientSecretEnv: "S", Issuer: "https://as.example"}}, ""},
		{"issuer not a URL", &pb.HTTPTransport{Url: "https://x.example/mcp", UserOauth: &pb.OAuthAuthorizationCode{Issuer: "as.example"}}, "user_oauth.issuer"},
		{"issuer too long", &pb.HTTPTransport{Url: "https://x.example/mcp", UserOauth: &pb.OAuthAuthorizationCode{Issuer: "https://as.example/" + strings.Repeat("a", maxURL)}}, "user_oauth.issuer"},
		{"enterprise issuer not a URL", &pb.HTTPTransport{Url: "https://x.example/mcp", EnterpriseOauth: &pb.OAuthEnterprise{IdpIssuer: "https://idp.example", IdpClientId: "i", ClientId: "c", Issuer: "ftp://as.example"}}, "enterprise_oauth.issuer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkSpec("spec", &pb.ServerSpec{Name: "s", Transport: &pb.ServerSpec_Http{Http: tc.ht}})
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestPendingLinkGivenAgain: a pending link is given again only to its own user, for the same
// server URL, client, endpoints and scopes, and while at least half its life is left; any other
// request gets a new link (pendingLink returns "").
func TestPendingLinkGivenAgain(t *testing.T) {
	sl, err := newSealer(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	ep := oauthEndpoint{ClientID: "c1", AuthURL: "https://as.example/authorize", TokenURL: "https://as.example/token", Resource: "https://mcp.example/mcp", Scopes: []string{"read"}}
	spec := &pb.ServerSpec{Name: "docs", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: "https://mcp.example/mcp", UserOauth: &pb.OAuthAuthorizationCode{}}}}
	// pending stores user's pending authorization under key's place (user's, unless a record
	// was moved).
	pending := func(t *testing.T, g *Gateway, user, key string, left time.Duration) string {
		t.Helper()
		state, err := randomState()
		if err != nil {
			t.Fatal(err)
		}
		id := stateID(state)
		st := authState{User: user, Server: "docs", URL: "https://mcp.example/mcp", Verifier: oauth2.GenerateVerifier(), State: state, Expires: time.Now().Add(left), Endpoint: ep}
		sealed, err := sl.seal(st, stateAAD(id))
		if err != nil {
			t.Fatal(err)
		}
		if err := g.conns.PutAuthState(context.Background(), PendingAuth{ID: id, Server: "docs", User: key, Sealed: sealed, TTL: left}, 10); err != nil {
			t.Fatal(err)
		}
		return state
	}
	with := func(f func(*oauthEndpoint)) *oauthEndpoint {
		e := ep
		e.Scopes = append([]string(nil), ep.Scopes...)
		f(&e)
		return &e
	}
	same := func(*oauthEndpoint) {}
	cases := []struct {
		name  string
		user  string
		left  time.Duration
		url   string
		ep    *oauthEndpoint
		reuse bool
		key   string // where the record is stored: alice's place unless set
	}{
		{"same request, young", "alice", authStateTTL, "", with(same), true, ""},
		{"another user", "bob", authStateTTL, "", with(same), false, ""},
		{"alice's record under bob's place", "bob", authStateTTL, "", with(same), false, "bob"},
		{"less than half its life left", "alice", authStateTTL/2 - time.Second, "", with(same), false, ""},
		{"wider scopes (step-up)", "alice", authStateTTL, "", with(func(e *oauthEndpoint) { e.Scopes = []string{"read", "write"} }), false, ""},
		{"no scopes", "alice", authStateTTL, "", with(func(e *oauthEndpoint) { e.Scopes = nil }), false, ""},
		{"another client", "alice", authStateTTL, "", with(func(e *oauthEndpoint) { e.ClientID = "c2" }), false, ""},
		{"another authorization endpoint", "alice", authStateTTL, "", with(func(e *oauthEndpoint) { e.AuthURL = "https://evil.example/authorize" }), false, ""},
		{"the server's URL changed", "alice", authStateTTL, "https://mcp.example/v2", with(same), false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := &Gateway{sealer: sl, conns: newMemConnStore(), log: slog.New(slog.DiscardHandler)}
			key := c.key
			if key == "" {
				key = "alice"
			}
			state := pending(t, g, "alice", key, c.left)
			s := proto.CloneOf(spec)
			if c.url != "" {
				s.GetHttp().Url = c.url
			}
			got := g.pendingLink(context.Background(), &serverConn{g: g, spec: s}, c.user, c.ep)
			if !c.reuse {
				if got != "" {
					t.Errorf("pendingLink = %q, want a new link", got)
				}
				return
			}
			u, err := url.Parse(got)
			if err != nil || u.Query().Get("state") != state || u.Query().Get("client_id") != "c1" || u.Query().Get("code_challenge") == "" {
				t.Errorf("pendingLink = %q (%v), want the pending link with state %q", got, err, state)
			}
		})
	}
}
