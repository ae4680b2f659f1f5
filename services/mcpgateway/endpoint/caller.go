package endpoint

import (
	"context"
	"crypto/rand"
	"net/http"
	"strings"
	"sync"
	"time"

	mcpauth "github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hermes-agent/hermes/internal/auth"
)

// Caller is who an HTTP request to the endpoint comes from, as the listener authenticated and
// authorized it (app: the API key's principal and the user it acts for, scoped by the policy
// table like a user-scoped RPC's user_id).
type Caller struct {
	// Principal names the authenticated principal ("user:alice", "operator:ops", "anonymous").
	Principal string
	// User is the user the calls run for: a user key's own user, or the one an operator or a
	// service named; empty for none. It becomes ExecuteToolRequest.user_id, so a server with
	// per-user OAuth is called with this user's own connection.
	User string
}

type callerKey struct{}

// Authenticated protects the endpoint's HTTP handler with the API keys and the policy table's
// entry for the endpoint: auth.MCPEndpointMethod (operators and services, acting for the user
// the X-Hermes-User-Id header names, or none), or, when the operator lets user keys in
// (Config.UserKeys), auth.MCPEndpointUsersMethod (every principal; a user key acts as its own
// user, and naming another is refused with 403). Tool calls of the request run for that user
// (WithCaller).
func Authenticated(authn *auth.Authenticator, userKeys bool, next http.Handler) http.Handler {
	method := auth.MCPEndpointMethod
	if userKeys {
		method = auth.MCPEndpointUsersMethod
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, user, err := authn.AuthorizeHTTPUser(r, method)
		if err != nil {
			auth.WriteHTTPError(w, err)
			return
		}
		ctx := WithCaller(auth.NewContext(r.Context(), p), Caller{Principal: p.Name, User: user})
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// WithCaller returns ctx carrying the caller of an HTTP request, for HTTPHandler.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// sessionKey identifies the caller a session belongs to: the principal and the user it acts for.
func (c Caller) sessionKey() string {
	p := c.Principal
	if p == "" {
		p = "anonymous"
	}
	return p + "\x00" + c.User
}

// sessionOwners remembers which caller started each session, to cap the sessions per caller.
// A place is reserved (reserve) before the session is created and kept until the request that
// creates it ends, so concurrent initialize requests of one caller cannot all pass the count
// before any of their sessions is recorded.
type sessionOwners struct {
	mu       sync.Mutex
	m        map[string]string // guarded by mu: session id → Caller.sessionKey
	starting map[string]int    // guarded by mu: Caller.sessionKey → requests creating a session
}

// refusal says why reserve refused a place.
type refusal int

const (
	placeFree      refusal = iota
	callerIsFull           // the caller has its maximum of sessions
	endpointIsFull         // the endpoint has its maximum of sessions
)

// reserve holds a place for one more session of key unless key has maxPerCaller sessions (0:
// no cap), or the endpoint maxAll, live or being created. release, called once when the
// request ends, frees the place and records the session it created (id; "" for none).
//
// The live sessions are read under mu: read before it, a session recorded meanwhile by another
// request would look ended and be forgotten, and never counted again. Counting the sessions
// being created too keeps simultaneous initialize requests from all passing either count.
func (o *sessionOwners) reserve(key string, srv *mcp.Server, maxPerCaller, maxAll int) (release func(id string), why refusal) {
	o.mu.Lock()
	defer o.mu.Unlock()
	live := map[string]bool{}
	for ss := range srv.Sessions() {
		live[ss.ID()] = true
	}
	// Every session is made by a request that reserved a place: it is counted in starting
	// until that request records it in m (a live session already made but not yet recorded is
	// counted once, as starting).
	n, all := o.starting[key], 0
	for _, c := range o.starting {
		all += c
	}
	for id, k := range o.m {
		if !live[id] {
			delete(o.m, id) // ended: the SDK closes idle sessions and those a client deletes
			continue
		}
		all++
		if k == key {
			n++
		}
	}
	switch {
	case all >= maxAll:
		return nil, endpointIsFull
	case maxPerCaller > 0 && n >= maxPerCaller:
		return nil, callerIsFull
	}
	if o.starting == nil {
		o.starting = map[string]int{}
	}
	o.starting[key]++
	return func(id string) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.starting[key]--; o.starting[key] <= 0 {
			delete(o.starting, key)
		}
		if id != "" {
			if o.m == nil {
				o.m = map[string]string{}
			}
			o.m[id] = key
		}
	}, placeFree
}

// callerExtraKey is where the caller's user travels in the SDK's TokenInfo.Extra.
const callerExtraKey = "hermes.user"

// bindCaller hands the request's Caller to the SDK as its TokenInfo. The SDK binds a session to
// the TokenInfo.UserID it was created with and refuses (403 "session user mismatch") a request
// of that session from anyone else, so a session id that leaks does not let another principal
// act as its owner; and every request's handler reads the caller from its own request
// (RequestExtra.TokenInfo), never from a header or an argument the client chose.
//
// The SDK lets only its RequireBearerToken middleware put a TokenInfo in a request's context, and
// that middleware wants an "Authorization: Bearer" header; the listener has already
// authenticated the request (with that header, X-Api-Key, or nothing when keys are off), so the
// verifier ignores the token it is given and answers with the Caller. A request without a bearer
// header gets a placeholder one for the middleware to find.
func bindCaller(next http.Handler) http.Handler {
	verify := func(_ context.Context, _ string, r *http.Request) (*mcpauth.TokenInfo, error) {
		c, _ := r.Context().Value(callerKey{}).(Caller)
		// The session key names both, so an operator's session for alice is not one for bob.
		return &mcpauth.TokenInfo{UserID: c.sessionKey(), Expiration: time.Now().Add(time.Hour),
			Extra: map[string]any{callerExtraKey: c.User}}, nil
	}
	mw := mcpauth.RequireBearerToken(verify, nil)(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hasBearer(r) {
			r = r.Clone(r.Context())
			r.Header.Set("Authorization", "Bearer authenticated-by-listener")
		}
		mw.ServeHTTP(w, r)
	})
}

