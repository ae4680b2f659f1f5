package quota

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/testenv"
)

// stores are the backends the conformance suite runs against.
func stores(t *testing.T) map[string]Store {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	b, err := OpenBoltStore(filepath.Join(t.TempDir(), "quota.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return map[string]Store{"memory": newMemoryStore(), "bolt": b, "redis": NewRedisStore(rdb, prefix)}
}

func TestStore(t *testing.T) {
	ctx := context.Background()
	for name, s := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("take", func(t *testing.T) {
				// A burst of the rate, then a refusal that says to wait about one interval.
				for i := range 10 {
					if wait, err := s.Take(ctx, "take", 1, 10); err != nil || wait != 0 {
						t.Fatalf("take %d: wait %v, %v; want it allowed", i, wait, err)
					}
				}
				wait, err := s.Take(ctx, "take", 1, 10)
				if err != nil {
					t.Fatal(err)
				}
				if wait <= 0 || wait > 6*time.Second+100*time.Millisecond {
					t.Errorf("11th take of 10 a minute: wait %v, want (0, 6s]", wait)
				}
				// Another key has its own bucket; a cost larger than what is left is refused whole.
				if wait, _ := s.Take(ctx, "take2", 8, 10); wait != 0 {
					t.Errorf("8 of a fresh 10: wait %v", wait)
				}
				if wait, _ := s.Take(ctx, "take2", 3, 10); wait <= 0 {
					t.Error("3 more of 10 with 2 left was allowed")
				}
				if wait, _ := s.Take(ctx, "take2", 2, 10); wait != 0 {
					t.Errorf("the 2 left after a refusal: wait %v (a refusal must spend nothing)", wait)
				}
			})
			t.Run("slots", func(t *testing.T) {
				for _, h := range []string{"a", "b"} {
					if ok, err := s.Acquire(ctx, "slots", h, 2, time.Minute); err != nil || !ok {
						t.Fatalf("acquire %s: %v %v", h, ok, err)
					}
				}
				if ok, _ := s.Acquire(ctx, "slots", "c", 2, time.Minute); ok {
					t.Error("a third holder of 2 slots was admitted")
				}
				if ok, _ := s.Acquire(ctx, "slots", "a", 2, time.Minute); !ok {
					t.Error("a holder's renewal was refused")
				}
				if err := s.Release(ctx, "slots", "a"); err != nil {
					t.Fatal(err)
				}
				if ok, _ := s.Acquire(ctx, "slots", "c", 2, time.Minute); !ok {
					t.Error("a released slot was not given to the next holder")
				}
				// A holder that never releases loses its slot when its ttl passes.
				if ok, _ := s.Acquire(ctx, "short", "x", 1, 50*time.Millisecond); !ok {
					t.Fatal("acquire x")
				}
				testenv.WaitFor(t, 10*time.Second, "an expired slot to free", func() bool {
					ok, _ := s.Acquire(ctx, "short", "y", 1, time.Minute)
					return ok
				})
			})
			t.Run("counters", func(t *testing.T) {
				steps := []struct {
					n, limit int64
					want     int64
					ok       bool
				}{
					{2, 3, 2, true}, {1, 3, 3, true}, {1, 3, 3, false}, {0, 3, 3, true}, {-1, 3, 2, true}, {5, 0, 7, true}, {-10, 3, 0, true},
				}
				for i, st := range steps {
					v, ok, err := s.Add(ctx, "counter", st.n, st.limit, 0)
					if err != nil || v != st.want || ok != st.ok {
						t.Errorf("step %d: Add(%d, limit %d) = %d, %v, %v; want %d, %v", i, st.n, st.limit, v, ok, err, st.want, st.ok)
					}
				}
				if _, _, err := s.Add(ctx, "drained", 42, 0, 0); err != nil {
					t.Fatal(err)
				}
				if v, err := s.Drain(ctx, "drained"); err != nil || v != 42 {
					t.Errorf("Drain = %d, %v; want 42", v, err)
				}
				if v, err := s.Drain(ctx, "drained"); err != nil || v != 0 {
					t.Errorf("second Drain = %d, %v; want 0", v, err)
				}
				if _, _, err := s.Add(ctx, "expiring", 7, 0, 50*time.Millisecond); err != nil {
					t.Fatal(err)
				}
				testenv.WaitFor(t, 10*time.Second, "a counter to expire", func() bool {
					v, _, _ := s.Add(ctx, "expiring", 0, 0, 0)
					return v == 0
				})
			})
		})
	}
}

