package mcpgateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/hermes-agent/hermes/internal/backoff"
	"github.com/hermes-agent/hermes/internal/errclass"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// Per-user OAuth (a server spec's http.user_oauth): each user connects their own account with
// the authorization code flow and PKCE, and the gateway calls the server with that user's token
// only. The discovery follows the MCP authorization spec (2025-11-25): the server's 401
// challenge and protected resource metadata (RFC 9728), the authorization server's metadata
// (RFC 8414 or OpenID discovery, through the SDK), a preregistered client or dynamic client
// registration (RFC 7591), the resource indicator (RFC 8707) on the authorization and token
// requests. Tokens are refreshed when they expire and revoked (RFC 7009) when the user
// disconnects. Every record is sealed with the operator's key before it reaches the store.

const (
	// authStateTTL is how long a user has to finish an authorization.
	authStateTTL = 10 * time.Minute
	// maxUserSessions bounds the per-user sessions one server keeps open; the least recently
	// used is closed beyond it (it reconnects on the user's next call).
	maxUserSessions = 256
	// codeAuthRequired is a call's error code when the user must connect an account first.
	codeAuthRequired = "authorization_required"
	// minOAuthKey is the shortest operator key accepted, in characters.
	minOAuthKey = 32
	// maxOAuthResponse caps the body of every answer to an OAuth request (metadata,
	// registration, token, revocation): a few KiB in practice; more is refused, not read.
	maxOAuthResponse = 256 << 10
	// maxDiscoveryFails bounds the failed discoveries remembered (failCache).
	maxDiscoveryFails = 1024
)

// oauthLimits bound what per-user OAuth (and the client credentials token client) spends on
// its outbound requests and its pending authorizations.
type oauthLimits struct {
	// requestTimeout bounds each outbound OAuth request (discovery, registration, token,
	// revocation), its body included; a whole discovery gets twice as long.
	requestTimeout time.Duration
	// maxPending bounds the users with a pending authorization per server (each user has at
	// most one: a new one replaces theirs).
	maxPending int
	// discoveryFailTTL is how long a failed discovery is answered from memory.
	discoveryFailTTL time.Duration
	// refreshGrace is how long a refresh refused as invalid_grant waits for another replica's
	// refresh of the same connection to be stored, before the connection is ended.
	refreshGrace time.Duration
}

var oauthLimitsDefault = oauthLimits{
	requestTimeout:   30 * time.Second,
	maxPending:       10000,
	discoveryFailTTL: 30 * time.Second,
	refreshGrace:     3 * time.Second,
}

// errNotConnected: the user has no usable connection (none stored, or its refresh failed).
var errNotConnected = errors.New("the user has not connected an account to this MCP server")

// ParseOAuthKey reads the operator's key that seals per-user OAuth tokens: the first non-empty
// line, at least 32 characters (generate one with `openssl rand -hex 32`). The AES-256 key is
// its SHA-256, so any string of enough entropy works.
func ParseOAuthKey(text string) ([]byte, error) {
	for line := range strings.SplitSeq(text, "\n") {
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		if len(line) < minOAuthKey {
			return nil, fmt.Errorf("the MCP OAuth key is shorter than %d characters", minOAuthKey)
		}
		k := sha256.Sum256([]byte(line))
		return k[:], nil
	}
	return nil, errors.New("the MCP OAuth key is empty")
}

// LoadOAuthKey reads ParseOAuthKey's key from a file.
func LoadOAuthKey(path string) ([]byte, error) {
	raw, err := os.ReadFile(path) // #nosec G304 -- the operator's key file
	if err != nil {
		return nil, fmt.Errorf("MCP OAuth key: %w", err)
	}
	return ParseOAuthKey(string(raw))
}

// sealer encrypts records with AES-256-GCM. The additional data names what a record is for
// (a state id, or a server and a user), so a sealed record moved to another key of the store
// does not open.
type sealer struct{ aead cipher.AEAD }

