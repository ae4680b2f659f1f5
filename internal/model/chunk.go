package model

import (
	"bytes"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// A streamed answer is one JSON event per token or two, and encoding/json spent about 2.2 µs
// and 15 allocations on each (BenchmarkChunkDecode): for an answer of a few hundred tokens, a
// good share of a turn's own work. chunkDecoder reads the events of the common shape itself and
// leaves everything else to encoding/json, whose result is then the one used. Its contract,
// which FuzzChunkDecoder checks against encoding/json: whenever decode reports true,
// encoding/json would have decoded the same wireChunk without any error. It reports false on
// anything it does not read in full: a syntax error, a value of another type than the field's,
// a repeated, escaped or case-folded key, more than 16 keys in an object, a number that is not a
// plain integer, a lone surrogate, invalid UTF-8 in a string it keeps, nesting deeper than
// maxChunkDepth, an in-band error.
type chunkDecoder struct {
	buf []byte // the input
	pos int
	// id and model are the previous event's, reused when an event repeats them (every event
	// of a stream does), so that they are not allocated again.
	id, model string
}

// maxChunkDepth bounds the nesting the decoder skips; deeper input goes to encoding/json.
const maxChunkDepth = 32

// decode decodes data into c, which must be zero, and reports whether it did; when it did not,
// c is in an unspecified state and the caller decodes data with encoding/json instead.
func (d *chunkDecoder) decode(data []byte, c *wireChunk) bool {
	d.buf, d.pos = data, 0
	ok := d.object(func(key []byte) bool {
		switch string(key) {
		case "id":
			return d.internedString(&d.id, &c.ID)
		case "model":
			return d.internedString(&d.model, &c.Model)
		case "choices":
			return d.array(func() { c.Choices = []wireChunkChoice{} }, func() bool {
				c.Choices = append(c.Choices, wireChunkChoice{})
				ch := &c.Choices[len(c.Choices)-1]
				return d.object(func(key []byte) bool {
					switch string(key) {
					case "index":
						return d.int(&ch.Index)
					case "finish_reason":
						return d.string(&ch.FinishReason)
					case "delta":
						return d.object(func(key []byte) bool {
							switch string(key) {
							case "content":
								return d.string(&ch.Delta.Content)
							case "tool_calls":
								return d.array(func() { ch.Delta.ToolCalls = []wireDeltaCall{} }, func() bool {
									ch.Delta.ToolCalls = append(ch.Delta.ToolCalls, wireDeltaCall{})
									tc := &ch.Delta.ToolCalls[len(ch.Delta.ToolCalls)-1]
									return d.object(func(key []byte) bool {
										switch string(key) {
										case "index":
											return d.int(&tc.Index)
										case "id":
											return d.string(&tc.ID)
										case "function":
											return d.object(func(key []byte) bool {
												switch string(key) {
												case "name":
													return d.string(&tc.Function.Name)
												case "arguments":
													return d.string(&tc.Function.Arguments)
												}
												return d.other(key, 4, "name", "arguments")
											}, 4)
										}
										return d.other(key, 3, "index", "id", "function")
									}, 3)
								}, 2)
							}
							return d.other(key, 2, "content", "tool_calls")
						}, 2)
					}
					return d.other(key, 1, "index", "finish_reason", "delta")
				}, 1)
			}, 0)
		case "usage":
			if d.null() {
				return true
			}
			c.Usage = &wireUsage{}
			u := c.Usage
			return d.object(func(key []byte) bool {
				switch string(key) {
				case "prompt_tokens":
					return d.int(&u.PromptTokens)
				case "completion_tokens":
					return d.int(&u.CompletionTokens)
				case "total_tokens":
					return d.int(&u.TotalTokens)
				case "prompt_tokens_details":
					return d.object(func(key []byte) bool {
						if string(key) == "cached_tokens" {
							return d.int(&u.PromptTokensDetails.CachedTokens)
						}
						return d.other(key, 2, "cached_tokens")
					}, 2)
				}
				return d.other(key, 1, "prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details")
			}, 1)
		}
		// "error" is an in-band error, kept raw: encoding/json's to read.
		return d.other(key, 0, "id", "model", "choices", "usage", "error")
	}, 0)
	if !ok {
		return false
	}
	d.space()
	return d.pos == len(d.buf)
}

// other skips the value of key, a key the struct at depth lacks; a key encoding/json would
// match to one of known (case-insensitively, or any key with bytes beyond ASCII, which it folds
// in its own way) is not read here.
func (d *chunkDecoder) other(key []byte, depth int, known ...string) bool {
	for _, k := range key {
		if k >= utf8.RuneSelf {
			return false
		}
	}
	for _, k := range known {
		if bytes.EqualFold(key, []byte(k)) {
			return false
		}
	}
	return d.skip(depth + 1)
}

// space skips JSON white space.
func (d *chunkDecoder) space() {
	for d.pos < len(d.buf) {
		switch d.buf[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, or 0 at the end.
func (d *chunkDecoder) peek() byte {
	d.space()
	if d.pos < len(d.buf) {
		return d.buf[d.pos]
	}
	return 0
}

// null consumes a null, if that is what comes next.
func (d *chunkDecoder) null() bool {
	if d.peek() == 'n' && bytes.HasPrefix(d.buf[d.pos:], []byte("null")) {
		d.pos += 4
		return true
	}
	return false
}

// object reads an object (or null, which leaves the struct as it is), calling field with each
// key once the decoder stands before its value; field reads the value. A repeated key is not
// read here: encoding/json merges or replaces, which this decoder does not copy.
func (d *chunkDecoder) object(field func(key []byte) bool, depth int) bool {
	if depth > maxChunkDepth {
		return false
	}
	if d.null() {
		return true
	}
	if d.peek() != '{' {
		return false
	}
	d.pos++
	if d.peek() == '}' {
		d.pos++
		return true
	}
	var seen [16][]byte
	n := 0
	for {
		if d.peek() != '"' {
			return false
		}
		key, ok := d.rawString()
		if !ok {
			return false
		}
		for _, s := range seen[:n] {
			if bytes.Equal(s, key) {
				return false
			}
		}
		if n >= len(seen) {
			return false // more keys than an event of the common shape has
		}
		seen[n] = key
		n++
		if d.peek() != ':' {
			return false
		}
		d.pos++
		if !field(key) {
			return false
		}
		switch d.peek() {
		case ',':
			d.pos++
		case '}':
			d.pos++
			return true
		default:
			return false
		}
	}
}

// array reads an array (or null: none), calling begin at its start (encoding/json makes an
// empty slice of an empty array), then elem before each element; elem reads it.
func (d *chunkDecoder) array(begin func(), elem func() bool, depth int) bool {
	if depth > maxChunkDepth {
		return false
	}
	if d.null() {
		return true
	}
	if d.peek() != '[' {
		return false
	}
	d.pos++
	begin()
	if d.peek() == ']' {
		d.pos++
		return true
	}
	for {
		if !elem() {
			return false
		}
		switch d.peek() {
		case ',':
			d.pos++
		case ']':
			d.pos++
			return true
		default:
			return false
		}
	}
}

// rawString reads a string without escapes and returns its bytes (in the input). A string with
// escapes, or with bytes below 0x20, is not read.
func (d *chunkDecoder) rawString() ([]byte, bool) {
	d.pos++ // the quote
	start := d.pos
	for d.pos < len(d.buf) {
		switch b := d.buf[d.pos]; {
		case b == '"':
			d.pos++
			return d.buf[start : d.pos-1], true
		case b == '\\' || b < 0x20:
			return nil, false
		}
		d.pos++
	}
	return nil, false
}

// string reads a string (or null, which leaves *dst as it is) into *dst.
func (d *chunkDecoder) string(dst *string) bool {
	if d.null() {
		return true
	}
	if d.peek() != '"' {
		return false
	}
	b, ok := d.unquote()
	if ok {
		*dst = string(b)
	}
	return ok
}

// internedString is string, reusing *last when the string is the same.
func (d *chunkDecoder) internedString(last, dst *string) bool {
	if d.null() {
		return true
	}
	if d.peek() != '"' {
		return false
	}
	b, ok := d.unquote()
	if !ok {
		return false
	}
	if string(b) != *last { // no allocation: the compiler compares in place
		*last = string(b)
	}
	*dst = *last
	return true
}

// unquote reads a string and returns its value: the input's bytes when it has no escapes, else
// a new slice. Strings with invalid UTF-8 or lone surrogates, which encoding/json replaces with
// U+FFFD, are not read.
func (d *chunkDecoder) unquote() ([]byte, bool) {
	d.pos++ // the quote
	start := d.pos
	ascii := true
	for d.pos < len(d.buf) {
		b := d.buf[d.pos]
		switch {
		case b == '"':
			d.pos++
			s := d.buf[start : d.pos-1]
			return s, ascii || utf8.Valid(s)
		case b == '\\':
			return d.unescape(start, ascii)
		case b < 0x20:
			return nil, false
		case b >= utf8.RuneSelf:
			ascii = false
		}
		d.pos++
	}
	return nil, false
}

// unescape continues unquote at the first backslash of the string that starts at start.
func (d *chunkDecoder) unescape(start int, ascii bool) ([]byte, bool) {
	if !ascii && !utf8.Valid(d.buf[start:d.pos]) {
		return nil, false
	}
	out := make([]byte, d.pos-start, d.pos-start+16)
	copy(out, d.buf[start:d.pos])
	for d.pos < len(d.buf) {
		b := d.buf[d.pos]
		switch {
		case b == '"':
			d.pos++
			return out, true
		case b < 0x20:
			return nil, false
		case b == '\\':
			if d.pos+1 >= len(d.buf) {
				return nil, false
			}
			e := d.buf[d.pos+1]
			d.pos += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return nil, false
				}
				if utf16.IsSurrogate(r) {
					// Only a high surrogate followed by an escaped low one makes a rune.
					if r >= 0xdc00 || !bytes.HasPrefix(d.buf[d.pos:], []byte(`\u`)) {
						return nil, false
					}
					d.pos += 2
					r2, ok := d.hex4()
					if !ok {
						return nil, false
					}
					if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
						return nil, false
					}
				}
				out = utf8.AppendRune(out, r)
			default:
				return nil, false
			}
		case b < utf8.RuneSelf:
			out = append(out, b)
			d.pos++
		default:
			r, size := utf8.DecodeRune(d.buf[d.pos:])
			if r == utf8.RuneError && size == 1 {
				return nil, false
			}
			out = append(out, d.buf[d.pos:d.pos+size]...)
			d.pos += size
		}
	}
	return nil, false
}

// hex4 reads the four hex digits of a \u escape.
func (d *chunkDecoder) hex4() (rune, bool) {
	if d.pos+4 > len(d.buf) {
		return 0, false
	}
	var r rune
	for _, c := range d.buf[d.pos : d.pos+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	d.pos += 4
	return r, true
}

// int reads an integer (or null, which leaves *dst as it is) into *dst. A number with a
// fraction or an exponent, or out of range, is encoding/json's (a type error there).
func (d *chunkDecoder) int(dst *int64) bool {
	if d.null() {
		return true
	}
	start := d.pos
	if d.peek() == '-' {
		d.pos++
	}
	digits := d.pos
	for d.pos < len(d.buf) && '0' <= d.buf[d.pos] && d.buf[d.pos] <= '9' {
		d.pos++
	}
	n := d.pos - digits
	if n == 0 || (n > 1 && d.buf[digits] == '0') {
		return false
	}
	if d.pos < len(d.buf) {
		switch d.buf[d.pos] {
		case '.', 'e', 'E':
			return false
		}
	}
	v, err := strconv.ParseInt(string(d.buf[start:d.pos]), 10, 64)
	if err != nil {
		return false
	}
	*dst = v
	return true
}

// skip reads past one value of any type, checking its syntax as encoding/json does (and, in
// objects, refusing what object refuses).
func (d *chunkDecoder) skip(depth int) bool {
	switch c := d.peek(); c {
	case '{':
		return d.object(func([]byte) bool { return d.skip(depth + 1) }, depth)
	case '[':
		return d.array(func() {}, func() bool { return d.skip(depth + 1) }, depth)
	case '"':
		return d.skipString()
	case 't':
		return d.literal("true")
	case 'f':
		return d.literal("false")
	case 'n':
		return d.literal("null")
	default:
		if c == '-' || ('0' <= c && c <= '9') {
			return d.skipNumber()
		}
		return false
	}
}

func (d *chunkDecoder) literal(s string) bool {
	if !bytes.HasPrefix(d.buf[d.pos:], []byte(s)) {
		return false
	}
	d.pos += len(s)
	return true
}

// skipString reads past a string, checking its escapes; its bytes may be any UTF-8 or none.
func (d *chunkDecoder) skipString() bool {
	d.pos++ // the quote
	for d.pos < len(d.buf) {
		b := d.buf[d.pos]
		switch {
		case b == '"':
			d.pos++
			return true
		case b < 0x20:
			return false
		case b == '\\':
			if d.pos+1 >= len(d.buf) {
				return false
			}
			d.pos++
			switch d.buf[d.pos] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				d.pos++
			case 'u':
				d.pos++
				if _, ok := d.hex4(); !ok {
					return false
				}
			default:
				return false
			}
		default:
			d.pos++
		}
	}
	return false
}

// skipNumber reads past a number in JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (d *chunkDecoder) skipNumber() bool {
	digits := func() int {
		n := 0
		for d.pos < len(d.buf) && '0' <= d.buf[d.pos] && d.buf[d.pos] <= '9' {
			d.pos++
			n++
		}
		return n
	}
	if d.buf[d.pos] == '-' {
		d.pos++
	}
	if d.pos < len(d.buf) && d.buf[d.pos] == '0' {
		d.pos++
	} else if digits() == 0 {
		return false
	}
	if d.pos < len(d.buf) && d.buf[d.pos] == '.' {
		d.pos++
		if digits() == 0 {
			return false
		}
	}
	if d.pos < len(d.buf) && (d.buf[d.pos] == 'e' || d.buf[d.pos] == 'E') {
		d.pos++
		if d.pos < len(d.buf) && (d.buf[d.pos] == '+' || d.buf[d.pos] == '-') {
			d.pos++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}
