package mcpgateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// ToolClient is what Hermes' MCP endpoint needs of the tool service.
type ToolClient interface {
	ListTools(ctx context.Context, in *toolsv1.ListToolsRequest, opts ...grpc.CallOption) (*toolsv1.ListToolsResponse, error)
	ExecuteTool(ctx context.Context, in *toolsv1.ExecuteToolRequest, opts ...grpc.CallOption) (*toolsv1.ExecuteToolResponse, error)
}

// MCPServerOptions configure an MCPServer.
type MCPServerOptions struct {
	// Tools returns the tool service client; it is called on every use, so the connection can
	// be made lazily.
	Tools func() (ToolClient, error)
	// Logger receives the endpoint's logs; nil means slog.Default().
	Logger *slog.Logger
	// Version is reported in serverInfo.
	Version string
	// Refresh is how often the tool list is re-read; 0 means 5 s.
	Refresh time.Duration
}

// MCPServer serves the tool service's tools to any MCP client, over Streamable HTTP or stdio.
// Calls go through ToolService.ExecuteTool, so they get its validation, timeouts, retries and
// idempotency; a tool's failure is an isError result the client's model can act on.
type MCPServer struct {
	opts   MCPServerOptions
	log    *slog.Logger
	server *mcp.Server

	syncMu sync.Mutex // one sync at a time
	mu     sync.Mutex
	known  map[string]int64 // tool name → version served
}

// NewMCPServer returns an endpoint; call Sync or Run to load the tools.
func NewMCPServer(opts MCPServerOptions) *MCPServer {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Refresh <= 0 {
		opts.Refresh = 5 * time.Second
	}
	s := &MCPServer{opts: opts, log: opts.Logger, known: map[string]int64{}}
	s.server = mcp.NewServer(&mcp.Implementation{Name: "hermes", Title: "Hermes tools", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Tools registered in Hermes. Arguments are validated against each tool's input schema before the tool runs; " +
			"a failed call returns isError with a message that says how to correct the arguments.",
		Capabilities: &mcp.ServerCapabilities{
			Tools:   &mcp.ToolCapabilities{ListChanged: true},
			Logging: &mcp.LoggingCapabilities{},
		},
		Logger: opts.Logger,
	})
	s.server.AddReceivingMiddleware(s.freshen)
	return s
}

// freshen re-reads the tool list before tools/list and before a call of a tool not yet known,
// so a tool registered a moment ago is visible without waiting for the periodic refresh (which
// is what sends notifications/tools/list_changed to connected clients). One ListTools call to
// the tool service is cheap next to what a client does with a tool list.
func (s *MCPServer) freshen(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/list":
			s.syncLogged(ctx)
		case "tools/call":
			if r, ok := req.(*mcp.CallToolRequest); ok && r.Params != nil {
				s.mu.Lock()
				_, known := s.known[r.Params.Name]
				s.mu.Unlock()
				if !known {
					s.syncLogged(ctx)
				}
			}
		}
		return next(ctx, method, req)
	}
}

func (s *MCPServer) syncLogged(ctx context.Context) {
	if err := s.Sync(ctx); err != nil {
		s.log.Warn("MCP endpoint: reading the tool service's tools failed", "error", err)
	}
}

// Run keeps the tool list current until ctx ends.
func (s *MCPServer) Run(ctx context.Context) {
	t := time.NewTicker(s.opts.Refresh)
	defer t.Stop()
	s.syncLogged(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.syncLogged(ctx)
		}
	}
}

// Sync makes the served tools those of the tool service.
func (s *MCPServer) Sync(ctx context.Context) error {
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
	known := make(map[string]int64, len(s.known))
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
		if v, ok := known[name]; ok && v == t.GetVersion() {
			continue
		}
		tool, err := mcpTool(t.GetSpec())
		if err != nil {
			s.log.Warn("MCP endpoint: tool not served", "tool", name, "error", err)
			continue
		}
		if err := s.addTool(tool); err != nil {
			s.log.Warn("MCP endpoint: tool not served", "tool", name, "error", err)
			continue
		}
		known[name] = t.GetVersion()
	}
	s.mu.Lock()
	s.known = known
	s.mu.Unlock()
	return nil
}

