package model_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermes-agent/hermes/internal/model"
)

// rawServer answers every request with body under the given content type, to feed the client
// answers the scripted model would never produce.
func rawServer(t *testing.T, contentType, body string) *model.Client {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	c, err := model.New(model.Config{BaseURL: srv.URL + "/v1", Model: "m", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		b.WriteString("data: " + e + "\n\n")
	}
	return b.String()
}

var hi = model.Request{Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}}

// TestStreamDecoding feeds raw event streams to Stream. The expectations are what the client
// produced when openai-go decoded the chunks.
func TestStreamDecoding(t *testing.T) {
	tests := []struct {
		name       string
		body       string
		want       *model.Response
		wantDeltas []string
		wantErr    string
	}{
		{
			name: "text, interleaved tool calls, usage after null usage",
			body: ": keep-alive\n\n" + sse(
				`{"id":"c1","model":"m-1","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":null}`,
				`{"id":"c1","model":"m-1","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}],"usage":null}`,
				`{"id":"c1","model":"m-1","choices":[{"index":0,"delta":{"content":"lo \"世界\""},"logprobs":null}]}`,
				`{"id":"c1","model":"m-1","choices":[{"index":1,"delta":{"content":"other choice"}}]}`,
				`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"book","arguments":""}}]}}]}`,
				`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"search","arguments":"{\"q\":"}}]}}]}`,
				`{"id":"c1","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{}"}},{"index":0,"function":{"arguments":"\"川菜\"}"}}]}}]}`,
				`{"id":"c2","model":"m-2","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
				`{"id":"c2","choices":[],"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":4}}}`,
				`[DONE]`,
				`{"id":"after-done","choices":[{"index":0,"delta":{"content":"ignored"}}]}`,
			),
			want: &model.Response{
				ID: "c1", Model: "m-2", Content: `Hello "世界"`, FinishReason: "tool_calls",
				ToolCalls: []model.ToolCall{{ID: "call_b", Name: "book", Arguments: "{}"}, {ID: "call_a", Name: "search", Arguments: `{"q":"川菜"}`}},
				Usage:     model.Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15, CachedTokens: 4, Reported: true},
			},
			wantDeltas: []string{"Hel", `lo "世界"`},
		},
		{
			name:       "no usage, no [DONE], event lines",
			body:       "event: message\n" + sse(`{"id":"c1","model":"m","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}`),
			want:       &model.Response{ID: "c1", Model: "m", Content: "ok", FinishReason: "stop"},
			wantDeltas: []string{"ok"},
		},
		{
			name:       "a field of the wrong type is skipped",
			body:       sse(`{"id":"c1","created":"yesterday","model":"m","choices":[{"index":"0","logprobs":7,"delta":{"content":"ok"},"finish_reason":"stop"}]}`, `[DONE]`),
			want:       &model.Response{ID: "c1", Model: "m", Content: "ok", FinishReason: "stop"},
			wantDeltas: []string{"ok"},
		},
		{
			name:       "in-band error",
			body:       sse(`{"id":"c1","choices":[{"index":0,"delta":{"content":"par"}}]}`, `{"error":{"message":"overloaded","code":"server_error"}}`),
			wantDeltas: []string{"par"},
			wantErr:    `received error while streaming: {"message":"overloaded","code":"server_error"}`,
		},
		{
			name:    "in-band error as a string",
			body:    sse(`{"error":"model crashed"}`),
			wantErr: "received error while streaming: model crashed",
		},
		{
			name:    "invalid JSON",
			body:    sse(`{"id":"c1","choices":[`),
			wantErr: "unexpected end of JSON input",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := rawServer(t, "text/event-stream", tc.body)
			var deltas []string
			got, err := c.Stream(context.Background(), hi, func(d string) { deltas = append(deltas, d) })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || model.StatusCode(err) != 0 {
					t.Errorf("err = %v, want one containing %q and no status", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantDeltas, deltas); diff != "" {
				t.Errorf("deltas (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCompleteDecoding(t *testing.T) {
	tests := []struct {
		name        string
		contentType string
		body        string
		want        *model.Response
		wantErr     string
	}{
		{
			name:        "tool calls with null content and null usage",
			contentType: "application/json; charset=utf-8",
			body: `{"id":"c1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[` +
				`{"id":"a","type":"function","function":{"name":"search","arguments":"{\"q\":\"x\"}"}},` +
				`{"id":"b","type":"custom","custom":{"name":"grammar","input":"x"}},` +
				`{"id":"c","function":{"name":"book","arguments":""}}]},"finish_reason":"tool_calls"}],"usage":null}`,
			want: &model.Response{ID: "c1", Model: "m", FinishReason: "tool_calls", ToolCalls: []model.ToolCall{
				{ID: "a", Name: "search", Arguments: `{"q":"x"}`}, {ID: "c", Name: "book"},
			}},
		},
		{
			name:        "text with usage and a field of the wrong type",
			contentType: "application/json",
			body: `{"id":"c1","created":"today","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"done <ok> & \u00e9"},"finish_reason":"stop"}],` +
				`"usage":{"prompt_tokens":7,"completion_tokens":2,"total_tokens":9}}`,
			want: &model.Response{ID: "c1", Model: "m", Content: "done <ok> & é", FinishReason: "stop", Usage: model.Usage{PromptTokens: 7, CompletionTokens: 2, TotalTokens: 9, Reported: true}},
		},
		{
			name:        "no choice",
			contentType: "application/json",
			body:        `{"id":"c1","model":"m","choices":[]}`,
			wantErr:     "answered without a choice",
		},
		{
			name:        "not JSON",
			contentType: "text/plain",
			body:        "hello",
			wantErr:     "content-type 'text/plain'",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := rawServer(t, tc.contentType, tc.body)
			got, err := c.Complete(context.Background(), hi)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRequestHeaders checks that the pre-encoded body still goes out with the SDK's headers:
// the bearer key, the JSON content type, and the body as encoded (one "stream" key).
func TestRequestHeaders(t *testing.T) {
	type seen struct {
		auth, contentType string
		streamKeys        int
	}
	got := make(chan seen, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.Header.Get("Authorization"), r.Header.Get("Content-Type"), strings.Count(string(body), `"stream"`)}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, sse(`{"id":"c1","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}`, `[DONE]`))
	}))
	defer srv.Close()
	for _, key := range []string{"sk-test", ""} {
		c, err := model.New(model.Config{BaseURL: srv.URL + "/v1", Model: "m", APIKey: key})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Stream(context.Background(), hi, nil); err != nil {
			t.Fatal(err)
		}
		want := seen{contentType: "application/json", streamKeys: 1}
		if key != "" {
			want.auth = "Bearer " + key
		}
		if s := <-got; s != want {
			t.Errorf("key %q: request had %+v, want %+v", key, s, want)
		}
	}
}
