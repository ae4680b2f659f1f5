package model_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hermes-agent/hermes/internal/model"
)

// benchRequest is a realistic mid-conversation turn: a ~1.5 KB system prompt, six tools with
// schemas like the agent's own, and twenty messages of history with tool calls and results.
func benchRequest() model.Request {
	system := strings.Repeat("You are Hermes, a careful assistant. Answer briefly, use the tools when a fact is needed, never invent results, and say so when a tool fails. ", 11)
	schema := func(props string, required ...string) json.RawMessage {
		req, _ := json.Marshal(required)
		return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(req) + `,"additionalProperties":false}`)
	}
	tools := []model.Tool{
		{Name: "calculator", Description: "Evaluate an arithmetic expression exactly; supports + - * / ^ and parentheses.", Parameters: schema(`"expression":{"type":"string","description":"the expression, e.g. (2+3)*4"}`, "expression")},
		{Name: "get_weather", Description: "Current weather of a city.", Parameters: schema(`"city":{"type":"string","description":"city name"},"unit":{"type":"string","enum":["celsius","fahrenheit"]}`, "city")},
		{Name: "search_restaurants", Description: "Find restaurants near a place by cuisine and price.", Parameters: schema(`"near":{"type":"string"},"cuisine":{"type":"string"},"max_price":{"type":"integer","minimum":1,"maximum":4},"open_now":{"type":"boolean"}`, "near")},
		{Name: "book_table", Description: "Book a table at a restaurant.", Parameters: schema(`"restaurant_id":{"type":"string"},"time":{"type":"string","format":"date-time"},"party_size":{"type":"integer","minimum":1}`, "restaurant_id", "time", "party_size")},
		{Name: "remember", Description: "Store a fact about the user for later turns.", Parameters: schema(`"fact":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}`, "fact")},
		{Name: "web_search", Description: "Search the web and return the top results with titles, URLs and snippets.", Parameters: schema(`"query":{"type":"string"},"count":{"type":"integer","default":5}`, "query")},
	}
	msgs := []model.Message{{Role: model.RoleSystem, Content: system}}
	for i := range 4 {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			model.Message{Role: model.RoleUser, Content: fmt.Sprintf("What is %d * 37 + 12? And remind me what we said about dinner in \"北京\".", 100+i)},
			model.Message{Role: model.RoleAssistant, ToolCalls: []model.ToolCall{{ID: id, Name: "calculator", Arguments: fmt.Sprintf(`{"expression":"%d*37+12"}`, 100+i)}}},
			model.Message{Role: model.RoleTool, ToolCallID: id, Content: fmt.Sprintf(`{"result":%d}`, (100+i)*37+12)},
			model.Message{Role: model.RoleAssistant, Content: fmt.Sprintf("%d * 37 + 12 = %d. You wanted Sichuan food near the office on Friday <7pm>.", 100+i, (100+i)*37+12)},
		)
	}
	msgs = append(msgs,
		model.Message{Role: model.RoleUser, Content: "Thanks. One more: what is 12345 * 6789?"},
		model.Message{Role: model.RoleAssistant, Content: "Let me compute that.", ToolCalls: []model.ToolCall{{ID: "call_x", Name: "calculator", Arguments: `{"expression":"12345*6789"}`}}},
		model.Message{Role: model.RoleTool, ToolCallID: "call_x", Content: `{"result":83810205}`},
	)
	return model.Request{Messages: msgs, Tools: tools, MaxTokens: 1024}
}

// benchStream is the answer of a streaming turn: a few text pieces, then a tool call whose
// arguments arrive in fragments, the finish reason, usage and [DONE].
func benchStream() []byte {
	var b strings.Builder
	chunk := func(delta, finish string) {
		fin := "null"
		if finish != "" {
			fin = `"` + finish + `"`
		}
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1733000000,"model":"bench-model","system_fingerprint":"fp_1","choices":[{"index":0,"delta":%s,"logprobs":null,"finish_reason":%s}]}`+"\n\n", delta, fin)
	}
	chunk(`{"role":"assistant","content":""}`, "")
	for _, w := range []string{"12345", " *", " 6789", " is", " a", " job", " for", " the", " calculator."} {
		chunk(`{"content":"`+w+`"}`, "")
	}
	chunk(`{"tool_calls":[{"index":0,"id":"call_y","type":"function","function":{"name":"calculator","arguments":""}}]}`, "")
	for _, a := range []string{`{\"expr`, `ession\":`, `\"12345*`, `6789\"}`} {
		chunk(`{"tool_calls":[{"index":0,"function":{"arguments":"`+a+`"}}]}`, "")
	}
	chunk(`{}`, "tool_calls")
	b.WriteString(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1733000000,"model":"bench-model","choices":[],"usage":{"prompt_tokens":2100,"completion_tokens":40,"total_tokens":2140,"prompt_tokens_details":{"cached_tokens":1920}}}` + "\n\n")
	b.WriteString("data: [DONE]\n\n")
	return []byte(b.String())
}

const benchCompletion = `{"id":"chatcmpl-bench","object":"chat.completion","created":1733000000,"model":"bench-model","system_fingerprint":"fp_1",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"12345 * 6789 is a job for the calculator.","refusal":null,"annotations":[],` +
	`"tool_calls":[{"id":"call_y","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"12345*6789\"}"}}]},"logprobs":null,"finish_reason":"tool_calls"}],` +
	`"usage":{"prompt_tokens":2100,"completion_tokens":40,"total_tokens":2140,"prompt_tokens_details":{"cached_tokens":1920,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}},"service_tier":"default"}`

// benchServer answers every request with the canned stream or completion, after reading the
// body as a real server would.
func benchServer(b *testing.B) *model.Client {
	b.Helper()
	stream := benchStream()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write(stream)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, benchCompletion)
	}))
	b.Cleanup(srv.Close)
	c, err := model.New(model.Config{BaseURL: srv.URL + "/v1", Model: "bench-model", APIKey: "sk-bench"})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func BenchmarkStream(b *testing.B) {
	c := benchServer(b)
	req := benchRequest()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		n := 0
		out, err := c.Stream(ctx, req, func(string) { n++ })
		if err != nil {
			b.Fatal(err)
		}
		if n != 9 || len(out.ToolCalls) != 1 || !out.Usage.Reported {
			b.Fatalf("deltas=%d response=%+v, want 9 deltas, one call and usage", n, out)
		}
	}
}

func BenchmarkComplete(b *testing.B) {
	c := benchServer(b)
	req := benchRequest()
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		out, err := c.Complete(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if len(out.ToolCalls) != 1 || !out.Usage.Reported {
			b.Fatalf("response=%+v, want one call and usage", out)
		}
	}
}
