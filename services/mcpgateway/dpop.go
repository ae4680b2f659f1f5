package mcpgateway

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// DPoP (RFC 9449, MCP SEP-1932): where the authorization server advertises ES256 in
// dpop_signing_alg_values_supported, a user's tokens are bound to a P-256 key of that
// connection. The key is made at the code exchange and sealed with the connection's tokens
// (userConnection.DPoPKey), so a refresh or a session on another replica proves possession of
// the same key; it never leaves the sealed record but as the public key in a proof. Each
// request to the token endpoint and to the MCP server carries a fresh proof (a random jti, the
// method and URL, the access token's hash); a server's use_dpop_nonce answer is retried once
// with its nonce.

const dpopAlg = "ES256"

// newDPoPKey makes a connection's key, in the form it is sealed in (SEC 1 DER).
func newDPoPKey() ([]byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	return x509.MarshalECPrivateKey(k)
}

func parseDPoPKey(der []byte) (*ecdsa.PrivateKey, error) {
	k, err := x509.ParseECPrivateKey(der)
	if err != nil {
		return nil, fmt.Errorf("DPoP key: %w", err)
	}
	if k.Curve != elliptic.P256() {
		return nil, errors.New("DPoP key: not P-256")
	}
	return k, nil
}

// dpopProof is the proof JWT of a request (RFC 9449 section 4.2): htu without query and
// fragment, ath the hash of the access token sent with it (none at the token endpoint).
func dpopProof(key *ecdsa.PrivateKey, method, rawURL, accessToken, nonce string, now time.Time) (string, error) {
	pub, err := key.PublicKey.ECDH()
	if err != nil {
		return "", err
	}
	raw := pub.Bytes() // 0x04 || X || Y
	jwk := map[string]string{"kty": "EC", "crv": "P-256",
		"x": base64.RawURLEncoding.EncodeToString(raw[1:33]), "y": base64.RawURLEncoding.EncodeToString(raw[33:65])}
	htu := rawURL
	if i := strings.IndexAny(htu, "?#"); i >= 0 {
		htu = htu[:i]
	}
	jti, err := newJTI()
	if err != nil {
		return "", err
	}
	claims := map[string]any{"jti": jti, "htm": method, "htu": htu, "iat": now.Unix()}
	if accessToken != "" {
		h := sha256.Sum256([]byte(accessToken))
		claims["ath"] = base64.RawURLEncoding.EncodeToString(h[:])
	}
	if nonce != "" {
		claims["nonce"] = nonce
	}
	return signJWS(key, map[string]any{"typ": "dpop+jwt", "jwk": jwk}, claims)
}

// dpopTransport adds a proof to each request. key gives the key for the access token the
// request carries ("" at the token endpoint); nil sends none (the server then refuses the
// token). The last nonce a server gave is sent until it gives another.
type dpopTransport struct {
	base http.RoundTripper
	key  func(accessToken string) *ecdsa.PrivateKey

	mu    sync.Mutex // guards nonce
	nonce string
}

// maxDPoPErrorBody bounds the error answer read to see whether it asks for a nonce.
const maxDPoPErrorBody = 4 << 10

func (t *dpopTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	var token string
	if v, ok := strings.CutPrefix(r.Header.Get("Authorization"), "DPoP "); ok {
		token = v
	}
	key := t.key(token)
	if key == nil {
		return t.base.RoundTrip(r)
	}
	t.mu.Lock()
	nonce := t.nonce
	t.mu.Unlock()
	resp, err := t.send(r, key, token, nonce)
	if err != nil {
		return nil, err
	}
	next := resp.Header.Get("DPoP-Nonce")
	if next == "" || next == nonce || len(next) > 512 {
		return resp, nil
	}
	t.mu.Lock()
	t.nonce = next
	t.mu.Unlock()
	if !askedNonce(resp) || (r.Body != nil && r.GetBody == nil) {
		return resp, nil
	}
	_ = resp.Body.Close()
	if r.GetBody != nil {
		body, err := r.GetBody()
		if err != nil {
			return nil, err
		}
		r = r.Clone(r.Context())
		r.Body = body
	}
	return t.send(r, key, token, next)
}

func (t *dpopTransport) send(r *http.Request, key *ecdsa.PrivateKey, token, nonce string) (*http.Response, error) {
	proof, err := dpopProof(key, r.Method, r.URL.String(), token, nonce, time.Now())
	if err != nil {
		return nil, fmt.Errorf("DPoP proof: %w", err)
	}
	r2 := r.Clone(r.Context())
	r2.Header.Set("DPoP", proof)
	return t.base.RoundTrip(r2)
}

