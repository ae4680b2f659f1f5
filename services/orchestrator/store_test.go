package orchestrator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/lease"
	"github.com/hermes-agent/hermes/internal/testenv"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
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
		// The monolith's: the buckets in another store's file, through its group commit.
		"bolt-shared": func(t *testing.T) Store {
			db, err := boltstore.Open(filepath.Join(t.TempDir(), "session.db"), nil, []byte("sessions"))
			if err != nil {
				t.Fatal(err)
			}
			s, err := OpenBoltStoreOn(db, boltstore.NewGroup(db))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = s.Close()
				_ = db.Close()
			})
			return s
		},
		// The monolith's with its sessions spread over three files.
		"bolt-files": func(t *testing.T) Store { return testBoltFiles(t, 3) },
		"redis": func(t *testing.T) Store {
			rdb, prefix := testenv.Redis(t)
			st := NewRedisStore(rdb, prefix, nil)
			t.Cleanup(func() { _ = st.Close() })
			return st
		},
	}
}

// TestStoreConformance runs the same suite against every backend.
func TestStoreConformance(t *testing.T) {
	for name, open := range storeBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("task state", func(t *testing.T) { testTaskState(t, open(t)) })
			t.Run("turns", func(t *testing.T) { testTurns(t, open(t)) })
			t.Run("list turns", func(t *testing.T) { testListTurns(t, open(t)) })
			t.Run("outbox", func(t *testing.T) { testOutbox(t, open(t)) })
			t.Run("cancel requests", func(t *testing.T) { testCancelRequests(t, open(t)) })
			t.Run("concurrent finishes", func(t *testing.T) { testConcurrentFinishes(t, open(t)) })
			t.Run("finish releases the lease", func(t *testing.T) { testFinishReleases(t, open(t)) })
			t.Run("interrupt orphaned turns", func(t *testing.T) { testInterrupt(t, open(t)) })
		})
	}
}

