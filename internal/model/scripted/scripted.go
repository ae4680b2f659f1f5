// Package scripted is the scripted model: a real OpenAI-compatible HTTP server, started in the
// process, that answers POST /v1/chat/completions (streaming SSE and plain JSON, tool calls,
// usage) from a script instead of a neural network. Tests and `hermes demo` point the
// production client (internal/model) at it, so everything between Hermes and the wire is the code
// that runs against a real provider. It is a stand-in and says so: every answer's model name
// is prefixed "scripted:".
package scripted

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/hermes-agent/hermes/internal/tokenizer"
)

// Message is one message of a request as the client sent it.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
	// ImageURLs are the image_url parts of a message with images (data URIs included).
	ImageURLs []string `json:"image_urls,omitempty"`
}

// ToolCall is a function call: in a reply, one the scripted model makes; in a request, one an
// earlier assistant message made. Arguments is JSON text.
type ToolCall struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Tool is a function the request offered.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Parameters  json.RawMessage `json:"parameters"`
}

// Request is a parsed /v1/chat/completions request.
type Request struct {
	// N is the 1-based number of this request among all the server received (retries count).
	N        int
	Model    string
	Messages []Message
	Tools    []Tool
	Stream   bool
	// IncludeUsage is stream_options.include_usage.
	IncludeUsage bool
	// JSON is true for response_format json_object or json_schema.
	JSON bool
	// ParallelToolCalls is the parallel_tool_calls setting, nil when absent.
	ParallelToolCalls *bool
	// Raw is the request body.
	Raw json.RawMessage
}

// LastMessage returns the last message, or a zero Message.
func (r Request) LastMessage() Message {
	if len(r.Messages) == 0 {
		return Message{}
	}
	return r.Messages[len(r.Messages)-1]
}

// LastUser returns the content of the last user message.
func (r Request) LastUser() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// ToolResults returns the tool messages after the last assistant message that made calls, that
// is the results the model is now looking at.
func (r Request) ToolResults() []Message {
	var out []Message
	for i := len(r.Messages) - 1; i >= 0; i-- {
		m := r.Messages[i]
		if m.Role != "tool" {
			break
		}
		out = append([]Message{m}, out...)
	}
	return out
}

// HasTool reports whether the request offered a tool of that name.
func (r Request) HasTool(name string) bool {
	for _, t := range r.Tools {
		if t.Name == name {
			return true
		}
	}
	return false
}

// Usage is what the scripted model reports as token usage.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	CachedTokens     int
}

// Reply is how the scripted model answers one request.
type Reply struct {
	// Text is the answer's content; streamed in several deltas.
	Text string
	// ToolCalls are the calls to make; an empty ID gets a generated one.
	ToolCalls []ToolCall
	// Status, when non-zero, answers with this HTTP error status and an OpenAI-style error body.
	Status int
	// Message is the error message for Status.
	Message string
	// RetryAfter sets Retry-After-Ms on an error answer so the client's retry comes quickly.
	RetryAfter time.Duration
	// Delay waits before answering; a client that goes away ends the wait.
	Delay time.Duration
	// ChunkDelay waits between streamed chunks.
	ChunkDelay time.Duration
	// Usage overrides the usage, which is otherwise counted from the request with the tokenizer.
	Usage *Usage
	// OmitUsage answers without usage, like providers that do not report it.
	OmitUsage bool
	// NoRetry marks an error answer with x-should-retry: false, so the client does not retry it.
	NoRetry bool
	// Drop closes the connection without answering.
	Drop bool
}

// Handler decides the reply to a request. It may be called concurrently.
type Handler func(req Request) Reply

// Text is a reply with only text.
func Text(s string) Reply { return Reply{Text: s} }

// Calls is a reply that makes the given tool calls in one step.
func Calls(calls ...ToolCall) Reply { return Reply{ToolCalls: calls} }

// Call builds a tool call; args is JSON text (string or []byte) or a value to marshal.
func Call(name string, args any) ToolCall {
	var s string
	switch a := args.(type) {
	case string:
		s = a
	case []byte:
		s = string(a)
	case json.RawMessage:
		s = string(a)
	default:
		b, err := json.Marshal(a)
		if err != nil {
			s = fmt.Sprintf("%v", a)
		} else {
			s = string(b)
		}
	}
	return ToolCall{Name: name, Arguments: s}
}

// Sequence answers the requests in order with the given replies; requests beyond the script get
// a 500 with x-should-retry: false and a message saying the script ran out.
func Sequence(replies ...Reply) Handler {
	var mu sync.Mutex // guards next
	next := 0
	return func(Request) Reply {
		mu.Lock()
		defer mu.Unlock()
		if next >= len(replies) {
			return Reply{Status: http.StatusInternalServerError, NoRetry: true, Message: fmt.Sprintf("scripted model: the script has %d replies and all were used", len(replies))}
		}
		r := replies[next]
		next++
		return r
	}
}

