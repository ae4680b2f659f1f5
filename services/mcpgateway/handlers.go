package mcpgateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hermes-agent/hermes/internal/model"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// Sampler is the model a server may use through MCP sampling (only where the operator allows
// it for that server).
type Sampler interface {
	Complete(ctx context.Context, req model.Request) (*model.Response, error)
}

// Sampling defaults and limits.
const (
	defaultSamplingTokens = 1024
	defaultSamplingRate   = 10 // per minute
	maxSamplingMessages   = 64
	// maxSamplingText bounds the bytes of a request's text: its messages, system prompt and
	// stop sequences (passed on to a caller with ask_caller).
	maxSamplingText = 64 << 10
	// maxSamplingStops bounds a request's stop sequences.
	maxSamplingStops = 32
)

// subscriptionAcks passes the server's notifications/subscriptions/acknowledged to the resource
// watchers waiting for it; the SDK has no handler option for it.
func (c *serverConn) subscriptionAcks(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method == "notifications/subscriptions/acknowledged" {
			if p, ok := req.GetParams().(*mcp.SubscriptionsAcknowledgedParams); ok && p != nil {
				c.g.watches.acked(c, p.Notifications.ResourceSubscriptions)
			}
		}
		return next(ctx, method, req)
	}
}

// nullMessages refuses a sampling request with a null message ("messages": [null]) before the
// SDK's handler, which would dereference it (go-sdk v1.8.0, CreateMessageWithToolsParams.toBase)
// and bring the whole process down: a server could end every call of every user.
func (c *serverConn) nullMessages(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if p, ok := req.GetParams().(*mcp.CreateMessageWithToolsParams); ok && p != nil && slices.Contains(p.Messages, nil) {
			return nil, rpcError(jsonrpc.CodeInvalidParams, "sampling request with a null message")
		}
		return next(ctx, method, req)
	}
}

// clientOptions are the SDK client options of one connection: the notifications the gateway
// acts on and the server-initiated requests it answers.
func (c *serverConn) clientOptions() *mcp.ClientOptions {
	caps := &mcp.ClientCapabilities{}
	if len(c.spec.Roots) > 0 {
		caps.RootsV2 = &mcp.RootCapabilities{}
	}
	opts := &mcp.ClientOptions{
		Capabilities: caps,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			c.requestRelist()
		},
		// The gateway lists resources and prompts from the server on every request, so a
		// list_changed needs no refresh here; it is logged for whoever watches the server.
		ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
			c.g.log.Debug("MCP server: resources changed", "server", c.spec.Name)
		},
		PromptListChangedHandler: func(context.Context, *mcp.PromptListChangedRequest) {
			c.g.log.Debug("MCP server: prompts changed", "server", c.spec.Name)
		},
		ResourceUpdatedHandler: func(_ context.Context, r *mcp.ResourceUpdatedNotificationRequest) {
			c.g.watches.updated(c, r.Params.URI)
		},
		LoggingMessageHandler: func(ctx context.Context, r *mcp.LoggingMessageRequest) {
			c.serverLog(ctx, r.Params)
		},
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			c.g.progress.deliver(c, r.Params.ProgressToken, r.Params.Progress, r.Params.Total, r.Params.Message)
		},
		ElicitationHandler: func(ctx context.Context, r *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return c.elicit(ctx, r.Params), nil
		},
		Logger: c.g.log.With("mcp_server", c.spec.Name),
	}
	if sp := c.spec.GetSampling(); sp.GetAllow() || sp.GetAskCaller() {
		limit := newRateLimit(int(sp.GetPerMinute()), defaultSamplingRate)
		opts.CreateMessageHandler = func(ctx context.Context, r *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return c.sample(ctx, r.Params, limit)
		}
	}
	return opts
}

