package session

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/boltstore"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// BoltStore is the embedded store of monolithic mode: one bbolt file. bbolt was chosen because
// it is pure Go (no cgo), keeps one file with ACID transactions that survive a crash, and its
// sorted keys give exactly the access paths a session log needs: a message by seq, a seq range,
// the last N turn starts by walking a cursor backwards, and prefix scans for search. Its single
// writer serializes appends, which is what dense seq numbers need anyway.
//
// Layout:
//
//	sessions        sid → Session (identity, config, state)
//	summaries       sid → summary as a message of kind summary
//	user_sessions   uid 0x00 (MaxUint64 - updated ms) sid → nil   (newest first)
//	postings        uid 0x00 term 0x00 sid 0x00 block → seqs in block  (search postings:
//	                store_bolt_postings.go)
//	unindexed       NextSequence (8 bytes big-endian) → pending postings of one message:
//	                uvarint len(uid) uid  uvarint len(sid) sid  uvarint seq
//	                then per term: uvarint len(term) term
//	s/<sid>         m seq → Message   c client_id → seq   t seq of user messages → nil
//	                k seq of sticky messages → nil   (one-byte prefixes: store_bolt_parts.go)
//	layout          sessions → 2 (the layout of the sessions' buckets)
//
// In the monolith the file also holds the orchestrator's buckets and the quota's counters
// (File, orchestrator.OpenBoltStoreOn, quota.OpenBoltStoreOn), which commit through the same
// group, so a turn's writes and its records share commits.
//
// Search postings are written behind the append. A message's postings land all over the postings
// B-tree, so writing them in the append's transaction dirtied a leaf page per term; instead the
// append puts one entry into unindexed, whose keys only grow (the rightmost page), and a flush
// moves the entries into postings at most about flushDelay later, or sooner when flushPostings are
// pending, and on Close. The entries are durable, so a crash loses no postings: they are loaded
// again at open. Until a flush, Search reads the pending postings from memory.
type BoltStore struct {
	db *bolt.DB
	// group commits concurrent appends together (one fsync for the appends of several turns).
	group *boltstore.Group

	flushDelay    time.Duration
	flushPostings int
	flushChunk    int
	// timer fires flushDelay after the first pending entry; full asks for a flush when
	// flushPostings are pending; stop and flusherDone end the flushing goroutine.
	timer       *time.Timer
	full        chan struct{}
	stop        chan struct{}
	stopOnce    sync.Once
	flusherDone chan struct{}
	flushed     func(error) // flushOptions.done

	// decoded keeps the messages of recent context loads, so a turn decodes only its new ones.
	decoded *decodedCache

	// mu guards pending and postings: the committed entries of unindexed (by their key) that
	// are not yet in postings, and how many postings they hold. Entries are immutable once added.
	// Resets of timer happen under it. It is never held across a transaction.
	mu       sync.Mutex
	pending  map[uint64]*pendingEntry
	postings int
}

// pendingEntry is one message's postings not yet in postings, as stored in unindexed.
type pendingEntry struct {
	key      uint64
	uid, sid string
	seq      int64
	terms    []string
}

// Defaults of the write-behind index: a flush moves up to a few thousand postings at once, and
// a message is in the index about a second after its append. A flush's cost goes with the
// leaves of postings it rewrites more than with its postings, so larger flushes cost less a
// posting, but keep more pending in memory and searched there.
const (
	defaultFlushDelay    = time.Second
	defaultFlushPostings = 4096
)

var (
	bSessions     = []byte("sessions")
	bSummaries    = []byte("summaries")
	bUserSessions = []byte("user_sessions")
	bUnindexed    = []byte("unindexed")
)

// present is the value of set-like buckets; a non-empty value keeps Get's nil meaning "absent".
var present = []byte{1}

// OpenBoltStore opens (or creates) the store at path. A file held by another process is an
// error after a second instead of a hang.
func OpenBoltStore(path string) (*BoltStore, error) {
	return openBoltStore(path, flushOptions{delay: defaultFlushDelay, postings: defaultFlushPostings})
}

// flushOptions tune the write-behind index (tests shorten or lengthen them).
type flushOptions struct {
	delay    time.Duration
	postings int
	// chunk is the lists a transaction of a flush writes at most; 0 means flushChunk.
	chunk int
	// done, when set, is called after each flush of the flushing goroutine.
	done func(error)
}