// Server is a running scripted model.
type Server struct {
	handler Handler
	srv     *http.Server
	lis     net.Listener
	tok     *tokenizer.Tokenizer
	done    chan struct{}
	// conns counts the connections accepted, so tests can see whether clients reuse them.
	conns atomic.Int64

	mu       sync.Mutex // guards the fields below; not held while the handler runs
	requests []Request
	callSeq  int
	prev     []Message
}

// New starts a scripted model on a random loopback port.
func New(h Handler) (*Server, error) {
	return listen("127.0.0.1:0", h)
}

// listen starts a scripted model on addr.
func listen(addr string, h Handler) (*Server, error) {
	tok, err := tokenizer.New("o200k_base")
	if err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("scripted model: listen: %w", err)
	}
	s := &Server{handler: h, lis: lis, tok: tok, done: make(chan struct{})}
	lis = countingListener{Listener: lis, n: &s.conns}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	mux.HandleFunc("POST /chat/completions", s.chat)
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []any{map[string]any{"id": "scripted", "object": "model", "owned_by": "hermes"}}})
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(lis)
	}()
	return s, nil
}

// URL is the base URL to configure a client with (http://127.0.0.1:port/v1).
func (s *Server) URL() string { return "http://" + s.lis.Addr().String() + "/v1" }

// Connections is the number of connections accepted so far.
func (s *Server) Connections() int { return int(s.conns.Load()) }

// countingListener counts accepted connections.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// Close stops the server, cutting off answers in progress.
func (s *Server) Close() {
	_ = s.srv.Close()
	<-s.done
}

