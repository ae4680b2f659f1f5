// Package hermestest starts Hermes in the test's process: the one way tests start a whole stack
// (Start) or one app of their own configuration (StartApp). The multi-process layout, where each
// target is an OS process, is test/multiprocess/cluster.
//
// Nothing but tests imports it.
package hermestest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/hermes-agent/hermes/app"
	"github.com/hermes-agent/hermes/internal/config"
	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/services/memory"
)

// NATSURL is the shared NATS (JetStream) the Split layout uses; CI starts it.
const NATSURL = "nats://127.0.0.1:4222"

// AllowLoopback is the flag that lets webhooks and MCP servers on loopback be reached, for
// tests whose tools listen there (outbound connections to internal addresses are refused by
// default, and the security tests check that).
const AllowLoopback = "--egress-allow=127.0.0.1:*,localhost:*"

// EventsKey signs the test stacks' turn.finished events (--events-key).
const EventsKey = "e2e-test-events-key-0123456789abcdef0123"

// ModelName is the model name a test stack asks the scripted model for.
const ModelName = "scripted-test"

// Layout is how a stack's targets are laid out over apps in this process.
type Layout int

const (
	// Monolith is `hermes serve`: every target in one app, on embedded stores and an embedded
	// NATS.
	Monolith Layout = iota
	// Split is the microservices shape: session, tools, MCP gateway and orchestrator in one app
	// on the shared Redis and NATS, and the memory target in a second app (embedded store, the
	// same NATS namespace) reached by address — the memory target's Redis mode needs Qdrant.
	Split
	// PerTarget is one app per target, each with its own listener, reaching the others by
	// address, on the shared Redis and NATS (memory on its embedded store).
	PerTarget
)

// Options say what stack to start. The zero value is a monolith with a scripted model that
// answers every turn with an empty sequence.
type Options struct {
	Layout Layout
	// Model is the scripted model's handler; nil is scripted.Sequence().
	Model scripted.Handler
	// ScriptExtractor lets Model answer the memory extractor too; otherwise the extractor's
	// requests get no memories, so Model sees only the turns.
	ScriptExtractor bool
	// NoModel starts without a model endpoint (the scripted model still runs, unused).
	NoModel bool
	// Args are `hermes serve` flags applied over the test defaults (Config).
	Args []string
	// Configure changes the configuration last: of the one app (Monolith), of the main app
	// (Split), of every app before its target and addresses are set (PerTarget).
	Configure func(*app.Config)
	// DataDir is the main app's data directory; empty is a fresh temporary one. A test that
	// restarts Hermes on its data passes the same directory twice.
	DataDir string
	// Log receives the services' logs; nil is warnings and errors to the test log (Start) or
	// nothing (New).
	Log *slog.Logger
}

// Stack is a running Hermes with clients of its services.
type Stack struct {
	// App serves every target but memory (all of them in the Monolith layout, the orchestrator
	// in PerTarget).
	App *app.App
	// MemoryApp serves the memory target (App in the Monolith layout).
	MemoryApp *app.App
	// Apps are the apps by the target they serve.
	Apps map[string]*app.App
	// Model is the scripted model.
	Model *scripted.Server
	// Conn reaches App; MemoryConn reaches MemoryApp. The clients reach the app serving their
	// target.
	Conn, MemoryConn *grpc.ClientConn
	// Names are the NATS names (namespaced in the Split layout).
	Names events.Names
	// RedisPrefix is the Redis key prefix of the Split layout ("" otherwise).
	RedisPrefix string

	Sessions     sessionv1.SessionServiceClient
	Tools        toolsv1.ToolServiceClient
	Gateway      mcpgatewayv1.MCPGatewayServiceClient
	Orchestrator orchestratorv1.OrchestratorServiceClient
	Memory       memoryv1.MemoryServiceClient

	closeOnce sync.Once
	closeErr  error
	closers   []func() error // run in reverse order by Close
}

// Start starts the stack o describes and stops it when the test ends; a failure to start fails
// the test.
func Start(t testing.TB, o Options) *Stack {
	t.Helper()
	if o.DataDir == "" {
		o.DataDir = t.TempDir()
	}
	if o.Log == nil {
		o.Log = Logger(t)
	}
	s, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("stopping Hermes: %v", err)
		}
	})
	return s
}

// New starts the stack o describes; Close stops it. It is Start for code without a testing.TB
// (examples).
func New(ctx context.Context, o Options) (*Stack, error) {
	s := &Stack{Names: events.DefaultNames()}
	if err := s.start(ctx, o); err != nil {
		_ = s.Close() // what was started before the failure
		return nil, err
	}
	return s, nil
}

