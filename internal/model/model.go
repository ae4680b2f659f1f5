// Package model is Hermes' client for OpenAI-compatible Chat Completions endpoints (OpenAI,
// DeepSeek, Qwen, vLLM, Ollama, llama.cpp server …), built on the official openai-go SDK:
// messages with roles, tool definitions and (parallel) tool calls, JSON mode, streaming with a
// text-delta callback, usage including cached tokens, and retries with backoff on 429 and 5xx.
package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
)

// ErrNotConfigured is returned by New when no endpoint or model name is configured. Callers map
// it to FAILED_PRECONDITION.
var ErrNotConfigured = errors.New("no model is configured: set HERMES_MODEL_BASE_URL (an OpenAI-compatible endpoint such as https://api.openai.com/v1) and HERMES_MODEL")

// DefaultMaxRetries is how often a request is retried after a 408, 409, 429, 5xx or connection
// failure when Config.MaxRetries is 0. The SDK backs off exponentially from 0.5 s with jitter and
// honours Retry-After / Retry-After-Ms.
const DefaultMaxRetries = 2

// Config says which endpoint and model to use.
type Config struct {
	// BaseURL is the OpenAI-compatible base URL, ending in /v1 for most providers.
	BaseURL string
	// APIKey is sent as a bearer token; empty sends none (local servers).
	APIKey string
	// Model is the default model name; a Request may override it.
	Model string
	// MaxRetries is the number of retries after the first attempt: 0 means DefaultMaxRetries,
	// a negative value means none.
	MaxRetries int
	// Timeout bounds each attempt (not the whole call with its retries); 0 means no limit
	// beyond the caller's context.
	Timeout time.Duration
	// HTTPClient replaces the default HTTP client, for example to add tracing.
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
// tool message answers the call named by ToolCallID.
type Message struct {
	Role       Role
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
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
	api   openai.Client
	model string
	base  string
	inst  instruments
}

// New returns a client, or ErrNotConfigured when the base URL or the model name is empty.
func New(cfg Config) (*Client, error) {
	if strings.TrimSpace(cfg.BaseURL) == "" || strings.TrimSpace(cfg.Model) == "" {
		return nil, ErrNotConfigured
	}
	retries := cfg.MaxRetries
	switch {
	case retries == 0:
		retries = DefaultMaxRetries
	case retries < 0:
		retries = 0
	}
	opts := []option.RequestOption{
		option.WithBaseURL(cfg.BaseURL),
		option.WithMaxRetries(retries),
	}
	// The SDK would otherwise read OPENAI_API_KEY by itself; the key is the caller's decision.
	opts = append(opts, option.WithAPIKey(cfg.APIKey))
	if cfg.Timeout > 0 {
		opts = append(opts, option.WithRequestTimeout(cfg.Timeout))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, option.WithHTTPClient(cfg.HTTPClient))
	}
	return &Client{api: openai.NewClient(opts...), model: cfg.Model, base: cfg.BaseURL, inst: newInstruments()}, nil
}

// Model is the default model name.
func (c *Client) Model() string { return c.model }

// BaseURL is the endpoint the client calls.
func (c *Client) BaseURL() string { return c.base }

