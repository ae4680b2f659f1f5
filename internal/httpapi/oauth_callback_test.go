package httpapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// callbackGateway records the authorization responses that reach it.
type callbackGateway struct {
	mcpgatewayv1.UnimplementedMCPGatewayServiceServer
	got chan *mcpgatewayv1.CompleteAuthorizationRequest
}

func (g *callbackGateway) CompleteAuthorization(_ context.Context, req *mcpgatewayv1.CompleteAuthorizationRequest) (*mcpgatewayv1.CompleteAuthorizationResponse, error) {
	g.got <- req
	return &mcpgatewayv1.CompleteAuthorizationResponse{Server: "docs", Message: "connected"}, nil
}

// TestOAuthCallbackRoute: the browser's redirect (a GET with the authorization response in the
// query, no key, no Origin) reaches CompleteAuthorization with every parameter.
func TestOAuthCallbackRoute(t *testing.T) {
	srv := rpc.NewServer(rpc.ServerOptions{Logger: slog.New(slog.DiscardHandler)})
	g := &callbackGateway{got: make(chan *mcpgatewayv1.CompleteAuthorizationRequest, 1)}
	srv.Register(&mcpgatewayv1.MCPGatewayService_ServiceDesc, g)
	api, err := New(testenv.Serve(t, srv), Options{Services: []string{mcpgatewayv1.MCPGatewayService_ServiceDesc.ServiceName}})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(api.Handler())
	defer hs.Close()
	for _, tc := range []struct {
		query string
		want  *mcpgatewayv1.CompleteAuthorizationRequest
	}{
		{"code=c-1&state=s-1", &mcpgatewayv1.CompleteAuthorizationRequest{Code: "c-1", State: "s-1"}},
		{"code=%E4%BB%A3%E7%A0%81&state=s%2F2&iss=https%3A%2F%2Fas.example", &mcpgatewayv1.CompleteAuthorizationRequest{Code: "代码", State: "s/2", Iss: "https://as.example"}},
		{"error=access_denied&error_description=the+user+said+no&state=s-3", &mcpgatewayv1.CompleteAuthorizationRequest{Error: "access_denied", ErrorDescription: "the user said no", State: "s-3"}},
	} {
		resp, err := http.Get(hs.URL + "/v1/mcp/oauth/callback?" + tc.query)
		if err != nil {
			t.Fatal(err)
		}
		var body map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || body["server"] != "docs" {
			t.Fatalf("%s: %d %v", tc.query, resp.StatusCode, body)
		}
		if diff := cmp.Diff(tc.want, <-g.got, protocmp.Transform()); diff != "" {
			t.Errorf("%s: request (-want +got):\n%s", tc.query, diff)
		}
	}
}
