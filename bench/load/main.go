// Command load drives concurrent sessions through OrchestratorService.RunTurn and reports
// turns per second and latency percentiles. The model is the scripted model (an
// OpenAI-compatible HTTP server started in this process that answers from a script; no model
// runs): each turn is one calculator tool call and an answer — two model calls, one tool call
// — and its turn.finished yields one memory extraction (a third model call, asynchronous).
//
// It starts what it measures:
//
//	go run ./bench/load -mode=monolithic                      # one `hermes serve`, embedded everything
//	go run ./bench/load -mode=microservices                   # five processes, real Redis and NATS
//	go run ./bench/load -mode=microservices -orchestrators=2  # two orchestrator replicas
//	go run ./bench/load -mode=microservices -orchestrators=4 -memories=2 -own-backends
//	                                                          # four orchestrators, two memory
//	                                                          # replicas, Redis and NATS of the run's own
//
// or measures a running deployment: -mode=external -addr=host:7070[,host2:7070] (sessions are
// spread over the addresses; -session-addr is the session service, default the first address).
// In external mode no model is started: the deployment's own model answers, and it must follow
// the load turn's script (cluster.Model) for turns to complete as described.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"maps"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/qdranttest"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

type config struct {
	mode          string
	orchestrators int
	memories      int
	memWorkers    int
	ownBackends   bool
	profile       string
	profileOut    string
	sessions      int
	turnsPer      int
	duration      time.Duration
	warmup        time.Duration
	modelDelay    time.Duration
	bin           string
	addr          string
	sessionAddr   string
	redisURL      string
	natsURL       string
	qdrantAddr    string
	keep          bool
	logs          bool
}

