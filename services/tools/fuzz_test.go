package tools

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"
)

// FuzzCheckArguments feeds arbitrary argument text through parsing, coercion and validation.
// Invariants: no panic; a parse error exactly when the text is not one JSON value; arguments that
// pass are valid JSON that satisfies the schema, and checking them again coerces nothing (the
// coercion is idempotent).
func FuzzCheckArguments(f *testing.F) {
	for _, s := range []string{
		`{"city":"Paris","guests":2}`,
		`{"city":"Paris","guests":"3","price":" 99.5","breakfast":"TRUE","zip":75001}`,
		`{"city":"Paris","guests":2,"tags":["a",3,null]}`,
		`{"city":"Paris","guests":2,"tags":"x","contact":{"name":1,"phone":"+1 555 0100"}}`,
		`{"guests":"-0"}`, `{"guests":"007"}`, `{"guests":"1e3"}`, `{"price":"+1.5"}`, `{"price":"NaN"}`,
		`[1,2]`, `"x"`, `null`, ``, `   `, `{"city":"Paris","gue`, `{} {}`, `{"a":` + strings.Repeat("[", 200),
		`{"city":"\u00e9\ud800","guests":9223372036854775808}`,
	} {
		f.Add(s)
	}
	cs, err := compileSchema(bookingSchema, true)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string) {
		checkArgumentsHolds(t, cs, text)
	})
}

// checkArgumentsHolds asserts the invariants of checkArguments for one schema and text.
func checkArgumentsHolds(t *testing.T, cs *compiledSchema, text string) {
	t.Helper()
	args, coercions, violations, perr := checkArguments(cs, text)
	trimmed := strings.TrimSpace(text)
	if (perr != nil) != (trimmed != "" && !json.Valid([]byte(trimmed))) {
		t.Fatalf("parse error %v for %q (json.Valid=%v)", perr, text, json.Valid([]byte(trimmed)))
	}
	if perr != nil || len(violations) > 0 {
		for _, v := range violations {
			if v.GetMessage() == "" {
				t.Fatalf("violation without a message at %q", v.GetPointer())
			}
		}
		return
	}
	if !json.Valid(args) {
		t.Fatalf("passed arguments are not JSON: %q", args)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.root.Validate(inst); err != nil {
		t.Fatalf("passed arguments %s fail the schema: %v", args, err)
	}
	again, c2, v2, err := checkArguments(cs, string(args))
	if err != nil || len(c2) > 0 || len(v2) > 0 {
		t.Fatalf("second check of %s: coercions %v violations %v err %v (first coercions %v)", args, c2, v2, err, coercions)
	}
	if !bytes.Equal(again, args) && len(coercions) == 0 {
		t.Fatalf("arguments changed without a coercion: %s → %s", args, again)
	}
}

// FuzzEvaluate: the calculator never panics, a result is always a finite number, and the value
// of a complete expression does not change with parentheses around it, a minus in front of it
// or blanks around it.
func FuzzEvaluate(f *testing.F) {
	for _, s := range []string{"1+2*3", "(1+2)^-3", "sqrt(2)**2", "max(1,2,3)", "round(2.5, 1)", "--1", "1/0", "1e309", "((((", "pi*e", "2 × 3 ÷ 4", "1_0.5_"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, expr string) {
		v, err := Evaluate(expr)
		if err == nil && (math.IsNaN(v) || math.IsInf(v, 0)) {
			t.Fatalf("Evaluate(%q) = %v without an error", expr, v)
		}
		if err != nil && v != 0 {
			t.Fatalf("Evaluate(%q) returned %v with error %v", expr, v, err)
		}
		if err != nil {
			return
		}
		for _, c := range []struct {
			expr string
			want float64
		}{{"(" + expr + ")", v}, {"-(" + expr + ")", -v}, {" " + expr + "\n", v}} {
			w, err := Evaluate(c.expr)
			if err != nil && !strings.Contains(err.Error(), "nests deeper") && len(c.expr) <= maxExpressionBytes {
				t.Fatalf("Evaluate(%q) = %v but Evaluate(%q) fails: %v", expr, v, c.expr, err)
			}
			if err == nil && w != c.want {
				t.Fatalf("Evaluate(%q) = %v, want %v as Evaluate(%q) = %v", c.expr, w, c.want, expr, v)
			}
		}
	})
}

// FuzzCompileSchema: registration never panics on a schema, never reads outside it, and a
// compiled schema checks any instance with the invariants of FuzzCheckArguments.
func FuzzCompileSchema(f *testing.F) {
	for _, s := range []string{
		bookingSchema, `{"type":"object"}`, `{"type":"object","$ref":"#/$defs/x","$defs":{"x":{"$ref":"#/$defs/x"}}}`,
		`{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`, `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","definitions":{"a":{}}}`,
		`{"type":"object","patternProperties":{"(":{}}}`, `true`, `[]`, `{`,
	} {
		f.Add(s, `{"a":1}`)
	}
	f.Fuzz(func(t *testing.T, schema, instance string) {
		cs, err := compileSchema(schema, true)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		checkArgumentsHolds(t, cs, instance)
	})
}

// FuzzParseToolsFile: any file text is parsed or refused, never a panic, durations that parse
// are valid, and a schema written as YAML (not as a string of JSON) becomes valid JSON.
func FuzzParseToolsFile(f *testing.F) {
	f.Add(toolsYAML)
	f.Add(`{"tools":[{"name":"a","input_schema":{"type":"object","x":&a [1,*a]}}]}`)
	f.Add("tools:\n  - input_schema: !!binary aGVsbG8=\n")
	f.Fuzz(func(t *testing.T, text string) {
		specs, err := ParseToolsFile(strings.NewReader(text))
		if err != nil {
			return
		}
		var nodes struct {
			Tools []struct {
				InputSchema  yaml.Node `yaml:"input_schema"`
				OutputSchema yaml.Node `yaml:"output_schema"`
			} `yaml:"tools"`
		}
		if err := yaml.Unmarshal([]byte(text), &nodes); err != nil || len(nodes.Tools) != len(specs) {
			t.Fatalf("parsed %d tools from %q, but YAML reads %d (%v)", len(specs), text, len(nodes.Tools), err)
		}
		for i, s := range specs {
			if s.GetTimeout() != nil && s.GetTimeout().CheckValid() != nil {
				t.Fatalf("invalid timeout from %q", text)
			}
			for _, sc := range []struct {
				node *yaml.Node
				text string
			}{{&nodes.Tools[i].InputSchema, s.GetInputSchema()}, {&nodes.Tools[i].OutputSchema, s.GetOutputSchema()}} {
				fromYAML := sc.node.Kind != 0 && !(sc.node.Kind == yaml.ScalarNode && sc.node.Tag == "!!str")
				if fromYAML && !json.Valid([]byte(sc.text)) {
					t.Fatalf("schema of tools[%d] from YAML is not JSON: %q (file %q)", i, sc.text, text)
				}
			}
		}
	})
}