func openBoltStore(path string, o flushOptions) (*BoltStore, error) {
	db, err := boltstore.Open(path, nil, bSessions, bSummaries, bUserSessions, bPostings, bUnindexed, bLayout)
	if err != nil {
		return nil, err
	}
	if err := migrateLayout(db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("move %s to the sessions' layout 3: %w", path, err)
	}
	b := &BoltStore{
		db: db, group: boltstore.NewGroup(db),
		flushDelay: o.delay, flushPostings: o.postings, flushChunk: cmp.Or(o.chunk, flushChunk), flushed: o.done,
		timer:       time.NewTimer(o.delay),
		full:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		flusherDone: make(chan struct{}),
		pending:     map[uint64]*pendingEntry{},
		decoded:     newDecodedCache(defaultDecodedBytes),
	}
	b.timer.Stop()
	// The entries of a process that ended before flushing them.
	err = db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bUnindexed).ForEach(func(k, v []byte) error {
			e, err := decodePending(k, v)
			if err != nil {
				return err
			}
			b.pending[e.key] = e
			b.postings += len(e.terms)
			return nil
		})
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("load unindexed postings of %s: %w", path, err)
	}
	if len(b.pending) > 0 {
		b.timer.Reset(o.delay)
	}
	go b.flusher()
	return b, nil
}

// File returns the store's bbolt file and its group commit, for a store that keeps its records
// in the same file (the monolith's orchestrator) and closes before this one.
func (b *BoltStore) File() (*bolt.DB, *boltstore.Group) { return b.db, b.group }

// Close moves the pending postings into postings and closes the file. Postings it cannot move
// stay in unindexed for the next open.
func (b *BoltStore) Close() error {
	b.stopOnce.Do(func() { close(b.stop) })
	<-b.flusherDone
	b.timer.Stop()
	ferr := b.flush()
	b.group.Sync()
	if err := b.db.Close(); err != nil {
		return err
	}
	if ferr != nil {
		return fmt.Errorf("flush search postings: %w", ferr)
	}
	return nil
}

// flusher flushes when the timer fires or flushPostings are pending, until Close.
func (b *BoltStore) flusher() {
	defer close(b.flusherDone)
	for {
		select {
		case <-b.stop:
			return
		case <-b.timer.C:
		case <-b.full:
		}
		err := b.flush()
		if err != nil {
			// The entries stay pending (and durable); try again later.
			slog.Error("session store: flush search postings", "error", err)
			b.timer.Reset(b.flushDelay)
		}
		if b.flushed != nil {
			b.flushed(err)
		}
	}
}

// flushChunk bounds the lists that one transaction of a flush writes. A message's postings land
// all over the tree, so a chunk dirties up to a leaf page a list: a flush of thousands of lists
// in one transaction could rewrite most of the leaves of a large tree in one commit and hold
// them all in memory at once (pages, nodes, the journal's record).
const flushChunk = 512

