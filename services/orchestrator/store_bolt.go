package orchestrator

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/lease"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

var (
	bucketTasks        = []byte("tasks")
	bucketTaskSteps    = []byte("task_steps")
	bucketTurns        = []byte("turns")
	bucketSessionTurns = []byte("session_turns")
	bucketOutbox       = []byte("outbox")
	bucketRunning      = []byte("running")
)

// BoltStore keeps records in a bbolt file (monolithic mode):
//
//	tasks          session → pending list and the range of its steps (JSON, taskMeta)
//	task_steps     session 0x00 seq (8 bytes) → one done step (JSON)
//	turns          turn id → 8-byte expiry (Unix ms), then the record (protobuf)
//	session_turns  session 0x00 (MaxUint64 - started ms) turn id → nil   (newest first)
//	outbox         turn id → turn.finished (protobuf), until published
//	running        turn id → session id, while the turn's record is RUNNING
//
// The file serves one process, so what need not survive it lives in memory: cancellation
// requests and the leases (a turn does not outlive its process). A running turn's record is in
// the file before the client learns the turn's id, so that after a crash the restarted process
// finds it (its lease is gone with the old process) and ends it as interrupted. A finished turn
// is one group-committed write: its record, its task-state changes and its event.
type BoltStore struct {
	db    *bolt.DB
	group *boltstore.Group
	// ownsDB is false when the file is another store's (OpenBoltStoreOn): Close leaves it open.
	ownsDB bool
	now    func() time.Time
	leases *lease.Memory

	// mu guards the maps below. It is a leaf: FinishTurn's commit takes it inside bbolt's write
	// transaction (the tasks cache), and it is never held while a transaction starts or a
	// lease is called.
	mu sync.Mutex
	// cancels holds the cancellation requests.
	cancels map[string]cancelRequest
	// tasks caches task states as the transactions of this process wrote them (this process
	// is the file's only writer), so a turn does not decode its session's JSON twice; at most
	// maxCachedTasks sessions.
	tasks map[string]cachedTask
	// published holds outbox entries that were published but are still in the file: they are
	// deleted by the next write (a finishing turn's commit), so an acknowledgement costs no
	// commit of its own. Outbox skips them. A crash before that write republishes them, which
	// JetStream's de-duplication by turn id and the consumers' turn records absorb.
	published map[string]struct{}
}

// maxPublished bounds the published entries awaiting deletion; reaching it deletes them at once.
const maxPublished = 256

// maxCachedTasks bounds the task-state cache; past it, the cache starts afresh.
const maxCachedTasks = 4096

// cachedTask is a session's task state as a transaction wrote it, with the step sequence number
// its file entry had then (taskMeta.Next): a writer whose transaction reads another number (its
// commit is being retried, or the cache is behind) reads the file instead.
type cachedTask struct {
	st   TaskState
	next uint64
}

// cachedTask returns sid's cached task state and its taskMeta.Next. The slices are shared with
// the cache, clipped so that appending to them copies: callers only read their elements (a
// session's steps were cloned on every read, up to orchestrator.task-state-steps of them).
func (s *BoltStore) cachedTask(sid string) (TaskState, uint64, bool) {
	st, next, ok := s.cachedTaskForWrite(sid)
	return TaskState{Done: slices.Clip(st.Done), Pending: slices.Clip(st.Pending)}, next, ok
}

// cachedTaskForWrite is cachedTask for FinishTurn's transaction, which appends the new steps in
// place (keepSteps): the writes of the group's commit run one at a time, and readers' clipped
// views end before the appended elements.
func (s *BoltStore) cachedTaskForWrite(sid string) (TaskState, uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.tasks[sid]
	return c.st, c.next, ok
}

// cacheTask records sid's task state as a transaction wrote it; ok false forgets it (the
// transaction failed, so the file decides).
func (s *BoltStore) cacheTask(sid string, st TaskState, next uint64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		delete(s.tasks, sid)
		return
	}
	if len(s.tasks) >= maxCachedTasks {
		clear(s.tasks)
	}
	s.tasks[sid] = cachedTask{st: st, next: next}
}

