package mcpgateway

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/secretenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// TestOAuthSecretVariablesAllowlisted: each variable an OAuth block names (workload identity's
// assertion_env, enterprise_oauth's client_secret_env and idp_client_secret_env, and the older
// ones) must be on the operator's allowlist, or the spec is refused where it enters: through
// AddServer, and when read back from the store (anyone with write access to it could put one
// there to have the gateway send a variable's value to a token endpoint of their choosing).
func TestOAuthSecretVariablesAllowlisted(t *testing.T) {
	const stolen = "STOLEN_SECRET"
	enterprise := func(change func(*pb.OAuthEnterprise)) *pb.HTTPTransport {
		o := &pb.OAuthEnterprise{IdpIssuer: "https://idp.example", IdpClientId: "hermes", ClientId: "hermes", ClientSecretEnv: "ALLOWED", IdpClientSecretEnv: "ALLOWED"}
		change(o)
		return &pb.HTTPTransport{Url: "https://mcp.example/mcp", EnterpriseOauth: o}
	}
	for _, tc := range []struct {
		name string
		http *pb.HTTPTransport
	}{
		{"oauth.assertion_env", &pb.HTTPTransport{Url: "https://mcp.example/mcp", Oauth: &pb.OAuthClientCredentials{ClientId: "w", AssertionEnv: stolen}}},
		{"oauth.assertion_env with an allowed client secret", &pb.HTTPTransport{Url: "https://mcp.example/mcp",
			Oauth: &pb.OAuthClientCredentials{ClientId: "w", ClientSecretEnv: "ALLOWED", AssertionEnv: stolen}}},
		{"oauth.client_secret_env beside an allowed assertion_env", &pb.HTTPTransport{Url: "https://mcp.example/mcp",
			Oauth: &pb.OAuthClientCredentials{ClientId: "w", ClientSecretEnv: stolen, AssertionEnv: "ALLOWED"}}},
		{"enterprise_oauth.client_secret_env", enterprise(func(o *pb.OAuthEnterprise) { o.ClientSecretEnv = stolen })},
		{"enterprise_oauth.idp_client_secret_env", enterprise(func(o *pb.OAuthEnterprise) { o.IdpClientSecretEnv = stolen })},
		{"oauth.private_key_env", &pb.HTTPTransport{Url: "https://mcp.example/mcp", Oauth: &pb.OAuthClientCredentials{ClientId: "w", PrivateKeyEnv: stolen}}},
		{"user_oauth.client_secret_env", &pb.HTTPTransport{Url: "https://mcp.example/mcp", UserOauth: &pb.OAuthAuthorizationCode{ClientId: "c", ClientSecretEnv: stolen}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := &pb.ServerSpec{Name: "docs", Transport: &pb.ServerSpec_Http{Http: tc.http}}
			getenv := func(string) string { return "the value" }
			client, _ := startGateway(t, testConfig(), Options{Getenv: getenv, Secrets: secretenv.New([]string{"ALLOWED"}, nil)})
			_, err := client.AddServer(context.Background(), &pb.AddServerRequest{Spec: spec})
			if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), stolen) {
				t.Fatalf("AddServer naming %s: %v, want PERMISSION_DENIED naming it", stolen, err)
			}

			// The same spec written into the store behind the gateway's back is not connected.
			store, err := OpenBoltServerStore(filepath.Join(t.TempDir(), "gw.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = store.Close() })
			ctx := context.Background()
			if err := store.CreateServer(ctx, withDefaultPrefix(spec)); err != nil {
				t.Fatal(err)
			}
			var logs lockedBuffer
			g := New(testConfig(), Options{Store: store, Getenv: getenv, Secrets: secretenv.New([]string{"ALLOWED"}, nil),
				Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			t.Cleanup(g.Close)
			if err := g.syncStore(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := g.server("docs"); err == nil {
				t.Fatal("the stored spec naming a variable off the allowlist was connected")
			}
			if logs.count(stolen) == 0 {
				t.Errorf("the refusal does not name the variable: %s", logs.b.String())
			}
		})
	}
}

// FuzzJWTChecks: the checks of what users (ConnectServer's id_token), the operator's platform
// (the workload token) and identity providers (the ID-JAG) hand in never panic, and accept
// nothing over the size limit.
func FuzzJWTChecks(f *testing.F) {
	now := time.Unix(1_700_000_000, 0)
	f.Add(fakeJWT(map[string]any{"alg": "ES256"}, map[string]any{"iss": "https://idp.example", "exp": 1_800_000_000}))
	f.Add(fakeJWT(map[string]any{"typ": typIDJAG}, map[string]any{"exp": 1e300}))
	f.Add("eyJ9.eyJleHAiOi0xZTMwOH0.x")
	f.Add("a.b.c")
	f.Add("..")
	f.Add("bnVsbA.bnVsbA.")
	f.Fuzz(func(t *testing.T, tok string) {
		if err := checkIDToken(tok, "https://idp.example", "hermes", now); err == nil && len(tok) > maxIDToken {
			t.Fatalf("an ID token of %d bytes was accepted", len(tok))
		}
		if err := checkWorkloadJWT(tok, now); err == nil && len(tok) > maxIDToken {
			t.Fatalf("a workload token of %d bytes was accepted", len(tok))
		}
		var header struct {
			Typ string `json:"typ"`
		}
		var claims map[string]any
		_ = jwtParts(tok, &header, &claims)
	})
}
