package multiprocess

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/app/demo"
	"github.com/hermes-agent/hermes/app/demo/restaurant"
	"github.com/hermes-agent/hermes/internal/events"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/otlptest"
	"github.com/hermes-agent/hermes/internal/qdranttest"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	mcpgatewayv1 "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

// The NATS the tests share with other packages (CI starts it; scripts/ensure-backends.sh). The
// shared Redis is testenv.RedisURL.
const sharedNATS = "nats://127.0.0.1:4222"

// stackOptions tune a test's cluster.
type stackOptions struct {
	// dedicatedRedis runs a redis-server of the test's own (AOF, fsync always) that the test may
	// kill and restart; otherwise the shared Redis is used with a random key prefix.
	dedicatedRedis bool
	// natsURL replaces the shared NATS server.
	natsURL string
	// qdrantAddr replaces the Qdrant double (or HERMES_TEST_QDRANT_ADDR's Qdrant).
	qdrantAddr string
	// model tunes the scripted model.
	model cluster.ModelOptions
	// env adds settings for every process.
	env []string
	// orchestrators is the number of orchestrator replicas; 0 means 1.
	orchestrators int
}

// stack is a running multi-process Hermes with the test-side servers it talks to: the scripted
// model, the Qdrant double (or a real Qdrant, see qdranttest.Addr), the OTLP receiver, and
// clients of each service, each through its own process.
type stack struct {
	t       *testing.T
	c       *cluster.Cluster
	model   *scripted.Server
	otlp    *otlptest.Receiver
	redis   *cluster.Redis // dedicated Redis, nil on the shared one
	rdb     *redis.Client
	prefix  string
	ns      string
	natsURL string

	sessions     sessionv1.SessionServiceClient
	tools        toolsv1.ToolServiceClient
	gateway      mcpgatewayv1.MCPGatewayServiceClient
	memory       memoryv1.MemoryServiceClient
	orchestrator orchestratorv1.OrchestratorServiceClient
}