type cancelRequest struct {
	by, reason string
	expires    time.Time
}

// OpenBoltStore opens or creates the file; a second process opening it fails after a second.
func OpenBoltStore(path string) (*BoltStore, error) {
	db, err := boltstore.Open(path, nil, bucketTasks, bucketTaskSteps, bucketTurns, bucketSessionTurns, bucketOutbox, bucketRunning)
	if err != nil {
		return nil, err
	}
	s, err := newBoltStore(db, boltstore.NewGroup(db), true, lease.NewMemory())
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// OpenBoltStoreOn keeps the records in the buckets above in db, another store's open file, and
// commits through g, that store's group: the monolith's session and orchestrator share one file,
// so a turn's session writes and its records share commits (Options.DeferSessionWrites). Close
// leaves db open for its owner.
func OpenBoltStoreOn(db *bolt.DB, g *boltstore.Group) (*BoltStore, error) {
	return openBoltStoreOn(db, g, lease.NewMemory())
}

// openBoltStoreOn is OpenBoltStoreOn with the leases the store keeps (Files shares one set).
func openBoltStoreOn(db *bolt.DB, g *boltstore.Group, leases *lease.Memory) (*BoltStore, error) {
	err := g.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketTasks, bucketTaskSteps, bucketTurns, bucketSessionTurns, bucketOutbox, bucketRunning} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("orchestrator buckets: %w", err)
	}
	return newBoltStore(db, g, false, leases)
}

func newBoltStore(db *bolt.DB, g *boltstore.Group, owns bool, leases *lease.Memory) (*BoltStore, error) {
	s := &BoltStore{
		db: db, group: g, ownsDB: owns, now: time.Now, leases: leases,
		cancels: map[string]cancelRequest{}, tasks: map[string]cachedTask{}, published: map[string]struct{}{},
	}
	if err := s.pruneTurns(); err != nil {
		return nil, err
	}
	return s, nil
}

// Close deletes the published outbox entries and closes the file (when it is its own).
func (s *BoltStore) Close() error {
	err := s.deletePublished()
	if !s.ownsDB {
		s.group.Sync()
		return err
	}
	return errors.Join(err, s.db.Close())
}

// takePublished empties the published set and returns its turn ids, to delete in a write; the
// writer hands them back with restorePublished when its commit fails.
func (s *BoltStore) takePublished() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.published) == 0 {
		return nil
	}
	ids := make([]string, 0, len(s.published))
	for id := range s.published {
		ids = append(ids, id)
	}
	clear(s.published)
	return ids
}

func (s *BoltStore) restorePublished(ids []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.published[id] = struct{}{}
	}
}

// deleteOutbox deletes the entries of ids in tx.
func deleteOutbox(tx *bolt.Tx, ids []string) error {
	b := tx.Bucket(bucketOutbox)
	for _, id := range ids {
		if err := b.Delete([]byte(id)); err != nil {
			return err
		}
	}
	return nil
}

// deletePublished deletes the published entries in a write of their own.
func (s *BoltStore) deletePublished() error {
	ids := s.takePublished()
	if len(ids) == 0 {
		return nil
	}
	err := s.group.Update(func(tx *bolt.Tx) error { return deleteOutbox(tx, ids) })
	if err != nil {
		s.restorePublished(ids)
	}
	return err
}

// Leases implements Store.
func (s *BoltStore) Leases() lease.Store { return s.leases }

