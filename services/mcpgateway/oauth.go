package mcpgateway

import (
	"cmp"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

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
	if env := o.GetPrivateKeyEnv(); env != "" {
		pemText, err := c.g.powers.secret(env, c.g.getenv)
		if err != nil {
			return nil, nil, fmt.Errorf("OAuth private key: %w", err)
		}
		signer, err := parseAssertionKey(pemText)
		if err != nil {
			return nil, nil, fmt.Errorf("OAuth private key in %s: %w", env, err)
		}
		src := &jwtClientCredentials{c: c, o: o, key: signer}
		return stepUpClient(src.token, base), nil, nil
	}
	if o.GetAssertionEnv() != "" {
		// Workload identity federation (wif.go): the workload's JWT is the grant.
		w := &wifGrant{c: c, o: o}
		if env := o.GetClientSecretEnv(); env != "" {
			var err error
			if w.secret, err = c.g.powers.secret(env, c.g.getenv); err != nil {
				return nil, nil, fmt.Errorf("OAuth client secret: %w", err)
			}
		}
		return stepUpClient(w.token, base), nil, nil
	}
	secret, err := c.g.powers.secret(o.GetClientSecretEnv(), c.g.getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("OAuth client secret: %w", err)
	}
	// Bounded like every OAuth request (oauth.requestTimeout, maxOAuthResponse): the token
	// request runs in the connection's context, which has no deadline of its own.
	tokenClient := c.g.tokenClient()
	if o.GetTokenUrl() == "" {
		// The SDK's handler does step-up itself: on a 403 insufficient_scope it asks for the
		// union of the granted and the challenged scopes, and the transport retries.
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
	ctx := context.WithValue(c.ctx, oauth2.HTTPClient, tokenClient)
	fetch := func(extra []string) (*oauth2.Token, []string, error) {
		cc := &clientcredentials.Config{
			ClientID:     o.GetClientId(),
			ClientSecret: secret,
			TokenURL:     o.GetTokenUrl(),
			Scopes:       unionScopes(o.GetScopes(), extra),
			AuthStyle:    style,
		}
		tok, err := cc.Token(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("OAuth client credentials: %w", c.g.tokenError(err))
		}
		return tok, cc.Scopes, nil
	}
	return stepUpClient(fetch, base), nil, nil
}

// scopedFetch gets a client credentials token asking for the configured (or discovered)
// scopes and extra; it returns the scopes it asked for.
type scopedFetch func(extra []string) (*oauth2.Token, []string, error)

// stepUpClient is the transport of a client credentials server: it adds the token to each
// request, and on a 403 insufficient_scope asking for a scope the token was not asked with
// (the MCP authorization spec's step-up), gets a new token for the union of the scopes and
// sends the request once more. A challenge for scopes already asked for is passed on, so a
// server that never accepts does not make the gateway loop.
func stepUpClient(fetch scopedFetch, base http.RoundTripper) http.RoundTripper {
	src := &widenableSource{fetch: fetch}
	return &stepUpTransport{src: src, base: &oauth2.Transport{Source: src, Base: base}}
}

// widenableSource caches a client credentials token, and forgets it when its scopes widen.
type widenableSource struct {
	fetch scopedFetch

	mu    sync.Mutex // guards tok, asked, extra
	tok   *oauth2.Token
	asked []string // the scopes the current token was asked with
	// extra are the challenged scopes beyond the configured ones; each widening adds one at
	// least, and the server names finitely many, so widening ends.
	extra []string
}

func (s *widenableSource) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tok.Valid() {
		return s.tok, nil
	}
	tok, asked, err := s.fetch(s.extra)
	if err != nil {
		return nil, err
	}
	s.tok, s.asked = tok, asked
	return tok, nil
}

// widen adds the challenged scopes; it reports whether any was new (a new token is needed).
func (s *widenableSource) widen(challenged []string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(unionScopes(s.asked, challenged)) == len(s.asked) {
		return false
	}
	s.extra = unionScopes(s.extra, challenged)
	s.tok = nil
	return true
}

