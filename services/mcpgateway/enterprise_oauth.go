package mcpgateway

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"golang.org/x/oauth2"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/rpc"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// Enterprise-Managed Authorization (a server spec's http.enterprise_oauth; SEP-990, the MCP
// extension io.modelcontextprotocol/enterprise-managed-authorization). A user signs in at the
// enterprise's identity provider (IdP), not at each MCP server: ConnectServer carries the
// user's ID token, which the gateway exchanges at the IdP for an Identity Assertion JWT
// Authorization Grant (ID-JAG; token exchange, RFC 8693) addressed to the MCP server's
// authorization server, and presents there (JWT bearer grant, RFC 7523) for the user's access
// token. That token is stored and used exactly as a user_oauth connection's (sealed per user
// and server, only for that user's calls); the ID token and the ID-JAG are never stored.

const (
	grantTokenExchange = "urn:ietf:params:oauth:grant-type:token-exchange" // #nosec G101 -- a registered grant or token type URN, not a credential
	grantJWTBearer     = "urn:ietf:params:oauth:grant-type:jwt-bearer"     // #nosec G101 -- a registered grant or token type URN, not a credential
	tokenTypeIDToken   = "urn:ietf:params:oauth:token-type:id_token"       // #nosec G101 -- a registered grant or token type URN, not a credential
	tokenTypeIDJAG     = "urn:ietf:params:oauth:token-type:id-jag"         // #nosec G101 -- a registered grant or token type URN, not a credential
	// typIDJAG is the JOSE header typ of an ID-JAG (draft-ietf-oauth-identity-assertion-authz-grant).
	typIDJAG = "oauth-id-jag+jwt"
	// maxIDToken caps the ID token a user hands in (ConnectServerRequest.id_token): ID tokens
	// are 1 to 4 KiB.
	maxIDToken = 16 << 10
	// maxIssuedToken caps each token an authorization server or IdP issues to the gateway (an
	// ID-JAG, an access token, a refresh token); the answer as a whole is capped by
	// maxOAuthResponse.
	maxIssuedToken = 16 << 10
)

// enterpriseEndpoint is what the gateway uses to connect users of an enterprise_oauth server:
// the IdP's token endpoint and the gateway's client there, and the server's authorization
// server (its issuer is the ID-JAG's audience) with the gateway's client there.
type enterpriseEndpoint struct {
	idpTokenURL  string
	idpClientID  string
	idpSecret    string
	idpAuthStyle oauth2.AuthStyle
	// as is the MCP server's authorization server: stored with each user's token, so a refresh
	// needs no discovery.
	as oauthEndpoint
}

// validateEnterpriseOAuth checks an HTTP transport's enterprise_oauth block; field is its path.
func validateEnterpriseOAuth(v *rpc.Violations, field string, ht *pb.HTTPTransport, o *pb.OAuthEnterprise) {
	if ht.GetOauth() != nil || ht.GetUserOauth() != nil || ht.GetBearerTokenEnv() != "" {
		v.Add(field, "cannot be combined with oauth, user_oauth or bearer_token_env: calls use the calling user's token")
	}
	if u := o.GetIdpIssuer(); u == "" || len(u) > maxURL || !isHTTPURL(u) {
		v.Add(field+".idp_issuer", "is required: an absolute http or https URL of at most %d bytes", maxURL)
	}
	if u := o.GetIdpTokenUrl(); u != "" && (len(u) > maxURL || !isHTTPURL(u)) {
		v.Add(field+".idp_token_url", "must be an absolute http or https URL of at most %d bytes", maxURL)
	}
	for _, id := range []struct{ name, v string }{{"idp_client_id", o.GetIdpClientId()}, {"client_id", o.GetClientId()}} {
		if id.v == "" || len(id.v) > maxPattern {
			v.Add(field+"."+id.name, "is required, at most %d bytes", maxPattern)
		}
	}
	for _, e := range []struct{ name, v string }{{"idp_client_secret_env", o.GetIdpClientSecretEnv()}, {"client_secret_env", o.GetClientSecretEnv()}} {
		if e.v != "" && !isEnvName(e.v) {
			v.Add(field+"."+e.name, "must name an environment variable")
		}
	}
	validateScopes(v, field+".scopes", o.GetScopes())
	validateIssuerPin(v, field+".issuer", o.GetIssuer())
}

