package mcpgateway

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// TestEverythingStdio runs the reference everything server over stdio through the gateway's
// gRPC API: discovery under a prefix, calls, structured content, error results, non-text
// content, a call that times out and is cancelled, resources, prompts and the environment.
func TestEverythingStdio(t *testing.T) {
	t.Setenv("HERMES_MCP_SECRET_CANARY", "must-not-leak")
	c, _ := startGateway(t, testConfig(), Options{})
	srv := addReady(t, c, everythingStdio(t, "ev", "ev"))

	if !slices.Contains(mcp.SupportedProtocolVersions(), srv.GetProtocolVersion()) {
		t.Errorf("negotiated protocol %q is not one the SDK supports", srv.GetProtocolVersion())
	}
	if !strings.Contains(srv.GetServerInfo(), "everything") {
		t.Errorf("server_info = %q, want the everything server's name", srv.GetServerInfo())
	}
	if !srv.GetHasResources() || !srv.GetHasPrompts() {
		t.Errorf("has_resources=%v has_prompts=%v, want both", srv.GetHasResources(), srv.GetHasPrompts())
	}
	if srv.GetPid() == 0 {
		t.Error("a connected stdio server reports no pid")
	}
	if got := srv.GetSpec().GetStdio().GetEnv()["HERMES_MCP_TEST_VAR"]; got != redacted {
		t.Errorf("ListServers shows env value %q, want it redacted", got)
	}

	tools, err := c.ListTools(context.Background(), &pb.ListToolsRequest{Server: "ev"})
	if err != nil {
		t.Fatal(err)
	}
	names := toolNames(tools.GetTools())
	for name, original := range map[string]string{"ev_echo": "echo", "ev_get-sum": "get-sum", "ev_get-structured-content": "get-structured-content"} {
		if names[name] != original {
			t.Errorf("tool %s (original %s) missing from %v", name, original, names)
		}
	}
	if int(srv.GetToolCount()) != len(names) {
		t.Errorf("tool_count = %d, ListTools has %d", srv.GetToolCount(), len(names))
	}

	t.Run("sum", func(t *testing.T) {
		r := call(t, c, "ev_get-sum", `{"a": 2, "b": 3}`)
		want := &pb.CallToolResponse{Success: true, Output: "The sum of 2 and 3 is 5."}
		if diff := cmp.Diff(want, r, cmpResponse); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("by server and original name", func(t *testing.T) {
		r, err := c.CallTool(context.Background(), &pb.CallToolRequest{Server: "ev", Tool: "echo", Arguments: `{"message":"hi"}`})
		if err != nil {
			t.Fatal(err)
		}
		if !r.GetSuccess() || r.GetOutput() != "Echo: hi" {
			t.Errorf("echo = %+v", r)
		}
	})
	t.Run("structured content", func(t *testing.T) {
		r := call(t, c, "ev_get-structured-content", `{"location": "Chicago"}`)
		if !r.GetSuccess() || !r.GetStructured() {
			t.Fatalf("get-structured-content = %+v", r)
		}
		var got map[string]any
		if err := json.Unmarshal([]byte(r.GetOutput()), &got); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"temperature": 36.0, "conditions": "Light rain / drizzle", "humidity": 82.0}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("structured output (-want +got):\n%s", diff)
		}
	})
	t.Run("error result", func(t *testing.T) {
		r := call(t, c, "ev_get-sum", `{"a": "two", "b": 3}`)
		if r.GetSuccess() {
			t.Fatalf("a call with invalid arguments succeeded: %+v", r)
		}
		if r.GetErrorCode() != "" && r.GetErrorCode() != codeRejected {
			t.Errorf("error_code = %q, want the tool's own error (empty) or rejected", r.GetErrorCode())
		}
		if !strings.Contains(strings.ToLower(r.GetOutput()), "invalid") && !strings.Contains(strings.ToLower(r.GetOutput()), "expected") {
			t.Errorf("error output %q does not carry the server's message", r.GetOutput())
		}
	})
	t.Run("image is described", func(t *testing.T) {
		r := call(t, c, "ev_get-tiny-image", `{}`)
		if !r.GetSuccess() {
			t.Fatalf("get-tiny-image = %+v", r)
		}
		var img *pb.Content
		for _, ct := range r.GetContents() {
			if ct.GetType() == "image" {
				img = ct
			}
		}
		if img == nil || img.GetMimeType() != "image/png" || img.GetSize() == 0 {
			t.Errorf("image content = %+v, want image/png with its size", r.GetContents())
		}
	})
	t.Run("resource links are described", func(t *testing.T) {
		r := call(t, c, "ev_get-resource-links", `{"count": 2}`)
		var links []string
		for _, ct := range r.GetContents() {
			if ct.GetType() == "resource_link" {
				links = append(links, ct.GetUri())
			}
		}
		if !r.GetSuccess() || len(links) != 2 || links[0] == "" {
			t.Errorf("get-resource-links = %+v", r)
		}
	})
	t.Run("embedded resource is described with its text", func(t *testing.T) {
		r := call(t, c, "ev_get-resource-reference", `{}`)
		var res *pb.Content
		for _, ct := range r.GetContents() {
			if ct.GetType() == "resource" {
				res = ct
			}
		}
		if !r.GetSuccess() || res == nil || res.GetUri() == "" {
			t.Errorf("get-resource-reference = %+v", r)
		}
	})
	t.Run("timeout cancels the call and the server stays usable", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := c.CallTool(ctx, &pb.CallToolRequest{Name: "ev_trigger-long-running-operation", Arguments: `{"duration": 30, "steps": 30}`, Timeout: callTimeout(500 * time.Millisecond)})
		if err != nil {
			t.Fatalf("CallTool: %v (the call should have ended at its own 500ms timeout)", err)
		}
		if r.GetSuccess() || r.GetErrorCode() != codeTimeout {
			t.Fatalf("long call = %+v, want error_code timeout", r)
		}
		if r := call(t, c, "ev_get-sum", `{"a": 1, "b": 1}`); !r.GetSuccess() {
			t.Errorf("after a timeout the server does not answer: %+v", r)
		}
	})
	t.Run("caller giving up", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := c.CallTool(ctx, &pb.CallToolRequest{Name: "ev_trigger-long-running-operation", Arguments: `{"duration": 30, "steps": 30}`})
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("CallTool after the caller's deadline: %v, want DeadlineExceeded", err)
		}
	})
	t.Run("environment", func(t *testing.T) {
		r := call(t, c, "ev_get-env", `{}`)
		if !r.GetSuccess() {
			t.Fatalf("get-env = %+v", r)
		}
		var env map[string]string
		if err := json.Unmarshal([]byte(r.GetOutput()), &env); err != nil {
			t.Fatalf("get-env output is not the JSON object of the environment: %v", err)
		}
		if env["HERMES_MCP_TEST_VAR"] != "visible" {
			t.Errorf("the configured variable is missing: %v", env)
		}
		if _, ok := env["HERMES_MCP_SECRET_CANARY"]; ok {
			t.Errorf("the gateway's own environment leaked into the server: %v", env)
		}
		var extra []string
		for k := range env {
			if k != "HERMES_MCP_TEST_VAR" && k != "PATH" && k != "HOME" {
				extra = append(extra, k)
			}
		}
		t.Logf("server environment besides the configured one: %v", extra)
	})
	t.Run("resources", func(t *testing.T) {
		lr, err := c.ListResources(context.Background(), &pb.ListResourcesRequest{Server: "ev"})
		if err != nil {
			t.Fatal(err)
		}
		if len(lr.GetResources()) == 0 {
			t.Fatal("no resources listed")
		}
		var text *pb.Resource
		for _, r := range lr.GetResources() {
			if strings.HasPrefix(r.GetMimeType(), "text/") {
				text = r
				break
			}
		}
		if text == nil {
			t.Fatalf("no text resource among %v", lr.GetResources())
		}
		rr, err := c.ReadResource(context.Background(), &pb.ReadResourceRequest{Server: "ev", Uri: text.GetUri()})
		if err != nil {
			t.Fatal(err)
		}
		if len(rr.GetContents()) == 0 || rr.GetContents()[0].GetText() == "" {
			t.Fatalf("ReadResource(%s) = %v", text.GetUri(), rr)
		}
		blob, err := c.ReadResource(context.Background(), &pb.ReadResourceRequest{Server: "ev", Uri: "demo://resource/dynamic/blob/1"})
		if err != nil {
			t.Fatal(err)
		}
		if len(blob.GetContents()) != 1 || blob.GetContents()[0].GetBlobSize() == 0 || !strings.HasPrefix(blob.GetContents()[0].GetText(), "[blob: ") {
			t.Errorf("a blob resource = %v, want it described with its size, not returned", blob)
		}
		_, err = c.ReadResource(context.Background(), &pb.ReadResourceRequest{Server: "ev", Uri: "demo://resource/static/document/no-such-file"})
		if code := status.Code(err); code != codes.NotFound && code != codes.FailedPrecondition {
			t.Errorf("reading a missing resource: %v, want NotFound", err)
		}
	})
	t.Run("prompts", func(t *testing.T) {
		lp, err := c.ListPrompts(context.Background(), &pb.ListPromptsRequest{Server: "ev"})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, p := range lp.GetPrompts() {
			names = append(names, p.GetName())
		}
		if !slices.Contains(names, "simple-prompt") || !slices.Contains(names, "args-prompt") {
			t.Fatalf("prompts = %v", names)
		}
		gp, err := c.GetPrompt(context.Background(), &pb.GetPromptRequest{Server: "ev", Name: "args-prompt", Arguments: map[string]string{"city": "Hangzhou\u200b", "state": "Zhejiang"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(gp.GetMessages()) == 0 || !strings.Contains(gp.GetMessages()[0].GetText(), "Hangzhou") || strings.Contains(gp.GetMessages()[0].GetText(), "\u200b") {
			t.Errorf("args-prompt = %v, want the city with the zero-width space removed", gp)
		}
	})
}

// cmpResponse compares CallToolResponses without the wall time.
var cmpResponse = cmp.Options{
	cmp.Comparer(func(a, b *pb.CallToolResponse) bool {
		if a == nil || b == nil {
			return a == b
		}
		return a.Success == b.Success && a.Output == b.Output && a.Structured == b.Structured &&
			a.ErrorCode == b.ErrorCode && a.Truncated == b.Truncated && len(a.Contents) == len(b.Contents)
	}),
}