// start starts the stack o describes; on failure, Close stops what it started.
func (s *Stack) start(ctx context.Context, o Options) (err error) {
	if o.DataDir == "" {
		if o.DataDir, err = s.tempDir("hermestest-"); err != nil {
			return err
		}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	h := o.Model
	if h == nil {
		h = scripted.Sequence()
	}
	if !o.ScriptExtractor {
		h = NoMemories(h)
	}
	if s.Model, err = scripted.New(h); err != nil {
		return err
	}
	s.closers = append(s.closers, func() error { s.Model.Close(); return nil })

	base, err := loadConfig(o.DataDir, o.Args)
	if err != nil {
		return err
	}
	if !o.NoModel {
		base.ModelBaseURL = s.Model.URL()
	}
	s.Apps = map[string]*app.App{}
	switch o.Layout {
	case Monolith:
		if o.Configure != nil {
			o.Configure(&base)
		}
		if s.App, err = s.startApp(ctx, base, o.Log); err != nil {
			return err
		}
		s.MemoryApp = s.App
		for _, t := range app.Targets() {
			s.Apps[t] = s.App
		}
	case Split:
		err = s.startSplit(ctx, base, o)
	case PerTarget:
		err = s.startPerTarget(ctx, base, o)
	default:
		err = fmt.Errorf("unknown layout %d", o.Layout)
	}
	if err != nil {
		return err
	}
	conns := map[*app.App]*grpc.ClientConn{}
	conn := func(target string) (*grpc.ClientConn, error) {
		a := s.Apps[target]
		if c, ok := conns[a]; ok {
			return c, nil
		}
		c, err := s.dial(a.Addr())
		conns[a] = c
		return c, err
	}
	if s.Conn, err = conn(app.TargetOrchestrator); err != nil {
		return err
	}
	if s.MemoryConn, err = conn(app.TargetMemory); err != nil {
		return err
	}
	clients := map[string]*grpc.ClientConn{}
	for _, t := range []string{app.TargetSession, app.TargetTools, app.TargetMCPGateway} {
		if clients[t], err = conn(t); err != nil {
			return err
		}
	}
	s.Sessions = sessionv1.NewSessionServiceClient(clients[app.TargetSession])
	s.Tools = toolsv1.NewToolServiceClient(clients[app.TargetTools])
	s.Gateway = mcpgatewayv1.NewMCPGatewayServiceClient(clients[app.TargetMCPGateway])
	s.Orchestrator = orchestratorv1.NewOrchestratorServiceClient(s.Conn)
	s.Memory = memoryv1.NewMemoryServiceClient(s.MemoryConn)
	return nil
}

// startPerTarget starts the targets in dependency order, so each knows the addresses it calls
// (the tool service reaches the gateway only for MCP tools, so it starts before the gateway).
func (s *Stack) startPerTarget(ctx context.Context, base app.Config, o Options) error {
	ns, err := s.useBackends(ctx)
	if err != nil {
		return err
	}
	if o.Configure != nil {
		o.Configure(&base)
	}
	addr := func(t string) string {
		if a := s.Apps[t]; a != nil {
			return a.Addr()
		}
		return ""
	}
	for _, t := range app.Targets() {
		cfg := base
		cfg.Target = t
		var err error
		if cfg.DataDir, err = s.tempDir("hermestest-" + t + "-"); err != nil {
			return err
		}
		cfg.NATSURL, cfg.NATSNamespace = NATSURL, ns
		if t != app.TargetMemory {
			cfg.RedisURL, cfg.RedisPrefix = testenv.RedisURL(), s.RedisPrefix
		}
		cfg.SessionAddr, cfg.ToolsAddr, cfg.MCPGatewayAddr, cfg.MemoryAddr = addr(app.TargetSession), addr(app.TargetTools), addr(app.TargetMCPGateway), addr(app.TargetMemory)
		a, err := s.startApp(ctx, cfg, o.Log)
		if err != nil {
			return err
		}
		s.Apps[t] = a
	}
	s.App, s.MemoryApp = s.Apps[app.TargetOrchestrator], s.Apps[app.TargetMemory]
	return nil
}

func (s *Stack) startSplit(ctx context.Context, base app.Config, o Options) error {
	ns, err := s.useBackends(ctx)
	if err != nil {
		return err
	}
	memCfg := base
	memCfg.Target = app.TargetMemory
	if memCfg.DataDir, err = s.tempDir("hermestest-memory-"); err != nil {
		return err
	}
	memCfg.NATSURL, memCfg.NATSNamespace = NATSURL, ns
	if s.MemoryApp, err = s.startApp(ctx, memCfg, o.Log); err != nil {
		return err
	}
	mainCfg := base
	mainCfg.Target = strings.Join([]string{app.TargetSession, app.TargetTools, app.TargetMCPGateway, app.TargetOrchestrator}, ",")
	mainCfg.RedisURL, mainCfg.RedisPrefix = testenv.RedisURL(), s.RedisPrefix
	mainCfg.NATSURL, mainCfg.NATSNamespace = NATSURL, ns
	mainCfg.MemoryAddr = s.MemoryApp.Addr()
	if o.Configure != nil {
		o.Configure(&mainCfg)
	}
	if s.App, err = s.startApp(ctx, mainCfg, o.Log); err != nil {
		return err
	}
	for _, t := range app.Targets() {
		s.Apps[t] = s.App
	}
	s.Apps[app.TargetMemory] = s.MemoryApp
	return nil
}

// useBackends takes a Redis key prefix and a NATS namespace of the shared backends for this stack
// and returns the namespace.
func (s *Stack) useBackends(ctx context.Context) (string, error) {
	if err := s.useRedis(ctx); err != nil {
		return "", err
	}
	ns := "e2e" + randomToken()
	s.Names = events.NamespacedNames(ns)
	return ns, s.useNATS()
}

// useRedis checks the shared Redis and takes a fresh key prefix, whose keys Close deletes.
func (s *Stack) useRedis(ctx context.Context) error {
	opts, err := redis.ParseURL(testenv.RedisURL())
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	s.closers = append(s.closers, rdb.Close)
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		return fmt.Errorf("Redis at %s is required (CI starts it; locally scripts/ensure-backends.sh): %w", opts.Addr, err)
	}
	s.RedisPrefix = "hermes-test:" + randomToken() + ":"
	s.closers = append(s.closers, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		testenv.DeleteKeys(ctx, rdb, s.RedisPrefix)
		return nil
	})
	return nil
}

