package tools

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
)

// DraftSchema derives a starting JSON Schema from a Go struct, for writing a tool's schema (a
// tools file, RegisterTool), with the MCP SDK's schema library (github.com/google/jsonschema-go):
// exported fields by their json names, fields without omitempty/omitzero required, pointers and
// slices nullable, a `jsonschema:"..."` tag as the description, and additionalProperties false.
// It is a draft to copy and refine; the schema written into the spec is the contract, never this.
// The standard builtins derive theirs with the same library (newBuiltin).
func DraftSchema(v any) (string, error) {
	t := reflect.TypeOf(v)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return "", fmt.Errorf("DraftSchema needs a struct, got %v", t)
	}
	s, err := jsonschema.ForType(t, nil)
	if err != nil {
		return "", err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	return string(b), err
}
