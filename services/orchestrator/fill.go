package orchestrator

import (
	"bytes"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"unicode"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// inputSchema is the part of a tool's JSON Schema that filling needs.
type inputSchema struct {
	Required   []string                   `json:"required"`
	Properties map[string]json.RawMessage `json:"properties"`
}

// complete reports, decoding only the schema's required list and the names of the arguments,
// that args is an object with every required argument, or that the schema requires none: then
// fillFromMemory has nothing to do (every call of a turn's tools, nearly always). Any other case,
// malformed input included, takes the full decoding.
func complete(schema, args string) bool {
	var s struct {
		Required []string `json:"required"`
	}
	if json.Unmarshal([]byte(schema), &s) != nil || len(s.Required) == 0 {
		return true // the full decoding fails too, or finds nothing required
	}
	var present map[string]skipJSON
	if json.Unmarshal([]byte(args), &present) != nil || present == nil {
		return false
	}
	for _, name := range s.Required {
		if _, ok := present[name]; !ok {
			return false
		}
	}
	return true
}

// skipJSON takes any JSON value and keeps nothing of it.
type skipJSON struct{}

func (*skipJSON) UnmarshalJSON([]byte) error { return nil }

type propertySchema struct {
	Type        json.RawMessage   `json:"type"`
	Enum        []json.RawMessage `json:"enum"`
	Description string            `json:"description"`
	Format      string            `json:"format"`
}

// types lists the JSON types the property allows ("string" when it names none).
func (p propertySchema) types() []string {
	var types []string
	if len(p.Type) > 0 {
		var one string
		if json.Unmarshal(p.Type, &one) == nil {
			types = []string{one}
		} else {
			_ = json.Unmarshal(p.Type, &types)
		}
	}
	if len(types) == 0 {
		types = []string{"string"}
	}
	return types
}

// fillOption is a remembered value that could fill an argument.
type fillOption struct {
	value    json.RawMessage // of the property's type
	raw      string          // as remembered
	memoryID string
	// inContext: the memory was recalled for the turn (it passed the similarity threshold for
	// the turn's text), not only found by looking the attribute up.
	inContext    bool
	recallReason string
	// key is the attribute the value is stored under; subject, content and keywords describe
	// the memory, so the rules can tell when the message speaks of it ("not my home").
	key, subject, content string
	keywords              []string
}

// Outcomes of a fill decision (FillDecision.outcome).
const (
	fillFilled   = "filled"
	fillRejected = "rejected"
	fillReplaced = "replaced"
	fillUnsure   = "unsure"
	fillNoMemory = "no_memory"
)

// fillDecision is what was decided about one missing argument.
type fillDecision struct {
	outcome string
	// option is the remembered value considered (nil for no_memory).
	option *fillOption
	// userValue is the value the user gave instead, when the decider knows it, and userJSON
	// that value typed to the argument's schema (nil when it does not convert).
	userValue string
	userJSON  json.RawMessage
	// userWeak: the value is only a name found in the message, not tied to the argument.
	userWeak bool
	reason   string
	by       string // "model" or "rules"
}

// fillFromMemory fills required arguments that the call leaves out with remembered values, each
// only when decide says so. Memory only fills blanks: an argument that is present in the call —
// whatever its value, null included — is never changed, and the original JSON text is kept byte
// for byte with the filled members appended. options lists an argument's remembered values, best
// first, already converted to the property's type. Arguments that are not a JSON object are
// returned unchanged (the tool service reports them to the model). It returns the arguments,
// what was filled, and a decision for every missing argument that had a remembered value or not.
func fillFromMemory(schema, args string, options func(name string, prop propertySchema) []fillOption,
	decide func(name string, prop json.RawMessage, opts []fillOption, present map[string]json.RawMessage) fillDecision) (string, []*orchestratorv1.FilledArgument, []fillDecision, []string) {
	if complete(schema, args) {
		return args, nil, nil, nil
	}
	return fillMissing(schema, args, options, decide)
}

// fillMissing is fillFromMemory's full decoding.
func fillMissing(schema, args string, options func(name string, prop propertySchema) []fillOption,
	decide func(name string, prop json.RawMessage, opts []fillOption, present map[string]json.RawMessage) fillDecision) (string, []*orchestratorv1.FilledArgument, []fillDecision, []string) {
	var s inputSchema
	if json.Unmarshal([]byte(schema), &s) != nil || len(s.Required) == 0 {
		return args, nil, nil, nil
	}
	trimmed := strings.TrimSpace(args)
	if trimmed == "" {
		trimmed = "{}"
	}
	var present map[string]json.RawMessage
	if json.Unmarshal([]byte(trimmed), &present) != nil || present == nil {
		return args, nil, nil, nil
	}
	var filled []*orchestratorv1.FilledArgument
	var decisions []fillDecision
	var names []string
	var members [][]byte
	for _, name := range s.Required {
		if _, ok := present[name]; ok {
			continue
		}
		var prop propertySchema
		_ = json.Unmarshal(s.Properties[name], &prop)
		opts := options(name, prop)
		d := fillDecision{outcome: fillNoMemory, reason: "no remembered value fits this argument", by: "rules"}
		if len(opts) > 0 {
			d = decide(name, s.Properties[name], opts, present)
		}
		decisions = append(decisions, d)
		names = append(names, name)
		if d.outcome != fillFilled || d.option == nil {
			continue
		}
		key, _ := json.Marshal(name)
		members = append(members, append(append(key, ':'), d.option.value...))
		filled = append(filled, &orchestratorv1.FilledArgument{Name: name, Value: string(d.option.value), MemoryId: d.option.memoryID})
		present[name] = d.option.value
	}
	if len(filled) == 0 {
		return args, nil, decisions, names
	}
	body := strings.TrimSuffix(strings.TrimSpace(trimmed[1:]), "}")
	var b bytes.Buffer
	b.WriteByte('{')
	b.WriteString(body)
	for i, m := range members {
		if i > 0 || strings.TrimSpace(body) != "" {
			b.WriteByte(',')
		}
		b.Write(m)
	}
	b.WriteByte('}')
	return b.String(), filled, decisions, names
}

// memoryOptions are the values the memories hold for an argument, best memory first, in the
// property's type (a value that does not fit the type or the enum is not an option).
func memoryOptions(mems []*memoryv1.RecalledMemory, name string, prop propertySchema, inContext bool) []fillOption {
	var out []fillOption
	for _, m := range mems {
		key, raw, ok := attributeFor(m.GetMemory().GetAttributes(), name)
		if !ok {
			continue
		}
		val, ok := prop.convert(raw)
		if !ok {
			continue
		}
		mem := m.GetMemory()
		out = append(out, fillOption{value: val, raw: strings.TrimSpace(raw), memoryID: mem.GetId(), inContext: inContext, recallReason: m.GetReason(),
			key: key, subject: mem.GetSubject(), content: mem.GetContent(), keywords: mem.GetKeywords()})
	}
	return out
}

// attributeFor finds the attribute for an argument: the same name, or the same name once case
// and punctuation are ignored (restaurantName and restaurant_name). Exact matches win; among
// loose matches the lexically first key wins, so the choice is deterministic.
func attributeFor(attrs map[string]string, name string) (key, value string, ok bool) {
	if v, ok := attrs[name]; ok && strings.TrimSpace(v) != "" {
		return name, v, true
	}
	want := looseName(name)
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if looseName(k) == want && strings.TrimSpace(attrs[k]) != "" {
			return k, attrs[k], true
		}
	}
	return "", "", false
}