func main() {
	var c config
	flag.StringVar(&c.mode, "mode", "monolithic", "what to drive: monolithic (starts one hermes serve), microservices (starts five hermes serve --target=… processes on loopback with real Redis and NATS), external (-addr)")
	flag.IntVar(&c.orchestrators, "orchestrators", 1, "orchestrator processes in microservices mode; sessions are spread round-robin over their addresses (worker i always calls orchestrator i mod N)")
	flag.IntVar(&c.memories, "memories", 1, "memory processes in microservices mode: they share extraction through JetStream, and orchestrator k calls memory replica (k-1) mod M")
	flag.IntVar(&c.memWorkers, "memory-workers", 0, "microservices mode: extraction workers per memory process (HERMES_MEMORY_CONSUMER_WORKERS); 0 keeps Hermes' default")
	flag.BoolVar(&c.ownBackends, "own-backends", false, "microservices mode: start a redis-server (append-only file, fsync every second, as deploy/k8s) and a nats-server -js of the run's own instead of -redis-url and -nats-url, so their CPU is the run's alone")
	flag.StringVar(&c.profile, "profile", "", "microservices mode: a process name (orchestrator, orchestrator-2, memory, session, ...) whose Go CPU profile is taken over the measured window")
	flag.StringVar(&c.profileOut, "profile-out", "cpu.pprof", "where -profile writes the profile (go tool pprof -top <file>)")
	flag.IntVar(&c.sessions, "sessions", 8, "concurrent sessions; each runs one turn after another")
	flag.IntVar(&c.turnsPer, "turns-per-session", 10, "turns in one session before the worker starts a new one (with a new user), so every run sees sessions of the same length; 0 never starts a new one")
	flag.DurationVar(&c.duration, "duration", 20*time.Second, "how long turns are measured")
	flag.DurationVar(&c.warmup, "warmup", 3*time.Second, "how long turns run before measuring starts")
	flag.DurationVar(&c.modelDelay, "model-delay", 0, "time the scripted model waits before each assistant answer (0: Hermes' own overhead only)")
	flag.StringVar(&c.bin, "bin", "", "hermes binary; empty builds ./cmd/hermes into a temporary directory")
	flag.StringVar(&c.addr, "addr", "", "external mode: comma list of orchestrator addresses")
	flag.StringVar(&c.sessionAddr, "session-addr", "", "external mode: session service address (default the first -addr)")
	flag.StringVar(&c.redisURL, "redis-url", "redis://127.0.0.1:6379/0", "microservices mode: Redis (keys under a random prefix, removed afterwards)")
	flag.StringVar(&c.natsURL, "nats-url", "nats://127.0.0.1:4222", "microservices mode: NATS with JetStream (a random namespace)")
	flag.StringVar(&c.qdrantAddr, "qdrant-addr", "", "microservices mode: Qdrant gRPC address; empty starts the in-process Qdrant test double (NOT Qdrant)")
	flag.BoolVar(&c.keep, "keep", false, "keep the temporary directory (process logs, data) afterwards")
	flag.BoolVar(&c.logs, "logs", false, "print the processes' logs at the end")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: go run ./bench/load [flags]\n\nDrives -sessions concurrent sessions through OrchestratorService.RunTurn with the scripted model\nand reports turns/s and latency percentiles.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("load: ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if _, err := run(ctx, c, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

// target is what the load runs against.
type target struct {
	orchestrators []string
	session       string
	// procs are the Hermes processes started.
	procs []*cluster.Process
	// meters are every process whose CPU is read: the Hermes processes, then Redis and NATS.
	meters []meter
}

// meter is a process whose CPU time is read from /proc before and after the window.
type meter struct {
	name string
	pid  func() int
	// backend marks Redis and NATS; shared marks a server other work on the machine uses too
	// (its CPU includes that work).
	backend, shared bool
	// redisAddr is set on a Redis of the run's own: its commands are counted too.
	redisAddr string
}

func hermesMeters(procs []*cluster.Process) []meter {
	var out []meter
	for _, p := range procs {
		out = append(out, meter{name: p.Name, pid: p.Pid})
	}
	return out
}

// run starts what the mode needs, drives the load, prints the report and returns the figures.
func run(ctx context.Context, c config, out io.Writer) (*result, error) {
	if c.sessions < 1 || c.orchestrators < 1 || c.memories < 1 || c.duration <= 0 {
		return nil, errors.New("-sessions, -orchestrators, -memories and -duration must be positive")
	}
	if c.mode != "microservices" && (c.orchestrators != 1 || c.memories != 1 || c.memWorkers != 0 || c.ownBackends || c.profile != "") {
		return nil, errors.New("-orchestrators, -memories, -memory-workers, -own-backends and -profile apply to microservices mode")
	}
	dir, err := os.MkdirTemp("", "hermes-load-")
	if err != nil {
		return nil, err
	}
	if c.keep {
		fmt.Fprintf(out, "data and logs in %s\n", dir)
	} else {
		defer func() { _ = os.RemoveAll(dir) }()
	}

	var tg target
	if c.mode == "external" {
		if c.addr == "" {
			return nil, errors.New("-mode=external needs -addr")
		}
		tg.orchestrators = strings.Split(c.addr, ",")
		tg.session = c.sessionAddr
		if tg.session == "" {
			tg.session = tg.orchestrators[0]
		}
	} else {
		model, err := scripted.New(counted.wrap(cluster.Model(cluster.ModelOptions{Delay: c.modelDelay})))
		if err != nil {
			return nil, err
		}
		defer model.Close()
		bin := c.bin
		if bin == "" {
			fmt.Fprintln(out, "building ./cmd/hermes …")
			if bin, err = cluster.Build(ctx, dir); err != nil {
				return nil, err
			}
		}
		switch c.mode {
		case "monolithic":
			p, err := cluster.StartMonolith(ctx, bin, dir, model.URL(), "scripted-load", nil)
			if err != nil {
				return nil, err
			}
			defer func() {
				if c.logs {
					fmt.Fprintf(out, "\n----- %s log -----\n%s\n", p.Name, p.Log(1<<20))
				}
				p.Close()
			}()
			tg.orchestrators, tg.session, tg.procs = []string{p.Addr}, p.Addr, []*cluster.Process{p}
			tg.meters = hermesMeters(tg.procs)
		case "microservices":
			cl, backends, cleanup, err := startCluster(ctx, c, bin, dir, model.URL())
			if err != nil {
				return nil, err
			}
			defer func() {
				if c.logs {
					fmt.Fprintln(out, cl.Logs(1<<20))
				}
				cleanup()
			}()
			tg.orchestrators, tg.session, tg.procs = cl.Addrs("orchestrator"), cl.Addr("session"), cl.Procs
			tg.meters = append(hermesMeters(cl.Procs), backends...)
		default:
			return nil, fmt.Errorf("-mode %q: want monolithic, microservices or external", c.mode)
		}
	}
	res, err := drive(ctx, c, tg)
	if err != nil {
		return nil, err
	}
	res.modelCalls = counted.snapshot()
	report(out, c, tg, res)
	return res, nil
}

// startCluster starts the five processes and their replicas (and the Qdrant double unless
// -qdrant-addr is set, and with -own-backends a Redis and a NATS server); it returns the Redis
// and NATS servers to read the CPU of.
func startCluster(ctx context.Context, c config, bin, dir, modelURL string) (*cluster.Cluster, []meter, func(), error) {
	id := strconv.FormatInt(time.Now().UnixNano(), 36)
	qaddr := c.qdrantAddr
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	if qaddr == "" {
		d, err := qdranttest.Start()
		if err != nil {
			return nil, nil, nil, err
		}
		closers = append(closers, d.Close)
		qaddr = d.Addr()
	}
	var backends []meter
	if c.ownBackends {
		r, err := cluster.StartRedisFsync(filepath.Join(dir, "redis"), "everysec")
		if err != nil {
			cleanup()
			return nil, nil, nil, err
		}
		closers = append(closers, r.Close)
		n, err := cluster.StartNATS(filepath.Join(dir, "nats"))
		if err != nil {
			cleanup()
			return nil, nil, nil, err
		}
		closers = append(closers, n.Close)
		c.redisURL, c.natsURL = r.URL(), n.URL()
		backends = []meter{{name: "redis-server", pid: r.Pid, backend: true, redisAddr: r.Addr()}, {name: "nats-server", pid: n.Pid, backend: true}}
	} else {
		for _, s := range []struct{ comm, url, port string }{{"redis-server", c.redisURL, "6379"}, {"nats-server", c.natsURL, "4222"}} {
			if pid := cluster.FindServer(s.comm, urlPort(s.url, s.port)); pid != 0 {
				backends = append(backends, meter{name: s.comm, pid: func() int { return pid }, backend: true, shared: true})
			}
		}
	}
	prefix := "hermes-load-" + id + ":"
	env := []string{"HERMES_MEMORY_QDRANT_COLLECTION=hermes_load_" + id}
	if c.memWorkers > 0 {
		env = append(env, fmt.Sprintf("HERMES_MEMORY_CONSUMER_WORKERS=%d", c.memWorkers))
	}
	cl, err := cluster.Start(ctx, cluster.Options{
		Binary: bin, Dir: dir,
		RedisURL: c.redisURL, RedisPrefix: prefix,
		NATSURL: c.natsURL, NATSNamespace: "load" + id,
		QdrantAddr:   qaddr,
		ModelBaseURL: modelURL, Model: "scripted-load",
		Orchestrators: c.orchestrators,
		Memories:      c.memories,
		Profile:       c.profile != "",
		Env:           env,
	})
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	closers = append(closers, cl.Close)
	if !c.ownBackends { // a server of the run's own goes with its data
		closers = append(closers, func() { cleanupBackends(c, prefix, "load"+id) })
	}
	return cl, backends, cleanup, nil
}

// urlPort is the port of a redis:// or nats:// URL, or def when it names none.
func urlPort(raw, def string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Port() == "" {
		return def
	}
	return u.Port()
}

// result is what the measured window produced.
type result struct {
	elapsed   time.Duration
	latencies []time.Duration
	failures  map[string]int
	example   map[string]string
	cpu       map[string]float64 // CPU seconds per process (Redis and NATS included) in the measured window
	// redisCommands is what a Redis of the run's own did in the window, by command (nil: none).
	redisCommands map[string]cmdStat
	selfCPU       time.Duration // CPU of the load generator and scripted model in the window
	machine       float64       // busy fraction of the machine's cores in the window
	perAddr       map[string]int
	// modelCalls counts the scripted model's requests by kind over the whole run; windowCalls
	// in the measured window (read with the CPU): extraction requests there against the
	// window's turns say whether the memory extractor keeps up.
	modelCalls, windowCalls map[string]int
}

func drive(ctx context.Context, c config, tg target) (*result, error) {
	sconn, err := grpc.NewClient(tg.session, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer func() { _ = sconn.Close() }()
	sessions := sessionv1.NewSessionServiceClient(sconn)
	var clients []orchestratorv1.OrchestratorServiceClient
	for _, a := range tg.orchestrators {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, err
		}
		defer func() { _ = conn.Close() }()
		clients = append(clients, orchestratorv1.NewOrchestratorServiceClient(conn))
	}

	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	newSession := func(worker, n int) (user, session string, err error) {
		user = fmt.Sprintf("load-%s-%d-%d", run, worker, n)
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := sessions.CreateSession(cctx, &sessionv1.CreateSessionRequest{UserId: user, Title: "load"})
		if err != nil {
			return "", "", fmt.Errorf("CreateSession: %w", err)
		}
		return user, resp.GetSession().GetId(), nil
	}

	res := &result{failures: map[string]int{}, example: map[string]string{}, perAddr: map[string]int{}}
	var mu sync.Mutex
	start := time.Now()
	measureFrom := start.Add(c.warmup)
	measureTo := measureFrom.Add(c.duration)
	var (
		cpuBefore             map[string]float64
		cmdsBefore            map[string]cmdStat
		callsBefore           map[string]int
		selfBefore            time.Duration
		busyBefore, totBefore uint64
	)
	beforeRead := make(chan struct{})
	go func() {
		defer close(beforeRead)
		time.Sleep(time.Until(measureFrom))
		m := cpuSeconds(tg.meters)
		sc := selfCPU()
		calls := counted.snapshot()
		cmds := redisCommands(ctx, tg.meters)
		b, tot := machineCPU()
		mu.Lock()
		cpuBefore, selfBefore, busyBefore, totBefore, callsBefore, cmdsBefore = m, sc, b, tot, calls, cmds
		mu.Unlock()
	}()
	profiled := make(chan error, 1)
	if c.profile == "" {
		profiled <- nil
	} else {
		go func() { profiled <- profile(ctx, c, tg, measureFrom) }()
	}
	var wg sync.WaitGroup
	errc := make(chan error, c.sessions)
	for i := range c.sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := i % len(clients)
			var user, session string
			for n := 0; ctx.Err() == nil; n++ {
				if session == "" || (c.turnsPer > 0 && n%c.turnsPer == 0) {
					var err error
					if user, session, err = newSession(i, n); err != nil {
						errc <- err
						return
					}
				}
				t0 := time.Now()
				if !t0.Before(measureTo) {
					return
				}
				text := cluster.LoadTurn(fmt.Sprintf("%d*%d+%d", i+1, n+2, n), fmt.Sprintf("L%s-%d-%d", run, i, n))
				code, msg := turn(ctx, clients[client], session, user, text)
				t1 := time.Now()
				// A turn counts when it started in the window; its latency is whole.
				if t0.Before(measureFrom) {
					continue
				}
				mu.Lock()
				if code == "" {
					res.latencies = append(res.latencies, t1.Sub(t0))
					res.perAddr[tg.orchestrators[client]]++
				} else {
					res.failures[code]++
					res.example[code] = msg
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return nil, err
	}
	res.elapsed = time.Since(measureFrom)
	<-beforeRead
	if err := <-profiled; err != nil {
		return nil, err
	}
	after := cpuSeconds(tg.meters)
	selfAfter := selfCPU()
	callsAfter := counted.snapshot()
	cmdsAfter := redisCommands(ctx, tg.meters)
	busyAfter, totAfter := machineCPU()
	mu.Lock()
	defer mu.Unlock()
	res.selfCPU = selfAfter - selfBefore
	if cmdsBefore != nil && cmdsAfter != nil {
		res.redisCommands = map[string]cmdStat{}
		for k, v := range cmdsAfter {
			if d := (cmdStat{v.calls - cmdsBefore[k].calls, v.usec - cmdsBefore[k].usec}); d.calls > 0 {
				res.redisCommands[k] = d
			}
		}
	}
	res.windowCalls = map[string]int{}
	for k, v := range callsAfter {
		res.windowCalls[k] = v - callsBefore[k]
	}
	if totAfter > totBefore {
		res.machine = float64(busyAfter-busyBefore) / float64(totAfter-totBefore)
	}
	res.cpu = map[string]float64{}
	for k, v := range after {
		if b, ok := cpuBefore[k]; ok { // a process not read both times has no figure
			res.cpu[k] = v - b
		}
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return res, nil
}

// turn runs one turn; it returns "" on success or the failure's code and message.
func turn(ctx context.Context, c orchestratorv1.OrchestratorServiceClient, session, user, text string) (string, string) {
	tctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	stream, err := c.RunTurn(tctx, &orchestratorv1.RunTurnRequest{SessionId: session, UserId: user, Text: text})
	if err != nil {
		return status.Code(err).String(), err.Error()
	}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return "NO_FINAL_EVENT", "the stream ended without TurnCompleted or TurnFailed"
		}
		if err != nil {
			st := status.Convert(err)
			return st.Code().String(), st.Message()
		}
		switch e := msg.GetEvent().GetEvent().(type) {
		case *orchestratorv1.TurnEvent_Completed:
			return "", ""
		case *orchestratorv1.TurnEvent_Failed:
			return "TurnFailed:" + e.Failed.GetCode(), e.Failed.GetMessage()
		}
	}
}

// cpuSeconds reads each process's CPU time from /proc; a process not running or not readable
// is left out.
func cpuSeconds(ms []meter) map[string]float64 {
	out := map[string]float64{}
	for _, m := range ms {
		pid := m.pid()
		if pid == 0 {
			continue
		}
		if d, err := cluster.ProcCPU(pid); err == nil {
			out[m.name] = d.Seconds()
		}
	}
	return out
}

// cmdStat is one Redis command's calls and the microseconds Redis spent in it.
type cmdStat struct{ calls, usec int64 }

// redisCommands returns INFO commandstats of the Redis of the run's own (commands run by
// scripts count under their own names as well as the EVALSHA that ran them), or nil when there
// is none (a shared Redis counts other work too) or it cannot be read.
func redisCommands(ctx context.Context, ms []meter) map[string]cmdStat {
	for _, m := range ms {
		if m.redisAddr == "" {
			continue
		}
		rdb := redis.NewClient(&redis.Options{Addr: m.redisAddr})
		defer func() { _ = rdb.Close() }()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		info, err := rdb.Info(cctx, "commandstats").Result()
		if err != nil {
			return nil
		}
		out := map[string]cmdStat{}
		for _, line := range strings.Split(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
			name, found := strings.CutPrefix(name, "cmdstat_")
			if !ok || !found {
				continue
			}
			var st cmdStat
			for _, kv := range strings.Split(rest, ",") {
				k, v, _ := strings.Cut(kv, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					st.calls = n
				case "usec":
					st.usec = n
				}
			}
			out[name] = st
		}
		return out
	}
	return nil
}

// profile takes the Go CPU profile of the process named by -profile over the measured window
// (from `from`, for -duration less a second so it ends inside the window) and writes it to
// -profile-out.
func profile(ctx context.Context, c config, tg target, from time.Time) error {
	var addr string
	for _, p := range tg.procs {
		if p.Name == c.profile {
			addr = p.PprofAddr
		}
	}
	if addr == "" {
		return fmt.Errorf("-profile %q: no such process with a profiler", c.profile)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(from)):
	}
	secs := max(1, int(c.duration.Seconds())-1)
	client := &http.Client{Timeout: time.Duration(secs+30) * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs))
	if err != nil {
		return fmt.Errorf("profile %s: %w", c.profile, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s %w", c.profile, resp.Status, err)
	}
	return os.WriteFile(c.profileOut, body, 0o644)
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func report(out io.Writer, c config, tg target, r *result) {
	lat := slices.Clone(r.latencies)
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	mode := c.mode
	if c.mode == "microservices" {
		backends := "shared Redis and NATS"
		if c.ownBackends {
			backends = "Redis and NATS of the run's own"
		}
		workers := "default extraction workers"
		if c.memWorkers > 0 {
			workers = fmt.Sprintf("%d extraction workers each", c.memWorkers)
		}
		mode = fmt.Sprintf("microservices, %d orchestrator(s), %d memory replica(s) (%s), %s", c.orchestrators, c.memories, workers, backends)
	}
	fmt.Fprintf(out, "mode: %s; %d concurrent sessions of %d turns; model delay %s; %d CPUs (GOMAXPROCS of the load generator %d)\n",
		mode, c.sessions, c.turnsPer, c.modelDelay, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	fmt.Fprintf(out, "turns: %d completed, %d failed in %s\n", len(lat), total(r.failures), r.elapsed.Round(time.Millisecond))
	if len(lat) > 0 {
		fmt.Fprintf(out, "throughput: %.1f turns/s\n", float64(len(lat))/r.elapsed.Seconds())
		fmt.Fprintf(out, "latency: p50 %s  p90 %s  p99 %s  mean %s  max %s\n",
			ms(percentile(lat, 50)), ms(percentile(lat, 90)), ms(percentile(lat, 99)), ms(sum/time.Duration(len(lat))), ms(lat[len(lat)-1]))
	}
	if len(tg.orchestrators) > 1 {
		var parts []string
		for _, a := range tg.orchestrators {
			parts = append(parts, fmt.Sprintf("%s %d", a, r.perAddr[a]))
		}
		fmt.Fprintf(out, "turns per orchestrator: %s\n", strings.Join(parts, ", "))
	}
	if len(r.cpu) > 0 {
		// Cores is a process's busy share of one core: near 1.0 a single-threaded server
		// (Redis) is saturated; a Go process can use every core.
		turns := float64(max(len(lat), 1))
		fmt.Fprintf(out, "CPU in the window by process (s, cores, ms per turn):\n")
		var hermes, backends float64
		for _, m := range tg.meters {
			v, ok := r.cpu[m.name]
			if !ok {
				fmt.Fprintf(out, "  %-16s not read\n", m.name)
				continue
			}
			note := ""
			if m.shared {
				note = "  (shared server: other work on the machine included)"
			}
			fmt.Fprintf(out, "  %-16s %6.1fs %5.2f cores %6.2f ms%s\n", m.name, v, v/r.elapsed.Seconds(), 1000*v/turns, note)
			if m.backend {
				backends += v
			} else {
				hermes += v
			}
		}
		fmt.Fprintf(out, "Hermes %.1fs = %.2f cores, %.2f ms per turn; Redis+NATS %.2f ms per turn; together %.2f ms per turn\n",
			hermes, hermes/r.elapsed.Seconds(), 1000*hermes/turns, 1000*backends/turns, 1000*(hermes+backends)/turns)
		if r.redisCommands != nil {
			names := slices.Collect(maps.Keys(r.redisCommands))
			slices.SortFunc(names, func(a, b string) int { return cmp.Compare(r.redisCommands[b].usec, r.redisCommands[a].usec) })
			var parts []string
			var calls int64
			for _, st := range r.redisCommands {
				calls += st.calls
			}
			for _, n := range names[:min(len(names), 10)] {
				st := r.redisCommands[n]
				parts = append(parts, fmt.Sprintf("%s %.1f (%.0f µs)", n, float64(st.calls)/turns, float64(st.usec)/turns))
			}
			fmt.Fprintf(out, "Redis commands per completed turn: %.1f, those run by scripts included; by command (calls, µs inside the command: wall time, which a preempted Redis inflates), most time first: %s\n", float64(calls)/turns, strings.Join(parts, ", "))
		}
	}
	fmt.Fprintf(out, "CPU of the load generator and scripted model: %.1fs = %.2f cores; machine busy %.0f%% of %d cores (other work on the machine included)\n",
		r.selfCPU.Seconds(), r.selfCPU.Seconds()/r.elapsed.Seconds(), 100*r.machine, runtime.NumCPU())
	if len(r.modelCalls) > 0 {
		fmt.Fprintf(out, "scripted model requests over the whole run (warm-up included): assistant %d, memory extraction %d, rolling summary %d\n",
			r.modelCalls["assistant"], r.modelCalls["extraction"], r.modelCalls["summary"])
		fmt.Fprintf(out, "in the measured window: assistant %d, memory extraction %d (%.2f per completed turn), rolling summary %d\n",
			r.windowCalls["assistant"], r.windowCalls["extraction"], float64(r.windowCalls["extraction"])/float64(max(len(lat), 1)), r.windowCalls["summary"])
	}
	for code, n := range r.failures {
		fmt.Fprintf(out, "failures %s: %d (for example: %s)\n", code, n, r.example[code])
	}
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
