package mcpgateway

import (
	"github.com/hermes-agent/hermes/internal/errclass"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"

	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
)

// AddServer starts connecting to a server. With wait, it returns after the first attempt has
// succeeded or failed (or ctx ends); the server keeps being retried either way. With a store,
// the server is stored first, so every replica connects to it.
func (g *Gateway) AddServer(ctx context.Context, spec *pb.ServerSpec, wait bool) (*pb.Server, error) {
	spec = withDefaultPrefix(spec)
	g.addMu.Lock()
	// Checked before the store write, so a refused spec is never stored; connect checks again
	// with the insert.
	if err := g.checkAdd(spec); err != nil {
		g.addMu.Unlock()
		return nil, err
	}
	if g.store != nil {
		if err := g.store.CreateServer(ctx, spec); err != nil {
			g.addMu.Unlock()
			return nil, err
		}
	}
	c, err := g.connect(spec, false)
	if err != nil && g.store != nil {
		// The caller is told it was not added, so no replica may connect it either.
		if derr := g.store.DeleteServer(context.WithoutCancel(ctx), spec.GetName()); derr != nil {
			g.log.Warn("MCP server stored but not connected, and not removed from the store", "server", spec.GetName(), "error", derr)
		}
	}
	g.addMu.Unlock()
	if err != nil {
		return nil, err
	}
	if wait {
		select {
		case <-c.first:
		case <-ctx.Done():
		}
	}
	return c.snapshot(), nil
}

// withDefaultPrefix is a copy of spec whose prefix defaults to its name.
func withDefaultPrefix(spec *pb.ServerSpec) *pb.ServerSpec {
	spec = proto.Clone(spec).(*pb.ServerSpec)
	if spec.Prefix == "" {
		spec.Prefix = spec.Name
	}
	return spec
}

// checkAdd refuses a spec whose name or prefix a server of this gateway has, or one past the
// limit.
func (g *Gateway) checkAdd(spec *pb.ServerSpec) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.checkAddLocked(spec)
}

// checkAddLocked is checkAdd with g.mu held.
func (g *Gateway) checkAddLocked(spec *pb.ServerSpec) error {
	if g.closed {
		return errclass.Errorf(errclass.Unavailable, "the gateway is shutting down")
	}
	if _, ok := g.servers[spec.Name]; ok {
		return errclass.Errorf(errclass.Exists, "a server named %q exists; remove it first", spec.Name)
	}
	for _, other := range g.servers {
		if other.spec.Prefix == spec.Prefix {
			return errclass.Errorf(errclass.Exists, "prefix %q is used by server %q; choose another prefix", spec.Prefix, other.spec.Name)
		}
	}
	if len(g.servers) >= g.cfg.MaxServers {
		return errclass.Errorf(errclass.Exhausted, "%d servers are configured, the maximum (mcpgateway.max-servers)", len(g.servers))
	}
	return nil
}

// connect checks a spec and starts its connection. The check and the insert are one critical
// section, so Close either sees the new connection or refuses it.
func (g *Gateway) connect(spec *pb.ServerSpec, fromFile bool) (*serverConn, error) {
	if err := checkSpec("spec", spec); err != nil {
		return nil, err
	}
	if err := g.powers.check("spec", spec); err != nil {
		return nil, err
	}
	g.mu.Lock()
	if err := g.checkAddLocked(spec); err != nil {
		g.mu.Unlock()
		return nil, err
	}
	c := newServerConn(g, spec)
	c.fromFile = fromFile
	g.servers[spec.Name] = c
	g.mu.Unlock()
	go c.run()
	return c, nil
}

// RemoveServer disconnects a server and unregisters its tools. With a store it is deleted
// there too; the other replicas drop it at their next sync.
func (g *Gateway) RemoveServer(ctx context.Context, name string) (int, error) {
	g.addMu.Lock()
	defer g.addMu.Unlock()
	g.mu.Lock()
	c, local := g.servers[name]
	g.mu.Unlock()
	if g.store != nil && (!local || !c.fromFile) {
		err := g.store.DeleteServer(ctx, name)
		switch {
		case errors.Is(err, errclass.NotFound) && local:
		case err != nil:
			return 0, err
		}
	}
	if !local {
		if g.store != nil {
			return 0, nil
		}
		return 0, errclass.Errorf(errclass.NotFound, "no server named %q", name)
	}
	return g.disconnect(ctx, c), nil
}

