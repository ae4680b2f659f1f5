package mcpgateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestLegacyAuthServerIssuer: a 2025-03-26 server (no protected resource metadata) serves its
// authorization server's metadata at its origin's well-known path; the metadata's issuer may be
// any URL of that origin, never another origin's. Where protected resource metadata names the
// issuer, the metadata must name exactly it (RFC 8414 section 3.3, the mix-up defence).
func TestLegacyAuthServerIssuer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prm    bool   // the server publishes protected resource metadata naming its origin
		issuer string // the metadata's issuer; {origin} is replaced
		ok     bool
	}{
		{name: "legacy, the origin", issuer: "{origin}", ok: true},
		{name: "legacy, a path of the origin", issuer: "{origin}/oauth", ok: true},
		{name: "legacy, another origin", issuer: "https://evil.example", ok: false},
		{name: "legacy, another port", issuer: "http://127.0.0.1:1/oauth", ok: false},
		{name: "legacy, no issuer", issuer: "", ok: false},
		{name: "named by metadata, the same", prm: true, issuer: "{origin}", ok: true},
		{name: "named by metadata, a path of it", prm: true, issuer: "{origin}/oauth", ok: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var origin string
			mux := http.NewServeMux()
			mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="mcp"`)
				w.WriteHeader(http.StatusUnauthorized)
			})
			if tc.prm {
				mux.HandleFunc("/.well-known/oauth-protected-resource/mcp", func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					_ = json.NewEncoder(w).Encode(map[string]any{"resource": origin + "/mcp", "authorization_servers": []string{origin}})
				})
			}
			mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				iss := strings.ReplaceAll(tc.issuer, "{origin}", origin)
				_ = json.NewEncoder(w).Encode(map[string]any{
					"issuer": iss, "authorization_endpoint": origin + "/oauth/authorize", "token_endpoint": origin + "/oauth/token",
					"response_types_supported": []string{"code"}, "code_challenge_methods_supported": []string{"S256"},
				})
			})
			srv := httptest.NewServer(mux)
			defer srv.Close()
			origin = srv.URL
			_, _, asm, err := discoverAuthServer(context.Background(), srv.Client(), srv.URL+"/mcp", "test")
			if tc.ok {
				if err != nil || asm == nil || asm.TokenEndpoint != origin+"/oauth/token" {
					t.Fatalf("discovery: %+v %v, want the metadata", asm, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("discovery accepted issuer %q: %+v", tc.issuer, asm)
			}
		})
	}
}
