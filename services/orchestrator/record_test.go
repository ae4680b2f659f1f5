package orchestrator

import (
	"context"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/boltstore"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// TestDeferredRecord: where the turn's records share the session's file (the monolith), the
// RUNNING record is written into the file's open transaction and put on disk by the next
// commit. A quick turn whose tools change nothing then makes one commit, its end's; a tool that
// may act on the world runs only once the record is on disk (committed at once for it); and
// the client hears of the turn (TurnStarted) only once the record is on disk, in every case.
func TestDeferredRecord(t *testing.T) {
	tests := []struct {
		name        string
		readOnly    bool
		wantCommits int64
	}{
		{"read-only tool", true, 1},
		{"tool that may act", false, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				db, err := boltstore.Open(filepath.Join(t.TempDir(), "session.db"), nil)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				// The group commits only when asked: no timer commits the record meanwhile.
				g := boltstore.NewGroupDelay(db, time.Hour)
				store, err := OpenBoltStoreOn(db, g)
				if err != nil {
					t.Fatal(err)
				}
				l := newLoopWith(t, Config{}, newFakeSession(), toolThenAnswer, func(Store) Store { return store })
				l.svc.deps.DeferSessionWrites = true
				t.Cleanup(g.Sync)

				// running counts the RUNNING records on disk (what a reader sees).
				running := func() int {
					n := 0
					_ = db.View(func(tx *bolt.Tx) error {
						n = tx.Bucket(bucketRunning).Stats().KeyN
						return nil
					})
					return n
				}
				spec := &toolsv1.ToolSpec{Name: "calc", Description: "calculator", InputSchema: `{"type":"object"}`,
					Executor: &toolsv1.ToolSpec_Http{Http: &toolsv1.HTTPExecutor{Url: "https://tools.example/calc"}}}
				if tc.readOnly {
					spec.Annotations = &toolsv1.ToolAnnotations{ReadOnlyHint: proto.Bool(true)}
				}
				var onDiskAtCall int
				tools := &rpcTools{fakeTools: fakeTools{exec: func(context.Context, *toolsv1.ExecuteToolRequest) (*toolsv1.ToolResult, error) {
					onDiskAtCall = running()
					return &toolsv1.ToolResult{Success: true, Output: `{"result":42}`}, nil
				}}, spec: spec}
				l.svc.deps.Tools = tools

				before, start := g.Commits(), time.Now()
				var startedSeen, startedOnDisk bool
				st := l.run(t, "s1", "what is 6*7?", func(ev *orchestratorv1.TurnEvent) {
					if s := ev.GetStarted(); s != nil {
						startedSeen = true
						_, err := store.GetTurn(context.Background(), s.GetTurnId())
						startedOnDisk = err == nil
					}
				})
				done := st.final().GetCompleted()
				if done == nil {
					t.Fatalf("final event %v", st.final())
				}
				// In the bubble's clock: nothing waited for the group's timer.
				if took := time.Since(start); took >= time.Hour {
					t.Errorf("the turn took %s: it waited for the group's timer", took)
				}
				if !startedSeen || !startedOnDisk {
					t.Errorf("TurnStarted sent %t, its record on disk then %t; want both", startedSeen, startedOnDisk)
				}
				wantAtCall := 1
				if tc.readOnly {
					wantAtCall = 0 // nothing to protect: the record waits for the end's commit
				}
				if onDiskAtCall != wantAtCall {
					t.Errorf("RUNNING records on disk when the tool ran: %d, want %d", onDiskAtCall, wantAtCall)
				}
				if got := g.Commits() - before; got != tc.wantCommits {
					t.Errorf("the turn made %d commits, want %d", got, tc.wantCommits)
				}
				rec, err := store.GetTurn(context.Background(), done.GetTurnId())
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff([]any{orchestratorv1.TurnStatus_TURN_STATUS_COMPLETED, 0}, []any{rec.GetStatus(), running()}); diff != "" {
					t.Errorf("after the turn, the record's status and the RUNNING records (-want +got):\n%s", diff)
				}
			})
		})
	}
}
