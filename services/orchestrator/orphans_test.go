package orchestrator

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/lease"
	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/testenv"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

func runningTurn(id, sid string) *orchestratorv1.Turn {
	return &orchestratorv1.Turn{Id: id, SessionId: sid, UserId: "u", Text: "book a table", Status: orchestratorv1.TurnStatus_TURN_STATUS_RUNNING, StartedAt: timestamppb.New(time.UnixMilli(1000))}
}

// endInterrupted is a minimal end for InterruptTurn: the record INTERRUPTED, the request
// pending, an event.
func endInterrupted(rec *orchestratorv1.Turn) *Finish {
	rec.Status = orchestratorv1.TurnStatus_TURN_STATUS_INTERRUPTED
	return &Finish{
		Turn: rec, TTL: time.Hour, SetPending: true, KeepPending: true, MaxPending: 10,
		Pending: []Pending{{What: "unfinished: " + rec.GetText(), TurnID: rec.GetId()}},
		Event:   &eventsv1.TurnFinished{TurnId: rec.GetId(), SessionId: rec.GetSessionId(), Status: rec.GetStatus()},
	}
}

// testInterrupt: a running turn is orphaned exactly when its session's lease is not its own;
// InterruptTurn ends it once (of many concurrent callers, one), storing the record, the pending
// request and the event, and leaves live, finished and missing turns alone.
func testInterrupt(t *testing.T, s Store) {
	ctx := context.Background()
	leases := s.Leases()
	sid := "s-" + randomID(t)
	if err := s.PutTurn(ctx, runningTurn("t1", sid), time.Hour); err != nil {
		t.Fatal(err)
	}
	if c, err := leases.Acquire(ctx, sessionKey(sid), "t1", nil, time.Minute); err != nil || c.State != lease.Acquired {
		t.Fatalf("Acquire = %+v, %v", c, err)
	}
	orphans := func() []string {
		t.Helper()
		ids, err := s.OrphanedTurns(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if ids := orphans(); len(ids) != 0 {
		t.Errorf("OrphanedTurns with the lease held = %v, want none", ids)
	}
	if ok, err := s.InterruptTurn(ctx, "t1", endInterrupted); ok || err != nil {
		t.Errorf("InterruptTurn of a live turn = %v, %v; want false", ok, err)
	}
	// The orchestrator dies: its lease lapses, and a new turn of the session takes it.
	if _, err := leases.Release(ctx, sessionKey(sid), "t1"); err != nil {
		t.Fatal(err)
	}
	if ids := orphans(); len(ids) != 1 || ids[0] != "t1" {
		t.Errorf("OrphanedTurns after the lease lapsed = %v, want [t1]", ids)
	}
	if _, err := leases.Acquire(ctx, sessionKey(sid), "t2", nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if ids := orphans(); len(ids) != 1 || ids[0] != "t1" {
		t.Errorf("OrphanedTurns with the lease another turn's = %v, want [t1]", ids)
	}

	var wins atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ok, err := s.InterruptTurn(ctx, "t1", endInterrupted)
			if err != nil {
				t.Errorf("InterruptTurn: %v", err)
			}
			if ok {
				wins.Add(1)
			}
		})
	}
	wg.Wait()
	if n := wins.Load(); n != 1 {
		t.Errorf("%d concurrent InterruptTurn calls ended the turn, want 1", n)
	}
	got, err := s.GetTurn(ctx, "t1")
	if err != nil || got.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_INTERRUPTED {
		t.Errorf("GetTurn after the interrupt = %v, %v; want INTERRUPTED", got, err)
	}
	st, err := s.TaskState(ctx, sid)
	if err != nil || len(st.Pending) != 1 || st.Pending[0].TurnID != "t1" {
		t.Errorf("task state = %+v, %v; want t1's request pending once", st, err)
	}
	out, err := s.Outbox(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	var events int
	for _, ev := range out {
		if ev.GetTurnId() == "t1" {
			events++
			if ev.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_INTERRUPTED {
				t.Errorf("outbox event status %v", ev.GetStatus())
			}
		}
	}
	if events != 1 {
		t.Errorf("outbox holds %d events of t1, want 1", events)
	}
	if ids := orphans(); len(ids) != 0 {
		t.Errorf("OrphanedTurns after the interrupt = %v, want none", ids)
	}
	if ok, err := s.InterruptTurn(ctx, "t1", endInterrupted); ok || err != nil {
		t.Errorf("InterruptTurn of an interrupted turn = %v, %v; want false", ok, err)
	}

	// A finished turn is never interrupted; a missing one is not found.
	if err := s.FinishTurn(ctx, &Finish{Turn: finished("t3", sid, 5), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.InterruptTurn(ctx, "t3", endInterrupted); ok || err != nil {
		t.Errorf("InterruptTurn of a finished turn = %v, %v; want false", ok, err)
	}
	if _, err := s.InterruptTurn(ctx, "missing", endInterrupted); !errors.Is(err, ErrNotFound) {
		t.Errorf("InterruptTurn(missing) = %v, want ErrNotFound", err)
	}
}

// TestBoltRunningRecordIsDurable: the embedded store's RUNNING record is in the file, so the
// process after a crash finds the turn (its lease died with the old process) as orphaned.
func TestBoltRunningRecordIsDurable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "o.db")
	s, err := OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := s.PutTurn(ctx, runningTurn("R", "s"), time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Leases().Acquire(ctx, sessionKey("s"), "R", nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // the process ends without finishing the turn
		t.Fatal(err)
	}
	s, err = OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got, err := s.GetTurn(ctx, "R"); err != nil || got.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
		t.Fatalf("GetTurn after a restart = %v, %v; want the RUNNING record", got, err)
	}
	if ids, err := s.OrphanedTurns(ctx, 10); err != nil || len(ids) != 1 || ids[0] != "R" {
		t.Errorf("OrphanedTurns after a restart = %v, %v; want [R]", ids, err)
	}
}

// dyingStore is an orchestrator's store that stops answering once its process "dies": every
// write, lease change and sweep fails from then on, as if the process were gone, so the turn's
// record stays RUNNING and its lease lapses — what kill -9 leaves.
type dyingStore struct {
	Store
	dead atomic.Bool
}

var errDead = errors.New("this orchestrator is dead")

func (d *dyingStore) PutTurn(ctx context.Context, turn *orchestratorv1.Turn, ttl time.Duration) error {
	if d.dead.Load() {
		return errDead
	}
	return d.Store.PutTurn(ctx, turn, ttl)
}

func (d *dyingStore) FinishTurn(ctx context.Context, f *Finish) error {
	if d.dead.Load() {
		return errDead
	}
	return d.Store.FinishTurn(ctx, f)
}

func (d *dyingStore) OrphanedTurns(ctx context.Context, limit int) ([]string, error) {
	if d.dead.Load() {
		return nil, errDead
	}
	return d.Store.OrphanedTurns(ctx, limit)
}

func (d *dyingStore) InterruptTurn(ctx context.Context, id string, end func(*orchestratorv1.Turn) *Finish) (bool, error) {
	if d.dead.Load() {
		return false, errDead
	}
	return d.Store.InterruptTurn(ctx, id, end)
}

func (d *dyingStore) Outbox(ctx context.Context, limit int) ([]*eventsv1.TurnFinished, error) {
	if d.dead.Load() {
		return nil, errDead
	}
	return d.Store.Outbox(ctx, limit)
}

func (d *dyingStore) Leases() lease.Store { return dyingLeases{Store: d.Store.Leases(), dead: &d.dead} }

type dyingLeases struct {
	lease.Store
	dead *atomic.Bool
}

func (l dyingLeases) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if l.dead.Load() {
		return false, errDead
	}
	return l.Store.Renew(ctx, key, owner, ttl)
}

