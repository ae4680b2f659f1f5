package mcpgateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/secretenv"
	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// fakeEnterprise is an enterprise's identity provider (token exchange of ID tokens for
// ID-JAGs, at /idp/token) and an MCP server's authorization server (JWT bearer grant, at
// /token) on one test server. Their answers can be spoiled to test the gateway's checks.
type fakeEnterprise struct {
	srv *httptest.Server

	mu sync.Mutex // guards everything below
	// idpAnswer, when set, changes the IdP's answer before it is sent.
	idpAnswer func(map[string]any)
	// asAnswer, when set, changes the authorization server's answer before it is sent.
	asAnswer func(map[string]any)
	// expiresIn is the expires_in of the access tokens issued.
	expiresIn int
	access    map[string]string // access token → account
	issued    []string          // every token issued (ID-JAGs too), for the leak checks
	exchanges []map[string]string
	basicAuth []string // client ids of the JWT bearer grants' Basic authentication
	grants    []string // grant_type of every request to the authorization server
	// workload makes the authorization server take any JWT as the grant (workload identity
	// federation), not only ID-JAGs.
	workload bool
}

const (
	fakeASClient = "hermes-at-docs"
	fakeASSecret = "docs-secret-value"
	fakeIdPPath  = "/idp"
)

func fakeJWT(header, claims map[string]any) string {
	h, _ := json.Marshal(header)
	c, _ := json.Marshal(claims)
	return base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c) + ".c2ln"
}

func newFakeEnterprise(t *testing.T) *fakeEnterprise {
	f := &fakeEnterprise{expiresIn: 3600, access: map[string]string{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"issuer": f.srv.URL, "token_endpoint": f.srv.URL + "/token",
			"grant_types_supported": []string{grantJWTBearer},
			// The SDK's metadata discovery wants PKCE advertised, even for a JWT bearer grant.
			"code_challenge_methods_supported": []string{"S256"}, "token_endpoint_auth_methods_supported": []string{"client_secret_basic"}})
	})
	mux.HandleFunc(fakeIdPPath+"/token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		f.mu.Lock()
		defer f.mu.Unlock()
		seen := map[string]string{}
		for _, k := range []string{"grant_type", "subject_token_type", "requested_token_type", "audience", "resource", "client_id"} {
			seen[k] = r.PostForm.Get(k)
		}
		f.exchanges = append(f.exchanges, seen)
		var claims struct {
			Sub string `json:"sub"`
		}
		if jwtParts(r.PostForm.Get("subject_token"), &map[string]any{}, &claims) != nil || r.PostForm.Get("grant_type") != grantTokenExchange {
			writeJSONStatus(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant", "error_description": "echo " + r.PostForm.Get("subject_token")})
			return
		}
		jag := fakeJWT(map[string]any{"typ": typIDJAG, "alg": "ES256"}, map[string]any{"sub": claims.Sub, "aud": r.PostForm.Get("audience"), "client_id": fakeASClient})
		f.issued = append(f.issued, jag)
		a := map[string]any{"access_token": jag, "issued_token_type": tokenTypeIDJAG, "token_type": "N_A", "expires_in": 300}
		if f.idpAnswer != nil {
			f.idpAnswer(a)
		}
		if code, ok := a["status"].(int); ok {
			// A refusal whose description echoes the subject token, as some providers' do.
			writeJSONStatus(w, code, map[string]any{"error": a["error"], "error_description": "bad token " + r.PostForm.Get("subject_token")})
			return
		}
		writeJSON(w, a)
	})
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		f.mu.Lock()
		defer f.mu.Unlock()
		id, secret, _ := r.BasicAuth()
		f.basicAuth = append(f.basicAuth, id)
		f.grants = append(f.grants, r.PostForm.Get("grant_type"))
		var header map[string]any
		var claims struct {
			Sub string `json:"sub"`
		}
		if id != fakeASClient || secret != fakeASSecret || r.PostForm.Get("grant_type") != grantJWTBearer ||
			jwtParts(r.PostForm.Get("assertion"), &header, &claims) != nil || header["typ"] != typIDJAG && !f.workload || claims.Sub == "refused" {
			writeJSONStatus(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
			return
		}
		at := "at-" + randomText()
		f.access[at] = claims.Sub
		f.issued = append(f.issued, at)
		a := map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": f.expiresIn}
		if f.asAnswer != nil {
			f.asAnswer(a)
		}
		writeJSON(w, a)
	})
	f.srv = httptest.NewServer(mux)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeEnterprise) verify(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	account, ok := f.access[token]
	if !ok {
		return nil, auth.ErrInvalidToken
	}
	return &auth.TokenInfo{UserID: account, Expiration: time.Now().Add(time.Hour)}, nil
}