func newSealer(key []byte) (*sealer, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("MCP OAuth key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &sealer{aead: aead}, nil
}

func (s *sealer) seal(v any, aad string) ([]byte, error) {
	plain, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, s.aead.NonceSize(), s.aead.NonceSize()+len(plain)+s.aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	return s.aead.Seal(nonce, nonce, plain, []byte(aad)), nil
}

func (s *sealer) open(sealed []byte, aad string, v any) error {
	n := s.aead.NonceSize()
	if len(sealed) < n {
		return errors.New("sealed record too short")
	}
	plain, err := s.aead.Open(nil, sealed[:n], sealed[n:], []byte(aad))
	if err != nil {
		return errors.New("sealed record does not open with the MCP OAuth key (another key, or tampered)")
	}
	return json.Unmarshal(plain, v)
}

func connAAD(server, user string) string {
	return "hermes mcp oauth connection\x00" + server + "\x00" + user
}
func stateAAD(id string) string { return "hermes mcp oauth state\x00" + id }

// oauthEndpoint is what the gateway learned about a server's authorization: the client it uses
// and the authorization server's endpoints. It travels inside the sealed records, so a callback
// or a refresh on another replica needs no discovery.
type oauthEndpoint struct {
	ClientID      string           `json:"client_id"`
	ClientSecret  string           `json:"client_secret,omitempty"`
	AuthStyle     oauth2.AuthStyle `json:"auth_style"`
	AuthURL       string           `json:"auth_url"`
	TokenURL      string           `json:"token_url"`
	RevocationURL string           `json:"revocation_url,omitempty"`
	Issuer        string           `json:"issuer,omitempty"`
	// IssRequired: the metadata advertised authorization_response_iss_parameter_supported, so
	// an authorization response without iss is refused (checkIss).
	IssRequired bool `json:"iss_required,omitempty"`
	// DPoP: the metadata advertised DPoP with ES256, so tokens are bound to a key (dpop.go).
	DPoP     bool     `json:"dpop,omitempty"`
	Resource string   `json:"resource"`
	Scopes   []string `json:"scopes,omitempty"`
}

func (e *oauthEndpoint) config(redirect string) *oauth2.Config {
	return &oauth2.Config{
		ClientID:     e.ClientID,
		ClientSecret: e.ClientSecret,
		Endpoint:     oauth2.Endpoint{AuthURL: e.AuthURL, TokenURL: e.TokenURL, AuthStyle: e.AuthStyle},
		RedirectURL:  redirect,
		Scopes:       e.Scopes,
	}
}

// authState is a pending authorization, stored under the SHA-256 of its state parameter.
type authState struct {
	User     string `json:"user"`
	Server   string `json:"server"`
	URL      string `json:"url"` // the server's URL when the flow began
	Verifier string `json:"verifier"`
	// State is the state parameter itself (the record is stored under its hash), sealed with
	// the rest, so that the user's link can be given again while it is pending (pendingLink).
	State    string        `json:"state,omitempty"`
	Expires  time.Time     `json:"expires"`
	Endpoint oauthEndpoint `json:"endpoint"`
}

// userConnection is a user's stored connection to a server.
type userConnection struct {
	Endpoint oauthEndpoint `json:"endpoint"`
	Token    oauth2.Token  `json:"token"`
	// DPoPKey is the key the tokens are bound to (SEC 1 DER), when Endpoint.DPoP.
	DPoPKey []byte `json:"dpop_key,omitempty"`
}

func stateID(state string) string {
	h := sha256.Sum256([]byte(state))
	return hex.EncodeToString(h[:])
}

// oauthReady says why per-user OAuth cannot work, or "" when it can.
func (g *Gateway) oauthReady() string {
	switch {
	case g.sealer == nil:
		return "per-user OAuth needs the operator's key (--mcpgateway.oauth-key-file)"
	case g.cfg.OAuthRedirectURL == "":
		return "per-user OAuth needs the redirect URL of Hermes' HTTP listener (--mcpgateway.oauth-redirect-url)"
	case g.conns == nil:
		return "per-user OAuth needs a store for connections"
	}
	return ""
}

// tokenClient is the HTTP client of discovery, registration, token and revocation requests:
// the gateway's egress-checked transport, each request bounded by oauth.requestTimeout (body
// included) and its answer by maxOAuthResponse. The bounds are in the transport, not in the
// client's Timeout: the SDK's discovery makes a client of its own from this one's transport,
// without the Timeout.
func (g *Gateway) tokenClient() *http.Client {
	return &http.Client{Transport: &boundedTransport{base: g.httpBase, max: maxOAuthResponse, timeout: g.oauth.requestTimeout}}
}

var (
	// errOAuthTooLarge: an OAuth answer was longer than maxOAuthResponse.
	errOAuthTooLarge = fmt.Errorf("answer is larger than %d KiB", maxOAuthResponse>>10)
	// errOAuthTimeout: an OAuth request was not answered within oauth.requestTimeout (the
	// caller's own deadline keeps its context error).
	errOAuthTimeout = errors.New("OAuth request timed out")
)

// boundedTransport ends a request that has not been answered, body included, within timeout,
// and fails an answer whose body is longer than max, whether it says so (Content-Length) or
// not: an OAuth server answers a few KiB at once.
type boundedTransport struct {
	base    http.RoundTripper
	max     int64
	timeout time.Duration
}

func (t *boundedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithTimeoutCause(r.Context(), t.timeout, errOAuthTimeout)
	resp, err := t.base.RoundTrip(r.WithContext(ctx))
	if err != nil {
		if context.Cause(ctx) == errOAuthTimeout {
			err = errOAuthTimeout
		}
		cancel()
		return nil, err
	}
	if resp.ContentLength > t.max {
		_ = resp.Body.Close()
		cancel()
		return nil, errOAuthTooLarge
	}
	resp.Body = &cappedReader{ReadCloser: resp.Body, left: t.max, ctx: ctx, cancel: cancel}
	return resp, nil
}

type cappedReader struct {
	io.ReadCloser
	left   int64
	ctx    context.Context    // the request's, with its timeout
	cancel context.CancelFunc // ends the request's timeout once the body is closed
}

func (r *cappedReader) Close() error {
	err := r.ReadCloser.Close()
	r.cancel()
	return err
}

func (r *cappedReader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		// A body of exactly the cap is fine: only a byte beyond it is refused.
		var one [1]byte
		n, err := r.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, errOAuthTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.ReadCloser.Read(p)
	r.left -= int64(n)
	if err != nil && err != io.EOF && context.Cause(r.ctx) == errOAuthTimeout {
		err = errOAuthTimeout
	}
	return n, err
}

// oauthRequestError describes an OAuth request that got no usable answer (no answer in time,
// none at all, or one too large), classified unavailable: it may work later.
func (g *Gateway) oauthRequestError(err error) error {
	var ue *url.Error
	// oauth2 flattens a body read's error into its text, hence the text comparisons.
	switch {
	case errors.Is(err, errOAuthTooLarge) || strings.Contains(err.Error(), errOAuthTooLarge.Error()):
		return errclass.Errorf(errclass.Unavailable, "the authorization server's %s", errOAuthTooLarge)
	case errors.Is(err, errOAuthTimeout) || strings.Contains(err.Error(), errOAuthTimeout.Error()):
		return errclass.Errorf(errclass.Unavailable, "the authorization server did not answer within %s (timeout)", g.oauth.requestTimeout)
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err // the caller's own deadline or cancellation: classified as such
	case errors.As(err, &ue):
		return errclass.New(errclass.Unavailable, "the authorization server could not be reached: "+abbreviate(ue.Err.Error(), 200), err)
	}
	return errclass.Mark(errclass.Unavailable, "the OAuth request", err)
}

// failCache remembers failed OAuth discoveries for oauth.discoveryFailTTL, so repeated
// ConnectServer calls or reconnects toward a server whose metadata cannot be fetched do not
// each fetch it again (the cost, and an amplification toward the upstream). At most
// maxDiscoveryFails entries: expired ones go first, then the one that expires soonest.
type failCache struct {
	mu sync.Mutex // guards m
	m  map[string]failEntry
}

type failEntry struct {
	err   error
	until time.Time
}

// get returns the remembered failure of key, or nil.
func (f *failCache) get(key string, now time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e, ok := f.m[key]; ok && now.Before(e.until) {
		return e.err
	}
	return nil
}

func (f *failCache) put(key string, err error, until time.Time, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m == nil {
		f.m = map[string]failEntry{}
	}
	if _, ok := f.m[key]; !ok && len(f.m) >= maxDiscoveryFails {
		soonest := ""
		for k, e := range f.m {
			if !now.Before(e.until) {
				delete(f.m, k)
			} else if soonest == "" || e.until.Before(f.m[soonest].until) {
				soonest = k
			}
		}
		if len(f.m) >= maxDiscoveryFails {
			delete(f.m, soonest)
		}
	}
	f.m[key] = failEntry{err: err, until: until}
}

// cachedDiscovery runs discover unless it failed for key less than oauth.discoveryFailTTL ago,
// and remembers its failure, unless the caller's context ended it. The whole discovery is
// bounded by twice oauth.requestTimeout.
func cachedDiscovery[T any](ctx context.Context, g *Gateway, key string, discover func(context.Context) (T, error)) (T, error) {
	var zero T
	now := time.Now()
	if err := g.discoFails.get(key, now); err != nil {
		return zero, err
	}
	dctx, cancel := context.WithTimeoutCause(ctx, 2*g.oauth.requestTimeout, errOAuthTimeout)
	defer cancel()
	v, err := discover(dctx)
	if err == nil {
		return v, nil
	}
	if ctx.Err() != nil {
		return zero, err
	}
	if context.Cause(dctx) == errOAuthTimeout {
		err = errclass.Errorf(errclass.Unavailable, "the OAuth discovery did not finish within %s (timeout)", 2*g.oauth.requestTimeout)
	}
	err = fmt.Errorf("%w (not tried again for %s)", err, g.oauth.discoveryFailTTL)
	g.discoFails.put(key, err, time.Now().Add(g.oauth.discoveryFailTTL), time.Now())
	return zero, err
}

// discover finds the server's authorization server and the client to use with it, once per
// connection of the server (a dynamically registered client is reused for every user).
func (c *serverConn) discover(ctx context.Context) (*oauthEndpoint, error) {
	c.oauthMu.Lock()
	defer c.oauthMu.Unlock()
	if c.oauthEP != nil && !c.asw.stale.Load() {
		return c.oauthEP, nil
	}
	c.asw.stale.Store(false) // a refusal from now on asks again
	ht := c.spec.GetHttp()
	ep, err := cachedDiscovery(ctx, c.g, "user\x00"+c.spec.Name+"\x00"+ht.GetUrl(), c.discoverEndpoint)
	if err != nil {
		return nil, err
	}
	c.oauthEP = ep
	c.asw.discovered(ep.Issuer)
	return ep, nil
}

// discoverEndpoint is discover's work, without its caches.
func (c *serverConn) discoverEndpoint(ctx context.Context) (*oauthEndpoint, error) {
	g, ht := c.g, c.spec.GetHttp()
	uo := ht.GetUserOauth()
	client := g.tokenClient()
	capture := &metaCapture{base: client.Transport}
	challenges, prm, asm, err := discoverAuthServer(ctx, &http.Client{Transport: capture}, ht.GetUrl(), g.version)
	if err != nil {
		return nil, err
	}
	if err := checkIssuerPin(uo.GetIssuer(), asm.Issuer); err != nil {
		return nil, err
	}
	if len(asm.CodeChallengeMethodsSupported) > 0 && !slices.Contains(asm.CodeChallengeMethodsSupported, "S256") {
		return nil, errors.New("the authorization server does not support PKCE with S256, which MCP requires")
	}
	ep := &oauthEndpoint{
		AuthURL:       asm.AuthorizationEndpoint,
		TokenURL:      asm.TokenEndpoint,
		RevocationURL: asm.RevocationEndpoint,
		Issuer:        asm.Issuer,
		IssRequired:   asm.AuthorizationResponseIssParameterSupported,
		DPoP:          capture.dpopFor(asm.Issuer),
		Resource:      cmp.Or(prm.Resource, ht.GetUrl()),
	}
	for _, u := range []string{ep.AuthURL, ep.TokenURL} {
		if !isHTTPURL(u) {
			return nil, fmt.Errorf("the authorization server's metadata has an endpoint that is not an http(s) URL: %q", abbreviate(u, 200))
		}
	}
	switch {
	case len(uo.GetScopes()) > 0:
		ep.Scopes = uo.GetScopes()
	case len(scopesOf(challenges)) > 0:
		ep.Scopes = scopesOf(challenges)
	default:
		ep.Scopes = prm.ScopesSupported
	}
	if id := uo.GetClientId(); id != "" {
		ep.ClientID = id
		if env := uo.GetClientSecretEnv(); env != "" {
			if ep.ClientSecret, err = g.powers.secret(env, g.getenv); err != nil {
				return nil, fmt.Errorf("OAuth client secret: %w", err)
			}
		}
		ep.AuthStyle = authStyle(asm.TokenEndpointAuthMethodsSupported, ep.ClientSecret != "")
	} else if md := g.cfg.OAuthClientMetadataURL; md != "" && asm.ClientIDMetadataDocumentSupported {
		// A Client ID Metadata Document (MCP 2025-11-25, draft-ietf-oauth-client-id-metadata-
		// document): the client id is the URL of the document the operator publishes; the
		// authorization server fetches it, so nothing is registered. A public client.
		ep.ClientID = md
		ep.AuthStyle = oauth2.AuthStyleInParams
	} else if reg, ok := c.asw.registration(asm.Issuer, asm.RegistrationEndpoint); ok {
		ep.ClientID, ep.ClientSecret, ep.AuthStyle = reg.ClientID, reg.ClientSecret, reg.AuthStyle
	} else {
		if asm.RegistrationEndpoint == "" {
			return nil, errors.New("the authorization server offers no dynamic client registration: configure a client_id registered with it in user_oauth")
		}
		reg, err := oauthex.RegisterClient(ctx, asm.RegistrationEndpoint, &oauthex.ClientRegistrationMetadata{
			RedirectURIs:            []string{g.cfg.OAuthRedirectURL},
			ApplicationType:         applicationType(g.cfg.OAuthRedirectURL),
			ClientName:              "Hermes",
			GrantTypes:              []string{"authorization_code", "refresh_token"},
			ResponseTypes:           []string{"code"},
			TokenEndpointAuthMethod: "none",
			Scope:                   strings.Join(ep.Scopes, " "),
		}, client)
		if err != nil {
			return nil, fmt.Errorf("dynamic client registration: %w", err)
		}
		ep.ClientID, ep.ClientSecret = reg.ClientID, reg.ClientSecret
		ep.AuthStyle = oauth2.AuthStyleInParams
		if reg.ClientSecret != "" && reg.TokenEndpointAuthMethod != "client_secret_post" {
			ep.AuthStyle = oauth2.AuthStyleInHeader
		}
		c.asw.remember(asm.Issuer, asm.RegistrationEndpoint, oauthRegistration{ClientID: ep.ClientID, ClientSecret: ep.ClientSecret, AuthStyle: ep.AuthStyle})
	}
	return ep, nil
}

// checkIssuerPin refuses a discovered authorization server whose issuer is not the configured
// one (pin; empty pins nothing): the configured client, its secret and the user's grants belong
// to that authorization server, whatever the MCP server's metadata names now.
func checkIssuerPin(pin, discovered string) error {
	if pin != "" && discovered != pin {
		return errclass.Errorf(errclass.Precondition, "the server's metadata names the authorization server %q, not the configured issuer %q: nothing is sent to it", abbreviate(discovered, 200), abbreviate(pin, 200))
	}
	return nil
}

// discoveryError classifies a failed OAuth discovery: an error that says what the caller can do
// (a refused issuer, a reported limit) as it is, anything else as the backend's.
func discoveryError(err error) error {
	var pub *errclass.Error
	if errors.As(err, &pub) {
		return err
	}
	return errclass.Mark(errclass.Unavailable, "MCP OAuth discovery", err)
}

// authStyle picks how a preregistered client authenticates at the token endpoint.
func authStyle(supported []string, secret bool) oauth2.AuthStyle {
	if !secret || (slices.Contains(supported, "client_secret_post") && !slices.Contains(supported, "client_secret_basic")) {
		return oauth2.AuthStyleInParams
	}
	return oauth2.AuthStyleInHeader
}

// discoverAuthServer finds a server's authorization server as the MCP authorization spec
// says: the 401 challenge of an unauthenticated initialize, protected resource metadata
// (RFC 9728) at the challenge's URL or the well-known paths, else the server's origin
// (2025-03-26 servers); then the authorization server's metadata through the SDK (RFC 8414,
// OpenID discovery), else the 2025-03-26 default endpoints.
func discoverAuthServer(ctx context.Context, client *http.Client, serverURL, version string) ([]oauthex.Challenge, *oauthex.ProtectedResourceMetadata, *oauthex.AuthServerMeta, error) {
	challenges, err := challenge(ctx, client, serverURL, version)
	if err != nil {
		return nil, nil, nil, err
	}
	var prm *oauthex.ProtectedResourceMetadata
	for _, u := range resourceMetadataURLs(challenges, serverURL) {
		m, err := oauthex.GetProtectedResourceMetadata(ctx, u.url, u.resource, client)
		if err != nil || m == nil {
			continue
		}
		if len(m.AuthorizationServers) == 0 {
			return nil, nil, nil, errors.New("the server's protected resource metadata names no authorization server")
		}
		prm = m
		break
	}
	legacy := prm == nil
	if legacy {
		root := resourceRoot(serverURL)
		if root == "" {
			return nil, nil, nil, fmt.Errorf("the server URL %q is not a URL", abbreviate(serverURL, 200))
		}
		prm = &oauthex.ProtectedResourceMetadata{AuthorizationServers: []string{root}, Resource: serverURL}
	}
	issuer := prm.AuthorizationServers[0]
	var asm *oauthex.AuthServerMeta
	if legacy {
		asm, err = legacyAuthServerMetadata(ctx, client, issuer)
	} else {
		asm, err = auth.GetAuthServerMetadata(ctx, issuer, client)
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("authorization server metadata: %w", err)
	}
	if asm == nil {
		base := strings.TrimRight(issuer, "/")
		asm = &oauthex.AuthServerMeta{Issuer: issuer, AuthorizationEndpoint: base + "/authorize", TokenEndpoint: base + "/token", RegistrationEndpoint: base + "/register"}
	}
	return challenges, prm, asm, nil
}

// legacyAuthServerMetadata reads the authorization server metadata of a 2025-03-26 server,
// which has no protected resource metadata: the metadata is at the well-known paths of the
// server's origin, and its issuer may be any URL of that origin (the suite's server names
// origin/oauth). The origin is what the client trusts here, so an issuer of another origin is
// refused; where the issuer is known beforehand (named by protected resource metadata) it must
// match exactly, as RFC 8414 section 3.3 requires (auth.GetAuthServerMetadata).
func legacyAuthServerMetadata(ctx context.Context, client *http.Client, origin string) (*oauthex.AuthServerMeta, error) {
	o, err := url.Parse(origin)
	if err != nil {
		return nil, err
	}
	for _, p := range []string{"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration"} {
		metaURL := strings.TrimRight(origin, "/") + p
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, metaURL, nil)
		if err != nil {
			return nil, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		var doc struct {
			Issuer string `json:"issuer"`
		}
		derr := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&doc)
		_ = resp.Body.Close()
		if resp.StatusCode/100 == 4 {
			continue
		}
		if resp.StatusCode/100 != 2 || derr != nil {
			return nil, fmt.Errorf("%s: %s", metaURL, resp.Status)
		}
		iss, err := url.Parse(doc.Issuer)
		if err != nil || iss.Scheme != o.Scheme || iss.Host != o.Host {
			return nil, fmt.Errorf("metadata issuer %q is not of the server's origin %q", doc.Issuer, origin)
		}
		// The SDK checks the rest (PKCE, the endpoints' schemes) against the issuer read.
		return oauthex.GetAuthServerMeta(ctx, metaURL, doc.Issuer, client)
	}
	return nil, nil
}