// testFinishReleases: FinishTurn with a lease releases it after its writes (a waiter woken by the
// release reads them), and releases it when the writes fail; another owner's lease is not touched.
func testFinishReleases(t *testing.T, s Store) {
	ctx := context.Background()
	leases := s.Leases()
	acquire := func(key, owner string) {
		t.Helper()
		c, err := leases.Acquire(ctx, key, owner, nil, time.Minute)
		if err != nil || c.State != lease.Acquired {
			t.Fatalf("Acquire(%s, %s) = %+v, %v; want acquired", key, owner, c, err)
		}
	}
	acquire("session:s1", "t1")
	woken, stop := leases.Watch("session:s1")
	defer stop()
	turn := finished("t1", "s1", 10)
	if err := s.FinishTurn(ctx, &Finish{Turn: turn, TTL: time.Hour, Steps: []Step{step(1)}, KeepSteps: 10, Lease: &HeldLease{Key: "session:s1", Owner: "t1"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-woken:
	case <-time.After(10 * time.Second):
		t.Fatal("the release did not wake the session's waiters")
	}
	st, err := s.TaskState(ctx, "s1")
	if err != nil || len(st.Done) != 1 {
		t.Fatalf("task state after the release = %+v, %v; want the finished turn's step", st, err)
	}
	acquire("session:s1", "t2")

	// A lease held by another owner stays held.
	if err := s.FinishTurn(ctx, &Finish{Turn: finished("t3", "s1", 20), TTL: time.Hour, Lease: &HeldLease{Key: "session:s1", Owner: "t3"}}); err != nil {
		t.Fatal(err)
	}
	if c, err := leases.Acquire(ctx, "session:s1", "t4", nil, time.Minute); err != nil || c.State != lease.Held || c.Owner != "t2" {
		t.Fatalf("another owner's lease after FinishTurn = %+v, %v; want held by t2", c, err)
	}

	// Writes that fail still release the lease.
	acquire("session:s2", "t5")
	bad := &Finish{Turn: finished("t5", "s2", 30), TTL: time.Hour, Lease: &HeldLease{Key: "session:s2", Owner: "t5"}}
	bad.Turn.Text = string([]byte{0xff}) // not UTF-8: the record does not encode
	if err := s.FinishTurn(ctx, bad); err == nil {
		t.Fatal("FinishTurn with a record that does not encode succeeded")
	}
	acquire("session:s2", "t6")
}

func step(i int) Step {
	return Step{Tool: "add_to_cart", Arguments: fmt.Sprintf(`{"sku":"A%d"}`, i), Result: "ok", TurnID: "t", CallID: fmt.Sprint(i), At: time.UnixMilli(int64(1_700_000_000_000 + i)).UTC()}
}

// finished is a finished turn of session sid started at ms.
func finished(id, sid string, ms int64) *orchestratorv1.Turn {
	return &orchestratorv1.Turn{
		Id: id, SessionId: sid, UserId: "u", Status: orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED, Text: "text of " + id,
		StartedAt: timestamppb.New(time.UnixMilli(ms)), FinishedAt: timestamppb.New(time.UnixMilli(ms + 5)),
	}
}

func testTaskState(t *testing.T, s Store) {
	ctx := context.Background()
	got, err := s.TaskState(ctx, "nobody")
	if err != nil || len(got.Done) != 0 || len(got.Pending) != 0 {
		t.Fatalf("empty session: %+v, %v", got, err)
	}
	p := func(what string) Pending {
		return Pending{What: what, TurnID: "t", At: time.UnixMilli(1_700_000_000_000).UTC()}
	}
	finishes := []*Finish{
		{Turn: finished("a", "s1", 1), Steps: []Step{step(1), step(2)}, KeepSteps: 3},
		{Turn: finished("b", "s1", 2), Steps: []Step{step(3), step(4)}, KeepSteps: 3, SetPending: true, Pending: []Pending{p("book a table")}},
		{Turn: finished("c", "s2", 3), Steps: []Step{step(9)}, KeepSteps: 3},
		// A failed turn keeps what was pending and adds to it, newest MaxPending kept.
		{Turn: finished("d", "s1", 4), SetPending: true, KeepPending: true, Pending: []Pending{p("pay"), p("ship")}, MaxPending: 2},
	}
	for _, f := range finishes {
		f.TTL = time.Hour
		if err := s.FinishTurn(ctx, f); err != nil {
			t.Fatal(err)
		}
	}
	got, err = s.TaskState(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	want := TaskState{Done: []Step{step(2), step(3), step(4)}, Pending: []Pending{p("pay"), p("ship")}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("task state (-want +got):\n%s", diff)
	}
	// A completed turn with nothing pending clears the list.
	if err := s.FinishTurn(ctx, &Finish{Turn: finished("e", "s1", 5), TTL: time.Hour, SetPending: true}); err != nil {
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
	turn := &orchestratorv1.Turn{Id: "t1", SessionId: "s", UserId: "u", Status: orchestratorv1.TurnStatus_TURN_STATUS_RUNNING, Text: "订位", StartedAt: timestamppb.New(time.UnixMilli(7))}
	if err := s.PutTurn(ctx, turn, time.Hour); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetTurn(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(turn, got, protocmp.Transform()); diff != "" {
		t.Errorf("running turn (-want +got):\n%s", diff)
	}
	turn.Status = orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED
	turn.Answer = "好的"
	if err := s.FinishTurn(ctx, &Finish{Turn: turn, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	got, err = s.GetTurn(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(turn, got, protocmp.Transform()); diff != "" {
		t.Errorf("finished turn (-want +got):\n%s", diff)
	}
	if err := s.FinishTurn(ctx, &Finish{Turn: finished("short", "s", 1), TTL: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "the record expires", func() bool {
		_, err := s.GetTurn(ctx, "short")
		return errors.Is(err, ErrNotFound)
	})
}

func testListTurns(t *testing.T, s Store) {
	ctx := context.Background()
	sid := randomID(t)
	var want []string
	for i := range 7 {
		id := fmt.Sprintf("T%02d", i)
		if err := s.FinishTurn(ctx, &Finish{Turn: finished(id, sid, int64(1000+i)), TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		want = append([]string{id}, want...)
	}
	// Another session's turn and a running turn of this one.
	if err := s.FinishTurn(ctx, &Finish{Turn: finished("other", randomID(t), 5000), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	running := &orchestratorv1.Turn{Id: "T99", SessionId: sid, UserId: "u", Status: orchestratorv1.TurnStatus_TURN_STATUS_RUNNING, StartedAt: timestamppb.New(time.UnixMilli(9000))}
	if err := s.PutTurn(ctx, running, time.Hour); err != nil {
		t.Fatal(err)
	}
	want = append([]string{"T99"}, want...)
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		page, next, err := s.ListTurns(ctx, sid, cursor, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 3 {
			t.Fatalf("page of %d turns, want at most 3", len(page))
		}
		for _, tr := range page {
			got = append(got, tr.GetId())
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("turns newest first (-want +got):\n%s", diff)
	}
	if _, _, err := s.ListTurns(ctx, sid, "not-a-cursor", 3); !errors.Is(err, ErrBadCursor) {
		t.Errorf("bad cursor: %v, want ErrBadCursor", err)
	}
	if page, next, err := s.ListTurns(ctx, randomID(t), "", 3); err != nil || len(page) != 0 || next != "" {
		t.Errorf("unknown session: %v %q %v", page, next, err)
	}
}

func testOutbox(t *testing.T, s Store) {
	ctx := context.Background()
	// Turns of three sessions (of three files, where the store spreads sessions over three).
	for i, sid := range []string{"s1", "s0", "s3"} {
		id := fmt.Sprintf("O%d", i)
		ev := &eventsv1.TurnFinished{TurnId: id, UserId: "u", SessionId: sid}
		if err := s.FinishTurn(ctx, &Finish{Turn: finished(id, sid, int64(i)), TTL: time.Hour, Event: ev}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.FinishTurn(ctx, &Finish{Turn: finished("no-event", "s", 9), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	ids := func() []string {
		evs, err := s.Outbox(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range evs {
			out = append(out, e.GetTurnId())
		}
		return out
	}
	if diff := cmp.Diff([]string{"O0", "O1", "O2"}, ids()); diff != "" {
		t.Errorf("outbox (-want +got):\n%s", diff)
	}
	if evs, _ := s.Outbox(ctx, 2); len(evs) != 2 {
		t.Errorf("Outbox(limit 2) returned %d", len(evs))
	}
	if err := s.DeleteOutbox(ctx, "O1"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"O0", "O2"}, ids()); diff != "" {
		t.Errorf("outbox after a delete (-want +got):\n%s", diff)
	}
}

func testCancelRequests(t *testing.T, s Store) {
	ctx := context.Background()
	if _, _, ok, err := s.CancelRequest(ctx, "t1"); ok || err != nil {
		t.Fatalf("no request yet: %v %v", ok, err)
	}
	ch, stop := s.Leases().Watch(cancelKey("t1"))
	defer stop()
	if err := s.RequestCancel(ctx, "t1", "user:u", "Ctrl-C", time.Minute); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("RequestCancel did not wake the turn's watcher")
	}
	by, reason, ok, err := s.CancelRequest(ctx, "t1")
	if err != nil || !ok || by != "user:u" || reason != "Ctrl-C" {
		t.Errorf("CancelRequest = %q %q %v %v", by, reason, ok, err)
	}
	if _, _, ok, _ := s.CancelRequest(ctx, "t2"); ok {
		t.Error("another turn is cancelled too")
	}
}

func testConcurrentFinishes(t *testing.T, s Store) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f := &Finish{Turn: finished(fmt.Sprint("c", i), "c", int64(i)), TTL: time.Hour, Steps: []Step{step(i)}, KeepSteps: 100}
			if err := s.FinishTurn(ctx, f); err != nil {
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
		t.Errorf("%d steps after 20 concurrent finishes, want 20", len(got.Done))
	}
}

// TestBoltOutboxDeletesWithTheNextWrite: acknowledging a published entry costs no commit of its
// own: the next finishing turn's commit deletes it, Outbox skips it meanwhile, and Close deletes
// what is left, so a restart republishes nothing.
func TestBoltOutboxDeletesWithTheNextWrite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "orchestrator.db")
	s, err := OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	finish := func(id string) {
		t.Helper()
		ev := &eventsv1.TurnFinished{TurnId: id, UserId: "u", SessionId: "s"}
		if err := s.FinishTurn(ctx, &Finish{Turn: finished(id, "s", 1), TTL: time.Hour, Event: ev}); err != nil {
			t.Fatal(err)
		}
	}
	inFile := func() []string {
		t.Helper()
		var ids []string
		err := s.db.View(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketOutbox).ForEach(func(k, _ []byte) error {
				ids = append(ids, string(k))
				return nil
			})
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	writes := func() int64 { st := s.db.Stats(); return st.TxStats.GetWrite() }

	finish("O0")
	before := writes()
	if err := s.DeleteOutbox(ctx, "O0"); err != nil {
		t.Fatal(err)
	}
	if got := writes() - before; got != 0 {
		t.Errorf("DeleteOutbox wrote %d times, want none", got)
	}
	if diff := cmp.Diff([]string{"O0"}, inFile()); diff != "" {
		t.Errorf("file after the acknowledgement (-want +got):\n%s", diff)
	}
	finish("O1")
	if diff := cmp.Diff([]string{"O1"}, inFile()); diff != "" {
		t.Errorf("file after the next turn's commit (-want +got):\n%s", diff)
	}
	if err := s.DeleteOutbox(ctx, "O1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = OpenBoltStore(path); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := inFile(); len(got) != 0 {
		t.Errorf("after Close and a restart the outbox holds %v, want nothing", got)
	}
}

// TestBoltTaskStepsAreKeys: a finishing turn writes its own steps, not the session's whole list;
// the oldest beyond the limit are deleted, trimSteps at a time, and never read; a task state in the old one-value format is read and
// moved into the step keys by the next write; DeleteSession leaves no step behind.
func TestBoltTaskStepsAreKeys(t *testing.T) {
	ctx := context.Background()
	s := testBoltStore(t)
	// The old format, written as a store before this change did.
	legacy, err := json.Marshal(TaskState{Done: []Step{step(1), step(2)}, Pending: []Pending{{What: "pay", TurnID: "t", At: time.UnixMilli(5).UTC()}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketTasks).Put([]byte("s1"), legacy) }); err != nil {
		t.Fatal(err)
	}
	if got, err := s.TaskState(ctx, "s1"); err != nil || len(got.Done) != 2 || len(got.Pending) != 1 {
		t.Fatalf("old format read as %+v, %v", got, err)
	}
	s.cacheTask("s1", TaskState{}, 0, false)
	stats := func() (steps int, meta int) {
		t.Helper()
		err := s.db.View(func(tx *bolt.Tx) error {
			steps = tx.Bucket(bucketTaskSteps).Stats().KeyN
			meta = len(tx.Bucket(bucketTasks).Get([]byte("s1")))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return steps, meta
	}
	const last = 3 + 2*trimSteps + 40
	trims := 0
	prev := 0
	for i := 3; i <= last; i++ {
		f := &Finish{Turn: finished(fmt.Sprintf("t%d", i), "s1", int64(i)), TTL: time.Hour, Steps: []Step{step(i)}, KeepSteps: 10}
		if err := s.FinishTurn(ctx, f); err != nil {
			t.Fatal(err)
		}
		if i%7 == 3 {
			s.cacheTask("s1", TaskState{}, 0, false) // the next read comes from the file
		}
		steps, meta := stats()
		if steps < min(i, 10) || steps > 10+trimSteps || meta > 200 {
			t.Fatalf("after step %d with 10 kept: %d step keys, a %d-byte session entry; want 10 to %d keys and a small entry", i, steps, meta, 10+trimSteps)
		}
		if steps < prev {
			trims++
		}
		prev = steps
		if i%5 != 0 {
			continue
		}
		got, err := s.TaskState(ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		var want []Step
		for j := max(i-9, 1); j <= i; j++ {
			want = append(want, step(j))
		}
		if diff := cmp.Diff(want, got.Done); diff != "" {
			t.Fatalf("after step %d, done steps read back (-want +got):\n%s", i, diff)
		}
	}
	if trims != 2 {
		t.Errorf("the old steps were deleted %d times in %d steps, want 2 (%d at a time)", trims, last, trimSteps)
	}
	s.cacheTask("s1", TaskState{}, 0, false)
	got, err := s.TaskState(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Pending) != 1 {
		t.Errorf("pending = %+v, want the old format's one item kept", got.Pending)
	}
	if err := s.DeleteSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if steps, meta := stats(); steps != 0 || meta != 0 {
		t.Errorf("after DeleteSession: %d step keys, %d-byte entry; want none", steps, meta)
	}
}

// TestBoltTaskStepsDamagedEntry: a session's task entry read back with numbers no write of this
// store makes (the first stored step far below the first kept one) costs a write no more than
// the step keys there are, and leaves the newest steps.
func TestBoltTaskStepsDamagedEntry(t *testing.T) {
	ctx := context.Background()
	s := testBoltStore(t)
	const first = uint64(1) << 62
	err := s.db.Update(func(tx *bolt.Tx) error {
		for i := range uint64(3) {
			raw, err := json.Marshal(step(int(i)))
			if err != nil {
				return err
			}
			if err := tx.Bucket(bucketTaskSteps).Put(stepKey("s1", first+i), raw); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketTasks).Put([]byte("s1"), []byte(fmt.Sprintf(`{"first":%d,"next":%d,"stored":0}`, first+1, first+3)))
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- s.FinishTurn(ctx, &Finish{Turn: finished("t1", "s1", 1), TTL: time.Hour, Steps: []Step{step(3)}, KeepSteps: 2})
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("FinishTurn did not return: the trimming counted through the damaged range")
	}
	s.cacheTask("s1", TaskState{}, 0, false)
	got, err := s.TaskState(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]Step{step(2), step(3)}, got.Done); diff != "" {
		t.Errorf("done steps (-want +got):\n%s", diff)
	}
}

// TestBoltTurnEndKeepsItsIndexPage: a turn's end does not rewrite the page of its session_turns
// entry, which its RUNNING record put already (bbolt copies a page on every Put, even of an
// unchanged key); an end without a RUNNING record before it still adds the entry.
func TestBoltTurnEndKeepsItsIndexPage(t *testing.T) {
	ctx := context.Background()
	s := testBoltStore(t)
	// Enough entries for session_turns to have pages of its own (a small bucket is inline).
	const n = 300
	for i := range n {
		rec := finished(fmt.Sprintf("T%04d", i), "s1", int64(1000+i))
		rec.Status = orchestratorv1.TurnStatus_TURN_STATUS_RUNNING
		if err := s.PutTurn(ctx, rec, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	root := func() uint64 {
		t.Helper()
		var pg uint64
		if err := s.db.View(func(tx *bolt.Tx) error {
			pg = uint64(tx.Bucket(bucketSessionTurns).Root())
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return pg
	}
	before := root()
	if before == 0 {
		t.Fatal("session_turns is inline; the test needs more entries")
	}
	if err := s.FinishTurn(ctx, &Finish{Turn: finished("T0150", "s1", 1150), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if got := root(); got != before {
		t.Errorf("session_turns' root page %d → %d: the end rewrote the bucket", before, got)
	}
	// An end with no RUNNING record before it.
	if err := s.FinishTurn(ctx, &Finish{Turn: finished("T9999", "s1", 9999), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	cursor := ""
	for {
		page, next, err := s.ListTurns(ctx, "s1", cursor, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range page {
			ids = append(ids, rec.GetId())
		}
		if next == "" {
			break
		}
		cursor = next
	}
	want := []string{"T9999"}
	for i := n - 1; i >= 0; i-- {
		want = append(want, fmt.Sprintf("T%04d", i))
	}
	if diff := cmp.Diff(want, ids); diff != "" {
		t.Errorf("ListTurns, newest first (-want +got):\n%s", diff)
	}
}

// testBoltStore opens a new bbolt store, closed at the test's end.
func testBoltStore(t testing.TB) *BoltStore {
	t.Helper()
	s, err := OpenBoltStore(filepath.Join(t.TempDir(), "orchestrator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
