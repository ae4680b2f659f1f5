package mcpgateway

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	"github.com/hermes-agent/hermes/services/mcpgateway/mcpgatewaytest"
)

func TestRequestValidation(t *testing.T) {
	c, _ := startGateway(t, testConfig(), Options{})
	stdio := func(cmd string) *pb.ServerSpec_Stdio {
		return &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{Command: cmd}}
	}
	tests := []struct {
		name   string
		spec   *pb.ServerSpec
		fields []string
	}{
		{"no spec", nil, []string{"spec"}},
		{"no name, no transport", &pb.ServerSpec{}, []string{"spec.name", "spec.transport"}},
		{"bad name and prefix", &pb.ServerSpec{Name: "a b", Prefix: "x.y", Transport: stdio("node")}, []string{"spec.name", "spec.prefix"}},
		{"long name", &pb.ServerSpec{Name: strings.Repeat("n", 33), Transport: stdio("node")}, []string{"spec.name"}},
		{"no command", &pb.ServerSpec{Name: "s", Transport: stdio("")}, []string{"spec.stdio.command"}},
		{"bad env", &pb.ServerSpec{Name: "s", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{Command: "x", Env: map[string]string{"A=B": "1"}}}}, []string{"spec.stdio.env[A=B]"}},
		{"bad url", &pb.ServerSpec{Name: "s", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: "ftp://x"}}}, []string{"spec.http.url"}},
		{"bad header", &pb.ServerSpec{Name: "s", Transport: &pb.ServerSpec_Http{Http: &pb.HTTPTransport{Url: "http://x", Headers: map[string]string{"X": "a\r\nb"}}}}, []string{"spec.http.headers[X]"}},
		{"bad glob", &pb.ServerSpec{Name: "s", Transport: stdio("x"), Include: []string{"[a-"}}, []string{"spec.include[0]"}},
		{"bad timeout", &pb.ServerSpec{Name: "s", Transport: stdio("x"), CallTimeout: durationpb.New(-time.Second)}, []string{"spec.call_timeout"}},
		{"timeout over the tool service's cap", &pb.ServerSpec{Name: "s", Transport: stdio("x"), CallTimeout: durationpb.New(time.Hour)}, []string{"spec.call_timeout"}},
		{"unknown protocol", &pb.ServerSpec{Name: "s", Transport: stdio("x"), ProtocolVersion: "2020-01-01"}, []string{"spec.protocol_version"}},
		{"bad group", &pb.ServerSpec{Name: "s", Transport: stdio("x"), Groups: []string{"a b"}}, []string{"spec.groups[0]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.AddServer(context.Background(), &pb.AddServerRequest{Spec: tt.spec})
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("AddServer: %v, want InvalidArgument", err)
			}
			var got []string
			for _, f := range rpc.FieldViolations(err) {
				got = append(got, f.GetField())
			}
			for _, f := range tt.fields {
				if !slices.Contains(got, f) {
					t.Errorf("violations %v lack %s", got, f)
				}
			}
		})
	}

	calls := []struct {
		name string
		req  *pb.CallToolRequest
	}{
		{"nothing", &pb.CallToolRequest{}},
		{"name and server", &pb.CallToolRequest{Name: "a", Server: "b", Tool: "c"}},
		{"arguments not an object", &pb.CallToolRequest{Name: "a", Arguments: "[1]"}},
		{"arguments not JSON", &pb.CallToolRequest{Name: "a", Arguments: "{"}},
		{"negative timeout", &pb.CallToolRequest{Name: "a", Timeout: durationpb.New(-time.Second)}},
		{"negative max_output_bytes", &pb.CallToolRequest{Name: "a", MaxOutputBytes: -1}},
		{"max_output_bytes over 16 MiB", &pb.CallToolRequest{Name: "a", MaxOutputBytes: 16<<20 + 1}},
	}
	for _, tt := range calls {
		t.Run("CallTool "+tt.name, func(t *testing.T) {
			if _, err := c.CallTool(context.Background(), tt.req); status.Code(err) != codes.InvalidArgument {
				t.Errorf("CallTool: %v, want InvalidArgument", err)
			}
		})
	}
	if r, err := c.CallTool(context.Background(), &pb.CallToolRequest{Name: "nobody_tool"}); err != nil || r.GetErrorCode() != codeUnknownTool {
		t.Errorf("unknown tool: %+v, %v", r, err)
	}
	for name, err := range map[string]error{
		"RemoveServer":  second(c.RemoveServer(context.Background(), &pb.RemoveServerRequest{Name: "nobody"})),
		"ListTools":     second(c.ListTools(context.Background(), &pb.ListToolsRequest{Server: "nobody"})),
		"ListResources": second(c.ListResources(context.Background(), &pb.ListResourcesRequest{Server: "nobody"})),
		"GetPrompt":     second(c.GetPrompt(context.Background(), &pb.GetPromptRequest{Server: "nobody", Name: "p"})),
	} {
		if status.Code(err) != codes.NotFound {
			t.Errorf("%s of an unknown server: %v, want NotFound", name, err)
		}
	}
	if _, err := c.ReadResource(context.Background(), &pb.ReadResourceRequest{Server: "s"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("ReadResource without uri: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

func TestAddRemoveAndFilters(t *testing.T) {
	c, _ := startGateway(t, testConfig(), Options{})
	spec := everythingStdio(t, "ev", "")
	spec.Include = []string{"get-*"}
	spec.Exclude = []string{"get-env"}
	srv := addReady(t, c, spec)
	if srv.GetSpec().GetPrefix() != "ev" {
		t.Errorf("prefix = %q, want the name by default", srv.GetSpec().GetPrefix())
	}
	tools, err := c.ListTools(context.Background(), &pb.ListToolsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for name, original := range toolNames(tools.GetTools()) {
		if !strings.HasPrefix(original, "get-") || original == "get-env" {
			t.Errorf("tool %s (%s) passed the filters", name, original)
		}
	}
	reasons := map[string]string{}
	for _, s := range srv.GetSkippedTools() {
		reasons[s.GetOriginalName()] = s.GetReason()
	}
	if !strings.Contains(reasons["echo"], "include") || !strings.Contains(reasons["get-env"], "excluded") {
		t.Errorf("skipped reasons = %v", reasons)
	}
	if _, err := c.AddServer(context.Background(), &pb.AddServerRequest{Spec: everythingStdio(t, "ev", "other")}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("adding a name twice: %v, want AlreadyExists", err)
	}
	pid := srv.GetPid()
	rm, err := c.RemoveServer(context.Background(), &pb.RemoveServerRequest{Name: "ev"})
	if err != nil {
		t.Fatal(err)
	}
	if int(rm.GetRemovedTools()) != len(tools.GetTools()) {
		t.Errorf("removed_tools = %d, want %d", rm.GetRemovedTools(), len(tools.GetTools()))
	}
	testenv.WaitFor(t, 10*time.Second, "the server process to exit", func() bool { return processGone(int(pid)) })
	if tools, _ := c.ListTools(context.Background(), &pb.ListToolsRequest{}); len(tools.GetTools()) != 0 {
		t.Errorf("tools left after RemoveServer: %v", tools.GetTools())
	}
	if r := call(t, c, "ev_get-sum", `{"a":1,"b":1}`); r.GetErrorCode() != codeUnknownTool {
		t.Errorf("a removed server's tool = %+v", r)
	}
}

func TestProtocolVersion(t *testing.T) {
	cfg := testConfig()
	cfg.StdioAllow = append(cfg.StdioAllow, "/bin/sh")
	c, _ := startGateway(t, cfg, Options{})
	t.Run("pinned", func(t *testing.T) {
		spec := everythingStdio(t, "old", "old")
		spec.ProtocolVersion = "2025-06-18"
		if srv := addReady(t, c, spec); srv.GetProtocolVersion() != "2025-06-18" {
			t.Errorf("negotiated %q with a 2025-06-18 pin", srv.GetProtocolVersion())
		}
	})
	t.Run("server that exits on the server/discover probe", func(t *testing.T) {
		// A wrapper that behaves like the stdio servers of go-sdk#1177: it dies when the first
		// message is server/discover, and otherwise hands the stream to the everything server.
		script := filepath.Join(t.TempDir(), "legacy.sh")
		body := "#!/bin/sh\nIFS= read -r line\ncase \"$line\" in *'\"server/discover\"'*) echo 'ExpectedInitializeRequest' >&2; exit 1;; esac\n" +
			"{ printf '%s\\n' \"$line\"; cat; } | exec \"$NODE\" \"$EVERYTHING\" stdio\n"
		if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
		spec := &pb.ServerSpec{Name: "legacy", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{
			Command: "/bin/sh", Args: []string{script},
			Env: map[string]string{"NODE": mcpgatewaytest.Node(t), "EVERYTHING": mcpgatewaytest.NodeScript(t, "@modelcontextprotocol/server-everything/dist/index.js")},
		}}}
		srv := addReady(t, c, spec)
		if srv.GetProtocolVersion() != legacyProtocol {
			t.Errorf("protocol = %q, want the classic handshake's %s", srv.GetProtocolVersion(), legacyProtocol)
		}
		if len(srv.GetWarnings()) == 0 || !strings.Contains(strings.Join(srv.GetWarnings(), " "), "server/discover") {
			t.Errorf("warnings = %v, want a note about the probe", srv.GetWarnings())
		}
		if r := call(t, c, "legacy_get-sum", `{"a":20,"b":22}`); r.GetOutput() != "The sum of 20 and 22 is 42." {
			t.Errorf("legacy_get-sum = %+v", r)
		}
	})
	t.Run("a command that fails is reported with its stderr", func(t *testing.T) {
		spec := &pb.ServerSpec{Name: "broken", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{
			Command: "/bin/sh", Args: []string{"-c", "echo 'cannot open database' >&2; exit 3"},
		}}}
		resp, err := c.AddServer(context.Background(), &pb.AddServerRequest{Spec: spec, Wait: true})
		if err != nil {
			t.Fatal(err)
		}
		s := resp.GetServer()
		if s.GetState() != pb.ServerState_SERVER_STATE_FAILED || !strings.Contains(s.GetLastError(), "cannot open database") {
			t.Errorf("broken server = %s: %q", s.GetState(), s.GetLastError())
		}
	})
}

func TestFilesystemAndMemoryServers(t *testing.T) {
	c, _ := startGateway(t, testConfig(), Options{})
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "menu.txt"), []byte("noodles\ndumplings\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addReady(t, c, &pb.ServerSpec{Name: "fs", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{
		Command: mcpgatewaytest.Node(t), Args: []string{mcpgatewaytest.NodeScript(t, "@modelcontextprotocol/server-filesystem/dist/index.js"), dir},
	}}})
	mem := filepath.Join(t.TempDir(), "memory.jsonl")
	memSrv := addReady(t, c, &pb.ServerSpec{Name: "memory", Prefix: "mem", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{
		Command: mcpgatewaytest.Node(t), Args: []string{mcpgatewaytest.NodeScript(t, "@modelcontextprotocol/server-memory/dist/index.js")},
		Env: map[string]string{"MEMORY_FILE_PATH": mem},
	}}})

	r := call(t, c, "fs_read_text_file", `{"path": "`+filepath.Join(dir, "menu.txt")+`"}`)
	if !r.GetSuccess() || !strings.Contains(r.GetOutput(), "dumplings") {
		t.Errorf("fs_read_text_file = %+v", r)
	}
	r = call(t, c, "fs_read_text_file", `{"path": "/etc/passwd"}`)
	if r.GetSuccess() || !strings.Contains(strings.ToLower(r.GetOutput()), "denied") {
		t.Errorf("reading outside the allowed directory = %+v, want a failed result from the server", r)
	}
	r = call(t, c, "mem_create_entities", `{"entities":[{"name":"Alice","entityType":"person","observations":["likes noodles"]}]}`)
	if !r.GetSuccess() {
		t.Fatalf("mem_create_entities = %+v", r)
	}
	r = call(t, c, "mem_read_graph", `{}`)
	if !r.GetSuccess() || !strings.Contains(r.GetOutput(), "likes noodles") {
		t.Errorf("mem_read_graph = %+v", r)
	}
	if data, err := os.ReadFile(mem); err != nil || !strings.Contains(string(data), "Alice") {
		t.Errorf("the memory server did not write to its configured file: %v %q", err, data)
	}
	if !memSrv.GetHasPrompts() {
		_, err := c.ListPrompts(context.Background(), &pb.ListPromptsRequest{Server: "memory"})
		if status.Code(err) != codes.FailedPrecondition {
			t.Errorf("ListPrompts on a server without prompts: %v, want FailedPrecondition", err)
		}
	}
}
