package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// schemaURL is where a tool's schema is registered inside its compiler; refs resolve against it
// unless the schema sets its own $id.
const schemaURL = "hermes:///tool/schema.json"

// maxSchemaBytes bounds a schema's size, so registration cannot be used to exhaust memory.
const maxSchemaBytes = 256 << 10

// compiledSchema is a compiled JSON Schema with an index of its subschemas by location, which
// validation uses to say what a missing or extra property should have been.
type compiledSchema struct {
	root  *jsonschema.Schema
	byLoc map[string]*jsonschema.Schema
	// coercion facts per subschema, computed once: the schema that carries the location's
	// constraints (nil when ambiguous) and the one type a scalar there may be coerced to.
	eff    map[*jsonschema.Schema]*jsonschema.Schema
	scalar map[*jsonschema.Schema]string
}

// noRemoteRefs refuses to load any document a schema refers to: a tool schema must be
// self-contained, and the service never reads files or the network on a schema's behalf.
// The standard metaschemas are built into the library and need no loading.
type noRemoteRefs struct{}

func (noRemoteRefs) Load(url string) (any, error) {
	return nil, fmt.Errorf("refers to the external document %q; only references inside the schema (\"#/...\") are supported", url)
}

// compileSchema parses, measures (schemacost.go) and compiles a JSON Schema. With wantObject, it must describe an object:
// its top-level "type" is "object". Drafts 4, 6, 7, 2019-09 and 2020-12 are accepted through
// "$schema"; without it the schema is read as 2020-12, which for the keywords tools use reads
// draft-07 schemas the same way.
func compileSchema(text string, wantObject bool) (*compiledSchema, error) {
	if len(text) > maxSchemaBytes {
		return nil, fmt.Errorf("is %d bytes; at most %d are allowed", len(text), maxSchemaBytes)
	}
	if d := jsonDepth([]byte(text)); d > maxSchemaDepth {
		return nil, fmt.Errorf("nests %d levels deep; at most %d are allowed", d, maxSchemaDepth)
	}
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("is not valid JSON: %w", err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, errors.New("must be a JSON object (a schema such as {\"type\":\"object\",\"properties\":{...}})")
	}
	if wantObject {
		if err := checkObjectType(obj); err != nil {
			return nil, err
		}
	}
	if _, err := measureSchema(doc); err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noRemoteRefs{})
	// Strict: "format" is asserted in every draft, not only where draft-07 asserts it.
	c.AssertFormat()
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, fmt.Errorf("cannot be loaded: %w", err)
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, schemaError(err)
	}
	cs := &compiledSchema{root: sch, byLoc: map[string]*jsonschema.Schema{},
		eff: map[*jsonschema.Schema]*jsonschema.Schema{}, scalar: map[*jsonschema.Schema]string{}}
	cs.index(sch, 0)
	for _, sub := range cs.byLoc {
		e := effective(sub, 0)
		cs.eff[sub] = e
		if e != nil {
			if t, ok := singleType(e); ok {
				cs.scalar[sub] = t
			}
		}
	}
	return cs, nil
}

// checkObjectType requires the top-level type to be "object" (or ["object"]), which is what
// model providers accept as a function's parameters.
func checkObjectType(obj map[string]any) error {
	switch t := obj["type"].(type) {
	case string:
		if t == "object" {
			return nil
		}
		return fmt.Errorf("must describe an object: its top-level \"type\" is %q, want \"object\"", t)
	case []any:
		if len(t) == 1 && t[0] == "object" {
			return nil
		}
		return fmt.Errorf("must describe an object: its top-level \"type\" is %v, want \"object\"", t)
	case nil:
		return errors.New("must describe an object: set its top-level \"type\" to \"object\"")
	default:
		return fmt.Errorf("has a top-level \"type\" of %v, want \"object\"", t)
	}
}

// schemaError turns a compiler error into a message that names the problem: for a schema that
// breaks the metaschema, each offending keyword by its pointer in the schema.
func schemaError(err error) error {
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if errors.As(err, &sve) && errors.As(sve.Err, &ve) {
		var parts []string
		for _, l := range leaves(ve) {
			at := pointer(l.InstanceLocation)
			if at == "" {
				at = "(top level)"
			}
			parts = append(parts, fmt.Sprintf("at %s: %s", at, l.ErrorKind.LocalizedString(printer)))
		}
		if len(parts) > 0 {
			return errors.New("is not a valid JSON Schema: " + strings.Join(parts, "; "))
		}
	}
	msg := err.Error()
	msg = strings.ReplaceAll(msg, schemaURL, "schema")
	msg = strings.TrimPrefix(msg, "jsonschema: ")
	return errors.New("is not a valid JSON Schema: " + msg)
}

// index records every reachable subschema by location; depth bounds pathological nesting.
func (cs *compiledSchema) index(s *jsonschema.Schema, depth int) {
	if s == nil || depth > 64 {
		return
	}
	if _, seen := cs.byLoc[s.Location]; seen {
		return
	}
	cs.byLoc[s.Location] = s
	for _, sub := range subschemas(s) {
		cs.index(sub, depth+1)
	}
}

// subschemas lists a schema's direct subschemas.
func subschemas(s *jsonschema.Schema) []*jsonschema.Schema {
	var out []*jsonschema.Schema
	add := func(xs ...*jsonschema.Schema) {
		for _, x := range xs {
			if x != nil {
				out = append(out, x)
			}
		}
	}
	add(s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else, s.PropertyNames, s.Contains,
		s.Items2020, s.UnevaluatedItems, s.UnevaluatedProperties, s.ContentSchema)
	if s.DynamicRef != nil {
		add(s.DynamicRef.Ref)
	}
	add(s.AllOf...)
	add(s.AnyOf...)
	add(s.OneOf...)
	add(s.PrefixItems...)
	for _, p := range s.Properties {
		add(p)
	}
	for _, p := range s.PatternProperties {
		add(p)
	}
	for _, p := range s.DependentSchemas {
		add(p)
	}
	for _, d := range s.Dependencies {
		if x, ok := d.(*jsonschema.Schema); ok {
			add(x)
		}
	}
	switch x := s.Items.(type) {
	case *jsonschema.Schema:
		add(x)
	case []*jsonschema.Schema:
		add(x...)
	}
	if x, ok := s.AdditionalItems.(*jsonschema.Schema); ok {
		add(x)
	}
	if x, ok := s.AdditionalProperties.(*jsonschema.Schema); ok {
		add(x)
	}
	return out
}

// compactJSON normalizes JSON text without reordering keys: a schema's property order is part
// of what a model sees.
func compactJSON(text string) (string, error) {
	b, err := compactJSONBytes(text)
	return string(b), err
}

// compactJSONBytes is text without insignificant white space, or an error when text is not
// one JSON value (json.Compact checks it as json.Valid does, in the same pass).
func compactJSONBytes(text string) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, len(text)))
	if err := json.Compact(buf, []byte(text)); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// jsonDepth is the deepest nesting of arrays and objects in JSON text, found without decoding
// it (text that is not JSON gets some number; the decoder reports the syntax error).
func jsonDepth(data []byte) int {
	depth, deepest, inString, escaped := 0, 0, false, false
	for _, c := range data {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > deepest {
				deepest = depth
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return deepest
}
