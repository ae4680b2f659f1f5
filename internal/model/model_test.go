package model_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/model/scripted"
)

// start runs a scripted model and returns a production client pointed at it.
func start(t *testing.T, h scripted.Handler, cfg model.Config) (*model.Client, *scripted.Server) {
	t.Helper()
	srv, err := scripted.New(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	cfg.BaseURL = srv.URL()
	if cfg.Model == "" {
		cfg.Model = "test-model"
	}
	c, err := model.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

var weatherTool = model.Tool{
	Name:        "get_weather",
	Description: "current weather of a city",
	Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`),
}

func TestNewNotConfigured(t *testing.T) {
	for _, cfg := range []model.Config{{}, {BaseURL: "http://x/v1"}, {Model: "m"}, {BaseURL: "  ", Model: "m"}} {
		if _, err := model.New(cfg); !errors.Is(err, model.ErrNotConfigured) {
			t.Errorf("New(%+v) = %v, want ErrNotConfigured", cfg, err)
		}
	}
}

// TestCompleteAndStream runs every case both as a plain and as a streaming call: the answer
// must be the same either way.
func TestCompleteAndStream(t *testing.T) {
	tests := []struct {
		name  string
		reply scripted.Reply
		want  model.Response
	}{
		{
			name:  "text with reported usage",
			reply: scripted.Reply{Text: "It is sunny in Beijing today, 26 degrees.", Usage: &scripted.Usage{PromptTokens: 120, CompletionTokens: 12, CachedTokens: 64}},
			want:  model.Response{Content: "It is sunny in Beijing today, 26 degrees.", FinishReason: "stop", Usage: model.Usage{PromptTokens: 120, CompletionTokens: 12, TotalTokens: 132, CachedTokens: 64, Reported: true}},
		},
		{
			name: "parallel tool calls",
			reply: scripted.Calls(
				scripted.ToolCall{ID: "call_a", Name: "get_weather", Arguments: `{"city":"北京"}`},
				scripted.ToolCall{ID: "call_b", Name: "get_weather", Arguments: `{"city":"上海"}`},
			),
			want: model.Response{FinishReason: "tool_calls", ToolCalls: []model.ToolCall{
				{ID: "call_a", Name: "get_weather", Arguments: `{"city":"北京"}`},
				{ID: "call_b", Name: "get_weather", Arguments: `{"city":"上海"}`},
			}},
		},
		{
			name:  "no usage reported",
			reply: scripted.Reply{Text: "ok", OmitUsage: true},
			want:  model.Response{Content: "ok", FinishReason: "stop"},
		},
	}
	for _, tc := range tests {
		for _, stream := range []bool{false, true} {
			name := tc.name + "/complete"
			if stream {
				name = tc.name + "/stream"
			}
			t.Run(name, func(t *testing.T) {
				c, srv := start(t, func(scripted.Request) scripted.Reply { return tc.reply }, model.Config{})
				req := model.Request{
					Messages: []model.Message{{Role: model.RoleSystem, Content: "be brief"}, {Role: model.RoleUser, Content: "weather?"}},
					Tools:    []model.Tool{weatherTool},
				}
				var got *model.Response
				var err error
				var deltas []string
				if stream {
					got, err = c.Stream(context.Background(), req, func(d string) { deltas = append(deltas, d) })
				} else {
					got, err = c.Complete(context.Background(), req)
				}
				if err != nil {
					t.Fatal(err)
				}
				want := tc.want
				want.Model = "scripted:test-model"
				// Usage the script did not fix is counted by the scripted model; check it is
				// reported and plausible, then compare the rest exactly.
				if tc.reply.Usage == nil && !tc.reply.OmitUsage {
					if !got.Usage.Reported || got.Usage.PromptTokens == 0 {
						t.Errorf("usage = %+v, want counted usage", got.Usage)
					}
					got.Usage = model.Usage{}
				}
				if diff := cmp.Diff(want, *got, cmp.FilterPath(func(p cmp.Path) bool { return p.String() == "ID" }, cmp.Ignore())); diff != "" {
					t.Errorf("response (-want +got):\n%s", diff)
				}
				if stream && tc.want.Content != "" {
					if strings.Join(deltas, "") != tc.want.Content || (len(tc.want.Content) > 20 && len(deltas) < 2) {
						t.Errorf("deltas = %q, want several pieces that join to the content", deltas)
					}
				}
				reqs := srv.Requests()
				if len(reqs) != 1 {
					t.Fatalf("server saw %d requests, want 1", len(reqs))
				}
				r := reqs[0]
				if r.Stream != stream || (stream && !r.IncludeUsage) {
					t.Errorf("stream=%v include_usage=%v, want stream=%v with usage", r.Stream, r.IncludeUsage, stream)
				}
				wantTools := []scripted.Tool{{Name: weatherTool.Name, Description: weatherTool.Description, Parameters: weatherTool.Parameters}}
				if diff := cmp.Diff(wantTools, r.Tools, cmp.Comparer(jsonEqual)); diff != "" {
					t.Errorf("tools sent (-want +got):\n%s", diff)
				}
				if r.ParallelToolCalls != nil {
					t.Errorf("parallel_tool_calls = %v, want it left to the provider", *r.ParallelToolCalls)
				}
			})
		}
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return cmp.Equal(x, y)
}

func TestMessagesOnTheWire(t *testing.T) {
	c, srv := start(t, scripted.Sequence(scripted.Text(`{"memories":[]}`)), model.Config{})
	temp := 0.0
	_, err := c.Complete(context.Background(), model.Request{
		Model: "other-model",
		Messages: []model.Message{
			{Role: model.RoleSystem, Content: "sys"},
			{Role: model.RoleUser, Content: "book it"},
			{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: "c1", Name: "search", Arguments: `{"q":"川菜"}`}, {ID: "c2", Name: "book", Arguments: `{}`}}},
			{Role: model.RoleTool, ToolCallID: "c1", Content: `{"success":true}`},
			{Role: model.RoleTool, ToolCallID: "c2", Content: `{"success":false}`},
			{Role: model.RoleAssistant, Content: "done"},
		},
		Tools:           []model.Tool{weatherTool},
		SerialToolCalls: true,
		JSON:            true,
		Temperature:     &temp,
		MaxTokens:       50,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := srv.Requests()[0]
	want := []scripted.Message{
		{Role: "system", Content: "sys"},
		{Role: "user", Content: "book it"},
		{Role: "assistant", ToolCalls: []scripted.ToolCall{{ID: "c1", Name: "search", Arguments: `{"q":"川菜"}`}, {ID: "c2", Name: "book", Arguments: `{}`}}},
		{Role: "tool", ToolCallID: "c1", Content: `{"success":true}`},
		{Role: "tool", ToolCallID: "c2", Content: `{"success":false}`},
		{Role: "assistant", Content: "done"},
	}
	if diff := cmp.Diff(want, r.Messages); diff != "" {
		t.Errorf("messages (-want +got):\n%s", diff)
	}
	if r.Model != "other-model" || !r.JSON || r.ParallelToolCalls == nil || *r.ParallelToolCalls {
		t.Errorf("model=%q json=%v parallel=%v, want other-model, JSON mode, parallel_tool_calls=false", r.Model, r.JSON, r.ParallelToolCalls)
	}
	var raw map[string]any
	if err := json.Unmarshal(r.Raw, &raw); err != nil {
		t.Fatal(err)
	}
	if raw["temperature"] != 0.0 || raw["max_completion_tokens"] != 50.0 {
		t.Errorf("temperature=%v max_completion_tokens=%v, want 0 and 50", raw["temperature"], raw["max_completion_tokens"])
	}
}

func TestInvalidRequest(t *testing.T) {
	c, srv := start(t, scripted.Sequence(), model.Config{})
	for _, req := range []model.Request{
		{Messages: []model.Message{{Role: "wizard", Content: "x"}}},
		{Messages: []model.Message{{Role: model.RoleTool, Content: "x"}}},
		{Messages: []model.Message{{Role: model.RoleUser, Content: "x"}}, Tools: []model.Tool{{Name: "t", Parameters: json.RawMessage(`[1`)}}},
	} {
		if _, err := c.Complete(context.Background(), req); err == nil {
			t.Errorf("Complete(%+v) succeeded, want an error", req)
		}
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("server saw %d requests for invalid input, want 0", n)
	}
}

func TestRetriesAndErrors(t *testing.T) {
	quick := time.Millisecond
	tests := []struct {
		name        string
		replies     []scripted.Reply
		retries     int
		wantStatus  int
		wantUnavail bool
		wantCalls   int
	}{
		{
			name:      "429 then 503 then success",
			replies:   []scripted.Reply{{Status: 429, RetryAfter: quick}, {Status: 503, RetryAfter: quick}, scripted.Text("ok")},
			wantCalls: 3,
		},
		{
			name:        "5xx outlasts the retries",
			replies:     []scripted.Reply{{Status: 500, RetryAfter: quick}, {Status: 502, RetryAfter: quick}, {Status: 503, RetryAfter: quick, Message: "overloaded"}},
			wantStatus:  503,
			wantUnavail: true,
			wantCalls:   3,
		},
		{
			name:       "400 is not retried",
			replies:    []scripted.Reply{{Status: 400, Message: "bad model"}, scripted.Text("never")},
			wantStatus: 400,
			wantCalls:  1,
		},
		{
			name:        "no retries when disabled",
			replies:     []scripted.Reply{{Status: 503, RetryAfter: quick}, scripted.Text("never")},
			retries:     -1,
			wantStatus:  503,
			wantUnavail: true,
			wantCalls:   1,
		},
	}
	for _, tc := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				c, srv := start(t, scripted.Sequence(tc.replies...), model.Config{MaxRetries: tc.retries})
				req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}
				var err error
				if stream {
					_, err = c.Stream(context.Background(), req, nil)
				} else {
					_, err = c.Complete(context.Background(), req)
				}
				if got := model.StatusCode(err); got != tc.wantStatus {
					t.Errorf("status = %d (err %v), want %d", got, err, tc.wantStatus)
				}
				if got := model.Unavailable(err); got != tc.wantUnavail {
					t.Errorf("Unavailable = %v (err %v), want %v", got, err, tc.wantUnavail)
				}
				if got := len(srv.Requests()); got != tc.wantCalls {
					t.Errorf("server saw %d requests, want %d", got, tc.wantCalls)
				}
				if tc.wantStatus != 0 && !strings.Contains(err.Error(), srv.URL()) {
					t.Errorf("error %q does not name the endpoint", err)
				}
			})
		}
	}
}

func TestEndpointDown(t *testing.T) {
	srv, err := scripted.New(scripted.Sequence())
	if err != nil {
		t.Fatal(err)
	}
	url := srv.URL()
	srv.Close()
	c, err := model.New(model.Config{BaseURL: url, Model: "m", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Complete(context.Background(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
	if !errors.Is(err, model.ErrUnreachable) || !model.Unavailable(err) {
		t.Errorf("err = %v, want ErrUnreachable", err)
	}
}

func TestDroppedConnection(t *testing.T) {
	c, srv := start(t, scripted.Sequence(scripted.Reply{Drop: true}, scripted.Text("second try")), model.Config{})
	got, err := c.Complete(context.Background(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatal(err)
	}
	if got.Content != "second try" || len(srv.Requests()) != 2 {
		t.Errorf("content %q after %d requests, want the retry's answer after 2", got.Content, len(srv.Requests()))
	}
}

func TestCancelAndTimeout(t *testing.T) {
	slow := scripted.Reply{Text: "late", Delay: 10 * time.Second}
	t.Run("cancel", func(t *testing.T) {
		c, _ := start(t, func(scripted.Request) scripted.Reply { return slow }, model.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := c.Stream(ctx, model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}, nil)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	})
	t.Run("cancel mid-stream", func(t *testing.T) {
		c, _ := start(t, func(scripted.Request) scripted.Reply {
			return scripted.Reply{Text: strings.Repeat("word ", 200), ChunkDelay: 20 * time.Millisecond}
		}, model.Config{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		n := 0
		_, err := c.Stream(ctx, model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}, func(string) {
			n++
			if n == 3 {
				cancel()
			}
		})
		if err == nil || n >= 60 {
			t.Errorf("err = %v after %d deltas, want cancellation soon after the 3rd", err, n)
		}
	})
	t.Run("per-attempt timeout", func(t *testing.T) {
		c, srv := start(t, func(scripted.Request) scripted.Reply { return slow }, model.Config{Timeout: 100 * time.Millisecond, MaxRetries: -1})
		_, err := c.Complete(context.Background(), model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
		if err == nil {
			t.Fatal("want a timeout error")
		}
		if len(srv.Requests()) != 1 {
			t.Errorf("server saw %d requests, want 1", len(srv.Requests()))
		}
	})
}

func TestSequenceExhausted(t *testing.T) {
	c, srv := start(t, scripted.Sequence(scripted.Text("one")), model.Config{})
	req := model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}
	if _, err := c.Complete(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	_, err := c.Complete(context.Background(), req)
	if model.StatusCode(err) != http.StatusInternalServerError || !strings.Contains(err.Error(), "script") {
		t.Errorf("err = %v, want a 500 saying the script ran out", err)
	}
	if n := len(srv.Requests()); n != 2 {
		t.Errorf("server saw %d requests, want 2 (an exhausted script is not retried)", n)
	}
}
