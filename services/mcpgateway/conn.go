package mcpgateway

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

const (
	// stableAfter is how long a connection must last for the backoff to start over.
	stableAfter = 10 * time.Second
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

// toolEntry is a discovered tool the gateway has claimed a namespaced name for.
type toolEntry struct {
	name, original string
	conn           *serverConn
	description    string
	inputSchema    string
	outputSchema   string
	outSchema      *jsonschema.Schema
	spec           *toolsv1.ToolSpec
}

func (e *toolEntry) proto() *pb.MCPTool {
	return &pb.MCPTool{
		Name:         e.name,
		OriginalName: e.original,
		Server:       e.conn.spec.Name,
		Description:  e.description,
		InputSchema:  e.inputSchema,
		OutputSchema: e.outputSchema,
	}
}

// serverConn supervises the connection to one MCP server: it connects, lists and registers the
// tools, watches the session (process exit, broken HTTP session, failed pings), and reconnects
// with backoff. Calls use the session only while the state is READY, so a broken server answers
// "unavailable" at once instead of hanging.
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

	stderr *tailBuffer

	mu          sync.Mutex
	state       pb.ServerState
	lastErr     string
	regErr      string
	session     *mcp.ClientSession
	pid         int
	protocol    string
	serverInfo  string
	hasRes      bool
	hasPrompts  bool
	connectedAt time.Time
	nextRetry   time.Time
	reconnects  int
	autoPin     string
	listing     []*mcp.Tool
	tools       map[string]*toolEntry
	skipped     []*pb.SkippedTool
	warnings    []string
	registered  map[string]*toolsv1.ToolSpec // in the tool service; nil spec: found there, not yet confirmed
	seeded      bool
	// fromFile: declared in the --mcp-servers file, which every replica loads, so not stored.
	fromFile bool
}

func newServerConn(g *Gateway, spec *pb.ServerSpec) *serverConn {
	ctx, cancel := context.WithCancel(g.ctx)
	timeout := g.cfg.CallTimeout
	if d := spec.GetCallTimeout(); d != nil && d.AsDuration() > 0 {
		timeout = d.AsDuration()
	}
	return &serverConn{
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
		stderr:      &tailBuffer{max: 4096},
		state:       pb.ServerState_SERVER_STATE_CONNECTING,
		tools:       map[string]*toolEntry{},
		registered:  map[string]*toolsv1.ToolSpec{},
	}
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
func (c *serverConn) markFirst()     { c.once.Do(func() { close(c.first) }) }

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

// connect starts the transport and runs the handshake.
func (c *serverConn) connect(pin string) (*mcp.ClientSession, int, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.g.cfg.ConnectTimeout)
	defer cancel()
	t, cmd, err := c.transport()
	if err != nil {
		return nil, 0, err
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "hermes", Version: c.g.version}, &mcp.ClientOptions{
		// No roots, sampling or elicitation: the gateway answers no server-initiated requests.
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			c.requestRelist()
		},
		Logger: c.g.log.With("mcp_server", c.spec.Name),
	})
	var opts *mcp.ClientSessionOptions
	if pin != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: pin}
	}
	sess, err := client.Connect(ctx, t, opts)
	if err != nil {
		if cmd != nil && cmd.Process != nil {
			killProcessGroup(cmd.Process.Pid)
		}
		return nil, 0, c.withStderr(fmt.Errorf("connect: %w", err))
	}
	pid := 0
	if cmd != nil && cmd.Process != nil {
		pid = cmd.Process.Pid
	}
	return sess, pid, nil
}

// withStderr adds the last line a stdio server wrote to stderr, which usually says why it
// failed.
func (c *serverConn) withStderr(err error) error {
	if c.spec.GetStdio() == nil {
		return err
	}
	if line := c.stderr.lastLine(); line != "" {
		return fmt.Errorf("%w (stderr: %s)", err, abbreviate(line, 300))
	}
	return err
}