// idToken is account's ID token from the fake IdP, expiring at exp.
func (f *fakeEnterprise) idToken(account string, exp time.Time) string {
	return fakeJWT(map[string]any{"alg": "ES256"}, map[string]any{"iss": f.srv.URL + fakeIdPPath, "sub": account, "aud": "hermes-at-idp", "exp": exp.Unix()})
}

// enterpriseMCP is an MCP server at /mcp that takes the fake authorization server's tokens; its
// tool whoami answers with the token's account.
func enterpriseMCP(t *testing.T, f *fakeEnterprise) *httptest.Server {
	return bearerMCP(t, func() string { return f.srv.URL }, f.verify, nil, nil)
}

func enterpriseSpec(f *fakeEnterprise, url string) *pb.ServerSpec {
	return &pb.ServerSpec{Name: "docs", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: url, EnterpriseOauth: &pb.OAuthEnterprise{
		IdpIssuer: f.srv.URL + fakeIdPPath, IdpTokenUrl: f.srv.URL + fakeIdPPath + "/token", IdpClientId: "hermes-at-idp",
		ClientId: fakeASClient, ClientSecretEnv: "DOCS_SECRET"}}}}
}

// startEnterprise starts a gateway (bbolt store, the operator's key, logs captured) with the
// fake enterprise's MCP server added; it returns the store's bytes on disk too.
func startEnterprise(t *testing.T, f *fakeEnterprise) (pb.MCPGatewayServiceClient, *Gateway, *syncBuffer, func() []byte) {
	// The MCP server first: cleanups run in reverse, and the gateway must close its sessions
	// before the server closes.
	mcpURL := enterpriseMCP(t, f).URL + "/mcp"
	path := filepath.Join(t.TempDir(), "mcpgateway.db")
	store, err := OpenBoltServerStore(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	logs := &syncBuffer{}
	getenv := func(k string) string {
		if k == "DOCS_SECRET" {
			return fakeASSecret
		}
		return ""
	}
	client, g := startGateway(t, testConfig(), Options{Store: store, OAuthKey: testOAuthKey(t), Getenv: getenv,
		Secrets: secretenv.New([]string{"DOCS_SECRET"}, nil),
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if _, err := client.AddServer(context.Background(), &pb.AddServerRequest{Spec: enterpriseSpec(f, mcpURL)}); err != nil {
		t.Fatal(err)
	}
	return client, g, logs, func() []byte {
		raw, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
}

// TestEnterpriseOAuth: a user connects with their ID token; the gateway exchanges it at the IdP
// for an ID-JAG (audience the authorization server's issuer, resource the MCP server), redeems
// that with its client's Basic authentication, and calls with that user's token only. A second
// user never uses the first's token; an expired connection answers "connect your account";
// neither the ID token nor any issued token is in an RPC answer, the logs or the store.
func TestEnterpriseOAuth(t *testing.T) {
	ctx := context.Background()
	f := newFakeEnterprise(t)
	client, g, logs, dump := startEnterprise(t, f)
	var responses []proto.Message
	call := func(user string) *pb.CallToolResponse {
		t.Helper()
		r, err := client.CallTool(ctx, &pb.CallToolRequest{Server: "docs", Tool: "whoami", UserId: user})
		if err != nil {
			t.Fatal(err)
		}
		responses = append(responses, r)
		return r
	}
	connect := func(user string, idToken string) error {
		t.Helper()
		r, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: user, IdToken: idToken})
		if err == nil {
			responses = append(responses, r)
			if !r.GetConnected() || r.GetAuthorizationUrl() != "" {
				t.Fatalf("ConnectServer with an ID token answered %v", r)
			}
		}
		return err
	}
	// Without an ID token there is nothing to connect with: the caller is told what to give.
	if _, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "alice"}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "id_token") {
		t.Fatalf("ConnectServer without an ID token: %v", err)
	}
	aliceID := f.idToken("alice@corp", time.Now().Add(time.Hour))
	if err := connect("alice", aliceID); err != nil {
		t.Fatalf("alice connects: %v\n%s", err, logs.String())
	}
	f.mu.Lock()
	want := map[string]string{"grant_type": grantTokenExchange, "subject_token_type": tokenTypeIDToken, "requested_token_type": tokenTypeIDJAG,
		"audience": f.srv.URL, "resource": f.exchanges[0]["resource"], "client_id": "hermes-at-idp"}
	if diff := cmp.Diff(want, f.exchanges[0]); diff != "" || !strings.HasSuffix(want["resource"], "/mcp") {
		t.Errorf("the token exchange at the IdP (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{fakeASClient}, f.basicAuth); diff != "" {
		t.Errorf("the JWT bearer grants' Basic authentication (-want +got):\n%s", diff)
	}
	f.mu.Unlock()
	testenv.WaitFor(t, 30*time.Second, "the docs tools", func() bool {
		tools, _ := g.Tools("docs")
		return len(tools) == 1
	})
	if r := call("alice"); r.GetOutput() != "account alice@corp" {
		t.Fatalf("alice's call: %v", r)
	}
	// Bob has no connection: he is asked to connect (no link: his application connects with a
	// fresh ID token), never served with alice's account.
	if r := call("bob"); r.GetSuccess() || r.GetErrorCode() != codeAuthRequired || r.GetAuthorizationUrl() != "" || !strings.Contains(r.GetOutput(), "connect their account") {
		t.Fatalf("bob's call before connecting: %v", r)
	}
	if err := connect("bob", f.idToken("bob@corp", time.Now().Add(time.Hour))); err != nil {
		t.Fatalf("bob connects: %v", err)
	}
	for range 2 {
		if r := call("bob"); r.GetOutput() != "account bob@corp" {
			t.Fatalf("bob's call: %v", r)
		}
		if r := call("alice"); r.GetOutput() != "account alice@corp" {
			t.Fatalf("alice's call after bob connected: %v", r)
		}
	}
	// Carol's token expires (within oauth2's ten-second margin at once) and comes without a
	// refresh token: her call asks her to connect again, and her record is gone.
	f.mu.Lock()
	f.expiresIn = 5
	f.mu.Unlock()
	if err := connect("carol", f.idToken("carol@corp", time.Now().Add(time.Hour))); err != nil {
		t.Fatalf("carol connects: %v", err)
	}
	if r := call("carol"); r.GetSuccess() || r.GetErrorCode() != codeAuthRequired || !strings.Contains(r.GetOutput(), "expired") {
		t.Fatalf("carol's call with an expired token: %v", r)
	}
	if sealed, err := g.conns.GetConnection(ctx, "docs", "carol"); err != nil || sealed != nil {
		t.Fatalf("carol's expired connection is still stored: %v", err)
	}
	// Disconnecting forgets a connection.
	if d, err := client.DisconnectServer(ctx, &pb.DisconnectServerRequest{Server: "docs", UserId: "bob"}); err != nil || !d.GetDisconnected() {
		t.Fatalf("DisconnectServer: %v %v", d, err)
	}
	if r := call("bob"); r.GetErrorCode() != codeAuthRequired {
		t.Fatalf("bob's call after disconnecting: %v", r)
	}

	f.mu.Lock()
	secrets := append([]string{aliceID, fakeASSecret}, f.issued...)
	f.mu.Unlock()
	for _, m := range responses {
		raw, _ := proto.Marshal(m)
		for _, s := range secrets {
			if bytes.Contains(raw, []byte(s)) {
				t.Fatalf("an RPC answer holds a token or secret: %v", m)
			}
		}
	}
	store := dump()
	for _, s := range secrets {
		if strings.Contains(logs.String(), s) {
			t.Fatal("the logs hold a token or secret")
		}
		if bytes.Contains(store, []byte(s)) {
			t.Fatal("the store holds a token or secret in clear")
		}
	}
}

// TestEnterpriseOAuthRefusals: what cannot be the user's ID token is refused before it is sent;
// an IdP or authorization server answer of the wrong kind, or too large, is refused; nothing
// is stored then, and the refusal does not echo the tokens.
func TestEnterpriseOAuthRefusals(t *testing.T) {
	ctx := context.Background()
	f := newFakeEnterprise(t)
	client, g, logs, _ := startEnterprise(t, f)
	good := f.idToken("alice@corp", time.Now().Add(time.Hour))
	// Bob connects, so that the server's tools are listed (with his token) and discovered.
	if _, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "bob", IdToken: f.idToken("bob@corp", time.Now().Add(time.Hour))}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the docs tools", func() bool {
		tools, _ := g.Tools("docs")
		return len(tools) == 1
	})
	big := strings.Repeat("x", maxIssuedToken+1)
	for _, tc := range []struct {
		name      string
		idToken   string
		idp, as   func(map[string]any)
		code      codes.Code
		say       string
		exchanges int // token exchanges expected at the IdP
	}{
		{name: "oversize ID token", idToken: strings.Repeat("a", maxIDToken+1), code: codes.InvalidArgument, say: "at most"},
		{name: "not a JWT", idToken: "opaque-token", code: codes.InvalidArgument, say: "not a JWT"},
		{name: "another issuer", idToken: fakeJWT(map[string]any{}, map[string]any{"iss": "https://evil.example", "sub": "alice"}), code: codes.InvalidArgument, say: "not issued by"},
		{name: "expired ID token", idToken: f.idToken("alice@corp", time.Now().Add(-time.Minute)), code: codes.InvalidArgument, say: "expired"},
		// An ID token another application of the IdP received (its aud is that application),
		// handed in as the user's: refused before the IdP sees it.
		{name: "ID token of another client", idToken: fakeJWT(map[string]any{}, map[string]any{"iss": f.srv.URL + fakeIdPPath, "sub": "victim@corp", "aud": "some-other-app",
			"exp": time.Now().Add(time.Hour).Unix()}), code: codes.InvalidArgument, say: "not issued to the gateway's client"},
		{name: "ID token of other clients", idToken: fakeJWT(map[string]any{}, map[string]any{"iss": f.srv.URL + fakeIdPPath, "sub": "victim@corp", "aud": []string{"a", "b"},
			"exp": time.Now().Add(time.Hour).Unix()}), code: codes.InvalidArgument, say: "not issued to the gateway's client"},
		{name: "ID token without aud", idToken: fakeJWT(map[string]any{}, map[string]any{"iss": f.srv.URL + fakeIdPPath, "sub": "victim@corp",
			"exp": time.Now().Add(time.Hour).Unix()}), code: codes.InvalidArgument, say: "not issued to the gateway's client"},
		{name: "IdP issues an access token", idToken: good, idp: func(a map[string]any) { a["issued_token_type"] = "urn:ietf:params:oauth:token-type:access_token" }, code: codes.Unavailable, say: "not an identity assertion grant", exchanges: 1},
		{name: "IdP grant is a bearer token", idToken: good, idp: func(a map[string]any) { a["token_type"] = "Bearer" }, code: codes.Unavailable, say: "not N_A", exchanges: 1},
		{name: "IdP grant is not an ID-JAG", idToken: good, idp: func(a map[string]any) {
			a["access_token"] = fakeJWT(map[string]any{"typ": "JWT"}, map[string]any{"sub": "alice"})
		}, code: codes.Unavailable, say: typIDJAG, exchanges: 1},
		{name: "IdP grant oversize", idToken: good, idp: func(a map[string]any) { a["access_token"] = big }, code: codes.Unavailable, say: "longer than", exchanges: 1},
		{name: "IdP answers without a token", idToken: good, idp: func(a map[string]any) { delete(a, "access_token") }, code: codes.Unavailable, say: "no access_token", exchanges: 1},
		{name: "IdP refuses", idToken: good, idp: func(a map[string]any) { a["status"], a["error"] = http.StatusBadRequest, "invalid_grant" },
			code: codes.FailedPrecondition, say: "the identity provider refused the token request: invalid_grant", exchanges: 1},
		{name: "AS issues a DPoP token", idToken: good, as: func(a map[string]any) { a["token_type"] = "DPoP" }, code: codes.Unavailable, say: "bearer tokens only", exchanges: 1},
		{name: "AS token oversize", idToken: good, as: func(a map[string]any) { a["access_token"] = big }, code: codes.Unavailable, say: "longer than", exchanges: 1},
		{name: "AS refresh token oversize", idToken: good, as: func(a map[string]any) { a["refresh_token"] = big }, code: codes.Unavailable, say: "longer than", exchanges: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f.mu.Lock()
			f.idpAnswer, f.asAnswer, f.exchanges = tc.idp, tc.as, nil
			f.mu.Unlock()
			_, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: "alice", IdToken: tc.idToken})
			if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.say) {
				t.Fatalf("ConnectServer: %v, want %v saying %q", err, tc.code, tc.say)
			}
			if len(tc.idToken) > 20 && strings.Contains(err.Error(), tc.idToken[:20]) {
				t.Fatalf("the refusal echoes the ID token: %v", err)
			}
			f.mu.Lock()
			n := len(f.exchanges)
			f.mu.Unlock()
			if n != tc.exchanges {
				t.Fatalf("%d token exchanges at the IdP, want %d", n, tc.exchanges)
			}
			r, err := client.CallTool(ctx, &pb.CallToolRequest{Server: "docs", Tool: "whoami", UserId: "alice"})
			if err != nil || r.GetErrorCode() != codeAuthRequired {
				t.Fatalf("a refused connection was stored: %v %v", r, err)
			}
		})
	}
	if strings.Contains(logs.String(), good) {
		t.Fatal("the logs hold the ID token")
	}
}

