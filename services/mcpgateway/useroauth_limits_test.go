package mcpgateway

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/oauth2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/secretenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// testOAuthKey is the operator's key of these tests.
func testOAuthKey(t *testing.T) []byte {
	key, err := ParseOAuthKey(strings.Repeat("k", 40))
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// connStores opens each connection store backend, shared by two gateways in a test.
var connStores = map[string]func(t *testing.T) ConnectionStore{
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

// TestUserOAuthPendingBounds: a user asking for a link again and again holds one pending
// authorization (given again while young; a replaced one stops working), and a server holds at
// most oauth.maxPending users' pending authorizations; a refusal says so, as RESOURCE_EXHAUSTED.
func TestUserOAuthPendingBounds(t *testing.T) {
	for name, open := range connStores {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			as := newFakeAS(t)
			mcpSrv := protectedMCP(t, as)
			cfg := testConfig()
			cfg.OAuthRedirectURL = testRedirect
			client, g := startGateway(t, cfg, Options{Connections: open(t), OAuthKey: testOAuthKey(t)})
			g.oauth.maxPending = 3
			if _, err := client.AddServer(ctx, &pb.AddServerRequest{Spec: userOAuthSpec(mcpSrv.URL + "/mcp")}); err != nil {
				t.Fatal(err)
			}
			connect := func(user string) (string, error) {
				r, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: user})
				return r.GetAuthorizationUrl(), err
			}
			// Alice asks ten times: she holds one pending authorization, and while it is young
			// she is given its link again (a newer link would break the one she may be opening).
			var links []string
			for range 10 {
				u, err := connect("alice")
				if err != nil {
					t.Fatalf("ConnectServer #%d: %v", len(links)+1, err)
				}
				links = append(links, u)
			}
			for i, u := range links {
				if u != links[0] {
					t.Fatalf("link %d of 10 is %s, want the pending %s", i+1, u, links[0])
				}
			}
			// Her asking filled one place of three: bob and carol get theirs, dave is refused.
			if _, err := connect("alice"); err != nil {
				t.Fatal(err)
			}
			bob, err := connect("bob")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := connect("carol"); err != nil {
				t.Fatal(err)
			}
			_, err = connect("dave")
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "3 users are connecting") {
				t.Fatalf("a fourth user's ConnectServer with a bound of 3: %v, want RESOURCE_EXHAUSTED naming the bound", err)
			}
			// A user already pending may ask again at the bound; one who finishes frees a place.
			if _, err := connect("carol"); err != nil {
				t.Fatalf("carol asking again at the bound: %v", err)
			}
			if _, err := client.CompleteAuthorization(ctx, browser(t, bob, "bob@provider")); err != nil {
				t.Fatal(err)
			}
			if _, err := connect("dave"); err != nil {
				t.Fatalf("dave after bob connected: %v", err)
			}
			// A call by a user without a connection at the bound says why it cannot give a link.
			waitDocsTools(t, g, 1) // listed with bob's token
			r, err := client.CallTool(ctx, &pb.CallToolRequest{Server: "docs", Tool: "whoami", UserId: "erin"})
			if err != nil {
				t.Fatal(err)
			}
			if r.GetSuccess() || r.GetErrorCode() != codeUnavailable || !strings.Contains(r.GetOutput(), "users are connecting") {
				t.Fatalf("erin's call at the bound: %v", r)
			}
		})
	}
}

// refreshRace sits in front of a token endpoint: it holds refresh requests until two have
// come, forwards them one after the other (the provider rotates refresh tokens, so the second
// is refused as invalid_grant), and answers the refused one first: the worst order for the
// loser, which learns of its refusal before the winner has stored its token.
type refreshRace struct {
	upstream string

	mu      sync.Mutex // guards n
	n       int
	arrived chan struct{} // closed when two requests are in
	first   chan struct{} // closed when the first has been forwarded
	refused chan struct{} // closed when the second's answer has been written
}