type stepUpTransport struct {
	src  *widenableSource
	base http.RoundTripper
}

func (t *stepUpTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		return resp, err
	}
	challenged := insufficientScope(resp.Header)
	if len(challenged) == 0 || (r.Body != nil && r.GetBody == nil) || !t.src.widen(challenged) {
		return resp, err
	}
	r2 := r.Clone(r.Context())
	if r.GetBody != nil {
		body, berr := r.GetBody()
		if berr != nil {
			return resp, err
		}
		r2.Body = body
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	return t.base.RoundTrip(r2)
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

// jwtClientCredentials gets client credentials tokens with a signed JWT assertion as the
// client's authentication (private_key_jwt, RFC 7523 section 2.2): a fresh assertion per token
// request, as each carries its own jti and a short expiry. Without a token URL the endpoint is
// discovered as for per-user OAuth, and the assertion's audience is the authorization server's
// issuer (else the token URL).
type jwtClientCredentials struct {
	c   *serverConn
	o   *pb.OAuthClientCredentials
	key crypto.Signer

	mu                 sync.Mutex // guards tokenURL, audience, scopes (discovered once)
	tokenURL, audience string
	scopes             []string
}

// token is a scopedFetch: a token asking for the configured or discovered scopes and extra.
func (j *jwtClientCredentials) token(extra []string) (*oauth2.Token, []string, error) {
	ctx, cancel := context.WithTimeout(j.c.ctx, 3*j.c.g.oauth.requestTimeout)
	defer cancel()
	client := j.c.g.tokenClient()
	j.mu.Lock()
	if j.tokenURL == "" {
		if tu := j.o.GetTokenUrl(); tu != "" {
			j.tokenURL, j.audience, j.scopes = tu, tu, j.o.GetScopes()
		} else {
			ep, err := j.c.discoverTokenEndpoint(ctx, "jwt", j.o.GetScopes())
			if err != nil {
				j.mu.Unlock()
				return nil, nil, err
			}
			j.tokenURL, j.audience, j.scopes = ep.url, cmp.Or(ep.issuer, ep.url), ep.scopes
		}
	}
	tokenURL, audience, scopes := j.tokenURL, j.audience, j.scopes
	j.mu.Unlock()
	assertion, err := signAssertion(j.key, j.o.GetClientId(), audience, time.Now())
	if err != nil {
		return nil, nil, err
	}
	scopes = unionScopes(scopes, extra)
	cc := &clientcredentials.Config{
		ClientID:  j.o.GetClientId(),
		TokenURL:  tokenURL,
		Scopes:    scopes,
		AuthStyle: oauth2.AuthStyleInParams,
		EndpointParams: url.Values{
			"client_assertion_type": {"urn:ietf:params:oauth:client-assertion-type:jwt-bearer"},
			"client_assertion":      {assertion},
		},
	}
	tok, err := cc.Token(context.WithValue(ctx, oauth2.HTTPClient, client))
	if err != nil {
		return nil, nil, fmt.Errorf("OAuth client credentials with a JWT assertion: %w", j.c.g.tokenError(err))
	}
	return tok, scopes, nil
}

// tokenEndpoint is what a grant of the gateway's own (client credentials, workload identity)
// needs of the server's authorization server, discovered.
type tokenEndpoint struct {
	url, issuer string
	methods     []string // token_endpoint_auth_methods_supported
	scopes      []string // configured, else the server's challenge's, else its metadata's
}

// discoverTokenEndpoint discovers the server's authorization server's token endpoint as the MCP
// authorization spec describes, remembered when it fails as for per-user OAuth (each reconnect
// would repeat it); kind keeps the grants' discoveries apart.
func (c *serverConn) discoverTokenEndpoint(ctx context.Context, kind string, configured []string) (tokenEndpoint, error) {
	u := c.spec.GetHttp().GetUrl()
	ep, err := cachedDiscovery(ctx, c.g, kind+"\x00"+c.spec.Name+"\x00"+u, func(ctx context.Context) (tokenEndpoint, error) {
		cs, prm, asm, err := discoverAuthServer(ctx, c.g.tokenClient(), u, c.g.version)
		if err != nil {
			return tokenEndpoint{}, err
		}
		scopes := scopesOf(cs)
		if len(scopes) == 0 {
			scopes = prm.ScopesSupported
		}
		return tokenEndpoint{url: asm.TokenEndpoint, issuer: asm.Issuer, methods: asm.TokenEndpointAuthMethodsSupported, scopes: scopes}, nil
	})
	if err != nil {
		return ep, fmt.Errorf("OAuth discovery: %w", err)
	}
	ep.scopes = cmpSlices(configured, ep.scopes)
	return ep, nil
}

// cmpSlices is a when it is not empty, else b.
func cmpSlices(a, b []string) []string {
	if len(a) > 0 {
		return a
	}
	return b
}

// parseAssertionKey reads a PEM private key: PKCS#8, SEC 1 (EC) or PKCS#1 (RSA); EC keys must
// be P-256 (ES256).
func parseAssertionKey(text string) (crypto.Signer, error) {
	block, _ := pem.Decode([]byte(text))
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	var key any
	var err error
	if key, err = x509.ParsePKCS8PrivateKey(block.Bytes); err != nil {
		if key, err = x509.ParseECPrivateKey(block.Bytes); err != nil {
			if key, err = x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
				return nil, errors.New("not a PKCS#8, SEC 1 or PKCS#1 private key")
			}
		}
	}
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		if k.Curve != elliptic.P256() {
			return nil, errors.New("an EC key must be on P-256 (ES256)")
		}
		return k, nil
	case *rsa.PrivateKey:
		if k.N.BitLen() < 2048 {
			return nil, errors.New("an RSA key must have at least 2048 bits")
		}
		return k, nil
	}
	return nil, fmt.Errorf("unsupported key type %T; use EC P-256 or RSA", key)
}