// flush moves the pending entries into postings, flushChunk lists a transaction in key order,
// then drops the entries from unindexed and from memory. Putting a posting twice is harmless, so
// a flush cut short (an error, a crash) leaves the entries to a later flush. Entries appended
// meanwhile stay pending, with the timer armed for them; entries whose session was deleted
// meanwhile are gone from unindexed, and their postings are skipped.
func (b *BoltStore) flush() error {
	b.mu.Lock()
	batch := make([]*pendingEntry, 0, len(b.pending))
	for _, e := range b.pending {
		batch = append(batch, e)
	}
	b.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	type posting struct {
		key, entry []byte
		off        byte
	}
	var postings []posting
	for _, e := range batch {
		ek := seqKey(int64(e.key))
		for _, t := range e.terms {
			postings = append(postings, posting{postingKey(e.uid, t, e.sid, e.seq), ek, postingOffset(e.seq)})
		}
	}
	// In key order, each leaf is materialized and searched from the root once per run of keys
	// it holds, not once per key, and a list's postings are consecutive.
	slices.SortFunc(postings, func(a, b posting) int {
		if c := bytes.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.off, b.off)
	})
	// unindexed's keys only grow: its entries are deleted in key order too, with the last chunk.
	slices.SortFunc(batch, func(a, b *pendingEntry) int { return cmp.Compare(a.key, b.key) })
	var offs []byte
	for first := true; first || len(postings) > 0; first = false {
		// The chunk ends after b.flushChunk lists' postings.
		n, nlists := 0, 0
		for ; n < len(postings); n++ {
			if n == 0 || !bytes.Equal(postings[n].key, postings[n-1].key) {
				if nlists++; nlists > b.flushChunk {
					break
				}
			}
		}
		chunk := postings[:n]
		postings = postings[n:]
		last := len(postings) == 0
		err := b.group.Update(func(tx *bolt.Tx) error {
			un, lists := tx.Bucket(bUnindexed), tx.Bucket(bPostings)
			for i := 0; i < len(chunk); {
				key := chunk[i].key
				offs = offs[:0]
				for ; i < len(chunk) && bytes.Equal(chunk[i].key, key); i++ {
					// DeleteSession removes the session's entries and its postings in one
					// transaction: a posting whose entry is gone is not put back.
					if un.Get(chunk[i].entry) != nil {
						offs = append(offs, chunk[i].off)
					}
				}
				if len(offs) == 0 {
					continue
				}
				if err := lists.Put(key, mergeOffsets(lists.Get(key), offs)); err != nil {
					return err
				}
			}
			if !last {
				return nil
			}
			for _, e := range batch {
				if err := un.Delete(seqKey(int64(e.key))); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range batch {
		b.dropLocked(e.key)
	}
	if len(b.pending) > 0 {
		b.timer.Reset(b.flushDelay)
	}
	return nil
}

// dropLocked forgets a pending entry; b.mu is held.
func (b *BoltStore) dropLocked(key uint64) {
	if e, ok := b.pending[key]; ok {
		b.postings -= len(e.terms)
		delete(b.pending, key)
	}
}

// addPending records committed entries and schedules their flush.
func (b *BoltStore) addPending(entries []*pendingEntry) {
	if len(entries) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.pending) == 0 {
		b.timer.Reset(b.flushDelay)
	}
	for _, e := range entries {
		b.pending[e.key] = e
		b.postings += len(e.terms)
	}
	if b.postings >= b.flushPostings {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
}

func encodePending(e *pendingEntry) []byte {
	n := 3*binary.MaxVarintLen64 + len(e.uid) + len(e.sid)
	for _, t := range e.terms {
		n += binary.MaxVarintLen64 + len(t)
	}
	v := make([]byte, 0, n)
	v = binary.AppendUvarint(v, uint64(len(e.uid)))
	v = append(v, e.uid...)
	v = binary.AppendUvarint(v, uint64(len(e.sid)))
	v = append(v, e.sid...)
	v = binary.AppendUvarint(v, uint64(e.seq))
	for _, t := range e.terms {
		v = binary.AppendUvarint(v, uint64(len(t)))
		v = append(v, t...)
	}
	return v
}

var errBadPending = errors.New("malformed unindexed entry")

func decodePending(k, v []byte) (*pendingEntry, error) {
	if len(k) != 8 {
		return nil, errBadPending
	}
	e := &pendingEntry{key: binary.BigEndian.Uint64(k)}
	str := func() (string, bool) {
		n, w := binary.Uvarint(v)
		if w <= 0 || n > uint64(len(v)-w) {
			return "", false
		}
		s := string(v[w : w+int(n)])
		v = v[w+int(n):]
		return s, true
	}
	var ok bool
	if e.uid, ok = str(); !ok {
		return nil, errBadPending
	}
	if e.sid, ok = str(); !ok {
		return nil, errBadPending
	}
	seq, w := binary.Uvarint(v)
	if w <= 0 {
		return nil, errBadPending
	}
	e.seq, v = int64(seq), v[w:]
	for len(v) > 0 {
		t, ok := str()
		if !ok {
			return nil, errBadPending
		}
		e.terms = append(e.terms, t)
	}
	return e, nil
}

// appendFillPercent is the fill of buckets whose keys only grow: a split leaves the old page full,
// since nothing will be inserted before its last key.
const appendFillPercent = 0.95

func seqKey(seq int64) []byte {
	k := make([]byte, 8)
	binary.BigEndian.PutUint64(k, uint64(seq))
	return k
}

func keySeq(k []byte) int64 { return int64(binary.BigEndian.Uint64(k)) }

func sessionBucketName(sid string) []byte { return []byte("s/" + sid) }

func userSessionKey(uid string, updatedMs int64, sid string) []byte {
	k := make([]byte, 0, len(uid)+1+8+len(sid))
	k = append(k, uid...)
	k = append(k, 0)
	k = binary.BigEndian.AppendUint64(k, math.MaxUint64-uint64(updatedMs))
	return append(k, sid...)
}

func getSession(tx *bolt.Tx, id string) (*sessionv1.Session, error) {
	raw := tx.Bucket(bSessions).Get([]byte(id))
	if raw == nil {
		return nil, ErrNotFound
	}
	s := &sessionv1.Session{}
	if err := proto.Unmarshal(raw, s); err != nil {
		return nil, fmt.Errorf("decode session %s: %w", id, err)
	}
	return s, nil
}

func putSession(tx *bolt.Tx, s *sessionv1.Session) error {
	raw, err := proto.Marshal(s)
	if err != nil {
		return err
	}
	return tx.Bucket(bSessions).Put([]byte(s.GetId()), raw)
}

// CreateSession implements Store.
func (b *BoltStore) CreateSession(_ context.Context, in *sessionv1.Session) error {
	return b.group.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(bSessions).Get([]byte(in.GetId())) != nil {
			return fmt.Errorf("session %s already exists", in.GetId())
		}
		s := proto.CloneOf(in)
		s.State = &sessionv1.SessionState{UpdatedAt: s.GetCreatedAt()}
		if err := putSession(tx, s); err != nil {
			return err
		}
		if _, err := tx.CreateBucket(sessionBucketName(s.GetId())); err != nil {
			return err
		}
		return tx.Bucket(bUserSessions).Put(userSessionKey(s.GetUserId(), s.GetCreatedAt().AsTime().UnixMilli(), s.GetId()), present)
	})
}

// GetSession implements Store.
func (b *BoltStore) GetSession(_ context.Context, id string) (*sessionv1.Session, error) {
	var s *sessionv1.Session
	err := b.db.View(func(tx *bolt.Tx) error {
		var err error
		s, err = getSession(tx, id)
		return err
	})
	return s, err
}

// ListSessions implements Store. The cursor is the hex of the last returned index key.
func (b *BoltStore) ListSessions(_ context.Context, userID, cursor string, limit int) ([]*sessionv1.Session, string, error) {
	prefix := append([]byte(userID), 0)
	after, ok := boltstore.ParseCursor(cursor, prefix)
	if !ok {
		return nil, "", fmt.Errorf("%w: bad page token", ErrBadCursor)
	}
	var out []*sessionv1.Session
	next := ""
	err := b.db.View(func(tx *bolt.Tx) error {
		c := tx.Bucket(bUserSessions).Cursor()
		for k := boltstore.SeekPage(c, prefix, after); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if len(out) == limit {
				next = hex.EncodeToString(userSessionKeyOf(out[len(out)-1]))
				return nil
			}
			s, err := getSession(tx, string(k[len(prefix)+8:]))
			if err != nil {
				return err
			}
			out = append(out, s)
		}
		return nil
	})
	return out, next, err
}

