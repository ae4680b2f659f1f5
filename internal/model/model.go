// Package model is Hermes' client for OpenAI-compatible Chat Completions endpoints (OpenAI,
// DeepSeek, Qwen, vLLM, Ollama, llama.cpp server …): messages with roles, tool definitions and
// (parallel) tool calls, JSON mode, streaming with a text-delta callback, usage including cached
// tokens, and retries with backoff on 429 and 5xx.
//
// It speaks the wire format the official openai-go SDK speaks (encode_test.go compares the
// bodies with the SDK's), writing requests by hand (encode.go), decoding answers with
// encoding/json over plain structs, and with its own small transport (Endpoint): the SDK's
// reflection encoder and decoder re-validated every nested value, and its client doubled the
// binary's size (see Endpoint).
package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// ErrNotConfigured is returned by New when no endpoint or model name is configured. Callers map
// it to FAILED_PRECONDITION.
var ErrNotConfigured = errors.New("no model is configured: set HERMES_MODEL_BASE_URL (an OpenAI-compatible endpoint such as https://api.openai.com/v1) and HERMES_MODEL")

// defaultMaxRetries is how often a request is retried after a 408, 409, 429, 5xx or connection
// failure when Config.MaxRetries is 0. Endpoint backs off exponentially from 0.5 s with jitter
// and honours Retry-After / Retry-After-Ms.
const defaultMaxRetries = 2

// Config says which endpoint and model to use.
type Config struct {
	// BaseURL is the OpenAI-compatible base URL, ending in /v1 for most providers.
	BaseURL string
	// APIKey is sent as a bearer token; empty sends none (local servers).
	APIKey string
	// Model is the default model name; a Request may override it.
	Model string
	// MaxRetries is the number of retries after the first attempt: 0 means defaultMaxRetries (2),
	// a negative value means none.
	MaxRetries int
	// Timeout bounds each attempt (not the whole call with its retries); 0 means no limit
	// beyond the caller's context.
	Timeout time.Duration
	// HTTPClient replaces the process's shared model client (SharedHTTPClient), for example to
	// add tracing or a pool of its own (NewTransport).
	HTTPClient *http.Client
}

// Role is a chat message role.
type Role string

// The chat roles.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one chat message. An assistant message may carry tool calls (and no content); a
// tool message answers the call named by ToolCallID. A user message may carry images, for
// models that take image input (sent as image_url parts with data URIs).
type Message struct {
	Role       Role
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
	Images     []Image
}

// Image is an image in a user message.
type Image struct {
	MIMEType string
	Data     []byte
}

// ToolCall is a function call the model asked for. Arguments is the JSON text the model
// produced, which need not be valid JSON.
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Tool is a function the model may call: its name, what it does, and its parameters as a JSON
// Schema object.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

// Request is one Chat Completions call.
type Request struct {
	// Model overrides Config.Model when set.
	Model    string
	Messages []Message
	Tools    []Tool
	// SerialToolCalls asks the model for at most one tool call per step; by default a model
	// that supports it may ask for several calls at once.
	SerialToolCalls bool
	// JSON asks for a JSON object as the answer (response_format json_object).
	JSON bool
	// MaxTokens caps the completion; 0 leaves it to the provider.
	MaxTokens int
	// Temperature is sent when non-nil.
	Temperature *float64
}

// Usage is the token usage of one call.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	TotalTokens      int
	// CachedTokens is the part of PromptTokens served from the provider's prompt cache.
	CachedTokens int
	// Reported is true when the provider reported usage; otherwise the counts are zero and the
	// caller should count with a tokenizer.
	Reported bool
}

// Response is the model's answer.
type Response struct {
	ID      string
	Model   string
	Content string
	// ToolCalls are the calls the model asked for, in order.
	ToolCalls []ToolCall
	// FinishReason is the provider's reason: stop, tool_calls, length, content_filter …
	FinishReason string
	Usage        Usage
}

// Client calls one OpenAI-compatible endpoint. It is safe for concurrent use.
type Client struct {
	ep    *Endpoint
	model string
	base  string
	inst  instruments
	// bodies recycles request bodies (*bytes.Buffer): a turn's requests are 10–30 KB each, and
	// a new one for every call was the client's largest allocation.
	bodies sync.Pool
	// streams recycles the buffers of answer streams (*eventBufs).
	streams sync.Pool
	// schemas remembers the tools' parameters as the body sends them (encode.go).
	schemas schemas
}

// maxPooledBody is the largest request body kept for reuse; larger ones (images) go to the GC.
const maxPooledBody = 1 << 20