func (p *refreshRace) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	i := p.n
	p.n++
	if p.n == 2 {
		close(p.arrived)
	}
	p.mu.Unlock()
	if i > 1 {
		http.Error(w, "one race only", http.StatusTeapot)
		return
	}
	wait := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-r.Context().Done():
			return false
		}
	}
	if !wait(p.arrived) || i == 1 && !wait(p.first) {
		return
	}
	resp, err := http.Post(p.upstream, r.Header.Get("Content-Type"), bytes.NewReader(body))
	if i == 0 {
		close(p.first)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if i == 0 && !wait(p.refused) {
		return
	}
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(out)
	if i == 1 {
		close(p.refused)
	}
}

// TestUserOAuthRefreshRace: two replicas refresh one user's expired token at once against a
// provider that rotates refresh tokens and refuses a used one. The loser must not end the
// connection: it reads the winner's record and uses its token, and the stored refresh token
// is the live one. On every store.
func TestUserOAuthRefreshRace(t *testing.T) {
	for name, open := range connStores {
		t.Run(name, func(t *testing.T) {
			as := newFakeAS(t)
			race := &refreshRace{upstream: as.srv.URL + "/token", arrived: make(chan struct{}), first: make(chan struct{}), refused: make(chan struct{})}
			proxy := httptest.NewServer(race)
			t.Cleanup(proxy.Close)
			store := open(t)
			cfg := testConfig()
			cfg.OAuthRedirectURL = testRedirect
			var gs [2]*Gateway
			for i := range gs {
				gs[i] = New(cfg, Options{Connections: store, OAuthKey: testOAuthKey(t), Logger: testLogger(t)})
				t.Cleanup(gs[i].Close)
				// Long enough for the winner to store its token on a loaded machine; the
				// loser's wait ends as soon as it has.
				gs[i].oauth.refreshGrace = time.Minute
			}
			// Alice's connection: a token the provider issued, expired, with its refresh token.
			as.mu.Lock()
			as.refresh["rt-alice-0"] = "alice@provider"
			as.mu.Unlock()
			ctx := context.Background()
			conn := &userConnection{
				Endpoint: oauthEndpoint{ClientID: "hermes", AuthStyle: oauth2.AuthStyleInParams, TokenURL: proxy.URL, AuthURL: as.srv.URL + "/authorize"},
				Token:    oauth2.Token{AccessToken: "at-alice-0", RefreshToken: "rt-alice-0", TokenType: "Bearer", Expiry: time.Now().Add(-time.Hour)},
			}
			if err := gs[0].saveConnection(ctx, "docs", "alice", conn); err != nil {
				t.Fatal(err)
			}
			var toks [2]*oauth2.Token
			var errs [2]error
			var wg sync.WaitGroup
			for i, g := range gs {
				wg.Go(func() {
					toks[i], errs[i] = (&userTokens{g: g, server: "docs", user: "alice"}).Token()
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("replica %d: %v (the loser of the refresh race ended the connection)", i+1, err)
				}
			}
			if toks[0].AccessToken != toks[1].AccessToken {
				t.Error("the replicas use different tokens; the loser should use the winner's")
			}
			stored, err := gs[1].loadConnection(ctx, "docs", "alice")
			if err != nil || stored == nil {
				t.Fatalf("alice's connection after the race: %v, %v", stored, err)
			}
			as.mu.Lock()
			refreshes := as.grants["refresh_token"]
			_, live := as.refresh[stored.Token.RefreshToken]
			_, valid := as.access[stored.Token.AccessToken]
			as.mu.Unlock()
			if diff := cmp.Diff(struct {
				Refreshes   int
				Live, Valid bool
				Access      string
			}{2, true, true, toks[0].AccessToken}, struct {
				Refreshes   int
				Live, Valid bool
				Access      string
			}{refreshes, live, valid, stored.Token.AccessToken}); diff != "" {
				t.Errorf("after the race (-want +got; the stored refresh token must be the provider's live one):\n%s", diff)
			}
		})
	}
}

// TestUserOAuthRefreshKeepsNewerRecord: a refresh refused for good ends the connection it was
// read from, never one stored meanwhile (the user reconnected on another replica).
func TestUserOAuthRefreshKeepsNewerRecord(t *testing.T) {
	as := newFakeAS(t)
	store := newMemConnStore()
	cfg := testConfig()
	cfg.OAuthRedirectURL = testRedirect
	g := New(cfg, Options{Connections: store, OAuthKey: testOAuthKey(t), Logger: testLogger(t)})
	t.Cleanup(g.Close)
	g.oauth.refreshGrace = 50 * time.Millisecond
	ctx := context.Background()
	ep := oauthEndpoint{ClientID: "hermes", AuthStyle: oauth2.AuthStyleInParams, TokenURL: as.srv.URL + "/token"}
	expired := &userConnection{Endpoint: ep, Token: oauth2.Token{AccessToken: "old", RefreshToken: "unknown-to-the-provider", Expiry: time.Now().Add(-time.Hour)}}
	if err := g.saveConnection(ctx, "docs", "alice", expired); err != nil {
		t.Fatal(err)
	}
	tokens := &userTokens{g: g, server: "docs", user: "alice"}
	if err := tokens.reload(ctx); err != nil {
		t.Fatal(err)
	}
	// The user reconnects elsewhere while this replica still holds the old record.
	fresh := &userConnection{Endpoint: ep, Token: oauth2.Token{AccessToken: "new", RefreshToken: "rt-new", Expiry: time.Now().Add(time.Hour)}}
	if err := g.saveConnection(ctx, "docs", "alice", fresh); err != nil {
		t.Fatal(err)
	}
	tok, err := tokens.refresh(ctx)
	if err != errRecordChanged && (err != nil || tok == nil) {
		t.Fatalf("refresh of a replaced record: %v", err)
	}
	got, _ := g.loadConnection(ctx, "docs", "alice")
	if got == nil || got.Token.AccessToken != "new" {
		t.Fatalf("the newer connection was deleted or replaced: %+v", got)
	}
	if tok, err := tokens.Token(); err != nil || tok.AccessToken != "new" {
		t.Fatalf("Token after the record changed = %v, %v; want the newer record's", tok, err)
	}
}

// TestUserOAuthDiscoveryFailureCached: a server whose authorization server metadata cannot be
// fetched costs one discovery per oauth.discoveryFailTTL, however often users ask to connect;
// once that passes, discovery runs again (and works once the metadata is back).
func TestUserOAuthDiscoveryFailureCached(t *testing.T) {
	var requests atomic.Int64
	var healthy atomic.Bool
	var srv *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+srv.URL+`/prm", scope="docs:read"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
	mux.HandleFunc("/prm", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"resource": srv.URL + "/mcp", "authorization_servers": []string{srv.URL + "/as"}})
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server/as", func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			http.Error(w, "metadata store down", http.StatusInternalServerError)
			return
		}
		writeJSON(w, map[string]any{
			"issuer": srv.URL + "/as", "authorization_endpoint": srv.URL + "/as/authorize", "token_endpoint": srv.URL + "/as/token",
			"response_types_supported": []string{"code"}, "code_challenge_methods_supported": []string{"S256"},
		})
	})
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg := testConfig()
	cfg.OAuthRedirectURL = testRedirect
	client, g := startGateway(t, cfg, Options{OAuthKey: testOAuthKey(t)})
	g.oauth.discoveryFailTTL = time.Hour
	ctx := context.Background()
	spec := &pb.ServerSpec{Name: "docs", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: srv.URL + "/mcp", UserOauth: &pb.OAuthAuthorizationCode{ClientId: "hermes"}}}}
	if _, err := client.AddServer(ctx, &pb.AddServerRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	connect := func() error {
		_, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "alice"})
		return err
	}
	// The shared session's own attempts reach the server too: count around ConnectServer only.
	before := requests.Load()
	if err := connect(); status.Code(err) != codes.Unavailable {
		t.Fatalf("ConnectServer with the metadata failing: %v, want UNAVAILABLE", err)
	}
	first := requests.Load() - before
	if first == 0 {
		t.Fatal("the first ConnectServer made no request")
	}
	mid := requests.Load()
	for i := range 20 {
		if err := connect(); status.Code(err) != codes.Unavailable {
			t.Fatalf("ConnectServer #%d: %v, want UNAVAILABLE", i+2, err)
		}
	}
	// The Go API (and a call's connect prompt) say why.
	if _, _, err := g.ConnectServer(ctx, "docs", "alice"); err == nil || !strings.Contains(err.Error(), "not tried again for 1h0m0s") {
		t.Fatalf("ConnectServer within the TTL: %v, want the remembered failure", err)
	}
	if n := requests.Load() - mid; n != 0 {
		t.Fatalf("20 more ConnectServer calls within the TTL made %d requests, want 0", n)
	}
	// Once the failure is forgotten, discovery runs again, and the metadata is back.
	healthy.Store(true)
	g.discoFails.mu.Lock()
	for k, e := range g.discoFails.m {
		e.until = time.Now()
		g.discoFails.m[k] = e
	}
	g.discoFails.mu.Unlock()
	r, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "alice"})
	if err != nil || !strings.HasPrefix(r.GetAuthorizationUrl(), srv.URL+"/as/authorize") {
		t.Fatalf("ConnectServer once the failure expired and the metadata is back: %v, %v", r, err)
	}
}

// TestOAuthDiscoveryFailCacheBounded: the failed discoveries remembered stay at maxDiscoveryFails.
func TestOAuthDiscoveryFailCacheBounded(t *testing.T) {
	var f failCache
	now := time.Now()
	for i := range 3 * maxDiscoveryFails {
		f.put(strings.Repeat("k", i%7)+string(rune('a'+i%26))+time.Duration(i).String(), io.EOF, now.Add(time.Minute), now)
	}
	if n := len(f.m); n > maxDiscoveryFails {
		t.Fatalf("%d entries, want at most %d", n, maxDiscoveryFails)
	}
	if f.get("absent", now) != nil {
		t.Fatal("a failure for a key never put")
	}
	f.put("x", io.EOF, now.Add(time.Second), now)
	if f.get("x", now) == nil || f.get("x", now.Add(2*time.Second)) != nil {
		t.Fatal("a failure is remembered until it expires, not after")
	}
}

// TestOAuthTokenRequestBounded: a client credentials token endpoint that never answers, or
// answers too much, fails the server's connection promptly (oauth.requestTimeout), with a
// message that says so, and the calls answer "unavailable"; before, the token request was
// bounded by nothing (the connection's context has no deadline).
func TestOAuthTokenRequestBounded(t *testing.T) {
	big := bytes.Repeat([]byte(" "), 1<<20)
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    string
	}{
		{"hanging", nil, "did not answer within 1s (timeout)"},
		{"oversized", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(append(append([]byte(`{"access_token":"t","token_type":"Bearer","pad":"`), big...), `"}`...))
		}, "answer is larger than 256 KiB"},
		{"oversized, streamed", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"access_token":"t","token_type":"Bearer","pad":"`))
			for range 16 {
				_, _ = w.Write(big[:64<<10])
				w.(http.Flusher).Flush()
			}
			_, _ = w.Write([]byte(`"}`))
		}, "answer is larger than 256 KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			h := tc.handler
			if h == nil {
				h = func(w http.ResponseWriter, r *http.Request) {
					select {
					case <-release:
					case <-r.Context().Done():
					}
				}
			}
			tokenSrv := httptest.NewServer(h)
			t.Cleanup(tokenSrv.Close)
			t.Cleanup(func() { close(release) }) // before the server's Close, which waits for handlers
			mcpSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "unauthorized", http.StatusUnauthorized)
			}))
			t.Cleanup(mcpSrv.Close)
			getenv := func(k string) string {
				if k == "OAUTH_SECRET" {
					return "s3cret"
				}
				return os.Getenv(k)
			}
			g := New(testConfig(), Options{Logger: testLogger(t), Getenv: getenv, Secrets: secretenv.New([]string{"OAUTH_SECRET"}, nil)})
			t.Cleanup(g.Close)
			g.oauth.requestTimeout = time.Second
			spec := httpSpec("cc", "cc", mcpSrv.URL)
			spec.GetHttp().Oauth = &pb.OAuthClientCredentials{TokenUrl: tokenSrv.URL, ClientId: "hermes", ClientSecretEnv: "OAUTH_SECRET"}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			srv, err := g.AddServer(ctx, spec, true)
			if err != nil {
				t.Fatal(err)
			}
			// Generous for a loaded machine, and far below the two minutes it was given.
			if took := time.Since(start); took > 45*time.Second {
				t.Errorf("the first connection took %s to fail", took)
			}
			if srv.GetState() == pb.ServerState_SERVER_STATE_READY || !strings.Contains(srv.GetLastError(), tc.want) {
				t.Fatalf("server after its token request: %s %q, want FAILED with %q", srv.GetState(), srv.GetLastError(), tc.want)
			}
		})
	}
}