func randomID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// newStack starts the five processes and everything around them; cleanup kills every process,
// removes the test's Redis keys and NATS stream, and on failure logs every process's log.
func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	id := randomID()
	s := &stack{t: t, prefix: "hermes-mp-" + id + ":", ns: "mp" + id, natsURL: o.natsURL}
	if s.natsURL == "" {
		s.natsURL = sharedNATS
	}

	redisURL := testenv.RedisURL()
	if o.dedicatedRedis {
		// StartRedis has waited until it answers PING; the server goes away with the test, so
		// its keys need no cleanup.
		r, err := cluster.StartRedis(filepath.Join(dir, "redis"))
		if err != nil {
			t.Fatalf("dedicated redis-server: %v", err)
		}
		t.Cleanup(r.Close)
		s.redis, redisURL = r, r.URL()
		s.rdb = redis.NewClient(&redis.Options{Addr: r.Addr()})
		t.Cleanup(func() { _ = s.rdb.Close() })
	} else {
		s.rdb, s.prefix = testenv.Redis(t)
	}
	nc, js, err := events.Connect(s.natsURL, "hermes-multiprocess-test", nil)
	if err != nil {
		t.Fatalf("NATS at %s is not reachable (start it with scripts/ensure-backends.sh): %v", s.natsURL, err)
	}
	t.Cleanup(func() {
		_ = js.DeleteStream(context.Background(), events.NamespacedNames(s.ns).Stream)
		nc.Close()
	})

	s.model, err = scripted.New(cluster.Model(o.model))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.model.Close)
	s.otlp, err = otlptest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.otlp.Close)

	env := append([]string{
		// Faster than production so faults heal within a test: an unacknowledged turn.finished
		// is redelivered after 3 s, a dead MCP server is retried at least every second.
		"HERMES_MEMORY_CONSUMER_ACK_WAIT=3s",
		"HERMES_MEMORY_QDRANT_COLLECTION=hermes_" + s.ns,
		"HERMES_MCPGATEWAY_RECONNECT_MAX=1s",
		"HERMES_SHUTDOWN_TIMEOUT=5s",
		// The tests' MCP servers and webhooks listen on loopback; the operator allows it.
		"HERMES_EGRESS_ALLOW=127.0.0.1:*,localhost:*",
	}, o.env...)
	qaddr := o.qdrantAddr
	if qaddr == "" {
		qaddr = qdranttest.Addr(t)
	}
	s.c, err = cluster.Start(ctx, cluster.Options{
		Binary:        hermesBin,
		Dir:           dir,
		RedisURL:      redisURL,
		RedisPrefix:   s.prefix,
		NATSURL:       s.natsURL,
		NATSNamespace: s.ns,
		QdrantAddr:    qaddr,
		ModelBaseURL:  s.model.URL(),
		Model:         "scripted-multiprocess",
		OTLPEndpoint:  s.otlp.Endpoint(),
		Orchestrators: o.orchestrators,
		Env:           env,
	})
	if err != nil {
		t.Fatalf("starting five hermes processes: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("process logs:%s", s.c.Logs(12000))
			s.logLeases()
		}
		s.c.Close()
		for _, p := range s.c.Procs {
			if ok, err := p.Exited(); !ok {
				t.Errorf("%s is still running after Close (pid %d)", p.Name, p.Pid())
			} else if err != nil && !strings.Contains(err.Error(), "killed") {
				t.Logf("%s exited: %v", p.Name, err)
			}
		}
	})

	s.sessions = sessionv1.NewSessionServiceClient(s.conn("session"))
	s.tools = toolsv1.NewToolServiceClient(s.conn("tools"))
	s.gateway = mcpgatewayv1.NewMCPGatewayServiceClient(s.conn("mcpgateway"))
	s.memory = memoryv1.NewMemoryServiceClient(s.conn("memory"))
	// RunTurn is called as an outside client (grpcurl, an app) calls it: without internal/rpc's
	// transparent retries on UNAVAILABLE, so a fault reaches the caller as it happens. (A retried
	// RunTurn is a new turn: were a retry to follow a write whose acknowledgement was lost, the
	// user's message would be stored twice.)
	oc, err := grpc.NewClient(s.c.Addr("orchestrator"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = oc.Close() })
	s.orchestrator = orchestratorv1.NewOrchestratorServiceClient(oc)
	return s
}

// logLeases logs the orchestrator's session leases left in Redis (why a session's turns wait).
func (s *stack) logLeases() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	iter := s.rdb.Scan(ctx, 0, s.prefix+"orchestrator:lock:*", 100).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		s.t.Logf("session lease %s held by %q, expires in %s", k, s.rdb.Get(ctx, k).Val(), s.rdb.PTTL(ctx, k).Val())
	}
}

