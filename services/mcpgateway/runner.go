package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// progressEvery is how often a connection attempt that is still waiting says so in the log.
const progressEvery = 15 * time.Second

// isPackageRunner reports whether a stdio server is started through a package runner (npx,
// uvx, bunx, pnpm dlx, …), which on its first start downloads the package, often for longer
// than a connect timeout meant for a server that only has to start.
func isPackageRunner(st *pb.StdioTransport) bool {
	if st == nil {
		return false
	}
	name := strings.ToLower(filepath.Base(st.GetCommand()))
	for _, ext := range []string{".exe", ".cmd", ".bat"} {
		name = strings.TrimSuffix(name, ext)
	}
	args := st.GetArgs()
	first := func(words ...string) bool {
		if len(args) < len(words) {
			return false
		}
		for i, w := range words {
			if args[i] != w {
				return false
			}
		}
		return true
	}
	switch name {
	case "npx", "uvx", "bunx", "pnpx":
		return true
	case "pnpm", "yarn":
		return first("dlx")
	case "bun":
		return first("x")
	case "pipx":
		return first("run")
	case "uv":
		return first("tool", "run")
	case "npm":
		return first("exec")
	}
	return false
}

// connectTimeout is the limit of one connection attempt and the flag that sets it: the longer
// runner-start timeout until a server started through a package runner has connected once (its
// package is then cached), the connect timeout otherwise.
func (c *serverConn) connectTimeout() (time.Duration, string) {
	c.mu.Lock()
	connected := c.connectedOnce
	c.mu.Unlock()
	if !connected && isPackageRunner(c.spec.GetStdio()) && c.g.cfg.RunnerStartTimeout > c.g.cfg.ConnectTimeout {
		return c.g.cfg.RunnerStartTimeout, "--mcpgateway.runner-start-timeout"
	}
	return c.g.cfg.ConnectTimeout, "--mcpgateway.connect-timeout"
}

// reportProgress logs, every progressEvery until stop is called, that the attempt is still
// waiting, so a slow first start (a package download) is visible rather than silent.
func (c *serverConn) reportProgress(timeout time.Duration, flag string) (stop func()) {
	every := c.g.progressEvery
	if every <= 0 {
		every = progressEvery
	}
	began := time.Now()
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-c.ctx.Done():
				return
			case <-t.C:
				msg := "MCP server still starting"
				if isPackageRunner(c.spec.GetStdio()) {
					msg += " (a package runner may be downloading the package)"
				}
				c.g.log.Info(msg, "server", c.spec.GetName(), "waited", time.Since(began).Round(time.Second), "timeout", timeout, "flag", flag)
			}
		}
	}()
	return func() { close(done) }
}

// timeoutError says, for an attempt that ran out of time, how long it waited, the likely cause
// and the flag that changes the limit.
func (c *serverConn) timeoutError(ctx context.Context, err error, timeout time.Duration, flag string) error {
	if !errors.Is(ctx.Err(), context.DeadlineExceeded) || c.ctx.Err() != nil {
		return err
	}
	cause := "the server did not complete the MCP handshake"
	if isPackageRunner(c.spec.GetStdio()) {
		cause = fmt.Sprintf("%s started through %s, which may still be downloading the package", c.spec.GetStdio().GetCommand(), filepath.Base(c.spec.GetStdio().GetCommand()))
	}
	return fmt.Errorf("no connection within %s (%s; raise %s): %w", timeout, cause, flag, err)
}
