package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/hermes-agent/hermes/internal/testenv"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

func randomID(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func storeBackends(t *testing.T) map[string]func(t *testing.T) Store {
	return map[string]func(t *testing.T) Store{
		"bolt": func(t *testing.T) Store {
			s, err := OpenBoltStore(filepath.Join(t.TempDir(), "orchestrator.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		"redis": func(t *testing.T) Store {
			rdb, prefix := testenv.Redis(t)
			return NewRedisStore(rdb, prefix)
		},
	}
}

// TestStoreConformance runs the same suite against every backend.
func TestStoreConformance(t *testing.T) {
	for name, open := range storeBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("task state", func(t *testing.T) { testTaskState(t, open(t)) })
			t.Run("turns", func(t *testing.T) { testTurns(t, open(t)) })
			t.Run("concurrent steps", func(t *testing.T) { testConcurrentSteps(t, open(t)) })
			t.Run("session lease", func(t *testing.T) { testSessionLease(t, open(t)) })
		})
	}
}

func step(i int) Step {
	return Step{Tool: "add_to_cart", Arguments: fmt.Sprintf(`{"sku":"A%d"}`, i), Result: "ok", TurnID: "t", CallID: fmt.Sprint(i), At: time.UnixMilli(int64(1_700_000_000_000 + i)).UTC()}
}

func testTaskState(t *testing.T, s Store) {
	ctx := context.Background()
	got, err := s.TaskState(ctx, "nobody")
	if err != nil || len(got.Done) != 0 || len(got.Pending) != 0 {
		t.Fatalf("empty session: %+v, %v", got, err)
	}
	if err := s.AddSteps(ctx, "s1", []Step{step(1), step(2)}, 3); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSteps(ctx, "s1", []Step{step(3), step(4)}, 3); err != nil {
		t.Fatal(err)
	}
	pending := []Pending{{What: "book a table", TurnID: "t9", At: time.UnixMilli(1_700_000_000_000).UTC()}}
	if err := s.SetPending(ctx, "s1", pending); err != nil {
		t.Fatal(err)
	}
	if err := s.AddSteps(ctx, "s2", []Step{step(9)}, 3); err != nil {
		t.Fatal(err)
	}
	got, err = s.TaskState(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := TaskState{Done: []Step{step(2), step(3), step(4)}, Pending: pending}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("task state (-want +got):\n%s", diff)
	}
	if err := s.SetPending(ctx, "s1", nil); err != nil {
		t.Fatal(err)
	}
	got, _ = s.TaskState(ctx, "s1")
	if len(got.Pending) != 0 || len(got.Done) != 3 {
		t.Errorf("after clearing pending: %+v", got)
	}
	if err := s.DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	got, _ = s.TaskState(ctx, "s1")
	if len(got.Done) != 0 {
		t.Errorf("after delete: %+v", got)
	}
	other, _ := s.TaskState(ctx, "s2")
	if diff := cmp.Diff([]Step{step(9)}, other.Done); diff != "" {
		t.Errorf("another session changed (-want +got):\n%s", diff)
	}
}

func testTurns(t *testing.T, s Store) {
	ctx := context.Background()
	if _, err := s.GetTurn(ctx, "missing"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetTurn(missing) = %v, want ErrNotFound", err)
	}
	turn := &orchestratorv1.Turn{Id: "t1", SessionId: "s", UserId: "u", Status: orchestratorv1.TurnStatus_TURN_STATUS_RUNNING, Text: "订位"}
	if err := s.PutTurn(ctx, turn, time.Hour); err != nil {
		t.Fatal(err)
	}
	turn.Status = orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED
	turn.Answer = "好的"
	if err := s.PutTurn(ctx, turn, time.Hour); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTurn(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(turn, got, protocmp.Transform()); diff != "" {
		t.Errorf("turn (-want +got):\n%s", diff)
	}
	if err := s.PutTurn(ctx, &orchestratorv1.Turn{Id: "short"}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := s.GetTurn(ctx, "short"); !errors.Is(err, ErrNotFound) {
		t.Errorf("expired turn: %v, want ErrNotFound", err)
	}
}

func testConcurrentSteps(t *testing.T, s Store) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.AddSteps(ctx, "c", []Step{step(i)}, 100); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, err := s.TaskState(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Done) != 20 {
		t.Errorf("%d steps after 20 concurrent appends, want 20", len(got.Done))
	}
}

func testSessionLease(t *testing.T, s Store) {
	ctx := context.Background()
	sid := randomID(t)
	if ok, _, err := s.LockSession(ctx, sid, "turn-a", time.Minute); err != nil || !ok {
		t.Fatalf("first lock: %v %v", ok, err)
	}
	if ok, holder, err := s.LockSession(ctx, sid, "turn-b", time.Minute); err != nil || ok || holder != "turn-a" {
		t.Fatalf("second turn got the lease: ok=%v holder=%q err=%v", ok, holder, err)
	}
	if ok, _, _ := s.LockSession(ctx, randomID(t), "turn-b", time.Minute); !ok {
		t.Error("another session's lease is blocked")
	}
	// The holder extends its own lease.
	if ok, _, err := s.LockSession(ctx, sid, "turn-a", time.Minute); err != nil || !ok {
		t.Fatalf("the holder could not extend its lease: %v %v", ok, err)
	}
	// Only the holder releases.
	if err := s.UnlockSession(ctx, sid, "turn-b"); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := s.LockSession(ctx, sid, "turn-b", time.Minute); ok {
		t.Error("a non-holder released the lease")
	}
	if err := s.UnlockSession(ctx, sid, "turn-a"); err != nil {
		t.Fatal(err)
	}
	if ok, _, _ := s.LockSession(ctx, sid, "turn-b", 50*time.Millisecond); !ok {
		t.Error("the lease was not released")
	}
	// An expired lease (its holder died) goes to the next turn.
	time.Sleep(120 * time.Millisecond)
	if ok, _, _ := s.LockSession(ctx, sid, "turn-c", time.Minute); !ok {
		t.Error("an expired lease still blocks the session")
	}
}