// challenge asks the server without a token and returns the challenges of its 401 answer
// (none when it answers otherwise).
func challenge(ctx context.Context, client *http.Client, serverURL, version string) ([]oauthex.Challenge, error) {
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"hermes","version":` + strconv.Quote(version) + `}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, serverURL, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("MCP server: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode/100 == 2 {
		// Some servers let initialize through without a token and challenge the first
		// request after it: ask for the tool list the same way, to read that challenge.
		if resp, err = listProbe(ctx, client, serverURL, resp.Header.Get("Mcp-Session-Id")); err != nil {
			return nil, nil
		}
	}
	if resp.StatusCode != http.StatusUnauthorized {
		return nil, nil
	}
	cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate"))
	if err != nil {
		return nil, fmt.Errorf("the server's WWW-Authenticate header: %w", err)
	}
	return cs, nil
}

// listProbe sends an unauthenticated tools/list (in the session initialize opened, if any) and
// returns the answer with its body drained; the session is ended afterwards.
func listProbe(ctx context.Context, client *http.Client, serverURL, session string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, serverURL, strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if session != "" {
		if del, err := http.NewRequestWithContext(ctx, http.MethodDelete, serverURL, nil); err == nil {
			del.Header.Set("Mcp-Session-Id", session)
			if r, err := client.Do(del); err == nil {
				_ = r.Body.Close()
			}
		}
	}
	return resp, nil
}

