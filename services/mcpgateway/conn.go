package mcpgateway

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

const (
	// stableAfter is how long a connection must last for the backoff to start over; a server
	// that drops every connection sooner keeps backing off.
	stableAfter = time.Second
	// legacyProtocol is offered to a stdio server that exited on the server/discover probe of
	// the newest protocol (modelcontextprotocol/go-sdk#1177): the classic initialize handshake.
	legacyProtocol = "2025-11-25"
	// maxToolsPerServer bounds one server's listing.
	maxToolsPerServer = 2000
	// registryTimeout bounds one round of registrations.
	registryTimeout = 30 * time.Second
	// redacted replaces secret values (env, headers) in what ListServers returns.
	redacted = "<redacted>"
)

// serverConn supervises the connection to one MCP server: it connects, lists and registers the
// tools, watches the session (process exit, broken HTTP session, failed pings), and reconnects
// with backoff. Calls use the session only while the state is READY, so a broken server answers
// "unavailable" at once instead of hanging; a call that finds the server failed asks for an
// early reconnect (kick) and waits a moment for it.
type serverConn struct {
	g           *Gateway
	spec        *pb.ServerSpec
	filter      filter
	callTimeout time.Duration
	source      string

	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	first  chan struct{} // closed when the first attempt has ended
	once   sync.Once

	relist chan struct{} // tools/list_changed arrived
	resync chan struct{} // another server released names
	probe  chan struct{} // a call failed: check that the server still answers
	kick   chan struct{} // a call found the server failed: reconnect without waiting out the backoff

	stderr *tailBuffer

	// mu guards every field below. It is never held while talking to the server or the tool
	// service; g.mu, when both are needed, is taken first.
	mu sync.Mutex
	// connectedOnce: a handshake has succeeded (a package runner's package is cached since).
	connectedOnce bool
	// The connection: state, the live session (nil unless READY) and what it negotiated.
	state        pb.ServerState
	changed      chan struct{} // closed and replaced whenever state changes
	attempts     int           // connection attempts that have ended
	cur          *live
	lastErr      string
	protocol     string
	serverInfo   string
	instructions string
	hasRes       bool
	hasPrompts   bool
	connectedAt  time.Time
	nextRetry    time.Time
	reconnects   int
	autoPin      string
	// Listing: the last tools/list and what the gateway made of it.
	listing  []*mcp.Tool
	tasks    map[string]string // original tool name → execution.taskSupport, when not "forbidden"
	tools    map[string]*toolEntry
	skipped  []*pb.SkippedTool
	warnings []string
	// Registry sync: what the tool service holds for this server.
	regErr     string
	registered map[string]*toolsv1.ToolSpec // nil spec: found there, not yet confirmed
	seeded     bool
	// fromFile: declared in the --mcp-servers file, which every replica loads, so not stored.
	fromFile bool
	// users are the users' own sessions of a per-user OAuth server, by user id.
	users map[string]*userSession

	// shared is the token source of a per-user OAuth server's shared session.
	shared *sharedTokens
	// oauthMu guards oauthEP; held across discovery, so concurrent first calls discover once.
	oauthMu sync.Mutex
	// oauthEP is the discovered authorization server and client of a per-user OAuth server.
	oauthEP *oauthEndpoint
	// asw: the authorization server's changes (SEP-2352) and the registrations made.
	asw authServerWatch
	// enterpriseEP is the discovered endpoints of an enterprise_oauth server (guarded by oauthMu).
	enterpriseEP *enterpriseEndpoint
	// enterpriseBusy: the users whose ConnectServer with an ID token is under way (guarded by
	// mu): one at a time per user, so a user cannot have the gateway send any number of token
	// requests at once to the IdP with the operator's client.
	enterpriseBusy map[string]bool
}

// live is one connected session.
type live struct {
	sess *mcp.ClientSession
	side sideChannel
	pid  int
}

func newServerConn(g *Gateway, spec *pb.ServerSpec) *serverConn {
	ctx, cancel := context.WithCancel(g.ctx)
	timeout := g.cfg.CallTimeout
	if d := spec.GetCallTimeout(); d != nil && d.AsDuration() > 0 {
		timeout = d.AsDuration()
	}
	c := &serverConn{
		g:           g,
		spec:        spec,
		filter:      filter{include: spec.Include, exclude: spec.Exclude},
		callTimeout: timeout,
		source:      "mcp:" + spec.Name,
		ctx:         ctx,
		cancel:      cancel,
		done:        make(chan struct{}),
		first:       make(chan struct{}),
		relist:      make(chan struct{}, 1),
		resync:      make(chan struct{}, 1),
		probe:       make(chan struct{}, 1),
		kick:        make(chan struct{}, 1),
		changed:     make(chan struct{}),
		stderr:      &tailBuffer{max: 4096},
		state:       pb.ServerState_SERVER_STATE_CONNECTING,
		tools:       map[string]*toolEntry{},
		registered:  map[string]*toolsv1.ToolSpec{},
		users:       map[string]*userSession{},
	}
	c.shared = &sharedTokens{c: c}
	return c
}

func notify(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *serverConn) requestRelist() { notify(c.relist) }
func (c *serverConn) requestResync() { notify(c.resync) }
func (c *serverConn) requestProbe()  { notify(c.probe) }
func (c *serverConn) requestKick()   { notify(c.kick) }
func (c *serverConn) markFirst()     { c.once.Do(func() { close(c.first) }) }