// Requests returns the requests received so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// wire types of the request.
type wireRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCallID string          `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name      string `json:"name"`
				Arguments string `json:"arguments"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Type     string `json:"type"`
		Function Tool   `json:"function"`
	} `json:"tools"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	ParallelToolCalls *bool `json:"parallel_tool_calls"`
}

// contentText turns a content field (a string, an array of parts, or null) into text.
func contentText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) == nil {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p.Text)
		}
		return b.String()
	}
	return string(raw)
}

// imageURLs are the image_url parts of a content array.
func imageURLs(raw json.RawMessage) []string {
	var parts []struct {
		Type     string `json:"type"`
		ImageURL struct {
			URL string `json:"url"`
		} `json:"image_url"`
	}
	if len(raw) == 0 || raw[0] != '[' || json.Unmarshal(raw, &parts) != nil {
		return nil
	}
	var out []string
	for _, p := range parts {
		if p.Type == "image_url" {
			out = append(out, p.ImageURL.URL)
		}
	}
	return out
}

func parseRequest(body []byte) (Request, error) {
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return Request{}, err
	}
	r := Request{Model: w.Model, Stream: w.Stream, ParallelToolCalls: w.ParallelToolCalls, Raw: body}
	if w.StreamOptions != nil {
		r.IncludeUsage = w.StreamOptions.IncludeUsage
	}
	if w.ResponseFormat != nil {
		r.JSON = w.ResponseFormat.Type == "json_object" || w.ResponseFormat.Type == "json_schema"
	}
	for _, m := range w.Messages {
		msg := Message{Role: m.Role, Content: contentText(m.Content), ToolCallID: m.ToolCallID, ImageURLs: imageURLs(m.Content)}
		for _, tc := range m.ToolCalls {
			msg.ToolCalls = append(msg.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
		}
		r.Messages = append(r.Messages, msg)
	}
	for _, t := range w.Tools {
		r.Tools = append(r.Tools, t.Function)
	}
	return r, nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string, retryAfter time.Duration, noRetry bool) {
	if retryAfter > 0 {
		w.Header().Set("Retry-After-Ms", strconv.FormatInt(retryAfter.Milliseconds(), 10))
	}
	if noRetry {
		w.Header().Set("X-Should-Retry", "false")
	}
	typ := "server_error"
	if status < 500 {
		typ = "invalid_request_error"
	}
	if msg == "" {
		msg = http.StatusText(status)
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": nil, "param": nil}})
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 64<<20))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "scripted model: reading the request: "+err.Error(), 0, true)
		return
	}
	req, err := parseRequest(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "scripted model: request is not valid JSON: "+err.Error(), 0, true)
		return
	}
	s.mu.Lock()
	s.callSeq++
	req.N = s.callSeq
	s.requests = append(s.requests, req)
	prev := s.prev
	s.prev = req.Messages
	s.mu.Unlock()

	reply := s.handler(req)
	if reply.Delay > 0 && !sleep(r.Context(), reply.Delay) {
		return
	}
	if reply.Drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	if reply.Status != 0 {
		writeError(w, reply.Status, reply.Message, reply.RetryAfter, reply.NoRetry)
		return
	}
	calls := make([]ToolCall, len(reply.ToolCalls))
	for i, c := range reply.ToolCalls {
		if c.ID == "" {
			c.ID = fmt.Sprintf("call_%d_%d", req.N, i)
		}
		calls[i] = c
	}
	usage := s.usage(req, prev, reply, calls)
	id := fmt.Sprintf("chatcmpl-scripted-%d", req.N)
	modelName := "scripted:" + req.Model
	finish := "stop"
	if len(calls) > 0 {
		finish = "tool_calls"
	}
	if req.Stream {
		s.stream(w, r, req, reply, calls, usage, id, modelName, finish)
		return
	}
	msg := map[string]any{"role": "assistant", "content": nil}
	if reply.Text != "" || len(calls) == 0 {
		msg["content"] = reply.Text
	}
	if len(calls) > 0 {
		msg["tool_calls"] = wireCalls(calls)
	}
	resp := map[string]any{
		"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": modelName,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
	}
	if usage != nil {
		resp["usage"] = usage
	}
	writeJSON(w, http.StatusOK, resp)
}

func wireCalls(calls []ToolCall) []any {
	out := make([]any, len(calls))
	for i, c := range calls {
		out[i] = map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Arguments}}
	}
	return out
}

// usage counts the request the way a provider would: message content and tool-call arguments
// plus the per-message overhead, the tool schemas, and the answer. The cached part is the
// messages this request shares, from the start, with the previous one — what a prefix cache
// would hold.
func (s *Server) usage(req Request, prev []Message, reply Reply, calls []ToolCall) map[string]any {
	if reply.OmitUsage {
		return nil
	}
	var u Usage
	if reply.Usage != nil {
		u = *reply.Usage
	} else {
		for i, m := range req.Messages {
			n := s.tok.CountMessage(m.Content)
			for _, c := range m.ToolCalls {
				n += s.tok.Count(c.Name) + s.tok.Count(c.Arguments)
			}
			u.PromptTokens += n
			if i < len(prev) && sameMessage(prev[i], m) && u.CachedTokens == u.PromptTokens-n {
				u.CachedTokens += n
			}
		}
		for _, t := range req.Tools {
			u.PromptTokens += s.tok.Count(t.Name) + s.tok.Count(t.Description) + s.tok.Count(string(t.Parameters))
		}
		u.CompletionTokens = s.tok.Count(reply.Text)
		for _, c := range calls {
			u.CompletionTokens += s.tok.Count(c.Name) + s.tok.Count(c.Arguments)
		}
	}
	return map[string]any{
		"prompt_tokens":         u.PromptTokens,
		"completion_tokens":     u.CompletionTokens,
		"total_tokens":          u.PromptTokens + u.CompletionTokens,
		"prompt_tokens_details": map[string]any{"cached_tokens": u.CachedTokens},
	}
}

func sameMessage(a, b Message) bool {
	if a.Role != b.Role || a.Content != b.Content || a.ToolCallID != b.ToolCallID || len(a.ToolCalls) != len(b.ToolCalls) {
		return false
	}
	for i := range a.ToolCalls {
		if a.ToolCalls[i] != b.ToolCalls[i] {
			return false
		}
	}
	return true
}

func (s *Server) stream(w http.ResponseWriter, r *http.Request, req Request, reply Reply, calls []ToolCall, usage map[string]any, id, modelName, finish string) {
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	created := time.Now().Unix()
	send := func(choices []any, u map[string]any) bool {
		chunk := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": modelName, "choices": choices}
		if u != nil {
			chunk["usage"] = u
		}
		b, _ := json.Marshal(chunk)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		if reply.ChunkDelay > 0 {
			return sleep(r.Context(), reply.ChunkDelay)
		}
		return r.Context().Err() == nil
	}
	delta := func(d map[string]any) []any {
		return []any{map[string]any{"index": 0, "delta": d, "finish_reason": nil}}
	}
	if !send(delta(map[string]any{"role": "assistant", "content": ""}), nil) {
		return
	}
	for _, piece := range splitText(reply.Text) {
		if !send(delta(map[string]any{"content": piece}), nil) {
			return
		}
	}
	for i, c := range calls {
		first := map[string]any{"index": i, "id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": ""}}
		if !send(delta(map[string]any{"tool_calls": []any{first}}), nil) {
			return
		}
		half := len(c.Arguments) / 2
		for half > 0 && !utf8.RuneStart(c.Arguments[half]) {
			half--
		}
		for _, part := range []string{c.Arguments[:half], c.Arguments[half:]} {
			if part == "" {
				continue
			}
			frag := map[string]any{"index": i, "function": map[string]any{"arguments": part}}
			if !send(delta(map[string]any{"tool_calls": []any{frag}}), nil) {
				return
			}
		}
	}
	if !send([]any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": finish}}, nil) {
		return
	}
	if req.IncludeUsage && usage != nil {
		if !send([]any{}, usage) {
			return
		}
	}
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

// splitText cuts text into deltas of a few words, as a real model's stream arrives.
func splitText(text string) []string {
	if text == "" {
		return nil
	}
	var out []string
	var cur strings.Builder
	words := 0
	for _, r := range text {
		cur.WriteRune(r)
		if r == ' ' || r == '\n' || r > 0x2e80 {
			words++
		}
		if words >= 3 {
			out = append(out, cur.String())
			cur.Reset()
			words = 0
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// sleep waits d or until ctx ends; it reports whether the full wait passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