// transport builds the SDK transport from the spec.
func (c *serverConn) transport() (mcp.Transport, *exec.Cmd, error) {
	if st := c.spec.GetStdio(); st != nil {
		env := make([]string, 0, len(st.Env)+2)
		for k, v := range st.Env {
			env = append(env, k+"="+v)
		}
		for _, k := range []string{"PATH", "HOME"} {
			if _, ok := st.Env[k]; !ok {
				if v := c.g.getenv(k); v != "" {
					env = append(env, k+"="+v)
				}
			}
		}
		sort.Strings(env)
		path := st.Env["PATH"]
		if path == "" {
			path = c.g.getenv("PATH")
		}
		bin, err := lookPath(st.Command, path, st.WorkingDir)
		if err != nil {
			return nil, nil, err
		}
		cmd := exec.Command(bin, st.Args...)
		cmd.Env = env // never nil: a nil Env would hand the server the gateway's whole environment
		cmd.Dir = st.WorkingDir
		c.stderr.reset()
		cmd.Stderr = c.stderr
		ownProcessGroup(cmd)
		return &mcp.CommandTransport{Command: cmd, TerminateDuration: c.g.cfg.StopGrace}, cmd, nil
	}
	ht := c.spec.GetHttp()
	header := http.Header{}
	for k, v := range ht.Headers {
		header.Set(k, v)
	}
	if name := ht.BearerTokenEnv; name != "" {
		tok := c.g.getenv(name)
		if tok == "" {
			return nil, nil, fmt.Errorf("the bearer token variable %s is not set in the gateway's environment", name)
		}
		header.Set("Authorization", "Bearer "+tok)
	}
	// otelhttp continues the caller's trace on the server (traceparent) and times each request.
	base := otelhttp.NewTransport(http.DefaultTransport.(*http.Transport).Clone())
	return &mcp.StreamableClientTransport{
		Endpoint:   ht.Url,
		HTTPClient: &http.Client{Transport: &headerTransport{base: base, header: header}},
		MaxRetries: 2,
	}, nil, nil
}

// lookPath finds command on path (the server's PATH, which may differ from the gateway's).
func lookPath(command, path, dir string) (string, error) {
	if strings.ContainsRune(command, filepath.Separator) {
		if !filepath.IsAbs(command) && dir != "" {
			return filepath.Join(dir, command), nil
		}
		return command, nil
	}
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			continue
		}
		if p, err := exec.LookPath(filepath.Join(d, command)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("command %q not found on PATH %q", command, path)
}

// headerTransport adds configured headers to every request.
type headerTransport struct {
	base   http.RoundTripper
	header http.Header
}

func (t *headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.header) > 0 {
		r = r.Clone(r.Context())
		for k, v := range t.header {
			r.Header[k] = v
		}
	}
	return t.base.RoundTrip(r)
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

// listTools reads the server's whole tool list.
func (c *serverConn) listTools(ctx context.Context, sess *mcp.ClientSession) error {
	var tools []*mcp.Tool
	for t, err := range sess.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("tools/list: %w", err)
		}
		if t == nil {
			continue
		}
		if len(tools) == maxToolsPerServer {
			break
		}
		tools = append(tools, t)
	}
	c.mu.Lock()
	c.listing = tools
	c.mu.Unlock()
	return nil
}

// applyListing maps the last listing to namespaced names and claims them, reporting filtered
// tools, schemas that are not object schemas, and collisions (within the server, with other
// servers) instead of letting any tool replace another.
func (c *serverConn) applyListing() {
	c.mu.Lock()
	listing := slices.Clone(c.listing)
	c.mu.Unlock()
	slices.SortFunc(listing, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })

	desc := CleanOptions{MaxBytes: 4096, CompactJSONOver: -1}
	next := map[string]*toolEntry{}
	var skipped []*pb.SkippedTool
	var warnings []string
	skip := func(original, name, reason string) {
		skipped = append(skipped, &pb.SkippedTool{OriginalName: original, Name: name, Reason: reason})
	}
	g := c.g
	g.mu.Lock()
	for _, t := range listing {
		name := ToolName(c.spec.Prefix, t.Name)
		if ok, why := c.filter.allows(t.Name); !ok {
			skip(t.Name, name, why)
			continue
		}
		in, err := objectSchema(t.InputSchema)
		if err != nil {
			skip(t.Name, name, "input schema refused: "+err.Error())
			continue
		}
		var out string
		var outSchema *jsonschema.Schema
		if t.OutputSchema != nil {
			out, err = objectSchema(t.OutputSchema)
			if err == nil {
				outSchema, err = compileSchema(out)
			}
			if err != nil {
				warnings = append(warnings, fmt.Sprintf("%s: output schema not enforced: %v", t.Name, err))
				out, outSchema = "", nil
			}
		}
		if prev, ok := next[name]; ok {
			skip(t.Name, name, fmt.Sprintf("its name collides with %q of the same server (both become %s)", prev.original, name))
			continue
		}
		if owner, ok := g.tools[name]; ok && owner.conn != c {
			skip(t.Name, name, fmt.Sprintf("its name collides with %q of server %q", owner.original, owner.conn.spec.Name))
			continue
		}
		description := CleanText(t.Description, "text/plain", desc).Text
		if description == "" {
			description = CleanText(t.Title, "text/plain", desc).Text
		}
		if description == "" {
			description = fmt.Sprintf("Tool %s of the MCP server %s.", t.Name, c.spec.Name)
		}
		e := &toolEntry{name: name, original: t.Name, conn: c, description: description, inputSchema: in, outputSchema: out, outSchema: outSchema}
		e.spec = c.toolSpec(e, t)
		next[name] = e
	}
	c.mu.Lock()
	prev := c.tools
	c.tools, c.skipped, c.warnings = next, skipped, warnings
	c.mu.Unlock()
	for name, e := range prev {
		if g.tools[name] == e {
			delete(g.tools, name)
		}
	}
	for name, e := range next {
		g.tools[name] = e
	}
	g.mu.Unlock()
}

