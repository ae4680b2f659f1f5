package memory

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/lease"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// Bucket names of the embedded store.
var (
	bucketMeta     = []byte("meta")
	bucketEpisodic = []byte("episodic")
	bucketSemantic = []byte("semantic")
	bucketBehavior = []byte("behavior")
	bucketHabits   = []byte("habits")
	// bucketOldTurns held the turn claims and records before they moved onto internal/lease.
	bucketOldTurns = []byte("turns")
	bucketUsers    = []byte("users")
	// bucketClaims holds the turn records (internal/lease, NewBoltRecords: claims are held in
	// memory, since this process is the file's only user, and records written a second late,
	// in one commit with the others made meanwhile), keyed by itemKey.
	bucketClaims = []byte("turn-claims")
)

// BoltStore is the embedded (monolithic) backend: one bbolt file holding both tiers, counters,
// turn records and the user registry, with an in-process vector index per tier rebuilt from the
// file when it opens. Only one process can open the file (bbolt's file lock, with a timeout of
// one second, so a second process fails clearly).
type BoltStore struct {
	db  *bolt.DB
	now func() time.Time
	ep  *BoltTier
	sem *BoltTier

	// wmu orders the tiers' writes with their index updates: it is held from before a write
	// transaction until the index reflects it, so the index always follows the file's order
	// of commits (bbolt serializes writers anyway, so it costs no concurrency). Lock order: wmu,
	// then bbolt's writer lock, then a tier's index lock (vectorIndex.mu, a leaf).
	wmu sync.Mutex

	claims
	// records is claims.turns: the turn records, written about a second after they are made
	// (lease.NewBoltRecords) and flushed by Close.
	records *lease.Bolt

	// afterCommit, when set (tests), runs between a put's commit and its index update.
	afterCommit func()
}

// BoltOptions tune OpenBoltStore.
type BoltOptions struct {
	// EpisodicTTL is the lifetime of an episodic memory after its last write or recall.
	EpisodicTTL time.Duration
	// Embedder names the embedder the vectors come from; a file written by another one is
	// refused, since its vectors would be meaningless.
	Embedder string
	// Dimension is the embedder's vector size.
	Dimension int
	// NoSync skips fsync per write (benchmarks only: a crash can lose recent writes).
	NoSync bool
	// Now replaces the clock (tests).
	Now func() time.Time
}

