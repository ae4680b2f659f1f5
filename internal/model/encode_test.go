package model

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/shared"
)

// legacyParams is how the client built the request with openai-go's params before it encoded
// the body itself; it stays here as the reference the new encoding must match.
func legacyParams(defaultModel string, req Request) (openai.ChatCompletionNewParams, error) {
	name := req.Model
	if name == "" {
		name = defaultModel
	}
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(name)}
	for i, m := range req.Messages {
		mp, err := legacyMessage(m)
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

func legacyMessage(m Message) (openai.ChatCompletionMessageParamUnion, error) {
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

// legacyBody is the body openai-go sent for req: Stream added stream_options to the params and
// NewStreaming set "stream": true.
func legacyBody(t *testing.T, defaultModel string, req Request, stream bool) any {
	t.Helper()
	p, err := legacyParams(defaultModel, req)
	if err != nil {
		t.Fatalf("legacy params: %v", err)
	}
	if stream {
		p.StreamOptions = openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}
	}
	b, err := p.MarshalJSON()
	if err != nil {
		t.Fatalf("legacy encoding: %v", err)
	}
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	if stream {
		v["stream"] = true
	}
	return v
}

func TestEncodeMatchesSDK(t *testing.T) {
	zero, warm := 0.0, 0.7
	weather := Tool{
		Name:        "get_weather",
		Description: "current weather of a city",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"city":{"type":"string","description":"名字 <b>&amp;</b>"},"unit":{"enum":["c","f"]}},"required":["city"]}`),
	}
	tests := []struct {
		name string
		req  Request
	}{
		{name: "one user message", req: Request{Messages: []Message{{Role: RoleUser, Content: "hi"}}}},
		{name: "empty contents", req: Request{Messages: []Message{
			{Role: RoleSystem}, {Role: RoleUser}, {Role: RoleAssistant}, {Role: RoleTool, ToolCallID: "c1"},
		}}},
		{name: "every role and tool calls", req: Request{
			Model: "other-model",
			Messages: []Message{
				{Role: RoleSystem, Content: "be brief"},
				{Role: RoleUser, Content: "book it"},
				{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c1", Name: "search", Arguments: `{"q":"川菜"}`}, {ID: "c2", Name: "book", Arguments: `{}`}}},
				{Role: RoleTool, ToolCallID: "c1", Content: `{"success":true}`},
				{Role: RoleTool, ToolCallID: "c2", Content: `{"success":false}`},
				{Role: RoleAssistant, Content: "let me check", ToolCalls: []ToolCall{{ID: "c3", Name: "search"}}},
				{Role: RoleTool, ToolCallID: "c3"},
				{Role: RoleAssistant, Content: "done"},
			},
		}},
		{name: "unicode and escapes", req: Request{Messages: []Message{
			{Role: RoleSystem, Content: "quote \" backslash \\ newline \n tab \t nul \x00 bell \a <script>&amp;</script> \u2028\u2029"},
			{Role: RoleUser, Content: "北京天气怎么样？😀 émoji, invalid utf-8 \xff\xfe end"},
			{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: "c\"1", Name: "na\\me", Arguments: "{\"s\":\"\\u00e9\\n\"} not json \x01"}}},
			{Role: RoleTool, ToolCallID: "c\"1", Content: "résultat\r\n"},
		}}},
		{name: "tools, default parallel", req: Request{
			Messages: []Message{{Role: RoleUser, Content: "weather?"}},
			Tools:    []Tool{weather, {Name: "no_params"}, {Name: "null_params", Description: "d", Parameters: json.RawMessage(`null`)}, {Name: "spaced", Parameters: json.RawMessage(" \n{ \"type\" : \"object\" }\n")}},
		}},
		{name: "serial tool calls", req: Request{Messages: []Message{{Role: RoleUser, Content: "x"}}, Tools: []Tool{weather}, SerialToolCalls: true}},
		{name: "serial without tools sends nothing", req: Request{Messages: []Message{{Role: RoleUser, Content: "x"}}, SerialToolCalls: true}},
		{name: "JSON mode, temperature 0, max tokens", req: Request{Messages: []Message{{Role: RoleUser, Content: "x"}}, JSON: true, Temperature: &zero, MaxTokens: 50}},
		{name: "temperature 0.7, negative max tokens", req: Request{Messages: []Message{{Role: RoleUser, Content: "x"}}, Temperature: &warm, MaxTokens: -3}},
		{name: "no messages", req: Request{}},
	}
	c := &Client{model: "default-model"}
	for _, tc := range tests {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.name, stream), func(t *testing.T) {
				body, err := c.encode(tc.req, stream)
				if err != nil {
					t.Fatal(err)
				}
				var got any
				if err := json.Unmarshal(body, &got); err != nil {
					t.Fatalf("body is not JSON: %v\n%s", err, body)
				}
				if diff := cmp.Diff(legacyBody(t, c.model, tc.req, stream), got); diff != "" {
					t.Errorf("body (-openai-go +ours):\n%s", diff)
				}
			})
		}
	}
}

func TestEncodeRejectsLikeSDK(t *testing.T) {
	user := []Message{{Role: RoleUser, Content: "x"}}
	tests := []Request{
		{Messages: []Message{{Role: "wizard", Content: "x"}}},
		{Messages: []Message{{Role: RoleUser}, {Role: RoleTool, Content: "x"}}},
		{Messages: user, Tools: []Tool{{Name: "t", Parameters: json.RawMessage(`[1`)}}},
		{Messages: user, Tools: []Tool{{Name: "t", Parameters: json.RawMessage(`[1]`)}}},
		{Messages: user, Tools: []Tool{{Name: "t", Parameters: json.RawMessage(`"schema"`)}}},
		{Messages: user, Tools: []Tool{{Name: "ok", Parameters: json.RawMessage(`{}`)}, {Name: "t", Parameters: json.RawMessage(`{"type":`)}}},
		{Messages: user, Tools: []Tool{{Name: "t", Parameters: json.RawMessage(`{"a":1} {"b":2}`)}}},
		{Messages: user, Tools: []Tool{{Name: "t", Parameters: json.RawMessage(`   `)}}},
	}
	c := &Client{model: "m"}
	for _, req := range tests {
		_, want := legacyParams(c.model, req)
		_, got := c.encode(req, false)
		if want == nil || got == nil || got.Error() != want.Error() {
			t.Errorf("encode(%+v) error = %v, want %v", req, got, want)
		}
	}
}

// TestErrorText checks the in-band stream error message against what the SDK said.
func TestErrorText(t *testing.T) {
	for raw, want := range map[string]string{
		`"overloaded"`:               "overloaded",
		`{"message":"x","code":500}`: `{"message":"x","code":500}`,
		`null`:                       "",
		`"quote \" and \u00e9"`:      `quote " and é`,
		`["a"]`:                      `["a"]`,
	} {
		if got := errorText(json.RawMessage(raw)); got != want {
			t.Errorf("errorText(%s) = %q, want %q", raw, got, want)
		}
	}
}