// toolSpec is the tool service's contract for a discovered tool.
func (c *serverConn) toolSpec(e *toolEntry, t *mcp.Tool) *toolsv1.ToolSpec {
	groups := []string{c.spec.Prefix}
	for _, gr := range c.spec.Groups {
		if !slices.Contains(groups, gr) {
			groups = append(groups, gr)
		}
	}
	labels := map[string]string{"mcp.server": c.spec.Name, "mcp.tool": t.Name}
	if t.Title != "" {
		labels["mcp.title"] = abbreviate(t.Title, 200)
	}
	if a := t.Annotations; a != nil {
		if a.ReadOnlyHint {
			labels["mcp.read_only"] = "true"
		}
		if a.IdempotentHint {
			labels["mcp.idempotent"] = "true"
		}
		if a.DestructiveHint != nil {
			labels["mcp.destructive"] = fmt.Sprint(*a.DestructiveHint)
		}
		if a.OpenWorldHint != nil {
			labels["mcp.open_world"] = fmt.Sprint(*a.OpenWorldHint)
		}
	}
	// The server's idempotentHint ("calling again with the same arguments has no further
	// effect") is what the tool service's idempotency protection needs: calls with one key run once.
	idempotent := t.Annotations != nil && t.Annotations.IdempotentHint
	return &toolsv1.ToolSpec{
		Idempotent:   idempotent,
		Name:         e.name,
		Description:  e.description,
		InputSchema:  e.inputSchema,
		OutputSchema: e.outputSchema,
		Timeout:      durationpb.New(c.callTimeout),
		Groups:       groups,
		Executor:     &toolsv1.ToolSpec_Mcp{Mcp: &toolsv1.MCPExecutor{Server: c.spec.Name, Tool: t.Name}},
		Labels:       labels,
	}
}

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
	for _, name := range names {
		e := desired[name]
		prev, known := registered[name]
		if known && prev != nil && proto.Equal(prev, e.spec) {
			continue
		}
		if !known {
			src, found, err := reg.Source(ctx, name)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if found && src != c.source {
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

// readySession returns the session when the server is ready, else nil and why not.
func (c *serverConn) readySession() (*mcp.ClientSession, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state == pb.ServerState_SERVER_STATE_READY && c.session != nil {
		return c.session, ""
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

func (c *serverConn) setState(s pb.ServerState, lastErr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state = s
	if s != pb.ServerState_SERVER_STATE_READY {
		c.session, c.pid = nil, 0
	}
	if lastErr != "" {
		c.lastErr = lastErr
	}
}

func (c *serverConn) setReady(sess *mcp.ClientSession, pid int) {
	init := sess.InitializeResult()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state, c.session, c.pid = pb.ServerState_SERVER_STATE_READY, sess, pid
	c.lastErr, c.nextRetry, c.connectedAt = "", time.Time{}, time.Now()
	c.protocol, c.serverInfo, c.hasRes, c.hasPrompts = "", "", false, false
	if init != nil {
		c.protocol = init.ProtocolVersion
		if si := init.ServerInfo; si != nil {
			c.serverInfo = strings.TrimSpace(si.Name + " " + si.Version)
		}
		if caps := init.Capabilities; caps != nil {
			c.hasRes, c.hasPrompts = caps.Resources != nil, caps.Prompts != nil
		}
	}
	c.g.log.Info("MCP server ready", "server", c.spec.Name, "protocol", c.protocol, "server_info", c.serverInfo, "tools", len(c.tools), "pid", pid)
}

func (c *serverConn) setFailed(err error, retryIn time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.state, c.session, c.pid = pb.ServerState_SERVER_STATE_FAILED, nil, 0
	if err != nil {
		c.lastErr = abbreviate(err.Error(), 1000)
	}
	c.nextRetry = time.Now().Add(retryIn)
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
		Pid:             int32(c.pid),
		SkippedTools:    slices.Clone(c.skipped),
		Warnings:        slices.Clone(c.warnings),
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

// tailBuffer keeps the last bytes a stdio server wrote to stderr.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) reset() {
	t.mu.Lock()
	t.buf = t.buf[:0]
	t.mu.Unlock()
}

func (t *tailBuffer) lastLine() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return CleanText(l, "text/plain", CleanOptions{MaxBytes: 300}).Text
		}
	}
	return ""
}
