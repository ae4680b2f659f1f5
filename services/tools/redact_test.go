package tools

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"https://hooks.example.com/book":                          "https://hooks.example.com/REDACTED",
		"https://hooks.example.com/hook?token=s3cret&a=1&a=2":     "https://hooks.example.com/REDACTED?a=REDACTED&a=REDACTED&token=REDACTED",
		"https://user:pass@hooks.example.com:8443/x#frag":         "https://hooks.example.com:8443/REDACTED",
		"https://hooks.slack.com/services/T000/B000/XXXXXXXXXXXX": "https://hooks.slack.com/REDACTED",
		"http://127.0.0.1:18080/":                                 "http://127.0.0.1:18080/",
		"http://127.0.0.1:18080":                                  "http://127.0.0.1:18080",
		"https://h.example/?k=%zz":                                "https://h.example/?REDACTED",
		"mailto:someone@example.com":                              "REDACTED",
		"::not a url":                                             "REDACTED",
	} {
		if got := redactURL(raw); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

// TestUsersSeeSpecsWithoutSecrets: through the real interceptors, a user key reads tool specs
// (GetTool, ListTools, SelectTools) without URL credentials, query values, path or header
// values; an operator and a service read them whole, also after a user's read (the registry's
// copy is untouched).
func TestUsersSeeSpecsWithoutSecrets(t *testing.T) {
	const (
		userKey = "sk-alice-0123456789abcdef"
		opsKey  = "sk-ops-0123456789abcdef"
		svcKey  = "sk-svc-0123456789abcdef"
	)
	path := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(path, []byte(userKey+": alice\n"+opsKey+": {role: operator, name: ops}\n"+svcKey+": {role: service, name: orchestrator}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := auth.LoadKeyFile(path, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	svc := newTestService(t, testBoltStore(t), Options{})
	srv := rpc.NewServer(rpc.ServerOptions{Logger: quietLogger(), ShutdownTimeout: time.Second, Auth: auth.New(keys, quietLogger())})
	srv.Register(&toolsv1.ToolService_ServiceDesc, svc)
	c := toolsv1.NewToolServiceClient(testenv.Serve(t, srv))
	as := func(key string) context.Context {
		return metadata.AppendToOutgoingContext(ctxTimeout(t, 20*time.Second), "authorization", "Bearer "+key)
	}

	full := &toolsv1.ToolSpec{
		Name: "book_room", Description: "Book a hotel room.", InputSchema: `{"type":"object"}`, Groups: []string{"travel"},
		Executor: &toolsv1.ToolSpec_Http{Http: &toolsv1.HTTPExecutor{
			// Credentials in the URL are refused at registration; a token in the query is not.
			Url:     "https://hooks.example.com/v1/book?token=s3cret&region=eu",
			Headers: map[string]string{"X-Tenant": "acme-4f2a9c", "X-Trace": "on"},
		}},
	}
	if _, err := c.RegisterTool(as(opsKey), &toolsv1.RegisterToolRequest{Spec: full}); err != nil {
		t.Fatal(err)
	}
	redacted := proto.Clone(full).(*toolsv1.ToolSpec)
	redacted.GetHttp().Url = "https://hooks.example.com/REDACTED?region=REDACTED&token=REDACTED"
	redacted.GetHttp().Headers = map[string]string{"X-Tenant": "REDACTED", "X-Trace": "REDACTED"}

	specs := func(key string) map[string]*toolsv1.ToolSpec {
		t.Helper()
		ctx := as(key)
		out := map[string]*toolsv1.ToolSpec{}
		g, err := c.GetTool(ctx, &toolsv1.GetToolRequest{Name: "book_room"})
		if err != nil {
			t.Fatal(err)
		}
		out["GetTool"] = g.GetTool().GetSpec()
		l, err := c.ListTools(ctx, &toolsv1.ListToolsRequest{Names: []string{"book_room"}})
		if err != nil || len(l.GetTools()) != 1 {
			t.Fatalf("ListTools: %v %v", l, err)
		}
		out["ListTools"] = l.GetTools()[0].GetSpec()
		s, err := c.SelectTools(ctx, &toolsv1.SelectToolsRequest{Text: "book a room", AlwaysInclude: []string{"book_room"}})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range s.GetTools() {
			if st.GetTool().GetSpec().GetName() == "book_room" {
				out["SelectTools"] = st.GetTool().GetSpec()
			}
		}
		return out
	}
	for _, tc := range []struct {
		who, key string
		want     *toolsv1.ToolSpec
	}{
		{"user", userKey, redacted},
		{"operator", opsKey, full},
		{"service", svcKey, full},
		{"user again", userKey, redacted},
	} {
		got := specs(tc.key)
		for _, rpcName := range []string{"GetTool", "ListTools", "SelectTools"} {
			if diff := cmp.Diff(tc.want, got[rpcName], protocmp.Transform()); diff != "" {
				t.Errorf("%s's %s (-want +got):\n%s", tc.who, rpcName, diff)
			}
		}
	}
}
