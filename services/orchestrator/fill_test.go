package orchestrator

import (
	"encoding/json"
	"math/big"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

const reservationSchema = `{
  "type": "object",
  "properties": {
    "restaurant_name": {"type": "string"},
    "time": {"type": "string"},
    "party_size": {"type": "integer", "minimum": 1},
    "seating": {"type": "string", "enum": ["indoor", "outdoor"]},
    "vip": {"type": "boolean"}
  },
  "required": ["restaurant_name", "time", "party_size"]
}`

func recalled(id string, attrs map[string]string) *memoryv1.RecalledMemory {
	return &memoryv1.RecalledMemory{Memory: &memoryv1.Memory{Id: id, Attributes: attrs}}
}

// fillAll fills from the memories' attributes whatever the message: the mechanics of filling,
// without the decision (explicit_test.go tests that).
func fillAll(schema, args string, mems []*memoryv1.RecalledMemory) (string, []*orchestratorv1.FilledArgument) {
	out, filled, _, _ := fillFromMemory(schema, args,
		func(name string, prop propertySchema) []fillOption { return memoryOptions(mems, name, prop, true) },
		func(_ string, _ json.RawMessage, opts []fillOption, _ map[string]json.RawMessage) fillDecision {
			return fillDecision{outcome: fillFilled, option: &opts[0], by: "test"}
		})
	return out, filled
}

func TestFillFromMemory(t *testing.T) {
	restaurant := recalled("m1", map[string]string{"restaurant_name": "蜀香园", "party_size": "4", "time": "18:00"})
	tests := []struct {
		name     string
		schema   string
		args     string
		memories []*memoryv1.RecalledMemory
		want     string
		filled   []*orchestratorv1.FilledArgument
	}{
		{
			name:     "fills only the missing argument; explicit time and party size are kept",
			schema:   reservationSchema,
			args:     `{"time":"明天 19:00","party_size":2}`,
			memories: []*memoryv1.RecalledMemory{restaurant},
			want:     `{"time":"明天 19:00","party_size":2,"restaurant_name":"蜀香园"}`,
			filled:   []*orchestratorv1.FilledArgument{{Name: "restaurant_name", Value: `"蜀香园"`, MemoryId: "m1"}},
		},
		{
			name:     "nothing missing: the call is untouched",
			schema:   reservationSchema,
			args:     `{"restaurant_name":"川味轩", "time":"20:00", "party_size":3}`,
			memories: []*memoryv1.RecalledMemory{restaurant},
			want:     `{"restaurant_name":"川味轩", "time":"20:00", "party_size":3}`,
		},
		{
			name:     "present null or empty is explicit and never changed",
			schema:   reservationSchema,
			args:     `{"restaurant_name":null,"time":"","party_size":2}`,
			memories: []*memoryv1.RecalledMemory{restaurant},
			want:     `{"restaurant_name":null,"time":"","party_size":2}`,
		},
		{
			name:     "integer attribute becomes a number; empty object",
			schema:   reservationSchema,
			args:     `{}`,
			memories: []*memoryv1.RecalledMemory{restaurant},
			want:     `{"restaurant_name":"蜀香园","time":"18:00","party_size":4}`,
			filled: []*orchestratorv1.FilledArgument{
				{Name: "restaurant_name", Value: `"蜀香园"`, MemoryId: "m1"},
				{Name: "time", Value: `"18:00"`, MemoryId: "m1"},
				{Name: "party_size", Value: `4`, MemoryId: "m1"},
			},
		},
		{
			name:     "a value of the wrong type is skipped for the next memory",
			schema:   reservationSchema,
			args:     `{"restaurant_name":"x","time":"t"}`,
			memories: []*memoryv1.RecalledMemory{recalled("bad", map[string]string{"party_size": "两个人"}), recalled("good", map[string]string{"partySize": "2"})},
			want:     `{"restaurant_name":"x","time":"t","party_size":2}`,
			filled:   []*orchestratorv1.FilledArgument{{Name: "party_size", Value: `2`, MemoryId: "good"}},
		},
		{
			name:     "enum is respected",
			schema:   `{"type":"object","properties":{"seating":{"type":"string","enum":["indoor","outdoor"]}},"required":["seating"]}`,
			args:     `{}`,
			memories: []*memoryv1.RecalledMemory{recalled("a", map[string]string{"seating": "terrace"}), recalled("b", map[string]string{"seating": "outdoor"})},
			want:     `{"seating":"outdoor"}`,
			filled:   []*orchestratorv1.FilledArgument{{Name: "seating", Value: `"outdoor"`, MemoryId: "b"}},
		},
		{
			name:     "optional arguments are not filled",
			schema:   reservationSchema,
			args:     `{"restaurant_name":"x","time":"t","party_size":1}`,
			memories: []*memoryv1.RecalledMemory{recalled("v", map[string]string{"vip": "true", "seating": "indoor"})},
			want:     `{"restaurant_name":"x","time":"t","party_size":1}`,
		},
		{
			name:     "arguments that are not an object are left for validation",
			schema:   reservationSchema,
			args:     `[1,2]`,
			memories: []*memoryv1.RecalledMemory{restaurant},
			want:     `[1,2]`,
		},
		{
			name:     "broken JSON is left for validation",
			schema:   reservationSchema,
			args:     `{"time":`,
			memories: []*memoryv1.RecalledMemory{restaurant},
			want:     `{"time":`,
		},
		{
			name:     "empty arguments count as an empty object",
			schema:   `{"type":"object","properties":{"restaurant_name":{"type":"string"}},"required":["restaurant_name"]}`,
			args:     ``,
			memories: []*memoryv1.RecalledMemory{restaurant},
			want:     `{"restaurant_name":"蜀香园"}`,
			filled:   []*orchestratorv1.FilledArgument{{Name: "restaurant_name", Value: `"蜀香园"`, MemoryId: "m1"}},
		},
		{
			name:   "no memories",
			schema: reservationSchema,
			args:   `{"time":"t"}`,
			want:   `{"time":"t"}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, filled := fillAll(tc.schema, tc.args, tc.memories)
			if got != tc.want {
				t.Errorf("arguments = %s, want %s", got, tc.want)
			}
			if diff := cmp.Diff(tc.filled, filled, protocmp.Transform()); diff != "" {
				t.Errorf("filled (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzFillFromMemory: whatever the call, filling never changes or drops an argument that was
// present, and a JSON object stays a valid JSON object.
func FuzzFillFromMemory(f *testing.F) {
	f.Add(`{"time":"明天 19:00","party_size":2}`, "蜀香园", "4")
	f.Add(`{}`, `"quoted"`, "x")
	f.Add(`{"restaurant_name":null}`, "a", "1e3")
	f.Add(` { "a" : [1, {"b": 2}] } `, "\u2028", "-0")
	f.Add(`[]`, "", "")
	f.Fuzz(func(t *testing.T, args, name, party string) {
		mem := []*memoryv1.RecalledMemory{recalled("m", map[string]string{"restaurant_name": name, "party_size": party, "time": name})}
		got, filled := fillAll(reservationSchema, args, mem)
		if len(filled) == 0 {
			if got != args {
				t.Fatalf("nothing filled but %q became %q", args, got)
			}
			return
		}
		// Like fillFromMemory and the tool service (parseArguments), read the text with Unicode
		// white space trimmed: "{}\f" is the object {} to both of them.
		var before map[string]json.RawMessage
		args = strings.TrimSpace(args)
		if args == "" {
			args = "{}"
		}
		if json.Unmarshal([]byte(args), &before) != nil || before == nil {
			if len(filled) > 0 {
				t.Fatalf("filled %v into non-object %q", filled, args)
			}
			return
		}
		var after map[string]json.RawMessage
		if err := json.Unmarshal([]byte(got), &after); err != nil {
			t.Fatalf("result %q is not a JSON object: %v", got, err)
		}
		for k, v := range before {
			if string(after[k]) != string(v) {
				t.Fatalf("argument %q changed from %s to %s", k, v, after[k])
			}
		}
		if len(after) != len(before)+len(filled) {
			t.Fatalf("%d arguments after filling %d into %d", len(after), len(filled), len(before))
		}
		// What is reported filled is what the arguments now hold, and fits the schema's type.
		for _, fa := range filled {
			if string(after[fa.GetName()]) != fa.GetValue() {
				t.Fatalf("filled %s = %s, but the arguments hold %s", fa.GetName(), fa.GetValue(), after[fa.GetName()])
			}
			var v any
			_ = json.Unmarshal([]byte(fa.GetValue()), &v)
			if _, isString := v.(string); isString == (fa.GetName() == "party_size") {
				t.Fatalf("filled %s = %s, of the wrong type", fa.GetName(), fa.GetValue())
			}
		}
	})
}

func TestCanonicalJSON(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"b":1,"a":[1.0, 2e0, -0, 1.5]}`, `{"a":[1,2,0,1.5],"b":1}`},
		{` { "x" : "<&>" , "y": null, "z": true } `, `{"x":"<&>","y":null,"z":true}`},
		{`12345678901234567890123`, `12345678901234567890123`},
		{`"蜀香园"`, `"蜀香园"`},
	}
	for _, tc := range tests {
		got, err := CanonicalJSON(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("CanonicalJSON(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":1} {}`, `nul`} {
		if _, err := CanonicalJSON(bad); err == nil {
			t.Errorf("CanonicalJSON(%q) accepted invalid JSON", bad)
		}
	}
}

func TestIdempotencyKey(t *testing.T) {
	k := IdempotencyKey("s1", "add_to_cart", `{"sku":"A1","qty":1}`)
	same := []string{`{"qty":1,"sku":"A1"}`, `{ "sku": "A1", "qty": 1.0 }`}
	for _, a := range same {
		if got := IdempotencyKey("s1", "add_to_cart", a); got != k {
			t.Errorf("key of %s = %s, want %s (same canonical arguments)", a, got, k)
		}
	}
	different := [][3]string{
		{"s2", "add_to_cart", `{"sku":"A1","qty":1}`},
		{"s1", "remove_from_cart", `{"sku":"A1","qty":1}`},
		{"s1", "add_to_cart", `{"sku":"A1","qty":2}`},
		// Length-prefixing keeps the parts from running into each other.
		{"s1add_to_cart", "", `{"sku":"A1","qty":1}`},
	}
	for _, d := range different {
		if got := IdempotencyKey(d[0], d[1], d[2]); got == k {
			t.Errorf("key of %v equals the original's", d)
		}
	}
	if len(k) > 128 {
		t.Errorf("key %q is longer than 128 bytes", k)
	}
}

// FuzzCanonicalJSON: canonical text is valid JSON, a fixed point, and equal in value to the input.
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1.0,2e0]}`, `"\u00e9"`, `[{"x":{"y":[]}}]`, `1e400`, `-0.0000001`, `{"a":"\ud800"}`,
		// Non-integers whose float64 is an integer, -0 or beyond float64 used to be written in a
		// form that read back differently; huge exponents used to be written out digit by digit.
		`10000000000000000000000.5`, `4503599627370497.5`, `-1e-400`, "1." + strings.Repeat("0", 330) + "1e309", `1e999999`, `{"a":1e-999999}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		c, err := CanonicalJSON(in)
		if err != nil {
			return
		}
		if !json.Valid([]byte(c)) {
			t.Fatalf("canonical %q of %q is not valid JSON", c, in)
		}
		again, err := CanonicalJSON(c)
		if err != nil || again != c {
			t.Fatalf("not a fixed point: %q -> %q (%v)", c, again, err)
		}
		if a, b := decodeNumbers(t, in), decodeNumbers(t, c); !sameJSON(a, b) {
			t.Fatalf("canonical %q differs in value from %q", c, in)
		}
	})
}

func decodeNumbers(t *testing.T, s string) any {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

// sameJSON compares decoded values as CanonicalJSON promises to keep them: integers exactly,
// other numbers as their float64.
func sameJSON(a, b any) bool {
	switch x := a.(type) {
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !sameJSON(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameJSON(x[i], y[i]) {
				return false
			}
		}
		return true
	case json.Number:
		y, ok := b.(json.Number)
		if !ok {
			return false
		}
		if x == y {
			return true
		}
		rx, okx := new(big.Rat).SetString(string(x))
		ry, oky := new(big.Rat).SetString(string(y))
		if !okx || !oky {
			return false
		}
		if rx.IsInt() {
			return rx.Cmp(ry) == 0
		}
		fx, _ := rx.Float64()
		fy, _ := ry.Float64()
		return fx == fy
	default:
		return a == b
	}
}

// TestFillComplete checks the shortcut of fillFromMemory: where complete says there is nothing
// to fill, the full decoding returns the arguments untouched with no decision; and it says so
// only then.
func TestFillComplete(t *testing.T) {
	withMemory := []*memoryv1.RecalledMemory{recalled("m1", map[string]string{"restaurant_name": "蜀香园", "party_size": "4", "time": "18:00", "q": "x"})}
	tests := []struct {
		name, schema, args string
		complete           bool
	}{
		{"every required argument present", reservationSchema, `{"restaurant_name":"a","time":"t","party_size":2}`, true},
		{"present as null", reservationSchema, `{"restaurant_name":null,"time":null,"party_size":null}`, true},
		{"one missing", reservationSchema, `{"restaurant_name":"a","time":"t"}`, false},
		{"names differ in case", reservationSchema, `{"Restaurant_name":"a","time":"t","party_size":2}`, false},
		{"duplicate names", `{"required":["q"]}`, `{"q":1,"q":2}`, true},
		{"nothing required", `{"type":"object","properties":{"q":{"type":"string"}}}`, `{}`, true},
		{"required is empty", `{"required":[]}`, `{}`, true},
		{"schema not JSON", `{"required":`, `{}`, true},
		{"schema's required not a list", `{"required":"q"}`, `{}`, true},
		{"schema's properties not an object", `{"required":["q"],"properties":[1]}`, `{}`, false},
		{"schema null", `null`, `{}`, true},
		{"arguments empty", reservationSchema, ``, false},
		{"arguments blank", `{"required":["q"]}`, " \n", false},
		{"arguments null", reservationSchema, `null`, false},
		{"arguments a list", reservationSchema, `[1]`, false},
		{"arguments broken", reservationSchema, `{"time":`, false},
		{"arguments with spaces around", `{"required":["q"]}`, " {\"q\": [1, {\"x\": null}]} ", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := complete(tc.schema, tc.args); got != tc.complete {
				t.Fatalf("complete = %v, want %v", got, tc.complete)
			}
			if !tc.complete {
				return
			}
			out, filled, decisions, names := fillMissing(tc.schema, tc.args,
				func(name string, prop propertySchema) []fillOption {
					return memoryOptions(withMemory, name, prop, true)
				},
				func(_ string, _ json.RawMessage, opts []fillOption, _ map[string]json.RawMessage) fillDecision {
					return fillDecision{outcome: fillFilled, option: &opts[0], by: "test"}
				})
			if out != tc.args || filled != nil || decisions != nil || names != nil {
				t.Errorf("the full decoding did something: %q, %v, %v, %v", out, filled, decisions, names)
			}
		})
	}
}