// perUserOAuth reports whether calls to the server use each calling user's own token.
func perUserOAuth(ht *pb.HTTPTransport) bool {
	return ht.GetUserOauth() != nil || ht.GetEnterpriseOauth() != nil
}

// perUserReady says why the per-user connections of the server cannot work, or "" when they
// can. Enterprise connections need no redirect URL: no browser comes back to the gateway.
func (g *Gateway) perUserReady(ht *pb.HTTPTransport) string {
	if ht.GetEnterpriseOauth() == nil {
		return g.oauthReady()
	}
	switch {
	case g.sealer == nil:
		return "enterprise-managed authorization needs the operator's key (--mcpgateway.oauth-key-file)"
	case g.conns == nil:
		return "enterprise-managed authorization needs a store for connections"
	}
	return ""
}

// discoverEnterprise finds the server's authorization server and the IdP's token endpoint,
// once per connection of the server.
func (c *serverConn) discoverEnterprise(ctx context.Context) (*enterpriseEndpoint, error) {
	c.oauthMu.Lock()
	defer c.oauthMu.Unlock()
	if c.enterpriseEP != nil {
		return c.enterpriseEP, nil
	}
	ep, err := cachedDiscovery(ctx, c.g, "enterprise\x00"+c.spec.Name+"\x00"+c.spec.GetHttp().GetUrl(), c.discoverEnterpriseEndpoint)
	if err != nil {
		return nil, err
	}
	c.enterpriseEP = ep
	return ep, nil
}

// discoverEnterpriseEndpoint is discoverEnterprise's work, without its caches.
func (c *serverConn) discoverEnterpriseEndpoint(ctx context.Context) (*enterpriseEndpoint, error) {
	g, ht := c.g, c.spec.GetHttp()
	o := ht.GetEnterpriseOauth()
	client := g.tokenClient()
	_, prm, asm, err := discoverAuthServer(ctx, client, ht.GetUrl(), g.version)
	if err != nil {
		return nil, err
	}
	if asm.Issuer == "" || !isHTTPURL(asm.TokenEndpoint) {
		return nil, errors.New("the authorization server's metadata names no issuer or no http(s) token endpoint")
	}
	if err := checkIssuerPin(o.GetIssuer(), asm.Issuer); err != nil {
		return nil, err
	}
	ep := &enterpriseEndpoint{
		idpTokenURL: o.GetIdpTokenUrl(),
		idpClientID: o.GetIdpClientId(),
		as: oauthEndpoint{
			ClientID:      o.GetClientId(),
			TokenURL:      asm.TokenEndpoint,
			RevocationURL: asm.RevocationEndpoint,
			Issuer:        asm.Issuer,
			Resource:      cmp.Or(prm.Resource, ht.GetUrl()),
			Scopes:        o.GetScopes(),
		},
	}
	if env := o.GetClientSecretEnv(); env != "" {
		if ep.as.ClientSecret, err = g.powers.secret(env, g.getenv); err != nil {
			return nil, fmt.Errorf("client secret at the authorization server: %w", err)
		}
	}
	ep.as.AuthStyle = authStyle(asm.TokenEndpointAuthMethodsSupported, ep.as.ClientSecret != "")
	if env := o.GetIdpClientSecretEnv(); env != "" {
		if ep.idpSecret, err = g.powers.secret(env, g.getenv); err != nil {
			return nil, fmt.Errorf("client secret at the identity provider: %w", err)
		}
	}
	ep.idpAuthStyle = oauth2.AuthStyleInParams
	if ep.idpTokenURL == "" || ep.idpSecret != "" {
		idp, err := auth.GetAuthServerMetadata(ctx, o.GetIdpIssuer(), client)
		switch {
		case err != nil && ep.idpTokenURL == "":
			return nil, fmt.Errorf("the identity provider's metadata: %w", err)
		case idp != nil:
			ep.idpTokenURL = cmp.Or(ep.idpTokenURL, idp.TokenEndpoint)
			ep.idpAuthStyle = authStyle(idp.TokenEndpointAuthMethodsSupported, ep.idpSecret != "")
		case ep.idpSecret != "":
			ep.idpAuthStyle = oauth2.AuthStyleInHeader
		}
	}
	if !isHTTPURL(ep.idpTokenURL) {
		return nil, errors.New("the identity provider has no http(s) token endpoint (configure enterprise_oauth.idp_token_url)")
	}
	return ep, nil
}