type prmURL struct{ url, resource string }

// resourceMetadataURLs are where protected resource metadata may be, in the MCP spec's order:
// the challenge's resource_metadata, then the well-known path for the endpoint, then the root.
func resourceMetadataURLs(cs []oauthex.Challenge, serverURL string) []prmURL {
	var out []prmURL
	for _, ch := range cs {
		if u := ch.Params["resource_metadata"]; u != "" && isHTTPURL(u) {
			out = append(out, prmURL{u, serverURL})
			break
		}
	}
	ru, err := url.Parse(serverURL)
	if err != nil {
		return out
	}
	mu := *ru
	mu.RawQuery = ""
	if p := strings.TrimLeft(ru.Path, "/"); p != "" {
		mu.Path = "/.well-known/oauth-protected-resource/" + p
		out = append(out, prmURL{mu.String(), serverURL})
	}
	mu.Path = "/.well-known/oauth-protected-resource"
	return append(out, prmURL{mu.String(), resourceRoot(serverURL)})
}

// scopesOf returns the scope of a Bearer challenge.
func scopesOf(cs []oauthex.Challenge) []string {
	for _, ch := range cs {
		if strings.EqualFold(ch.Scheme, "bearer") && ch.Params["scope"] != "" {
			return strings.Fields(ch.Params["scope"])
		}
	}
	return nil
}

// randomState returns 256 bits of randomness, URL-safe.
func randomState() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// startAuthorization begins a user's connection to a server: it stores a pending authorization
// (state, PKCE verifier, client) and returns the URL the user opens.
func (g *Gateway) startAuthorization(ctx context.Context, c *serverConn, user string) (string, error) {
	return g.startAuthorizationScopes(ctx, c, user, nil)
}

// startAuthorizationScopes is startAuthorization asking for scopes instead of the server's
// usual ones when scopes is not empty (step-up authorization). The scopes travel in the
// pending authorization, so only the connection of the user who consents is widened.
func (g *Gateway) startAuthorizationScopes(ctx context.Context, c *serverConn, user string, scopes []string) (string, error) {
	if why := g.oauthReady(); why != "" {
		return "", errclass.Errorf(errclass.Precondition, "%s", why)
	}
	shared, err := c.discover(ctx)
	if err != nil {
		return "", discoveryError(err)
	}
	ep := new(*shared) // the discovered endpoint is shared by every user: never change it
	if len(scopes) > 0 {
		ep.Scopes = scopes
	}
	if u := g.pendingLink(ctx, c, user, ep); u != "" {
		return u, nil
	}
	state, err := randomState()
	if err != nil {
		return "", err
	}
	verifier := oauth2.GenerateVerifier()
	st := authState{User: user, Server: c.spec.Name, URL: c.spec.GetHttp().GetUrl(), Verifier: verifier, State: state, Expires: time.Now().Add(authStateTTL), Endpoint: *ep}
	id := stateID(state)
	sealed, err := g.sealer.seal(st, stateAAD(id))
	if err != nil {
		return "", err
	}
	// One pending authorization per user and server: this one replaces the user's previous
	// one, whose link stops working, so a user asking again and again holds one at most.
	if err := g.conns.PutAuthState(ctx, PendingAuth{ID: id, Server: c.spec.Name, User: user, Sealed: sealed, TTL: authStateTTL}, g.oauth.maxPending); err != nil {
		if errors.Is(err, errPendingFull) {
			return "", errclass.Errorf(errclass.Exhausted, "%d users are connecting an account to the MCP server %q at the moment (each link works for %s), the most the gateway keeps; try again in a few minutes",
				g.oauth.maxPending, c.spec.Name, authStateTTL)
		}
		return "", err
	}
	return g.authCodeURL(ep, state, verifier), nil
}

func (g *Gateway) authCodeURL(ep *oauthEndpoint, state, verifier string) string {
	return ep.config(g.cfg.OAuthRedirectURL).AuthCodeURL(state,
		oauth2.S256ChallengeOption(verifier),
		oauth2.SetAuthURLParam("resource", ep.Resource))
}

// pendingLink returns the link of user's pending authorization with c when it asks for what
// ep asks (same endpoint, client and scopes, same server URL) and has at least half its life
// left, else "". Each new link replaces the user's previous one (one pending per user and
// server), so without this a second call — the model trying again, another tool of the
// server, a second tab — would break the link the user was about to open.
func (g *Gateway) pendingLink(ctx context.Context, c *serverConn, user string, ep *oauthEndpoint) string {
	id, sealed, err := g.conns.PendingAuthState(ctx, c.spec.Name, user)
	if err != nil {
		g.log.Debug("MCP OAuth: pending authorization not read; a new link replaces it", "server", c.spec.Name, "error", err)
		return ""
	}
	if id == "" {
		return ""
	}
	var st authState
	if g.sealer.open(sealed, stateAAD(id), &st) != nil || st.State == "" || stateID(st.State) != id ||
		st.User != user || st.Server != c.spec.Name || st.URL != c.spec.GetHttp().GetUrl() ||
		time.Until(st.Expires) < authStateTTL/2 || !sameEndpoint(&st.Endpoint, ep) {
		return ""
	}
	return g.authCodeURL(&st.Endpoint, st.State, st.Verifier)
}