func (s *stack) conn(target string) *grpc.ClientConn {
	c, err := rpc.Dial(s.c.Addr(target))
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// addRestaurant starts the restaurant MCP server (on addr, "" for a free port) and adds it to
// the gateway through AddServer.
func (s *stack) addRestaurant(ctx context.Context, addr string) *restaurant.HTTPServer {
	s.t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	srv, err := restaurant.Listen(addr, nil)
	if err != nil {
		s.t.Fatal(err)
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := s.gateway.AddServer(actx, &mcpgatewayv1.AddServerRequest{
		Spec: &mcpgatewayv1.ServerSpec{
			Name: demo.MCPServerName, Prefix: demo.MCPServerName,
			Transport: &mcpgatewayv1.ServerSpec_Http{Http: &mcpgatewayv1.HTTPTransport{Url: srv.URL()}},
		},
		Wait: true,
	})
	if err != nil {
		srv.Close()
		s.t.Fatalf("AddServer through the mcpgateway process: %v", err)
	}
	if st := resp.GetServer(); st.GetState() != mcpgatewayv1.ServerState_SERVER_STATE_READY || st.GetToolCount() != 2 {
		srv.Close()
		s.t.Fatalf("restaurant MCP server: %s with %d tools (%s)", st.GetState(), st.GetToolCount(), st.GetLastError())
	}
	return srv
}

// createSession creates a session of user through the session process.
func (s *stack) createSession(ctx context.Context, user, title string) string {
	s.t.Helper()
	resp, err := s.sessions.CreateSession(ctx, &sessionv1.CreateSessionRequest{UserId: user, Title: title})
	if err != nil {
		s.t.Fatalf("CreateSession: %v", err)
	}
	return resp.GetSession().GetId()
}

// turnOutcome is what a RunTurn call came to, from the client's side.
type turnOutcome struct {
	session, user, text string
	started             time.Time
	elapsed             time.Duration

	turnID    string
	userSeq   int64  // acknowledged user message (TurnStarted), 0 when none
	answerSeq int64  // acknowledged assistant message (TurnCompleted), 0 when none
	answer    string // final text
	failCode  string // TurnFailed.code or the RPC's status code, "" when completed
	failMsg   string
	calls     []*orchestratorv1.ToolCallFinished
	recallErr string // MemoriesRecalled.error
}

// codeName spells a gRPC code name one way ("Unavailable" and "UNAVAILABLE" are UNAVAILABLE,
// "DeadlineExceeded" is DEADLINEEXCEEDED), so outcomes compare whatever spelling a layer used.
func codeName(s string) string { return strings.ToUpper(strings.ReplaceAll(s, "_", "")) }

func (o turnOutcome) ok() bool { return o.failCode == "" && o.answerSeq > 0 }

func (o turnOutcome) String() string {
	if o.ok() {
		return fmt.Sprintf("turn %s in %s: completed in %s", o.turnID, o.session, o.elapsed.Round(time.Millisecond))
	}
	return fmt.Sprintf("turn %s in %s: %s after %s: %s", o.turnID, o.session, o.failCode, o.elapsed.Round(time.Millisecond), o.failMsg)
}

// runTurn runs one turn through the orchestrator process and records its outcome; it never
// fails the test (fault tests judge outcomes afterwards).
func runTurn(ctx context.Context, c orchestratorv1.OrchestratorServiceClient, session, user, text string) turnOutcome {
	o := turnOutcome{session: session, user: user, text: text, started: time.Now()}
	defer func() { o.elapsed = time.Since(o.started) }()
	res, err := demo.RunTurn(ctx, c, &orchestratorv1.RunTurnRequest{SessionId: session, UserId: user, Text: text}, nil)
	if res != nil {
		for _, ev := range res.Events {
			if st := ev.GetStarted(); st != nil {
				o.turnID, o.userSeq = st.GetTurnId(), st.GetUserMessageSeq()
			}
			if m := ev.GetMemories(); m != nil && m.GetError() != "" {
				o.recallErr = m.GetError()
			}
		}
		o.calls = res.Results
		if res.Completed != nil {
			o.answerSeq, o.answer = res.Completed.GetAssistantMessageSeq(), res.Completed.GetText()
		}
		if res.Failed != nil {
			o.failCode, o.failMsg = codeName(res.Failed.GetCode()), res.Failed.GetMessage()
		}
	}
	if err != nil {
		st := status.Convert(err)
		o.failCode, o.failMsg = codeName(st.Code().String()), st.Message()
	}
	if o.failCode == "" && o.answerSeq == 0 {
		o.failCode, o.failMsg = "NO_ANSWER", "the turn completed without a stored assistant message"
	}
	o.elapsed = time.Since(o.started)
	return o
}

// load runs turns from several workers until stop is closed (or each worker ran max turns),
// and collects every outcome.
type load struct {
	mu       sync.Mutex
	outcomes []turnOutcome
	wg       sync.WaitGroup
	stop     chan struct{}
	stopOnce sync.Once
	done     chan struct{} // closed when every worker has returned
}

// startLoad starts workers; next returns the session, user and text of a worker's i-th turn
// (i from 0); it returns "" as text when the worker has no more turns. The workers are stopped
// and waited for when the test ends, also when it fails before finish (registered after the
// stack, so before the processes are stopped).
func startLoad(t *testing.T, ctx context.Context, c orchestratorv1.OrchestratorServiceClient, workers int, next func(worker, i int) (session, user, text string)) *load {
	l := &load{stop: make(chan struct{}), done: make(chan struct{})}
	t.Cleanup(func() { l.stopWorkers(); <-l.done })
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				session, user, text := next(w, i)
				if text == "" {
					return
				}
				tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
				o := runTurn(tctx, c, session, user, text)
				cancel()
				l.mu.Lock()
				l.outcomes = append(l.outcomes, o)
				l.mu.Unlock()
			}
		}()
	}
	go func() { l.wg.Wait(); close(l.done) }()
	return l
}

