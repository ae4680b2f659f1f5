package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"net/http"
	"strings"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"
	"google.golang.org/adk/model"
	"google.golang.org/genai"
)

// openAIModel is an adk-go model.LLM that calls an OpenAI-compatible Chat Completions endpoint
// with the official openai-go SDK. adk-go v1.6.0 ships Gemini adapters only. It covers what
// the benchmark turn needs and a text-and-tools agent uses: the system instruction, text,
// function declarations, function calls and their responses, and token usage. It does not
// stream: a streaming request gets the whole answer as one final response.
type openAIModel struct {
	client openai.Client
	name   string
}

func newOpenAIModel(baseURL, apiKey, name string, hc *http.Client) *openAIModel {
	return &openAIModel{
		client: openai.NewClient(option.WithBaseURL(baseURL), option.WithAPIKey(apiKey), option.WithHTTPClient(hc), option.WithMaxRetries(2)),
		name:   name,
	}
}

func (m *openAIModel) Name() string { return m.name }

// GenerateContent implements model.LLM.
func (m *openAIModel) GenerateContent(ctx context.Context, req *model.LLMRequest, _ bool) iter.Seq2[*model.LLMResponse, error] {
	return func(yield func(*model.LLMResponse, error) bool) {
		params, err := chatParams(req, m.name)
		if err != nil {
			yield(nil, err)
			return
		}
		resp, err := m.client.Chat.Completions.New(ctx, params)
		if err != nil {
			yield(nil, fmt.Errorf("chat completion: %w", err))
			return
		}
		out, err := llmResponse(resp)
		yield(out, err)
	}
}

// chatParams translates adk-go's request (genai contents) into Chat Completions messages.
func chatParams(req *model.LLMRequest, defaultModel string) (openai.ChatCompletionNewParams, error) {
	p := openai.ChatCompletionNewParams{Model: shared.ChatModel(defaultModel)}
	if req.Model != "" {
		p.Model = shared.ChatModel(req.Model)
	}
	if cfg := req.Config; cfg != nil {
		if sys := contentText(cfg.SystemInstruction); sys != "" {
			p.Messages = append(p.Messages, openai.SystemMessage(sys))
		}
		for _, t := range cfg.Tools {
			if t == nil {
				continue
			}
			for _, d := range t.FunctionDeclarations {
				tool, err := functionTool(d)
				if err != nil {
					return p, err
				}
				p.Tools = append(p.Tools, tool)
			}
		}
	}
	for _, c := range req.Contents {
		msgs, err := chatMessages(c)
		if err != nil {
			return p, err
		}
		p.Messages = append(p.Messages, msgs...)
	}
	return p, nil
}

func functionTool(d *genai.FunctionDeclaration) (openai.ChatCompletionToolUnionParam, error) {
	def := shared.FunctionDefinitionParam{Name: d.Name}
	if d.Description != "" {
		def.Description = openai.String(d.Description)
	}
	switch {
	case d.ParametersJsonSchema != nil:
		b, err := json.Marshal(d.ParametersJsonSchema)
		if err != nil {
			return openai.ChatCompletionToolUnionParam{}, fmt.Errorf("tool %q: parameters schema: %w", d.Name, err)
		}
		var params shared.FunctionParameters
		if err := json.Unmarshal(b, &params); err != nil {
			return openai.ChatCompletionToolUnionParam{}, fmt.Errorf("tool %q: parameters schema is not an object: %w", d.Name, err)
		}
		def.Parameters = params
	case d.Parameters != nil:
		// genai.Schema spells types as "OBJECT", "STRING"; translating it is not needed by
		// functiontool, which always sets ParametersJsonSchema.
		return openai.ChatCompletionToolUnionParam{}, fmt.Errorf("tool %q: only ParametersJsonSchema is supported", d.Name)
	}
	return openai.ChatCompletionFunctionTool(def), nil
}

// chatMessages translates one genai content: user text, model text and function calls (one
// assistant message), function responses (one tool message each).
func chatMessages(c *genai.Content) ([]openai.ChatCompletionMessageParamUnion, error) {
	if c == nil {
		return nil, nil
	}
	var (
		text  strings.Builder
		calls []openai.ChatCompletionMessageToolCallUnionParam
		out   []openai.ChatCompletionMessageParamUnion
	)
	for _, part := range c.Parts {
		switch {
		case part == nil || part.Thought:
		case part.FunctionCall != nil:
			args, err := json.Marshal(part.FunctionCall.Args)
			if err != nil {
				return nil, fmt.Errorf("function call %q: %w", part.FunctionCall.Name, err)
			}
			calls = append(calls, openai.ChatCompletionMessageToolCallUnionParam{OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
				ID:       part.FunctionCall.ID,
				Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: part.FunctionCall.Name, Arguments: string(args)},
			}})
		case part.FunctionResponse != nil:
			res, err := json.Marshal(part.FunctionResponse.Response)
			if err != nil {
				return nil, fmt.Errorf("function response %q: %w", part.FunctionResponse.Name, err)
			}
			out = append(out, openai.ToolMessage(string(res), part.FunctionResponse.ID))
		default:
			text.WriteString(part.Text)
		}
	}
	switch {
	case c.Role == genai.RoleModel:
		if text.Len() == 0 && len(calls) == 0 {
			return out, nil
		}
		a := openai.ChatCompletionAssistantMessageParam{ToolCalls: calls}
		if text.Len() > 0 {
			a.Content.OfString = openai.String(text.String())
		}
		return append([]openai.ChatCompletionMessageParamUnion{{OfAssistant: &a}}, out...), nil
	case text.Len() > 0:
		out = append(out, openai.UserMessage(text.String()))
	}
	return out, nil
}

func contentText(c *genai.Content) string {
	if c == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range c.Parts {
		if p != nil {
			b.WriteString(p.Text)
		}
	}
	return b.String()
}

// llmResponse translates the first choice back into genai content.
func llmResponse(resp *openai.ChatCompletion) (*model.LLMResponse, error) {
	if len(resp.Choices) == 0 {
		return nil, errors.New("chat completion: the answer has no choices")
	}
	msg := resp.Choices[0].Message
	content := &genai.Content{Role: genai.RoleModel}
	if msg.Content != "" {
		content.Parts = append(content.Parts, genai.NewPartFromText(msg.Content))
	}
	for _, tc := range msg.ToolCalls {
		var args map[string]any
		if tc.Function.Arguments != "" {
			if err := json.Unmarshal([]byte(tc.Function.Arguments), &args); err != nil {
				return nil, fmt.Errorf("tool call %q: arguments are not a JSON object: %w", tc.Function.Name, err)
			}
		}
		content.Parts = append(content.Parts, &genai.Part{FunctionCall: &genai.FunctionCall{ID: tc.ID, Name: tc.Function.Name, Args: args}})
	}
	out := &model.LLMResponse{Content: content, ModelVersion: resp.Model, TurnComplete: true}
	switch resp.Choices[0].FinishReason {
	case "length":
		out.FinishReason = genai.FinishReasonMaxTokens
	case "content_filter":
		out.FinishReason = genai.FinishReasonSafety
	default:
		out.FinishReason = genai.FinishReasonStop
	}
	if u := resp.Usage; u.TotalTokens > 0 {
		out.UsageMetadata = &genai.GenerateContentResponseUsageMetadata{
			PromptTokenCount:        int32(u.PromptTokens),
			CandidatesTokenCount:    int32(u.CompletionTokens),
			TotalTokenCount:         int32(u.TotalTokens),
			CachedContentTokenCount: int32(u.PromptTokensDetails.CachedTokens),
		}
	}
	return out, nil
}