// sameEndpoint reports whether two authorizations ask the same authorization server for the
// same client and scopes; every field is compared (a field added later too), the scopes with
// an empty list equal to none (as a stored record reads back).
func sameEndpoint(a, b *oauthEndpoint) bool {
	x, y := *a, *b
	x.Scopes, y.Scopes = nil, nil
	return reflect.DeepEqual(x, y) && slices.Equal(a.Scopes, b.Scopes)
}

// ConnectServer returns the URL where user connects their account to a per-user OAuth server,
// or connected when they have a connection.
func (g *Gateway) ConnectServer(ctx context.Context, server, user string) (authURL string, connected bool, err error) {
	c, err := g.server(server)
	if err != nil {
		return "", false, err
	}
	if !perUserOAuth(c.spec.GetHttp()) {
		return "", false, errclass.Errorf(errclass.Precondition, "MCP server %q does not use per-user OAuth (user_oauth or enterprise_oauth); there is nothing to connect", server)
	}
	if why := g.perUserReady(c.spec.GetHttp()); why != "" {
		return "", false, errclass.Errorf(errclass.Precondition, "%s", why)
	}
	if conn, err := g.loadConnection(ctx, server, user); err != nil {
		return "", false, err
	} else if c.usableConn(conn) {
		return "", true, nil
	}
	if c.spec.GetHttp().GetEnterpriseOauth() != nil {
		return "", false, errclass.Errorf(errclass.Precondition, "MCP server %q connects users through their identity provider: give the user's ID token (id_token)", server)
	}
	u, err := g.startAuthorization(ctx, c, user)
	return u, false, err
}

// CompleteAuthorization takes the authorization response the browser brought back: the state
// must be known, unused and unexpired (it is deleted on first use, whatever follows), the code
// is exchanged with the state's PKCE verifier, and the tokens are stored for the state's user
// and server. It returns the server's name.
func (g *Gateway) CompleteAuthorization(ctx context.Context, req *pb.CompleteAuthorizationRequest) (string, error) {
	if why := g.oauthReady(); why != "" {
		return "", errclass.Errorf(errclass.Precondition, "%s", why)
	}
	id := stateID(req.GetState())
	sealed, err := g.conns.TakeAuthState(ctx, id)
	if err != nil {
		return "", err
	}
	var st authState
	if sealed == nil || g.sealer.open(sealed, stateAAD(id), &st) != nil || time.Now().After(st.Expires) {
		return "", errclass.Errorf(errclass.Invalid, "this authorization is unknown, already used, replaced by a newer link or expired; ask the assistant again for a new link")
	}
	if e := req.GetError(); e != "" {
		return "", errclass.Errorf(errclass.Precondition, "the authorization server refused: %s %s", abbreviate(e, 100), abbreviate(req.GetErrorDescription(), 300))
	}
	if req.GetCode() == "" {
		return "", errclass.Errorf(errclass.Invalid, "the authorization response has no code")
	}
	if err := checkIss(&st.Endpoint, req.GetIss()); err != nil {
		return "", err
	}
	c, err := g.server(st.Server)
	if err != nil {
		return "", err
	}
	if c.spec.GetHttp().GetUrl() != st.URL || c.spec.GetHttp().GetUserOauth() == nil {
		return "", errclass.Errorf(errclass.Precondition, "the MCP server %q changed while the user authorized; connect again", st.Server)
	}
	hc, dpopKey, err := g.exchangeClient(&st.Endpoint)
	if err != nil {
		return "", err
	}
	hctx := context.WithValue(ctx, oauth2.HTTPClient, hc)
	tok, err := st.Endpoint.config(g.cfg.OAuthRedirectURL).Exchange(hctx, req.GetCode(),
		oauth2.VerifierOption(st.Verifier),
		oauth2.SetAuthURLParam("resource", st.Endpoint.Resource))
	if err != nil {
		terr := g.tokenError(err)
		if errors.Is(terr, errclass.Unavailable) {
			return "", fmt.Errorf("OAuth token exchange: %w", terr)
		}
		return "", errclass.Mark(errclass.Precondition, "OAuth token exchange", terr)
	}
	if err := checkIssuedToken(tok); err != nil {
		return "", err
	}
	if err := g.saveConnection(ctx, st.Server, st.User, &userConnection{Endpoint: st.Endpoint, Token: *tok, DPoPKey: dpopKey}); err != nil {
		return "", err
	}
	c.dropUserSession(st.User)
	c.requestKick() // the shared session may have waited for a first connected user
	g.log.Info("MCP server: a user connected an account", "server", st.Server, "user", st.User)
	if g.onUserConnected != nil {
		g.onUserConnected(ctx, st.Server, st.User)
	}
	return st.Server, nil
}

// tokenError describes a failed token request without the response body, which may echo
// what was sent. A request that got no usable answer is unavailable (oauthRequestError).
func (g *Gateway) tokenError(err error) error {
	var re *oauth2.RetrieveError
	if errors.As(err, &re) {
		if re.ErrorCode != "" {
			return fmt.Errorf("the authorization server answered %s", abbreviate(re.ErrorCode, 100))
		}
		if re.Response != nil {
			return fmt.Errorf("the authorization server answered HTTP %d", re.Response.StatusCode)
		}
	}
	return g.oauthRequestError(err)
}

func (g *Gateway) loadConnection(ctx context.Context, server, user string) (*userConnection, error) {
	conn, _, err := g.loadConnectionSealed(ctx, server, user)
	return conn, err
}

// loadConnectionSealed is loadConnection that also returns the stored record.
func (g *Gateway) loadConnectionSealed(ctx context.Context, server, user string) (*userConnection, []byte, error) {
	sealed, err := g.conns.GetConnection(ctx, server, user)
	if err != nil || sealed == nil {
		return nil, nil, err
	}
	var conn userConnection
	if err := g.sealer.open(sealed, connAAD(server, user), &conn); err != nil {
		g.log.Warn("MCP server: a stored connection does not open; the user connects again", "server", server, "user", user, "error", err)
		return nil, nil, nil
	}
	return &conn, sealed, nil
}

func (g *Gateway) saveConnection(ctx context.Context, server, user string, conn *userConnection) error {
	sealed, err := g.sealer.seal(conn, connAAD(server, user))
	if err != nil {
		return err
	}
	return g.conns.PutConnection(ctx, server, user, sealed)
}

// DisconnectServer forgets user's connection to server and revokes its tokens where the
// authorization server offers revocation.
func (g *Gateway) DisconnectServer(ctx context.Context, server, user string) (disconnected, revoked bool, err error) {
	// A server no longer configured is readied as a user_oauth one: its record may remain.
	var why string
	if c, err := g.server(server); err == nil {
		why = g.perUserReady(c.spec.GetHttp())
	} else {
		why = g.oauthReady()
	}
	if why != "" {
		return false, false, errclass.Errorf(errclass.Precondition, "%s", why)
	}
	conn, err := g.loadConnection(ctx, server, user)
	if err != nil {
		return false, false, err
	}
	if conn != nil {
		revoked = g.revoke(ctx, conn)
	}
	disconnected, err = g.conns.DeleteConnection(ctx, server, user)
	if err != nil {
		return false, revoked, err
	}
	if c, err := g.server(server); err == nil {
		c.dropUserSession(user)
	}
	return disconnected, revoked, nil
}

