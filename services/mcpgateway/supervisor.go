package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// run is the connection's supervisor loop; it returns when the server is removed or the
// gateway closes.
func (c *serverConn) run() {
	defer close(c.done)
	defer c.markFirst()
	attempt := 0
	for c.ctx.Err() == nil {
		c.setState(pb.ServerState_SERVER_STATE_CONNECTING, "")
		sess, pid, err := c.open()
		if err == nil {
			c.setReady(sess, pid)
			c.markFirst()
			began := time.Now()
			err = c.serve(sess)
			if c.ctx.Err() != nil {
				c.setState(pb.ServerState_SERVER_STATE_CONNECTING, "")
				c.closeSession(sess, pid, false)
				return
			}
			c.setState(pb.ServerState_SERVER_STATE_FAILED, err.Error())
			c.closeSession(sess, pid, true)
			if time.Since(began) >= stableAfter {
				attempt = 0
			}
			c.g.log.Warn("MCP server connection lost; reconnecting", "server", c.spec.Name, "error", err)
		}
		if c.ctx.Err() != nil {
			return
		}
		delay := c.backoff(attempt)
		attempt++
		c.setFailed(err, delay)
		c.markFirst()
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(delay):
		}
		c.mu.Lock()
		c.reconnects++
		c.mu.Unlock()
	}
}

// backoff is exponential with ±20% jitter, between ReconnectMin and ReconnectMax.
func (c *serverConn) backoff(attempt int) time.Duration {
	d := c.g.cfg.ReconnectMin
	for range min(attempt, 30) {
		d *= 2
		if d >= c.g.cfg.ReconnectMax {
			d = c.g.cfg.ReconnectMax
			break
		}
	}
	jitter := time.Duration(rand.Int64N(int64(d)/5+1)) - d/10
	return max(d+jitter, time.Millisecond)
}

// open connects, lists the tools and registers them. A stdio server that exits during the
// newest protocol's server/discover probe is tried once more with the classic handshake.
func (c *serverConn) open() (*mcp.ClientSession, int, error) {
	c.mu.Lock()
	pin := c.spec.ProtocolVersion
	if pin == "" {
		pin = c.autoPin
	}
	c.mu.Unlock()
	sess, pid, err := c.connect(pin)
	if err != nil && pin == "" && c.spec.GetStdio() != nil && c.ctx.Err() == nil {
		sess, pid, err = c.connect(legacyProtocol)
		if err == nil {
			c.mu.Lock()
			c.autoPin = legacyProtocol
			c.mu.Unlock()
			c.g.log.Warn("MCP server exited on the server/discover probe; using the initialize handshake of "+legacyProtocol, "server", c.spec.Name)
		}
	}
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.g.cfg.ConnectTimeout)
	defer cancel()
	if err := c.listTools(ctx, sess); err != nil {
		c.closeSession(sess, pid, true)
		return nil, 0, err
	}
	c.applyListing()
	c.syncRegistryLogged(c.ctx)
	return sess, pid, nil
}

// serve watches a ready session until it breaks or the server is removed. Pings and the
// session's end are watched here; re-listing and registration run in maintain, so a server that
// hangs in the middle of a listing is still found out by the pings.
func (c *serverConn) serve(sess *mcp.ClientSession) error {
	lost := make(chan error, 1)
	go func() { lost <- sess.Wait() }()
	sctx, stop := context.WithCancel(c.ctx)
	maintained := make(chan struct{})
	go func() {
		defer close(maintained)
		c.maintain(sctx, sess)
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
func (c *serverConn) maintain(ctx context.Context, sess *mcp.ClientSession) {
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
			err := c.listTools(lctx, sess)
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
func (c *serverConn) closeSession(sess *mcp.ClientSession, pid int, broken bool) {
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