// TestOAuthRequestError: how a request without a usable answer is described and classified.
func TestOAuthRequestError(t *testing.T) {
	g := &Gateway{oauth: oauthLimitsDefault}
	hang := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(hang.Close)
	g.httpBase = http.DefaultTransport
	g.oauth.requestTimeout = 100 * time.Millisecond
	_, err := g.tokenClient().Get(hang.URL)
	got := g.oauthRequestError(err)
	if !strings.Contains(got.Error(), "did not answer within 100ms") {
		t.Fatalf("a hanging request: %v", got)
	}
	if status.Code(rpc.Classify(context.Background(), nil, "", got)) != codes.Unavailable {
		t.Fatalf("a hanging request is classified %v, want UNAVAILABLE", status.Code(rpc.Classify(context.Background(), nil, "", got)))
	}
}

// TestUserOAuthDiscoveryHangs: an authorization server whose metadata never comes back ends
// ConnectServer after oauth.requestTimeout (the SDK's discovery client is bounded through the
// transport), UNAVAILABLE, and the failure is remembered.
func TestUserOAuthDiscoveryHangs(t *testing.T) {
	release := make(chan struct{})
	var metadataHits atomic.Int64
	var srv *httptest.Server
	mux := http.NewServeMux()
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+srv.URL+`/prm"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
	mux.HandleFunc("/prm", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"resource": srv.URL + "/mcp", "authorization_servers": []string{srv.URL + "/as"}})
	})
	mux.HandleFunc("/.well-known/oauth-authorization-server/as", func(w http.ResponseWriter, r *http.Request) {
		metadataHits.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	srv = httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	cfg := testConfig()
	cfg.OAuthRedirectURL = testRedirect
	client, g := startGateway(t, cfg, Options{OAuthKey: testOAuthKey(t)})
	g.oauth.requestTimeout = time.Second
	g.oauth.discoveryFailTTL = time.Hour
	spec := &pb.ServerSpec{Name: "docs", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: srv.URL + "/mcp", UserOauth: &pb.OAuthAuthorizationCode{ClientId: "hermes"}}}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := client.AddServer(ctx, &pb.AddServerRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, _, err := g.ConnectServer(ctx, "docs", "alice")
	if took := time.Since(start); took > 45*time.Second {
		t.Errorf("ConnectServer took %s against a hanging metadata endpoint", took)
	}
	if err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("ConnectServer: %v, want a timeout", err)
	}
	if _, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "bob"}); status.Code(err) != codes.Unavailable {
		t.Fatalf("ConnectServer over gRPC: %v, want UNAVAILABLE", err)
	}
	if n := metadataHits.Load(); n != 1 {
		t.Fatalf("%d metadata requests, want 1 (the failure is remembered)", n)
	}
}
