package model

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"
	"unicode/utf8"
)

// The request body is written by hand, field by field, in the shape openai-go sent it and byte
// for byte what encoding/json wrote for the structs this replaced (reflect_encode_test.go keeps
// them: TestEncodeMatchesReflect): encoding/json's reflection, and its validating and compacting
// of every tool's schema a second time, were about 5% of a monolith turn's CPU, a model call
// being made twice a turn with the whole context.

// encode builds the request body.
func (c *Client) encode(req Request, stream bool) ([]byte, error) {
	var buf bytes.Buffer
	if err := c.encodeTo(&buf, req, stream); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// encodeTo appends the request body to buf; buf is unchanged when it returns an error.
func (c *Client) encodeTo(buf *bytes.Buffer, req Request, stream bool) error {
	// The checks come first, in the order the structs' encoding made them, so that an invalid
	// request fails with the same error whatever else it holds.
	size := 256
	for i := range req.Messages {
		m := &req.Messages[i]
		switch m.Role {
		case RoleUser, RoleSystem, RoleAssistant:
		case RoleTool:
			if m.ToolCallID == "" {
				return fmt.Errorf("messages[%d]: a tool message needs the id of the call it answers", i)
			}
		default:
			return fmt.Errorf("messages[%d]: unknown role %q", i, m.Role)
		}
		size += len(m.Content) + len(m.ToolCallID) + 48
		for _, tc := range m.ToolCalls {
			size += len(tc.ID) + len(tc.Name) + len(tc.Arguments) + 64
		}
		for _, img := range m.Images {
			size += base64.StdEncoding.EncodedLen(len(img.Data)) + len(img.MIMEType) + 64
		}
	}
	for _, t := range req.Tools {
		size += len(t.Name) + len(t.Description) + len(t.Parameters) + 64
	}
	// Escaped text would only grow; the endpoint decodes either form.
	buf.Grow(size + size/8)

	b := buf.AvailableBuffer()
	b = append(b, `{"model":`...)
	name := req.Model
	if name == "" {
		name = c.model
	}
	b = appendString(b, name)
	if len(req.Messages) > 0 {
		b = append(b, `,"messages":[`...)
		for i := range req.Messages {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendMessage(b, &req.Messages[i])
		}
		b = append(b, ']')
	}
	if len(req.Tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i, t := range req.Tools {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"type":"function","function":{"name":`...)
			b = appendString(b, t.Name)
			if t.Description != "" {
				b = append(b, `,"description":`...)
				b = appendString(b, t.Description)
			}
			var err error
			if b, err = c.schemas.appendParams(b, t.Parameters); err != nil {
				return fmt.Errorf("tools[%d] %s: parameters are not a JSON object: %w", i, t.Name, err)
			}
			b = append(b, "}}"...)
		}
		b = append(b, ']')
		if req.SerialToolCalls {
			b = append(b, `,"parallel_tool_calls":false`...)
		}
	}
	if req.JSON {
		b = append(b, `,"response_format":{"type":"json_object"}`...)
	}
	if req.MaxTokens > 0 {
		b = append(b, `,"max_completion_tokens":`...)
		b = strconv.AppendInt(b, int64(req.MaxTokens), 10)
	}
	if req.Temperature != nil {
		// encoding/json's own number form (and its error for NaN and infinities).
		t, err := json.Marshal(*req.Temperature)
		if err != nil {
			return fmt.Errorf("encoding the request: %w", err)
		}
		b = append(b, `,"temperature":`...)
		b = append(b, t...)
	}
	if stream {
		b = append(b, `,"stream":true,"stream_options":{"include_usage":true}`...)
	}
	b = append(b, "}\n"...)
	// b is buf's own free space unless the estimate fell short; Write then copies it in place.
	buf.Write(b)
	return nil
}

// appendMessage appends one message: a user message with images has its content as parts, an
// assistant message with tool calls has no content when its text is empty.
func appendMessage(b []byte, m *Message) []byte {
	b = append(b, `{"role":`...)
	b = appendString(b, string(m.Role))
	switch {
	case m.Role == RoleUser && len(m.Images) > 0:
		b = append(b, `,"content":[`...)
		first := true
		if m.Content != "" {
			b = append(b, `{"type":"text","text":`...)
			b = appendString(b, m.Content)
			b = append(b, '}')
			first = false
		}
		for _, img := range m.Images {
			if !first {
				b = append(b, ',')
			}
			first = false
			// The data URL has no character that needs escaping but what its MIME type may hold.
			b = append(b, `{"type":"image_url","image_url":{"url":`...)
			b = appendString(b, "data:"+img.MIMEType+";base64,"+base64.StdEncoding.EncodeToString(img.Data))
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	case m.Role == RoleAssistant && m.Content == "" && len(m.ToolCalls) > 0:
	default:
		b = append(b, `,"content":`...)
		b = appendString(b, m.Content)
	}
	if m.Role == RoleAssistant && len(m.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, tc := range m.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"id":`...)
			b = appendString(b, tc.ID)
			b = append(b, `,"type":"function","function":{"name":`...)
			b = appendString(b, tc.Name)
			b = append(b, `,"arguments":`...)
			b = appendString(b, tc.Arguments)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	if m.Role == RoleTool {
		b = append(b, `,"tool_call_id":`...)
		b = appendString(b, m.ToolCallID)
	}
	return append(b, '}')
}

// maxSchemas and maxSchemaBytes bound the compacted tool schemas a client remembers, in number
// and in bytes (text and compacted form): a deployment's tools are a few dozen, but callers
// may register tools, each schema up to 256 KiB. Beyond the bounds schemas are compacted every
// call.
const (
	maxSchemas     = 1024
	maxSchemaBytes = 8 << 20
)

// schemas remembers tools' parameters compacted, by their text: a turn offers the same tools
// to every call, and compacting (which validates) was half of the hand encoding's time.
type schemas struct {
	mu    sync.RWMutex
	m     map[string][]byte // guarded by mu
	bytes int               // of m's keys and values; guarded by mu
}

// appendParams appends a tool's parameters, compacted, when they are a JSON object; null or
// none send none; anything else is the error the structs' encoding gave (objectParams).
func (s *schemas) appendParams(b []byte, p json.RawMessage) ([]byte, error) {
	if len(p) == 0 {
		return b, nil
	}
	s.mu.RLock()
	compact, ok := s.m[string(p)]
	s.mu.RUnlock()
	if ok {
		b = append(b, `,"parameters":`...)
		return append(b, compact...), nil
	}
	if trimmed := bytes.TrimLeft(p, " \t\r\n"); len(trimmed) > 0 && trimmed[0] == '{' {
		// Compact validates as it goes, in one pass: one object (and white space) or an error.
		var out bytes.Buffer
		if err := json.Compact(&out, p); err == nil {
			s.mu.Lock()
			if s.m == nil {
				s.m = map[string][]byte{}
			}
			// Another call may have remembered it since the look-up: its bytes count once.
			_, had := s.m[string(p)]
			if n := len(p) + out.Len(); !had && len(s.m) < maxSchemas && s.bytes+n <= maxSchemaBytes {
				s.m[string(p)] = out.Bytes()
				s.bytes += n
			}
			s.mu.Unlock()
			b = append(b, `,"parameters":`...)
			return append(b, out.Bytes()...), nil
		}
	}
	if _, err := objectParams(p); err != nil {
		return b, err
	}
	return b, nil
}

// appendString appends s as a JSON string the way encoding/json does without HTML escaping:
// quote, backslash and control characters escaped (\b \f \n \r \t by name), invalid UTF-8 as
// U+FFFD, U+2028 and U+2029 escaped, the rest as it is.
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		// Eight bytes at a time while none needs a look: a model request is mostly plain text,
		// tens of kilobytes of it per call.
		for i+8 <= len(s) && plain8(s[i:i+8]) {
			i += 8
		}
		if i >= len(s) {
			break
		}
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// plain8 reports whether the eight bytes of s are all ASCII that a JSON string carries as it
// is: none below 0x20, none a quote or a backslash, none 0x80 or above.
func plain8(s string) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	x := uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
	// Each term has a byte's high bit set where (and, past the first, perhaps above where) the
	// byte is below 0x20, a quote, a backslash; x's own high bits are the bytes from 0x80.
	control := (x - ones*0x20) &^ x
	q := x ^ ones*'"'
	quote := (q - ones) &^ q
	bs := x ^ ones*'\\'
	backslash := (bs - ones) &^ bs
	return (x|control|quote|backslash)&highs == 0
}