// jwtParts decodes a compact JWS's header and claims, without checking its signature (the
// party that issued it, or the one it is for, does).
func jwtParts(tok string, header, claims any) error {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return errors.New("not a JWT (three dot-separated parts)")
	}
	for i, v := range []any{header, claims} {
		raw, err := base64.RawURLEncoding.DecodeString(parts[i])
		if err != nil {
			return errors.New("not a JWT (a part is not base64url)")
		}
		if err := json.Unmarshal(raw, v); err != nil {
			return errors.New("not a JWT (a part is not a JSON object)")
		}
	}
	return nil
}

// checkIDToken refuses what cannot be the user's ID token from the configured IdP for the
// gateway's client there before it is sent anywhere: too large, not a JWT, another issuer's,
// issued to another client (aud without clientID: an ID token another application of the
// IdP received, handed in as the user's; the IdP must refuse it too), or expired (the IdP
// would refuse it; the user signs in again). Its signature is the IdP's to check.
func checkIDToken(tok, issuer, clientID string, now time.Time) error {
	if len(tok) > maxIDToken {
		return errclass.Errorf(errclass.Invalid, "id_token is longer than %d bytes", maxIDToken)
	}
	var header map[string]any
	var claims struct {
		Iss string          `json:"iss"`
		Aud json.RawMessage `json:"aud"`
		Exp *float64        `json:"exp"`
	}
	if err := jwtParts(tok, &header, &claims); err != nil {
		return errclass.Errorf(errclass.Invalid, "id_token is %s", err.Error())
	}
	if strings.TrimRight(claims.Iss, "/") != strings.TrimRight(issuer, "/") {
		return errclass.Errorf(errclass.Invalid, "id_token was not issued by the server's identity provider")
	}
	// OpenID Connect Core section 2: aud is a string or an array of strings, and holds the
	// client id of the party the token was issued to.
	var auds []string
	if one := ""; json.Unmarshal(claims.Aud, &one) == nil {
		auds = []string{one}
	} else if json.Unmarshal(claims.Aud, &auds) != nil {
		auds = nil
	}
	if !slices.Contains(auds, clientID) {
		return errclass.Errorf(errclass.Invalid, "id_token was not issued to the gateway's client at the identity provider (its aud does not name enterprise_oauth.idp_client_id)")
	}
	if claims.Exp != nil && now.After(time.Unix(int64(*claims.Exp), 0)) {
		return errclass.Errorf(errclass.Invalid, "id_token has expired; the user signs in at the identity provider again")
	}
	return nil
}

// tokenAnswer is a token endpoint's successful answer (RFC 6749 section 5.1, RFC 8693
// section 2.2.1).
type tokenAnswer struct {
	AccessToken     string `json:"access_token"`
	TokenType       string `json:"token_type"`
	IssuedTokenType string `json:"issued_token_type"`
	RefreshToken    string `json:"refresh_token"`
	ExpiresIn       int64  `json:"expires_in"`
	Scope           string `json:"scope"`
}

