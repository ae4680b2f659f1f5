// Package security replays the attacks of issue 11 through real gRPC against the assembled app,
// with API keys configured: in one process (hermes serve) and as five processes that
// authenticate each other with a service key. Every attack must be refused with the code the
// issue names, and the honest calls next to it must still work.
package security

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/qdranttest"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	"github.com/hermes-agent/hermes/test/hermestest"
	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

// The principals of the auth file every stack uses.
const (
	aliceKey = "sk-alice-0123456789abcdef"
	bobKey   = "sk-bob-0123456789abcdefgh"
	opsKey   = "sk-ops-0123456789abcdefgh"
	svcKey   = "sk-svc-0123456789abcdefgh"
)

const authFile = aliceKey + ": alice\n" +
	bobKey + ": bob\n" +
	opsKey + ": {role: operator, name: ops}\n" +
	svcKey + ": {role: service, name: test}\n"

// as returns a context carrying key as a bearer credential ("" for none).
func as(key string) context.Context {
	ctx := context.Background()
	if key == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

// stack is a running Hermes whose services are reached through conn(target).
type stack struct {
	name  string
	conns map[string]*grpc.ClientConn
	model *scripted.Server
	dir   string
	// mcpURL is the MCP endpoint (--mcp-listen), when served.
	mcpURL string
	// pprofURL is the profiler (--pprof-listen), when served.
	pprofURL string
}

func (s *stack) conn(target string) *grpc.ClientConn { return s.conns[target] }

// answerDone answers every request with a short text.
func answerDone(scripted.Request) scripted.Reply { return scripted.Text("done") }

// model answers every turn with a short text, and records what it was asked.
func newModel(t *testing.T) *scripted.Server {
	t.Helper()
	m, err := scripted.New(answerDone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

func writeFile(t *testing.T, path, content string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// startMonolith runs every service in one process with the auth file, as `hermes serve
// --auth-file` does, and an MCP endpoint.
func startMonolith(t *testing.T, configure ...func(*app.Config)) *stack {
	t.Helper()
	dir := t.TempDir()
	mcpAddr, err := cluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	hs := hermestest.Start(t, hermestest.Options{
		Model:           answerDone,
		ScriptExtractor: true,
		DataDir:         dir,
		Log:             quietLog(),
		Configure: func(cfg *app.Config) {
			cfg.AuthFile = writeFile(t, filepath.Join(dir, "keys.yaml"), authFile)
			cfg.MCPGateway.MCPListen = mcpAddr
			cfg.PprofListen = "127.0.0.1:0"
			for _, f := range configure {
				f(cfg)
			}
		},
	})
	s := &stack{name: "monolith", conns: map[string]*grpc.ClientConn{}, model: hs.Model, dir: dir, mcpURL: "http://" + mcpAddr + "/mcp", pprofURL: "http://" + hs.App.PprofAddr() + "/debug/pprof/"}
	for _, target := range app.Targets() {
		s.conns[target] = hs.Conn
	}
	return s
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// startCluster runs the five targets as processes with Redis and NATS; each authenticates the
// others' calls with the service key.
func startCluster(t *testing.T) *stack {
	t.Helper()
	if testing.Short() {
		t.Skip("multi-process stack in -short mode")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "hermes-security-bin")
		if err != nil {
			buildErr = err
			return
		}
		binary, buildErr = cluster.Build(context.Background(), dir)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	dir := t.TempDir()
	m := newModel(t)
	_, prefix := testenv.Redis(t)
	redisURL := testenv.RedisURL()
	keys := writeFile(t, filepath.Join(dir, "keys.yaml"), authFile)
	svc := writeFile(t, filepath.Join(dir, "service.key"), svcKey+"\n")
	c, err := cluster.Start(context.Background(), cluster.Options{
		Binary: binary, Dir: dir,
		RedisURL: redisURL, RedisPrefix: prefix,
		NATSURL: "nats://127.0.0.1:4222", NATSNamespace: "sec" + strings.ToLower(strings.ReplaceAll(t.Name(), "/", "")),
		QdrantAddr:   qdranttest.Addr(t),
		ModelBaseURL: m.URL(), Model: "scripted-test",
		Env: []string{"HERMES_AUTH_FILE=" + keys, "HERMES_SERVICE_KEY_FILE=" + svc},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("process logs:%s", c.Logs(8000))
		}
	})
	s := &stack{name: "cluster", conns: map[string]*grpc.ClientConn{}, model: m, dir: dir}
	for _, target := range app.Targets() {
		conn, err := rpc.Dial(c.Addr(target))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		s.conns[target] = conn
	}
	return s
}

// metadataCtx is ctx with key as a bearer credential.
func metadataCtx(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}