// TestEnterpriseIDTokenOnOtherServers: an ID token is only for enterprise_oauth servers.
func TestEnterpriseIDTokenOnOtherServers(t *testing.T) {
	as := newFakeAS(t)
	cfg := testConfig()
	cfg.OAuthRedirectURL = testRedirect
	client, _ := startGateway(t, cfg, Options{OAuthKey: testOAuthKey(t)})
	if _, err := client.AddServer(context.Background(), &pb.AddServerRequest{Spec: userOAuthSpec(protectedMCP(t, as).URL + "/mcp")}); err != nil {
		t.Fatal(err)
	}
	_, err := client.ConnectServer(context.Background(), &pb.ConnectServerRequest{Server: "docs", UserId: "alice", IdToken: "a.b.c"})
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "enterprise_oauth") {
		t.Fatalf("ConnectServer with an ID token to a user_oauth server: %v", err)
	}
}

// TestValidateEnterpriseOAuth: the spec's enterprise_oauth block.
func TestValidateEnterpriseOAuth(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*pb.HTTPTransport)
		want   []string // what the refusal names; none: accepted
	}{
		{name: "valid", change: func(*pb.HTTPTransport) {}},
		{name: "no issuer", change: func(h *pb.HTTPTransport) { h.EnterpriseOauth.IdpIssuer = "" }, want: []string{"enterprise_oauth.idp_issuer"}},
		{name: "bad token url", change: func(h *pb.HTTPTransport) { h.EnterpriseOauth.IdpTokenUrl = "ftp://x" }, want: []string{"enterprise_oauth.idp_token_url"}},
		{name: "no client ids", change: func(h *pb.HTTPTransport) { h.EnterpriseOauth.IdpClientId, h.EnterpriseOauth.ClientId = "", "" },
			want: []string{"enterprise_oauth.idp_client_id", "enterprise_oauth.client_id"}},
		{name: "bad env", change: func(h *pb.HTTPTransport) { h.EnterpriseOauth.ClientSecretEnv = "A=B" }, want: []string{"enterprise_oauth.client_secret_env"}},
		{name: "bad scope", change: func(h *pb.HTTPTransport) { h.EnterpriseOauth.Scopes = []string{"a b"} }, want: []string{"enterprise_oauth.scopes[0]"}},
		{name: "with user_oauth", change: func(h *pb.HTTPTransport) { h.UserOauth = &pb.OAuthAuthorizationCode{} }, want: []string{"cannot be combined"}},
		{name: "with a bearer token", change: func(h *pb.HTTPTransport) { h.BearerTokenEnv = "TOKEN" }, want: []string{"cannot be combined"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &pb.HTTPTransport{Url: "https://mcp.example/mcp", EnterpriseOauth: &pb.OAuthEnterprise{
				IdpIssuer: "https://idp.example", IdpClientId: "hermes", ClientId: "hermes", ClientSecretEnv: "S", IdpClientSecretEnv: "T"}}
			tc.change(h)
			var v rpc.Violations
			ValidateSpec(&v, "spec", &pb.ServerSpec{Name: "docs", Transport: &pb.ServerSpec_Http{Http: h}})
			err := v.Err()
			if len(tc.want) == 0 && err != nil || len(tc.want) > 0 && err == nil {
				t.Fatalf("got %v, want a refusal naming %q", err, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not name %s", err, w)
				}
			}
		})
	}
}