// signAssertion makes the client assertion JWT: iss and sub are the client id, aud the
// authorization server, a five-minute lifetime and a random jti (RFC 7523 section 3).
func signAssertion(key crypto.Signer, clientID, audience string, now time.Time) (string, error) {
	jti, err := newJTI()
	if err != nil {
		return "", err
	}
	return signJWS(key, map[string]any{"typ": "JWT"}, map[string]any{
		"iss": clientID, "sub": clientID, "aud": audience,
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(), "jti": jti,
	})
}

// newJTI is a JWT id: 128 random bits in hex.
func newJTI() (string, error) {
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return "", err
	}
	return hex.EncodeToString(jti), nil
}

// signJWS signs claims as a compact JWS with key: ES256 for an EC P-256 key, RS256 for RSA;
// header gets its alg.
func signJWS(key crypto.Signer, header, claims map[string]any) (string, error) {
	header["alg"] = "RS256"
	if _, ok := key.(*ecdsa.PrivateKey); ok {
		header["alg"] = "ES256"
	}
	h, err := json.Marshal(header)
	if err != nil {
		return "", err
	}
	c, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	signing := base64.RawURLEncoding.EncodeToString(h) + "." + base64.RawURLEncoding.EncodeToString(c)
	digest := sha256.Sum256([]byte(signing))
	var sig []byte
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		r, s, err := ecdsa.Sign(rand.Reader, k, digest[:])
		if err != nil {
			return "", err
		}
		// JWS wants r and s as two 32-byte big-endian halves, not ASN.1 (RFC 7518 section 3.4).
		sig = make([]byte, 64)
		r.FillBytes(sig[:32])
		s.FillBytes(sig[32:])
	case *rsa.PrivateKey:
		if sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, digest[:]); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("unsupported key type %T", key)
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}
