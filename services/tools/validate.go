package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

var printer = message.NewPrinter(language.English)

// argumentsError is arguments that are not one JSON value.
type argumentsError struct {
	msg string
}

func (e *argumentsError) Error() string { return e.msg }

// parseArguments parses the model's arguments text. Empty text means no arguments ({}), which
// models send for tools without parameters. Numbers stay json.Number so no precision is lost.
func parseArguments(text string) (any, error) {
	data := bytes.TrimSpace([]byte(text))
	if len(data) == 0 {
		return map[string]any{}, nil
	}
	if d := jsonDepth(data); d > maxArgumentDepth {
		return nil, &argumentsError{fmt.Sprintf("the arguments nest %d levels deep; at most %d are allowed", d, maxArgumentDepth)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, jsonSyntaxError(data, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		off := dec.InputOffset()
		return nil, &argumentsError{fmt.Sprintf("there is more text after the JSON value ends at byte %d (near %s); send exactly one JSON object", off, excerpt(data, int(off)))}
	}
	return v, nil
}

func jsonSyntaxError(data []byte, err error) error {
	var se *json.SyntaxError
	switch {
	case errors.Is(err, io.ErrUnexpectedEOF):
		return &argumentsError{fmt.Sprintf("the JSON ends in the middle of a value after %d bytes: it looks cut off; send the complete JSON object", len(data))}
	case errors.As(err, &se):
		// Offset counts the offending byte itself.
		line, col := lineCol(data, int(se.Offset)-1)
		return &argumentsError{fmt.Sprintf("%s at line %d, column %d (near %s)", se.Error(), line, col, excerpt(data, int(se.Offset)))}
	default:
		return &argumentsError{err.Error()}
	}
}

func lineCol(data []byte, off int) (int, int) {
	off = min(max(off, 0), len(data))
	line := 1 + bytes.Count(data[:off], []byte("\n"))
	col := off - bytes.LastIndexByte(data[:off], '\n')
	return line, col
}

// excerpt quotes up to 20 bytes either side of off, cut on rune boundaries.
func excerpt(data []byte, off int) string {
	lo, hi := max(off-20, 0), min(off+20, len(data))
	for lo > 0 && !utf8.RuneStart(data[lo]) {
		lo--
	}
	for hi < len(data) && !utf8.RuneStart(data[hi]) {
		hi++
	}
	return strconv.Quote(string(data[lo:hi]))
}

// coerce converts obvious scalar mismatches where the schema is unambiguous: a string holding an
// integer, number or boolean where only that type is allowed, or a number or boolean where only
// a string is. It walks objects and arrays the schema describes and returns the (possibly
// replaced) value; every change is appended to out.
func (cs *compiledSchema) coerce(s *jsonschema.Schema, v any, ptr string, out *[]*toolsv1.Coercion) any {
	want := cs.scalar[s]
	e, ok := cs.eff[s]
	if !ok {
		// Not indexed (nesting beyond the index depth): work it out now.
		e = effective(s, 0)
		if e != nil {
			want, _ = singleType(e)
		}
	}
	if e == nil {
		return v
	}
	switch x := v.(type) {
	case map[string]any:
		for k, pv := range x {
			if sub := propertySchema(e, k); sub != nil {
				x[k] = cs.coerce(sub, pv, ptr+"/"+escapePointer(k), out)
			}
		}
		return x
	case []any:
		for i, iv := range x {
			if sub := itemSchema(e, i); sub != nil {
				x[i] = cs.coerce(sub, iv, ptr+"/"+strconv.Itoa(i), out)
			}
		}
		return x
	}
	if want == "" {
		return v
	}
	to, changed := coerceScalar(v, want)
	if !changed {
		return v
	}
	from, _ := json.Marshal(v)
	toText, _ := json.Marshal(to)
	*out = append(*out, &toolsv1.Coercion{Pointer: ptr, From: string(from), To: string(toText)})
	return to
}

func coerceScalar(v any, want string) (any, bool) {
	switch x := v.(type) {
	case string:
		t := strings.TrimSpace(x)
		switch want {
		case "integer":
			if isIntegerLiteral(t) {
				return json.Number(strings.TrimPrefix(t, "+")), true
			}
		case "number":
			if isNumberLiteral(t) {
				return json.Number(strings.TrimPrefix(t, "+")), true
			}
		case "boolean":
			switch strings.ToLower(t) {
			case "true":
				return true, true
			case "false":
				return false, true
			}
		}
	case json.Number:
		if want == "string" {
			return x.String(), true
		}
	case bool:
		if want == "string" {
			return strconv.FormatBool(x), true
		}
	}
	return v, false
}

// isIntegerLiteral accepts what JSON would read as an integer: optional sign, digits, no
// leading zeros, at most 19 digits so no precision is silently lost.
func isIntegerLiteral(s string) bool {
	s = strings.TrimPrefix(strings.TrimPrefix(s, "+"), "-")
	if s == "" || len(s) > 19 || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// isNumberLiteral accepts a JSON number literal (an optional leading "+" aside).
func isNumberLiteral(s string) bool {
	s = strings.TrimPrefix(s, "+")
	if s == "" || len(s) > 64 {
		return false
	}
	return json.Valid([]byte(s)) && (s[0] == '-' || (s[0] >= '0' && s[0] <= '9'))
}

// effective resolves a location's schema to the one that carries its constraints: through $ref
// when the schema only refers, and through the nullable pattern anyOf/oneOf [X, {type: null}].
// It returns nil when the location is ambiguous (several real alternatives).
func effective(s *jsonschema.Schema, depth int) *jsonschema.Schema {
	for ; s != nil && depth < 16; depth++ {
		if s.Types == nil && s.Properties == nil && s.Items == nil && s.Items2020 == nil {
			switch {
			case s.Ref != nil:
				s = s.Ref
				continue
			case s.DynamicRef != nil && s.DynamicRef.Ref != nil:
				s = s.DynamicRef.Ref
				continue
			case len(s.AnyOf) > 0 || len(s.OneOf) > 0:
				alts := append(slices.Clone(s.AnyOf), s.OneOf...)
				var real *jsonschema.Schema
				for _, a := range alts {
					if isNullSchema(a) {
						continue
					}
					if real != nil {
						return nil
					}
					real = a
				}
				s = real
				continue
			case len(s.AllOf) == 1:
				s = s.AllOf[0]
				continue
			}
		}
		return s
	}
	return nil
}

func isNullSchema(s *jsonschema.Schema) bool {
	return s != nil && s.Types != nil && slices.Equal(s.Types.ToStrings(), []string{"null"})
}

// singleType returns the one non-null type a schema allows.
func singleType(s *jsonschema.Schema) (string, bool) {
	if s.Types == nil || s.Enum != nil || s.Const != nil {
		return "", false
	}
	var out []string
	for _, t := range s.Types.ToStrings() {
		if t != "null" {
			out = append(out, t)
		}
	}
	if len(out) != 1 {
		return "", false
	}
	return out[0], true
}

func propertySchema(s *jsonschema.Schema, name string) *jsonschema.Schema {
	if p, ok := s.Properties[name]; ok {
		return p
	}
	if ap, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		return ap
	}
	return nil
}

func itemSchema(s *jsonschema.Schema, i int) *jsonschema.Schema {
	if i < len(s.PrefixItems) {
		return s.PrefixItems[i]
	}
	if s.Items2020 != nil {
		return s.Items2020
	}
	switch x := s.Items.(type) {
	case *jsonschema.Schema:
		return x
	case []*jsonschema.Schema:
		if i < len(x) {
			return x[i]
		}
		if ai, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
			return ai
		}
	}
	return nil
}

func escapePointer(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

func pointer(tokens []string) string {
	var sb strings.Builder
	for _, t := range tokens {
		sb.WriteByte('/')
		sb.WriteString(escapePointer(t))
	}
	return sb.String()
}

// violations turns a validation error into one violation per problem, each at the JSON pointer
// of the offending (or missing) value with what was expected there.
func (cs *compiledSchema) violations(err error, inst any) []*toolsv1.Violation {
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []*toolsv1.Violation{{Pointer: "", Message: err.Error()}}
	}
	var out []*toolsv1.Violation
	cs.collect(ve, inst, &out)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Pointer < out[j].Pointer })
	return slices.CompactFunc(out, func(a, b *toolsv1.Violation) bool {
		return a.Pointer == b.Pointer && a.Message == b.Message
	})
}