// ready returns the live session when the server is ready, else nil and why not.
func (c *serverConn) ready() (*live, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == pb.ServerState_SERVER_STATE_READY && c.cur != nil {
		return c.cur, ""
	}
	why := strings.ToLower(strings.TrimPrefix(c.state.String(), "SERVER_STATE_"))
	if c.lastErr != "" {
		why += ": " + c.lastErr
	}
	if !c.nextRetry.IsZero() && c.state == pb.ServerState_SERVER_STATE_FAILED {
		why += fmt.Sprintf("; next attempt in %s", time.Until(c.nextRetry).Round(100*time.Millisecond))
	}
	return nil, why
}

// waitReady returns the live session, waiting up to wait for a server that is connecting or
// failed (which it asks to reconnect at once) to become ready.
func (c *serverConn) waitReady(ctx context.Context, wait time.Duration) (*live, string) {
	return c.waitNewSession(ctx, wait, nil)
}

// waitNewSession is waitReady for a session other than old, which was found broken. It stops
// waiting as soon as a connection attempt fails after it began: a server that is down answers
// "unavailable" after one attempt, not after the whole wait.
func (c *serverConn) waitNewSession(ctx context.Context, wait time.Duration, old *live) (*live, string) {
	l, why := c.ready()
	if (l != nil && l != old) || wait <= 0 {
		return l, why
	}
	c.mu.Lock()
	attempts := c.attempts
	c.mu.Unlock()
	c.requestKick()
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		c.mu.Lock()
		changed := c.changed
		failed := c.state == pb.ServerState_SERVER_STATE_FAILED && c.attempts > attempts
		c.mu.Unlock()
		if l, why = c.ready(); l != nil && l != old {
			return l, ""
		}
		if failed {
			return nil, why
		}
		select {
		case <-changed:
		case <-t.C:
			return c.ready()
		case <-ctx.Done():
			return c.ready()
		case <-c.ctx.Done():
			return c.ready()
		}
	}
}

// session returns the session when the server is ready.
func (c *serverConn) session() *mcp.ClientSession {
	if l, _ := c.ready(); l != nil {
		return l.sess
	}
	return nil
}

// setStateLocked changes the state and wakes waitReady; c.mu is held.
func (c *serverConn) setStateLocked(s pb.ServerState) {
	c.state = s
	if s != pb.ServerState_SERVER_STATE_READY {
		c.cur = nil
	}
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *serverConn) setState(s pb.ServerState, lastErr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setStateLocked(s)
	if lastErr != "" {
		c.lastErr = lastErr
	}
}

func (c *serverConn) setReady(l *live) {
	init := l.sess.InitializeResult()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setStateLocked(pb.ServerState_SERVER_STATE_READY)
	c.cur = l
	c.lastErr, c.nextRetry, c.connectedAt = "", time.Time{}, time.Now()
	c.protocol, c.serverInfo, c.instructions, c.hasRes, c.hasPrompts = "", "", "", false, false
	if init != nil {
		c.protocol = init.ProtocolVersion
		c.instructions = init.Instructions
		if si := init.ServerInfo; si != nil {
			c.serverInfo = strings.TrimSpace(si.Name + " " + si.Version)
		}
		if caps := init.Capabilities; caps != nil {
			c.hasRes, c.hasPrompts = caps.Resources != nil, caps.Prompts != nil
		}
	}
	c.g.log.Info("MCP server ready", "server", c.spec.Name, "protocol", c.protocol, "server_info", c.serverInfo, "tools", len(c.tools), "pid", l.pid)
}

func (c *serverConn) setFailed(err error, retryIn time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.setStateLocked(pb.ServerState_SERVER_STATE_FAILED)
	if err != nil {
		c.lastErr = abbreviate(err.Error(), 1000)
	}
	c.nextRetry = time.Now().Add(retryIn)
}

func (c *serverConn) pidLocked() int {
	if c.cur == nil {
		return 0
	}
	return c.cur.pid
}

// snapshot is the server as ListServers shows it, with secret values redacted.
func (c *serverConn) snapshot() *pb.Server {
	spec := proto.Clone(c.spec).(*pb.ServerSpec)
	if st := spec.GetStdio(); st != nil {
		for k := range st.Env {
			st.Env[k] = redacted
		}
	}
	if ht := spec.GetHttp(); ht != nil {
		for k := range ht.Headers {
			ht.Headers[k] = redacted
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := &pb.Server{
		Spec:            spec,
		State:           c.state,
		LastError:       c.lastErr,
		ProtocolVersion: c.protocol,
		ServerInfo:      c.serverInfo,
		HasResources:    c.hasRes,
		HasPrompts:      c.hasPrompts,
		Reconnects:      int32(c.reconnects),
		Pid:             int32(c.pidLocked()),
		SkippedTools:    slices.Clone(c.skipped),
		Warnings:        slices.Clone(c.warnings),
		Instructions:    CleanText(c.instructions, "text/plain", CleanOptions{MaxBytes: 8192, CompactJSONOver: -1}).Text,
	}
	if s.LastError == "" && c.state == pb.ServerState_SERVER_STATE_READY {
		s.LastError = c.regErr
	}
	if c.autoPin != "" && c.spec.ProtocolVersion == "" {
		s.Warnings = append(s.Warnings, "the server exited on the server/discover probe; the initialize handshake of "+c.autoPin+" is used (set protocol_version to pin it)")
	}
	if c.g.reg == nil {
		s.ToolCount = int32(len(c.tools))
	} else {
		for name := range c.tools {
			if c.registered[name] != nil {
				s.ToolCount++
			}
		}
	}
	if !c.connectedAt.IsZero() && c.state == pb.ServerState_SERVER_STATE_READY {
		s.ConnectedAt = timestamppb.New(c.connectedAt)
	}
	if !c.nextRetry.IsZero() && c.state == pb.ServerState_SERVER_STATE_FAILED {
		s.NextRetryAt = timestamppb.New(c.nextRetry)
	}
	return s
}