// addTool registers a tool with the SDK server, which panics on a schema it cannot take; the
// schema was checked already, so a panic here is a bug to report, not a reason to die.
func (s *MCPServer) addTool(t *mcp.Tool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the MCP SDK refused the tool: %v", r)
		}
	}()
	s.server.AddTool(t, s.handler(t.Name))
	return nil
}

// mcpTool is a tool service tool as an MCP tool.
func mcpTool(spec *toolsv1.ToolSpec) (*mcp.Tool, error) {
	in, err := objectSchema(json.RawMessage(spec.GetInputSchema()))
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	t := &mcp.Tool{Name: spec.GetName(), Description: spec.GetDescription(), InputSchema: json.RawMessage(in)}
	if spec.GetOutputSchema() != "" {
		if out, err := objectSchema(json.RawMessage(spec.GetOutputSchema())); err == nil {
			t.OutputSchema = json.RawMessage(out)
		}
	}
	if title := spec.GetLabels()["mcp.title"]; title != "" {
		t.Title = title
	}
	return t, nil
}

// handler executes a tool through the tool service.
func (s *MCPServer) handler(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		c, err := s.opts.Tools()
		if err != nil {
			return errorResult("the Hermes tool service is unreachable: " + err.Error()), nil
		}
		args := "{}"
		if req.Params != nil && len(req.Params.Arguments) > 0 && string(req.Params.Arguments) != "null" {
			args = string(req.Params.Arguments)
		}
		resp, err := c.ExecuteTool(ctx, &toolsv1.ExecuteToolRequest{Name: name, Arguments: args})
		if err != nil {
			st := status.Convert(err)
			return errorResult(fmt.Sprintf("the Hermes tool service failed (%s): %s", st.Code(), st.Message())), nil
		}
		return toMCPResult(resp.GetResult()), nil
	}
}

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// toMCPResult turns a ToolResult into an MCP result: the output as text (a JSON string output
// as its plain text), a JSON object output also as structuredContent; a failure as isError with
// the message and every validation violation.
func toMCPResult(r *toolsv1.ToolResult) *mcp.CallToolResult {
	if r == nil {
		return errorResult("the tool service returned no result")
	}
	if !r.GetSuccess() {
		var b strings.Builder
		b.WriteString(r.GetError().GetMessage())
		if b.Len() == 0 {
			b.WriteString("the tool failed")
		}
		for _, v := range r.GetError().GetViolations() {
			ptr := v.GetPointer()
			if ptr == "" {
				ptr = "(arguments)"
			}
			fmt.Fprintf(&b, "\n- %s: %s", ptr, v.GetMessage())
		}
		return errorResult(b.String())
	}
	out := r.GetOutput()
	res := &mcp.CallToolResult{}
	var str string
	if err := json.Unmarshal([]byte(out), &str); err == nil {
		res.Content = []mcp.Content{&mcp.TextContent{Text: str}}
		return res
	}
	res.Content = []mcp.Content{&mcp.TextContent{Text: out}}
	var obj map[string]any
	if !r.GetTruncated() && json.Unmarshal([]byte(out), &obj) == nil && obj != nil {
		res.StructuredContent = json.RawMessage(out)
	}
	return res
}

// HTTPHandler serves the endpoint over Streamable HTTP.
func (s *MCPServer) HTTPHandler() http.Handler {
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.server }, &mcp.StreamableHTTPOptions{
		SessionTimeout: 30 * time.Minute,
		Logger:         s.log,
	})
}

// ServeStdio serves one MCP session on in/out (newline-delimited JSON) until the client closes
// it or ctx ends.
func (s *MCPServer) ServeStdio(ctx context.Context, in io.Reader, out io.Writer) error {
	return s.server.Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}})
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
