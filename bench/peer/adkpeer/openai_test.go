package main

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"google.golang.org/adk/model"
	"google.golang.org/genai"
)

// TestChatParams checks the wire request a turn's second model call becomes: the system
// instruction, the user's text, the model's function call, the function's response and the
// tool declaration.
func TestChatParams(t *testing.T) {
	calc, err := calculator()
	if err != nil {
		t.Fatal(err)
	}
	decl := calc.(interface {
		Declaration() *genai.FunctionDeclaration
	}).Declaration()
	req := &model.LLMRequest{
		Config: &genai.GenerateContentConfig{
			SystemInstruction: genai.NewContentFromText("be brief", genai.RoleUser),
			Tools:             []*genai.Tool{{FunctionDeclarations: []*genai.FunctionDeclaration{decl}}},
		},
		Contents: []*genai.Content{
			genai.NewContentFromText("请帮我算一下 2*3+1。", genai.RoleUser),
			{Role: genai.RoleModel, Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{ID: "call_1", Name: "calculator", Args: map[string]any{"expression": "2*3+1"}}}}},
			{Role: genai.RoleUser, Parts: []*genai.Part{{FunctionResponse: &genai.FunctionResponse{ID: "call_1", Name: "calculator", Response: map[string]any{"result": 7}}}}},
		},
	}
	p, err := chatParams(req, "m")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"model": "m",
		"messages": []any{
			map[string]any{"role": "system", "content": "be brief"},
			map[string]any{"role": "user", "content": "请帮我算一下 2*3+1。"},
			map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{
				"id": "call_1", "type": "function",
				"function": map[string]any{"name": "calculator", "arguments": `{"expression":"2*3+1"}`},
			}}},
			map[string]any{"role": "tool", "tool_call_id": "call_1", "content": `{"result":7}`},
		},
	}
	tools := got["tools"]
	delete(got, "tools")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("request (-want +got):\n%s", diff)
	}
	fn, _ := tools.([]any)
	if len(fn) != 1 {
		t.Fatalf("tools %v, want the calculator", tools)
	}
	f := fn[0].(map[string]any)["function"].(map[string]any)
	if f["name"] != "calculator" || f["parameters"].(map[string]any)["properties"].(map[string]any)["expression"] == nil {
		t.Errorf("tool %v: want calculator with an expression parameter", f)
	}
}

func TestLLMResponse(t *testing.T) {
	var resp openai.ChatCompletion
	body := `{"id":"x","object":"chat.completion","created":1,"model":"scripted:m","choices":[{"index":0,"finish_reason":"tool_calls",
		"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"calculator","arguments":"{\"expression\":\"2*3\"}"}}]}}],
		"usage":{"prompt_tokens":200,"completion_tokens":12,"total_tokens":212,"prompt_tokens_details":{"cached_tokens":100}}}`
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatal(err)
	}
	got, err := llmResponse(&resp)
	if err != nil {
		t.Fatal(err)
	}
	want := &model.LLMResponse{
		Content: &genai.Content{Role: genai.RoleModel, Parts: []*genai.Part{{FunctionCall: &genai.FunctionCall{
			ID: "call_1", Name: "calculator", Args: map[string]any{"expression": "2*3"},
		}}}},
		UsageMetadata: &genai.GenerateContentResponseUsageMetadata{PromptTokenCount: 200, CandidatesTokenCount: 12, TotalTokenCount: 212, CachedContentTokenCount: 100},
		ModelVersion:  "scripted:m", TurnComplete: true, FinishReason: genai.FinishReasonStop,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	if _, err := llmResponse(&openai.ChatCompletion{}); err == nil {
		t.Error("an answer without choices: want an error")
	}
}