// tokenRequest posts form to a token endpoint of who ("the identity provider") with the
// client's authentication and returns its answer. A refusal names the error code only: the
// body may echo what was sent.
func (g *Gateway) tokenRequest(ctx context.Context, who, tokenURL, clientID, secret string, style oauth2.AuthStyle, form url.Values) (*tokenAnswer, error) {
	if secret == "" || style == oauth2.AuthStyleInParams {
		form.Set("client_id", clientID)
		if secret != "" {
			form.Set("client_secret", secret)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, tokenURL, bytes.NewBufferString(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if secret != "" && style != oauth2.AuthStyleInParams {
		req.SetBasicAuth(url.QueryEscape(clientID), url.QueryEscape(secret))
	}
	resp, err := g.tokenClient().Do(req)
	if err != nil {
		return nil, g.oauthRequestError(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, g.oauthRequestError(err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return nil, errclass.Errorf(errclass.Precondition, "%s refused the token request: %s", who, abbreviate(e.Error, 100))
		}
		return nil, errclass.Errorf(errclass.Unavailable, "%s answered the token request with HTTP %d", who, resp.StatusCode)
	}
	var a tokenAnswer
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, errclass.Errorf(errclass.Unavailable, "%s's answer is not a JSON token response", who)
	}
	if a.AccessToken == "" {
		return nil, errclass.Errorf(errclass.Unavailable, "%s's answer has no access_token", who)
	}
	if err := checkTokenSizes(who, a.AccessToken, a.RefreshToken); err != nil {
		return nil, err
	}
	return &a, nil
}

// bearer is the answer's token for the gateway to send, refused unless it is a bearer token.
func (a *tokenAnswer) bearer() (*oauth2.Token, error) {
	if !strings.EqualFold(a.TokenType, "bearer") {
		return nil, errclass.Errorf(errclass.Unavailable, "the authorization server issued a token of type %q; the gateway sends bearer tokens only", abbreviate(a.TokenType, 40))
	}
	tok := &oauth2.Token{AccessToken: a.AccessToken, TokenType: "Bearer", RefreshToken: a.RefreshToken}
	if a.ExpiresIn > 0 {
		tok.Expiry = time.Now().Add(time.Duration(a.ExpiresIn) * time.Second)
	}
	return tok, nil
}

// exchangeIDToken turns the user's ID token into an ID-JAG for the server's authorization
// server (RFC 8693 token exchange at the IdP), checked to be one.
func (g *Gateway) exchangeIDToken(ctx context.Context, ep *enterpriseEndpoint, idToken string) (string, error) {
	a, err := g.tokenRequest(ctx, "the identity provider", ep.idpTokenURL, ep.idpClientID, ep.idpSecret, ep.idpAuthStyle, url.Values{
		"grant_type":           {grantTokenExchange},
		"requested_token_type": {tokenTypeIDJAG},
		"subject_token":        {idToken},
		"subject_token_type":   {tokenTypeIDToken},
		"audience":             {ep.as.Issuer},
		"resource":             {ep.as.Resource},
	})
	if err != nil {
		return "", fmt.Errorf("the identity provider's token exchange: %w", err)
	}
	if a.IssuedTokenType != tokenTypeIDJAG {
		return "", errclass.Errorf(errclass.Unavailable, "the identity provider issued a %q, not an identity assertion grant (%s)", abbreviate(a.IssuedTokenType, 100), tokenTypeIDJAG)
	}
	if !strings.EqualFold(a.TokenType, "N_A") {
		return "", errclass.Errorf(errclass.Unavailable, "the identity provider's grant has token_type %q, not N_A: it is not an assertion", abbreviate(a.TokenType, 40))
	}
	var header struct {
		Typ string `json:"typ"`
	}
	var claims map[string]any
	if err := jwtParts(a.AccessToken, &header, &claims); err != nil || !strings.EqualFold(header.Typ, typIDJAG) {
		return "", errclass.Errorf(errclass.Unavailable, "the identity provider's grant is not a JWT of type %s", typIDJAG)
	}
	return a.AccessToken, nil
}

// redeemIDJAG presents an ID-JAG at the server's authorization server (RFC 7523 JWT bearer
// grant) and returns the user's token, checked to be a bearer token.
func (g *Gateway) redeemIDJAG(ctx context.Context, ep *enterpriseEndpoint, jag string) (*oauth2.Token, error) {
	form := url.Values{"grant_type": {grantJWTBearer}, "assertion": {jag}}
	if len(ep.as.Scopes) > 0 {
		form.Set("scope", strings.Join(ep.as.Scopes, " "))
	}
	a, err := g.tokenRequest(ctx, "the authorization server", ep.as.TokenURL, ep.as.ClientID, ep.as.ClientSecret, ep.as.AuthStyle, form)
	if err != nil {
		return nil, fmt.Errorf("the authorization server's JWT bearer grant: %w", err)
	}
	return a.bearer()
}

// ConnectEnterprise connects user's account to an enterprise_oauth server with their ID token:
// exchanged at the IdP, the grant redeemed at the server's authorization server, the token
// stored for user and server (replacing any earlier one). Neither the ID token nor any token
// obtained is returned or logged.
func (g *Gateway) ConnectEnterprise(ctx context.Context, server, user, idToken string) error {
	c, err := g.server(server)
	if err != nil {
		return err
	}
	ht := c.spec.GetHttp()
	o := ht.GetEnterpriseOauth()
	if o == nil {
		return errclass.Errorf(errclass.Invalid, "MCP server %q does not use enterprise-managed authorization (enterprise_oauth); id_token is not for it", server)
	}
	if why := g.perUserReady(ht); why != "" {
		return errclass.Errorf(errclass.Precondition, "%s", why)
	}
	if err := checkIDToken(idToken, o.GetIdpIssuer(), o.GetIdpClientId(), time.Now()); err != nil {
		return err
	}
	c.mu.Lock()
	busy := c.enterpriseBusy[user]
	if !busy {
		if c.enterpriseBusy == nil {
			c.enterpriseBusy = map[string]bool{}
		}
		c.enterpriseBusy[user] = true
	}
	c.mu.Unlock()
	if busy {
		return errclass.Errorf(errclass.Exhausted, "this user is already connecting an account to MCP server %q; try again when that has finished", server)
	}
	defer func() {
		c.mu.Lock()
		delete(c.enterpriseBusy, user)
		c.mu.Unlock()
	}()
	ep, err := c.discoverEnterprise(ctx)
	if err != nil {
		return discoveryError(err)
	}
	jag, err := g.exchangeIDToken(ctx, ep, idToken)
	if err != nil {
		return err
	}
	tok, err := g.redeemIDJAG(ctx, ep, jag)
	if err != nil {
		return err
	}
	if err := g.saveConnection(ctx, server, user, &userConnection{Endpoint: ep.as, Token: *tok}); err != nil {
		return err
	}
	c.dropUserSession(user)
	c.requestKick() // the shared session may have waited for a first connected user
	g.log.Info("MCP server: a user connected an account through the identity provider", "server", server, "user", user)
	if g.onUserConnected != nil {
		g.onUserConnected(ctx, server, user)
	}
	return nil
}

// enterprisePrompt is the result of a call by a user without a usable connection to an
// enterprise_oauth server (none, or its token expired): there is no link to open; the user's
// client connects with a fresh ID token.
func enterprisePrompt(c *serverConn) *pb.CallToolResponse {
	return failed(codeAuthRequired, fmt.Sprintf("The MCP server %q needs the user's own account through their organisation's sign-in, and this user has no current connection "+
		"(never connected, or it expired). Ask the user to connect their account (sign in again so that their application connects the server with "+
		"a fresh identity token: ConnectServer with id_token), then try again.", c.spec.Name))
}
