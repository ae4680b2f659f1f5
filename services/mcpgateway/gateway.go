// Package mcpgateway is the only part of Hermes that speaks MCP. It keeps one supervised
// connection per MCP server (stdio or Streamable HTTP, through the official Go SDK), gives the
// discovered tools namespaced names, registers them in the tool service, calls them with an
// absolute timeout and normalizes their results to {success, output}, serves resources and
// prompts as cleaned text, and serves Hermes' own tools as an MCP server.
package mcpgateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// Options configure a Gateway.
type Options struct {
	Config Config
	Logger *slog.Logger
	// Registry receives the discovered tools; nil registers them nowhere (the gateway's own
	// RPCs still work).
	Registry Registry
	// Getenv reads the gateway's environment (bearer tokens, PATH and HOME for stdio servers);
	// nil means os.Getenv.
	Getenv func(string) string
	// Version is reported to MCP servers as the client version.
	Version string
	// Store shares the servers added with AddServer between replicas and across restarts; nil
	// keeps them in this process only.
	Store ServerStore
}

// Gateway holds the MCP server connections.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	reg     Registry
	getenv  func(string) string
	version string
	store   ServerStore

	// addMu orders AddServer, RemoveServer and the store sync, so a server being added here is
	// not also picked up from the store half-way.
	addMu sync.Mutex

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	servers map[string]*serverConn
	tools   map[string]*toolEntry // namespaced name → tool, across servers
	closed  bool
}

// New returns a Gateway with no servers; Close disconnects everything.
func New(opts Options) *Gateway {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Gateway{
		cfg:     opts.Config.withDefaults(),
		log:     log,
		reg:     opts.Registry,
		store:   opts.Store,
		getenv:  getenv,
		version: cmp.Or(opts.Version, "dev"),
		ctx:     ctx,
		cancel:  cancel,
		servers: map[string]*serverConn{},
		tools:   map[string]*toolEntry{},
	}
}

// Close disconnects every server and stops their processes. Registered tools stay in the tool
// service, so a restart with the same servers changes nothing there.
func (g *Gateway) Close() {
	g.mu.Lock()
	g.closed = true
	conns := make([]*serverConn, 0, len(g.servers))
	for _, c := range g.servers {
		conns = append(conns, c)
	}
	g.mu.Unlock()
	g.cancel()
	for _, c := range conns {
		<-c.done
	}
	g.wg.Wait()
}

// errNotFound and friends are mapped to gRPC codes by the server.
var (
	errNotFound      = errors.New("not found")
	errAlreadyExists = errors.New("already exists")
	errExhausted     = errors.New("limit reached")
	errUnavailable   = errors.New("unavailable")
	errPrecondition  = errors.New("failed precondition")
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
		return fmt.Errorf("%w: the gateway is shutting down", errUnavailable)
	}
	if _, ok := g.servers[spec.Name]; ok {
		return fmt.Errorf("%w: a server named %q exists; remove it first", errAlreadyExists, spec.Name)
	}
	for _, other := range g.servers {
		if other.spec.Prefix == spec.Prefix {
			return fmt.Errorf("%w: prefix %q is used by server %q; choose another prefix", errAlreadyExists, spec.Prefix, other.spec.Name)
		}
	}
	if len(g.servers) >= g.cfg.MaxServers {
		return fmt.Errorf("%w: %d servers are configured, the maximum (mcpgateway.max-servers)", errExhausted, len(g.servers))
	}
	return nil
}