func userSessionKeyOf(s *sessionv1.Session) []byte {
	return userSessionKey(s.GetUserId(), s.GetState().GetUpdatedAt().AsTime().UnixMilli(), s.GetId())
}

// DeleteSession implements Store.
func (b *BoltStore) DeleteSession(_ context.Context, userID, id string) (int64, error) {
	var n int64
	err := b.group.Update(func(tx *bolt.Tx) error {
		n = 0
		s, err := getSession(tx, id)
		if err != nil {
			return err
		}
		sb := tx.Bucket(sessionBucketName(id))
		lists := tx.Bucket(bPostings)
		// Deleting from postings while a cursor walks the session's bucket is safe: they are
		// different buckets. A list holds only this session's postings, so it goes whole.
		c := partsOf(sb).msgs.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			n++
			m := &sessionv1.Message{}
			if err := proto.Unmarshal(v, m); err != nil {
				continue
			}
			for _, t := range textTerms(m.GetContent()) {
				if err := lists.Delete(postingKey(userID, t, id, keySeq(k))); err != nil {
					return err
				}
			}
		}
		// The session's postings not yet in postings. The bucket is read rather than memory: an
		// append committed just before may not have reached memory yet.
		_, err = boltstore.DeleteWhere(tx.Bucket(bUnindexed), func(k, v []byte) (bool, error) {
			e, err := decodePending(k, v)
			return err == nil && e.sid == id, err
		})
		if err != nil {
			return err
		}
		if err := tx.DeleteBucket(sessionBucketName(id)); err != nil {
			return err
		}
		if err := tx.Bucket(bUserSessions).Delete(userSessionKeyOf(s)); err != nil {
			return err
		}
		if err := tx.Bucket(bSummaries).Delete([]byte(id)); err != nil {
			return err
		}
		return tx.Bucket(bSessions).Delete([]byte(id))
	})
	if err != nil {
		return n, err
	}
	// An entry of the session that reaches memory after this is skipped by the flush, which
	// finds it gone from unindexed, and by Search, which finds no session.
	b.mu.Lock()
	for k, e := range b.pending {
		if e.sid == id {
			b.dropLocked(k)
		}
	}
	b.mu.Unlock()
	return n, nil
}

// Append implements Store. The whole batch is one bbolt transaction, which concurrent appends
// to other sessions may share (group commit); it may run again, so it starts from scratch. A call
// with boltstore.DeferHeader is applied at once and made durable by the file's next commit
// (Group.Defer).
func (b *BoltStore) Append(ctx context.Context, userID, sessionID string, batch []AppendItem, expectedLastSeq *int64) (*AppendResult, error) {
	out, _, err := b.appendLoad(ctx, userID, sessionID, batch, expectedLastSeq, nil)
	return out, err
}