// elicit answers a request for user input as the server's spec says: "ask" passes it to
// whoever waits for the server's calls (elicit.go); "defaults" accepts a form with its schema's
// defaults when every required field has one. Otherwise, or when nobody waits, the request is
// declined with the reason (the server goes on as when a user declines).
func (c *serverConn) elicit(ctx context.Context, p *mcp.ElicitParams) *mcp.ElicitResult {
	msg := ""
	if p != nil {
		msg = CleanText(p.Message, "text/plain", CleanOptions{MaxBytes: 300}).Text
	}
	if c.spec.GetElicitation() == "ask" && p != nil {
		if r, ok := c.g.elicits.ask(ctx, c, p, msg, c.g.cfg.ElicitTimeout); ok {
			return r
		}
	}
	if c.spec.GetElicitation() == "defaults" && p != nil && p.Mode != "url" {
		if content, ok := schemaDefaults(p.RequestedSchema); ok {
			c.g.log.Info("MCP server asked for user input (elicitation); accepted with the schema's defaults", "server", c.spec.Name, "message", abbreviate(msg, 200))
			c.g.progress.broadcast(c, "the server asked for user input, answered with its defaults: "+msg)
			return &mcp.ElicitResult{Action: "accept", Content: content}
		}
	}
	c.g.log.Info("MCP server asked for user input (elicitation); declined: Hermes cannot ask the user during a tool call", "server", c.spec.Name, "message", abbreviate(msg, 200))
	c.g.progress.broadcast(c, "the server asked for user input, which was declined: "+msg)
	return &mcp.ElicitResult{Action: "decline", Meta: mcp.Meta{"reason": "Hermes cannot ask the user for input during a tool call"}}
}