// pruneTurns deletes expired turn records and their index entries; called at open, expired
// records are otherwise skipped on read.
func (s *BoltStore) pruneTurns() error {
	now := s.now().UnixMilli()
	return s.group.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTurns)
		_, err := boltstore.DeleteWhere(b, func(_, v []byte) (bool, error) {
			return len(v) < 8 || int64(binary.BigEndian.Uint64(v)) < now, nil
		})
		if err != nil {
			return err
		}
		_, err = boltstore.DeleteWhere(tx.Bucket(bucketSessionTurns), func(k, _ []byte) (bool, error) {
			id := indexTurnID(k)
			return id == nil || b.Get(id) == nil, nil
		})
		return err
	})
}

// sessionTurnKey orders a session's turns newest first.
func sessionTurnKey(sid string, started time.Time, id string) []byte {
	k := make([]byte, 0, len(sid)+1+8+len(id))
	k = append(k, sid...)
	k = append(k, 0)
	k = binary.BigEndian.AppendUint64(k, math.MaxUint64-uint64(started.UnixMilli()))
	return append(k, id...)
}

// indexTurnID is the turn id at the end of a session_turns key.
func indexTurnID(k []byte) []byte {
	i := bytes.IndexByte(k, 0)
	if i < 0 || len(k) < i+1+8 {
		return nil
	}
	return k[i+1+8:]
}

// taskMeta is a session's entry in the tasks bucket. Its done steps are keys First..Next-1 of
// task_steps, so a finishing turn writes its own steps, not the whole list again (a session keeps
// up to orchestrator.task-state-steps of them). Done is the format before that: the whole list in
// this value; it moves into task_steps with the session's next write. Stored, when set, is the
// first key still in task_steps: the steps before First are deleted trimSteps at a time
// (writeTask); unset, it is First.
type taskMeta struct {
	Pending []Pending `json:"pending,omitempty"`
	First   uint64    `json:"first,omitempty"`
	Next    uint64    `json:"next,omitempty"`
	Stored  *uint64   `json:"stored,omitempty"`
	Done    []Step    `json:"done,omitempty"`
}

// trimSteps is how many steps a session's task state drops at once. Deleting the oldest step
// with each new one made every turn of a long session rewrite the leaf at its steps' head as
// well as the one at their tail, and the branch above each (bench/README, issue 25, stop 44).
const trimSteps = 64

func loadTaskMeta(tb *bolt.Bucket, sid string) (taskMeta, error) {
	var m taskMeta
	if raw := tb.Get([]byte(sid)); raw != nil {
		if err := json.Unmarshal(raw, &m); err != nil {
			return m, fmt.Errorf("task state of %s: %w", sid, err)
		}
	}
	return m, nil
}

