package mcpgateway

import (
	"context"
	"fmt"
	"net/http"

	"golang.org/x/oauth2"
	"golang.org/x/oauth2/clientcredentials"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// oauthTransport adds an access token from the OAuth 2.0 client credentials grant to every
// request of a Streamable HTTP server. The token is fetched on first use through the gateway's
// HTTP client (so the egress policy covers the token endpoint too) and renewed when it expires.
func (c *serverConn) oauthTransport(o *pb.OAuthClientCredentials, base http.RoundTripper) (http.RoundTripper, error) {
	secret := c.g.getenv(o.GetClientSecretEnv())
	if secret == "" {
		return nil, fmt.Errorf("the OAuth client secret variable %s is not set in the gateway's environment", o.GetClientSecretEnv())
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
	ctx := context.WithValue(c.ctx, oauth2.HTTPClient, &http.Client{Transport: c.g.httpBase})
	return &oauth2.Transport{Source: cc.TokenSource(ctx), Base: base}, nil
}
