package mcpgateway

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/nats-io/nats.go"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/endpoint"
)

// The API keys of the endpoint tests.
const (
	epAliceKey = "sk-alice-0123456789abcdef"
	epBobKey   = "sk-bob-0123456789abcdefgh"
	epCarolKey = "sk-carol-0123456789abcdef"
	epOpsKey   = "sk-ops-0123456789abcdefgh"
)

// oauthStack is the whole path of a call from an MCP client of Hermes to a server with per-user
// OAuth: Hermes' MCP endpoint behind the API keys (endpoint.Authenticated, as hermes serve
// mounts it) over real HTTP, the tool service over gRPC, the gateway over gRPC, and the fake
// provider and protected server of TestUserOAuth.
type oauthStack struct {
	as      *fakeAS
	gw      pb.MCPGatewayServiceClient
	tools   toolsv1.ToolServiceClient
	ep      *endpoint.Server
	mcpURL  string
	connect atomic.Int64 // OnUserConnected calls
}

func startOAuthStack(t *testing.T, epCfg endpoint.Config) *oauthStack {
	t.Helper()
	return startOAuthStackRelay(t, epCfg, false)
}

// startOAuthStackRelay is startOAuthStack; with viaNATS the gateway and the endpoint are as on
// two replicas: the gateway announces a connected account over NATS (as app does) on its own
// connection, and the endpoint hears it on another, never directly.
func startOAuthStackRelay(t *testing.T, epCfg endpoint.Config, viaNATS bool) *oauthStack {
	t.Helper()
	s := &oauthStack{as: newFakeAS(t)}
	subject := "test.account_connected." + rand.Text()
	var gwRelay, epRelay *NATSElicitRelay
	if viaNATS {
		gwRelay, epRelay = NewNATSElicitRelay(testNATS(t), "test.elicitation"), NewNATSElicitRelay(testNATS(t), "test.elicitation")
	}
	protected := protectedMCP(t, s.as)

	// The tool service, whose MCP tools go to the gateway; the gateway registers its tools there.
	var gw atomic.Pointer[pb.MCPGatewayServiceClient]
	s.tools = startToolService(t, &gw)

	var ep atomic.Pointer[endpoint.Server]
	cfg := testConfig()
	cfg.OAuthRedirectURL = testRedirect
	key, err := ParseOAuthKey(strings.Repeat("k", 40))
	if err != nil {
		t.Fatal(err)
	}
	client, _ := startGateway(t, cfg, Options{
		OAuthKey: key,
		Registry: NewToolServiceRegistry(func() (toolsv1.ToolServiceClient, error) { return s.tools, nil }),
		OnUserConnected: func(ctx context.Context, server, user string) {
			s.connect.Add(1)
			if gwRelay != nil {
				if err := gwRelay.AnnounceConnected(subject, "gateway-replica", server, user); err != nil {
					t.Errorf("announcing: %v", err)
				}
				return
			}
			if e := ep.Load(); e != nil {
				e.UserConnected(ctx, user, server)
			}
		},
	})
	s.gw = client
	gw.Store(&client)

	s.ep, err = endpoint.New(endpoint.Options{
		Tools:  func() (endpoint.ToolClient, error) { return s.tools, nil },
		Logger: testLogger(t),
		Config: epCfg,
	})
	if err != nil {
		t.Fatal(err)
	}
	ep.Store(s.ep)
	if epRelay != nil {
		stop, err := epRelay.ListenConnected(subject, "endpoint-replica", func(server, user string) { s.ep.UserConnected(context.Background(), user, server) })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(stop)
	}
	keysFile := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(keysFile, []byte(epAliceKey+": alice\n"+epBobKey+": bob\n"+epCarolKey+": carol\n"+epOpsKey+": {role: operator, name: ops}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := auth.LoadKeyFile(keysFile, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(endpoint.Authenticated(auth.New(keys, testLogger(t)), true, s.ep.HTTPHandler()))
	t.Cleanup(hs.Close)
	s.mcpURL = hs.URL

	if _, err := client.AddServer(context.Background(), &pb.AddServerRequest{Spec: userOAuthSpec(protected.URL + "/mcp")}); err != nil {
		t.Fatal(err)
	}
	return s
}

// connectDirect connects user's account with ConnectServer, as POST /v1/mcp/servers/docs:connect
// does, and completes the callback.
func (s *oauthStack) connectDirect(t *testing.T, user, account string) {
	t.Helper()
	ctx := context.Background()
	cs, err := s.gw.ConnectServer(ctx, &pb.ConnectServerRequest{Server: "docs", UserId: user})
	if err != nil || cs.GetAuthorizationUrl() == "" {
		t.Fatalf("ConnectServer(%s): %v %v", user, cs, err)
	}
	if _, err := s.gw.CompleteAuthorization(ctx, browser(t, cs.GetAuthorizationUrl(), account)); err != nil {
		t.Fatalf("CompleteAuthorization(%s): %v", user, err)
	}
}

// epClient is an MCP client of the endpoint with an API key; urlMode declares elicitation.url.
type epClient struct {
	cs       *mcp.ClientSession
	complete chan string // elicitation ids of notifications/elicitation/complete
}

func (s *oauthStack) client(t *testing.T, header map[string]string, urlMode bool) (*epClient, error) {
	t.Helper()
	c := &epClient{complete: make(chan string, 8)}
	opts := &mcp.ClientOptions{
		ElicitationCompleteHandler: func(_ context.Context, req *mcp.ElicitationCompleteNotificationRequest) {
			c.complete <- req.Params.ElicitationID
		},
	}
	if urlMode {
		opts.ElicitationHandler = func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "decline"}, nil
		}
		opts.Capabilities = &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}}
	}
	cl := mcp.NewClient(&mcp.Implementation{Name: "ide", Version: "1"}, opts)
	h := http.Header{}
	for k, v := range header {
		h.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: s.mcpURL, HTTPClient: &http.Client{Transport: &headerTransport{base: http.DefaultTransport, header: h}}}, nil)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = cs.Close() })
	c.cs = cs
	return c, nil
}

