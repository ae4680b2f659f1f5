package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hermes-agent/hermes/internal/backoff"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// run is the connection's supervisor loop; it returns when the server is removed or the
// gateway closes.
func (c *serverConn) run() {
	defer close(c.done)
	defer c.markFirst()
	defer c.closeUserSessions()
	attempt := 0
	for c.ctx.Err() == nil {
		c.setState(pb.ServerState_SERVER_STATE_CONNECTING, "")
		began := time.Now()
		l, err := c.open()
		openFailed := err != nil
		c.mu.Lock()
		c.attempts++
		c.mu.Unlock()
		if err == nil {
			c.setReady(l)
			c.markFirst()
			err = c.serve(l)
			if c.ctx.Err() != nil {
				c.setState(pb.ServerState_SERVER_STATE_CONNECTING, "")
				c.closeSession(l, false)
				return
			}
			c.setState(pb.ServerState_SERVER_STATE_FAILED, err.Error())
			c.closeSession(l, true)
			if time.Since(began) >= stableAfter {
				attempt = 0 // a server restarted at once is back after ReconnectMin
			}
			c.g.log.Warn("MCP server connection lost; reconnecting", "server", c.spec.Name, "error", err)
		}
		if c.ctx.Err() != nil {
			return
		}
		delay := c.backoff(attempt)
		attempt++
		if openFailed {
			c.g.log.Warn("MCP server not connected; retrying", "server", c.spec.Name, "error", err, "attempt", attempt, "retry_in", delay.Round(time.Millisecond))
		}
		c.setFailed(err, delay)
		c.markFirst()
		if !c.pause(began, delay) {
			return
		}
		c.mu.Lock()
		c.reconnects++
		c.mu.Unlock()
	}
}

// pause waits out a reconnect delay. A call that finds the server failed (kick) cuts it short,
// but attempts still start at most once per ReconnectMin. It reports false when the server is
// being removed.
func (c *serverConn) pause(lastAttempt time.Time, delay time.Duration) bool {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-c.ctx.Done():
		return false
	case <-t.C:
		return true
	case <-c.kick:
	}
	return backoff.Sleep(c.ctx, time.Until(lastAttempt.Add(c.g.cfg.ReconnectMin)))
}

// backoff is the pause before reconnect attempt n: exponential between ReconnectMin and
// ReconnectMax (HTTPReconnectMax for a Streamable HTTP server, which is cheap to probe), with
// jitter that never takes it above the maximum.
func (c *serverConn) backoff(attempt int) time.Duration {
	if c.spec.GetHttp() != nil {
		return c.g.reconnectHTTP.Delay(attempt)
	}
	return c.g.reconnect.Delay(attempt)
}

// open connects, lists the tools and registers them. A stdio server that exits during the
// newest protocol's server/discover probe is tried once more with the classic handshake.
func (c *serverConn) open() (*live, error) {
	c.mu.Lock()
	pin := c.spec.ProtocolVersion
	if pin == "" {
		pin = c.autoPin
	}
	c.mu.Unlock()
	l, err := c.connect(pin)
	if err != nil && pin == "" && c.spec.GetStdio() != nil && c.ctx.Err() == nil {
		l, err = c.connect(legacyProtocol)
		if err == nil {
			c.mu.Lock()
			c.autoPin = legacyProtocol
			c.mu.Unlock()
			c.g.log.Warn("MCP server exited on the server/discover probe; using the initialize handshake of "+legacyProtocol, "server", c.spec.Name)
		}
	}
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.g.cfg.ConnectTimeout)
	defer cancel()
	if err := c.listTools(ctx, l); err != nil {
		c.closeSession(l, true)
		return nil, err
	}
	c.applyListing()
	_ = c.syncRegistryLogged(c.ctx) // logged inside, and retried by the registry loop
	select {
	case <-c.kick: // calls made while connecting asked for this very attempt
	default:
	}
	return l, nil
}

