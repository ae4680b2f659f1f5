package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/quota"
	"github.com/hermes-agent/hermes/internal/rpc"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/test/hermestest"
)

const (
	floodKey = "sk-flood-0123456789abcdef"
	quietKey = "sk-quiet-0123456789abcdef"
	// floodTurns is how many turns the flooding user keeps running (issue 24: 40).
	floodTurns = 40
	// modelLatency stands for a real model's answer time.
	modelLatency = 50 * time.Millisecond
)

// fairnessStack is a monolith with user keys for the flooding and the quiet user.
type fairnessStack struct {
	orch     orchestratorv1.OrchestratorServiceClient
	sessions sessionv1.SessionServiceClient
}

func startFairness(tb testing.TB, q quota.Config) *fairnessStack {
	tb.Helper()
	m, err := scripted.New(func(scripted.Request) scripted.Reply {
		time.Sleep(modelLatency)
		return scripted.Text("done")
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(m.Close)
	dir := tb.TempDir()
	keys := filepath.Join(dir, "keys.yaml")
	if err := os.WriteFile(keys, []byte(floodKey+": flood\n"+quietKey+": quiet\n"), 0o600); err != nil {
		tb.Fatal(err)
	}
	cfg := hermestest.Config(tb)
	cfg.DataDir = dir
	cfg.ModelBaseURL, cfg.Model = m.URL(), "scripted"
	cfg.Memory.ConsumerEnabled = false
	cfg.AuthFile = keys
	cfg.Quota = q
	a := hermestest.StartApp(tb, cfg, nil)
	conn, err := rpc.Dial(a.Addr())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return &fairnessStack{orch: orchestratorv1.NewOrchestratorServiceClient(conn), sessions: sessionv1.NewSessionServiceClient(conn)}
}

func withKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

func (s *fairnessStack) session(tb testing.TB, key string) string {
	tb.Helper()
	r, err := s.sessions.CreateSession(withKey(context.Background(), key), &sessionv1.CreateSessionRequest{})
	if err != nil {
		tb.Fatal(err)
	}
	return r.GetSession().GetId()
}

// turn runs one turn to its end.
func (s *fairnessStack) turn(ctx context.Context, key, session string) error {
	st, err := s.orch.RunTurn(withKey(ctx, key), &orchestratorv1.RunTurnRequest{SessionId: session, Text: "hi"})
	if err != nil {
		return err
	}
	for {
		if _, err := st.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

// quietP50 is the median of n turns of the quiet user, one after the other.
func (s *fairnessStack) quietP50(tb testing.TB, session string, n int) time.Duration {
	tb.Helper()
	took := make([]time.Duration, n)
	for i := range took {
		start := time.Now()
		if err := s.turn(context.Background(), quietKey, session); err != nil {
			tb.Fatalf("quiet turn %d: %v", i, err)
		}
		took[i] = time.Since(start)
	}
	slices.Sort(took)
	return took[n/2]
}

// flood runs floodTurns turns of the flooding user at once, each on its own session, starting
// the next as one ends or is refused (after a short pause: an aggressive client that does not
// wait out Retry-After), until stop. It returns the turns done and refused.
func (s *fairnessStack) flood(tb testing.TB, stop <-chan struct{}) (wait func() (done, refused int64)) {
	tb.Helper()
	var ok, no atomic.Int64
	var other atomic.Value
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	for range floodTurns {
		id := s.session(tb, floodKey)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				switch err := s.turn(ctx, floodKey, id); status.Code(err) {
				case codes.OK:
					ok.Add(1)
				case codes.ResourceExhausted:
					no.Add(1)
					select {
					case <-stop:
					case <-time.After(20 * time.Millisecond):
					}
				case codes.Canceled:
				default:
					other.Store(err)
				}
			}
		})
	}
	return func() (int64, int64) {
		<-stop
		cancel()
		wg.Wait()
		if err, _ := other.Load().(error); err != nil {
			tb.Errorf("a flood turn failed otherwise than refused: %v", err)
		}
		return ok.Load(), no.Load()
	}
}

// measureFairness returns the quiet user's p50 alone and during the flood, and the flood's
// turns done and refused.
func measureFairness(tb testing.TB, q quota.Config, n int) (quiet, flooded time.Duration, done, refused int64) {
	s := startFairness(tb, q)
	id := s.session(tb, quietKey)
	// Warm up: the first turns pay for connections and caches.
	s.quietP50(tb, id, 3)
	quiet = s.quietP50(tb, id, n)
	stop := make(chan struct{})
	wait := s.flood(tb, stop)
	time.Sleep(500 * time.Millisecond) // let the flood build up before measuring
	flooded = s.quietP50(tb, id, n)
	close(stop)
	done, refused = wait()
	return quiet, flooded, done, refused
}

// TestFairnessUnderFlood: with the default turns at once, one user's flood of 40 turns at once is
// refused (RESOURCE_EXHAUSTED) beyond the user's turns at once, and another user's turns keep
// their pace. The figures are logged; the bound checked here is loose, for a loaded machine, and
// off under the race detector (issue 24's goal, 1.5×, is measured by BenchmarkFairness).
func TestFairnessUnderFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("timing test")
	}
	// Turns at once only: the turns a minute would end the flood within a second or two.
	q := quota.Config{Limits: quota.Limits{ConcurrentTurns: quota.DefaultConcurrentTurns}, TurnSlots: quota.DefaultTurnSlots}
	quiet, flooded, done, refused := measureFairness(t, q, 9)
	t.Logf("quiet p50 %v, under a flood of %d turns %v (%.2f×); flood: %d turns done, %d refused", quiet, floodTurns, flooded, float64(flooded)/float64(quiet), done, refused)
	if refused == 0 {
		t.Error("the flood was never refused")
	}
	if !raceEnabled && flooded > 4*quiet {
		t.Errorf("the quiet user's p50 went from %v to %v under the flood", quiet, flooded)
	}
}

// BenchmarkFairness reports the quiet user's p50 alone and under a flood: without quotas, with the
// default turns at once alone, and with every default quota:
//
//	go test ./test/e2e/ -run '^$' -bench Fairness -benchtime 1x
func BenchmarkFairness(b *testing.B) {
	def := hermestest.Config(b).Quota
	for _, c := range []struct {
		name string
		q    quota.Config
	}{
		{"no-quotas", quota.Config{}},
		// 4 turns of the process at once, no cap per user: the flood's 40 wait in the fair queue.
		{"fair-queue-4-slots", quota.Config{TurnSlots: 4}},
		{"turns-at-once-only", quota.Config{Limits: quota.Limits{ConcurrentTurns: def.ConcurrentTurns}, TurnSlots: def.TurnSlots}},
		{"default-quotas", def},
	} {
		b.Run(c.name, func(b *testing.B) {
			for range b.N {
				quiet, flooded, done, refused := measureFairness(b, c.q, 21)
				b.ReportMetric(float64(quiet.Microseconds())/1000, "quiet-p50-ms")
				b.ReportMetric(float64(flooded.Microseconds())/1000, "flooded-p50-ms")
				b.ReportMetric(float64(flooded)/float64(quiet), "ratio")
				b.ReportMetric(float64(done), "flood-done")
				b.ReportMetric(float64(refused), "flood-refused")
				fmt.Fprintf(os.Stderr, "%s: quiet p50 %v, flooded p50 %v (%.2f×), flood %d done, %d refused\n", c.name, quiet, flooded, float64(flooded)/float64(quiet), done, refused)
			}
		})
	}
}