func looseName(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return b.String()
}

// convert turns an attribute's text into JSON of the property's type; ok is false when it does
// not fit the type or the enum.
func (p propertySchema) convert(raw string) (json.RawMessage, bool) {
	raw = strings.TrimSpace(raw)
	var val json.RawMessage
	for _, t := range p.types() {
		switch t {
		case "string":
			val, _ = json.Marshal(raw)
		case "integer":
			if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
				val = json.RawMessage(strconv.FormatInt(n, 10))
			}
		case "number":
			if f, err := strconv.ParseFloat(raw, 64); err == nil {
				val = json.RawMessage(strconv.FormatFloat(f, 'g', -1, 64))
			}
		case "boolean":
			if v, err := strconv.ParseBool(raw); err == nil {
				val = json.RawMessage(strconv.FormatBool(v))
			}
		case "array", "object":
			if json.Valid([]byte(raw)) {
				var probe any
				_ = json.Unmarshal([]byte(raw), &probe)
				_, isArr := probe.([]any)
				_, isObj := probe.(map[string]any)
				if (t == "array" && isArr) || (t == "object" && isObj) {
					val = json.RawMessage(raw)
				}
			}
		}
		if val != nil {
			break
		}
	}
	if val == nil {
		return nil, false
	}
	if len(p.Enum) > 0 {
		want, err := CanonicalJSON(string(val))
		if err != nil {
			return nil, false
		}
		for _, e := range p.Enum {
			if c, err := CanonicalJSON(string(e)); err == nil && c == want {
				return val, true
			}
		}
		return nil, false
	}
	return val, true
}