// Complete sends the request and waits for the whole answer.
func (c *Client) Complete(ctx context.Context, req Request) (out *Response, err error) {
	ctx, end := c.observe(ctx, req, false)
	defer func() { end(out, err) }()
	params, err := c.params(req)
	if err != nil {
		return nil, err
	}
	cc, err := c.api.Chat.Completions.New(ctx, params)
	if err != nil {
		return nil, c.wrap(err)
	}
	out = &Response{ID: cc.ID, Model: cc.Model, Usage: usageOf(cc.Usage, cc.JSON.Usage.Valid())}
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
	params, err := c.params(req)
	if err != nil {
		return nil, err
	}
	params.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	st := c.api.Chat.Completions.NewStreaming(ctx, params)
	defer func() { _ = st.Close() }()

	out = &Response{}
	var text strings.Builder
	// Tool calls arrive in fragments keyed by index: the first fragment has id and name, the
	// rest append to the arguments.
	var calls []*ToolCall
	byIndex := map[int64]*ToolCall{}
	for st.Next() {
		chunk := st.Current()
		if out.ID == "" {
			out.ID = chunk.ID
		}
		if chunk.Model != "" {
			out.Model = chunk.Model
		}
		if chunk.JSON.Usage.Valid() {
			out.Usage = usageOf(chunk.Usage, true)
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
	if err := st.Err(); err != nil {
		return nil, c.wrap(err)
	}
	out.Content = text.String()
	for _, call := range calls {
		out.ToolCalls = append(out.ToolCalls, *call)
	}
	return out, nil
}

func (c *Client) params(req Request) (openai.ChatCompletionNewParams, error) {
	name := req.Model
	if name == "" {
		name = c.model
	}
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(name)}
	for i, m := range req.Messages {
		mp, err := messageParam(m)
		if err != nil {
			return p, fmt.Errorf("messages[%d]: %w", i, err)
		}
		p.Messages = append(p.Messages, mp)
	}
	for i, t := range req.Tools {
		fd := shared.FunctionDefinitionParam{Name: t.Name}
		if t.Description != "" {
			fd.Description = openai.String(t.Description)
		}
		if len(t.Parameters) > 0 {
			var schema map[string]any
			if err := json.Unmarshal(t.Parameters, &schema); err != nil {
				return p, fmt.Errorf("tools[%d] %s: parameters are not a JSON object: %w", i, t.Name, err)
			}
			fd.Parameters = schema
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	if len(req.Tools) > 0 && req.SerialToolCalls {
		p.ParallelToolCalls = openai.Bool(false)
	}
	if req.JSON {
		p.ResponseFormat = openai.ChatCompletionNewParamsResponseFormatUnion{OfJSONObject: &shared.ResponseFormatJSONObjectParam{}}
	}
	if req.MaxTokens > 0 {
		p.MaxCompletionTokens = openai.Int(int64(req.MaxTokens))
	}
	if req.Temperature != nil {
		p.Temperature = openai.Float(*req.Temperature)
	}
	return p, nil
}

func messageParam(m Message) (openai.ChatCompletionMessageParamUnion, error) {
	switch m.Role {
	case RoleSystem:
		return openai.SystemMessage(m.Content), nil
	case RoleUser:
		return openai.UserMessage(m.Content), nil
	case RoleTool:
		if m.ToolCallID == "" {
			return openai.ChatCompletionMessageParamUnion{}, errors.New("a tool message needs the id of the call it answers")
		}
		return openai.ToolMessage(m.Content, m.ToolCallID), nil
	case RoleAssistant:
		a := openai.ChatCompletionAssistantMessageParam{}
		if m.Content != "" || len(m.ToolCalls) == 0 {
			a.Content.OfString = openai.String(m.Content)
		}
		for _, tc := range m.ToolCalls {
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       tc.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: tc.Name, Arguments: tc.Arguments},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	default:
		return openai.ChatCompletionMessageParamUnion{}, fmt.Errorf("unknown role %q", m.Role)
	}
}

func usageOf(u openai.CompletionUsage, reported bool) Usage {
	if !reported {
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
	err        error
}

func (e *APIError) Error() string {
	return fmt.Sprintf("model endpoint %s answered %d %s: %s", e.BaseURL, e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

func (e *APIError) Unwrap() error { return e.err }

// Retryable reports whether the status means "try again later" (429 or 5xx).
func (e *APIError) Retryable() bool {
	return e.StatusCode == http.StatusTooManyRequests || e.StatusCode >= 500
}

func (c *Client) wrap(err error) error {
	var apiErr *openai.Error
	if errors.As(err, &apiErr) {
		msg := apiErr.Message
		if msg == "" {
			msg = strings.TrimSpace(apiErr.RawJSON())
		}
		return &APIError{StatusCode: apiErr.StatusCode, Message: msg, BaseURL: c.base, err: err}
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