// stepKey is a step's key in task_steps: the session, 0x00, the step's sequence number.
func stepKey(sid string, seq uint64) []byte {
	k := make([]byte, 0, len(sid)+9)
	k = append(k, sid...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

// loadTask reads a session's task state, m being its entry.
func loadTask(tx *bolt.Tx, sid string, m taskMeta) (TaskState, error) {
	st := TaskState{Done: m.Done, Pending: m.Pending}
	c := tx.Bucket(bucketTaskSteps).Cursor()
	end := stepKey(sid, m.Next)
	for k, v := c.Seek(stepKey(sid, m.First)); k != nil && bytes.Compare(k, end) < 0; k, v = c.Next() {
		var step Step
		if err := json.Unmarshal(v, &step); err != nil {
			return TaskState{}, fmt.Errorf("task state of %s, step %x: %w", sid, k[len(k)-8:], err)
		}
		st.Done = append(st.Done, step)
	}
	return st, nil
}

// writeTask applies a Finish's steps and pending list to sid's task state in tx, m being its
// entry: the new steps are added as keys and the oldest beyond f.KeepSteps deleted, so the write
// is as large as the change. A state in the old one-value format moves into task_steps on the
// way. It returns the entry's new Next.
func writeTask(tx *bolt.Tx, sid string, m taskMeta, f *Finish) (uint64, error) {
	tb, sb := tx.Bucket(bucketTasks), tx.Bucket(bucketTaskSteps)
	for _, step := range slices.Concat(m.Done, f.Steps) {
		raw, err := json.Marshal(step)
		if err != nil {
			return 0, err
		}
		if err := sb.Put(stepKey(sid, m.Next), raw); err != nil {
			return 0, err
		}
		m.Next++
	}
	m.Done = nil
	stored := m.First
	if m.Stored != nil {
		stored = min(*m.Stored, m.First)
	}
	if keep := uint64(max(f.KeepSteps, 0)); keep > 0 && m.Next-m.First > keep {
		m.First = m.Next - keep
	}
	if f.SetPending {
		m.Pending = f.mergePending(m.Pending)
	}
	empty := m.First == m.Next && len(m.Pending) == 0
	if empty || m.First-stored >= trimSteps {
		// A walk of the keys there are, not a count from stored: a damaged entry's numbers cannot
		// make it long.
		if _, err := boltstore.DeleteRange(sb, stepKey(sid, stored), stepKey(sid, m.First)); err != nil {
			return 0, err
		}
		stored = m.First
	}
	m.Stored = nil
	if stored != m.First {
		m.Stored = &stored
	}
	if empty {
		// Nothing left: the next step starts the numbering again.
		return 0, tb.Delete([]byte(sid))
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return 0, err
	}
	return m.Next, tb.Put([]byte(sid), raw)
}

// deleteTask removes sid's task state.
func deleteTask(tx *bolt.Tx, sid string) error {
	if err := tx.Bucket(bucketTasks).Delete([]byte(sid)); err != nil {
		return err
	}
	// Every key "sid 0x00 seq" lies in [sid 0x00, sid 0x01).
	_, err := boltstore.DeleteRange(tx.Bucket(bucketTaskSteps), append([]byte(sid), 0), append([]byte(sid), 1))
	return err
}

// TaskState implements Store.
func (s *BoltStore) TaskState(_ context.Context, sid string) (TaskState, error) {
	if st, _, ok := s.cachedTask(sid); ok {
		return st, nil
	}
	var st TaskState
	var next uint64
	err := s.db.View(func(tx *bolt.Tx) error {
		m, err := loadTaskMeta(tx.Bucket(bucketTasks), sid)
		if err != nil {
			return err
		}
		next = m.Next
		st, err = loadTask(tx, sid, m)
		return err
	})
	if err == nil {
		s.cacheTask(sid, st, next, true)
	}
	return st, err
}

// turnValue is a record's value in the turns bucket: its expiry, then the record.
func (s *BoltStore) turnValue(raw []byte, ttl time.Duration) []byte {
	v := make([]byte, 8, 8+len(raw))
	binary.BigEndian.PutUint64(v, uint64(s.now().Add(ttl).UnixMilli()))
	return append(v, raw...)
}

// turnsFillPercent is the fill of a split page of turns.
const turnsFillPercent = 0.95

// putTurn writes a record (v, from turnValue), its index entry and its entry in running.
func putTurn(tx *bolt.Tx, turn *orchestratorv1.Turn, v []byte) error {
	turns := tx.Bucket(bucketTurns)
	// Turn ids are ULIDs, which grow with time: a split that leaves the old page full (instead
	// of bbolt's half) keeps the page every turn rewrites small and the pages few.
	turns.FillPercent = turnsFillPercent
	if err := turns.Put([]byte(turn.GetId()), v); err != nil {
		return err
	}
	if err := putAbsent(tx.Bucket(bucketSessionTurns), sessionTurnKey(turn.GetSessionId(), turn.GetStartedAt().AsTime(), turn.GetId())); err != nil {
		return err
	}
	if turn.GetStatus() == orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
		return tx.Bucket(bucketRunning).Put([]byte(turn.GetId()), []byte(turn.GetSessionId()))
	}
	return tx.Bucket(bucketRunning).Delete([]byte(turn.GetId()))
}

// putAbsent puts key with an empty value into b unless it is there already. A turn's index
// entry is the same for its RUNNING record and its end, and bbolt rewrites the page of a key
// put again even when nothing changes: the end's commit would copy the entry's leaf and branch
// for nothing.
func putAbsent(b *bolt.Bucket, key []byte) error {
	if k, _ := b.Cursor().Seek(key); bytes.Equal(k, key) {
		return nil
	}
	return b.Put(key, nil)
}

// PutTurn implements Store: one group-committed write, so the record survives a crash.
func (s *BoltStore) PutTurn(_ context.Context, turn *orchestratorv1.Turn, ttl time.Duration) error {
	v, err := s.encodeTurn(turn, ttl)
	if err != nil {
		return err
	}
	return s.group.Update(func(tx *bolt.Tx) error { return putTurn(tx, turn, v) })
}

// encodeTurn is turn's stored value, kept for ttl.
func (s *BoltStore) encodeTurn(turn *orchestratorv1.Turn, ttl time.Duration) ([]byte, error) {
	raw, err := proto.Marshal(turn)
	if err != nil {
		return nil, err
	}
	return s.turnValue(raw, ttl), nil
}

// PutTurnDeferred writes a running turn's record into the file's open transaction and returns
// once it is applied: GetTurn and the other readers see it after the commit that durable
// receives the outcome of — the next one, whoever makes it (the turn's end, another turn's
// write, the group's own at most its delay later), or SyncTurns'. A turn that ends within that
// delay thus makes one commit instead of two.
func (s *BoltStore) PutTurnDeferred(turn *orchestratorv1.Turn, ttl time.Duration) (durable <-chan error, err error) {
	v, err := s.encodeTurn(turn, ttl)
	if err != nil {
		return nil, err
	}
	return s.group.DeferDurable(func(tx *bolt.Tx, _ bool) error { return putTurn(tx, turn, v) })
}

// SyncTurns commits the deferred writes at once and returns when they are on disk; the file holds
// every session's records, so the session does not matter.
func (s *BoltStore) SyncTurns(string) { s.group.SyncDeferred() }

// FinishTurn implements Store. The lease (in memory) is released after the commit.
func (s *BoltStore) FinishTurn(ctx context.Context, f *Finish) error {
	if f.Lease != nil {
		defer func() { _, _ = s.leases.Release(ctx, f.Lease.Key, f.Lease.Owner) }()
	}
	raw, event, err := f.encode()
	if err != nil {
		return err
	}
	v := s.turnValue(raw, f.TTL)
	published := s.takePublished()
	err = s.group.Update(func(tx *bolt.Tx) error {
		if err := deleteOutbox(tx, published); err != nil {
			return err
		}
		return s.finishTx(tx, f, v, event)
	})
	if err != nil {
		s.cacheTask(f.Turn.GetSessionId(), TaskState{}, 0, false)
		s.restorePublished(published)
		return err
	}
	s.mu.Lock()
	delete(s.cancels, f.Turn.GetId())
	s.mu.Unlock()
	return nil
}

// finishTx writes a Finish in tx: the record (v), its event and the task-state changes. A
// caller whose commit fails forgets the session's cached task state.
func (s *BoltStore) finishTx(tx *bolt.Tx, f *Finish, v, event []byte) error {
	turn := f.Turn
	sid := turn.GetSessionId()
	if err := putTurn(tx, turn, v); err != nil {
		return err
	}
	if event != nil {
		if err := tx.Bucket(bucketOutbox).Put([]byte(turn.GetId()), event); err != nil {
			return err
		}
	}
	if len(f.Steps) == 0 && !f.SetPending {
		return nil
	}
	m, err := loadTaskMeta(tx.Bucket(bucketTasks), sid)
	if err != nil {
		return err
	}
	// The cache is used only when it is of this very state: when the group's commit is
	// retried, this function runs again on a file without its first run's write.
	st, next, ok := s.cachedTaskForWrite(sid)
	if !ok || next != m.Next {
		if st, err = loadTask(tx, sid, m); err != nil {
			return err
		}
	}
	if next, err = writeTask(tx, sid, m, f); err != nil {
		return err
	}
	st.Done = keepSteps(st.Done, f.Steps, f.KeepSteps)
	if f.SetPending {
		st.Pending = f.mergePending(st.Pending)
	}
	// Set in the transaction's order, so a concurrent DeleteSession's removal is not
	// overtaken; undone by the caller when the commit fails.
	s.cacheTask(sid, st, next, true)
	return nil
}

// OrphanedTurns implements Store: the running turns whose session lease (in this process's
// memory) their turn does not hold; after a restart, every turn the file has as running.
func (s *BoltStore) OrphanedTurns(_ context.Context, limit int) ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bucketRunning).Cursor()
		for k, v := c.First(); k != nil && len(out) < limit; k, v = c.Next() {
			if s.leases.Holder(sessionKey(string(v))) != string(k) {
				out = append(out, string(k))
			}
		}
		return nil
	})
	return out, err
}