// OpenBoltStore opens or creates the file at path.
func OpenBoltStore(path string, o BoltOptions) (*BoltStore, error) {
	if o.Dimension < 0 {
		return nil, errors.New("memory store: dimension must not be negative")
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	db, err := boltstore.Open(path, &bolt.Options{NoSync: o.NoSync},
		bucketMeta, bucketEpisodic, bucketSemantic, bucketBehavior, bucketHabits, bucketUsers)
	if err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
	}
	turns, err := lease.NewBoltRecords(db, string(bucketClaims))
	if err == nil {
		err = boltstore.DropBuckets(db, bucketOldTurns)
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("memory store: %w", err)
	}
	s := &BoltStore{db: db, now: o.Now, records: turns, claims: claims{
		turns:   turns,
		turnKey: func(userID, turnID string) string { return string(itemKey(userID, turnID)) },
		locks:   lease.NewMemory(),
	}}
	s.ep = &BoltTier{s: s, bucket: bucketEpisodic, ttl: o.EpisodicTTL, idx: newVectorIndex(o.Dimension)}
	s.sem = &BoltTier{s: s, bucket: bucketSemantic, idx: newVectorIndex(o.Dimension)}
	err = db.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		want := fmt.Sprintf("%s/%d", o.Embedder, o.Dimension)
		got := meta.Get([]byte("embedder"))
		// A file of the hashed lexical embedder holds no vectors worth keeping: lexical vectors
		// are computed from the records themselves now, so it is read without them.
		if got != nil && string(got) != want && !(o.Dimension == 0 && bytes.HasPrefix(got, []byte("lexical-hash-"))) {
			return fmt.Errorf("memory store %s holds vectors of embedder %s, but the configured embedder is %s: use another data directory or the same embedder", path, got, want)
		}
		return meta.Put([]byte("embedder"), []byte(want))
	})
	if err == nil {
		err = s.load()
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// load rebuilds both vector indexes from the file.
func (s *BoltStore) load() error {
	return s.db.View(func(tx *bolt.Tx) error {
		for _, t := range []*BoltTier{s.ep, s.sem} {
			err := tx.Bucket(t.bucket).ForEach(func(k, v []byte) error {
				user, _, ok := splitKey(k)
				if !ok {
					return nil
				}
				e, err := decodeEntry(v)
				if err != nil {
					return fmt.Errorf("memory store: %w", err)
				}
				if len(e.Vector) != t.idx.dim {
					e.Vector = nil // a vector of the hashed lexical embedder (see OpenBoltStore)
				}
				t.idx.put(user, e.Memory, e.Vector)
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// Close closes the file.
func (s *BoltStore) Close() error {
	return errors.Join(s.records.Close(), s.db.Close())
}

// Episodic is the episodic tier.
func (s *BoltStore) Episodic() *BoltTier { return s.ep }

// Semantic is the semantic tier.
func (s *BoltStore) Semantic() *BoltTier { return s.sem }

// userKey is a length-prefixed user id, so no user's keys are a prefix of another's.
func userKey(userID string) []byte {
	b := make([]byte, 2, 2+len(userID))
	binary.BigEndian.PutUint16(b, uint16(len(userID)))
	return append(b, userID...)
}

func itemKey(userID, id string) []byte { return append(userKey(userID), id...) }

func splitKey(k []byte) (user, id string, ok bool) {
	if len(k) < 2 {
		return "", "", false
	}
	n := int(binary.BigEndian.Uint16(k))
	if len(k) < 2+n {
		return "", "", false
	}
	return string(k[2 : 2+n]), string(k[2+n:]), true
}

// forPrefix calls fn for every key of bucket b that starts with prefix.
func forPrefix(b *bolt.Bucket, prefix []byte, fn func(k, v []byte) error) error {
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// BoltTier is one tier of a BoltStore.
type BoltTier struct {
	s      *BoltStore
	bucket []byte
	ttl    time.Duration // 0: no TTL (semantic)
	idx    *vectorIndex
}

var _ TierStore = (*BoltTier)(nil)

func (t *BoltTier) stamp(m *memoryv1.Memory, now time.Time) {
	if t.ttl > 0 {
		m.ExpiresAt = ts(now.Add(t.ttl))
	} else {
		m.ExpiresAt = nil
	}
}

func (t *BoltTier) alive(m *memoryv1.Memory, now time.Time) bool {
	return m.GetExpiresAt() == nil || m.GetExpiresAt().AsTime().After(now)
}

// Put implements TierStore.
func (t *BoltTier) Put(_ context.Context, e Entry) error {
	if len(e.Vector) != t.idx.dim {
		return fmt.Errorf("memory store: vector of size %d, want %d", len(e.Vector), t.idx.dim)
	}
	e.Memory = cloneMemory(e.Memory)
	t.stamp(e.Memory, t.s.now())
	v, err := encodeEntry(e)
	if err != nil {
		return err
	}
	user := e.Memory.GetUserId()
	t.s.wmu.Lock()
	defer t.s.wmu.Unlock()
	if err := t.s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(t.bucket).Put(itemKey(user, e.Memory.GetId()), v)
	}); err != nil {
		return fmt.Errorf("memory store: %w", err)
	}
	if t.s.afterCommit != nil {
		t.s.afterCommit()
	}
	t.idx.put(user, e.Memory, e.Vector)
	return nil
}

func (t *BoltTier) get(tx *bolt.Tx, userID, id string) (Entry, error) {
	v := tx.Bucket(t.bucket).Get(itemKey(userID, id))
	if v == nil {
		return Entry{}, ErrNotFound
	}
	e, err := decodeEntry(v)
	if err != nil {
		return Entry{}, err
	}
	if !t.alive(e.Memory, t.s.now()) {
		return Entry{}, ErrNotFound
	}
	return e, nil
}

// Get implements TierStore.
func (t *BoltTier) Get(_ context.Context, userID, id string) (Entry, error) {
	var e Entry
	err := t.s.db.View(func(tx *bolt.Tx) error {
		var err error
		e, err = t.get(tx, userID, id)
		return err
	})
	return e, err
}

// Delete implements TierStore.
func (t *BoltTier) Delete(_ context.Context, userID, id string) (bool, error) {
	existed := false
	t.s.wmu.Lock()
	defer t.s.wmu.Unlock()
	err := t.s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(t.bucket)
		k := itemKey(userID, id)
		if v := b.Get(k); v != nil {
			if e, err := decodeEntry(v); err == nil && t.alive(e.Memory, t.s.now()) {
				existed = true
			}
			return b.Delete(k)
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("memory store: %w", err)
	}
	t.idx.remove(userID, id)
	return existed, nil
}

// Search implements TierStore. Lexical statistics are the user's in both tiers of the store,
// so the scores of the two tiers compare.
func (t *BoltTier) Search(_ context.Context, userID string, q SearchQuery) ([]Hit, error) {
	now := t.s.now()
	var idf []float32
	if !q.Lexical.empty() {
		var n int
		idf, n = t.s.idf(userID, q.Lexical.idx)
		q.MinLexical = lexicalFloor(q.MinLexical, n)
	}
	var floor float64
	if q.ContextPool {
		floor, q.MinLexical = q.MinLexical, 0
	}
	found := t.idx.search(userID, q, idf, now)
	if len(found) == 0 {
		return nil, nil
	}
	out := make([]Hit, 0, len(found))
	now = t.s.now()
	err := t.s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(t.bucket)
		for _, f := range found {
			v := b.Get(itemKey(userID, f.id))
			if v == nil {
				continue // deleted between the index read and this one
			}
			m, err := decodeMemory(v)
			if err != nil {
				return err
			}
			if !t.alive(m, now) {
				continue
			}
			out = append(out, Hit{Entry: Entry{Memory: m}, Similarity: f.sim, Floor: floor})
		}
		return nil
	})
	return out, err
}

// idf returns the IDF of each term over the user's memories in both tiers, and how many
// memories that is.
func (s *BoltStore) idf(userID string, terms []uint32) ([]float32, int) {
	n1, df1 := s.ep.idx.docFreq(userID, terms)
	n2, df2 := s.sem.idx.docFreq(userID, terms)
	out := make([]float32, len(terms))
	for i := range terms {
		out[i] = bm25IDF(n1+n2, df1[i]+df2[i])
	}
	return out, n1 + n2
}

// Scan implements TierStore.
func (t *BoltTier) Scan(_ context.Context, userID string, fn func(Entry) error) error {
	now := t.s.now()
	var entries []Entry
	err := t.s.db.View(func(tx *bolt.Tx) error {
		return forPrefix(tx.Bucket(t.bucket), userKey(userID), func(_, v []byte) error {
			e, err := decodeEntry(v)
			if err != nil {
				return err
			}
			if t.alive(e.Memory, now) {
				entries = append(entries, e)
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	// fn runs outside the read transaction, so it may write to the store.
	for _, e := range entries {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// BySubject implements TierStore.
func (t *BoltTier) BySubject(_ context.Context, userID, subject string) ([]Entry, error) {
	if subject == "" {
		return nil, nil
	}
	ids := t.idx.bySubject(userID, subject, t.s.now())
	var out []Entry
	err := t.s.db.View(func(tx *bolt.Tx) error {
		for _, id := range ids {
			e, err := t.get(tx, userID, id)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// Touch implements TierStore.
func (t *BoltTier) Touch(_ context.Context, userID string, ids []string, at time.Time) ([]string, error) {
	var touched []string
	var updated []*memoryv1.Memory
	t.s.wmu.Lock()
	defer t.s.wmu.Unlock()
	err := t.s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(t.bucket)
		for _, id := range ids {
			e, err := t.get(tx, userID, id)
			if errors.Is(err, ErrNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			e.Memory.LastRecalledAt = ts(at)
			e.Memory.RecallCount++
			t.stamp(e.Memory, t.s.now())
			v, err := encodeEntry(e)
			if err != nil {
				return err
			}
			if err := b.Put(itemKey(userID, id), v); err != nil {
				return err
			}
			touched = append(touched, id)
			updated = append(updated, e.Memory)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
	}
	for _, m := range updated {
		if m.GetExpiresAt() != nil {
			t.idx.setExpiry(userID, m.GetId(), m.GetExpiresAt().AsTime().UnixMilli())
		}
	}
	return touched, nil
}

// DeleteUser implements TierStore. Records past their TTL are removed too (they were still in
// the file) but not counted, as they were already gone to every reader.
func (t *BoltTier) DeleteUser(_ context.Context, userID string) (UserCounts, error) {
	var c UserCounts
	now := t.s.now()
	t.s.wmu.Lock()
	defer t.s.wmu.Unlock()
	err := t.s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(t.bucket)
		var keys [][]byte
		err := forPrefix(b, userKey(userID), func(k, v []byte) error {
			keys = append(keys, bytes.Clone(k))
			e, err := decodeEntry(v)
			if err != nil || !t.alive(e.Memory, now) {
				return nil
			}
			if live(e.Memory) {
				c.Live++
			} else {
				c.Expired++
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return UserCounts{}, fmt.Errorf("memory store: %w", err)
	}
	t.idx.removeUser(userID)
	return c, nil
}

// SweepExpired deletes records whose TTL has passed (Redis does this by itself) and returns
// how many.
func (t *BoltTier) SweepExpired(_ context.Context) (int64, error) {
	if t.ttl == 0 {
		return 0, nil
	}
	now := t.s.now()
	var n int64
	type gone struct{ user, id string }
	var removed []gone
	t.s.wmu.Lock()
	defer t.s.wmu.Unlock()
	err := t.s.db.Update(func(tx *bolt.Tx) error {
		removed = removed[:0]
		deleted, err := boltstore.DeleteWhere(tx.Bucket(t.bucket), func(k, v []byte) (bool, error) {
			e, err := decodeEntry(v)
			if err != nil || t.alive(e.Memory, now) {
				return false, nil
			}
			if u, id, ok := splitKey(k); ok {
				removed = append(removed, gone{u, id})
			}
			return true, nil
		})
		n = int64(deleted)
		return err
	})
	if err != nil {
		return 0, err
	}
	for _, g := range removed {
		t.idx.remove(g.user, g.id)
	}
	return n, nil
}

func randomToken() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// unixMs formats a time for Redis scores and payloads.
func unixMs(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }
