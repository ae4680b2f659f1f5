package tools

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/rpc"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// anyOfChain is the attack of issue 11: each definition's anyOf names the next one twice, so n
// levels expand to 2^n subschemas in a few kilobytes.
func anyOfChain(n int) string {
	defs := make([]string, 0, n+1)
	for i := 0; i < n; i++ {
		next := fmt.Sprintf("#/$defs/d%d", i+1)
		defs = append(defs, fmt.Sprintf(`"d%d":{"anyOf":[{"$ref":%q},{"$ref":%q}]}`, i, next, next))
	}
	defs = append(defs, fmt.Sprintf(`"d%d":{"type":"integer","minimum":0}`, n))
	return `{"type":"object","properties":{"x":{"$ref":"#/$defs/d0"}},"$defs":{` + strings.Join(defs, ",") + `}}`
}

// deeplyNested is a 60 KB schema of nested "not" keywords.
func deeplyNested(n int) string {
	return `{"type":"object","properties":{"a":` + strings.Repeat(`{"not":`, n) + `{}` + strings.Repeat(`}`, n) + `}}`
}

// TestSchemaCostRefusesAttacks replays the schemas of issue 11: each is refused at registration
// with INVALID_ARGUMENT naming the limit, in milliseconds (they took 28 s and 2 GB, or the
// process, before), and nothing is stored.
func TestSchemaCostRefusesAttacks(t *testing.T) {
	c, _ := newClient(t, Options{})
	tests := []struct {
		name, schema, reason string
	}{
		{"anyOf chain, 24 levels", anyOfChain(24), "once its $refs are followed"},
		{"anyOf chain, 60 levels", anyOfChain(60), "once its $refs are followed"},
		{"deeply nested, 60 KB", deeplyNested(8000), "levels deep; at most 64"},
		{"ref loop at one level", `{"type":"object","$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"}]}},"properties":{"x":{"$ref":"#/$defs/a"}}}`, "loops back without descending"},
		{"branching recursion", `{"type":"object","properties":{"a":{"anyOf":[{"$ref":"#"},{"$ref":"#"}]}}}`, "once its $refs are followed"},
		{"too many branches", `{"type":"object","properties":{"a":{"anyOf":[` + strings.Repeat(`{"type":"string"},`, 2500) + `{"type":"null"}]}}}`, "more than 2000 allOf/anyOf/oneOf branches"},
		{"nesting beyond providers", `{"type":"object","properties":{"a":` + strings.Repeat(`{"type":"object","properties":{"a":`, 11) + `{"type":"string"}` + strings.Repeat(`}}`, 11) + `}}`, "nests objects and arrays 12 levels deep; at most 10"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			spec := httpSpec("costly", "http://127.0.0.1:1/x", tc.schema)
			start := time.Now()
			_, err := c.RegisterTool(ctxTimeout(t, 10*time.Second), &toolsv1.RegisterToolRequest{Spec: spec})
			took := time.Since(start)
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code %v (%v), want InvalidArgument", status.Code(err), err)
			}
			var found bool
			for _, fv := range rpc.FieldViolations(err) {
				found = found || fv.GetField() == "spec.input_schema" && strings.Contains(fv.GetDescription(), tc.reason)
			}
			if !found {
				t.Errorf("violations %v, want spec.input_schema saying %q", rpc.FieldViolations(err), tc.reason)
			}
			// Milliseconds of work; the bound leaves room for a loaded machine.
			if took > 3*time.Second {
				t.Errorf("refusing took %v", took)
			}
		})
	}
	resp, err := c.ListTools(ctxTimeout(t, 5*time.Second), &toolsv1.ListToolsRequest{})
	if err != nil || len(resp.GetTools()) != 0 {
		t.Errorf("refused schemas left %d tools (err %v)", len(resp.GetTools()), err)
	}
}

// TestSchemaCostAcceptsRealSchemas: shared definitions, a recursive tree and a chain short
// enough to stay within the limits are accepted, and validation of a failing value stays quick.
func TestSchemaCostAcceptsRealSchemas(t *testing.T) {
	c, _ := newClient(t, Options{})
	for name, schema := range map[string]string{
		"shared definitions": `{"type":"object","$defs":{"addr":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}},"required":["city"]}},"properties":{"home":{"$ref":"#/$defs/addr"},"work":{"$ref":"#/$defs/addr"}}}`,
		"recursive tree":     `{"type":"object","properties":{"name":{"type":"string"},"children":{"type":"array","items":{"$ref":"#"}}}}`,
		"anchor":             `{"type":"object","$defs":{"n":{"$anchor":"num","type":"number"}},"properties":{"a":{"$ref":"#num"}}}`,
		"anyOf chain, 8":     anyOfChain(8),
	} {
		t.Run(name, func(t *testing.T) {
			spec := httpSpec("ok_"+strings.ReplaceAll(strings.ReplaceAll(name, " ", "_"), ",", ""), "http://127.0.0.1:1/x", schema)
			mustRegister(t, c, spec)
			res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: spec.GetName(), Arguments: `{"x":"nope","home":5,"a":"x","name":{},"children":5}`})
			if res.GetSuccess() || res.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_VALIDATION {
				t.Errorf("failing value: %v", res)
			}
		})
	}
}

// TestArgumentDepthLimit: arguments nested deeper than maxArgumentDepth are a validation result
// the model can correct, not work for the validator.
func TestArgumentDepthLimit(t *testing.T) {
	c, _ := newClient(t, Options{})
	spec := httpSpec("tree", "http://127.0.0.1:1/x", `{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}}}`)
	mustRegister(t, c, spec)
	deep := strings.Repeat(`{"children":[`, 40) + `{}` + strings.Repeat(`]}`, 40)
	res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "tree", Arguments: deep})
	if res.GetSuccess() || !strings.Contains(res.GetError().GetMessage(), "at most 32") {
		t.Errorf("deep arguments: %v", res)
	}
}

// FuzzMeasureSchema: measuring never fails to finish, and a schema it accepts compiles to no
// more subschemas than it counted — the cost check bounds what the validator can walk.
func FuzzMeasureSchema(f *testing.F) {
	for _, s := range []string{
		anyOfChain(3), anyOfChain(20), deeplyNested(20),
		`{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#"}}}}`,
		`{"type":"object","$defs":{"a":{"$anchor":"x","allOf":[{"$ref":"#x"}]}}}`,
		`{"type":"object","properties":{"a":{"if":{"type":"string"},"then":{"minLength":1},"else":{"not":{}}}},"dependentSchemas":{"a":{"required":["b"]}}}`,
		`{"type":"object","patternProperties":{"^x":{"type":"array","prefixItems":[{"type":"string"}],"items":false}}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		if len(text) > 4096 || jsonDepth([]byte(text)) > maxSchemaDepth {
			return
		}
		var doc any
		if json.Unmarshal([]byte(text), &doc) != nil {
			return
		}
		cost, err := measureSchema(doc)
		if err != nil {
			return
		}
		if cost.nodes > maxSchemaNodes || cost.branches > maxSchemaBranches || cost.nesting > maxObjectNesting {
			t.Fatalf("accepted a schema over the limits: %+v", cost)
		}
		cs, err := compileSchema(text, false)
		if err != nil {
			return
		}
		if n := len(cs.byLoc); n > cost.nodes {
			t.Fatalf("the compiled schema has %d subschemas, the cost check counted %d", n, cost.nodes)
		}
		_ = cs.root.Validate(map[string]any{"a": []any{"x", map[string]any{"b": nil}}})
	})
}