// TestBoltCountersSurviveRestart: the monolith's sessions and bytes outlive the process.
func TestBoltCountersSurviveRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "quota.db")
	b, err := OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Add(context.Background(), "sessions:alice", 3, 0, 0); err != nil {
		t.Fatal(err)
	}
	_ = b.Close()
	if b, err = OpenBoltStore(path); err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if v, _, _ := b.Add(context.Background(), "sessions:alice", 0, 0, 0); v != 3 {
		t.Errorf("after reopening: %d sessions, want 3", v)
	}
}

// TestBoltWriteBehind: the bolt store writes no commit per change; the changes reach the file
// together after the delay (without Close), a drained or zeroed counter leaves it, and in a
// shared file they are committed by the owner's next write.
func TestBoltWriteBehind(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "quota.db")
	stored := func(b *BoltStore) map[string]int64 {
		out := map[string]int64{}
		_ = b.db.View(func(tx *bolt.Tx) error {
			return tx.Bucket(countersBucket).ForEach(func(k, v []byte) error {
				out[string(k)] = decodeCounter(v, time.Now())
				return nil
			})
		})
		return out
	}
	keys := []string{"bytes:alice", "bytes:会话-二", "sessions:bob", "tokens:carol:2026-12-04"}

	// A delay longer than the test: nothing is written until Close.
	b, err := openBoltStore(path, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for i := range 200 {
		k := keys[i%len(keys)]
		if _, _, err := b.Add(ctx, k, int64(i%7+1), 0, 0); err != nil {
			t.Fatal(err)
		}
		want[k] += int64(i%7 + 1)
	}
	if got := stored(b); len(got) != 0 {
		t.Errorf("written before the delay: %v", got)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}

	// A short delay: the changes reach the file on their own; a drained counter and one
	// brought back to 0 are deleted from it.
	b, err = openBoltStore(path, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if got := stored(b); !cmp.Equal(got, want) {
		t.Errorf("after reopening: %v, want %v", got, want)
	}
	if _, err := b.Drain(ctx, keys[0]); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Add(ctx, keys[2], -want[keys[2]], 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Add(ctx, keys[1], 5, 0, 0); err != nil {
		t.Fatal(err)
	}
	delete(want, keys[0])
	delete(want, keys[2])
	want[keys[1]] += 5
	testenv.WaitFor(t, 30*time.Second, "the changes to be written", func() bool {
		return cmp.Equal(stored(b), want)
	})

	// In another store's file, through its group: not the owner's next commit, which comes
	// before the group's delay for later writes (an hour), but Close's.
	g := boltstore.NewGroupDelay(b.db, time.Hour)
	shared, err := OpenBoltStoreOn(b.db, g)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := shared.Add(ctx, keys[3], 2, 0, 0); err != nil {
		t.Fatal(err)
	}
	if got := stored(b)[keys[3]]; got != want[keys[3]] {
		t.Errorf("committed before the owner's write: %d", got)
	}
	if err := g.Update(func(*bolt.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if got := stored(b)[keys[3]]; got != want[keys[3]] {
		t.Errorf("committed by the owner's write, before the delay: %d", got)
	}
	if err := shared.Close(); err != nil {
		t.Fatal(err)
	}
	if got := stored(b)[keys[3]]; got != want[keys[3]]+2 {
		t.Errorf("after Close: %d, want %d", got, want[keys[3]]+2)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBoltFlushRunsAgain: the counters' write is a later write of the file's group, which runs
// again when a later write after it in the same commit fails and the transaction is rolled back
// (boltstore.Group.Later); the run that is committed still writes every changed counter.
func TestBoltFlushRunsAgain(t *testing.T) {
	ctx := context.Background()
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "shared.db"), nil, []byte("other"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := boltstore.NewGroupDelay(db, time.Hour)
	b, err := OpenBoltStoreOn(db, g)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Add(ctx, "sessions:alice", 3, 0, 0); err != nil {
		t.Fatal(err)
	}
	// Another user of the group whose later write fails: the commit is rolled back and the
	// counters' write runs again.
	g.Later(func(*bolt.Tx) error { return errors.New("refused") })
	g.Sync()
	got := map[string]int64{}
	_ = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(countersBucket).ForEach(func(k, v []byte) error {
			got[string(k)] = decodeCounter(v, time.Now())
			return nil
		})
	})
	if diff := cmp.Diff(map[string]int64{"sessions:alice": 3}, got); diff != "" {
		t.Errorf("counters in the file after the commit (-want +got):\n%s", diff)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}