// serve watches a ready session until it breaks or the server is removed. Pings and the
// session's end are watched here; re-listing and registration run in maintain, so a server that
// hangs in the middle of a listing is still found out by the pings.
func (c *serverConn) serve(l *live) error {
	sess := l.sess
	lost := make(chan error, 1)
	go func() { lost <- sess.Wait() }()
	sctx, stop := context.WithCancel(c.ctx)
	maintained := make(chan struct{})
	go func() {
		defer close(maintained)
		c.maintain(sctx, l)
	}()
	defer func() {
		stop()
		<-maintained
	}()
	var pingC <-chan time.Time
	if c.g.cfg.PingInterval > 0 {
		t := time.NewTicker(c.g.cfg.PingInterval)
		defer t.Stop()
		pingC = t.C
	}
	for {
		select {
		case <-c.ctx.Done():
			return c.ctx.Err()
		case err := <-lost:
			if err == nil {
				err = errors.New("the server closed the connection")
			}
			return c.withStderr(fmt.Errorf("connection lost: %w", err))
		case <-pingC:
			if !c.alive(sess) {
				return errors.New("the server stopped answering pings")
			}
		case <-c.probe:
			if !c.alive(sess) {
				return errors.New("the server stopped answering (ping after a failed call)")
			}
		}
	}
}

// maintain keeps a ready session's tools current: a debounced re-listing after
// tools/list_changed, a re-mapping when another server released names, and registration
// retries while the tool service fails.
func (c *serverConn) maintain(ctx context.Context, l *live) {
	var debounce, regRetry <-chan time.Time
	regAttempt := 0
	scheduleReg := func(err error) {
		if err == nil {
			regRetry, regAttempt = nil, 0
			return
		}
		regRetry = time.After(c.backoff(regAttempt + 1))
		regAttempt++
	}
	scheduleReg(c.registryError())
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.relist:
			if debounce == nil {
				debounce = time.After(c.g.cfg.ListDebounce)
			}
		case <-debounce:
			debounce = nil
			lctx, cancel := context.WithTimeout(ctx, c.g.cfg.ConnectTimeout)
			err := c.listTools(lctx, l)
			cancel()
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				// A dead server is found by the pings; keep the previous list meanwhile.
				c.g.log.Warn("MCP server: re-listing tools failed; keeping the previous list", "server", c.spec.Name, "error", err)
				c.requestProbe()
				continue
			}
			c.applyListing()
			scheduleReg(c.syncRegistryLogged(ctx))
		case <-c.resync:
			c.applyListing()
			scheduleReg(c.syncRegistryLogged(ctx))
		case <-regRetry:
			scheduleReg(c.syncRegistryLogged(ctx))
		}
	}
}

// alive pings the server.
func (c *serverConn) alive(sess *mcp.ClientSession) bool {
	ctx, cancel := context.WithTimeout(c.ctx, c.g.cfg.PingTimeout)
	defer cancel()
	return sess.Ping(ctx, nil) == nil
}

// closeSession ends a session. A broken one is not waited for: its process group is killed
// (it may be hung) and the SDK's graceful close, which waits for calls still in flight, runs in
// the background, so reconnecting starts at once.
//
// A healthy session (the server is being removed) gets a graceful close: stdin closed, then
// SIGTERM, then SIGKILL, as the SDK does. Calls still in flight hold that close up, so after a
// few grace periods the process group is killed and the rest happens in the background.
func (c *serverConn) closeSession(l *live, broken bool) {
	sess, pid := l.sess, l.pid
	if broken {
		killProcessGroup(pid)
	}
	closed := make(chan struct{})
	c.g.wg.Add(1)
	go func() {
		defer c.g.wg.Done()
		_ = sess.Close()
		close(closed)
	}()
	if broken {
		return
	}
	select {
	case <-closed:
	case <-time.After(4 * c.g.cfg.StopGrace):
	}
	killProcessGroup(pid) // whatever is left, including what a wrapper like npx started
}