func (l dyingLeases) Release(ctx context.Context, key, owner string) (bool, error) {
	if l.dead.Load() {
		return false, errDead
	}
	return l.Store.Release(ctx, key, owner)
}

// replica is one orchestrator over a store, with the fakes of loop_test.go.
type replica struct {
	svc       *Service
	model     *fakeModel
	published chan *eventsv1.TurnFinished
	dead      *atomic.Bool
}

func newReplica(t *testing.T, store Store, sessions *fakeSession, reply func(ctx context.Context, req model.Request) (*model.Response, error)) *replica {
	t.Helper()
	tok, err := testTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{model: &fakeModel{reply: reply}, published: make(chan *eventsv1.TurnFinished, 16), dead: new(atomic.Bool)}
	tools := &fakeTools{exec: func(context.Context, *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
		return &toolsv1.ToolResult{Success: true, Output: `1`}, nil
	}}
	r.svc, err = NewService(Config{}, Options{
		Session: sessions, Tools: tools, Model: r.model, Tokenizer: tok, Store: store,
		Publish: func(_ context.Context, ev *eventsv1.TurnFinished, _ []byte) error {
			if r.dead.Load() {
				return errDead
			}
			r.published <- ev
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.svc.Close(time.Second) })
	return r
}

func answer(context.Context, model.Request) (*model.Response, error) {
	return &model.Response{Content: "done"}, nil
}

// hang is a model that answers only when the turn ends.
func hang(ctx context.Context, _ model.Request) (*model.Response, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// startDyingTurn starts a turn on r (whose model hangs) and returns its id once TurnStarted
// arrived, then kills r: its store and publisher stop answering, and the turn's stream ends.
func startDyingTurn(t *testing.T, r *replica, store *dyingStore, sid string) (turnID string, killed time.Time) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan string, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		st := &fakeStream{ctx: ctx, onSend: func(ev *orchestratorv1.TurnEvent) {
			if s := ev.GetStarted(); s != nil {
				started <- s.GetTurnId()
			}
		}}
		_ = r.svc.RunTurn(&orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "u", Text: "book a table", Options: &orchestratorv1.TurnOptions{SkipMemory: true}}, st)
	}()
	select {
	case turnID = <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("no TurnStarted")
	}
	store.dead.Store(true)
	r.dead.Store(true)
	killed = time.Now()
	cancel()
	<-done
	return turnID, killed
}