// revoke asks the authorization server to revoke the connection's tokens (RFC 7009): the
// refresh token, which ends the grant, and the access token. It reports whether every
// revocation was accepted.
func (g *Gateway) revoke(ctx context.Context, conn *userConnection) bool {
	ep := conn.Endpoint
	if ep.RevocationURL == "" || !isHTTPURL(ep.RevocationURL) {
		return false
	}
	ok := true
	for _, t := range []struct{ tok, hint string }{{conn.Token.RefreshToken, "refresh_token"}, {conn.Token.AccessToken, "access_token"}} {
		if t.tok == "" {
			continue
		}
		form := url.Values{"token": {t.tok}, "token_type_hint": {t.hint}}
		if ep.ClientSecret == "" || ep.AuthStyle == oauth2.AuthStyleInParams {
			form.Set("client_id", ep.ClientID)
			if ep.ClientSecret != "" {
				form.Set("client_secret", ep.ClientSecret)
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, ep.RevocationURL, bytes.NewBufferString(form.Encode()))
		if err != nil {
			return false
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if ep.ClientSecret != "" && ep.AuthStyle != oauth2.AuthStyleInParams {
			req.SetBasicAuth(url.QueryEscape(ep.ClientID), url.QueryEscape(ep.ClientSecret))
		}
		resp, err := g.tokenClient().Do(req)
		if err != nil {
			ok = false
			continue
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		ok = ok && resp.StatusCode == http.StatusOK
	}
	return ok
}

// userTokens is the token source of one user's session: the stored token while it is valid,
// else a refreshed one, stored again. A refresh the authorization server refuses ends the
// connection (errNotConnected: the user connects again).
//
// Replicas (and the sessions of one replica) may refresh one connection at the same time, and
// a provider that rotates refresh tokens accepts the old one once: the other refresh is refused
// as invalid_grant. So a refreshed token is stored only over the record it was refreshed from
// (SwapConnection), and a refused refresh ends the connection only if the record is still that
// one once the winner has had refreshGrace to store its answer (DeleteConnectionIf): the
// loser reads the winner's record and uses its token, and a record newer than the one read is
// never deleted.
type userTokens struct {
	g      *Gateway
	server string
	user   string
	// ended, when set, is raised once the connection is gone (whatever error the SDK wraps
	// errNotConnected in), so the caller asks the user to connect again.
	ended *sticky
	mu    sync.Mutex // guards conn, sealed, dpopDER, dpopKey
	conn  *userConnection
	// sealed is the stored record conn was read from (nil: read it again before use).
	sealed []byte
	// dpopKey is dpopDER parsed: the DPoP key of a connection, kept so that a request's proof
	// does not parse it again (keyFor).
	dpopDER []byte
	dpopKey *ecdsa.PrivateKey
}

// maxRefreshRounds bounds the times one Token call reads a record again after losing a race
// to another writer: each round follows a change of the stored record.
const maxRefreshRounds = 4

func (t *userTokens) Token() (*oauth2.Token, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	ctx, cancel := context.WithTimeout(t.g.ctx, 2*t.g.oauth.requestTimeout+t.g.oauth.refreshGrace)
	defer cancel()
	if t.conn == nil || t.sealed == nil || !t.conn.Token.Valid() {
		// Another replica may have refreshed it (and a rotated refresh token is single use).
		if err := t.reload(ctx); err != nil {
			return nil, err
		}
	}
	for range maxRefreshRounds {
		if t.conn.Token.Valid() {
			tok := t.conn.Token
			return &tok, nil
		}
		if t.conn.Token.RefreshToken == "" {
			if err := t.forget(ctx, "the token expired and there is no refresh token"); !errors.Is(err, errRecordChanged) {
				return nil, err
			}
			continue
		}
		tok, err := t.refresh(ctx)
		if err != nil {
			if !errors.Is(err, errRecordChanged) {
				return nil, err
			}
			continue
		}
		out := *tok
		return &out, nil
	}
	return nil, errclass.Errorf(errclass.Conflict, "the user's connection to MCP server %q kept changing while its token was refreshed; try again", t.server)
}

// checkIssuedToken refuses a token answer whose access or refresh token is longer than
// maxIssuedToken, before it is stored in a user's connection (the answer's own bound,
// maxOAuthResponse, is 16 times that, and each user has a record).
func checkIssuedToken(tok *oauth2.Token) error {
	return checkTokenSizes("the authorization server", tok.AccessToken, tok.RefreshToken)
}

// checkTokenSizes refuses tokens that who issued longer than maxIssuedToken.
func checkTokenSizes(who string, tokens ...string) error {
	for _, t := range tokens {
		if len(t) > maxIssuedToken {
			return errclass.Errorf(errclass.Unavailable, "%s issued a token longer than %d KiB", who, maxIssuedToken>>10)
		}
	}
	return nil
}

// errRecordChanged: the stored connection is not the one read any more; t holds the new one.
var errRecordChanged = errors.New("the stored connection changed")

// refresh gets a new token with the connection's refresh token and stores it over the record
// it was read from. errRecordChanged (with t reloaded) when another writer got there first.
func (t *userTokens) refresh(ctx context.Context) (*oauth2.Token, error) {
	hctx := context.WithValue(ctx, oauth2.HTTPClient, t.g.connClient(t.conn))
	old := t.conn.Token
	old.AccessToken = "" // force the refresh
	tok, err := t.conn.Endpoint.config(t.g.cfg.OAuthRedirectURL).TokenSource(hctx, &old).Token()
	if err != nil {
		// RFC 6749 section 5.2: a refused grant or client is a 400 or 401 answer; a server
		// error or a network failure leaves the connection for the next try.
		var re *oauth2.RetrieveError
		if errors.As(err, &re) && (re.ErrorCode == "invalid_grant" || re.ErrorCode == "invalid_client" || re.ErrorCode == "unauthorized_client" ||
			re.Response != nil && (re.Response.StatusCode == http.StatusBadRequest || re.Response.StatusCode == http.StatusUnauthorized)) {
			// The refresh token may have been used a moment ago by another replica, whose
			// answer is on its way to the store: wait for it before ending the connection.
			if t.awaitChange(ctx) {
				if err := t.reload(ctx); err != nil {
					return nil, err
				}
				return nil, errRecordChanged
			}
			return nil, t.forget(ctx, "the authorization server refused the refresh: "+t.g.tokenError(err).Error())
		}
		return nil, fmt.Errorf("refreshing the user's token: %w", t.g.tokenError(err))
	}
	if err := checkIssuedToken(tok); err != nil {
		return nil, err // the connection stays as it was: nothing of this answer is stored
	}
	next := *t.conn
	next.Token = *tok
	sealed, err := t.g.sealer.seal(&next, connAAD(t.server, t.user))
	if err != nil {
		return nil, err
	}
	swapped, err := t.g.conns.SwapConnection(ctx, t.server, t.user, t.sealed, sealed)
	if err != nil {
		return nil, err
	}
	if !swapped {
		// Another replica refreshed first (its token is as good, and with a rotating provider
		// the refresh token stored with it is the live one), or the user reconnected or
		// disconnected: the stored record wins. The token just obtained is dropped.
		if err := t.reload(ctx); err != nil {
			return nil, err
		}
		return nil, errRecordChanged
	}
	t.conn, t.sealed = &next, sealed
	return tok, nil
}

// reload reads the stored connection into t; errNotConnected when there is none.
func (t *userTokens) reload(ctx context.Context) error {
	conn, sealed, err := t.g.loadConnectionSealed(ctx, t.server, t.user)
	if err != nil {
		return err
	}
	if conn == nil {
		t.conn, t.sealed = nil, nil
		if t.ended != nil {
			t.ended.Set()
		}
		return errNotConnected
	}
	t.conn, t.sealed = conn, sealed
	return nil
}

// awaitChange polls the stored record for up to refreshGrace and reports whether it is no
// longer the one t read.
func (t *userTokens) awaitChange(ctx context.Context) bool {
	wctx, cancel := context.WithTimeout(ctx, t.g.oauth.refreshGrace)
	defer cancel()
	return backoff.Until(wctx, backoff.Policy{Initial: 20 * time.Millisecond, Max: 250 * time.Millisecond, Jitter: 0.2}, func() bool {
		cur, err := t.g.conns.GetConnection(wctx, t.server, t.user)
		return err == nil && !bytes.Equal(cur, t.sealed)
	})
}

// forget deletes a connection that can no longer give tokens, if it is still the record t
// read: errNotConnected, or errRecordChanged (with t reloaded) when it is not.
func (t *userTokens) forget(ctx context.Context, why string) error {
	deleted, err := t.g.conns.DeleteConnectionIf(ctx, t.server, t.user, t.sealed)
	if err != nil {
		return err
	}
	if !deleted {
		if err := t.reload(ctx); err != nil {
			return err
		}
		return errRecordChanged
	}
	t.g.log.Info("MCP server: a user's connection ended; they connect again", "server", t.server, "user", t.user, "reason", why)
	t.conn, t.sealed = nil, nil
	if t.ended != nil {
		t.ended.Set()
	}
	return errNotConnected
}

// current returns the stored record t last read (nil: none).
func (t *userTokens) current() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sealed
}

// sharedTokens is the token source of a per-user OAuth server's shared session, which only
// lists the server's tools: it borrows the token of a connected user. Calls never use it.
type sharedTokens struct {
	c  *serverConn
	mu sync.Mutex // guards cur
	// cur is the connected user whose token lists the tools.
	cur *userTokens
}

func (s *sharedTokens) Token() (*oauth2.Token, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.c.g
	if why := g.perUserReady(s.c.spec.GetHttp()); why != "" {
		return nil, errors.New(why)
	}
	if s.cur != nil {
		// Read the lender's connection again each time: once they disconnect (on any
		// replica), their token is not used any more.
		s.cur.mu.Lock()
		s.cur.conn, s.cur.sealed = nil, nil
		s.cur.mu.Unlock()
		if tok, err := s.cur.Token(); err == nil && s.usable(s.cur) {
			return tok, nil
		}
		s.cur = nil
	}
	ctx, cancel := context.WithTimeout(g.ctx, 10*time.Second)
	defer cancel()
	users, err := g.conns.ConnectionUsers(ctx, s.c.spec.Name, 8)
	if err != nil {
		return nil, err
	}
	for _, u := range users {
		t := &userTokens{g: g, server: s.c.spec.Name, user: u}
		if tok, err := t.Token(); err == nil && s.usable(t) {
			s.cur = t
			return tok, nil
		}
	}
	return nil, errors.New("no user has connected an account to this per-user OAuth server yet; its tools are listed once one does (ConnectServer)")
}

// userSession is one user's own session with a per-user OAuth server.
type userSession struct {
	l        *live
	lastUsed time.Time
	// unauthorized is set when the server answered 401 to this user's token, or the
	// connection ended (a refused refresh, a disconnect elsewhere).
	unauthorized *sticky
	// stepUp holds the scopes of a 403 insufficient_scope answer to this user's token.
	stepUp *scopeChallenge
}

// sticky is a bool set from the transport's goroutines.
type sticky struct {
	mu  sync.Mutex // guards set
	set bool
}

func (f *sticky) Set()      { f.mu.Lock(); f.set = true; f.mu.Unlock() }
func (f *sticky) Get() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.set }

// scopeChallenge holds the scopes of the server's last 403 insufficient_scope challenge.
type scopeChallenge struct {
	mu     sync.Mutex // guards scopes
	scopes []string
}

func (s *scopeChallenge) Set(scopes []string) { s.mu.Lock(); s.scopes = scopes; s.mu.Unlock() }
func (s *scopeChallenge) Get() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scopes
}