func (s *oauthStack) mustClient(t *testing.T, key string, urlMode bool) *epClient {
	t.Helper()
	c, err := s.client(t, map[string]string{"Authorization": "Bearer " + key}, urlMode)
	if err != nil {
		t.Fatalf("connect with %s: %v", key, err)
	}
	return c
}

func (c *epClient) whoami(t *testing.T) (*mcp.CallToolResult, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.cs.CallTool(ctx, &mcp.CallToolParams{Name: "docs_whoami", Arguments: map[string]any{}})
}

func resultText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// urlElicitations reads the URL elicitations of a -32042 URLElicitationRequired error.
func urlElicitations(t *testing.T, err error) []*mcp.ElicitParams {
	t.Helper()
	var rpcErr *jsonrpc.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != mcp.CodeURLElicitationRequired {
		t.Fatalf("call error %v, want JSON-RPC %d", err, mcp.CodeURLElicitationRequired)
	}
	var data struct {
		Elicitations []*mcp.ElicitParams `json:"elicitations"`
	}
	if err := json.Unmarshal(rpcErr.Data, &data); err != nil {
		t.Fatal(err)
	}
	return data.Elicitations
}

// TestEndpointUserOAuthURLElicitation: an MCP client of Hermes with a user's key calls a tool of
// a per-user OAuth server; Hermes answers with the URL elicitation of that user's own link; the
// user follows it at the provider; the client is told the elicitation is complete and its call
// again runs with that user's token. Other users' calls never use it, never get the link or the
// completion, and a user key cannot act as another user.
func TestEndpointUserOAuthURLElicitation(t *testing.T) {
	for _, viaNATS := range []bool{false, true} {
		name := "one replica"
		if viaNATS {
			// The callback lands on another replica than the one holding the session.
			name = "callback on another replica"
		}
		t.Run(name, func(t *testing.T) { testEndpointUserOAuthURLElicitation(t, viaNATS) })
	}
}