// loadTurn reads a live record in tx; ok is false for a missing or expired one.
func (s *BoltStore) loadTurn(tx *bolt.Tx, id string) (*orchestratorv1.Turn, bool, error) {
	v := tx.Bucket(bucketTurns).Get([]byte(id))
	if len(v) < 8 || int64(binary.BigEndian.Uint64(v)) < s.now().UnixMilli() {
		return nil, false, nil
	}
	t := &orchestratorv1.Turn{}
	if err := proto.Unmarshal(v[8:], t); err != nil {
		return nil, false, fmt.Errorf("turn %s: %w", id, err)
	}
	return t, true, nil
}

// InterruptTurn implements Store: a read first, then one transaction that checks again (the
// process's turns write their records in transactions of the same file, and release their
// leases only after their final record's commit).
func (s *BoltStore) InterruptTurn(ctx context.Context, turnID string, end func(*orchestratorv1.Turn) *Finish) (bool, error) {
	// GetTurn calls this for every running turn: no write for a live one.
	rec, err := s.GetTurn(ctx, turnID)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			_ = s.group.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketRunning).Delete([]byte(turnID)) })
		}
		return false, err
	}
	if rec.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING || s.leases.Holder(sessionKey(rec.GetSessionId())) == turnID {
		return false, nil
	}
	var done bool
	var sid string
	err = s.group.Update(func(tx *bolt.Tx) error {
		done = false
		cur, ok, err := s.loadTurn(tx, turnID)
		if err != nil || !ok {
			return err
		}
		if cur.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING || s.leases.Holder(sessionKey(cur.GetSessionId())) == turnID {
			return nil
		}
		f := end(cur)
		sid = f.Turn.GetSessionId()
		raw, event, err := f.encode()
		if err != nil {
			return err
		}
		if err := s.finishTx(tx, f, s.turnValue(raw, f.TTL), event); err != nil {
			return err
		}
		done = true
		return nil
	})
	if err != nil {
		if sid != "" {
			s.cacheTask(sid, TaskState{}, 0, false)
		}
		return false, err
	}
	return done, nil
}