// contextWindow is what AppendLoad loads with the batch.
type contextWindow struct{ turns, maxEvicted int }

// appendLoad appends the batch and, when w is set, loads the context in the same transaction.
func (b *BoltStore) appendLoad(ctx context.Context, userID, sessionID string, batch []AppendItem, expectedLastSeq *int64, w *contextWindow) (*AppendResult, *ContextData, error) {
	var out *AppendResult
	var d *ContextData
	var entries []*pendingEntry
	run := func(tx *bolt.Tx, batch []AppendItem, raws [][]byte) (*AppendResult, *ContextData, []*pendingEntry, error) {
		out, entries, err := appendTx(tx, userID, sessionID, batch, expectedLastSeq, raws)
		if err != nil || w == nil {
			return out, nil, entries, err
		}
		d, err := b.loadContextTx(tx, sessionID, w.turns, w.maxEvicted)
		return out, d, entries, err
	}
	var err error
	if boltstore.DeferRequested(ctx) {
		// The write may be applied again after this returns (Group.Defer), rarely (another
		// write failed in the same open transaction), when the caller owns the messages it got
		// back: it is applied again from the encodings the first run stored (raws), decoded
		// only then. A message the first run found already stored (its client id known) is not
		// handed back, and is applied again as it is.
		raws := make([][]byte, len(batch))
		err = b.group.Defer(func(tx *bolt.Tx, again bool) error {
			if again {
				copied := make([]AppendItem, len(batch))
				for i, it := range batch {
					copied[i] = it
					if raws[i] == nil {
						continue
					}
					m := &sessionv1.Message{}
					if err := proto.Unmarshal(raws[i], m); err != nil {
						return fmt.Errorf("decode message: %w", err)
					}
					copied[i].Message = m
				}
				_, _, _, err := run(tx, copied, nil)
				return err
			}
			var err error
			out, d, entries, err = run(tx, batch, raws)
			return err
		})
	} else {
		err = b.group.Update(func(tx *bolt.Tx) error {
			var err error
			out, entries, err = appendTx(tx, userID, sessionID, batch, expectedLastSeq, nil)
			return err
		})
		if err == nil && w != nil {
			// Read after the commit, outside the writer's transaction.
			d, err = b.LoadContext(ctx, sessionID, w.turns, w.maxEvicted)
			if err != nil {
				b.addPending(entries)
				return nil, nil, err
			}
		}
	}
	if err != nil {
		return nil, nil, err
	}
	b.addPending(entries)
	return out, d, nil
}

// appendTx is Append's transaction. When raws is not nil (len(batch) long), raws[i] is set to
// the stored encoding of each message it writes.
func appendTx(tx *bolt.Tx, userID, sessionID string, batch []AppendItem, expectedLastSeq *int64, raws [][]byte) (*AppendResult, []*pendingEntry, error) {
	out := &AppendResult{Messages: make([]*sessionv1.Message, len(batch))}
	var entries []*pendingEntry
	s, err := getSession(tx, sessionID)
	if err != nil {
		return nil, nil, err
	}
	ab := openAppendBuckets(tx, sessionID)
	fresh, err := ab.known(batch, out)
	if err != nil {
		return nil, nil, err
	}
	st := s.GetState()
	if fresh > 0 && expectedLastSeq != nil && *expectedLastSeq != st.GetLastSeq() {
		return nil, nil, &ConflictError{Expected: *expectedLastSeq, Actual: st.GetLastSeq()}
	}
	if fresh == 0 {
		out.State = st
		return out, nil, nil
	}
	oldKey := userSessionKeyOf(s)
	for i, it := range batch {
		if out.Messages[i] != nil {
			continue
		}
		e, raw, err := ab.put(st, userID, sessionID, it)
		if err != nil {
			return nil, nil, err
		}
		if raws != nil {
			raws[i] = raw
		}
		if e != nil {
			entries = append(entries, e)
		}
		out.Messages[i] = it.Message
	}
	st.UpdatedAt = timestamppb.Now()
	if err := tx.Bucket(bUserSessions).Delete(oldKey); err != nil {
		return nil, nil, err
	}
	if err := tx.Bucket(bUserSessions).Put(userSessionKeyOf(s), present); err != nil {
		return nil, nil, err
	}
	out.State = st
	return out, entries, putSession(tx, s)
}

// appendBuckets are the buckets an Append writes in one transaction.
type appendBuckets struct {
	sessionParts              // the session's
	unindexed    *bolt.Bucket // the store's entries not yet in the search index
}