// unauthorizedWatch records a 401 answer, and the scopes a 403 insufficient_scope answer
// asks for (when stepUp is set).
type unauthorizedWatch struct {
	base   http.RoundTripper
	f      *sticky
	stepUp *scopeChallenge
}

func (w *unauthorizedWatch) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := w.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		w.f.Set()
	}
	if err == nil && resp.StatusCode == http.StatusForbidden && w.stepUp != nil {
		if scopes := insufficientScope(resp.Header); len(scopes) > 0 {
			w.stepUp.Set(scopes)
		}
	}
	return resp, err
}

// insufficientScope returns the scopes of a Bearer challenge with error="insufficient_scope"
// (RFC 6750 section 3.1), the step-up challenge of the MCP authorization spec.
func insufficientScope(h http.Header) []string {
	cs, err := oauthex.ParseWWWAuthenticate(h.Values("WWW-Authenticate"))
	if err != nil {
		return nil
	}
	for _, ch := range cs {
		if strings.EqualFold(ch.Scheme, "bearer") && ch.Params["error"] == "insufficient_scope" {
			return strings.Fields(ch.Params["scope"])
		}
	}
	return nil
}

// unionScopes is a followed by the scopes of b it lacks.
func unionScopes(a, b []string) []string {
	out := slices.Clone(a)
	for _, s := range b {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// stepUpPrompt answers a call the server refused for want of scopes (403 insufficient_scope):
// the user consents again to the union of the scopes their connection was granted and those
// the server asks for. Their current connection stays until the new one lands. When the
// connection already has every scope asked for, asking again would loop: the call fails.
func (g *Gateway) stepUpPrompt(ctx context.Context, c *serverConn, user string, challenged []string) *pb.CallToolResponse {
	if c.spec.GetHttp().GetEnterpriseOauth() != nil {
		// The scopes of an enterprise connection are the operator's (enterprise_oauth.scopes).
		return failed(codeRejected, fmt.Sprintf("the MCP server %q refused the call for want of the scopes %q, which its enterprise_oauth configuration does not ask for", c.spec.Name, strings.Join(challenged, " ")))
	}
	conn, err := g.loadConnection(ctx, c.spec.Name, user)
	if err != nil {
		return failed(codeUnavailable, "the store of MCP connections is unavailable: "+abbreviate(err.Error(), 300))
	}
	if conn == nil {
		return g.connectPrompt(ctx, c, user)
	}
	want := unionScopes(conn.Endpoint.Scopes, challenged)
	if len(want) == len(conn.Endpoint.Scopes) {
		return failed(codeRejected, fmt.Sprintf("the MCP server %q refused the call for want of the scopes %q, which the user's connection already asked for; "+
			"the authorization server does not grant them to this user", c.spec.Name, strings.Join(challenged, " ")))
	}
	u, err := g.startAuthorizationScopes(ctx, c, user, want)
	if err != nil {
		return failed(codeUnavailable, fmt.Sprintf("the MCP server %q needs more permissions of the user's account, and starting the authorization failed: %s", c.spec.Name, abbreviate(err.Error(), 500)))
	}
	g.log.Info("MCP server: a call needs more scopes; the user is asked to consent", "server", c.spec.Name, "user", user, "scopes", strings.Join(want, " "))
	r := failed(codeAuthRequired, fmt.Sprintf("The MCP server %q needs more permissions (%s) of the user's account for this. "+
		"Ask the user to approve them by opening this link, then try again: %s", c.spec.Name, strings.Join(want, " "), u))
	r.AuthorizationUrl = u
	return r
}

// dropUserSession closes user's session, if any.
func (c *serverConn) dropUserSession(user string) {
	c.mu.Lock()
	us := c.users[user]
	delete(c.users, user)
	c.mu.Unlock()
	if us != nil {
		_ = us.l.sess.Close()
	}
}

// closeUserSessions closes every user's session (the server is going away).
func (c *serverConn) closeUserSessions() {
	c.mu.Lock()
	all := c.users
	c.users = map[string]*userSession{}
	c.mu.Unlock()
	for _, us := range all {
		_ = us.l.sess.Close()
	}
}

// connectPrompt is the result of a call by a user without a connection: the URL to connect,
// in words the model can pass on.
func (g *Gateway) connectPrompt(ctx context.Context, c *serverConn, user string) *pb.CallToolResponse {
	if c.spec.GetHttp().GetEnterpriseOauth() != nil {
		return enterprisePrompt(c)
	}
	u, err := g.startAuthorization(ctx, c, user)
	if err != nil {
		return failed(codeUnavailable, fmt.Sprintf("the MCP server %q needs the user's own account, and starting the connection failed: %s", c.spec.Name, abbreviate(err.Error(), 500)))
	}
	r := failed(codeAuthRequired, fmt.Sprintf("The MCP server %q needs the user's own account, and this user has not connected one. "+
		"Ask the user to connect their account by opening this link, then try again: %s", c.spec.Name, u))
	r.AuthorizationUrl = u
	return r
}

// userLive returns user's own session with a per-user OAuth server, connecting it when
// needed; or the result to answer instead (no user, no connection, server unreachable).
func (g *Gateway) userLive(ctx context.Context, c *serverConn, user string, timeout time.Duration) (*userSession, *pb.CallToolResponse) {
	if user == "" {
		return nil, failed(codeAuthRequired, fmt.Sprintf("the MCP server %q is called with each user's own account, and this call names no user", c.spec.Name))
	}
	if why := g.perUserReady(c.spec.GetHttp()); why != "" {
		return nil, failed(codeUnavailable, fmt.Sprintf("the MCP server %q cannot be called: %s", c.spec.Name, why))
	}
	c.mu.Lock()
	us := c.users[user]
	c.mu.Unlock()
	if us != nil && !us.unauthorized.Get() {
		// The user may have disconnected on another replica: the stored connection decides.
		if sealed, err := g.conns.GetConnection(ctx, c.spec.Name, user); err != nil {
			return nil, failed(codeUnavailable, "the store of MCP connections is unavailable: "+abbreviate(err.Error(), 300))
		} else if sealed != nil {
			c.mu.Lock()
			us.lastUsed = time.Now()
			c.mu.Unlock()
			return us, nil
		}
	}
	if us != nil {
		c.dropUserSession(user)
	}
	conn, sealed, err := g.loadConnectionSealed(ctx, c.spec.Name, user)
	if err != nil {
		return nil, failed(codeUnavailable, "the store of MCP connections is unavailable: "+abbreviate(err.Error(), 300))
	}
	if conn != nil && c.asw.movedFrom(conn.Endpoint.Issuer) {
		// Made with the authorization server the server named before (SEP-2352).
		_, _ = g.conns.DeleteConnectionIf(ctx, c.spec.Name, user, sealed)
		conn = nil
	}
	if conn != nil && !madeFor(conn, c.spec.GetHttp().GetUrl()) {
		// Made for a server that was at another URL under this name: its token is not for this
		// one. Kept (the spec may change back); the user's new connection replaces it.
		conn = nil
	}
	if conn == nil {
		return nil, g.connectPrompt(ctx, c, user)
	}
	ht := c.spec.GetHttp()
	header := http.Header{}
	for k, v := range ht.Headers {
		header.Set(k, v)
	}
	f, up := &sticky{}, &scopeChallenge{}
	tokens := &userTokens{g: g, server: c.spec.Name, user: user, conn: conn, sealed: sealed, ended: f}
	rt := &unauthorizedWatch{f: f, stepUp: up, base: &oauth2.Transport{Source: tokens, Base: tokens.dpop(&headerTransport{base: g.httpBase, header: header})}}
	hc := &http.Client{Transport: rt}
	cctx, cancel := context.WithTimeout(ctx, min(timeout, g.cfg.ConnectTimeout))
	defer cancel()
	sess, err := c.newClient().Connect(cctx, &mcp.StreamableClientTransport{Endpoint: ht.Url, HTTPClient: hc, MaxRetries: 2}, nil)
	if err != nil {
		if errors.Is(err, errNotConnected) || f.Get() {
			if f.Get() {
				c.asw.stale.Store(true) // the server may have moved to another authorization server
				// A token the server refuses was revoked or lost its grant: connect again.
				// Only that record goes: one stored meanwhile (a reconnect) stays.
				if cur := tokens.current(); cur != nil {
					_, _ = g.conns.DeleteConnectionIf(ctx, c.spec.Name, user, cur)
				}
			}
			return nil, g.connectPrompt(ctx, c, user)
		}
		if scopes := up.Get(); len(scopes) > 0 {
			return nil, g.stepUpPrompt(ctx, c, user, scopes)
		}
		return nil, failed(codeUnavailable, fmt.Sprintf("the MCP server %q did not accept the user's session: %s", c.spec.Name, abbreviate(err.Error(), 500)))
	}
	us = &userSession{l: &live{sess: sess, side: &httpSide{client: hc, url: ht.Url, notify: c.sideNotification}}, lastUsed: time.Now(), unauthorized: f, stepUp: up}
	c.mu.Lock()
	if c.users == nil {
		c.users = map[string]*userSession{}
	}
	old := c.users[user]
	c.users[user] = us
	var evict *userSession
	if len(c.users) > maxUserSessions {
		var oldest string
		for u, s := range c.users {
			if u != user && (oldest == "" || s.lastUsed.Before(c.users[oldest].lastUsed)) {
				oldest = u
			}
		}
		evict = c.users[oldest]
		delete(c.users, oldest)
	}
	c.mu.Unlock()
	for _, s := range []*userSession{old, evict} {
		if s != nil {
			_ = s.l.sess.Close()
		}
	}
	return us, nil
}

// ClientMetadataPath is where Hermes' HTTP listener serves the Client ID Metadata Document when
// --mcpgateway.oauth-client-metadata-url names this path.
const ClientMetadataPath = "/v1/mcp/oauth/client-metadata.json"

// CheckClientMetadataURL says whether u can be a client id metadata document's URL: HTTPS with
// a path (draft-ietf-oauth-client-id-metadata-document section 3), and it needs the redirect URL
// the document names.
func CheckClientMetadataURL(u, redirect string) error {
	if u == "" {
		return nil
	}
	pu, err := url.Parse(u)
	if err != nil || pu.Scheme != "https" || pu.Host == "" || pu.Path == "" || pu.Path == "/" || pu.Fragment != "" || pu.User != nil {
		return fmt.Errorf("--mcpgateway.oauth-client-metadata-url must be an https URL with a path, without fragment or credentials, got %q", u)
	}
	if redirect == "" {
		return errors.New("--mcpgateway.oauth-client-metadata-url needs --mcpgateway.oauth-redirect-url, the redirect URI the document names")
	}
	return nil
}

// ServesClientMetadata reports whether Hermes' HTTP listener serves the document itself: the
// configured URL's path is ClientMetadataPath.
func (c Config) ServesClientMetadata() bool {
	pu, err := url.Parse(c.OAuthClientMetadataURL)
	return c.OAuthClientMetadataURL != "" && err == nil && pu.Path == ClientMetadataPath
}

// ClientMetadataHandler serves the Client ID Metadata Document of Hermes as a public OAuth
// client: its client_id is the document's own URL, as the authorization server checks. It holds
// no secret: every field is the operator's configuration.
func ClientMetadataHandler(cfg Config) http.Handler {
	doc, _ := json.Marshal(map[string]any{
		"client_id":                  cfg.OAuthClientMetadataURL,
		"client_name":                "Hermes",
		"redirect_uris":              []string{cfg.OAuthRedirectURL},
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
		"application_type":           applicationType(cfg.OAuthRedirectURL),
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = w.Write(doc)
	})
}