// body returns an empty buffer for a request body.
func (c *Client) body() *bytes.Buffer {
	if b, ok := c.bodies.Get().(*bytes.Buffer); ok {
		b.Reset()
		return b
	}
	return new(bytes.Buffer)
}

// release returns a request body for reuse once nothing reads it: its encoding failed, or the
// endpoint's transport let go of it (Endpoint.post), which may be after the call returned.
func (c *Client) release(b *bytes.Buffer) {
	if b.Cap() <= maxPooledBody {
		c.bodies.Put(b)
	}
}

// New returns a client, or ErrNotConfigured when the base URL or the model name is empty.
func New(cfg Config) (*Client, error) {
	if strings.TrimSpace(cfg.BaseURL) == "" || strings.TrimSpace(cfg.Model) == "" {
		return nil, ErrNotConfigured
	}
	return &Client{ep: NewEndpoint(cfg), model: cfg.Model, base: cfg.BaseURL, inst: newInstruments(cfg.Model)}, nil
}

// Model is the default model name.
func (c *Client) Model() string { return c.model }

// BaseURL is the endpoint the client calls.
func (c *Client) BaseURL() string { return c.base }

// Complete sends the request and waits for the whole answer.
func (c *Client) Complete(ctx context.Context, req Request) (out *Response, err error) {
	ctx, end := c.observe(ctx, req, false)
	defer func() { end(out, err) }()
	body := c.body()
	if err := c.encodeTo(body, req, false); err != nil {
		c.release(body)
		return nil, err
	}
	var cc wireCompletion
	_, err = c.ep.postJSON(ctx, chatPath, body.Bytes(), &cc, func() { c.release(body) })
	if err := lenient(err); err != nil {
		return nil, c.wrap(err)
	}
	out = &Response{ID: cc.ID, Model: cc.Model, Usage: cc.Usage.usage()}
	if len(cc.Choices) == 0 {
		return nil, fmt.Errorf("model %s answered without a choice", c.base)
	}
	ch := cc.Choices[0]
	out.Content = ch.Message.Content
	out.FinishReason = ch.FinishReason
	for _, tc := range ch.Message.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			continue
		}
		out.ToolCalls = append(out.ToolCalls, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return out, nil
}

// Stream sends the request as a streaming call, calls onDelta with each piece of answer text as
// it arrives (never concurrently), and returns the assembled answer. Usage is requested with
// stream_options.include_usage; a provider that ignores it yields Usage.Reported false.
func (c *Client) Stream(ctx context.Context, req Request, onDelta func(string)) (out *Response, err error) {
	ctx, end := c.observe(ctx, req, true)
	defer func() { end(out, err) }()
	body := c.body()
	if err := c.encodeTo(body, req, true); err != nil {
		c.release(body)
		return nil, err
	}
	// Retries and error statuses are handled before the response is handed over; the body then
	// carries the per-attempt timeout and is read here event by event.
	res, _, err := c.ep.post(ctx, chatPath, body.Bytes(), "text/event-stream", func() { c.release(body) })
	if err != nil {
		return nil, c.wrap(err)
	}
	eb, _ := c.streams.Get().(*eventBufs)
	events := newEvents(res.Body, eb)
	defer func() {
		_ = events.Close()
		if eb := events.recycle(); eb != nil {
			c.streams.Put(eb)
		}
	}()

	out = &Response{}
	var text strings.Builder
	// Tool calls arrive in fragments keyed by index: the first fragment has id and name, the
	// rest append to the arguments.
	var calls []*ToolCall
	byIndex := map[int64]*ToolCall{}
	var chunk wireChunk // one allocation for the stream, reset for every event
	var dec chunkDecoder
	for events.Next() {
		data := events.Data()
		if bytes.HasPrefix(data, []byte("[DONE]")) {
			drain(res.Body)
			break
		}
		if chunk = (wireChunk{}); !dec.decode(data, &chunk) {
			chunk = wireChunk{}
			if err := lenient(json.Unmarshal(data, &chunk)); err != nil {
				return nil, c.wrap(fmt.Errorf("decoding a stream event: %w", err))
			}
		}
		if len(chunk.Error) > 0 {
			// The SDK's message for an in-band error, so callers see what they saw before.
			return nil, c.wrap(errors.New("received error while streaming: " + errorText(chunk.Error)))
		}
		if out.ID == "" {
			out.ID = chunk.ID
		}
		if chunk.Model != "" {
			out.Model = chunk.Model
		}
		if chunk.Usage != nil {
			out.Usage = chunk.Usage.usage()
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			if d := ch.Delta.Content; d != "" {
				text.WriteString(d)
				if onDelta != nil {
					onDelta(d)
				}
			}
			for _, tc := range ch.Delta.ToolCalls {
				call, ok := byIndex[tc.Index]
				if !ok {
					call = &ToolCall{}
					byIndex[tc.Index] = call
					calls = append(calls, call)
				}
				if tc.ID != "" {
					call.ID = tc.ID
				}
				if tc.Function.Name != "" {
					call.Name += tc.Function.Name
				}
				call.Arguments += tc.Function.Arguments
			}
			if ch.FinishReason != "" {
				out.FinishReason = ch.FinishReason
			}
		}
	}
	if err := events.Err(); err != nil {
		return nil, c.wrap(err)
	}
	out.Content = text.String()
	for _, call := range calls {
		out.ToolCalls = append(out.ToolCalls, *call)
	}
	return out, nil
}