func openAppendBuckets(tx *bolt.Tx, sessionID string) appendBuckets {
	sb := tx.Bucket(sessionBucketName(sessionID))
	// Each part's keys are appended in key order: messages, turn index and sticky marks by seq,
	// and the client ids of the orchestrator's writes, which begin with the turn's id (a ULID).
	// Full pages instead of bbolt's half-full splits halve the pages a long session's writes
	// walk and copy, and a split leaves the page that takes the next writes nearly empty, so
	// each commit copies fewer keys.
	sb.FillPercent = appendFillPercent
	return appendBuckets{sessionParts: partsOf(sb), unindexed: tx.Bucket(bUnindexed)}
}

// known fills out.Messages with the stored message of each batch item whose client id was
// appended before, counting them as deduplicated, and returns how many items are new.
func (ab appendBuckets) known(batch []AppendItem, out *AppendResult) (fresh int, err error) {
	for i, it := range batch {
		cid := it.Message.GetClientId()
		if cid == "" {
			fresh++
			continue
		}
		if v := ab.cids.Get([]byte(cid)); v != nil {
			m := &sessionv1.Message{}
			if err := proto.Unmarshal(ab.msgs.Get(v), m); err != nil {
				return 0, fmt.Errorf("decode message: %w", err)
			}
			out.Messages[i] = m
			out.Deduplicated++
			continue
		}
		fresh++
	}
	return fresh, nil
}

// put gives it.Message the session's next seq and writes it with its client id, turn and
// sticky marks, counting it in st; it returns the entry queued for the search index, or nil
// when the item has no terms, and the message's stored encoding (which bbolt holds until the
// commit: it must not be changed).
func (ab appendBuckets) put(st *sessionv1.SessionState, userID, sessionID string, it AppendItem) (*pendingEntry, []byte, error) {
	m := it.Message
	st.LastSeq++
	m.Seq = st.GetLastSeq()
	raw, err := proto.Marshal(m)
	if err != nil {
		return nil, nil, err
	}
	k := seqKey(m.GetSeq())
	if err := ab.msgs.Put(k, raw); err != nil {
		return nil, nil, err
	}
	if cid := m.GetClientId(); cid != "" {
		if err := ab.cids.Put([]byte(cid), k); err != nil {
			return nil, nil, err
		}
	}
	if m.GetRole() == sessionv1.Role_ROLE_USER {
		st.TurnCount++
		if err := ab.turns.Put(k, present); err != nil {
			return nil, nil, err
		}
	}
	if m.GetSticky() {
		if err := ab.sticky.Put(k, present); err != nil {
			return nil, nil, err
		}
	}
	var e *pendingEntry
	if len(it.Terms) > 0 {
		key, err := ab.unindexed.NextSequence()
		if err != nil {
			return nil, nil, err
		}
		e = &pendingEntry{key: key, uid: userID, sid: sessionID, seq: m.GetSeq(), terms: slices.Clone(it.Terms)}
		if err := ab.unindexed.Put(seqKey(int64(key)), encodePending(e)); err != nil {
			return nil, nil, err
		}
	}
	st.MessageCount++
	st.TokenCount += int64(m.GetTokenCount())
	return e, raw, nil
}