// connect checks a spec and starts its connection. The check and the insert are one critical
// section, so Close either sees the new connection or refuses it.
func (g *Gateway) connect(spec *pb.ServerSpec, fromFile bool) (*serverConn, error) {
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
		case errors.Is(err, errNotFound) && local:
		case err != nil:
			return 0, err
		}
	}
	if !local {
		if g.store != nil {
			return 0, nil
		}
		return 0, fmt.Errorf("%w: no server named %q", errNotFound, name)
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
	for name, spec := range want {
		g.mu.Lock()
		_, have := g.servers[name]
		g.mu.Unlock()
		if have {
			continue
		}
		if _, err := g.connect(spec, false); err != nil {
			g.log.Warn("stored MCP server not connected", "server", name, "error", err)
		}
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
	g.mu.Unlock()
	out := make([]*pb.Server, 0, len(conns))
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
			return nil, fmt.Errorf("%w: no server named %q", errNotFound, server)
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

// lookup finds a tool by namespaced name, or by server and original name.
func (g *Gateway) lookup(name, server, tool string) *toolEntry {
	g.mu.Lock()
	defer g.mu.Unlock()
	if name != "" {
		return g.tools[name]
	}
	for _, e := range g.tools {
		if e.conn.spec.Name == server && e.original == tool {
			return e
		}
	}
	return nil
}

// server returns a connection by name.
func (g *Gateway) server(name string) (*serverConn, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.servers[name]
	if !ok {
		return nil, fmt.Errorf("%w: no server named %q", errNotFound, name)
	}
	return c, nil
}

// CallTool calls a tool and normalizes its result. A call that cannot reach the tool (server
// not connected, connection broken, timeout) is a response with success=false and an error
// code, not an error: the tool service passes it to the model like any failed tool. The error
// return is for a caller that gave up (its context ended) and for invalid arguments.
func (g *Gateway) CallTool(ctx context.Context, req *pb.CallToolRequest) (*pb.CallToolResponse, error) {
	ctx, span := tracer.Start(ctx, "mcp tools/call", trace.WithAttributes(
		attribute.String("mcp.tool", req.GetName()),
		attribute.String("mcp.server", req.GetServer()),
		attribute.String("mcp.original_tool", req.GetTool()),
	))
	defer span.End()
	start := time.Now()
	resp, err := g.callTool(ctx, req)
	if resp != nil {
		resp.Duration = durationpb.New(time.Since(start))
		span.SetAttributes(attribute.Bool("mcp.success", resp.GetSuccess()), attribute.String("mcp.error_code", resp.GetErrorCode()))
		if !resp.GetSuccess() {
			span.SetStatus(otelcodes.Error, resp.GetErrorCode())
		}
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(otelcodes.Error, err.Error())
	}
	return resp, err
}

var tracer = otel.Tracer("github.com/hermes-agent/hermes/services/mcpgateway")

func (g *Gateway) callTool(ctx context.Context, req *pb.CallToolRequest) (*pb.CallToolResponse, error) {
	e := g.lookup(req.GetName(), req.GetServer(), req.GetTool())
	if e == nil {
		what := req.GetName()
		if what == "" {
			what = req.GetServer() + "/" + req.GetTool()
		}
		return failed(codeUnknownTool, fmt.Sprintf("no MCP tool %q is known to the gateway; MCPGatewayService.ListTools lists the tools it has", what)), nil
	}
	args := json.RawMessage(strings.TrimSpace(req.GetArguments()))
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	c := e.conn
	sess, why := c.readySession()
	if sess == nil {
		return failed(codeUnavailable, fmt.Sprintf("MCP server %q is not connected (%s); it is reconnected automatically, try again shortly", c.spec.Name, why)), nil
	}
	timeout := c.callTimeout
	if d := req.GetTimeout(); d != nil && d.AsDuration() > 0 && d.AsDuration() < timeout {
		timeout = d.AsDuration()
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := sess.CallTool(cctx, &mcp.CallToolParams{Name: e.original, Arguments: args})
	if err == nil {
		return normalizeResult(res, e.outSchema, g.cfg.cleanOptions()), nil
	}
	switch {
	case ctx.Err() != nil:
		// The caller gave up; the SDK has told the server to cancel the request.
		return nil, status.FromContextError(ctx.Err()).Err()
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		c.requestProbe()
		return failed(codeTimeout, fmt.Sprintf("the MCP tool %s did not answer within %s; the call was cancelled on the server", e.name, timeout)), nil
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) && !errors.Is(err, mcp.ErrConnectionClosed) && c.alive(sess) {
		return failed(codeRejected, fmt.Sprintf("MCP server %q rejected the call: %s", c.spec.Name, abbreviate(rpcErr.Message, 2000))), nil
	}
	c.requestProbe()
	return failed(codeUnavailable, fmt.Sprintf("the connection to MCP server %q broke during the call (%s); it is reconnected automatically, try again shortly", c.spec.Name, abbreviate(err.Error(), 500))), nil
}

func failed(code, msg string) *pb.CallToolResponse {
	return &pb.CallToolResponse{Success: false, ErrorCode: code, Output: msg}
}

// session returns a server's session for resources and prompts, checking that the server
// declares the capability.
func (g *Gateway) session(name string, capability func(*mcp.ServerCapabilities) bool, what string) (*mcp.ClientSession, error) {
	c, err := g.server(name)
	if err != nil {
		return nil, err
	}
	sess, why := c.readySession()
	if sess == nil {
		return nil, fmt.Errorf("%w: MCP server %q is not connected (%s); try again shortly", errUnavailable, name, why)
	}
	caps := sess.InitializeResult().Capabilities
	if caps == nil || !capability(caps) {
		return nil, fmt.Errorf("%w: MCP server %q does not declare %s", errPrecondition, name, what)
	}
	return sess, nil
}

func hasResources(c *mcp.ServerCapabilities) bool { return c.Resources != nil }
func hasPrompts(c *mcp.ServerCapabilities) bool   { return c.Prompts != nil }

// callErr maps an MCP request failure (not a tool call) to an error for the gRPC boundary.
func (g *Gateway) callErr(ctx context.Context, server string, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	var rpcErr *jsonrpc.Error
	if errors.As(err, &rpcErr) && !errors.Is(err, mcp.ErrConnectionClosed) {
		// Servers answer an unknown resource or prompt with -32602 (invalid params, SEP-2164).
		code := codes.FailedPrecondition
		if rpcErr.Code == jsonrpc.CodeInvalidParams {
			code = codes.NotFound
		}
		return status.Errorf(code, "MCP server %q: %s", server, abbreviate(rpcErr.Message, 2000))
	}
	if c, cerr := g.server(server); cerr == nil {
		c.requestProbe()
	}
	return status.Errorf(codes.Unavailable, "MCP server %q: %s", server, abbreviate(err.Error(), 500))
}

// ListResources lists a server's resources.
func (g *Gateway) ListResources(ctx context.Context, server, cursor string) (*pb.ListResourcesResponse, error) {
	sess, err := g.session(server, hasResources, "resources")
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	res, err := sess.ListResources(cctx, &mcp.ListResourcesParams{Cursor: cursor})
	if err != nil {
		return nil, g.callErr(ctx, server, err)
	}
	out := &pb.ListResourcesResponse{NextCursor: res.NextCursor}
	plain := CleanOptions{MaxBytes: 2048, CompactJSONOver: -1}
	for _, r := range res.Resources {
		out.Resources = append(out.Resources, &pb.Resource{
			Uri:         r.URI,
			Name:        CleanText(r.Name, "text/plain", plain).Text,
			Description: CleanText(r.Description, "text/plain", plain).Text,
			MimeType:    r.MIMEType,
			Size:        r.Size,
		})
	}
	return out, nil
}

// ReadResource reads a resource, cleaning its text.
func (g *Gateway) ReadResource(ctx context.Context, server, uri string) (*pb.ReadResourceResponse, error) {
	sess, err := g.session(server, hasResources, "resources")
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	res, err := sess.ReadResource(cctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil {
		return nil, g.callErr(ctx, server, err)
	}
	out := &pb.ReadResourceResponse{}
	for _, rc := range res.Contents {
		if rc == nil {
			continue
		}
		c := &pb.ResourceContent{Uri: rc.URI, MimeType: rc.MIMEType}
		if rc.Blob != nil {
			c.BlobSize = int64(len(rc.Blob))
			c.Text = describeContent(&pb.Content{Type: "blob", Uri: rc.URI, MimeType: rc.MIMEType, Size: c.BlobSize})
		} else {
			cl := CleanText(rc.Text, rc.MIMEType, g.cfg.cleanOptions())
			c.Text, c.Truncated, c.RemovedChars = cl.Text, cl.Truncated, cl.Removed
		}
		out.Contents = append(out.Contents, c)
	}
	return out, nil
}

// ListPrompts lists a server's prompts.
func (g *Gateway) ListPrompts(ctx context.Context, server, cursor string) (*pb.ListPromptsResponse, error) {
	sess, err := g.session(server, hasPrompts, "prompts")
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	res, err := sess.ListPrompts(cctx, &mcp.ListPromptsParams{Cursor: cursor})
	if err != nil {
		return nil, g.callErr(ctx, server, err)
	}
	plain := CleanOptions{MaxBytes: 2048, CompactJSONOver: -1}
	out := &pb.ListPromptsResponse{NextCursor: res.NextCursor}
	for _, p := range res.Prompts {
		pp := &pb.Prompt{Name: p.Name, Description: CleanText(p.Description, "text/plain", plain).Text}
		for _, a := range p.Arguments {
			pp.Arguments = append(pp.Arguments, &pb.PromptArgument{Name: a.Name, Description: CleanText(a.Description, "text/plain", plain).Text, Required: a.Required})
		}
		out.Prompts = append(out.Prompts, pp)
	}
	return out, nil
}

// GetPrompt renders a prompt, cleaning its messages.
func (g *Gateway) GetPrompt(ctx context.Context, server, name string, args map[string]string) (*pb.GetPromptResponse, error) {
	sess, err := g.session(server, hasPrompts, "prompts")
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, g.cfg.CallTimeout)
	defer cancel()
	res, err := sess.GetPrompt(cctx, &mcp.GetPromptParams{Name: name, Arguments: args})
	if err != nil {
		return nil, g.callErr(ctx, server, err)
	}
	opts := g.cfg.cleanOptions()
	out := &pb.GetPromptResponse{Description: CleanText(res.Description, "text/plain", CleanOptions{MaxBytes: 2048, CompactJSONOver: -1}).Text}
	for _, m := range res.Messages {
		if m == nil {
			continue
		}
		var text string
		switch v := m.Content.(type) {
		case *mcp.TextContent:
			text = CleanText(v.Text, "", opts).Text
		default:
			r := normalizeResult(&mcp.CallToolResult{Content: []mcp.Content{m.Content}}, nil, opts)
			for _, d := range r.Contents {
				text = describeContent(d)
			}
		}
		out.Messages = append(out.Messages, &pb.PromptMessage{Role: string(m.Role), Text: text})
	}
	return out, nil
}

// Start connects the servers of the configured mcpServers file and, when enabled, prunes tool
// registrations left behind by servers the gateway no longer has. Servers connect in the
// background; a server that cannot connect is retried and does not fail Start.
func (g *Gateway) Start() error {
	if g.cfg.ServersFile != "" {
		specs, err := LoadServersFile(g.cfg.ServersFile, g.getenv)
		if err != nil {
			return err
		}
		for _, spec := range specs {
			if _, err := g.connect(withDefaultPrefix(spec), true); err != nil {
				return fmt.Errorf("MCP servers file %s: server %q: %w", g.cfg.ServersFile, spec.Name, err)
			}
		}
		g.log.Info("MCP servers from file", "file", g.cfg.ServersFile, "servers", len(specs))
	}
	if g.store != nil {
		ctx, cancel := context.WithTimeout(g.ctx, registryTimeout)
		err := g.syncStore(ctx)
		cancel()
		if err != nil {
			return fmt.Errorf("stored MCP servers: %w", err)
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			t := time.NewTicker(g.cfg.SyncInterval)
			defer t.Stop()
			for {
				select {
				case <-g.ctx.Done():
					return
				case <-t.C:
				}
				ctx, cancel := context.WithTimeout(g.ctx, registryTimeout)
				if err := g.syncStore(ctx); err != nil {
					g.log.Debug("MCP server store sync failed; retrying", "error", err)
				}
				cancel()
			}
		}()
	}
	if g.reg != nil && g.cfg.PruneStale {
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			g.prune()
		}()
	}
	return nil
}

// prune unregisters, once the tool service answers, the MCP tools whose server the gateway does
// not have (added at run time before a restart, or removed from the file). It retries with
// backoff until it succeeds or the gateway closes.
func (g *Gateway) prune() {
	delay := g.cfg.ReconnectMin
	for {
		ctx, cancel := context.WithTimeout(g.ctx, registryTimeout)
		existing, err := g.reg.BySource(ctx, "mcp:")
		if err == nil {
			removed := 0
			for name, src := range existing {
				server := strings.TrimPrefix(src, "mcp:")
				g.mu.Lock()
				_, have := g.servers[server]
				g.mu.Unlock()
				if have {
					continue
				}
				if err = g.reg.Unregister(ctx, name, src); err != nil {
					break
				}
				removed++
			}
			if removed > 0 {
				g.log.Info("unregistered tools of MCP servers the gateway no longer has", "tools", removed)
			}
		}
		cancel()
		if err == nil || g.ctx.Err() != nil {
			return
		}
		select {
		case <-g.ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, g.cfg.ReconnectMax)
	}
}
