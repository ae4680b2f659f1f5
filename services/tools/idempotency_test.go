package tools

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/testenv"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// paymentServer is a slow, non-reentrant webhook that counts how often it ran.
func paymentServer(t *testing.T, delay time.Duration) (*httptest.Server, *atomic.Int64) {
	var runs atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		n := runs.Add(1)
		time.Sleep(delay)
		fmt.Fprintf(w, `{"payment_id":"pay_%d"}`, n)
	}))
	t.Cleanup(srv.Close)
	return srv, &runs
}

func paySpec(url string) *toolsv1.ToolSpec {
	s := httpSpec("pay", url, `{"type":"object","properties":{"amount":{"type":"number"}},"required":["amount"]}`)
	s.Idempotent = true
	return s
}

// TestIdempotentConcurrentCalls sends 50 calls with one key at once and checks the tool ran
// once: against two replicas sharing Redis, and against the embedded store.
func TestIdempotentConcurrentCalls(t *testing.T) {
	setups := map[string]func(t *testing.T) []toolsv1.ToolServiceClient{
		"redis, two replicas": func(t *testing.T) []toolsv1.ToolServiceClient {
			rdb, prefix := testenv.Redis(t)
			a := serve(t, newTestService(t, NewRedisStore(rdb, prefix), Options{}))
			b := serve(t, newTestService(t, NewRedisStore(rdb, prefix), Options{}))
			return []toolsv1.ToolServiceClient{a, b}
		},
		"bolt": func(t *testing.T) []toolsv1.ToolServiceClient {
			c, _ := newClient(t, Options{})
			return []toolsv1.ToolServiceClient{c}
		},
	}
	for name, setup := range setups {
		t.Run(name, func(t *testing.T) {
			srv, runs := paymentServer(t, 200*time.Millisecond)
			clients := setup(t)
			mustRegister(t, clients[0], paySpec(srv.URL))

			const n = 50
			results := make([]*toolsv1.ToolResult, n)
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					results[i] = execute(t, clients[i%len(clients)], &toolsv1.ExecuteToolRequest{
						Name: "pay", Arguments: `{"amount": 12.5}`, IdempotencyKey: "order-42",
					})
				}()
			}
			close(start)
			wg.Wait()
			if got := runs.Load(); got != 1 {
				t.Fatalf("the tool ran %d times for one idempotency key, want 1", got)
			}
			fresh := 0
			for i, r := range results {
				if !r.GetSuccess() || r.GetOutput() != `{"payment_id":"pay_1"}` {
					t.Fatalf("call %d: %v", i, r)
				}
				if !r.GetReplayed() {
					fresh++
					if r.GetAttempts() != 1 {
						t.Errorf("the executing call reports %d attempts", r.GetAttempts())
					}
				} else if r.GetAttempts() != 0 {
					t.Errorf("a replayed call reports %d attempts", r.GetAttempts())
				}
			}
			if fresh != 1 {
				t.Errorf("%d calls ran the tool (replayed=false), want 1", fresh)
			}
			// Later calls with the key replay from the record on either replica.
			for _, c := range clients {
				r := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: `{"amount":12.5}`, IdempotencyKey: "order-42"})
				if !r.GetReplayed() || r.GetOutput() != `{"payment_id":"pay_1"}` {
					t.Errorf("later call: %v", r)
				}
			}
			if runs.Load() != 1 {
				t.Errorf("ran %d times", runs.Load())
			}
		})
	}
}

