package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/lease"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// Files is the Store of a monolith whose sessions are spread over several files
// (session.OpenBoltFiles): a session's records are in the file of its messages, committed by
// that file's group with its session writes, so a turn still costs one commit. A call about a
// session goes to its file (boltstore.FileOf); a call that names only a turn goes to the file
// that has the turn; the outbox and the orphaned turns are every file's. The leases and the
// cancellation requests live in memory, once for all files.
type Files struct {
	files  []*BoltStore
	leases *lease.Memory
}

// OpenBoltFilesOn keeps the records of each session in the file of its messages: dbs[i] with
// its group groups[i], in the order the session files were opened. Close leaves the files open.
func OpenBoltFilesOn(dbs []*bolt.DB, groups []*boltstore.Group) (*Files, error) {
	f := &Files{leases: lease.NewMemory()}
	for i, db := range dbs {
		st, err := openBoltStoreOn(db, groups[i], f.leases)
		if err != nil {
			return nil, errors.Join(err, f.Close())
		}
		f.files = append(f.files, st)
	}
	return f, nil
}

func (f *Files) of(sid string) *BoltStore { return f.files[boltstore.FileOf(sid, len(f.files))] }

// ofTurn returns the file that has the turn: its record, its running entry or its outbox
// entry. A turn nobody has is looked for in the first file, which answers that it has none.
func (f *Files) ofTurn(id string) *BoltStore {
	key := []byte(id)
	for _, st := range f.files {
		found := false
		_ = st.db.View(func(tx *bolt.Tx) error {
			found = tx.Bucket(bucketTurns).Get(key) != nil || tx.Bucket(bucketRunning).Get(key) != nil || tx.Bucket(bucketOutbox).Get(key) != nil
			return nil
		})
		if found {
			return st
		}
	}
	return f.files[0]
}

// TaskState implements Store.
func (f *Files) TaskState(ctx context.Context, sid string) (TaskState, error) {
	return f.of(sid).TaskState(ctx, sid)
}

// PutTurn implements Store.
func (f *Files) PutTurn(ctx context.Context, turn *orchestratorv1.Turn, ttl time.Duration) error {
	return f.of(turn.GetSessionId()).PutTurn(ctx, turn, ttl)
}

// PutTurnDeferred is BoltStore's, in the file of the turn's session.
func (f *Files) PutTurnDeferred(turn *orchestratorv1.Turn, ttl time.Duration) (<-chan error, error) {
	return f.of(turn.GetSessionId()).PutTurnDeferred(turn, ttl)
}

// SyncTurns commits the file of the session.
func (f *Files) SyncTurns(sid string) { f.of(sid).SyncTurns(sid) }

// FinishTurn implements Store.
func (f *Files) FinishTurn(ctx context.Context, fin *Finish) error {
	return f.of(fin.Turn.GetSessionId()).FinishTurn(ctx, fin)
}

// GetTurn implements Store.
func (f *Files) GetTurn(ctx context.Context, id string) (*orchestratorv1.Turn, error) {
	return f.ofTurn(id).GetTurn(ctx, id)
}

// ListTurns implements Store.
func (f *Files) ListTurns(ctx context.Context, sid, cursor string, limit int) ([]*orchestratorv1.Turn, string, error) {
	return f.of(sid).ListTurns(ctx, sid, cursor, limit)
}

// DeleteSession implements Store.
func (f *Files) DeleteSession(ctx context.Context, sid string) error {
	return f.of(sid).DeleteSession(ctx, sid)
}

// Outbox implements Store: every file's oldest entries, merged in turn id order.
func (f *Files) Outbox(ctx context.Context, limit int) ([]*eventsv1.TurnFinished, error) {
	var all []*eventsv1.TurnFinished
	for _, st := range f.files {
		evs, err := st.Outbox(ctx, limit)
		if err != nil {
			return nil, err
		}
		all = append(all, evs...)
	}
	slices.SortFunc(all, func(a, b *eventsv1.TurnFinished) int { return cmp.Compare(a.GetTurnId(), b.GetTurnId()) })
	return all[:min(len(all), limit)], nil
}

// DeleteOutbox implements Store.
func (f *Files) DeleteOutbox(ctx context.Context, turnID string) error {
	return f.ofTurn(turnID).DeleteOutbox(ctx, turnID)
}

// RequestCancel implements Store. The requests are kept in memory, by the first file's store.
func (f *Files) RequestCancel(ctx context.Context, turnID, by, reason string, ttl time.Duration) error {
	return f.files[0].RequestCancel(ctx, turnID, by, reason, ttl)
}

// CancelRequest implements Store.
func (f *Files) CancelRequest(ctx context.Context, turnID string) (string, string, bool, error) {
	return f.files[0].CancelRequest(ctx, turnID)
}

// Leases implements Store: one set for all files.
func (f *Files) Leases() lease.Store { return f.leases }

// OrphanedTurns implements Store. The files take turns, so that turns of one file that stay
// (their interruption fails) do not hide the others'.
func (f *Files) OrphanedTurns(ctx context.Context, limit int) ([]string, error) {
	each := make([][]string, len(f.files))
	for i, st := range f.files {
		ids, err := st.OrphanedTurns(ctx, limit)
		if err != nil {
			return nil, err
		}
		each[i] = ids
	}
	var out []string
	for k := 0; len(out) < limit; k++ {
		took := false
		for _, ids := range each {
			if k < len(ids) && len(out) < limit {
				out, took = append(out, ids[k]), true
			}
		}
		if !took {
			break
		}
	}
	return out, nil
}

// InterruptTurn implements Store.
func (f *Files) InterruptTurn(ctx context.Context, turnID string, end func(*orchestratorv1.Turn) *Finish) (bool, error) {
	return f.ofTurn(turnID).InterruptTurn(ctx, turnID, end)
}

// Close deletes each file's published outbox entries; the files stay open for their owner.
func (f *Files) Close() error {
	var errs []error
	for _, st := range f.files {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}

var (
	_ Store            = (*Files)(nil)
	_ deferredRecorder = (*Files)(nil)
	_ deferredRecorder = (*BoltStore)(nil)
)
