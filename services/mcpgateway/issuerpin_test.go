package mcpgateway

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/secretenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// TestUserOAuthIssuerPin: with user_oauth.issuer set, an authorization server of another
// issuer is refused before anything is sent to it (no registration, no authorization URL); the
// configured issuer connects as before.
func TestUserOAuthIssuerPin(t *testing.T) {
	for _, tc := range []struct {
		name    string
		pin     func(as *fakeAS) string
		wantErr string
	}{
		{"no pin", func(*fakeAS) string { return "" }, ""},
		{"the server's issuer", func(as *fakeAS) string { return as.srv.URL }, ""},
		{"another issuer", func(*fakeAS) string { return "https://as.corp.example" }, "not the configured issuer"},
		{"the issuer with a trailing slash", func(as *fakeAS) string { return as.srv.URL + "/" }, "not the configured issuer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			as := newFakeAS(t)
			mcpSrv := protectedMCP(t, as)
			cfg := testConfig()
			cfg.OAuthRedirectURL = testRedirect
			key, err := ParseOAuthKey(strings.Repeat("k", 40))
			if err != nil {
				t.Fatal(err)
			}
			client, _ := startGateway(t, cfg, Options{OAuthKey: key})
			spec := userOAuthSpec(mcpSrv.URL + "/mcp")
			spec.GetHttp().GetUserOauth().Issuer = tc.pin(as)
			if _, err := client.AddServer(ctx, &pb.AddServerRequest{Spec: spec}); err != nil {
				t.Fatal(err)
			}
			cs, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "alice"})
			as.mu.Lock()
			registered := len(as.clients)
			as.mu.Unlock()
			if tc.wantErr == "" {
				if err != nil || cs.GetAuthorizationUrl() == "" || registered != 1 {
					t.Fatalf("ConnectServer = %v, %v; %d clients registered; want an authorization URL", cs, err, registered)
				}
				return
			}
			if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ConnectServer = %v, %v; want an error with %q", cs, err, tc.wantErr)
			}
			if registered != 0 {
				t.Errorf("%d clients registered at the refused authorization server", registered)
			}
		})
	}
}

// TestEnterpriseOAuthIssuerPin: with enterprise_oauth.issuer set to another issuer than the
// discovered authorization server's, ConnectServer is refused before the ID token goes to the
// IdP (no exchange) and the client secret to the authorization server.
func TestEnterpriseOAuthIssuerPin(t *testing.T) {
	ctx := context.Background()
	f := newFakeEnterprise(t)
	mcpURL := enterpriseMCP(t, f).URL + "/mcp"
	getenv := func(k string) string {
		if k == "DOCS_SECRET" {
			return fakeASSecret
		}
		return ""
	}
	client, _ := startGateway(t, testConfig(), Options{OAuthKey: testOAuthKey(t), Getenv: getenv, Secrets: secretenv.New([]string{"DOCS_SECRET"}, nil)})
	spec := enterpriseSpec(f, mcpURL)
	spec.GetHttp().GetEnterpriseOauth().Issuer = "https://as.corp.example"
	if _, err := client.AddServer(ctx, &pb.AddServerRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	_, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "alice", IdToken: f.idToken("alice@corp", time.Now().Add(time.Hour))})
	if status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "not the configured issuer") {
		t.Fatalf("ConnectServer: %v, want FailedPrecondition naming the configured issuer", err)
	}
	f.mu.Lock()
	n := len(f.exchanges)
	f.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d token exchanges at the IdP, want none", n)
	}
}