// hasBearer reports whether the SDK's middleware finds a bearer token in r, as it reads one.
func hasBearer(r *http.Request) bool {
	f := strings.Fields(r.Header.Get("Authorization"))
	return len(f) == 2 && strings.EqualFold(f[0], "bearer")
}

// callUser is the user a tool call runs for: the caller bound to the request, "" over stdio and
// without a caller.
func callUser(req *mcp.CallToolRequest) string {
	if req.Extra == nil || req.Extra.TokenInfo == nil {
		return ""
	}
	u, _ := req.Extra.TokenInfo.Extra[callerExtraKey].(string)
	return u
}

// Limits of the URL elicitations the endpoint remembers, to announce their completion.
const (
	// maxPendingElicitations bounds the URL elicitations waiting for an account connection,
	// over all sessions; the oldest is forgotten beyond (its client can still call again).
	maxPendingElicitations = 10000
	// pendingElicitationTTL is how long one waits: the gateway's authorization state lives 10
	// minutes, so a link is useless after that.
	pendingElicitationTTL = 10 * time.Minute
)

// pendingElicitation is a URL elicitation sent to a session: when the user connects their
// account on the server, the session is told (notifications/elicitation/complete).
type pendingElicitation struct {
	user, server string
	sessionID    string
	id           string
	expires      time.Time
}

// elicitations are the URL elicitations the endpoint sent and has not yet seen completed.
type elicitations struct {
	mu      sync.Mutex
	pending []pendingElicitation // guarded by mu; oldest first
}

