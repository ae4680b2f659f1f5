package tools

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// TestExecuteSpanAttributes: the call's span carries the result's attributes when it records
// (they are built only then).
func TestExecuteSpanAttributes(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	svc := newTestService(t, testBoltStore(t), Options{})
	if err := svc.RegisterBuiltins(context.Background()); err != nil {
		t.Fatal(err)
	}
	res, err := svc.execute(context.Background(), &toolsv1.ExecuteToolRequest{Name: "calculator", Arguments: `{"expression":"1+2"}`, CallId: "c1"})
	if err != nil || !res.GetSuccess() {
		t.Fatal(res, err)
	}
	got := map[string]attribute.Value{}
	for _, s := range rec.Ended() {
		if s.Name() == "tools.execute calculator" {
			for _, kv := range s.Attributes() {
				got[string(kv.Key)] = kv.Value
			}
		}
	}
	want := map[string]attribute.Value{
		"tool.name":       attribute.StringValue("calculator"),
		"tool.call_id":    attribute.StringValue("c1"),
		"tool.success":    attribute.BoolValue(true),
		"tool.error_code": attribute.StringValue("ERROR_CODE_UNSPECIFIED"),
		"tool.attempts":   attribute.IntValue(1),
		"tool.replayed":   attribute.BoolValue(false),
		"tool.version":    attribute.Int64Value(res.GetToolVersion()),
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(attribute.Value{})); diff != "" {
		t.Errorf("span attributes (-want +got):\n%s", diff)
	}
}

// TestMCPOutput: JSON (structured, or text that is an object or array) is passed on compacted;
// anything else, invalid JSON included, becomes a JSON string.
func TestMCPOutput(t *testing.T) {
	tests := []struct {
		name string
		resp *mcpgatewayv1.CallToolResponse
		want string
		cut  bool
	}{
		{"structured", &mcpgatewayv1.CallToolResponse{Structured: true, Output: ` { "a" : [1, 2] } `}, `{"a":[1,2]}`, false},
		{"structured scalar", &mcpgatewayv1.CallToolResponse{Structured: true, Output: `42`}, `42`, false},
		{"structured but invalid", &mcpgatewayv1.CallToolResponse{Structured: true, Output: `{"a":`}, `"{\"a\":"`, false},
		{"structured, two values", &mcpgatewayv1.CallToolResponse{Structured: true, Output: `{} {}`}, `"{} {}"`, false},
		{"text object", &mcpgatewayv1.CallToolResponse{Output: "\n{\"a\": 1}\n"}, `{"a":1}`, false},
		{"text array", &mcpgatewayv1.CallToolResponse{Output: `[1, "x"]`}, `[1,"x"]`, false},
		{"text that starts like JSON", &mcpgatewayv1.CallToolResponse{Output: `{not json}`}, `"{not json}"`, false},
		{"text scalar stays text", &mcpgatewayv1.CallToolResponse{Output: `42`}, `"42"`, false},
		{"truncated JSON text is a string", &mcpgatewayv1.CallToolResponse{Output: `[1, 2]`, Truncated: true}, `"[1, 2]"`, true},
		{"plain", &mcpgatewayv1.CallToolResponse{Output: "hello"}, `"hello"`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, cut := mcpOutput(tc.resp)
			if string(out) != tc.want || cut != tc.cut {
				t.Errorf("mcpOutput = %s, %v; want %s, %v", out, cut, tc.want, tc.cut)
			}
		})
	}
}