// completed counts completed turns so far.
func (l *load) completed() int { return l.count(turnOutcome.ok) }

// failedCount counts failed turns so far.
func (l *load) failedCount() int {
	return l.count(func(o turnOutcome) bool { return !o.ok() })
}

func (l *load) count(match func(turnOutcome) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, o := range l.outcomes {
		if match(o) {
			n++
		}
	}
	return n
}

func (l *load) stopWorkers() { l.stopOnce.Do(func() { close(l.stop) }) }

// waitCompleted waits until n turns have completed in total, or the timeout passes.
func (l *load) waitCompleted(t *testing.T, n int, timeout time.Duration) {
	t.Helper()
	completed := testenv.Poll(timeout, func() bool {
		if l.completed() >= n {
			return true
		}
		select {
		case <-l.done:
			if l.completed() < n {
				t.Fatalf("the load ended with %d of %d turns completed:\n%s", l.completed(), n, l.summary(20))
			}
		default:
		}
		return false
	})
	if !completed {
		t.Fatalf("only %d of %d turns completed within %s; outcomes:\n%s", l.completed(), n, timeout, l.summary(20))
	}
}

// finish stops the workers and returns every outcome.
func (l *load) finish() []turnOutcome {
	l.stopWorkers()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]turnOutcome(nil), l.outcomes...)
}

func (l *load) summary(max int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return summarize(l.outcomes, max)
}

func summarize(outs []turnOutcome, max int) string {
	var b strings.Builder
	for i, o := range outs {
		if i >= max {
			fmt.Fprintf(&b, "  … and %d more\n", len(outs)-max)
			break
		}
		fmt.Fprintf(&b, "  %s\n", o)
	}
	return b.String()
}

// waitHealth waits until the process of each target reports want for its service.
func (s *stack) waitHealth(ctx context.Context, want healthpb.HealthCheckResponse_ServingStatus, timeout time.Duration, targets ...string) {
	s.t.Helper()
	for _, target := range targets {
		p := s.c.Proc(target)
		if err := p.WaitHealth(ctx, want, timeout, cluster.ServiceName[target]); err != nil {
			s.t.Fatal(err)
		}
	}
}

// listMessages returns a session's whole log.
func (s *stack) listMessages(ctx context.Context, session, user string) ([]*sessionv1.Message, error) {
	var out []*sessionv1.Message
	token := ""
	for {
		resp, err := s.sessions.ListMessages(ctx, &sessionv1.ListMessagesRequest{SessionId: session, UserId: user, PageSize: 500, PageToken: token})
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetMessages()...)
		token = resp.GetNextPageToken()
		if token == "" {
			return out, nil
		}
	}
}

// streamCount returns how many messages the test's stream holds on a subject filter.
func streamCount(ctx context.Context, js jetstream.JetStream, stream, filter string) (uint64, error) {
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}