// add remembers p in place of the session's earlier elicitation for the same user and server
// (the gateway's newer link replaced that one's), so one session calling again and again holds
// one entry and cannot push the other users' out.
func (e *elicitations) add(p pendingElicitation) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropExpired(time.Now())
	kept := e.pending[:0]
	for _, q := range e.pending {
		if q.sessionID != p.sessionID || q.user != p.user || q.server != p.server {
			kept = append(kept, q)
		}
	}
	clear(e.pending[len(kept):])
	e.pending = kept
	if len(e.pending) >= maxPendingElicitations {
		e.pending = e.pending[1:]
	}
	e.pending = append(e.pending, p)
}

// take removes and returns the pending elicitations of user on server.
func (e *elicitations) take(user, server string) []pendingElicitation {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	e.dropExpired(now)
	var out []pendingElicitation
	kept := e.pending[:0]
	for _, p := range e.pending {
		if p.user == user && p.server == server {
			out = append(out, p)
			continue
		}
		kept = append(kept, p)
	}
	clear(e.pending[len(kept):])
	e.pending = kept
	return out
}

func (e *elicitations) dropExpired(now time.Time) {
	n := 0
	for n < len(e.pending) && now.After(e.pending[n].expires) {
		n++
	}
	if n > 0 {
		e.pending = append(e.pending[:0], e.pending[n:]...)
	}
}

// supportsURLElicitation reports whether the client declared elicitation.url at initialize.
func supportsURLElicitation(ss *mcp.ServerSession) bool {
	if ss == nil {
		return false
	}
	ip := ss.InitializeParams()
	return ip != nil && ip.Capabilities != nil && ip.Capabilities.Elicitation != nil && ip.Capabilities.Elicitation.URL != nil
}

// authorizationRequired answers a call that needs the user to connect an account on an MCP
// server with per-user OAuth, for a client that declared URL-mode elicitation: the JSON-RPC error
// URLElicitationRequired (-32042) carrying one URL elicitation with the authorization link.
//
// MCP 2025-11-25 offers two ways: an elicitation/create request (mode "url") made while the
// call waits, or this error, which ends the call. The specification gives this error for a
// request that cannot be processed until the elicitation is completed (its example is a tool
// that needs third-party authorization), and the client retries the request once it has seen
// notifications/elicitation/complete. That fits here: the call cannot run without the user's
// token, and a sign-in at a provider takes minutes, which a waiting call would spend holding
// the tool service's timeout and the session's request. The link goes only to this session,
// which belongs to the user the link is for (bindCaller); the completion is announced to the
// sessions of that user alone (UserConnected).
func (s *Server) authorizationRequired(req *mcp.CallToolRequest, user, server, link, message string) error {
	id := rand.Text()
	if server != "" && user != "" {
		s.pending.add(pendingElicitation{user: user, server: server, sessionID: req.Session.ID(), id: id, expires: time.Now().Add(pendingElicitationTTL)})
	}
	return mcp.URLElicitationRequiredError([]*mcp.ElicitParams{{Mode: "url", Message: message, URL: link, ElicitationID: id}})
}

// UserConnected tells the sessions that were sent a URL elicitation for user's account on
// server that the user has connected it (notifications/elicitation/complete), so their clients
// can call again. The gateway calls it when its OAuth callback stores a connection; with NATS,
// a callback on another replica reaches it too (app wires Names.AccountConnected).
func (s *Server) UserConnected(ctx context.Context, user, server string) {
	done := s.pending.take(user, server)
	if len(done) == 0 {
		return
	}
	// A stream that does not take the notification does not hold the caller long.
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	sessions := map[string]*mcp.ServerSession{}
	for ss := range s.server.Sessions() {
		sessions[ss.ID()] = ss
	}
	for _, p := range done {
		ss := sessions[p.sessionID]
		if ss == nil {
			continue
		}
		if err := ss.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: p.id}); err != nil {
			s.log.Debug("MCP endpoint: elicitation completion not sent", "server", server, "error", err)
		}
	}
}