func testEndpointUserOAuthURLElicitation(t *testing.T, viaNATS bool) {
	s := startOAuthStackRelay(t, endpoint.Config{}, viaNATS)
	// Bob connects first (the server lists its tools once a user has connected).
	s.connectDirect(t, "bob", "bob-account")
	testenv.WaitFor(t, 30*time.Second, "docs_whoami in the tool service", func() bool {
		r, err := s.tools.ListTools(context.Background(), &toolsv1.ListToolsRequest{Names: []string{"docs_whoami"}})
		return err == nil && len(r.GetTools()) == 1
	})

	alice := s.mustClient(t, epAliceKey, true)
	bob := s.mustClient(t, epBobKey, true)

	_, err := alice.whoami(t)
	els := urlElicitations(t, err)
	if len(els) != 1 || els[0].Mode != "url" || els[0].ElicitationID == "" || !strings.HasPrefix(els[0].URL, s.as.srv.URL+"/authorize?") ||
		!strings.Contains(els[0].Message, "docs") {
		t.Fatalf("elicitations %+v, want one URL elicitation of the provider's authorize URL", els)
	}
	link, id := els[0].URL, els[0].ElicitationID

	// Bob is not asked anything and keeps using his own account.
	if r, err := bob.whoami(t); err != nil || r.IsError || resultText(r) != "account bob-account" {
		t.Fatalf("bob's call: %v %v", r, err)
	}

	// Alice opens her link; the callback stores her connection and her session hears of it.
	connectsBefore := s.connect.Load()
	if _, err := s.gw.CompleteAuthorization(context.Background(), browser(t, link, "alice-account")); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-alice.complete:
		if got != id {
			t.Errorf("elicitation complete for %q, want %q", got, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no notifications/elicitation/complete after the callback (%d connections announced)", s.connect.Load()-connectsBefore)
	}
	if r, err := alice.whoami(t); err != nil || r.IsError || resultText(r) != "account alice-account" {
		t.Fatalf("alice's call after connecting: %v %v", r, err)
	}
	if r, err := bob.whoami(t); err != nil || resultText(r) != "account bob-account" {
		t.Fatalf("bob's call after alice connected: %v %v", r, err)
	}
	select {
	case got := <-bob.complete:
		t.Errorf("bob's session was told of elicitation %q", got)
	default:
	}

	// A client without URL elicitation gets the result text with the user's own link.
	carol := s.mustClient(t, epCarolKey, false)
	r, err := carol.whoami(t)
	if err != nil || !r.IsError || !strings.Contains(resultText(r), s.as.srv.URL+"/authorize?") || strings.Contains(resultText(r), link) {
		t.Fatalf("carol's call: %v %v, want an isError result with her own link", resultText(r), err)
	}

	// An operator names the user it acts for; alice's account is hers alone.
	ops, err := s.client(t, map[string]string{"Authorization": "Bearer " + epOpsKey, auth.UserHeader: "alice"}, false)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := ops.whoami(t); err != nil || resultText(r) != "account alice-account" {
		t.Fatalf("operator for alice: %v %v", r, err)
	}
}

// TestEndpointUserIsTheKeys: a user key never acts as another user on the MCP endpoint: naming
// one in the header is refused, and a session is usable only by the caller that started it.
func TestEndpointUserIsTheKeys(t *testing.T) {
	s := startOAuthStack(t, endpoint.Config{})
	s.connectDirect(t, "alice", "alice-account")
	testenv.WaitFor(t, 30*time.Second, "docs_whoami in the tool service", func() bool {
		r, err := s.tools.ListTools(context.Background(), &toolsv1.ListToolsRequest{Names: []string{"docs_whoami"}})
		return err == nil && len(r.GetTools()) == 1
	})
	alice := s.mustClient(t, epAliceKey, true)

	post := func(key, session string, header map[string]string) int {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"probe","version":"1"}}}`
		if session != "" {
			body = `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"docs_whoami","arguments":{}}}`
		}
		req, _ := http.NewRequest(http.MethodPost, s.mcpURL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+key)
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	got := map[string]int{
		"bob names alice":             post(epBobKey, "", map[string]string{auth.UserHeader: "alice"}),
		"bob names himself":           post(epBobKey, "", map[string]string{auth.UserHeader: "bob"}),
		"bob in alice's session":      post(epBobKey, alice.cs.ID(), nil),
		"the operator in her session": post(epOpsKey, alice.cs.ID(), map[string]string{auth.UserHeader: "alice"}),
		"no key":                      post("", "", nil),
	}
	want := map[string]int{
		"bob names alice":             http.StatusForbidden,
		"bob names himself":           http.StatusOK,
		"bob in alice's session":      http.StatusForbidden,
		"the operator in her session": http.StatusForbidden,
		"no key":                      http.StatusUnauthorized,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("HTTP status (-want +got):\n%s", d)
	}
	// Alice's own session still works.
	if r, err := alice.whoami(t); err != nil || resultText(r) != "account alice-account" {
		t.Fatalf("alice's call: %v %v", r, err)
	}
}

// TestEndpointSessionsPerCaller: one API key acting for one user holds at most
// MaxSessionsPerCaller sessions (429 beyond), so one user cannot take the endpoint's sessions
// from the others; a session closed frees its place.
func TestEndpointSessionsPerCaller(t *testing.T) {
	s := startOAuthStack(t, endpoint.Config{MaxSessionsPerCaller: 2})
	first := s.mustClient(t, epAliceKey, false)
	s.mustClient(t, epAliceKey, false)
	if _, err := s.client(t, map[string]string{"Authorization": "Bearer " + epAliceKey}, false); err == nil || !strings.Contains(err.Error(), http.StatusText(http.StatusTooManyRequests)) {
		t.Fatalf("alice's third session: %v, want HTTP 429", err)
	}
	s.mustClient(t, epBobKey, false) // bob has his own places
	if err := first.cs.Close(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "a place for alice after closing a session", func() bool {
		_, err := s.client(t, map[string]string{"Authorization": "Bearer " + epAliceKey}, false)
		return err == nil
	})
}

// testNATS connects to the test NATS server, closed when the test ends.
func testNATS(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect("nats://127.0.0.1:4222")
	if err != nil {
		t.Fatalf("NATS at 127.0.0.1:4222 is required: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestAccountConnectedAnnouncements: an announcement reaches every listener, another
// connection's included; malformed ones (not JSON, a name missing or over 256 bytes), which
// anyone on the bus could send, and the listener's own replica's are dropped before the
// endpoint sees them.
func TestAccountConnectedAnnouncements(t *testing.T) {
	subject := "test.account_connected." + rand.Text()
	pub := testNATS(t)
	got := make(chan [2]string, 8)
	stop, err := NewNATSElicitRelay(testNATS(t), "x").ListenConnected(subject, "me", func(server, user string) { got <- [2]string{server, user} })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// The listener's own announcements are skipped too: its replica told its endpoint directly.
	for _, junk := range []string{"not json", `{"server":"docs"}`, `{"user":"alice"}`, `{"server":"docs","user":"` + strings.Repeat("a", 257) + `"}`,
		`{"server":"docs","user":"own","origin":"me"}`} {
		if err := pub.Publish(subject, []byte(junk)); err != nil {
			t.Fatal(err)
		}
	}
	if err := NewNATSElicitRelay(pub, "x").AnnounceConnected(subject, "other", "docs", "alice"); err != nil {
		t.Fatal(err)
	}
	// One publisher's messages arrive in order: the first one delivered must be the valid one.
	select {
	case g := <-got:
		if diff := cmp.Diff([2]string{"docs", "alice"}, g); diff != "" {
			t.Errorf("announcement (-want +got):\n%s", diff)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no announcement heard")
	}
}
