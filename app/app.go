// Package app assembles Hermes' services into one process. Like Grafana Loki's modules, each
// target (session, tools, mcpgateway, memory, orchestrator) has an init function; "all" runs
// every target in one process on one gRPC port with embedded backends, and a comma list runs
// some of them with external Redis, NATS and Qdrant.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/config"
	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/quota"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/tokenizer"
	"github.com/hermes-agent/hermes/services/mcpgateway"
	"github.com/hermes-agent/hermes/services/memory"
	"github.com/hermes-agent/hermes/services/orchestrator"
	"github.com/hermes-agent/hermes/services/session"
	"github.com/hermes-agent/hermes/services/tools"
)

// Target names.
const (
	TargetSession      = "session"
	TargetTools        = "tools"
	TargetMCPGateway   = "mcpgateway"
	TargetMemory       = "memory"
	TargetOrchestrator = "orchestrator"
	TargetAll          = "all"
)

// module is one target: its init registers the service on the app's server and opens what it
// needs. Modules are initialised in this order, so a module may rely on earlier ones' backends.
type module struct {
	name string
	init func(a *App, ctx context.Context) error
}

var modules = []module{
	{TargetSession, (*App).initSession},
	{TargetTools, (*App).initTools},
	{TargetMCPGateway, (*App).initMCPGateway},
	{TargetMemory, (*App).initMemory},
	{TargetOrchestrator, (*App).initOrchestrator},
}

// Targets lists every target name in start-up order.
func Targets() []string {
	out := make([]string, len(modules))
	for i, m := range modules {
		out[i] = m.name
	}
	return out
}

// Config is the whole configuration of a serving process.
type Config struct {
	config.Common
	// Target is "all" or a comma list of target names.
	Target string
	// ConfigFile is an optional YAML file.
	ConfigFile string
	// Version is reported in telemetry and logs.
	Version string
	// PprofListen is the profiler's HTTP address; empty disables it.
	PprofListen string
	// PprofBlockRate and PprofMutexFraction enable the block and mutex profiles (0: off).
	PprofBlockRate, PprofMutexFraction int

	Session      session.Config
	Tools        tools.Config
	MCPGateway   mcpgateway.Config
	Memory       memory.Config
	Orchestrator orchestrator.Config
	HTTP         HTTPConfig
	Quota        quota.Config
}

// RegisterFlags registers every setting.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Common.RegisterFlags(fs)
	c.registerPprofFlag(fs)
	fs.StringVar(&c.Target, "target", TargetAll, "services to run: all, or a comma list of "+strings.Join(Targets(), ", "))
	fs.StringVar(&c.ConfigFile, "config", "", "optional YAML configuration file (keys are flag names; nested maps join with '.')")
	c.Session.RegisterFlags(fs)
	c.Tools.RegisterFlags(fs)
	c.MCPGateway.RegisterFlags(fs)
	c.Memory.RegisterFlags(fs)
	c.Orchestrator.RegisterFlags(fs)
	c.HTTP.RegisterFlags(fs)
	c.Quota.RegisterFlags(fs)
}

