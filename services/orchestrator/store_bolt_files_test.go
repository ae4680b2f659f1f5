package orchestrator

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/hermes-agent/hermes/internal/boltstore"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// TestBoltFilesFindTurns: over three files, the calls that name only a turn find the file that
// has it, each session's records are in its own file, and the orphaned turns of every file are
// offered, the files taking turns.
func TestBoltFilesFindTurns(t *testing.T) {
	ctx := context.Background()
	s := testBoltFiles(t, 3)

	// Two sessions in each file (boltstore.FileOf), two running turns in each session.
	sids := []string{"s1", "s2", "s0", "s7", "s3", "s5"}
	var turns []string
	for i, sid := range sids {
		if got, want := boltstore.FileOf(sid, 3), i/2; got != want {
			t.Fatalf("session %s is in file %d, the test wants %d", sid, got, want)
		}
		for j := range 2 {
			id := fmt.Sprintf("T%d%d", i, j)
			turns = append(turns, id)
			if err := s.PutTurn(ctx, runningTurn(id, sid), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, st := range s.files {
		n := 0
		_ = st.db.View(func(tx *bolt.Tx) error { n = tx.Bucket(bucketRunning).Stats().KeyN; return nil })
		if n != 4 {
			t.Errorf("file %d holds %d running turns, want 4", i, n)
		}
	}

	// No lease is held: every turn is orphaned. With a limit of 3, one of each file.
	ids, err := s.OrphanedTurns(ctx, 3)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"T00", "T20", "T40"}, ids); diff != "" {
		t.Errorf("OrphanedTurns(3) (-want +got):\n%s", diff)
	}
	if ids, _ := s.OrphanedTurns(ctx, 100); len(ids) != 12 {
		t.Errorf("OrphanedTurns(100) = %d turns, want 12", len(ids))
	}

	for _, id := range turns {
		if ok, err := s.InterruptTurn(ctx, id, endInterrupted); !ok || err != nil {
			t.Fatalf("InterruptTurn(%s) = %v, %v", id, ok, err)
		}
		got, err := s.GetTurn(ctx, id)
		if err != nil || got.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_INTERRUPTED {
			t.Fatalf("GetTurn(%s) = %v, %v", id, got.GetStatus(), err)
		}
	}
	if ids, _ := s.OrphanedTurns(ctx, 100); len(ids) != 0 {
		t.Errorf("OrphanedTurns after the interrupts = %v", ids)
	}
	evs, err := s.Outbox(ctx, 100)
	if err != nil || len(evs) != 12 {
		t.Fatalf("Outbox = %d events, %v; want 12", len(evs), err)
	}
	for i, ev := range evs {
		if ev.GetTurnId() != turns[i] {
			t.Errorf("outbox event %d is %s, want %s", i, ev.GetTurnId(), turns[i])
		}
	}
	for _, id := range turns[4:] {
		if err := s.DeleteOutbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	evs, _ = s.Outbox(ctx, 100)
	var left []string
	for _, ev := range evs {
		left = append(left, ev.GetTurnId())
	}
	if diff := cmp.Diff(turns[:4], left); diff != "" {
		t.Errorf("outbox after deleting the events of files 1 and 2 (-want +got):\n%s", diff)
	}
	if _, err := s.GetTurn(ctx, "missing"); err == nil {
		t.Error("GetTurn of a turn no file has succeeded")
	}
}

// testBoltFiles opens the records over n new files, as the monolith keeps them when its
// sessions are spread over n files; closed at the test's end.
func testBoltFiles(t testing.TB, n int) *Files {
	t.Helper()
	var dbs []*bolt.DB
	var groups []*boltstore.Group
	for i := range n {
		db, err := boltstore.Open(filepath.Join(t.TempDir(), fmt.Sprintf("session-%d.db", i)), nil, []byte("sessions"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		dbs, groups = append(dbs, db), append(groups, boltstore.NewGroup(db))
	}
	s, err := OpenBoltFilesOn(dbs, groups)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
