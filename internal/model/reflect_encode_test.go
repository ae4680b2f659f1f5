package model

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The request's encoding before encode.go: structs in the shape openai-go sent, through
// encoding/json. encode.go must write the same bytes (TestEncodeMatchesReflect).

type wireScratch struct {
	msgs  []wireMessage
	calls []wireToolCall
	tools []wireTool
}

type (
	wireRequest struct {
		Model               string             `json:"model"`
		Messages            []wireMessage      `json:"messages,omitempty"` // omitted when empty, as openai-go did
		Tools               []wireTool         `json:"tools,omitempty"`
		ParallelToolCalls   *bool              `json:"parallel_tool_calls,omitempty"`
		ResponseFormat      *wireFormat        `json:"response_format,omitempty"`
		MaxCompletionTokens int                `json:"max_completion_tokens,omitempty"`
		Temperature         *float64           `json:"temperature,omitempty"`
		Stream              bool               `json:"stream,omitempty"`
		StreamOptions       *wireStreamOptions `json:"stream_options,omitempty"`
	}
	wireMessage struct {
		Role Role `json:"role"`
		// Content is a *string, or []wirePart for a user message with images.
		Content    any            `json:"content,omitempty"`
		ToolCalls  []wireToolCall `json:"tool_calls,omitempty"`
		ToolCallID string         `json:"tool_call_id,omitempty"`
	}
	wirePart struct {
		Type     string        `json:"type"`
		Text     string        `json:"text,omitempty"`
		ImageURL *wireImageURL `json:"image_url,omitempty"`
	}
	wireImageURL struct {
		URL string `json:"url"`
	}
	wireTool struct {
		Type     string      `json:"type"`
		Function wireToolDef `json:"function"`
	}
	wireToolDef struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	wireFormat struct {
		Type string `json:"type"`
	}
	wireStreamOptions struct {
		IncludeUsage bool `json:"include_usage"`
	}
)

