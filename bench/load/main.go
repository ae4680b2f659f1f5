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
//
// or measures a running deployment: -mode=external -addr=host:7070[,host2:7070] (sessions are
// spread over the addresses; -session-addr is the session service, default the first address).
// In external mode no model is started: the deployment's own model answers, and it must follow
// the load turn's script (cluster.Model) for turns to complete as described.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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
	flag.IntVar(&c.orchestrators, "orchestrators", 1, "orchestrator processes in microservices mode; sessions are spread over them")
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
	// procs are the processes started, for their CPU time.
	procs []*cluster.Process
}

// run starts what the mode needs, drives the load, prints the report and returns the figures.
func run(ctx context.Context, c config, out io.Writer) (*result, error) {
	if c.sessions < 1 || c.orchestrators < 1 || c.duration <= 0 {
		return nil, errors.New("-sessions, -orchestrators and -duration must be positive")
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
			if c.orchestrators != 1 {
				return nil, errors.New("-orchestrators applies to microservices mode; monolithic mode is one process")
			}
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
		case "microservices":
			cl, cleanup, err := startCluster(ctx, c, bin, dir, model.URL())
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

// startCluster starts the five processes (and the Qdrant double unless -qdrant-addr is set).
func startCluster(ctx context.Context, c config, bin, dir, modelURL string) (*cluster.Cluster, func(), error) {
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
			return nil, nil, err
		}
		closers = append(closers, d.Close)
		qaddr = d.Addr()
	}
	prefix := "hermes-load-" + id + ":"
	cl, err := cluster.Start(ctx, cluster.Options{
		Binary: bin, Dir: dir,
		RedisURL: c.redisURL, RedisPrefix: prefix,
		NATSURL: c.natsURL, NATSNamespace: "load" + id,
		QdrantAddr:   qaddr,
		ModelBaseURL: modelURL, Model: "scripted-load",
		Orchestrators: c.orchestrators,
		Env:           []string{"HERMES_MEMORY_QDRANT_COLLECTION=hermes_load_" + id},
	})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	closers = append(closers, cl.Close, func() { cleanupBackends(c, prefix, "load"+id) })
	return cl, cleanup, nil
}

// result is what the measured window produced.
type result struct {
	elapsed   time.Duration
	latencies []time.Duration
	failures  map[string]int
	example   map[string]string
	cpu       map[string]float64 // CPU seconds per process during the measured window
	selfCPU   time.Duration      // CPU of the load generator and scripted model in the window
	machine   float64            // busy fraction of the machine's cores in the window
	perAddr   map[string]int
	// modelCalls counts the scripted model's requests by kind over the whole run.
	modelCalls map[string]int
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
		selfBefore            time.Duration
		busyBefore, totBefore uint64
	)
	beforeRead := make(chan struct{})
	go func() {
		defer close(beforeRead)
		time.Sleep(time.Until(measureFrom))
		m := cpuSeconds(tg.procs)
		sc := selfCPU()
		b, tot := machineCPU()
		mu.Lock()
		cpuBefore, selfBefore, busyBefore, totBefore = m, sc, b, tot
		mu.Unlock()
	}()
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
	after := cpuSeconds(tg.procs)
	selfAfter := selfCPU()
	busyAfter, totAfter := machineCPU()
	mu.Lock()
	defer mu.Unlock()
	res.selfCPU = selfAfter - selfBefore
	if totAfter > totBefore {
		res.machine = float64(busyAfter-busyBefore) / float64(totAfter-totBefore)
	}
	res.cpu = map[string]float64{}
	for k, v := range after {
		if b, ok := cpuBefore[k]; ok { // a process whose /metrics was not read both times has no figure
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

// cpuSeconds reads process_cpu_seconds_total from each process's /metrics.
func cpuSeconds(procs []*cluster.Process) map[string]float64 {
	out := map[string]float64{}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, p := range procs {
		resp, err := client.Get("http://" + p.MetricsAddr + "/metrics")
		if err != nil {
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
				if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
					out[p.Name] = f
				}
			}
		}
	}
	return out
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
		mode = fmt.Sprintf("microservices, %d orchestrator(s)", c.orchestrators)
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
		var parts []string
		var all float64
		for _, p := range tg.procs {
			parts = append(parts, fmt.Sprintf("%s %.1fs", p.Name, r.cpu[p.Name]))
			all += r.cpu[p.Name]
		}
		fmt.Fprintf(out, "CPU in the window: %s; Hermes %.1fs = %.2f cores, %.2f ms per turn\n",
			strings.Join(parts, ", "), all, all/r.elapsed.Seconds(), 1000*all/float64(max(len(lat), 1)))
	}
	fmt.Fprintf(out, "CPU of the load generator and scripted model: %.1fs = %.2f cores; machine busy %.0f%% of %d cores (other work on the machine included)\n",
		r.selfCPU.Seconds(), r.selfCPU.Seconds()/r.elapsed.Seconds(), 100*r.machine, runtime.NumCPU())
	if len(r.modelCalls) > 0 {
		fmt.Fprintf(out, "scripted model requests over the whole run (warm-up included): assistant %d, memory extraction %d, rolling summary %d\n",
			r.modelCalls["assistant"], r.modelCalls["extraction"], r.modelCalls["summary"])
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
