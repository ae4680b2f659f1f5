package memory

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// rawCandidate is one memory as the extraction model proposed it, after tolerant decoding.
type rawCandidate struct {
	Type       string
	Content    string
	Confidence float64
	Attributes map[string]string
	Subject    string
	Keywords   []string
	// Invalid says why the item cannot be used (empty when it can).
	Invalid string
}

// errNotJSON is a model reply with no usable JSON in it.
var errNotJSON = errors.New("the model's reply holds no JSON object with a memories list")

// maxReplyBytes caps what is parsed of a reply.
const maxReplyBytes = 256 << 10

// maxStarts caps the brackets a reply is tried from. Each try may scan to the end of the reply,
// so without a cap a reply of 64 KiB of "[" costs seconds (quadratic); the contract's JSON is
// among the first few brackets of any real reply.
const maxStarts = 64

// parseExtraction reads the extraction contract {"memories":[{"type","content","confidence",
// "attributes"}]} from a model reply, surviving what models wrap around JSON: code fences, a
// sentence before or after, a bare list instead of the object, confidences as strings or
// percentages, attribute values as numbers. It returns errNotJSON when nothing in the reply
// decodes to the contract; items that decode but are unusable are returned with Invalid set.
func parseExtraction(reply string) ([]rawCandidate, error) {
	if len(reply) > maxReplyBytes {
		reply = reply[:maxReplyBytes]
	}
	starts := jsonStarts(reply)
	if len(starts) > maxStarts {
		starts = starts[:maxStarts]
	}
	for _, start := range starts {
		end := matchingEnd(reply, start)
		if end < 0 {
			continue
		}
		var items []json.RawMessage
		text := reply[start : end+1]
		if text[0] == '[' {
			if json.Unmarshal([]byte(text), &items) != nil || !allObjects(items) {
				continue // a list of something else (perhaps nested in other JSON) is not the contract
			}
		} else {
			var obj map[string]json.RawMessage
			if json.Unmarshal([]byte(text), &obj) != nil {
				continue
			}
			raw, ok := obj["memories"]
			if !ok {
				continue
			}
			if string(raw) == "null" {
				return nil, nil
			}
			if json.Unmarshal(raw, &items) != nil {
				continue
			}
		}
		out := make([]rawCandidate, 0, len(items))
		for _, it := range items {
			out = append(out, decodeItem(it))
		}
		return out, nil
	}
	return nil, errNotJSON
}

// jsonStarts lists the offsets of '{' and '[' in s, fenced ones (after ```json) first.
func jsonStarts(s string) []int {
	var fenced, plain []int
	for i := 0; i < len(s); i++ {
		if s[i] != '{' && s[i] != '[' {
			continue
		}
		prefix := strings.TrimRight(s[:i], " \t\r\n")
		if strings.HasSuffix(prefix, "```json") || strings.HasSuffix(prefix, "```") {
			fenced = append(fenced, i)
		} else {
			plain = append(plain, i)
		}
	}
	return append(fenced, plain...)
}

// matchingEnd returns the offset of the bracket closing the one at start, honouring strings
// and escapes, or -1.
func matchingEnd(s string, start int) int {
	depth := 0
	inStr := false
	esc := false
	for i := start; i < len(s); i++ {
		c := s[i]
		if inStr {
			switch {
			case esc:
				esc = false
			case c == '\\':
				esc = true
			case c == '"':
				inStr = false
			}
			continue
		}
		switch c {
		case '"':
			inStr = true
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i
			}
			if depth < 0 {
				return -1
			}
		}
	}
	return -1
}

func decodeItem(raw json.RawMessage) rawCandidate {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return rawCandidate{Invalid: "not an object"}
	}
	var c rawCandidate
	c.Type = strings.ToLower(strings.TrimSpace(scalarString(obj["type"])))
	c.Content = strings.TrimSpace(scalarString(obj["content"]))
	c.Subject = strings.TrimSpace(scalarString(obj["subject"]))
	conf, err := confidence(obj["confidence"])
	if err != nil {
		c.Invalid = err.Error()
	}
	c.Confidence = conf
	if a, ok := obj["attributes"]; ok {
		var m map[string]json.RawMessage
		if json.Unmarshal(a, &m) == nil {
			c.Attributes = map[string]string{}
			for k, v := range m {
				if s := strings.TrimSpace(scalarString(v)); s != "" && strings.TrimSpace(k) != "" {
					c.Attributes[k] = s
				}
			}
		}
	}
	if k, ok := obj["keywords"]; ok {
		var list []json.RawMessage
		if json.Unmarshal(k, &list) == nil {
			for _, v := range list {
				if s := strings.TrimSpace(scalarString(v)); s != "" {
					c.Keywords = append(c.Keywords, s)
				}
			}
		} else if s := scalarString(k); s != "" {
			for _, p := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '，' || r == '、' }) {
				if p = strings.TrimSpace(p); p != "" {
					c.Keywords = append(c.Keywords, p)
				}
			}
		}
	}
	switch {
	case c.Invalid != "":
	case c.Content == "":
		c.Invalid = "no content"
	case c.Type == "":
		c.Invalid = "no type"
	}
	return c
}

// scalarString renders a JSON string, number or bool as text; anything else as "".
func scalarString(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var f json.Number
	if json.Unmarshal(raw, &f) == nil {
		return f.String()
	}
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return strconv.FormatBool(b)
	}
	return ""
}

// confidence reads 0.9, "0.9", "90%" or 90 (a percentage) as a number in [0, 1]; a missing
// confidence is 0, so an item without one is never kept.
func confidence(raw json.RawMessage) (float64, error) {
	s := strings.TrimSpace(scalarString(raw))
	if s == "" {
		return 0, nil
	}
	pct := strings.HasSuffix(s, "%")
	s = strings.TrimSuffix(s, "%")
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("confidence %q is not a number", s)
	}
	if pct || (f > 1 && f <= 100) {
		f /= 100
	}
	if f < 0 || f > 1 {
		return 0, fmt.Errorf("confidence %v is outside 0..1", f)
	}
	return f, nil
}

func allObjects(items []json.RawMessage) bool {
	for _, it := range items {
		var obj map[string]json.RawMessage
		if json.Unmarshal(it, &obj) != nil {
			return false
		}
	}
	return true
}