func (c *Client) reflectEncode(req Request, stream bool) ([]byte, error) {
	buf := new(bytes.Buffer)
	ws := &wireScratch{}
	ws.msgs = slices.Grow(ws.msgs, len(req.Messages))[:len(req.Messages)]
	w := wireRequest{Model: req.Model, Messages: ws.msgs}
	if w.Model == "" {
		w.Model = c.model
	}
	size := 256
	for i := range req.Messages {
		m := &req.Messages[i]
		wm := wireMessage{Role: m.Role}
		switch m.Role {
		case RoleUser:
			wm.Content = &m.Content
			if len(m.Images) > 0 {
				parts := make([]wirePart, 0, len(m.Images)+1)
				if m.Content != "" {
					parts = append(parts, wirePart{Type: "text", Text: m.Content})
				}
				for _, img := range m.Images {
					url := "data:" + img.MIMEType + ";base64," + base64.StdEncoding.EncodeToString(img.Data)
					parts = append(parts, wirePart{Type: "image_url", ImageURL: &wireImageURL{URL: url}})
					size += len(url) + 48
				}
				wm.Content = parts
			}
		case RoleSystem:
			wm.Content = &m.Content
		case RoleTool:
			if m.ToolCallID == "" {
				return nil, fmt.Errorf("messages[%d]: a tool message needs the id of the call it answers", i)
			}
			wm.Content, wm.ToolCallID = &m.Content, m.ToolCallID
		case RoleAssistant:
			if m.Content != "" || len(m.ToolCalls) == 0 {
				wm.Content = &m.Content
			}
			if len(m.ToolCalls) > 0 {
				from := len(ws.calls)
				for _, tc := range m.ToolCalls {
					ws.calls = append(ws.calls, wireToolCall{ID: tc.ID, Type: "function", Function: wireFunction{Name: tc.Name, Arguments: tc.Arguments}})
					size += len(tc.ID) + len(tc.Name) + len(tc.Arguments) + 64
				}
				wm.ToolCalls = ws.calls[from:len(ws.calls):len(ws.calls)]
			}
		default:
			return nil, fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
		w.Messages[i] = wm
		size += len(m.Content) + len(m.ToolCallID) + 48
	}
	if len(req.Tools) > 0 {
		ws.tools = slices.Grow(ws.tools, len(req.Tools))[:len(req.Tools)]
		w.Tools = ws.tools
	}
	for i, t := range req.Tools {
		params, err := objectParams(t.Parameters)
		if err != nil {
			return nil, fmt.Errorf("tools[%d] %s: parameters are not a JSON object: %w", i, t.Name, err)
		}
		w.Tools[i] = wireTool{Type: "function", Function: wireToolDef{Name: t.Name, Description: t.Description, Parameters: params}}
		size += len(t.Name) + len(t.Description) + len(params) + 64
	}
	if len(req.Tools) > 0 && req.SerialToolCalls {
		w.ParallelToolCalls = new(bool)
	}
	if req.JSON {
		w.ResponseFormat = &wireFormat{Type: "json_object"}
	}
	if req.MaxTokens > 0 {
		w.MaxCompletionTokens = req.MaxTokens
	}
	w.Temperature = req.Temperature
	if stream {
		w.Stream = true
		w.StreamOptions = &wireStreamOptions{IncludeUsage: true}
	}
	// Escaped text would only grow; the endpoint decodes either form.
	buf.Grow(size + size/8)
	enc := json.NewEncoder(buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(&w); err != nil {
		return nil, fmt.Errorf("encoding the request: %w", err)
	}
	return buf.Bytes(), nil
}

// randText mixes every class of byte the string encoding treats apart: plain ASCII, quote and
// backslash, each control character, HTML characters (not escaped), multi-byte UTF-8, U+2028
// and U+2029, invalid and truncated UTF-8.
func randText(r *rand.Rand) string {
	pieces := []string{"a", "Hermes ", "\"", "\\", "<", ">", "&", "/", "é", "北京", "😀", "\u2028", "\u2029",
		"\xff", "\xe2\x80", "\xf0\x9f\x98", "\x7f", "{\"k\":1}", "\ufffd", "\u00a0"}
	var b strings.Builder
	for range r.IntN(12) {
		if r.IntN(4) == 0 {
			b.WriteByte(byte(r.IntN(0x20)))
			continue
		}
		b.WriteString(pieces[r.IntN(len(pieces))])
	}
	return b.String()
}

func randRequest(r *rand.Rand) Request {
	var req Request
	if r.IntN(3) == 0 {
		req.Model = randText(r)
	}
	roles := []Role{RoleSystem, RoleUser, RoleAssistant, RoleTool}
	for range r.IntN(8) {
		m := Message{Role: roles[r.IntN(len(roles))], Content: randText(r)}
		if r.IntN(3) == 0 {
			m.Content = ""
		}
		switch m.Role {
		case RoleTool:
			m.ToolCallID = "c" + randText(r)
		case RoleAssistant:
			for range r.IntN(3) {
				m.ToolCalls = append(m.ToolCalls, ToolCall{ID: randText(r), Name: randText(r), Arguments: randText(r)})
			}
		case RoleUser:
			for range r.IntN(3) - 1 {
				m.Images = append(m.Images, Image{MIMEType: "image/png", Data: []byte(randText(r))})
			}
		}
		// Fields the role does not send.
		if r.IntN(5) == 0 {
			m.ToolCallID = randText(r)
			m.ToolCalls = append(m.ToolCalls, ToolCall{ID: "x"})
			m.Images = append(m.Images, Image{MIMEType: "image/\"gif", Data: []byte{0, 1, 2}})
			if m.Role == RoleTool {
				m.ToolCallID = "t"
			}
		}
		req.Messages = append(req.Messages, m)
	}
	params := []string{"", `{}`, `null`, " \n{ \"type\" : \"object\", \"d\": \"a  b\\n\" }\n", `{"type":"object","properties":{"q":{"type":"string","description":"` + "名字 <b>&amp;</b> \u2028" + `"}}}`}
	for range r.IntN(4) {
		req.Tools = append(req.Tools, Tool{Name: randText(r), Description: randText(r), Parameters: json.RawMessage(params[r.IntN(len(params))])})
	}
	req.SerialToolCalls = r.IntN(2) == 0
	req.JSON = r.IntN(2) == 0
	req.MaxTokens = r.IntN(5) - 1
	if r.IntN(2) == 0 {
		t := []float64{0, 0.7, 1, 2, 1e-7, 1e21, 123456789.125, -0.5}[r.IntN(8)]
		req.Temperature = &t
	}
	return req
}

// TestEncodeMatchesReflect: the body written by hand is byte for byte the structs' body through
// encoding/json, and an invalid request fails with the same error, on the SDK table's cases and
// on random requests.
func TestEncodeMatchesReflect(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	user := []Message{{Role: RoleUser, Content: "x"}}
	fixed := []Request{
		{},
		{Messages: user, Temperature: &nan},
		{Messages: user, Temperature: &inf, Tools: []Tool{{Name: "t", Parameters: json.RawMessage(`[1]`)}}},
		{Messages: []Message{{Role: "wizard"}}, Tools: []Tool{{Name: "t", Parameters: json.RawMessage(`[1`)}}},
		{Messages: []Message{{Role: RoleUser}, {Role: RoleTool, Content: "x"}}},
		{Messages: user, Tools: []Tool{{Name: "t", Parameters: json.RawMessage(`{"type":`)}}},
		{Messages: user, Tools: []Tool{{Name: "ok", Parameters: json.RawMessage(`{}`)}, {Name: "t", Parameters: json.RawMessage(`{"a":1} {"b":2}`)}}},
		{Messages: user, Tools: []Tool{{Name: "t", Parameters: json.RawMessage(`   `)}}},
		{Messages: user, Tools: []Tool{{Name: "t", Parameters: json.RawMessage(`"schema"`)}}},
		{Messages: user, Tools: []Tool{{Name: "t", Parameters: json.RawMessage(`{"a":"` + "\xff" + `"}`)}}},
		{Messages: []Message{{Role: RoleUser, Content: "see", Images: []Image{{MIMEType: "image/png", Data: []byte("png")}, {MIMEType: "image/jpeg", Data: []byte{0xff, 0xd8}}}}}},
		{Messages: []Message{{Role: RoleUser, Images: []Image{{MIMEType: "image/png", Data: []byte("png")}}}}},
	}
	r := rand.New(rand.NewPCG(1, 2))
	reqs := fixed
	for range 20000 {
		reqs = append(reqs, randRequest(r))
	}
	c := &Client{model: "default-model"}
	for i, req := range reqs {
		stream := i%2 == 0
		want, wantErr := c.reflectEncode(req, stream)
		got, gotErr := c.encode(req, stream)
		if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
			t.Fatalf("request %d %+v: error %v, want %v", i, req, gotErr, wantErr)
		}
		if wantErr == nil && !bytes.Equal(got, want) {
			t.Fatalf("request %d %+v:\n got %s\nwant %s", i, req, got, want)
		}
	}
}

// BenchmarkEncode: the bench turn's request (bench_test.go's shape), written by hand and through
// the structs.
func BenchmarkEncode(b *testing.B) {
	system := strings.Repeat("You are Hermes, a careful assistant. Answer briefly, use the tools when a fact is needed. ", 11)
	schema := json.RawMessage(`{"type":"object","properties":{"expression":{"type":"string","description":"the expression, e.g. (2+3)*4"}},"required":["expression"],"additionalProperties":false}`)
	req := Request{MaxTokens: 1024, Messages: []Message{{Role: RoleSystem, Content: system}}}
	for i := range 6 {
		req.Tools = append(req.Tools, Tool{Name: fmt.Sprintf("tool_%d", i), Description: "Evaluate an arithmetic expression exactly.", Parameters: schema})
	}
	for i := range 4 {
		id := fmt.Sprintf("call_%d", i)
		req.Messages = append(req.Messages,
			Message{Role: RoleUser, Content: fmt.Sprintf("What is %d * 37 + 12? And remind me what we said about dinner in \"北京\".", 100+i)},
			Message{Role: RoleAssistant, ToolCalls: []ToolCall{{ID: id, Name: "calculator", Arguments: fmt.Sprintf(`{"expression":"%d*37+12"}`, 100+i)}}},
			Message{Role: RoleTool, ToolCallID: id, Content: fmt.Sprintf(`{"result":%d}`, (100+i)*37+12)},
			Message{Role: RoleAssistant, Content: "Done. You wanted Sichuan food near the office on Friday <7pm>."},
		)
	}
	c := &Client{model: "m"}
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := c.encodeTo(&buf, req, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reflect", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.reflectEncode(req, true); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestSchemasBounded: the remembered schemas stop growing at the bound, and a schema beyond it
// is still sent compacted.
func TestSchemasBounded(t *testing.T) {
	var s schemas
	for i := range maxSchemas + 10 {
		p := json.RawMessage(fmt.Sprintf(`{ "n" : %d }`, i))
		got, err := s.appendParams(nil, p)
		if want := fmt.Sprintf(`,"parameters":{"n":%d}`, i); err != nil || string(got) != want {
			t.Fatalf("appendParams(%s) = %s, %v; want %s", p, got, err, want)
		}
	}
	if len(s.m) != maxSchemas {
		t.Errorf("%d schemas remembered, want %d", len(s.m), maxSchemas)
	}

	// Large schemas stop at the byte bound, however few they are.
	var big schemas
	pad := strings.Repeat("x", 200<<10)
	for i := range 64 {
		p := json.RawMessage(fmt.Sprintf(`{"d":"%s","n":%d}`, pad, i))
		got, err := big.appendParams(nil, p)
		if err != nil || !bytes.Equal(got, append([]byte(`,"parameters":`), p...)) {
			t.Fatalf("appendParams(big %d): %d bytes, %v", i, len(got), err)
		}
	}
	if big.bytes > maxSchemaBytes || len(big.m) >= 64 {
		t.Errorf("%d large schemas remembered in %d bytes, want at most %d bytes", len(big.m), big.bytes, maxSchemaBytes)
	}
}

// TestAppendStringMatchesJSON: every byte value at every position of strings around the
// eight-byte steps, and random mixes, encode as encoding/json encodes them without HTML
// escaping.
func TestAppendStringMatchesJSON(t *testing.T) {
	check := func(s string) {
		t.Helper()
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(s); err != nil {
			t.Fatal(err)
		}
		if got := string(appendString(nil, s)) + "\n"; got != want.String() {
			t.Fatalf("appendString(%q) = %s, want %s", s, got, want.String())
		}
	}
	for n := range 26 {
		for pos := range n {
			for c := range 256 {
				b := []byte(strings.Repeat("abcdefgh", 4)[:n])
				b[pos] = byte(c)
				check(string(b))
			}
		}
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 20000 {
		s := randText(r)
		check(strings.Repeat("plain text ", r.IntN(3)) + s + strings.Repeat("x", r.IntN(9)))
	}
}

// FuzzEncodeMatchesReflect: TestEncodeMatchesReflect on fuzzed text in every string field,
// fuzzed tool parameters and numbers, each request encoded twice (the second time with its
// schemas remembered).
func FuzzEncodeMatchesReflect(f *testing.F) {
	f.Add("hello", `{"q":"x"}`, []byte(`{"type":"object"}`), 0.7, 10, uint8(0), uint64(1))
	f.Add("a\u2028b\xff\x00\"\\", "not json {", []byte(" \n{ \"a\" : [1, 2.50, -0, 1e400] }"), math.Copysign(0, -1), -1, uint8(7), uint64(2))
	f.Add("北京😀\xe2\x80", "", []byte(`null`), 1e21, 1<<40, uint8(255), uint64(3))
	f.Add("", "\t", []byte(`[1]`), 1e-7, 0, uint8(12), uint64(4))
	c := &Client{model: "default-model"}
	f.Fuzz(func(t *testing.T, text, args string, params []byte, temp float64, maxTokens int, flags uint8, seed uint64) {
		r := rand.New(rand.NewPCG(seed, uint64(flags)))
		req := randRequest(r)
		roles := []Role{RoleSystem, RoleUser, RoleAssistant, RoleTool, Role(text)}
		m := Message{Role: roles[int(flags)%len(roles)], Content: text, ToolCallID: args,
			ToolCalls: []ToolCall{{ID: text, Name: args, Arguments: args}},
			Images:    []Image{{MIMEType: text, Data: []byte(args)}}}
		if flags&8 != 0 {
			m.Images = nil
		}
		req.Messages = append(req.Messages, m)
		req.Tools = append(req.Tools, Tool{Name: text, Description: args, Parameters: json.RawMessage(params)})
		if flags&16 != 0 {
			req.Model = text
		}
		if flags&32 != 0 {
			req.Temperature = &temp
		}
		req.MaxTokens = maxTokens
		stream := flags&64 != 0
		want, wantErr := c.reflectEncode(req, stream)
		for range 2 {
			got, gotErr := c.encode(req, stream)
			if (wantErr == nil) != (gotErr == nil) || wantErr != nil && wantErr.Error() != gotErr.Error() {
				t.Fatalf("%+v: error %v, want %v", req, gotErr, wantErr)
			}
			if wantErr == nil && !bytes.Equal(got, want) {
				t.Fatalf("%+v:\n got %s\nwant %s", req, got, want)
			}
		}
	})
}