// askedNonce reports whether resp is a use_dpop_nonce answer: a 401 whose DPoP challenge says
// so (a resource server, RFC 9449 section 9) or a 400 whose error says so (an authorization
// server, section 8). A 400's body is read, bounded, and put back.
func askedNonce(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
		return err == nil && slices.ContainsFunc(cs, func(c oauthex.Challenge) bool {
			return strings.EqualFold(c.Scheme, "dpop") && c.Params["error"] == "use_dpop_nonce"
		})
	case http.StatusBadRequest:
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxDPoPErrorBody))
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
		var e struct {
			Error string `json:"error"`
		}
		return err == nil && json.Unmarshal(body, &e) == nil && e.Error == "use_dpop_nonce"
	}
	return false
}

// dpopClient is tokenClient with proofs made with key (the token and revocation endpoints).
func (g *Gateway) dpopClient(key *ecdsa.PrivateKey) *http.Client {
	c := g.tokenClient()
	c.Transport = &dpopTransport{base: c.Transport, key: func(string) *ecdsa.PrivateKey { return key }}
	return c
}

// advertisesDPoP reports whether authorization server metadata (the raw document) lists ES256
// in dpop_signing_alg_values_supported; the SDK's AuthServerMeta has no such field.
func advertisesDPoP(doc []byte) bool {
	var m struct {
		Algs []string `json:"dpop_signing_alg_values_supported"`
	}
	return json.Unmarshal(doc, &m) == nil && slices.Contains(m.Algs, dpopAlg)
}

// metaCapture keeps the authorization server metadata documents a discovery reads, for the
// fields the SDK does not parse (advertisesDPoP). Answers are bounded below it (tokenClient).
type metaCapture struct {
	base http.RoundTripper
	mu   sync.Mutex // guards docs
	docs [][]byte
}

func (m *metaCapture) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := m.base.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusOK ||
		!strings.Contains(r.URL.Path, "/.well-known/oauth-authorization-server") && !strings.Contains(r.URL.Path, "/.well-known/openid-configuration") {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if rerr != nil {
		return nil, rerr
	}
	m.mu.Lock()
	m.docs = append(m.docs, body)
	m.mu.Unlock()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// dpopFor reports whether the captured metadata of issuer advertises DPoP with ES256.
func (m *metaCapture) dpopFor(issuer string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, d := range m.docs {
		var meta struct {
			Issuer string `json:"issuer"`
		}
		if json.Unmarshal(d, &meta) == nil && meta.Issuer == issuer && advertisesDPoP(d) {
			return true
		}
	}
	return false
}

// exchangeClient is the client of a code exchange with ep, and the key made for it (nil
// without DPoP).
func (g *Gateway) exchangeClient(ep *oauthEndpoint) (*http.Client, []byte, error) {
	if !ep.DPoP {
		return g.tokenClient(), nil, nil
	}
	der, err := newDPoPKey()
	if err != nil {
		return nil, nil, err
	}
	key, err := parseDPoPKey(der)
	if err != nil {
		return nil, nil, err
	}
	return g.dpopClient(key), der, nil
}

// connClient is the client of conn's token requests (refresh): with proofs of its key when
// its tokens are bound to one.
func (g *Gateway) connClient(conn *userConnection) *http.Client {
	if len(conn.DPoPKey) == 0 {
		return g.tokenClient()
	}
	key, err := parseDPoPKey(conn.DPoPKey)
	if err != nil {
		// A sealed record opened, so this is not expected; the refresh is refused without a proof.
		g.log.Warn("MCP OAuth: a connection's DPoP key does not parse", "error", err)
		return g.tokenClient()
	}
	return g.dpopClient(key)
}

// keyFor returns the DPoP key of t's connection if token is its access token, else nil.
func (t *userTokens) keyFor(token string) *ecdsa.PrivateKey {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.conn == nil || len(t.conn.DPoPKey) == 0 || token == "" || t.conn.Token.AccessToken != token {
		return nil
	}
	if !bytes.Equal(t.dpopDER, t.conn.DPoPKey) {
		key, err := parseDPoPKey(t.conn.DPoPKey)
		if err != nil {
			return nil
		}
		t.dpopDER, t.dpopKey = t.conn.DPoPKey, key
	}
	return t.dpopKey
}

// dpop wraps base of a user's session so that each request with a DPoP-bound token carries
// a proof of the connection's key.
func (t *userTokens) dpop(base http.RoundTripper) http.RoundTripper {
	return &dpopTransport{base: base, key: t.keyFor}
}

// transport is the shared session's transport under its oauth2.Transport: proofs for a lent
// DPoP-bound token, and the refusal watch.
func (s *sharedTokens) transport(base http.RoundTripper) http.RoundTripper {
	return &sharedRefusal{base: &dpopTransport{base: base, key: s.keyFor}, s: s}
}

func (s *sharedTokens) keyFor(token string) *ecdsa.PrivateKey {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur == nil {
		return nil
	}
	return cur.keyFor(token)
}
