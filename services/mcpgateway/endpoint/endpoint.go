package endpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"

	"github.com/hermes-agent/hermes/internal/browserguard"
	"github.com/hermes-agent/hermes/internal/toolmedia"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// ToolClient is what Hermes' MCP endpoint needs of the tool service.
type ToolClient interface {
	ListTools(ctx context.Context, in *toolsv1.ListToolsRequest, opts ...grpc.CallOption) (*toolsv1.ListToolsResponse, error)
	ExecuteTool(ctx context.Context, in *toolsv1.ExecuteToolRequest, opts ...grpc.CallOption) (*toolsv1.ExecuteToolResponse, error)
	ExecuteToolStream(ctx context.Context, in *toolsv1.ExecuteToolStreamRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[toolsv1.ExecuteToolStreamResponse], error)
}

// Options configure a Server.
type Options struct {
	// Tools returns the tool service client; it is called on every use, so the connection can
	// be made lazily.
	Tools func() (ToolClient, error)
	// Gateway returns the MCP gateway client that takes the answers of the endpoint's clients
	// to the sampling (and elicitation) requests of MCP servers behind it; nil: a client's
	// sampling capability is not used, and such requests go to Hermes' model or are refused
	// as the server's spec says.
	Gateway func() (Answers, error)
	// Logger receives the endpoint's logs; nil means slog.Default().
	Logger *slog.Logger
	// Version is reported in serverInfo.
	Version string
	// Refresh is how often the tool list (and the catalog file) is re-read; 0 means 5 s.
	Refresh time.Duration
	// Config holds the limits and the optional catalog of resources and prompts.
	Config Config
}

// LabelMCPOutput is the ToolSpec label that says how Hermes' MCP endpoint passes a tool's
// output on. With the value "content" the output is an MCP tool result, a JSON object
// {"content": [...], "structuredContent": {...}, "isError": false}, whose content blocks (text,
// image, audio, resource, resource_link) reach MCP clients as they are; otherwise the output is
// text, and a JSON object output is also the structured content.
const LabelMCPOutput = "mcp.output"

// Limits of the endpoint's tool handling.
const (
	// elicitTimeout bounds how long a call waits for the user to answer an elicitation.
	elicitTimeout = 5 * time.Minute
	// maxElicitProperties is the most missing arguments asked for in one elicitation.
	maxElicitProperties = 20
)

// Server serves the tool service's tools to any MCP client, over Streamable HTTP or stdio,
// and the resources and prompts of an optional catalog file. Calls go through
// ToolService.ExecuteTool, so they get its validation, timeouts, retries and idempotency; a
// tool's failure is an isError result the client's model can act on.
type Server struct {
	opts   Options
	cfg    Config
	log    *slog.Logger
	server *mcp.Server
	events *eventStore
	guard  *browserguard.Guard
	// catalog is nil without a catalog file.
	catalog *catalogSource
	// pending are the URL elicitations sent for account connections not yet seen completed.
	pending elicitations
	// owners are the callers that started the HTTP sessions.
	owners sessionOwners

	// syncMu makes Syncs one at a time; it is held across the tool service's ListTools and the
	// SDK's tool changes. Lock order: syncMu, then mu. catalog.mu is taken under neither.
	syncMu sync.Mutex
	mu     sync.Mutex             // guards known; held briefly, never across a call
	known  map[string]*servedTool // guarded by mu: tool name → what is served

	// beforeAdd, when set (tests), runs in Sync between a tool's entry and its AddTool.
	beforeAdd func(name string)
}

// servedTool is what the endpoint keeps of a tool it serves.
type servedTool struct {
	version int64
	// structured: the tool declares an output schema, so every successful result must carry
	// structured content.
	structured bool
	// content: the output is an MCP tool result (LabelMCPOutput).
	content bool
	// server is the MCP server behind the gateway that serves the tool, "" for other tools.
	server string
	// required and props are the input schema's top-level required names and property
	// schemas, for asking the user for missing arguments.
	required []string
	props    map[string]json.RawMessage
	// added: the SDK server has the tool (Server.mu guards it).
	added bool
}