// TestWorkloadIdentity: with assertion_env the gateway presents the workload's JWT (from the
// operator's environment) as a JWT bearer grant and calls with the token; an expired workload
// token is not sent; a refused grant is reported, never retried as another grant type.
func TestWorkloadIdentity(t *testing.T) {
	for _, tc := range []struct {
		name     string
		sub      string
		exp      time.Duration
		ready    bool
		say      string
		requests int // requests expected at the token endpoint by the first attempt's end
	}{
		{name: "valid", sub: "workload-1", exp: time.Hour, ready: true, requests: 1},
		{name: "expired", sub: "workload-1", exp: -time.Minute, say: "expired"},
		{name: "refused", sub: "refused", exp: time.Hour, say: "invalid_grant", requests: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeEnterprise(t)
			f.workload = true
			mcpURL := enterpriseMCP(t, f).URL + "/mcp"
			jwt := fakeJWT(map[string]any{"alg": "ES256"}, map[string]any{"iss": "https://platform.example", "sub": tc.sub, "aud": f.srv.URL, "exp": time.Now().Add(tc.exp).Unix()})
			getenv := func(k string) string {
				switch k {
				case "DOCS_SECRET":
					return fakeASSecret
				case "WORKLOAD_JWT":
					return jwt
				}
				return ""
			}
			logs := &syncBuffer{}
			client, _ := startGateway(t, testConfig(), Options{Getenv: getenv, Secrets: secretenv.New([]string{"DOCS_SECRET", "WORKLOAD_JWT"}, nil),
				Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
			spec := &pb.ServerSpec{Name: "docs", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: mcpURL,
				Oauth: &pb.OAuthClientCredentials{ClientId: fakeASClient, ClientSecretEnv: "DOCS_SECRET", AssertionEnv: "WORKLOAD_JWT"}}}}
			resp, err := client.AddServer(context.Background(), &pb.AddServerRequest{Spec: spec, Wait: true})
			if err != nil {
				t.Fatal(err)
			}
			srv := resp.GetServer()
			if ready := srv.GetState() == pb.ServerState_SERVER_STATE_READY; ready != tc.ready || !strings.Contains(srv.GetLastError(), tc.say) {
				t.Fatalf("server %s (%s), want ready %v saying %q", srv.GetState(), srv.GetLastError(), tc.ready, tc.say)
			}
			f.mu.Lock()
			grants := slices.Clone(f.grants)
			f.mu.Unlock()
			if len(grants) < tc.requests || len(grants) > 0 && slices.IndexFunc(grants, func(g string) bool { return g != grantJWTBearer }) >= 0 || tc.requests == 0 && len(grants) > 0 {
				t.Fatalf("grant types at the token endpoint: %q, want %d JWT bearer grants", grants, tc.requests)
			}
			if tc.ready {
				r, err := client.CallTool(context.Background(), &pb.CallToolRequest{Server: "docs", Tool: "whoami"})
				if err != nil || r.GetOutput() != "account "+tc.sub {
					t.Fatalf("call: %v %v", r, err)
				}
			}
			if strings.Contains(logs.String(), jwt) || strings.Contains(srv.GetLastError(), jwt) {
				t.Fatal("the workload token is in the logs or the server's state")
			}
		})
	}
}

