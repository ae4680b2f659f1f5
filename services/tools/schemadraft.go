package tools

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// DraftSchema derives a starting JSON Schema from a Go struct, for writing a builtin's schema:
// exported fields by their json names, Go types mapped to JSON types, fields without omitempty
// required, a `description:"..."` tag as the description, and additionalProperties false. It is
// a draft to copy and refine; the schema written into the spec is the contract, never this.
func DraftSchema(v any) (string, error) {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return "", fmt.Errorf("DraftSchema needs a struct, got %v", t)
	}
	s, err := draftType(t, 0)
	if err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	return string(b), err
}

func draftType(t reflect.Type, depth int) (map[string]any, error) {
	if depth > 16 {
		return nil, fmt.Errorf("type %v nests too deeply", t)
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.Slice, reflect.Array:
		items, err := draftType(t.Elem(), depth+1)
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "array", "items": items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map key of %v is not a string", t)
		}
		vals, err := draftType(t.Elem(), depth+1)
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "object", "additionalProperties": vals}, nil
	case reflect.Struct:
		props := map[string]any{}
		var required []string
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			p, err := draftType(f.Type, depth+1)
			if err != nil {
				return nil, fmt.Errorf("field %s: %w", f.Name, err)
			}
			if d := f.Tag.Get("description"); d != "" {
				p["description"] = d
			}
			props[name] = p
			if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") && f.Type.Kind() != reflect.Pointer {
				required = append(required, name)
			}
		}
		s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			s["required"] = required
		}
		return s, nil
	default:
		return nil, fmt.Errorf("type %v has no JSON Schema equivalent", t)
	}
}