// New returns an endpoint; call Sync or Run to load the tools. It fails when the
// catalog file cannot be read.
func New(opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Refresh <= 0 {
		opts.Refresh = 5 * time.Second
	}
	cfg := opts.Config.withDefaults()
	s := &Server{opts: opts, cfg: cfg, log: opts.Logger, known: map[string]*servedTool{}}
	s.events = newEventStore(cfg.EventStoreBytes, cfg.EventsPerStream, cfg.EventMaxAge)
	var err error
	if s.guard, err = newGuard(cfg, opts.Logger); err != nil {
		return nil, err
	}
	if cfg.Catalog != "" {
		s.catalog = &catalogSource{path: cfg.Catalog}
	}
	s.server = mcp.NewServer(&mcp.Implementation{Name: "hermes", Title: "Hermes tools", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Tools registered in Hermes. Arguments are validated against each tool's input schema before the tool runs; " +
			"a failed call returns isError with a message that says how to correct the arguments.",
		Capabilities: &mcp.ServerCapabilities{
			Tools:       &mcp.ToolCapabilities{ListChanged: true},
			Logging:     &mcp.LoggingCapabilities{},
			Resources:   &mcp.ResourceCapabilities{ListChanged: true, Subscribe: true},
			Prompts:     &mcp.PromptCapabilities{ListChanged: true},
			Completions: &mcp.CompletionCapabilities{},
		},
		CompletionHandler:  s.complete,
		SubscribeHandler:   s.subscribe,
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
		Logger:             opts.Logger,
	})
	s.server.AddReceivingMiddleware(s.freshen)
	if err := s.reloadCatalog(context.Background()); err != nil {
		return nil, err
	}
	return s, nil
}

// freshen re-reads the tool list before tools/list and before a call of a tool not yet known,
// so a tool registered a moment ago is visible without waiting for the periodic refresh (which
// is what sends notifications/tools/list_changed to connected clients). One ListTools call to
// the tool service is cheap next to what a client does with a tool list.
func (s *Server) freshen(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/list":
			s.syncLogged(ctx)
		case "tools/call":
			if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil && !s.added(r.Params.Name) {
				s.syncLogged(ctx)
			}
		}
		return next(ctx, method, req)
	}
}

func (s *Server) served(name string) *servedTool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.known[name]
}

// added reports whether the SDK server has the tool: its entry is known and its AddTool done.
// A Sync puts the entry in place before it adds the tool, so a call that arrives in between
// must wait for that Sync (freshen's own Sync does, on syncMu), not go on to "unknown tool".
func (s *Server) added(name string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.known[name]
	return st != nil && st.added
}

func (s *Server) syncLogged(ctx context.Context) {
	if err := s.Sync(ctx); err != nil {
		s.log.Warn("MCP endpoint: reading the tool service's tools failed; serving the last list", "error", err)
	}
}

// Run keeps the tool list and the catalog current until ctx ends.
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.Refresh)
	defer t.Stop()
	s.syncLogged(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.syncLogged(ctx)
			if err := s.reloadCatalog(ctx); err != nil {
				s.log.Warn("MCP endpoint: reading the catalog file failed; serving the last one read", "file", s.cfg.Catalog, "error", err)
			}
		}
	}
}