// checkInterrupted asserts what the surviving replica shows of a dead one's turn: GetTurn says
// INTERRUPTED within the session lease plus a few seconds of the death, a turn.finished with that
// status is published, and the session takes a new turn.
func checkInterrupted(t *testing.T, survivor *replica, sid, turnID string, killed time.Time) {
	t.Helper()
	ctx := context.Background()
	var rec *orchestratorv1.Turn
	testenv.WaitFor(t, sessionLease+15*time.Second, "the dead orchestrator's turn shows INTERRUPTED", func() bool {
		resp, err := survivor.svc.GetTurn(ctx, &orchestratorv1.GetTurnRequest{TurnId: turnID, UserId: "u"})
		if err != nil {
			t.Fatalf("GetTurn: %v", err)
		}
		rec = resp.GetTurn()
		return rec.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING
	})
	took := time.Since(killed)
	t.Logf("INTERRUPTED %s after the death (session lease %s)", took.Round(time.Millisecond), sessionLease)
	if rec.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_INTERRUPTED {
		t.Fatalf("status %v, want INTERRUPTED", rec.GetStatus())
	}
	if took > sessionLease+5*time.Second {
		t.Errorf("INTERRUPTED only %s after the death; want within the session lease (%s) plus 5s", took, sessionLease)
	}
	evs := rec.GetEvents()
	if len(evs) < 2 || evs[0].GetStarted() == nil || evs[len(evs)-1].GetFailed().GetCode() != "ABORTED" {
		t.Errorf("record's events %v: want TurnStarted first and an ABORTED TurnFailed last", evs)
	}
	if rec.GetFinishedAt() == nil {
		t.Error("the interrupted record has no finished_at")
	}
	select {
	case ev := <-survivor.published:
		if ev.GetTurnId() != turnID || ev.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_INTERRUPTED {
			t.Errorf("published %v, want turn.finished of %s with INTERRUPTED", ev, turnID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no turn.finished for the interrupted turn")
	}
	resp, err := survivor.svc.CancelTurn(ctx, &orchestratorv1.CancelTurnRequest{TurnId: turnID, UserId: "u"})
	if err != nil || resp.GetTurn().GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_INTERRUPTED {
		t.Errorf("CancelTurn = %v, %v; want the INTERRUPTED record at once", resp, err)
	}
	next := &fakeStream{ctx: ctx}
	if err := survivor.svc.RunTurn(&orchestratorv1.RunTurnRequest{SessionId: sid, UserId: "u", Text: "again", Options: &orchestratorv1.TurnOptions{SkipMemory: true}}, next); err != nil {
		t.Fatalf("RunTurn after the interrupt: %v", err)
	}
	if next.final().GetCompleted() == nil {
		t.Errorf("the session's next turn ended %v, want completed", next.final())
	}
}

// TestDeadOrchestratorRedis: two replicas share Redis; one dies mid-turn; the other ends the
// turn as INTERRUPTED.
func TestDeadOrchestratorRedis(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	openStore := func() *RedisStore {
		st := NewRedisStore(rdb, prefix, nil)
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	sessions := newFakeSession()
	dying := &dyingStore{Store: openStore()}
	a := newReplica(t, dying, sessions, hang)
	b := newReplica(t, openStore(), sessions, answer)
	sid := "s-" + randomID(t)
	turnID, killed := startDyingTurn(t, a, dying, sid)
	if got, err := b.svc.GetTurn(context.Background(), &orchestratorv1.GetTurnRequest{TurnId: turnID, UserId: "u"}); err != nil || got.GetTurn().GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
		t.Fatalf("right after the death GetTurn = %v, %v; want RUNNING (the lease has not lapsed)", got, err)
	}
	checkInterrupted(t, b, sid, turnID, killed)
}

// TestDeadOrchestratorBolt: the monolith dies mid-turn and starts again on its file; the turn's
// record was stored before TurnStarted, and the new process ends it as INTERRUPTED at start.
func TestDeadOrchestratorBolt(t *testing.T) {
	path := filepath.Join(t.TempDir(), "orchestrator.db")
	first, err := OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	sessions := newFakeSession()
	dying := &dyingStore{Store: first}
	a := newReplica(t, dying, sessions, hang)
	sid := "s-" + randomID(t)
	turnID, killed := startDyingTurn(t, a, dying, sid)
	a.svc.Close(time.Second)
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close() })
	b := newReplica(t, second, sessions, answer)
	checkInterrupted(t, b, sid, turnID, killed)
}