// chatPath is Chat Completions, relative to the base URL.
const chatPath = "chat/completions"

// lenient drops a field-type mismatch: encoding/json then decodes everything else and leaves
// the field zero. openai-go's decoder, used before, also went past such fields (though it read a
// number sent for a string as its text).
func lenient(err error) error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) {
		return nil
	}
	return err
}

// errorText renders an in-band error as the SDK did: a string unquoted, null empty, anything
// else as JSON.
func errorText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	return string(raw)
}

// A tool call as the answers carry it (and as requests send it: encode.go).
type (
	wireToolCall struct {
		ID       string       `json:"id"`
		Type     string       `json:"type"`
		Function wireFunction `json:"function"`
	}
	wireFunction struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	}
)

// objectParams checks that a tool's parameters are a JSON object (or null or absent, which send
// none) and returns them for the body as they are.
func objectParams(p json.RawMessage) (json.RawMessage, error) {
	if len(p) == 0 {
		return nil, nil
	}
	if trimmed := bytes.TrimLeft(p, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(p) {
		return p, nil
	}
	// The rare failure (and null) goes the old way, for the same outcome and error text.
	var schema map[string]any
	if err := json.Unmarshal(p, &schema); err != nil {
		return nil, err
	}
	return nil, nil
}

// The answers, with only the fields used here.
type (
	wireCompletion struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content   string         `json:"content"`
				ToolCalls []wireToolCall `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage *wireUsage `json:"usage"`
	}
	wireChunk struct {
		ID      string            `json:"id"`
		Model   string            `json:"model"`
		Choices []wireChunkChoice `json:"choices"`
		Usage   *wireUsage        `json:"usage"`
		// Error is set (even to null) when the event is an in-band error.
		Error json.RawMessage `json:"error"`
	}
	wireChunkChoice struct {
		Index int64 `json:"index"`
		Delta struct {
			Content   string          `json:"content"`
			ToolCalls []wireDeltaCall `json:"tool_calls"`
		} `json:"delta"`
		FinishReason string `json:"finish_reason"`
	}
	wireDeltaCall struct {
		Index    int64        `json:"index"`
		ID       string       `json:"id"`
		Function wireFunction `json:"function"`
	}
	wireUsage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		TotalTokens         int64 `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	}
)

// usage is the zero Usage, Reported false, when the provider reported none (absent or null).
func (u *wireUsage) usage() Usage {
	if u == nil {
		return Usage{}
	}
	return Usage{
		PromptTokens:     int(u.PromptTokens),
		CompletionTokens: int(u.CompletionTokens),
		TotalTokens:      int(u.TotalTokens),
		CachedTokens:     int(u.PromptTokensDetails.CachedTokens),
		Reported:         true,
	}
}

// APIError is an error status the endpoint answered with (after any retries).
type APIError struct {
	StatusCode int
	Message    string
	BaseURL    string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("model endpoint %s answered %d %s: %s", e.BaseURL, e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// Retryable reports whether the status means "try again later" (429 or 5xx).
func (e *APIError) Retryable() bool {
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}

func (c *Client) wrap(err error) error {
	var apiErr *APIError
	if errors.As(err, &apiErr) {
		return apiErr
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("model call: %w", err)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnreachable, c.base, err)
}

// ErrUnreachable marks a call that got no HTTP answer at all (connection refused, reset, DNS).
var ErrUnreachable = errors.New("model endpoint is unreachable")

// Unavailable reports whether err means the endpoint could not serve the call: unreachable, or a
// 429/5xx status that outlasted the retries. Callers map it to UNAVAILABLE.
func Unavailable(err error) bool {
	var e *APIError
	if errors.As(err, &e) {
		return e.Retryable()
	}
	return errors.Is(err, ErrUnreachable)
}

// StatusCode returns the HTTP status an APIError in err's chain carries, or 0.
func StatusCode(err error) int {
	var e *APIError
	if errors.As(err, &e) {
		return e.StatusCode
	}
	return 0
}
