package mcpgateway

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// movingMCP is protectedMCP whose authorization server is *cur: its protected resource
// metadata names it, and only its tokens are accepted.
func movingMCP(t *testing.T, cur *atomic.Pointer[fakeAS]) *httptest.Server {
	verify := func(ctx context.Context, token string, r *http.Request) (*auth.TokenInfo, error) {
		return cur.Load().verify(ctx, token, r)
	}
	return bearerMCP(t, func() string { return cur.Load().srv.URL }, verify, []string{"docs:read"}, []string{"docs:read"})
}

// TestAuthorizationServerMigration: when a server's protected resource metadata names another
// authorization server and the server refuses the old one's tokens (SEP-2352), the gateway
// registers with the new one, the user connects there, and nothing of the old one (client id,
// tokens) is sent to the new one. A token refused by an unchanged authorization server reuses
// its registration instead of registering again.
func TestAuthorizationServerMigration(t *testing.T) {
	ctx := context.Background()
	as1, as2 := newFakeAS(t), newFakeAS(t)
	var cur atomic.Pointer[fakeAS]
	cur.Store(as1)
	mcpSrv := movingMCP(t, &cur)
	cfg := testConfig()
	cfg.OAuthRedirectURL = testRedirect
	key, err := ParseOAuthKey(strings.Repeat("k", 40))
	if err != nil {
		t.Fatal(err)
	}
	client, g := startGateway(t, cfg, Options{OAuthKey: key, Logger: slog.New(slog.DiscardHandler)})
	if _, err := client.AddServer(ctx, &pb.AddServerRequest{Spec: userOAuthSpec(mcpSrv.URL + "/mcp")}); err != nil {
		t.Fatal(err)
	}
	connect := func(as *fakeAS, authURL string) {
		t.Helper()
		if !strings.HasPrefix(authURL, as.srv.URL+"/authorize?") {
			t.Fatalf("the authorization URL %s is not the expected authorization server's (%s)", authURL, as.srv.URL)
		}
		if _, err := client.CompleteAuthorization(ctx, browser(t, authURL, "alice@provider")); err != nil {
			t.Fatalf("CompleteAuthorization: %v", err)
		}
	}
	// call calls whoami until it answers other than a failure of the session the server
	// refused (a call on a session opened before the refusal fails once).
	call := func() *pb.CallToolResponse {
		t.Helper()
		var r *pb.CallToolResponse
		for range 3 {
			var err error
			if r, err = client.CallTool(ctx, &pb.CallToolRequest{Server: "docs", Tool: "whoami", UserId: "alice"}); err != nil {
				t.Fatal(err)
			}
			if r.GetSuccess() || r.GetErrorCode() == codeAuthRequired {
				return r
			}
		}
		return r
	}
	cs, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	connect(as1, cs.GetAuthorizationUrl())
	testenv.WaitFor(t, 30*time.Second, "the docs tools", func() bool {
		tools, _ := g.Tools("docs")
		return len(tools) == 1
	})
	if r := call(); !r.GetSuccess() {
		t.Fatalf("call with the first authorization server: %v", r)
	}

	// The same authorization server refuses the token (revoked there): the user connects
	// again with the registration the gateway has.
	as1.mu.Lock()
	clear(as1.access)
	as1.mu.Unlock()
	r := call()
	if r.GetErrorCode() != codeAuthRequired {
		t.Fatalf("call with a revoked token: %v, want auth required", r)
	}
	connect(as1, r.GetAuthorizationUrl())
	if r := call(); !r.GetSuccess() {
		t.Fatalf("call after connecting again: %v", r)
	}
	as1.mu.Lock()
	registrations, as1Clients := len(as1.clients), slices.Clone(as1.clientIDs)
	as1.mu.Unlock()
	if registrations != 1 {
		t.Errorf("%d registrations with the unchanged authorization server, want 1", registrations)
	}

	// The server moves to as2.
	cur.Store(as2)
	r = call()
	if r.GetErrorCode() != codeAuthRequired {
		t.Fatalf("call after the authorization server changed: %v, want auth required", r)
	}
	connect(as2, r.GetAuthorizationUrl())
	if r := call(); !r.GetSuccess() || r.GetOutput() != "account alice@provider" {
		t.Fatalf("call with the new authorization server: %v", r)
	}
	as2.mu.Lock()
	defer as2.mu.Unlock()
	if len(as2.clients) != 1 {
		t.Errorf("%d registrations with the new authorization server, want 1", len(as2.clients))
	}
	for _, id := range as2.clientIDs {
		if slices.Contains(as1Clients, id) {
			t.Errorf("the first authorization server's client id %q was sent to the new one", id)
		}
	}
	if n := as2.grants["refresh_token"]; n != 0 {
		t.Errorf("%d refresh requests reached the new authorization server with the old one's tokens", n)
	}
	u, _ := url.Parse(r.GetAuthorizationUrl())
	if _, ok := as2.clients[u.Query().Get("client_id")]; !ok {
		t.Errorf("the authorization URL's client %q is not registered with the new authorization server", u.Query().Get("client_id"))
	}
}

// TestMovedFrom: a connection counts as another authorization server's only when both
// issuers are known and differ.
func TestMovedFrom(t *testing.T) {
	var w authServerWatch
	if w.movedFrom("https://as1.example") {
		t.Error("moved before any discovery")
	}
	w.discovered("https://as2.example")
	for _, c := range []struct {
		issuer string
		want   bool
	}{{"https://as1.example", true}, {"https://as2.example", false}, {"https://as2.example/", true}, {"", false}} {
		if got := w.movedFrom(c.issuer); got != c.want {
			t.Errorf("movedFrom(%q) = %v, want %v", c.issuer, got, c.want)
		}
	}
}