// messageRange returns the messages with from <= seq <= to, decoded through ds (nil: decoded
// anew).
func messageRange(msgs part, from, to int64, ds *decodedSession) ([]*sessionv1.Message, error) {
	var out []*sessionv1.Message
	c := msgs.Cursor()
	for k, v := c.Seek(seqKey(max(from, 1))); k != nil && keySeq(k) <= to; k, v = c.Next() {
		m, err := ds.decode(keySeq(k), v)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// ListMessages implements Store.
func (b *BoltStore) ListMessages(_ context.Context, sessionID string, afterSeq int64, limit int) ([]*sessionv1.Message, error) {
	var out []*sessionv1.Message
	err := b.db.View(func(tx *bolt.Tx) error {
		sb := tx.Bucket(sessionBucketName(sessionID))
		if sb == nil {
			return ErrNotFound
		}
		var err error
		out, err = messageRange(partsOf(sb).msgs, afterSeq+1, afterSeq+int64(limit), nil)
		return err
	})
	return out, err
}

// AppendLoad implements Store: the context is read from the file right after the commit (in
// process there is no round trip to save), or in the transaction of a deferred append.
func (b *BoltStore) AppendLoad(ctx context.Context, userID, sessionID string, batch []AppendItem, expectedLastSeq *int64, turns, maxEvicted int) (*AppendResult, *ContextData, error) {
	return b.appendLoad(ctx, userID, sessionID, batch, expectedLastSeq, &contextWindow{turns, maxEvicted})
}

// LoadContext implements Store. It walks the turn index backwards from its end, so it reads only
// the window, the sticky messages and the capped evicted range.
func (b *BoltStore) LoadContext(_ context.Context, sessionID string, turns, maxEvicted int) (*ContextData, error) {
	var d *ContextData
	err := b.db.View(func(tx *bolt.Tx) error {
		var err error
		d, err = b.loadContextTx(tx, sessionID, turns, maxEvicted)
		return err
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// loadContextTx is LoadContext's reading, in tx. Its messages come from the decoded cache where
// their stored bytes are unchanged.
func (b *BoltStore) loadContextTx(tx *bolt.Tx, sessionID string, turns, maxEvicted int) (*ContextData, error) {
	d := &ContextData{}
	ds := b.decoded.take(sessionID)
	err := func() error {
		s, err := getSession(tx, sessionID)
		if err != nil {
			return err
		}
		d.Session = s
		if raw := tx.Bucket(bSummaries).Get([]byte(sessionID)); raw != nil {
			m := &sessionv1.Message{}
			if err := proto.Unmarshal(raw, m); err != nil {
				return fmt.Errorf("decode summary: %w", err)
			}
			d.Summary = summaryFromMessage(m)
		}
		ps := partsOf(tx.Bucket(sessionBucketName(sessionID)))
		msgs := ps.msgs
		start := int64(1)
		c := ps.turns.Cursor()
		n := 0
		for k, _ := c.Last(); k != nil; k, _ = c.Prev() {
			n++
			if n == turns {
				start = keySeq(k)
			}
			if n > turns {
				break
			}
		}
		if n <= turns {
			start = 1
		}
		last := s.GetState().GetLastSeq()
		if d.Window, err = messageRange(msgs, start, last, ds); err != nil {
			return err
		}
		sc := ps.sticky.Cursor()
		for k, _ := sc.First(); k != nil && keySeq(k) < start; k, _ = sc.Next() {
			m, err := ds.decode(keySeq(k), msgs.Get(k))
			if err != nil {
				return fmt.Errorf("sticky: %w", err)
			}
			d.Sticky = append(d.Sticky, m)
		}
		from := int64(1)
		if d.Summary != nil {
			from = d.Summary.ThroughSeq + 1
		}
		to := min(start-1, from+int64(maxEvicted)-1)
		if d.Evicted, err = messageRange(msgs, from, to, ds); err != nil {
			return err
		}
		d.EvictedMore = to < start-1
		return nil
	}()
	if err != nil {
		return nil, err
	}
	b.decoded.keep(ds)
	return d, nil
}

// UpdateSummary implements Store; like Append, it may be deferred (boltstore.DeferHeader).
func (b *BoltStore) UpdateSummary(ctx context.Context, sessionID string, sum *Summary) (int64, error) {
	var prev int64
	if boltstore.DeferRequested(ctx) {
		err := b.group.Defer(func(tx *bolt.Tx, again bool) error {
			p, err := updateSummaryTx(tx, sessionID, sum)
			if !again {
				prev = p
			}
			return err
		})
		return prev, err
	}
	err := b.group.Update(func(tx *bolt.Tx) error {
		var err error
		prev, err = updateSummaryTx(tx, sessionID, sum)
		return err
	})
	return prev, err
}

// updateSummaryTx is UpdateSummary's transaction.
func updateSummaryTx(tx *bolt.Tx, sessionID string, sum *Summary) (int64, error) {
	s, err := getSession(tx, sessionID)
	if err != nil {
		return 0, err
	}
	st := s.GetState()
	prev := st.GetSummaryThroughSeq()
	if sum.ThroughSeq < prev {
		return prev, summaryBehind(prev)
	}
	if sum.ThroughSeq > st.GetLastSeq() {
		return prev, summaryAhead(st.GetLastSeq())
	}
	raw, err := proto.Marshal(summaryMessage(sum))
	if err != nil {
		return prev, err
	}
	if err := tx.Bucket(bSummaries).Put([]byte(sessionID), raw); err != nil {
		return prev, err
	}
	st.SummaryThroughSeq = sum.ThroughSeq
	return prev, putSession(tx, s)
}

// Search implements Store. It walks the postings of the first term newest first, merged with the
// pending postings of that term, and keeps the messages that have every other term too.
func (b *BoltStore) Search(_ context.Context, userID string, terms []string, sessionID string, neighbors, limit int) ([]*SearchResult, error) {
	// Pending entries are read before the transaction starts: an entry a flush drops from
	// memory after this was committed to index before it, so the transaction sees it there
	// (and the merge takes it once); an entry dropped before this is in index already.
	pend, mine := b.pendingOf(userID, terms[0], sessionID)
	var out []*SearchResult
	err := b.db.View(func(tx *bolt.Tx) error {
		lists := tx.Bucket(bPostings)
		keep := func(sid string, seq int64) error {
			if sessionID != "" && sid != sessionID {
				return nil
			}
			e := mine[msgRef{sid, seq}]
			for _, t := range terms[1:] {
				if !hasPosting(lists, userID, t, sid, seq) && (e == nil || !slices.Contains(e.terms, t)) {
					return nil
				}
			}
			res, err := hitTx(tx, sid, seq, neighbors, len(terms))
			if res != nil {
				out = append(out, res)
			}
			return err
		}
		w := newPostingWalk(lists.Cursor(), postingPrefix(userID, terms[0]))
		have := w.next()
		for len(out) < limit {
			if len(pend) > 0 && (!have || bytes.Compare(pend[0].tail, w.tail) >= 0) {
				p := pend[0]
				pend = pend[1:]
				// Equal: flushed since it was read; the list's copy is taken below.
				if !have || !bytes.Equal(p.tail, w.tail) {
					if err := keep(p.sid, p.seq); err != nil {
						return err
					}
				}
				continue
			}
			if !have {
				break
			}
			if err := keep(w.sid, w.seq); err != nil {
				return err
			}
			have = w.next()
		}
		return nil
	})
	return out, err
}

// postingWalk walks the postings of one user's term newest first: newest sessions (ULIDs sort by
// time) and highest seqs first, each list from its end.
type postingWalk struct {
	c      *bolt.Cursor
	prefix []byte
	k, v   []byte // the key the cursor is at, and its value
	list   []byte // what is left of the current list
	block  uint64
	// sid, seq and tail ("sid 0x00 seq", as pendingHit's) are the posting next returned.
	sid  string
	seq  int64
	tail []byte
}

func newPostingWalk(c *bolt.Cursor, prefix []byte) *postingWalk {
	w := &postingWalk{c: c, prefix: prefix}
	// Seek past the prefix's end, then walk back.
	end := append(bytes.Clone(prefix[:len(prefix)-1]), 1)
	if w.k, w.v = c.Seek(end); w.k == nil {
		w.k, w.v = c.Last()
	} else {
		w.k, w.v = c.Prev()
	}
	return w
}

// next moves to the next posting and reports whether there is one.
func (w *postingWalk) next() bool {
	for len(w.list) == 0 {
		if w.k == nil || !bytes.HasPrefix(w.k, w.prefix) {
			return false
		}
		rest, v := w.k[len(w.prefix):], w.v
		w.k, w.v = w.c.Prev()
		if len(rest) < 9 {
			continue
		}
		w.sid, w.block, w.list = string(rest[:len(rest)-9]), binary.BigEndian.Uint64(rest[len(rest)-8:]), v
		w.tail = append(w.tail[:0], rest[:len(rest)-8]...)
	}
	off := w.list[len(w.list)-1]
	w.list = w.list[:len(w.list)-1]
	w.seq = blockSeq(w.block, off)
	w.tail = binary.BigEndian.AppendUint64(w.tail[:len(w.sid)+1], uint64(w.seq))
	return true
}

// hitTx reads a hit of Search in tx: the message seq of sid with its neighbours; nil when the
// message is gone.
func hitTx(tx *bolt.Tx, sid string, seq int64, neighbors, matched int) (*SearchResult, error) {
	sb := tx.Bucket(sessionBucketName(sid))
	if sb == nil {
		return nil, nil
	}
	msgs, err := messageRange(partsOf(sb).msgs, seq-int64(neighbors), seq+int64(neighbors), nil)
	if err != nil {
		return nil, err
	}
	return splitNeighbors(sid, seq, msgs, matched), nil
}

type msgRef struct {
	sid string
	seq int64
}

// pendingHit is a pending message that has a query's first term.
type pendingHit struct {
	sid  string
	seq  int64
	tail []byte // sid 0x00 seq, as in its index key
}

// pendingOf returns the pending messages of userID (in sessionID, when set) that have term, in
// the order Search walks the index (highest tail first), and all the user's pending entries
// of those sessions by message.
func (b *BoltStore) pendingOf(userID, term, sessionID string) ([]pendingHit, map[msgRef]*pendingEntry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var hits []pendingHit
	var mine map[msgRef]*pendingEntry
	for _, e := range b.pending {
		if e.uid != userID || (sessionID != "" && e.sid != sessionID) {
			continue
		}
		if mine == nil {
			mine = map[msgRef]*pendingEntry{}
		}
		mine[msgRef{e.sid, e.seq}] = e
		if slices.Contains(e.terms, term) {
			tail := append(append([]byte(e.sid), 0), seqKey(e.seq)...)
			hits = append(hits, pendingHit{sid: e.sid, seq: e.seq, tail: tail})
		}
	}
	slices.SortFunc(hits, func(x, y pendingHit) int { return bytes.Compare(y.tail, x.tail) })
	return hits, mine
}
