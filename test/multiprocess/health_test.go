package multiprocess

import (
	"context"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/qdranttest"
	"github.com/hermes-agent/hermes/internal/testenv"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
	"github.com/hermes-agent/hermes/test/multiprocess/cluster"
)

// startNATS starts a dedicated nats-server process (cluster.NATS), stopped at the test's end.
func startNATS(t *testing.T, dir string) *cluster.NATS {
	t.Helper()
	n, err := cluster.StartNATS(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

// TestHealthFollowsNATS stops a dedicated NATS server: the memory service (whose extractor
// consumes turn.finished) reports NOT_SERVING, the others stay SERVING and turns still complete
// (the orchestrator keeps publishing turn.finished in the background); once NATS is back, memory
// reports SERVING by itself and the turns finished during the outage are extracted, each once.
// The Redis side of health (session, tools, memory, orchestrator NOT_SERVING while Redis is
// down) is checked under load in TestRedisRestartUnderLoad.
func TestHealthFollowsNATS(t *testing.T) {
	ctx := context.Background()
	nats := startNATS(t, filepath.Join(t.TempDir(), "nats"))
	s := newStack(t, stackOptions{natsURL: nats.URL()})
	run := randomID()
	turn := func(i int) (string, turnOutcome) {
		user := fmt.Sprintf("nats-%s-%d", run, i)
		sess := s.createSession(ctx, user, "health")
		return user, runTurn(ctx, s.orchestrator, sess, user, cluster.LoadTurn(fmt.Sprintf("%d+1", i), fmt.Sprintf("N%s%d", run, i)))
	}
	if _, o := turn(0); !o.ok() {
		t.Fatalf("turn before the outage: %s", o)
	}

	nats.Stop()
	downAt := time.Now()
	s.waitHealth(ctx, notServing, 15*time.Second, "memory")
	t.Logf("memory NOT_SERVING %s after NATS stopped", time.Since(downAt).Round(time.Millisecond))
	for _, target := range []string{"session", "tools", "mcpgateway", "orchestrator"} {
		if st, err := s.c.Proc(target).Health(ctx, cluster.ServiceName[target]); err != nil || st != serving {
			t.Errorf("%s is %s (%v) while NATS is down, want SERVING (it does not need NATS to serve)", target, st, err)
		}
	}
	var during []string
	outcomes := map[string]turnOutcome{}
	for i := 1; i <= 3; i++ {
		user, o := turn(i)
		if !o.ok() {
			t.Errorf("turn while NATS is down: %s", o)
		}
		during = append(during, user)
		outcomes[user] = o
	}

	if err := nats.Start(); err != nil {
		t.Fatal(err)
	}
	upAt := time.Now()
	s.waitHealth(ctx, serving, 20*time.Second, "memory")
	t.Logf("memory SERVING %s after NATS came back", time.Since(upAt).Round(time.Millisecond))

	// The turn.finished events of the outage reach the extractor once NATS is back.
	deadline := time.Now().Add(60 * time.Second)
	for _, user := range during {
		var resp *memoryv1.ListMemoriesResponse
		var err error
		extracted := testenv.Poll(time.Until(deadline), func() bool {
			resp, err = s.memory.ListMemories(ctx, &memoryv1.ListMemoriesRequest{UserId: user})
			return err == nil && len(resp.GetMemories()) == 1 && resp.GetMemories()[0].GetTurnId() == outcomes[user].turnID
		})
		if !extracted {
			t.Fatalf("the turn of %s finished during the NATS outage was not extracted exactly once after NATS came back: %v %v", user, resp.GetMemories(), err)
		}
	}
}

// tcpProxy forwards a fixed loopback port to a backend; cut closes the listener and every
// connection (the backend is unreachable: connections are refused), restore listens again on the
// same port. It stands between the memory process and the Qdrant double, which cannot be
// restarted on its port.
type tcpProxy struct {
	addr, backend string

	mu    sync.Mutex
	lis   net.Listener
	conns map[net.Conn]bool
}

func startProxy(t *testing.T, backend string) *tcpProxy {
	t.Helper()
	addr, err := cluster.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{addr: addr, backend: backend, conns: map[net.Conn]bool{}}
	if err := p.restore(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) restore() error {
	lis, err := net.Listen("tcp", p.addr)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.lis = lis
	p.mu.Unlock()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			b, err := net.Dial("tcp", p.backend)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[b] = true, true
			p.mu.Unlock()
			go func() { _, _ = io.Copy(b, c); _ = b.Close() }()
			go func() { _, _ = io.Copy(c, b); _ = c.Close() }()
		}
	}()
	return nil
}

func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lis != nil {
		_ = p.lis.Close()
		p.lis = nil
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// TestHealthFollowsQdrant cuts the memory process off from Qdrant (the semantic tier): memory
// reports NOT_SERVING while the others stay SERVING, turns still complete, and memory reports
// SERVING by itself once Qdrant is reachable again.
func TestHealthFollowsQdrant(t *testing.T) {
	ctx := context.Background()
	proxy := startProxy(t, qdranttest.Addr(t))
	s := newStack(t, stackOptions{qdrantAddr: proxy.addr})
	run := randomID()
	user := "qdrant-" + run
	sess := s.createSession(ctx, user, "health")

	proxy.cut()
	downAt := time.Now()
	s.waitHealth(ctx, notServing, 15*time.Second, "memory")
	t.Logf("memory NOT_SERVING %s after Qdrant became unreachable", time.Since(downAt).Round(time.Millisecond))
	for _, target := range []string{"session", "tools", "mcpgateway", "orchestrator"} {
		if st, err := s.c.Proc(target).Health(ctx, cluster.ServiceName[target]); err != nil || st != serving {
			t.Errorf("%s is %s (%v) while Qdrant is unreachable, want SERVING", target, st, err)
		}
	}
	if o := runTurn(ctx, s.orchestrator, sess, user, cluster.LoadTurn("1+1", "Q"+run)); !o.ok() {
		t.Errorf("turn while Qdrant is unreachable: %s", o)
	}

	if err := proxy.restore(); err != nil {
		t.Fatal(err)
	}
	upAt := time.Now()
	s.waitHealth(ctx, serving, 30*time.Second, "memory")
	t.Logf("memory SERVING %s after Qdrant was reachable again", time.Since(upAt).Round(time.Millisecond))
}
