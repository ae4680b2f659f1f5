package mcpgateway

import (
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
		return &oauth2.Transport{Source: oauth2.ReuseTokenSource(nil, src), Base: base}, nil, nil
	}
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

func (j *jwtClientCredentials) Token() (*oauth2.Token, error) {
	ctx, cancel := context.WithTimeout(j.c.ctx, 30*time.Second)
	defer cancel()
	client := j.c.g.tokenClient()
	j.mu.Lock()
	if j.tokenURL == "" {
		if tu := j.o.GetTokenUrl(); tu != "" {
			j.tokenURL, j.audience, j.scopes = tu, tu, j.o.GetScopes()
		} else {
			challenges, prm, asm, err := discoverAuthServer(ctx, client, j.c.spec.GetHttp().GetUrl(), j.c.g.version)
			if err != nil {
				j.mu.Unlock()
				return nil, fmt.Errorf("OAuth discovery: %w", err)
			}
			j.tokenURL, j.audience = asm.TokenEndpoint, cmpOr(asm.Issuer, asm.TokenEndpoint)
			j.scopes = j.o.GetScopes()
			if len(j.scopes) == 0 {
				j.scopes = scopesOf(challenges)
			}
			if len(j.scopes) == 0 {
				j.scopes = prm.ScopesSupported
			}
		}
	}
	tokenURL, audience, scopes := j.tokenURL, j.audience, j.scopes
	j.mu.Unlock()
	assertion, err := signAssertion(j.key, j.o.GetClientId(), audience, time.Now())
	if err != nil {
		return nil, err
	}
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
		return nil, fmt.Errorf("OAuth client credentials with a JWT assertion: %w", tokenError(err))
	}
	return tok, nil
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
	alg := "RS256"
	if _, ok := key.(*ecdsa.PrivateKey); ok {
		alg = "ES256"
	}
	jti := make([]byte, 16)
	if _, err := rand.Read(jti); err != nil {
		return "", err
	}
	header, _ := json.Marshal(map[string]string{"alg": alg, "typ": "JWT"})
	claims, _ := json.Marshal(map[string]any{
		"iss": clientID, "sub": clientID, "aud": audience,
		"iat": now.Unix(), "exp": now.Add(5 * time.Minute).Unix(), "jti": hex.EncodeToString(jti),
	})
	signing := base64.RawURLEncoding.EncodeToString(header) + "." + base64.RawURLEncoding.EncodeToString(claims)
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
		var err error
		if sig, err = rsa.SignPKCS1v15(rand.Reader, k, crypto.SHA256, digest[:]); err != nil {
			return "", err
		}
	default:
		return "", fmt.Errorf("unsupported key type %T", key)
	}
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}
