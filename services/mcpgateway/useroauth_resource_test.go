package mcpgateway

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// authRecorder is an MCP server at /mcp that takes any bearer token and notes it: a host the
// users' tokens were never issued for.
type authRecorder struct {
	srv *httptest.Server

	mu   sync.Mutex // guards seen
	seen []string
}

func newAuthRecorder(t *testing.T) *authRecorder {
	a := &authRecorder{}
	s := mcp.NewServer(&mcp.Implementation{Name: "other", Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "the account"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "someone else's server"}}}, nil, nil
	})
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		a.mu.Lock()
		a.seen = append(a.seen, token)
		a.mu.Unlock()
		return &auth.TokenInfo{UserID: "anyone", Expiration: time.Now().Add(time.Hour)}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/mcp", auth.RequireBearerToken(verify, nil)(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)))
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

func (a *authRecorder) saw(token string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, h := range a.seen {
		if strings.Contains(h, token) {
			return true
		}
	}
	return false
}

// TestConnectionBoundToServerURL: a user's stored connection holds a token issued for the
// server's resource. When the server named in a spec is replaced by one at another URL (the
// operator removes and adds it again, or the store's or the servers file's spec changes), the
// users' stored tokens must not follow the name to the new host: neither a user's call nor the
// shared session's tools/list sends them there, and the user is asked to connect again. The
// same URL added again keeps working.
func TestConnectionBoundToServerURL(t *testing.T) {
	for _, tc := range []struct {
		name        string
		elsewhere   bool // re-added at another host
		wantAccount bool // alice's call still runs with her account
	}{
		{name: "same URL", wantAccount: true},
		{name: "another host", elsewhere: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			f := newFakeEnterprise(t)
			other := newAuthRecorder(t)
			client, g, _, _ := startEnterprise(t, f)
			if _, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "alice", IdToken: f.idToken("alice@corp", time.Now().Add(time.Hour))}); err != nil {
				t.Fatal(err)
			}
			tools := func() bool {
				tools, _ := g.Tools("docs")
				return len(tools) == 1
			}
			testenv.WaitFor(t, 30*time.Second, "the docs tools", tools)
			r, err := client.CallTool(ctx, &pb.CallToolRequest{Server: "docs", Tool: "whoami", UserId: "alice"})
			if err != nil || r.GetOutput() != "account alice@corp" {
				t.Fatalf("alice's call: %v %v", r, err)
			}
			f.mu.Lock()
			var token string
			for at := range f.access {
				token = at
			}
			f.mu.Unlock()

			g.mu.Lock()
			url := g.servers["docs"].spec.GetHttp().GetUrl()
			g.mu.Unlock()
			if tc.elsewhere {
				url = other.srv.URL + "/mcp"
			}
			if _, err := client.RemoveServer(ctx, &pb.RemoveServerRequest{Name: "docs"}); err != nil {
				t.Fatal(err)
			}
			if _, err := client.AddServer(ctx, &pb.AddServerRequest{Spec: enterpriseSpec(f, url), Wait: true}); err != nil {
				t.Fatal(err)
			}
			if tc.wantAccount {
				testenv.WaitFor(t, 30*time.Second, "the docs tools", tools)
			}
			// With the first connection attempt over (Wait), a call runs if tools are listed.
			r, err = client.CallTool(ctx, &pb.CallToolRequest{Server: "docs", Tool: "whoami", UserId: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantAccount {
				if r.GetOutput() != "account alice@corp" {
					t.Fatalf("alice's call after the server was added again: %v", r)
				}
				return
			}
			if other.saw(token) {
				t.Fatal("alice's token, issued for the previous server, was sent to the server now at the name")
			}
			if r.GetSuccess() {
				t.Fatalf("alice's call to the server at another host ran: %v", r)
			}
			if c, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "alice"}); err == nil && c.GetConnected() {
				t.Fatal("ConnectServer says alice is connected to the server at another host")
			}
		})
	}
}

