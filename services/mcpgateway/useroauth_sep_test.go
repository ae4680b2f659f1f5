package mcpgateway

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/oauth2"

	"github.com/hermes-agent/hermes/internal/errclass"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// TestApplicationType: Hermes registers as "native" only with an http redirect URI on a
// loopback host, which a "web" client may not use; as "web" otherwise (SEP-837).
func TestApplicationType(t *testing.T) {
	for _, c := range []struct{ redirect, want string }{
		{"https://hermes.example/v1/mcp/oauth/callback", "web"},
		{"https://localhost/v1/mcp/oauth/callback", "web"},
		{"http://hermes.example/v1/mcp/oauth/callback", "web"},
		{"http://127.0.0.1:8080/callback", "native"},
		{"http://127.9.9.9/callback", "native"},
		{"http://localhost:8080/callback", "native"},
		{"http://LOCALHOST/callback", "native"},
		{"http://[::1]:8080/callback", "native"},
		{"http://localhost.evil.example/callback", "web"},
		{"http://10.0.0.1/callback", "web"},
		{"::not a url", "web"},
	} {
		if got := applicationType(c.redirect); got != c.want {
			t.Errorf("applicationType(%q) = %q, want %q", c.redirect, got, c.want)
		}
	}
}

// TestAuthorizationResponseIss: the iss parameter of an authorization response (RFC 9207,
// SEP-2468). A refused response never reaches the token endpoint, and its state is used up.
func TestAuthorizationResponseIss(t *testing.T) {
	const issuer = "https://as.example"
	var exchanges atomic.Int32
	tokenSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exchanges.Add(1)
		writeJSONStatus(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
	}))
	t.Cleanup(tokenSrv.Close)
	sl, err := newSealer(bytes.Repeat([]byte{9}, 32))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name     string
		required bool   // the metadata advertised authorization_response_iss_parameter_supported
		iss      string // the response's iss
		refused  bool
	}{
		{"advertised, matching", true, issuer, false},
		{"advertised, missing", true, "", true},
		{"advertised, another issuer", true, "https://evil.example", true},
		{"advertised, trailing slash", true, issuer + "/", true},
		{"advertised, case folded", true, "https://AS.example", true},
		{"advertised, default port", true, "https://as.example:443", true},
		{"not advertised, missing", false, "", false},
		{"not advertised, matching", false, issuer, false},
		{"not advertised, another issuer", false, "https://evil.example", true},
		{"not advertised, trailing slash", false, issuer + "/", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := &Gateway{sealer: sl, conns: newMemConnStore(), log: slog.New(slog.DiscardHandler), servers: map[string]*serverConn{}}
			g.cfg.OAuthRedirectURL = testRedirect
			g.ctx = context.Background()
			state, err := randomState()
			if err != nil {
				t.Fatal(err)
			}
			ep := oauthEndpoint{ClientID: "c1", AuthURL: issuer + "/authorize", TokenURL: tokenSrv.URL, Issuer: issuer, IssRequired: c.required, Resource: "https://mcp.example/mcp"}
			st := authState{User: "alice", Server: "docs", URL: "https://mcp.example/mcp", Verifier: oauth2.GenerateVerifier(), State: state, Expires: time.Now().Add(time.Minute), Endpoint: ep}
			id := stateID(state)
			sealed, err := sl.seal(st, stateAAD(id))
			if err != nil {
				t.Fatal(err)
			}
			if err := g.conns.PutAuthState(context.Background(), PendingAuth{ID: id, Server: "docs", User: "alice", Sealed: sealed, TTL: time.Minute}, 10); err != nil {
				t.Fatal(err)
			}
			before := exchanges.Load()
			_, err = g.CompleteAuthorization(context.Background(), &pb.CompleteAuthorizationRequest{State: state, Code: "code", Iss: c.iss})
			issRefusal := err != nil && errors.Is(err, errclass.Invalid) && (strings.Contains(err.Error(), "no iss parameter") || strings.Contains(err.Error(), "another issuer"))
			if issRefusal != c.refused {
				t.Fatalf("CompleteAuthorization(iss %q) = %v, want refused %v", c.iss, err, c.refused)
			}
			if c.refused && exchanges.Load() != before {
				t.Errorf("a refused authorization response reached the token endpoint")
			}
			// The state is used up either way: the same response cannot be tried again.
			if _, err := g.CompleteAuthorization(context.Background(), &pb.CompleteAuthorizationRequest{State: state, Code: "code", Iss: issuer}); err == nil || !strings.Contains(err.Error(), "unknown, already used") {
				t.Errorf("second use of the state: %v, want unknown", err)
			}
		})
	}
}