// ParseTargets turns "all" or a comma list into the set of targets, rejecting unknown names.
func ParseTargets(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, t := range strings.Split(s, ",") {
		t = strings.TrimSpace(t)
		switch {
		case t == TargetAll:
			for _, name := range Targets() {
				out[name] = true
			}
		case slices.Contains(Targets(), t):
			out[t] = true
		case t == "":
		default:
			return nil, fmt.Errorf("unknown target %q: want all or one of %s", t, strings.Join(Targets(), ", "))
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no target given")
	}
	return out, nil
}

// App is a running Hermes process.
type App struct {
	cfg     Config
	log     *slog.Logger
	srv     *rpc.Server
	lis     net.Listener
	addr    string
	targets map[string]bool
	getenv  func(string) string
	sec     *security
	http    *httpAPI // nil without --http-listen
	// pprofAddr is where the profiler listens, empty when it is off.
	pprofAddr string
	// edgeOmitted are the methods of services this process forwards (initEdge) that it does not
	// serve: the HTTP API neither routes nor documents them.
	edgeOmitted []string
	// healthAddr is where /readyz and /livez are served, empty when off.
	healthAddr string
	// sessionFiles are the session store's bbolt files when this process keeps them; the
	// orchestrator's records of a session go into its file, the quota's counters into the first
	// (set and read by New's initialisers, one after another).
	sessionFiles []*session.BoltStore
	// localGateway is the MCP gateway of this process as the tool service calls it, set when
	// the gateway is registered here and no --mcpgateway-addr points elsewhere (initMCPGateway).
	localGateway atomic.Pointer[tools.MCPCaller]

	// mu guards closers, redis, nc, js and conns, and is held while the first caller connects,
	// so each connection is made once; authn, keys and dialOpts are set by New, then only read.
	mu      sync.Mutex
	closers []func()
	redis   *redis.Client
	nc      *nats.Conn
	js      jetstream.JetStream
	conns   map[string]grpc.ClientConnInterface
	authn   *auth.Authenticator
	keys    *auth.KeyFile
	// eventKeys sign and verify turn.finished (EventKeys).
	eventKeys *events.Keyring
	// dialOpts carry the transport security and service credentials of calls to services in
	// other processes.
	dialOpts []grpc.DialOption

	serveDone chan error
	cancel    context.CancelFunc
}

// New opens the listener and initialises every target; nothing is served until Run or Start.
// On error, whatever was opened is closed again.
func New(ctx context.Context, cfg Config, log *slog.Logger) (*App, error) {
	targets, err := ParseTargets(cfg.Target)
	if err != nil {
		return nil, err
	}
	sec, err := newSecurity(cfg.Common, log)
	if err != nil {
		return nil, err
	}
	if err := sec.checkListen("listen", cfg.Listen, sec.grpcProtected()); err != nil {
		return nil, err
	}
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	a := &App{
		cfg:      cfg,
		log:      log,
		lis:      lis,
		addr:     dialable(lis.Addr().String()),
		targets:  targets,
		getenv:   os.Getenv,
		conns:    map[string]grpc.ClientConnInterface{},
		authn:    sec.authn,
		keys:     sec.keys,
		dialOpts: sec.dialOpts,
	}
	srvOpts := rpc.ServerOptions{
		Logger:          log,
		ShutdownTimeout: cfg.ShutdownTimeout,
		DrainDelay:      cfg.DrainDelay,
		Auth:            sec.authn,
		Creds:           sec.serverCreds,
	}
	if err := a.initQuota(ctx, &srvOpts); err != nil {
		a.closeAll()
		_ = lis.Close()
		return nil, err
	}
	a.srv = rpc.NewServer(srvOpts)
	a.sec = sec
	if err := a.startPprof(); err != nil {
		_ = lis.Close()
		return nil, err
	}
	for _, m := range modules {
		if !targets[m.name] {
			continue
		}
		if err := m.init(a, ctx); err != nil {
			a.closeAll()
			_ = lis.Close()
			return nil, fmt.Errorf("%s: %w", m.name, err)
		}
	}
	if err := a.initHTTP(); err != nil {
		a.closeAll()
		_ = lis.Close()
		return nil, err
	}
	if err := a.startHealth(); err != nil {
		a.closeAll()
		_ = lis.Close()
		return nil, err
	}
	a.setContentionRates()
	return a, nil
}

// dialable turns a listen address into one this process can dial (":7070" → "127.0.0.1:7070").
func dialable(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port)
}

// Addr is the gRPC address the process serves on, dialable from this host.
func (a *App) Addr() string { return a.addr }

// ReadyHandler answers HTTP readiness probes: 200 while every service of the process is
// SERVING.
func (a *App) ReadyHandler() http.Handler { return a.srv.ReadyHandler() }

// Run serves until ctx is cancelled, then shuts down gracefully and closes the backends.
func (a *App) Run(ctx context.Context) error {
	a.log.Info("hermes serving", "addr", a.addr, "targets", a.cfg.Target, "services", a.srv.Services())
	waitHTTP := a.serveHTTP(ctx)
	err := a.srv.Serve(ctx, a.lis)
	waitHTTP()
	a.closeAll()
	return err
}

// Start serves in the background; Stop ends it. For tests and the demo.
func (a *App) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel = cancel
	a.serveDone = make(chan error, 1)
	go func() { a.serveDone <- a.Run(ctx) }()
}

// Stop shuts a started App down and waits for it.
func (a *App) Stop() error {
	if a.cancel == nil {
		a.closeAll()
		return a.lis.Close()
	}
	a.cancel()
	return <-a.serveDone
}

// onClose registers cleanup, run in reverse order at shutdown.
func (a *App) onClose(f func()) {
	a.mu.Lock()
	a.closers = append(a.closers, f)
	a.mu.Unlock()
}

func (a *App) closeAll() {
	a.mu.Lock()
	closers := a.closers
	a.closers = nil
	a.mu.Unlock()
	for i := len(closers) - 1; i >= 0; i-- {
		closers[i]()
	}
}

// dataPath returns a path inside the data directory, creating the directory.
func (a *App) dataPath(name string) (string, error) {
	if err := os.MkdirAll(a.cfg.DataDir, 0o750); err != nil {
		return "", fmt.Errorf("data directory: %w", err)
	}
	return filepath.Join(a.cfg.DataDir, name), nil
}

// openInDataDir opens a service's embedded store, the file name in the data directory, and
// closes it on shutdown.
func openInDataDir[S io.Closer](a *App, name string, open func(path string) (S, error)) (S, error) {
	path, err := a.dataPath(name)
	if err != nil {
		var zero S
		return zero, err
	}
	s, err := open(path)
	if err != nil {
		return s, err
	}
	a.onClose(func() { _ = s.Close() })
	return s, nil
}

// Redis returns the shared Redis client, connecting and pinging it on first use. It returns
// nil, nil when no Redis URL is configured (embedded stores are used then).
func (a *App) Redis(ctx context.Context) (*redis.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cfg.RedisURL == "" || a.redis != nil {
		return a.redis, nil
	}
	rdb, where, err := redisClient(a.cfg.RedisURL)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redis at %s is unreachable: %w", where, err)
	}
	a.redis = rdb
	a.closers = append(a.closers, func() { _ = rdb.Close() })
	return rdb, nil
}