// BenchmarkPutRunning is the cost the RUNNING record adds before TurnStarted: one PutTurn (a
// group-committed bbolt write with its fsync, or one Redis MULTI).
func BenchmarkPutRunning(b *testing.B) {
	for name, open := range map[string]func(b *testing.B) Store{
		"bolt": func(b *testing.B) Store {
			s, err := OpenBoltStore(filepath.Join(b.TempDir(), "o.db"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		},
		"redis": func(b *testing.B) Store {
			rdb, prefix := testenv.Redis(b)
			s := NewRedisStore(rdb, prefix, nil)
			b.Cleanup(func() { _ = s.Close() })
			return s
		},
	} {
		b.Run(name, func(b *testing.B) {
			s := open(b)
			ctx := context.Background()
			rec := runningTurn("", "s")
			rec.Events = []*orchestratorv1.TurnEvent{{Seq: 1, Event: &orchestratorv1.TurnEvent_Started{Started: &orchestratorv1.TurnStarted{SessionId: "s", Model: "m"}}}}
			i := 0
			for b.Loop() {
				i++
				rec.Id = "bench-" + strconv.Itoa(i)
				if err := s.PutTurn(ctx, rec, time.Hour); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLeaseLostAfterInterrupt: a turn that was taken for dead (its lease lapsed and another
// turn took it) and ended as INTERRUPTED, but was alive after all, does not overwrite that end
// nor publish a second turn.finished when it stops.
func TestLeaseLostAfterInterrupt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLoop(t, Config{}, toolThenAnswer)
		leases := l.store.Leases()
		reaped := make(chan bool, 1)
		l.tools.exec = func(ctx context.Context, req *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
			turnID := strings.ToUpper(strings.SplitN(req.GetCallId(), "-", 2)[0])
			_, _ = leases.Release(context.Background(), sessionKey("s1"), turnID)
			_, _ = leases.Acquire(context.Background(), sessionKey("s1"), "next-turn", nil, time.Hour)
			ok, err := l.svc.reapTurn(context.Background(), turnID)
			if err != nil {
				t.Errorf("reapTurn: %v", err)
			}
			reaped <- ok
			<-ctx.Done()
			return nil, ctx.Err()
		}
		st := l.run(t, "s1", "slow", nil)
		if !<-reaped {
			t.Fatal("the turn whose lease another turn holds was not interrupted")
		}
		turnID := st.events[0].GetStarted().GetTurnId()
		rec, err := l.store.GetTurn(context.Background(), turnID)
		if err != nil || rec.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_INTERRUPTED {
			t.Errorf("record %v, %v; want the INTERRUPTED end kept", rec, err)
		}
		synctest.Wait()
		var statuses []orchestratorv1.TurnStatus
		for len(l.published) > 0 {
			statuses = append(statuses, (<-l.published).GetStatus())
		}
		if len(statuses) != 1 || statuses[0] != orchestratorv1.TurnStatus_TURN_STATUS_INTERRUPTED {
			t.Errorf("published statuses %v, want one INTERRUPTED", statuses)
		}
	})
}