// GetTurn implements Store.
func (s *BoltStore) GetTurn(_ context.Context, id string) (*orchestratorv1.Turn, error) {
	t := &orchestratorv1.Turn{}
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketTurns).Get([]byte(id))
		if len(v) < 8 || int64(binary.BigEndian.Uint64(v)) < s.now().UnixMilli() {
			return ErrNotFound
		}
		return proto.Unmarshal(v[8:], t)
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// ListTurns implements Store. The cursor is the hex of the last returned index key.
func (s *BoltStore) ListTurns(_ context.Context, sid, cursor string, limit int) ([]*orchestratorv1.Turn, string, error) {
	prefix := append([]byte(sid), 0)
	after, ok := boltstore.ParseCursor(cursor, prefix)
	if !ok {
		return nil, "", ErrBadCursor
	}
	type keyed struct {
		key  []byte
		turn *orchestratorv1.Turn
	}
	var all []keyed
	now := s.now().UnixMilli()
	err := s.db.View(func(tx *bolt.Tx) error {
		turns := tx.Bucket(bucketTurns)
		c := tx.Bucket(bucketSessionTurns).Cursor()
		found := 0
		for k := boltstore.SeekPage(c, prefix, after); k != nil && bytes.HasPrefix(k, prefix) && found <= limit; k, _ = c.Next() {
			v := turns.Get(indexTurnID(k))
			if len(v) < 8 || int64(binary.BigEndian.Uint64(v)) < now {
				continue
			}
			t := &orchestratorv1.Turn{}
			if err := proto.Unmarshal(v[8:], t); err != nil {
				return fmt.Errorf("turn %s: %w", indexTurnID(k), err)
			}
			all = append(all, keyed{bytes.Clone(k), t})
			found++
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	next := ""
	if len(all) > limit {
		all = all[:limit]
		next = hex.EncodeToString(all[limit-1].key)
	}
	out := make([]*orchestratorv1.Turn, len(all))
	for i, k := range all {
		out[i] = k.turn
	}
	return out, next, nil
}

// DeleteSession implements Store.
func (s *BoltStore) DeleteSession(_ context.Context, sid string) error {
	err := s.group.Update(func(tx *bolt.Tx) error { return deleteTask(tx, sid) })
	// After the commit, so a FinishTurn committed with it cannot leave its state cached.
	s.cacheTask(sid, TaskState{}, 0, false)
	return err
}

// Outbox implements Store. Turn ids are ULIDs, so key order is finishing order, near enough.
// Published entries still in the file are deleted first (the drainer's rounds are the writes of
// an idle process) and skipped if that fails.
func (s *BoltStore) Outbox(_ context.Context, limit int) ([]*eventsv1.TurnFinished, error) {
	if err := s.deletePublished(); err != nil {
		return nil, fmt.Errorf("outbox: delete published entries: %w", err)
	}
	var out []*eventsv1.TurnFinished
	err := s.db.View(func(tx *bolt.Tx) error {
		s.mu.Lock()
		published := maps.Clone(s.published)
		s.mu.Unlock()
		c := tx.Bucket(bucketOutbox).Cursor()
		for k, v := c.First(); k != nil && len(out) < limit; k, v = c.Next() {
			if _, ok := published[string(k)]; ok {
				continue
			}
			ev := &eventsv1.TurnFinished{}
			if err := proto.Unmarshal(v, ev); err != nil {
				return fmt.Errorf("outbox entry %s: %w", k, err)
			}
			out = append(out, ev)
		}
		return nil
	})
	return out, err
}

// DeleteOutbox implements Store: the entry is marked published and deleted by the next write.
func (s *BoltStore) DeleteOutbox(_ context.Context, turnID string) error {
	s.mu.Lock()
	s.published[turnID] = struct{}{}
	full := len(s.published) >= maxPublished
	s.mu.Unlock()
	if full {
		return s.deletePublished()
	}
	return nil
}

// RequestCancel implements Store.
func (s *BoltStore) RequestCancel(ctx context.Context, turnID, by, reason string, ttl time.Duration) error {
	s.mu.Lock()
	now := s.now()
	for id, c := range s.cancels {
		if !now.Before(c.expires) {
			delete(s.cancels, id)
		}
	}
	s.cancels[turnID] = cancelRequest{by: by, reason: reason, expires: now.Add(ttl)}
	s.mu.Unlock()
	return s.leases.Signal(ctx, cancelKey(turnID))
}

// CancelRequest implements Store.
func (s *BoltStore) CancelRequest(_ context.Context, turnID string) (string, string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.cancels[turnID]
	if !ok || !s.now().Before(c.expires) {
		return "", "", false, nil
	}
	return c.by, c.reason, true, nil
}