func (cs *compiledSchema) collect(e *jsonschema.ValidationError, inst any, out *[]*toolsv1.Violation) {
	switch e.ErrorKind.(type) {
	case *kind.AnyOf, *kind.OneOf:
		if cs.collectAlternatives(e, inst, out) {
			return
		}
	}
	if len(e.Causes) > 0 {
		for _, c := range e.Causes {
			cs.collect(c, inst, out)
		}
		return
	}
	*out = append(*out, cs.leaf(e, inst)...)
}

// collectAlternatives reports a failed anyOf/oneOf. Alternatives whose type did not even match
// are dropped when another alternative matched the type and failed deeper (that one is what the
// caller meant); when no alternative matched the type, one violation lists the accepted types.
// It returns false when the error is better reported by its own message (oneOf matching twice).
func (cs *compiledSchema) collectAlternatives(e *jsonschema.ValidationError, inst any, out *[]*toolsv1.Violation) bool {
	if len(e.Causes) == 0 {
		return false
	}
	var wantTypes []string
	var got string
	var deeper []*jsonschema.ValidationError
	for _, branch := range e.Causes {
		ls := leaves(branch)
		if len(ls) == 1 && slices.Equal(ls[0].InstanceLocation, e.InstanceLocation) {
			if t, ok := ls[0].ErrorKind.(*kind.Type); ok {
				got = t.Got
				wantTypes = append(wantTypes, t.Want...)
				continue
			}
		}
		deeper = append(deeper, branch)
	}
	if len(deeper) > 0 {
		for _, b := range deeper {
			cs.collect(b, inst, out)
		}
		return true
	}
	slices.Sort(wantTypes)
	wantTypes = slices.Compact(wantTypes)
	v := lookup(inst, e.InstanceLocation)
	*out = append(*out, &toolsv1.Violation{
		Pointer: pointer(e.InstanceLocation),
		Message: fmt.Sprintf("got %s %s, want %s", got, shortJSON(v), strings.Join(wantTypes, " or ")),
	})
	return true
}

