package tools

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/hermes-agent/hermes/internal/rpc"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// echoServer is a webhook that answers with the JSON it received and counts its calls.
func echoServer(t *testing.T) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// bookingSchema exercises required fields, enums, nested objects, additionalProperties:false
// and a pydantic-style Optional[List[str]] (anyOf array/null).
const bookingSchema = `{
  "type": "object",
  "properties": {
    "city": {"type": "string", "description": "City to book in"},
    "guests": {"type": "integer", "minimum": 1, "maximum": 12},
    "price": {"type": "number"},
    "breakfast": {"type": "boolean"},
    "room": {"type": "string", "enum": ["single", "double", "suite"]},
    "contact": {
      "type": "object",
      "properties": {
        "name": {"type": "string"},
        "phone": {"type": "string", "pattern": "^[0-9+ -]{6,20}$"}
      },
      "required": ["name"],
      "additionalProperties": false
    },
    "tags": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}], "default": null},
    "zip": {"type": "string"}
  },
  "required": ["city", "guests"],
  "additionalProperties": false
}`

func TestValidationThroughGRPC(t *testing.T) {
	srv, hits := echoServer(t)
	c, _ := newClient(t, Options{})
	mustRegister(t, c, httpSpec("book_room", srv.URL, bookingSchema))

	type violation struct{ Pointer, Contains string }
	tests := []struct {
		name       string
		args       string
		code       toolsv1.ErrorCode
		violations []violation
		coercions  []*toolsv1.Coercion
		output     string
		msgHas     []string
	}{
		{name: "valid", args: `{"city":"Paris","guests":2}`, output: `{"city":"Paris","guests":2}`},
		{name: "missing required", args: `{"guests":2}`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/city", "is required: a value of type string, \"City to book in\""}}},
		{name: "empty arguments mean {}", args: ``, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/city", "is required"}, {"/guests", "is required: a value of type integer"}}},
		{name: "wrong type", args: `{"city":"Paris","guests":"two"}`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/guests", `got string "two", want integer`}}},
		{name: "enum out of range", args: `{"city":"Paris","guests":2,"room":"penthouse"}`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/room", `got "penthouse", want one of "single", "double", "suite"`}}},
		{name: "range", args: `{"city":"Paris","guests":40}`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/guests", "maximum"}}},
		{name: "extra field", args: `{"city":"Paris","guests":2,"pets":true}`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/pets", "is not an allowed property here (allowed: breakfast, city, contact, guests, price, room, tags, zip)"}}},
		{name: "nested missing and extra", args: `{"city":"Paris","guests":2,"contact":{"phone":"+33 1 23 45","email":"a@b"}}`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/contact/email", "is not an allowed property"}, {"/contact/name", "is required: a value of type string"}}},
		{name: "nested pattern", args: `{"city":"Paris","guests":2,"contact":{"name":"A","phone":"call me"}}`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/contact/phone", "does not match pattern"}}},
		{name: "several at once", args: `{"guests":"many","room":"x","extra":1}`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/city", "is required"}, {"/extra", "not an allowed property"}, {"/guests", "want integer"}, {"/room", "one of"}}},
		{name: "nullable array: null", args: `{"city":"Paris","guests":2,"tags":null}`, output: `{"city":"Paris","guests":2,"tags":null}`},
		{name: "nullable array: list", args: `{"city":"Paris","guests":2,"tags":["quiet","view"]}`, output: `{"city":"Paris","guests":2,"tags":["quiet","view"]}`},
		{name: "nullable array: a bare string", args: `{"city":"Paris","guests":2,"tags":"quiet"}`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/tags", `got string "quiet", want array or null`}}},
		{name: "nullable array: wrong item", args: `{"city":"Paris","guests":2,"tags":["ok",{"a":1}]}`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/tags/1", `got object {"a":1}, want string`}}},
		{name: "nullable array: number item coerced", args: `{"city":"Paris","guests":2,"tags":["ok",3]}`,
			coercions: []*toolsv1.Coercion{{Pointer: "/tags/1", From: "3", To: `"3"`}},
			output:    `{"city":"Paris","guests":2,"tags":["ok","3"]}`},
		{name: "not an object", args: `["Paris",2]`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"", "want object"}}},
		{name: "coerced scalars", args: `{"city":"Paris","guests":"3","price":" 99.5","breakfast":"true","zip":75001}`,
			coercions: []*toolsv1.Coercion{
				{Pointer: "/breakfast", From: `"true"`, To: `true`},
				{Pointer: "/guests", From: `"3"`, To: `3`},
				{Pointer: "/price", From: `" 99.5"`, To: `99.5`},
				{Pointer: "/zip", From: `75001`, To: `"75001"`},
			},
			output: `{"breakfast":true,"city":"Paris","guests":3,"price":99.5,"zip":"75001"}`},
		{name: "not coerced when not a number", args: `{"city":"Paris","guests":"3 people"}`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/guests", `got string "3 people", want integer`}}},
		{name: "a fraction is not an integer", args: `{"city":"Paris","guests":"2.5"}`, code: toolsv1.ErrorCode_ERROR_CODE_VALIDATION,
			violations: []violation{{"/guests", "want integer"}}},
		{name: "cut off", args: `{"city":"Paris","gue`, code: toolsv1.ErrorCode_ERROR_CODE_INVALID_JSON,
			msgHas: []string{"cut off", "call book_room again"}},
		{name: "not JSON", args: `city=Paris`, code: toolsv1.ErrorCode_ERROR_CODE_INVALID_JSON,
			msgHas: []string{"invalid character", "line 1, column 1"}},
		{name: "trailing text", args: `{"city":"Paris","guests":2} thanks`, code: toolsv1.ErrorCode_ERROR_CODE_INVALID_JSON,
			msgHas: []string{"more text after the JSON value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := hits.Load()
			res := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "book_room", Arguments: tt.args})
			if got := res.GetError().GetCode(); got != tt.code {
				t.Fatalf("code %v, want %v (message: %s)", got, tt.code, res.GetError().GetMessage())
			}
			if diff := cmp.Diff(tt.coercions, res.GetCoercions(), protocmp.Transform()); diff != "" {
				t.Errorf("coercions (-want +got):\n%s", diff)
			}
			if tt.code == toolsv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
				if !res.GetSuccess() || res.GetOutput() != tt.output {
					t.Errorf("success=%v output %s, want %s", res.GetSuccess(), res.GetOutput(), tt.output)
				}
				if res.GetAttempts() != 1 || hits.Load() != before+1 {
					t.Errorf("attempts %d, webhook calls %d; want 1 and 1", res.GetAttempts(), hits.Load()-before)
				}
				return
			}
			if res.GetSuccess() || res.GetAttempts() != 0 || hits.Load() != before {
				t.Errorf("a failed validation ran the tool: success=%v attempts=%d calls=%d", res.GetSuccess(), res.GetAttempts(), hits.Load()-before)
			}
			msg := res.GetError().GetMessage()
			for _, s := range tt.msgHas {
				if !strings.Contains(msg, s) {
					t.Errorf("message %q does not contain %q", msg, s)
				}
			}
			if tt.code != toolsv1.ErrorCode_ERROR_CODE_VALIDATION {
				return
			}
			got := res.GetError().GetViolations()
			if len(got) != len(tt.violations) {
				t.Fatalf("%d violations, want %d: %v", len(got), len(tt.violations), got)
			}
			for i, want := range tt.violations {
				if got[i].GetPointer() != want.Pointer || !strings.Contains(got[i].GetMessage(), want.Contains) {
					t.Errorf("violation %d = %s: %s; want %s: …%s…", i, got[i].GetPointer(), got[i].GetMessage(), want.Pointer, want.Contains)
				}
				if !strings.Contains(msg, got[i].GetMessage()) {
					t.Errorf("message does not name violation %s: %s", got[i].GetPointer(), msg)
				}
			}
			if !strings.HasSuffix(msg, "Correct the arguments so they match the schema and call book_room again.") {
				t.Errorf("message does not end with the instruction to correct and call again: %q", msg)
			}
		})
	}
}

func TestRegisterRejectsBadSpecs(t *testing.T) {
	c, _ := newClient(t, Options{})
	good := func() *toolsv1.ToolSpec { return httpSpec("ok_tool", "http://127.0.0.1:1/x", emptyObjectSchema) }
	tests := []struct {
		name   string
		edit   func(s *toolsv1.ToolSpec)
		field  string
		reason string
	}{
		{"bad name", func(s *toolsv1.ToolSpec) { s.Name = "get weather" }, "spec.name", "must match"},
		{"long name", func(s *toolsv1.ToolSpec) { s.Name = strings.Repeat("a", 65) }, "spec.name", "must match"},
		{"no description", func(s *toolsv1.ToolSpec) { s.Description = " " }, "spec.description", "is required"},
		{"no schema", func(s *toolsv1.ToolSpec) { s.InputSchema = "" }, "spec.input_schema", "is required"},
		{"schema not JSON", func(s *toolsv1.ToolSpec) { s.InputSchema = "{type: object}" }, "spec.input_schema", "not valid JSON"},
		{"schema not an object schema", func(s *toolsv1.ToolSpec) { s.InputSchema = `{"type":"string"}` }, "spec.input_schema", "must describe an object"},
		{"schema without type", func(s *toolsv1.ToolSpec) { s.InputSchema = `{"properties":{}}` }, "spec.input_schema", "must describe an object"},
		{"boolean schema", func(s *toolsv1.ToolSpec) { s.InputSchema = `true` }, "spec.input_schema", "must be a JSON object"},
		{"invalid keyword", func(s *toolsv1.ToolSpec) {
			s.InputSchema = `{"type":"object","properties":{"a":{"type":"string","minLength":"three"}}}`
		}, "spec.input_schema", "minLength"},
		{"unknown type", func(s *toolsv1.ToolSpec) {
			s.InputSchema = `{"type":"object","properties":{"a":{"type":"text"}}}`
		}, "spec.input_schema", "not a valid JSON Schema"},
		{"external ref", func(s *toolsv1.ToolSpec) {
			s.InputSchema = `{"type":"object","properties":{"a":{"$ref":"https://example.com/a.json"}}}`
		}, "spec.input_schema", "external document"},
		{"file ref", func(s *toolsv1.ToolSpec) {
			s.InputSchema = `{"type":"object","properties":{"a":{"$ref":"file:///etc/passwd"}}}`
		}, "spec.input_schema", "external document"},
		{"dangling ref", func(s *toolsv1.ToolSpec) {
			s.InputSchema = `{"type":"object","properties":{"a":{"$ref":"#/$defs/missing"}}}`
		}, "spec.input_schema", "not a valid JSON Schema"},
		{"bad regex", func(s *toolsv1.ToolSpec) {
			s.InputSchema = `{"type":"object","properties":{"a":{"type":"string","pattern":"(?<=x)y"}}}`
		}, "spec.input_schema", "pattern"},
		{"bad output schema", func(s *toolsv1.ToolSpec) { s.OutputSchema = `{"type":5}` }, "spec.output_schema", "not a valid JSON Schema"},
		{"timeout too long", func(s *toolsv1.ToolSpec) { s.Timeout = dur(24 * 60 * 60e9) }, "spec.timeout", "between"},
		{"attempt longer than timeout", func(s *toolsv1.ToolSpec) { s.Timeout, s.AttemptTimeout = dur(1e9), dur(2e9) }, "spec.attempt_timeout", "must not exceed"},
		{"retries", func(s *toolsv1.ToolSpec) { s.MaxRetries = i32(50) }, "spec.max_retries", "between 0 and 10"},
		{"bad group", func(s *toolsv1.ToolSpec) { s.Groups = []string{"a b"} }, "spec.groups", "must match"},
		{"no executor", func(s *toolsv1.ToolSpec) { s.Executor = nil }, "spec.executor", "is required"},
		{"bad url", func(s *toolsv1.ToolSpec) { s.GetHttp().Url = "ftp://x/y" }, "spec.http.url", "http or https"},
		{"credentials in url", func(s *toolsv1.ToolSpec) { s.GetHttp().Url = "https://u:p@x/y" }, "spec.http.url", "credentials"},
		{"secret in headers", func(s *toolsv1.ToolSpec) { s.GetHttp().Headers = map[string]string{"Authorization": "Bearer abc"} }, "spec.http.headers", "secret_env"},
		{"api key header", func(s *toolsv1.ToolSpec) { s.GetHttp().Headers = map[string]string{"X-Api-Key": "abc"} }, "spec.http.headers", "credential"},
		{"bad env name", func(s *toolsv1.ToolSpec) { s.GetHttp().SecretEnv = "MY-TOKEN" }, "spec.http.secret_env", "not an environment variable"},
		{"unknown builtin", func(s *toolsv1.ToolSpec) {
			s.Executor = &toolsv1.ToolSpec_Builtin{Builtin: &toolsv1.BuiltinExecutor{Name: "rm_rf"}}
		}, "spec.builtin.name", "available: calculator, current_time, http_fetch"},
		{"mcp without server", func(s *toolsv1.ToolSpec) {
			s.Executor = &toolsv1.ToolSpec_Mcp{Mcp: &toolsv1.MCPExecutor{Tool: "x"}}
		}, "spec.mcp.server", "is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := good()
			tt.edit(spec)
			_, err := c.RegisterTool(ctxTimeout(t, 5e9), &toolsv1.RegisterToolRequest{Spec: spec})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("code %v (%v), want InvalidArgument", status.Code(err), err)
			}
			found := false
			for _, fv := range rpc.FieldViolations(err) {
				if fv.GetField() == tt.field && strings.Contains(fv.GetDescription(), tt.reason) {
					found = true
				}
			}
			if !found {
				t.Errorf("no violation %s containing %q in %v", tt.field, tt.reason, rpc.FieldViolations(err))
			}
		})
	}
	// Nothing of the refused specs was stored.
	resp, err := c.ListTools(ctxTimeout(t, 5e9), &toolsv1.ListToolsRequest{})
	if err != nil || len(resp.GetTools()) != 0 {
		t.Errorf("refused specs left %d tools (err %v)", len(resp.GetTools()), err)
	}
}

func TestSchemaDialects(t *testing.T) {
	srv, _ := echoServer(t)
	c, _ := newClient(t, Options{})
	schemas := map[string]string{
		"draft07": `{"$schema":"http://json-schema.org/draft-07/schema#","type":"object",
			"definitions":{"n":{"type":"integer"}},"properties":{"n":{"$ref":"#/definitions/n"}},"required":["n"]}`,
		"draft2020": `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
			"$defs":{"n":{"type":"integer"}},"properties":{"n":{"$ref":"#/$defs/n"}},"required":["n"]}`,
		"no_dialect": `{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`,
		"draft04":    `{"$schema":"http://json-schema.org/draft-04/schema#","type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`,
		"type_list":  `{"type":["object"],"properties":{"n":{"type":"integer"}},"required":["n"]}`,
	}
	for name, schema := range schemas {
		t.Run(name, func(t *testing.T) {
			mustRegister(t, c, httpSpec(name, srv.URL, schema))
			ok := execute(t, c, &toolsv1.ExecuteToolRequest{Name: name, Arguments: `{"n":"7"}`})
			if !ok.GetSuccess() || ok.GetOutput() != `{"n":7}` {
				t.Errorf("coerced call: success=%v output=%s error=%v", ok.GetSuccess(), ok.GetOutput(), ok.GetError())
			}
			bad := execute(t, c, &toolsv1.ExecuteToolRequest{Name: name, Arguments: `{}`})
			if bad.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_VALIDATION || bad.GetError().GetViolations()[0].GetPointer() != "/n" {
				t.Errorf("missing n: %v", bad.GetError())
			}
		})
	}
	_, err := c.RegisterTool(ctxTimeout(t, 5e9), &toolsv1.RegisterToolRequest{Spec: httpSpec("unknown_dialect", srv.URL,
		`{"$schema":"https://example.com/my-dialect","type":"object"}`)})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("unknown $schema: %v, want InvalidArgument", err)
	}
}
