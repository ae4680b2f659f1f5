package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

func (c *serverConn) syncRegistryLogged(ctx context.Context) error {
	err := c.syncRegistry(ctx)
	if err != nil {
		c.g.log.Warn("MCP tools not (all) registered in the tool service; retrying", "server", c.spec.Name, "error", err)
	}
	return err
}

func (c *serverConn) registryError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.regErr != "" {
		return errors.New(c.regErr)
	}
	return nil
}

// syncRegistry makes the tool service hold exactly this server's claimed tools: new and
// changed ones registered, vanished ones unregistered. A name the tool service already has
// from another source is reported as a collision and left alone.
func (c *serverConn) syncRegistry(ctx context.Context) error {
	reg := c.g.reg
	if reg == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, registryTimeout)
	defer cancel()
	var errs []error
	c.mu.Lock()
	seeded := c.seeded
	c.mu.Unlock()
	if !seeded {
		// What an earlier run of the gateway registered for this server, so stale names go.
		existing, err := reg.BySource(ctx, c.source)
		if err != nil {
			return c.setRegErr(err)
		}
		c.mu.Lock()
		for name, src := range existing {
			if _, ok := c.registered[name]; !ok && src == c.source {
				c.registered[name] = nil
			}
		}
		c.seeded = true
		c.mu.Unlock()
	}
	c.mu.Lock()
	desired := make(map[string]*toolEntry, len(c.tools))
	for k, v := range c.tools {
		desired[k] = v
	}
	registered := make(map[string]*toolsv1.ToolSpec, len(c.registered))
	for k, v := range c.registered {
		registered[k] = v
	}
	c.mu.Unlock()
	names := make([]string, 0, len(desired))
	for n := range desired {
		names = append(names, n)
	}
	sort.Strings(names)
	// Names this server has not registered yet may belong to another source: one listing of the
	// tool service answers that for all of them (a GetTool per name would log an expected
	// NotFound for each).
	var others map[string]string
	for _, name := range names {
		if _, known := registered[name]; !known {
			all, err := reg.BySource(ctx, "")
			if err != nil {
				return c.setRegErr(err)
			}
			others = all
			break
		}
	}
	for _, name := range names {
		e := desired[name]
		prev, known := registered[name]
		if known && prev != nil && proto.Equal(prev, e.spec) {
			continue
		}
		if !known {
			if src, found := others[name]; found && src != c.source {
				c.drop(e, fmt.Sprintf("the tool service already has a tool %s from %s", name, src))
				continue
			}
		}
		err := reg.Register(ctx, e.spec, c.source)
		switch {
		case errors.Is(err, errConflict), errors.Is(err, errRefused):
			c.drop(e, "the tool service refused it: "+err.Error())
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		}
		c.mu.Lock()
		c.registered[name] = e.spec
		c.mu.Unlock()
	}
	for name := range registered {
		if _, ok := desired[name]; ok {
			continue
		}
		if err := reg.Unregister(ctx, name, c.source); err != nil {
			errs = append(errs, err)
			continue
		}
		c.mu.Lock()
		delete(c.registered, name)
		c.mu.Unlock()
	}
	return c.setRegErr(errors.Join(errs...))
}

func (c *serverConn) setRegErr(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.regErr = ""
	if err != nil {
		c.regErr = "tool service: " + abbreviate(err.Error(), 500)
	}
	return err
}

// drop releases a claimed tool that cannot be registered and reports why.
func (c *serverConn) drop(e *toolEntry, reason string) {
	g := c.g
	g.mu.Lock()
	if g.tools[e.name] == e {
		delete(g.tools, e.name)
	}
	g.mu.Unlock()
	c.mu.Lock()
	if c.tools[e.name] == e {
		delete(c.tools, e.name)
	}
	c.skipped = append(c.skipped, &pb.SkippedTool{OriginalName: e.original, Name: e.name, Reason: reason})
	c.mu.Unlock()
}

// releaseAll gives up every name and unregisters the tools; run after the server is removed.
func (c *serverConn) releaseAll(ctx context.Context) int {
	g := c.g
	g.mu.Lock()
	c.mu.Lock()
	for name, e := range c.tools {
		if g.tools[name] == e {
			delete(g.tools, name)
		}
	}
	n := len(c.tools)
	c.tools = map[string]*toolEntry{}
	registered := c.registered
	c.registered = map[string]*toolsv1.ToolSpec{}
	c.mu.Unlock()
	g.mu.Unlock()
	if g.reg == nil {
		return n
	}
	removed := 0
	for name := range registered {
		if err := g.reg.Unregister(ctx, name, c.source); err != nil {
			g.log.Warn("unregistering a removed MCP server's tool failed; it stays in the tool service until the next start prunes it", "tool", name, "error", err)
			continue
		}
		removed++
	}
	return removed
}

func (c *serverConn) hasCollisions() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.skipped {
		if strings.Contains(s.Reason, "collides with") {
			return true
		}
	}
	return false
}