// useNATS checks the shared NATS; Close deletes the stack's stream.
func (s *Stack) useNATS() error {
	nc, err := nats.Connect(NATSURL, nats.Timeout(3*time.Second))
	if err != nil {
		return fmt.Errorf("NATS at %s is required: %w", NATSURL, err)
	}
	nc.Close()
	stream := s.Names.Stream
	s.closers = append(s.closers, func() error { DeleteStream(stream); return nil })
	return nil
}

// DeleteStream deletes a test's NATS stream from the shared NATS, ignoring errors.
func DeleteStream(stream string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if nc, err := nats.Connect(NATSURL); err == nil {
		if js, err := jetstream.New(nc); err == nil {
			_ = js.DeleteStream(ctx, stream)
		}
		nc.Close()
	}
}

// tempDir makes a directory that Close removes.
func (s *Stack) tempDir(pattern string) (string, error) {
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	s.closers = append(s.closers, func() error { return os.RemoveAll(dir) })
	return dir, nil
}

func (s *Stack) startApp(ctx context.Context, cfg app.Config, log *slog.Logger) (*app.App, error) {
	a, err := app.New(ctx, cfg, log)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", cfg.Target, err)
	}
	a.Start()
	s.closers = append(s.closers, a.Stop)
	return a, nil
}

func (s *Stack) dial(addr string) (*grpc.ClientConn, error) {
	conn, err := rpc.Dial(addr)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() error { _ = conn.Close(); return nil })
	return conn, nil
}

// Close stops the stack (connections first, then the apps, then the model) and removes what it
// made; it reports the first error of stopping an app. Later calls return the same.
func (s *Stack) Close() error {
	s.closeOnce.Do(func() {
		var errs []error
		for i := len(s.closers) - 1; i >= 0; i-- {
			errs = append(errs, s.closers[i]())
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// App is one app started by StartApp.
type App struct {
	*app.App
	stopOnce sync.Once
	stopErr  error
}

// Stop stops the app; the test's end stops it otherwise. Later calls return the same.
func (a *App) Stop() error {
	a.stopOnce.Do(func() { a.stopErr = a.App.Stop() })
	return a.stopErr
}

// StartApp starts one app of cfg (start from Config) and stops it when the test ends; log nil
// is warnings and errors to the test log.
func StartApp(t testing.TB, cfg app.Config, log *slog.Logger) *App {
	t.Helper()
	if log == nil {
		log = Logger(t)
	}
	a, err := app.New(context.Background(), cfg, log)
	if err != nil {
		t.Fatalf("start %s: %v", cfg.Target, err)
	}
	a.Start()
	started := &App{App: a}
	t.Cleanup(func() { _ = started.Stop() })
	return started
}

// Config is the configuration a test's Hermes starts from: every default and nothing from the
// environment, with args (`hermes serve` flags) applied; on loopback, its data in a fresh
// temporary directory, the scripted model's name, a 5 s shutdown and turn.finished signed with
// EventsKey.
func Config(t testing.TB, args ...string) app.Config {
	t.Helper()
	cfg, err := loadConfig(t.TempDir(), args)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func loadConfig(dataDir string, args []string) (app.Config, error) {
	var cfg app.Config
	fs := flag.NewFlagSet("hermestest", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	defaults := []string{
		"--listen=127.0.0.1:0",
		"--data-dir=" + dataDir,
		"--model=" + ModelName,
		"--shutdown-timeout=5s",
		"--events-key=" + EventsKey,
	}
	if err := config.Load(fs, append(defaults, args...), func(string) string { return "" }, "config"); err != nil {
		return app.Config{}, fmt.Errorf("test configuration: %w", err)
	}
	return cfg, nil
}

// NoMemories answers the memory extractor's requests with no memories and passes the others to
// h.
func NoMemories(h scripted.Handler) scripted.Handler {
	return func(req scripted.Request) scripted.Reply {
		if len(req.Messages) > 0 && req.Messages[0].Content == memory.ExtractionSystemPrompt {
			return scripted.Text(`{"memories":[]}`)
		}
		return h(req)
	}
}

// Logger writes warnings and errors to the test log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func randomToken() string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
