package tools

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/hermes-agent/hermes/internal/egress"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func testRedisStore(t testing.TB) *RedisStore {
	rdb, prefix := testenv.Redis(t)
	s := NewRedisStore(rdb, prefix)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testBoltStore(t testing.TB) *BoltStore {
	t.Helper()
	s, err := OpenBoltStore(filepath.Join(t.TempDir(), "tools.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func testTokenizer(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tok, err := tokenizer.New("o200k_base")
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// testConfig is the default configuration with short backoffs, so retry tests are quick.
func testConfig() Config {
	c := DefaultConfig()
	c.RetryBackoff = 10 * time.Millisecond
	c.RetryMaxBackoff = 50 * time.Millisecond
	return c
}

// newTestService builds a Service over store with test defaults; opts may override them.
func newTestService(t testing.TB, store Store, opts Options) *Service {
	t.Helper()
	return newConfiguredService(t, testConfig(), store, opts)
}

// newConfiguredService is newTestService with cfg instead of testConfig().
func newConfiguredService(t testing.TB, cfg Config, store Store, opts Options) *Service {
	t.Helper()
	opts.Store = store
	if opts.Tokenizer == nil {
		opts.Tokenizer = testTokenizer(t)
	}
	if opts.Logger == nil {
		opts.Logger = quietLogger()
	}
	if opts.Egress == nil {
		opts.Egress = testEgress(t)
	}
	svc, err := NewService(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// serve runs svc on a real gRPC server (the shared rpc.Server over an in-memory listener) and
// returns a client.
func serve(t testing.TB, svc *Service) toolsv1.ToolServiceClient {
	t.Helper()
	srv := rpc.NewServer(rpc.ServerOptions{Logger: quietLogger(), ShutdownTimeout: time.Second})
	srv.Register(&toolsv1.ToolService_ServiceDesc, svc)
	conn := testenv.Serve(t, srv)
	return toolsv1.NewToolServiceClient(conn)
}

// newClient is a service over a fresh bbolt store, served over gRPC.
func newClient(t testing.TB, opts Options) (toolsv1.ToolServiceClient, *Service) {
	t.Helper()
	svc := newTestService(t, testBoltStore(t), opts)
	return serve(t, svc), svc
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func mustRegister(t testing.TB, c toolsv1.ToolServiceClient, spec *toolsv1.ToolSpec) *toolsv1.Tool {
	t.Helper()
	resp, err := c.RegisterTool(ctxTimeout(t, 10*time.Second), &toolsv1.RegisterToolRequest{Spec: spec})
	if err != nil {
		t.Fatalf("register %s: %v", spec.GetName(), err)
	}
	return resp.GetTool()
}

func execute(t testing.TB, c toolsv1.ToolServiceClient, req *toolsv1.ExecuteToolRequest) *toolsv1.ToolResult {
	t.Helper()
	resp, err := c.ExecuteTool(ctxTimeout(t, 30*time.Second), req)
	if err != nil {
		t.Fatalf("execute %s: %v", req.GetName(), err)
	}
	return resp.GetResult()
}

func httpSpec(name, url, schema string) *toolsv1.ToolSpec {
	return &toolsv1.ToolSpec{
		Name:        name,
		Description: "test tool " + name,
		InputSchema: schema,
		Executor:    &toolsv1.ToolSpec_Http{Http: &toolsv1.HTTPExecutor{Url: url}},
	}
}

func dur(d time.Duration) *durationpb.Duration { return durationpb.New(d) }

func i32(n int32) *int32 { return &n }

const emptyObjectSchema = `{"type":"object"}`

// testEgress allows the loopback servers the tests start, as an operator would list them.
func testEgress(t testing.TB) *egress.Policy {
	t.Helper()
	p, err := egress.New([]string{"127.0.0.1:*", "localhost:*", "[::1]:*"})
	if err != nil {
		t.Fatal(err)
	}
	return p
}