func TestIdempotencyRules(t *testing.T) {
	srv, runs := paymentServer(t, 0)
	c, svc := newClient(t, Options{})
	mustRegister(t, c, paySpec(srv.URL))

	first := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: `{"amount":10}`, IdempotencyKey: "k"})
	if !first.GetSuccess() || first.GetReplayed() {
		t.Fatalf("first call %v", first)
	}
	// The same key with other arguments is refused, not replayed.
	other := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: `{"amount":99}`, IdempotencyKey: "k"})
	if other.GetSuccess() || other.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_VALIDATION || !strings.Contains(other.GetError().GetMessage(), "different arguments") {
		t.Errorf("other arguments: %v", other)
	}
	// Key order and spacing do not make arguments different.
	same := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: ` { "amount" : 10 } `, IdempotencyKey: "k"})
	if !same.GetReplayed() {
		t.Errorf("equivalent arguments were not replayed: %v", same)
	}
	// A new key runs again; no key runs every time.
	execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: `{"amount":10}`, IdempotencyKey: "k2"})
	execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: `{"amount":10}`})
	execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: `{"amount":10}`})
	if runs.Load() != 4 {
		t.Errorf("runs %d, want 4", runs.Load())
	}

	// A tool not declared idempotent ignores the key.
	np := paySpec(srv.URL)
	np.Name, np.Idempotent = "pay_plain", false
	mustRegister(t, c, np)
	for range 2 {
		if r := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay_plain", Arguments: `{"amount":1}`, IdempotencyKey: "k"}); r.GetReplayed() {
			t.Error("a non-idempotent tool was replayed")
		}
	}
	if runs.Load() != 6 {
		t.Errorf("runs %d, want 6", runs.Load())
	}

	// A key is the user's: another user's call with the same key and arguments runs the tool
	// (it is not handed the first user's result), and each user's repeat is replayed.
	for _, user := range []string{"alice", "bob", "alice", "bob"} {
		execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: `{"amount":10}`, IdempotencyKey: "shared", UserId: user})
	}
	if runs.Load() != 8 {
		t.Errorf("runs %d after two users' calls with one key, want 8 (one per user)", runs.Load())
	}
	if n := svc.idem.pending(); n != 0 {
		t.Errorf("%d wake-up entries left behind", n)
	}
}

// TestIdempotencyNotRecordedOnTimeout: a call that timed out may not have finished, so its key
// is released and the next call with it runs the tool again (HTTP tools get the key as the
// Idempotency-Key header, so the endpoint can tell).
func TestIdempotencyNotRecordedOnTimeout(t *testing.T) {
	var runs atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		if runs.Add(1) == 1 {
			<-r.Context().Done()
			return
		}
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer srv.Close()
	c, _ := newClient(t, Options{})
	spec := paySpec(srv.URL)
	spec.Timeout = dur(200 * time.Millisecond)
	mustRegister(t, c, spec)
	r1 := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: `{"amount":1}`, IdempotencyKey: "k"})
	if r1.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_TIMEOUT {
		t.Fatalf("first call %v", r1)
	}
	r2 := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: `{"amount":1}`, IdempotencyKey: "k"})
	if !r2.GetSuccess() || r2.GetReplayed() {
		t.Fatalf("second call %v", r2)
	}
	r3 := execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: `{"amount":1}`, IdempotencyKey: "k"})
	if !r3.GetReplayed() || runs.Load() != 2 {
		t.Errorf("third call replayed=%v runs=%d", r3.GetReplayed(), runs.Load())
	}
}

// TestIdempotencyWaiterTimesOut: a call that waits for another call holding the key gives up
// at its own deadline with a timeout result that says what to do.
func TestIdempotencyWaiterTimesOut(t *testing.T) {
	srv, runs := paymentServer(t, 3*time.Second)
	c, _ := newClient(t, Options{})
	slow := paySpec(srv.URL)
	slow.Timeout = dur(8 * time.Second)
	mustRegister(t, c, slow)
	done := make(chan *toolsv1.ToolResult)
	go func() {
		done <- execute(t, c, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: `{"amount":1}`, IdempotencyKey: "k"})
	}()
	testenv.WaitFor(t, 5*time.Second, "the first call to start", func() bool { return runs.Load() == 1 })
	// The second call's budget is the caller's 1 s deadline (room for a loaded machine: the
	// answer must come back before the deadline, as a result).
	ctx := ctxTimeout(t, time.Second)
	resp, err := c.ExecuteTool(ctx, &toolsv1.ExecuteToolRequest{Name: "pay", Arguments: `{"amount":1}`, IdempotencyKey: "k"})
	if err != nil {
		t.Fatalf("waiting call: %v", err)
	}
	if r := resp.GetResult(); r.GetError().GetCode() != toolsv1.ErrorCode_ERROR_CODE_TIMEOUT || !strings.Contains(r.GetError().GetMessage(), "still running") {
		t.Errorf("waiting call: %v", r)
	}
	if r := <-done; !r.GetSuccess() {
		t.Errorf("first call: %v", r)
	}
	if runs.Load() != 1 {
		t.Errorf("runs %d", runs.Load())
	}
}
