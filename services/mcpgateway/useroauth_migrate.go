package mcpgateway

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
)

// A per-user OAuth server may move to another authorization server: its protected resource
// metadata names the new one, and it refuses the old one's tokens with 401 (MCP SEP-2352). The
// gateway then discovers again, registers with the new authorization server (a client
// registration belongs to the authorization server that issued it, never shown to another),
// and each user connects again there. A stored connection keeps the endpoint it was made
// with, so its tokens only ever go to that authorization server (refresh, revocation) and to
// the MCP server; once the gateway knows the server's authorization server is another one,
// such a connection is not used any more.

// authServerWatch is what a per-user OAuth server's connection knows about its authorization
// server beyond the discovered endpoint (serverConn.oauthEP).
type authServerWatch struct {
	// stale is set when the server refused a user's token (401): the next authorization
	// discovers again instead of reusing oauthEP.
	stale atomic.Bool
	// issuer is the issuer of the last discovery ("" before the first).
	issuer atomic.Pointer[string]

	mu sync.Mutex // guards regs
	// regs are the dynamic client registrations made, by authorization server: discovering
	// again toward the same one reuses its registration instead of registering again.
	regs map[string]oauthRegistration
}

// oauthRegistration is a client registered with an authorization server.
type oauthRegistration struct {
	ClientID, ClientSecret string
	AuthStyle              oauth2.AuthStyle
}

// maxRegistrations bounds the registrations kept per server: a server whose metadata names
// ever new authorization servers drops one of those kept (any) for each new one.
const maxRegistrations = 8

func regKey(issuer, registrationEndpoint string) string {
	return issuer + "\x00" + registrationEndpoint
}

func (w *authServerWatch) registration(issuer, endpoint string) (oauthRegistration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.regs[regKey(issuer, endpoint)]
	return r, ok
}

func (w *authServerWatch) remember(issuer, endpoint string, r oauthRegistration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.regs == nil {
		w.regs = map[string]oauthRegistration{}
	}
	if _, ok := w.regs[regKey(issuer, endpoint)]; !ok && len(w.regs) >= maxRegistrations {
		for k := range w.regs { // any one: a dropped registration only costs a new one
			delete(w.regs, k)
			break
		}
	}
	w.regs[regKey(issuer, endpoint)] = r
}

// discovered records the issuer of a discovery that succeeded.
func (w *authServerWatch) discovered(issuer string) { w.issuer.Store(&issuer) }

// movedFrom reports whether a connection made with issuer belongs to an authorization server
// the server no longer names. Unknown ("" on either side, no discovery yet) is not moved:
// the server's 401 decides then.
func (w *authServerWatch) movedFrom(issuer string) bool {
	cur := w.issuer.Load()
	return cur != nil && *cur != "" && issuer != "" && issuer != *cur
}

// resourceRoot is the origin of a server's URL as a resource identifier: the protected
// resource metadata at the origin's well-known path names it (resourceMetadataURLs).
func resourceRoot(serverURL string) string {
	ru, err := url.Parse(serverURL)
	if err != nil {
		return ""
	}
	root := *ru
	root.Path, root.RawQuery = "", ""
	return root.String()
}

// madeFor reports whether conn was made for the server at serverURL: its resource (RFC 8707,
// the token's audience) is that URL or its origin, as the discovery accepts. A server
// replaced under its name by one at another URL (removed and added again, or its stored or
// file spec changed) gets none of the previous server's tokens.
func madeFor(conn *userConnection, serverURL string) bool {
	r := conn.Endpoint.Resource
	return r != "" && (r == serverURL || r == resourceRoot(serverURL))
}

// usableConn reports whether conn may carry the server's calls: made for the server's URL and
// with the authorization server it names now.
func (c *serverConn) usableConn(conn *userConnection) bool {
	return conn != nil && madeFor(conn, c.spec.GetHttp().GetUrl()) && !c.asw.movedFrom(conn.Endpoint.Issuer)
}

// sharedRefusal watches the shared session's requests: a 401 to the lent user's token ends
// that connection (as a 401 to a user's own session does, userLive) and makes the next
// authorization discover again. It sits under the oauth2.Transport, so it sees the token sent.
type sharedRefusal struct {
	base http.RoundTripper
	s    *sharedTokens
}

func (t *sharedRefusal) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(r)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		if _, tok, ok := strings.Cut(r.Header.Get("Authorization"), " "); ok && tok != "" {
			t.s.refused(tok)
		}
	}
	return resp, err
}

// refused ends the lent connection whose access token the server refused, if it is still the
// stored record (a refresh or a reconnect meanwhile stays).
func (s *sharedTokens) refused(token string) {
	c := s.c
	c.asw.stale.Store(true)
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur == nil {
		return
	}
	cur.mu.Lock()
	sealed := cur.sealed
	match := cur.conn != nil && cur.conn.Token.AccessToken == token
	cur.mu.Unlock()
	if !match || sealed == nil {
		return
	}
	ctx, cancel := context.WithTimeout(c.g.ctx, 10*time.Second)
	defer cancel()
	if deleted, err := c.g.conns.DeleteConnectionIf(ctx, c.spec.Name, cur.user, sealed); err != nil {
		c.g.log.Warn("MCP server: a refused connection was not deleted", "server", c.spec.Name, "user", cur.user, "error", err)
	} else if deleted {
		c.g.log.Info("MCP server: the server refused a user's token; they connect again", "server", c.spec.Name, "user", cur.user)
	}
	s.mu.Lock()
	if s.cur == cur {
		s.cur = nil
	}
	s.mu.Unlock()
}

// usable reports whether t's connection, just read, was made for the server's URL and with the
// authorization server the server names now (any other connection is not lent).
func (s *sharedTokens) usable(t *userTokens) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return s.c.usableConn(t.conn)
}