// Sync makes the served tools those of the tool service. On error nothing changes: the last
// list read stays served.
func (s *Server) Sync(ctx context.Context) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	c, err := s.opts.Tools()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	current := map[string]*toolsv1.Tool{}
	token := ""
	for page := 0; ; page++ {
		resp, err := c.ListTools(ctx, &toolsv1.ListToolsRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		for _, t := range resp.GetTools() {
			current[t.GetSpec().GetName()] = t
		}
		token = resp.GetNextPageToken()
		if token == "" || page > 1000 {
			break
		}
	}
	s.mu.Lock()
	known := make(map[string]*servedTool, len(s.known))
	for k, v := range s.known {
		known[k] = v
	}
	s.mu.Unlock()
	var gone []string
	for name := range known {
		if _, ok := current[name]; !ok {
			gone = append(gone, name)
			delete(known, name)
		}
	}
	if len(gone) > 0 {
		s.server.RemoveTools(gone...)
	}
	for name, t := range current {
		if st, ok := known[name]; ok && st.version == t.GetVersion() {
			continue
		}
		tool, st, err := mcpTool(t.GetSpec())
		if err != nil {
			s.log.Warn("MCP endpoint: tool not served", "tool", name, "error", err)
			continue
		}
		st.version = t.GetVersion()
		// The handler reads the entry at call time, so it is in place before the tool is.
		s.mu.Lock()
		s.known[name] = st
		s.mu.Unlock()
		if s.beforeAdd != nil {
			s.beforeAdd(name)
		}
		if err := s.addTool(tool); err != nil {
			s.log.Warn("MCP endpoint: tool not served", "tool", name, "error", err)
			continue
		}
		s.mu.Lock()
		st.added = true
		s.mu.Unlock()
		known[name] = st
	}
	s.mu.Lock()
	s.known = known
	s.mu.Unlock()
	return nil
}

// addTool registers a tool with the SDK server, which panics on a schema it cannot take; the
// schema was checked already, so a panic here is a bug to report, not a reason to die.
func (s *Server) addTool(t *mcp.Tool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the MCP SDK refused the tool: %v", r)
		}
	}()
	s.server.AddTool(t, s.handler(t.Name))
	return nil
}

// mcpTool is a tool service tool as an MCP tool, and what the endpoint keeps of it. The input
// schema is passed on as declared ($schema, $defs, additionalProperties and all).
func mcpTool(spec *toolsv1.ToolSpec) (*mcp.Tool, *servedTool, error) {
	in, err := objectSchema(spec.GetInputSchema())
	if err != nil {
		return nil, nil, fmt.Errorf("input schema: %w", err)
	}
	st := &servedTool{content: spec.GetLabels()[LabelMCPOutput] == "content", server: spec.GetMcp().GetServer()}
	var shape struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if json.Unmarshal([]byte(in), &shape) == nil {
		st.required, st.props = shape.Required, shape.Properties
	}
	t := &mcp.Tool{Name: spec.GetName(), Description: spec.GetDescription(), InputSchema: json.RawMessage(in)}
	if spec.GetOutputSchema() != "" {
		if out, err := objectSchema(spec.GetOutputSchema()); err == nil {
			t.OutputSchema = json.RawMessage(out)
			st.structured = true
		}
	}
	t.Title = spec.GetLabels()["mcp.title"]
	if a := spec.GetAnnotations(); a != nil {
		t.Annotations = &mcp.ToolAnnotations{
			Title:          a.GetTitle(),
			ReadOnlyHint:   a.GetReadOnlyHint(),
			IdempotentHint: a.GetIdempotentHint(),
		}
		if a.DestructiveHint != nil {
			t.Annotations.DestructiveHint = new(a.GetDestructiveHint())
		}
		if a.OpenWorldHint != nil {
			t.Annotations.OpenWorldHint = new(a.GetOpenWorldHint())
		}
		if a.Title != nil {
			t.Title = a.GetTitle()
		}
	}
	return t, st, nil
}