// redisClient returns the client of rawURL and where it connects, for messages. Hermes runs on
// one Redis node or on the primary that Sentinel names: its Lua scripts touch several keys at
// once, which Redis Cluster would need in one slot. A URL with master_name is Sentinel's form
// (go-redis ParseFailoverURL): its host and each addr are sentinels, password= is the primary's.
func redisClient(rawURL string) (*redis.Client, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("redis url: %w", err)
	}
	if !u.Query().Has("master_name") {
		opts, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, "", fmt.Errorf("redis url: %w", err)
		}
		return redis.NewClient(opts), opts.Addr, nil
	}
	opts, err := redis.ParseFailoverURL(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("redis url: %w", err)
	}
	where := fmt.Sprintf("primary %q of sentinels %s", opts.MasterName, strings.Join(opts.SentinelAddrs, ","))
	return redis.NewFailoverClient(opts), where, nil
}

// watchRedis reports service NOT_SERVING while Redis does not answer.
func (a *App) watchRedis(service string, rdb *redis.Client) {
	a.srv.WatchDependency("redis/"+service, []string{service}, 2*time.Second, func(ctx context.Context) error {
		return rdb.Ping(ctx).Err()
	})
}

// NATS returns the shared NATS connection and JetStream context, with the HERMES_EVENTS stream
// ensured. Without a NATS URL an embedded server with a file store in the data directory is
// started.
func (a *App) NATS(ctx context.Context) (*nats.Conn, jetstream.JetStream, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.nc != nil {
		return a.nc, a.js, nil
	}
	url := a.cfg.NATSURL
	var extra []nats.Option
	if url == "" {
		if err := os.MkdirAll(a.cfg.DataDir, 0o750); err != nil {
			return nil, nil, fmt.Errorf("data directory: %w", err)
		}
		emb, err := events.StartEmbeddedWith(filepath.Join(a.cfg.DataDir, "nats"), events.EmbeddedOptions{Port: a.cfg.NATSPort})
		if err != nil {
			return nil, nil, err
		}
		a.closers = append(a.closers, emb.Close)
		url = emb.URL()
		extra = append(extra, emb.InProcess())
		a.log.Info("embedded NATS with JetStream (token required)", "addr", emb.Addr())
	}
	if err := a.checkNATSURL(a.cfg.NATSURL); err != nil {
		return nil, nil, err
	}
	nc, js, err := events.Connect(url, "hermes", a.log, extra...)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := events.EnsureStreamReplicas(sctx, js, a.EventNames(), a.cfg.NATSReplicas); err != nil {
		nc.Close()
		return nil, nil, err
	}
	a.nc, a.js = nc, js
	a.closers = append(a.closers, func() { _ = nc.Drain() })
	return nc, js, nil
}

// EventNames are the stream and subject names in use.
func (a *App) EventNames() events.Names { return events.NamespacedNames(a.cfg.NATSNamespace) }

// watchNATS reports services NOT_SERVING while NATS is disconnected.
func (a *App) watchNATS(service string, nc *nats.Conn) {
	a.srv.WatchDependency("nats/"+service, []string{service}, 2*time.Second, func(context.Context) error {
		if !nc.IsConnected() {
			return fmt.Errorf("nats %s", nc.Status())
		}
		return nil
	})
}

// Tokenizer returns the configured tokenizer.
func (a *App) Tokenizer() (*tokenizer.Tokenizer, error) {
	return tokenizer.New(a.cfg.Tokenizer)
}

// Conn returns a client connection to a target: the in-process channel when this process runs
// the target and no address is configured (no network, the service principal), otherwise a
// connection to the configured HERMES_<TARGET>_ADDR with the process's TLS and service
// credentials.
func (a *App) Conn(target string) (grpc.ClientConnInterface, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.conns[target]; ok {
		return c, nil
	}
	addr := map[string]string{
		TargetSession:      a.cfg.SessionAddr,
		TargetTools:        a.cfg.ToolsAddr,
		TargetMCPGateway:   a.cfg.MCPGatewayAddr,
		TargetMemory:       a.cfg.MemoryAddr,
		TargetOrchestrator: a.cfg.OrchestratorAddr,
	}[target]
	if addr == "" {
		if !a.targets[target] {
			return nil, fmt.Errorf("the %s service is not in this process: set --%s-addr (%s)", target, target, config.EnvName(target+"-addr"))
		}
		a.conns[target] = a.srv.InProcess()
		return a.conns[target], nil
	}
	c, err := rpc.Dial(addr, a.dialOpts...)
	if err != nil {
		return nil, err
	}
	a.conns[target] = c
	a.closers = append(a.closers, func() { _ = c.Close() })
	return c, nil
}

// InProcessPublic is a connection to this process's services for calls made on behalf of an
// outside caller (the HTTP API): the credentials of each call's metadata are authenticated and
// authorized as on the gRPC listener.
func (a *App) InProcessPublic() grpc.ClientConnInterface { return a.srv.InProcessPublic() }