// schemaDefaults is the content of a form filled with its schema's defaults, when every
// required field has one.
func schemaDefaults(schema any) (map[string]any, bool) {
	raw, err := json.Marshal(schema)
	if err != nil {
		return nil, false
	}
	var s struct {
		Properties map[string]struct {
			Default any `json:"default"`
		} `json:"properties"`
		Required []string `json:"required"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return nil, false
	}
	content := map[string]any{}
	for name, prop := range s.Properties {
		if prop.Default != nil {
			content[name] = prop.Default
		}
	}
	for _, name := range s.Required {
		if _, ok := content[name]; !ok {
			return nil, false
		}
	}
	return content, true
}

// roots is the spec's roots for the SDK client.
func (c *serverConn) roots() []*mcp.Root {
	var out []*mcp.Root
	for _, r := range c.spec.Roots {
		out = append(out, &mcp.Root{URI: r.Uri, Name: r.Name})
	}
	return out
}

// serverLog writes a server's notifications/message to the gateway's log at the mapped level.
func (c *serverConn) serverLog(ctx context.Context, p *mcp.LoggingMessageParams) {
	if p == nil {
		return
	}
	level := slog.LevelInfo
	switch p.Level {
	case "debug":
		level = slog.LevelDebug
	case "info", "notice":
		level = slog.LevelInfo
	case "warning":
		level = slog.LevelWarn
	case "error", "critical", "alert", "emergency":
		level = slog.LevelError
	}
	data, ok := p.Data.(string)
	if !ok {
		b, _ := json.Marshal(p.Data)
		data = string(b)
	}
	c.g.log.Log(ctx, level, "MCP server log: "+abbreviate(CleanText(data, "text/plain", CleanOptions{MaxBytes: 2048}).Text, 2048),
		"server", c.spec.Name, "logger", abbreviate(p.Logger, 100), "mcp_level", string(p.Level))
}

// sample answers sampling/createMessage within the operator's limits: with the model of the
// caller of the server's call in flight when the spec says ask_caller and that caller answers
// sampling (sampling.go), otherwise with Hermes' model when the spec allows it; otherwise the
// request is refused.
func (c *serverConn) sample(ctx context.Context, p *mcp.CreateMessageParams, limit *rateLimit) (*mcp.CreateMessageResult, error) {
	sp := c.spec.GetSampling()
	if p == nil || len(p.Messages) == 0 {
		return nil, rpcError(jsonrpc.CodeInvalidParams, "sampling request without messages")
	}
	if len(p.Messages) > maxSamplingMessages {
		return nil, rpcError(jsonrpc.CodeInvalidParams, fmt.Sprintf("sampling request has %d messages; at most %d are accepted", len(p.Messages), maxSamplingMessages))
	}
	if len(p.StopSequences) > maxSamplingStops {
		return nil, rpcError(jsonrpc.CodeInvalidParams, fmt.Sprintf("sampling request has %d stop sequences; at most %d are accepted", len(p.StopSequences), maxSamplingStops))
	}
	if !limit.allow(time.Now()) {
		return nil, rpcError(codeSamplingRateLimited, fmt.Sprintf("sampling is refused: this server may ask at most %d times a minute; try again later", limit.perMinute))
	}
	maxTokens := int(sp.GetMaxTokens())
	if maxTokens <= 0 {
		maxTokens = defaultSamplingTokens
	}
	if p.MaxTokens > 0 && int(p.MaxTokens) < maxTokens {
		maxTokens = int(p.MaxTokens)
	}
	req := model.Request{MaxTokens: maxTokens}
	size := 0
	if p.SystemPrompt != "" {
		req.Messages = append(req.Messages, model.Message{Role: model.RoleSystem, Content: p.SystemPrompt})
		size += len(p.SystemPrompt)
	}
	for _, stop := range p.StopSequences {
		size += len(stop)
	}
	for _, m := range p.Messages {
		t, ok := m.Content.(*mcp.TextContent) // no nil message: nullMessages
		if !ok {
			return nil, rpcError(jsonrpc.CodeInvalidParams, "sampling is refused: only text messages are supported")
		}
		role := model.RoleUser
		if m.Role == "assistant" {
			role = model.RoleAssistant
		}
		size += len(t.Text)
		req.Messages = append(req.Messages, model.Message{Role: role, Content: t.Text})
	}
	if size > maxSamplingText {
		return nil, rpcError(jsonrpc.CodeInvalidParams, fmt.Sprintf("sampling request has %d bytes of text; at most %d are accepted", size, maxSamplingText))
	}
	if sp.GetAskCaller() {
		if res, err, ok := c.g.elicits.askSample(ctx, c, p, maxTokens, c.samplingWait(ctx)); ok {
			return res, err
		}
	}
	if !sp.GetAllow() {
		c.g.progress.broadcast(c, "the server asked for a completion, which was refused: no caller of its call answers sampling")
		return nil, rpcError(codeSamplingRefused, "sampling is refused: no caller of this call answers sampling requests, and Hermes' model is not allowed for this server")
	}
	if c.g.sampler == nil {
		return nil, rpcError(codeSamplingRefused, "sampling is refused: Hermes has no model configured")
	}
	c.g.log.Info("MCP server uses Hermes' model (sampling)", "server", c.spec.Name, "messages", len(p.Messages), "max_tokens", maxTokens)
	c.g.progress.broadcast(c, fmt.Sprintf("the server asked Hermes' model for a completion (%d messages, at most %d tokens)", len(p.Messages), maxTokens))
	resp, err := c.g.sampler.Complete(ctx, req)
	if err != nil {
		return nil, rpcError(jsonrpc.CodeInternalError, "the model failed: "+err.Error())
	}
	stop := "endTurn"
	if resp.FinishReason == "length" {
		stop = "maxTokens"
	}
	return &mcp.CreateMessageResult{Content: &mcp.TextContent{Text: resp.Content}, Model: resp.Model, Role: "assistant", StopReason: stop}, nil
}

// JSON-RPC error codes of refused sampling requests, in the range JSON-RPC leaves to
// implementations (-32000 to -32099): a plain Go error would reach the server as code 0.
const (
	// codeSamplingRefused: the operator gave Hermes no model to sample with.
	codeSamplingRefused = -32001
	// codeSamplingRateLimited: the server asked more often than its spec's per_minute allows.
	codeSamplingRateLimited = -32029
	// codeSamplingRejected: the caller's client or its user refused the request; -1 is the code
	// the MCP specification's example gives a user's rejection of a sampling request.
	codeSamplingRejected = -1
)

// rpcError is an error the SDK sends to the server as this JSON-RPC error.
func rpcError(code int64, msg string) error {
	return &jsonrpc.Error{Code: code, Message: msg}
}

// rateLimit allows perMinute events in any minute.
type rateLimit struct {
	perMinute int
	mu        sync.Mutex // guards times
	times     []time.Time
}

func newRateLimit(perMinute, def int) *rateLimit {
	if perMinute <= 0 {
		perMinute = def
	}
	return &rateLimit{perMinute: perMinute}
}

func (r *rateLimit) allow(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := r.times[:0]
	for _, t := range r.times {
		if now.Sub(t) < time.Minute {
			keep = append(keep, t)
		}
	}
	r.times = keep
	if len(r.times) >= r.perMinute {
		return false
	}
	r.times = append(r.times, now)
	return true
}

// sideNotification handles a notification that arrived on the side channel's stream.
func (c *serverConn) sideNotification(method string, params json.RawMessage) {
	if method != "notifications/progress" {
		return
	}
	var p mcp.ProgressNotificationParams
	if json.Unmarshal(params, &p) == nil {
		c.g.progress.deliver(c, p.ProgressToken, p.Progress, p.Total, p.Message)
	}
}

// progressHub routes progress notifications to the call that sent the token, and knows the
// calls in flight of each server (with or without a progress receiver).
type progressHub struct {
	mu    sync.Mutex // guards next, calls and each sink's last
	next  int64
	calls map[string]*progressSink
}

// progressSink is one call in flight, its progress receiver (nil: nobody waits for it) and its
// clock (nil in tests), held while its caller is asked for input; sampling: the caller answers
// sampling requests (CallToolRequest.answers_sampling).
type progressSink struct {
	conn     *serverConn
	fn       func(*pb.Progress)
	clock    *callClock
	last     float64
	sampling bool
	// ended is closed when the call ends: a request shown to its caller stops waiting then,
	// since the answer can no longer come through the call.
	ended chan struct{}
}

func newProgressHub() *progressHub { return &progressHub{calls: map[string]*progressSink{}} }

// register records a call of conn in flight and returns its progress token (empty for a nil
// fn: the server is sent none) and the function that unregisters it; sampling says the caller
// answers sampling requests.
func (h *progressHub) register(conn *serverConn, fn func(*pb.Progress), clock *callClock, sampling bool) (string, func()) {
	h.mu.Lock()
	h.next++
	token := "hermes-progress-" + strconv.FormatInt(h.next, 10)
	s := &progressSink{conn: conn, fn: fn, clock: clock, last: -1, sampling: sampling && fn != nil, ended: make(chan struct{})}
	h.calls[token] = s
	h.mu.Unlock()
	sent := token
	if fn == nil {
		sent = ""
	}
	return sent, func() {
		h.mu.Lock()
		if h.calls[token] == s {
			delete(h.calls, token)
			close(s.ended)
		}
		h.mu.Unlock()
	}
}

// deliver passes a progress notification of conn on; unknown tokens, tokens of another
// server's calls (tokens are guessable) or of calls nobody waits for, and progress that goes
// backwards (the spec requires it to increase) are dropped.
func (h *progressHub) deliver(conn *serverConn, token any, progress, total float64, msg string) {
	t, ok := token.(string)
	if !ok {
		return
	}
	h.mu.Lock()
	s := h.calls[t]
	if s == nil || s.conn != conn || s.fn == nil || progress < s.last {
		h.mu.Unlock()
		return
	}
	s.last = progress
	h.mu.Unlock()
	s.fn(&pb.Progress{Progress: progress, Total: total, Message: CleanText(msg, "text/plain", CleanOptions{MaxBytes: 500}).Text})
}

// broadcast tells the caller of conn's call what the server did (sampling, elicitation).
func (h *progressHub) broadcast(conn *serverConn, msg string) {
	if release, _, ok := h.tell(conn, msg, nil); ok {
		release()
	}
}

// tell passes what the server did, and a request for user input (e, may be nil), to whoever
// waits for conn's call, and reports whether someone got it. A server's request names no call,
// so it goes to a caller only when conn has one call in flight: with two, it may be the other
// call's — another user's — and telling the wrong one would show them its text, and let them
// answer it. With a request for input, the call's clock stands still until release is called;
// ended is closed when the call ends.
func (h *progressHub) tell(conn *serverConn, msg string, e *pb.Elicitation) (release func(), ended <-chan struct{}, ok bool) {
	return h.ask(conn, msg, &pb.Progress{Elicitation: e})
}

// ask is tell for a request of any kind (q: a Progress carrying it, or neither for a report);
// a sampling request goes only to a caller that answers sampling.
func (h *progressHub) ask(conn *serverConn, msg string, q *pb.Progress) (release func(), ended <-chan struct{}, ok bool) {
	h.mu.Lock()
	var only *progressSink
	for _, s := range h.calls {
		if s.conn != conn {
			continue
		}
		if only != nil {
			h.mu.Unlock()
			return nil, nil, false
		}
		only = s
	}
	if only == nil || only.fn == nil || q.GetSampling() != nil && !only.sampling {
		h.mu.Unlock()
		return nil, nil, false
	}
	fn, last, clock, ended := only.fn, max(only.last, 0), only.clock, only.ended
	h.mu.Unlock()
	release = func() {}
	if q.GetElicitation() != nil || q.GetSampling() != nil {
		release = clock.hold()
	}
	fn(&pb.Progress{Progress: last, Message: strings.TrimSpace(msg), Elicitation: q.GetElicitation(), Sampling: q.GetSampling()})
	return release, ended, true
}