// leaves returns the errors without causes under e.
func leaves(e *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return []*jsonschema.ValidationError{e}
	}
	var out []*jsonschema.ValidationError
	for _, c := range e.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

func (cs *compiledSchema) leaf(e *jsonschema.ValidationError, inst any) []*toolsv1.Violation {
	at := pointer(e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		parent := cs.byLoc[e.SchemaURL]
		var out []*toolsv1.Violation
		for _, name := range k.Missing {
			msg := "is required"
			if parent != nil {
				if d := describe(parent.Properties[name]); d != "" {
					msg += ": " + d
				}
			}
			out = append(out, &toolsv1.Violation{Pointer: at + "/" + escapePointer(name), Message: msg})
		}
		return out
	case *kind.AdditionalProperties:
		allowed := "none"
		if parent := cs.byLoc[e.SchemaURL]; parent != nil && len(parent.Properties) > 0 {
			names := make([]string, 0, len(parent.Properties))
			for n := range parent.Properties {
				names = append(names, n)
			}
			sort.Strings(names)
			allowed = strings.Join(names, ", ")
		}
		var out []*toolsv1.Violation
		for _, name := range k.Properties {
			out = append(out, &toolsv1.Violation{
				Pointer: at + "/" + escapePointer(name),
				Message: "is not an allowed property here (allowed: " + allowed + "); remove it",
			})
		}
		return out
	case *kind.Type:
		v := lookup(inst, e.InstanceLocation)
		return []*toolsv1.Violation{{Pointer: at, Message: fmt.Sprintf("got %s %s, want %s", k.Got, shortJSON(v), strings.Join(k.Want, " or "))}}
	case *kind.Enum:
		vals := make([]string, 0, len(k.Want))
		for _, w := range k.Want {
			vals = append(vals, shortJSON(w))
		}
		return []*toolsv1.Violation{{Pointer: at, Message: fmt.Sprintf("got %s, want one of %s", shortJSON(k.Got), strings.Join(vals, ", "))}}
	case *kind.Const:
		return []*toolsv1.Violation{{Pointer: at, Message: fmt.Sprintf("got %s, want %s", shortJSON(k.Got), shortJSON(k.Want))}}
	case *kind.FalseSchema:
		return []*toolsv1.Violation{{Pointer: at, Message: "is not allowed here; remove it"}}
	default:
		return []*toolsv1.Violation{{Pointer: at, Message: e.ErrorKind.LocalizedString(printer)}}
	}
}

// describe says what a property should hold: its type, allowed values and description.
func describe(s *jsonschema.Schema) string {
	if s == nil {
		return ""
	}
	e := effective(s, 0)
	if e == nil {
		e = s
	}
	var parts []string
	switch {
	case e.Enum != nil:
		vals := make([]string, 0, len(e.Enum.Values))
		for _, v := range e.Enum.Values {
			vals = append(vals, shortJSON(v))
		}
		parts = append(parts, "one of "+strings.Join(vals, ", "))
	case e.Types != nil:
		t := strings.Join(e.Types.ToStrings(), " or ")
		if it := itemSchema(e, 0); it != nil && slices.Contains(e.Types.ToStrings(), "array") {
			if ie := effective(it, 0); ie != nil && ie.Types != nil {
				t += " of " + strings.Join(ie.Types.ToStrings(), " or ")
			}
		}
		if e.Format != nil {
			t += " (format " + e.Format.Name + ")"
		}
		parts = append(parts, "a value of type "+t)
	}
	desc := s.Description
	if desc == "" {
		desc = e.Description
	}
	if desc != "" {
		parts = append(parts, strconv.Quote(truncateRunes(desc, 160)))
	}
	return strings.Join(parts, ", ")
}

// lookup returns the value at a location of the instance, or nil.
func lookup(v any, loc []string) any {
	for _, tok := range loc {
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// shortJSON renders a value for a message, at most about 60 bytes.
func shortJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return truncateRunes(string(b), 60)
}

func truncateRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// validationMessage is the text a model reads when its arguments break the schema: every
// violation by JSON pointer with what was expected, then what to do.
func validationMessage(tool string, vs []*toolsv1.Violation) string {
	var sb strings.Builder
	n := len(vs)
	fmt.Fprintf(&sb, "The arguments for tool %q do not match its input schema (%d %s):\n", tool, n, plural(n, "problem", "problems"))
	for _, v := range vs {
		p := v.Pointer
		if p == "" {
			p = "(the arguments object)"
		}
		fmt.Fprintf(&sb, "- %s: %s\n", p, v.Message)
	}
	fmt.Fprintf(&sb, "Correct the arguments so they match the schema and call %s again.", tool)
	return sb.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