// handler executes a tool through the tool service: missing required arguments are asked of
// the user first (when the client can be asked), progress and log messages go to the client
// while the tool runs, and the result is mapped to MCP.
func (s *Server) handler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		st := s.served(name)
		if st == nil {
			st = &servedTool{}
		}
		c, err := s.opts.Tools()
		if err != nil {
			return errorResult("The Hermes tool service is unreachable (" + err.Error() + "); the tool was not run. Try again shortly."), nil
		}
		args := "{}"
		if req.Params != nil && len(req.Params.Arguments) > 0 && string(req.Params.Arguments) != "null" {
			args = string(req.Params.Arguments)
		}
		args = s.elicitMissing(ctx, req, name, st, args)

		rep := s.startReport(ctx, req, name)
		// The user is the one the listener authenticated for this request (callUser), never one
		// the client names: a server with per-user OAuth is called with that user's account.
		user := callUser(req)
		in := &toolsv1.ExecuteToolRequest{Name: name, Arguments: args, UserId: user, MaxOutputBytes: int32(min(s.cfg.MaxResultBytes, 1<<30))}
		var resp *toolsv1.ExecuteToolResponse
		if gw := s.samplingClient(req); gw != nil {
			// The client declared sampling: a server behind the gateway may ask its model.
			resp, err = s.executeAsking(ctx, c, req, in, gw)
		} else {
			resp, err = c.ExecuteTool(ctx, in)
		}
		rep.finish(resp.GetResult(), err)
		if err != nil {
			return serviceError(err), nil
		}
		// A client that can show a URL to its user gets the link of an account connection as a
		// URL elicitation; any other gets the result's text, which carries the link too.
		if link := resp.GetResult().GetError().GetAuthorizationUrl(); link != "" && supportsURLElicitation(req.Session) {
			return nil, s.authorizationRequired(req, user, st.server, link,
				fmt.Sprintf("The tool %s needs your own account on the MCP server %q. Open the link to connect it, then call the tool again.", name, st.server))
		}
		return toMCPResult(resp.GetResult(), st, s.cfg.MaxResultBytes), nil
	}
}

// objectSchema returns a tool service schema compacted, if it describes an object: MCP requires
// object schemas, and the gateway checked those of MCP tools already, but builtins and
// registered tools reach the endpoint too.
func objectSchema(schema string) (string, error) {
	var head struct {
		Type any `json:"type"`
	}
	if err := json.Unmarshal([]byte(schema), &head); err != nil {
		return "", fmt.Errorf("the schema is not a JSON object: %w", err)
	}
	if head.Type != "object" {
		return "", fmt.Errorf(`the schema's type is %v, not "object"`, head.Type)
	}
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(schema)); err != nil {
		return "", err
	}
	return b.String(), nil
}

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// toMCPResult turns a ToolResult into an MCP result: the output as text (a JSON string output
// as its plain text), a JSON object output also as structuredContent, the output of a tool
// labelled mcp.output=content as the content blocks it holds; a failure as isError with the
// message and any violation the message does not already list. A tool with an output schema
// never answers success without structured content: a preview cut at limit bytes is an
// isError result that says so.
func toMCPResult(r *toolsv1.ToolResult, st *servedTool, limit int) *mcp.CallToolResult {
	if r == nil {
		return errorResult("the tool service returned no result")
	}
	if !r.GetSuccess() {
		var b strings.Builder
		msg := r.GetError().GetMessage()
		b.WriteString(msg)
		if b.Len() == 0 {
			b.WriteString("the tool failed")
		}
		for _, v := range r.GetError().GetViolations() {
			if v.GetMessage() != "" && strings.Contains(msg, v.GetMessage()) {
				continue
			}
			ptr := v.GetPointer()
			if ptr == "" {
				ptr = "(arguments)"
			}
			fmt.Fprintf(&b, "\n- %s: %s", ptr, v.GetMessage())
		}
		return errorResult(b.String())
	}
	out := r.GetOutput()
	var str string
	isString := json.Unmarshal([]byte(out), &str) == nil
	if r.GetTruncated() {
		if !isString {
			str = out
		}
		if st.structured || st.content {
			return errorResult(fmt.Sprintf("The tool succeeded, but its output (%d bytes) is larger than %s, "+
				"so its structured result cannot be sent; the start of it follows.\n%s", r.GetOutputBytes(), capName(r.GetOutputLimitBytes(), limit), str))
		}
		return withMedia(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: str}}}, r.GetMedia())
	}
	if st.content && !isString {
		if res, err := contentResult(out); err == nil {
			if st.structured && res.StructuredContent == nil && !res.IsError {
				return errorResult("The tool declares an output schema, but its result has no structuredContent.")
			}
			return res
		}
	}
	if isString {
		return withMedia(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: str}}}, r.GetMedia())
	}
	res := &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out}}}
	var obj map[string]any
	if json.Unmarshal([]byte(out), &obj) == nil && obj != nil {
		res.StructuredContent = json.RawMessage(out)
	}
	return res
}

