package mcpgatewaytest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// The helper server is an MCP server written with the official Go SDK that the tests run as a
// real process: the test binary re-run as its TestHelperMCPServer (see ServeHelper), with HERMES_HELPER_MCP set to
// "stdio" or "http:<port>". Its tools reproduce the defects the client side must survive.
//
// HERMES_HELPER_APPEND names the file the append tools write to; HERMES_HELPER_BANNER=1 prints
// a non-JSON line on stdout before serving.

// ServeHelper is the helper server; it skips in a normal test run. A test binary that uses
// HelperStdio or StartHelperHTTP defines
//
//	func TestHelperMCPServer(t *testing.T) { mcpgatewaytest.ServeHelper(t) }
func ServeHelper(t testing.TB) {
	mode := os.Getenv("HERMES_HELPER_MCP")
	if mode == "" {
		t.Skip("run by the tests as an MCP server")
	}
	if os.Getenv("HERMES_HELPER_BANNER") == "1" {
		fmt.Println("helper MCP server v1 starting (a banner on stdout, not JSON-RPC)")
	}
	s := HelperServer()
	if port, ok := strings.CutPrefix(mode, "http:"); ok {
		h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
		_ = http.ListenAndServe("127.0.0.1:"+port, h)
		os.Exit(0)
	}
	_ = s.Run(context.Background(), &mcp.StdioTransport{})
	os.Exit(0)
}

type appendArgs struct {
	Line string `json:"line"`
}

// HelperServer is the helper server, for serving in process.
func HelperServer() *mcp.Server {
	var s *mcp.Server
	s = mcp.NewServer(&mcp.Implementation{Name: "helper", Version: "1"}, &mcp.ServerOptions{
		Instructions:       "Use append_line to add lines to the journal.",
		SubscribeHandler:   func(context.Context, *mcp.SubscribeRequest) error { return nil },
		UnsubscribeHandler: func(context.Context, *mcp.UnsubscribeRequest) error { return nil },
		CompletionHandler: func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
			var values []string
			for _, v := range []string{"alice", "albert", "bob"} {
				if strings.HasPrefix(v, req.Params.Argument.Value) {
					values = append(values, v)
				}
			}
			return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: values, Total: len(values)}}, nil
		},
	})
	appendLine := func(line string) error {
		f, err := os.OpenFile(os.Getenv("HERMES_HELPER_APPEND"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteString(line + "\n")
		return err
	}
	destructive := true
	// append_line appends, then dies before answering: the call reached the tool and acted.
	mcp.AddTool(s, &mcp.Tool{Name: "append_line", Description: "Appends a line to the journal.",
		Annotations: &mcp.ToolAnnotations{Title: "Append", DestructiveHint: &destructive}},
		func(ctx context.Context, _ *mcp.CallToolRequest, a appendArgs) (*mcp.CallToolResult, any, error) {
			if err := appendLine(a.Line); err != nil {
				return nil, nil, err
			}
			os.Exit(3)
			return nil, nil, nil
		})
	// append_idempotent is declared idempotent; it dies after appending the first time only.
	mcp.AddTool(s, &mcp.Tool{Name: "append_idempotent", Description: "Sets a journal line (idempotent).",
		Annotations: &mcp.ToolAnnotations{IdempotentHint: true, DestructiveHint: new(bool)}},
		func(ctx context.Context, _ *mcp.CallToolRequest, a appendArgs) (*mcp.CallToolResult, any, error) {
			marker := os.Getenv("HERMES_HELPER_APPEND") + ".died"
			if err := appendLine(a.Line); err != nil {
				return nil, nil, err
			}
			if _, err := os.Stat(marker); errors.Is(err, os.ErrNotExist) {
				_ = os.WriteFile(marker, nil, 0o644)
				os.Exit(3)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "ok"}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "big_structured", Description: "Returns 400 KB of structured content."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, map[string]any, error) {
			return nil, map[string]any{"data": strings.Repeat("QUJD", 100_000), "mimeType": "image/png"}, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "json_text", Description: "Returns JSON as text."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: `{"count": 1, "items": ["a"]}`}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "audience", Description: "Returns text for the model and text only for the user."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "for the model"},
				&mcp.TextContent{Text: "only for the user", Annotations: &mcp.Annotations{Audience: []mcp.Role{"user"}}},
			}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "progress", Description: "Reports progress three times."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			var errs []string
			for i := 1; i <= 3; i++ {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Total: 3, Message: fmt.Sprintf("step %d", i)}); err != nil {
					errs = append(errs, err.Error())
				}
				time.Sleep(100 * time.Millisecond) // a tool that takes its time, as tools that report progress do
			}
			time.Sleep(time.Second)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("done; token %v; errors %q", req.Params.GetProgressToken(), errs)}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "touch", Description: "Reports test://known updated."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			err := s.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: "test://known"})
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint("touched ", err)}}}, nil, nil
		})
	s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://items/{id}", Name: "item", MIMEType: "text/plain"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "item"}}}, nil
		})
	s.AddResource(&mcp.Resource{URI: "test://known", Name: "known", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://known", MIMEType: "text/plain", Text: "hello"}}}, nil
		})
	s.AddPrompt(&mcp.Prompt{Name: "greet", Arguments: []*mcp.PromptArgument{{Name: "who", Required: true}}},
		func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			if req.Params.Arguments["who"] == "" {
				// As the TypeScript SDK answers a missing required argument.
				return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "Invalid arguments for prompt greet: who: Required"}
			}
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "hello " + req.Params.Arguments["who"]}}}}, nil
		})
	return s
}

// HelperStdio is the spec of the helper server over stdio.
func HelperStdio(t testing.TB, name string, env map[string]string) *pb.ServerSpec {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := map[string]string{"HERMES_HELPER_MCP": "stdio"}
	for k, v := range env {
		e[k] = v
	}
	return &pb.ServerSpec{Name: name, Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{
		Command: self, Args: []string{"-test.run=^TestHelperMCPServer$", "-test.count=1"}, Env: e,
	}}}
}

// StartHelperHTTP runs the helper server over Streamable HTTP on a free loopback port and
// returns its URL once it accepts connections; the process is killed at the end of the test.
func StartHelperHTTP(t testing.TB, env map[string]string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	port := FreePort(t)
	cmd := exec.Command(self, "-test.run=^TestHelperMCPServer$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HERMES_HELPER_MCP=http:"+strconv.Itoa(port))
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	StartListening(t, cmd, port)
	return fmt.Sprintf("http://127.0.0.1:%d/mcp", port)
}
