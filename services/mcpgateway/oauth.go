package mcpgateway

import (
	"context"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/auth/extauth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// oauthClient sets up the OAuth 2.0 client credentials grant for a Streamable HTTP server.
// Every token request goes through the gateway's HTTP client, so the egress policy covers the
// token endpoint too.
//
// With a token URL, the token is fetched on first use and renewed when it expires: the returned
// transport adds it to every request. Without one, the SDK's handler discovers the token
// endpoint the first time the server answers 401 (protected resource metadata, RFC 9728, then
// authorization server metadata, RFC 8414), as the MCP authorization spec (SEP-1046) describes;
// the returned handler goes on the SDK transport, and the side channel takes its token from it.
func (c *serverConn) oauthClient(o *pb.OAuthClientCredentials, base http.RoundTripper) (http.RoundTripper, auth.OAuthHandler, error) {
	secret, err := c.g.powers.secret(o.GetClientSecretEnv(), c.g.getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("OAuth client secret: %w", err)
	}
	tokenClient := &http.Client{Transport: c.g.httpBase}
	if o.GetTokenUrl() == "" {
		h, err := extauth.NewClientCredentialsHandler(&extauth.ClientCredentialsHandlerConfig{
			Credentials: &oauthex.ClientCredentials{ClientID: o.GetClientId(), ClientSecretAuth: &oauthex.ClientSecretAuth{ClientSecret: secret}},
			HTTPClient:  tokenClient,
		})
		if err != nil {
			return nil, nil, err
		}
		return base, h, nil
	}
	style := oauth2.AuthStyleInHeader
	if o.GetAuthMethod() == "client_secret_post" {
		style = oauth2.AuthStyleInParams
	}
	cc := &clientcredentials.Config{
		ClientID:     o.GetClientId(),
		ClientSecret: secret,
		TokenURL:     o.GetTokenUrl(),
		Scopes:       o.GetScopes(),
		AuthStyle:    style,
	}
	ctx := context.WithValue(c.ctx, oauth2.HTTPClient, tokenClient)
	return &oauth2.Transport{Source: cc.TokenSource(ctx), Base: base}, nil, nil
}

// handlerTokenTransport adds the token an OAuth handler holds (once it has authorized) to the
// side channel's requests.
type handlerTokenTransport struct {
	base http.RoundTripper
	h    auth.OAuthHandler
}

func (t *handlerTokenTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ts, err := t.h.TokenSource(r.Context())
	if err != nil || ts == nil {
		return t.base.RoundTrip(r)
	}
	tok, err := ts.Token()
	if err != nil {
		return nil, err
	}
	r = r.Clone(r.Context())
	tok.SetAuthHeader(r)
	return t.base.RoundTrip(r)
}