// TestEnterpriseConnectOneAtATime: a user's ConnectServer with an ID token holds at most one
// exchange in flight per server: while one waits at the IdP, a second of the same user is
// refused at once (RESOURCE_EXHAUSTED) without a request to the IdP, so a user cannot have the
// gateway send any number of token requests at once with the operator's client. Another user
// is not held up, and the user connects again once the first has finished.
func TestEnterpriseConnectOneAtATime(t *testing.T) {
	ctx := context.Background()
	f := newFakeEnterprise(t)
	// The IdP's token endpoint, held until released: it forwards to the fake IdP.
	arrived, release := make(chan string, 4), make(chan struct{})
	var alices atomic.Int32
	idp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		var claims struct {
			Sub string `json:"sub"`
		}
		_ = jwtParts(r.PostForm.Get("subject_token"), &map[string]any{}, &claims)
		arrived <- claims.Sub
		if claims.Sub == "alice@corp" && alices.Add(1) == 1 {
			<-release
		}
		resp, err := http.PostForm(f.srv.URL+fakeIdPPath+"/token", r.PostForm)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer func() { _ = resp.Body.Close() }()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(idp.Close)
	var released sync.Once
	free := func() { released.Do(func() { close(release) }) }
	t.Cleanup(free) // before idp.Close, which waits for the held request
	client, _, _, _ := startEnterprise(t, f)
	if _, err := client.RemoveServer(ctx, &pb.RemoveServerRequest{Name: "docs"}); err != nil {
		t.Fatal(err)
	}
	spec := enterpriseSpec(f, enterpriseMCP(t, f).URL+"/mcp")
	spec.GetHttp().GetEnterpriseOauth().IdpTokenUrl = idp.URL
	if _, err := client.AddServer(ctx, &pb.AddServerRequest{Spec: spec}); err != nil {
		t.Fatal(err)
	}
	connect := func(user, account string) error {
		_, err := client.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: user, IdToken: f.idToken(account, time.Now().Add(time.Hour))})
		return err
	}
	first := make(chan error, 1)
	go func() { first <- connect("alice", "alice@corp") }()
	if sub := <-arrived; sub != "alice@corp" {
		t.Fatalf("the IdP got %q first", sub)
	}
	if err := connect("alice", "alice@corp"); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("alice's second ConnectServer while the first is under way: %v, want RESOURCE_EXHAUSTED", err)
	}
	if err := connect("bob", "bob@corp"); err != nil {
		t.Fatalf("bob's ConnectServer while alice's is under way: %v", err)
	}
	if sub := <-arrived; sub != "bob@corp" {
		t.Fatalf("the IdP got %q, want bob's exchange only (alice's second is not sent)", sub)
	}
	free()
	if err := <-first; err != nil {
		t.Fatalf("alice's first ConnectServer: %v", err)
	}
	if err := connect("alice", "alice@corp"); err != nil {
		t.Fatalf("alice's ConnectServer after the first finished: %v", err)
	}
	if sub := <-arrived; sub != "alice@corp" {
		t.Fatalf("the IdP got %q", sub)
	}
}

// TestCheckIDTokenAudience: an ID token's aud (a string or an array) must name the gateway's
// client at the IdP.
func TestCheckIDTokenAudience(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name string
		aud  any // nil: no aud
		ok   bool
	}{
		{"the gateway's client", "hermes", true},
		{"several, the gateway's among them", []string{"front-end", "hermes"}, true},
		{"another client", "front-end", false},
		{"several others", []string{"a", "b"}, false},
		{"none", nil, false},
		{"not a string", 42, false},
		{"a prefix of the gateway's", "herm", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims := map[string]any{"iss": "https://idp.example", "exp": now.Add(time.Hour).Unix()}
			if tc.aud != nil {
				claims["aud"] = tc.aud
			}
			err := checkIDToken(fakeJWT(map[string]any{"alg": "ES256"}, claims), "https://idp.example", "hermes", now)
			if (err == nil) != tc.ok {
				t.Fatalf("checkIDToken: %v, want ok %v", err, tc.ok)
			}
		})
	}
}