// disconnect stops a local connection and unregisters its tools.
func (g *Gateway) disconnect(ctx context.Context, c *serverConn) int {
	g.mu.Lock()
	if g.servers[c.spec.Name] == c {
		delete(g.servers, c.spec.Name)
	}
	g.mu.Unlock()
	c.cancel()
	<-c.done
	removed := c.releaseAll(ctx)
	g.resyncOthers()
	return removed
}

// syncStore makes this replica's servers those of the store (plus the file's): it connects to
// stored servers it lacks, drops the ones deleted there, and reconnects the ones that changed.
func (g *Gateway) syncStore(ctx context.Context) error {
	// Listed under addMu: a server added or removed here between the list and the lock would
	// otherwise be undone until the next sync.
	g.addMu.Lock()
	defer g.addMu.Unlock()
	specs, err := g.store.ListServers(ctx)
	if err != nil {
		return err
	}
	want := map[string]*pb.ServerSpec{}
	for _, s := range specs {
		want[s.GetName()] = s
	}
	g.mu.Lock()
	local := map[string]*serverConn{}
	for name, c := range g.servers {
		local[name] = c
	}
	g.mu.Unlock()
	for name, c := range local {
		if c.fromFile {
			continue
		}
		if spec, ok := want[name]; !ok || !proto.Equal(spec, c.spec) {
			g.log.Info("MCP server removed or changed in the shared store; disconnecting", "server", name)
			g.disconnect(ctx, c)
		}
	}
	g.rejected.keep(want)
	now := time.Now()
	for name, spec := range want {
		g.mu.Lock()
		_, have := g.servers[name]
		g.mu.Unlock()
		if have || !g.rejected.due(spec, now) {
			continue
		}
		if _, err := g.connect(spec, false); err != nil {
			n, wait := g.rejected.failed(spec, now)
			g.log.Warn("stored MCP server not connected; trying again later", "server", name, "error", err, "failures", n, "retry_in", wait.Round(time.Second))
			continue
		}
		delete(g.rejected, name)
	}
	return nil
}

// resyncOthers lets servers whose tools collided with the removed server's claim them now.
func (g *Gateway) resyncOthers() {
	g.mu.Lock()
	var others []*serverConn
	for _, c := range g.servers {
		others = append(others, c)
	}
	g.mu.Unlock()
	for _, c := range others {
		if c.hasCollisions() {
			c.requestResync()
		}
	}
}

// Servers returns every server's state, by name.
func (g *Gateway) Servers() []*pb.Server {
	g.mu.Lock()
	conns := make([]*serverConn, 0, len(g.servers))
	for _, c := range g.servers {
		conns = append(conns, c)
	}
	out := make([]*pb.Server, 0, len(conns)+len(g.badFile))
	for _, b := range g.badFile {
		out = append(out, proto.Clone(b).(*pb.Server))
	}
	g.mu.Unlock()
	for _, c := range conns {
		out = append(out, c.snapshot())
	}
	slices.SortFunc(out, func(a, b *pb.Server) int { return strings.Compare(a.GetSpec().GetName(), b.GetSpec().GetName()) })
	return out
}

// Tools returns the registered tools, of one server or of all, by namespaced name.
func (g *Gateway) Tools(server string) ([]*pb.MCPTool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if server != "" {
		if _, ok := g.servers[server]; !ok {
			return nil, errclass.Errorf(errclass.NotFound, "no server named %q", server)
		}
	}
	var out []*pb.MCPTool
	for _, e := range g.tools {
		if server == "" || e.conn.spec.Name == server {
			out = append(out, e.proto())
		}
	}
	slices.SortFunc(out, func(a, b *pb.MCPTool) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// server returns a connection by name.
func (g *Gateway) server(name string) (*serverConn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.servers[name]
	if !ok {
		return nil, errclass.Errorf(errclass.NotFound, "no server named %q", name)
	}
	return c, nil
}