// TestRefreshedTokenSizeLimit: a refresh answer whose access or refresh token is longer than
// 16 KiB is refused and nothing of it is stored: the connection stays as it was.
func TestRefreshedTokenSizeLimit(t *testing.T) {
	long := strings.Repeat("x", maxIssuedToken+1)
	for _, tc := range []struct {
		name          string
		access, renew string
		ok            bool
	}{
		{name: "within the limit", access: "new-access", renew: "new-refresh", ok: true},
		{name: "long access token", access: long, renew: "new-refresh"},
		{name: "long refresh token", access: "new-access", renew: long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			as := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				writeJSON(w, map[string]any{"access_token": tc.access, "refresh_token": tc.renew, "token_type": "Bearer", "expires_in": 3600})
			}))
			t.Cleanup(as.Close)
			f := newFakeEnterprise(t)
			_, g, _, _ := startEnterprise(t, f)
			old := &userConnection{Endpoint: oauthEndpoint{ClientID: "c", TokenURL: as.URL, Resource: "https://mcp.example/mcp"},
				Token: oauth2.Token{AccessToken: "old-access", RefreshToken: "old-refresh", TokenType: "Bearer", Expiry: time.Now().Add(-time.Hour)}}
			if err := g.saveConnection(ctx, "docs", "alice", old); err != nil {
				t.Fatal(err)
			}
			tok, err := (&userTokens{g: g, server: "docs", user: "alice"}).Token()
			if tc.ok != (err == nil) {
				t.Fatalf("refresh: %v, want ok %v", err, tc.ok)
			}
			stored, err := g.loadConnection(ctx, "docs", "alice")
			if err != nil || stored == nil {
				t.Fatalf("the stored connection: %v %v", stored, err)
			}
			if tc.ok {
				if tok.AccessToken != tc.access || stored.Token.RefreshToken != tc.renew {
					t.Fatalf("refreshed to %q, stored refresh token %q", tok.AccessToken, stored.Token.RefreshToken)
				}
				return
			}
			if stored.Token.AccessToken != "old-access" || stored.Token.RefreshToken != "old-refresh" {
				t.Fatal("an oversized token answer was stored")
			}
		})
	}
}

// TestRegistrationsBounded: a server whose metadata names a new authorization server at every
// discovery (a hostile one flipping at each refused token) makes the gateway keep at most
// maxRegistrations registrations, and never hands one authorization server's client to
// another.
func TestRegistrationsBounded(t *testing.T) {
	var w authServerWatch
	for i := range 1000 {
		iss := fmt.Sprintf("https://as%d.example", i)
		if _, ok := w.registration(iss, iss+"/register"); ok {
			t.Fatalf("a registration for %s before it registered", iss)
		}
		w.remember(iss, iss+"/register", oauthRegistration{ClientID: "client-of-" + iss})
		if r, ok := w.registration(iss, iss+"/register"); !ok || r.ClientID != "client-of-"+iss {
			t.Fatalf("the registration for %s: %v %v", iss, r, ok)
		}
		if _, ok := w.registration(iss, iss+"/other"); ok {
			t.Fatalf("%s's registration given for another registration endpoint", iss)
		}
	}
	if n := len(w.regs); n > maxRegistrations {
		t.Fatalf("%d registrations kept, want at most %d", n, maxRegistrations)
	}
}

// TestMadeFor: a connection serves the server URL its resource names, or every URL of the
// origin its resource names; no other.
func TestMadeFor(t *testing.T) {
	for _, tc := range []struct {
		resource, url string
		want          bool
	}{
		{"https://mcp.example/mcp", "https://mcp.example/mcp", true},
		{"https://mcp.example", "https://mcp.example/mcp", true},
		{"https://mcp.example/mcp", "https://mcp.example/other", false},
		{"https://mcp.example/mcp", "https://evil.example/mcp", false},
		{"https://mcp.example", "https://mcp.example:8443/mcp", false},
		{"https://mcp.example", "http://mcp.example/mcp", false},
		{"", "https://mcp.example/mcp", false},
	} {
		conn := &userConnection{Endpoint: oauthEndpoint{Resource: tc.resource}}
		if got := madeFor(conn, tc.url); got != tc.want {
			t.Errorf("madeFor(resource %q, %q) = %v, want %v", tc.resource, tc.url, got, tc.want)
		}
	}
}