// capName names the cap that cut a tool's output: this endpoint's own limit, or a smaller one
// of the tool service or the MCP gateway on the way.
func capName(applied int64, endpoint int) string {
	if applied <= 0 || applied >= int64(endpoint) {
		return fmt.Sprintf("the %d bytes this MCP endpoint passes on (mcpgateway.mcp-max-result-bytes)", endpoint)
	}
	return fmt.Sprintf("the %d-byte cap that applied on the way (tools.max-response-bytes or mcpgateway.max-text-bytes)", applied)
}

// withMedia adds a result's media (the images, audio and resources of an MCP tool behind the
// gateway) to res as MCP content blocks after its text, and takes out of the text the lines
// that describe them for models, which the tool service put at its end. A block whose bytes
// were left out over a size cap stays the text that says so.
func withMedia(res *mcp.CallToolResult, media []*toolsv1.Media) *mcp.CallToolResult {
	if len(media) == 0 || len(res.Content) != 1 {
		return res
	}
	t, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		return res
	}
	lines := make([]string, len(media))
	for i, m := range media {
		lines[i] = toolmedia.Describe(m.GetType(), m.GetMimeType(), m.GetUri(), m.GetText(), m.GetSize(), m.GetOmitted())
	}
	described := strings.Join(lines, "\n")
	text, found := strings.CutSuffix(t.Text, described)
	if !found {
		return res // cut to a preview, or not the tool service's form: keep the text as it is
	}
	text = strings.TrimSuffix(text, "\n")
	res.Content = res.Content[:0]
	if text != "" {
		res.Content = append(res.Content, &mcp.TextContent{Text: text})
	}
	for i, m := range media {
		if c := mediaContent(m); c != nil {
			res.Content = append(res.Content, c)
		} else {
			res.Content = append(res.Content, &mcp.TextContent{Text: lines[i]})
		}
	}
	return res
}

// mediaContent is the MCP block of a media item, or nil when its bytes were left out.
func mediaContent(m *toolsv1.Media) mcp.Content {
	switch m.GetType() {
	case "image":
		if len(m.GetData()) > 0 {
			return &mcp.ImageContent{Data: m.GetData(), MIMEType: m.GetMimeType()}
		}
	case "audio":
		if len(m.GetData()) > 0 {
			return &mcp.AudioContent{Data: m.GetData(), MIMEType: m.GetMimeType()}
		}
	case "resource":
		r := &mcp.ResourceContents{URI: m.GetUri(), MIMEType: m.GetMimeType()}
		switch {
		case len(m.GetData()) > 0:
			r.Blob = m.GetData()
		case m.GetOmitted() == "" && m.GetText() != "" || m.GetSize() == 0:
			r.Text = m.GetText()
		default:
			return nil
		}
		return &mcp.EmbeddedResource{Resource: r}
	case "resource_link":
		l := &mcp.ResourceLink{URI: m.GetUri(), Name: m.GetText(), MIMEType: m.GetMimeType()}
		if m.GetSize() > 0 {
			size := m.GetSize()
			l.Size = &size
		}
		if l.Name == "" {
			l.Name = m.GetUri()
		}
		return l
	}
	return nil
}

// contentResult reads the output of a tool labelled mcp.output=content: an MCP tool result.
func contentResult(out string) (*mcp.CallToolResult, error) {
	var res mcp.CallToolResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		return nil, err
	}
	if len(res.Content) == 0 {
		return nil, fmt.Errorf("no content")
	}
	res.Meta = nil
	return &res, nil
}

// ServeStdio serves one MCP session on in/out (newline-delimited JSON) until the client closes
// it or ctx ends.
func (s *Server) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	return s.server.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}})
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
