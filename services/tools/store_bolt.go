package tools

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/lease"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

var (
	bucketTools = []byte("tools")
	bucketMeta  = []byte("meta")
	keyRevision = []byte("revision")
	// bucketOldCalls held the idempotency records before they moved onto internal/lease.
	bucketOldCalls = []byte("calls")
)

// bucketIdempotency holds the idempotency records (internal/lease).
const bucketIdempotency = "idempotency"

// BoltStore is the embedded Store: one bbolt file in the data directory. bbolt allows one
// process per file, so the idempotency claims it keeps are exact for that process.
type BoltStore struct {
	db     *bolt.DB
	leases *lease.Bolt
	stop   chan struct{}
	done   chan struct{}

	mu      sync.Mutex // guards decoded
	decoded map[string]decodedTool
	// gen counts the writes of tool records, bumped after each commits. This store is the only
	// writer of its file (bbolt allows one process per file; the registry's records of other
	// sources reach it through PutTool and DeleteTool too), so a record decoded while gen was
	// what it still is has not changed since.
	gen atomic.Uint64
}

// decodedTool is a tool record and its decoding, which ExecuteTool reuses while the record is
// unchanged; gen is the store's write count before the transaction that read raw.
type decodedTool struct {
	raw []byte
	st  *StoredTool
	gen uint64
}

// maxDecodedTools bounds the decoded records kept; past it the cache starts over.
const maxDecodedTools = 4096

// OpenBoltStore opens or creates the file. A second process opening it fails after a second
// instead of waiting forever.
func OpenBoltStore(path string) (*BoltStore, error) {
	db, err := boltstore.Open(path, nil, bucketTools, bucketMeta)
	if err != nil {
		return nil, fmt.Errorf("tools store: %w", err)
	}
	leases, err := lease.NewBolt(db, bucketIdempotency)
	if err == nil {
		err = boltstore.DropBuckets(db, bucketOldCalls)
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("tools store: %w", err)
	}
	s := &BoltStore{db: db, leases: leases, stop: make(chan struct{}), done: make(chan struct{})}
	go s.sweep(10 * time.Minute)
	return s, nil
}

// Close stops the expiry sweep and closes the file.
func (s *BoltStore) Close() error {
	close(s.stop)
	<-s.done
	return s.db.Close()
}

// sweep deletes expired idempotency records now and then; reads ignore them meanwhile.
func (s *BoltStore) sweep(every time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			_, _ = s.leases.Sweep()
		}
	}
}

// Leases implements Store.
func (s *BoltStore) Leases() lease.Store { return s.leases }

// encodeTool stores the hash length, the hash, then the Tool message.
func encodeTool(t *toolsv1.Tool, hash string) ([]byte, error) {
	pb, err := proto.MarshalOptions{Deterministic: true}.Marshal(t)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 1+len(hash)+len(pb))
	out = append(out, byte(len(hash)))
	out = append(out, hash...)
	return append(out, pb...), nil
}

func decodeTool(v []byte) (*StoredTool, error) {
	if len(v) < 1 || len(v) < 1+int(v[0]) {
		return nil, errors.New("corrupt tool record")
	}
	n := int(v[0])
	t := &toolsv1.Tool{}
	if err := proto.Unmarshal(v[1+n:], t); err != nil {
		return nil, fmt.Errorf("corrupt tool record: %w", err)
	}
	return &StoredTool{Tool: t, Hash: string(v[1 : 1+n])}, nil
}

func bumpRevision(tx *bolt.Tx) error {
	b := tx.Bucket(bucketMeta)
	var rev uint64
	if v := b.Get(keyRevision); len(v) == 8 {
		rev = binary.BigEndian.Uint64(v)
	}
	return b.Put(keyRevision, binary.BigEndian.AppendUint64(nil, rev+1))
}

// PutTool implements Store.
func (s *BoltStore) PutTool(ctx context.Context, t *toolsv1.Tool, hash string, now time.Time, replaceOthers bool) (*toolsv1.Tool, bool, error) {
	if len(hash) > 255 {
		return nil, false, errors.New("hash too long")
	}
	var stored *toolsv1.Tool
	changed := false
	defer s.gen.Add(1) // after the commit (or the rollback)
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTools)
		name := []byte(t.GetSpec().GetName())
		next := proto.Clone(t).(*toolsv1.Tool)
		ts := timestamppb.New(now)
		if v := b.Get(name); v != nil {
			cur, err := decodeTool(v)
			if err != nil {
				return err
			}
			if cur.Hash == hash && cur.Tool.GetSource() == t.GetSource() {
				stored = cur.Tool
				return nil
			}
			if src := cur.Tool.GetSource(); src != t.GetSource() && (!replaceOthers || src == SourceBuiltin) {
				return &OwnedError{Name: t.GetSpec().GetName(), Source: src}
			}
			next.Version = cur.Tool.GetVersion()
			if cur.Hash != hash {
				next.Version++
			}
			next.CreatedAt = cur.Tool.GetCreatedAt()
		} else {
			next.Version = 1
			next.CreatedAt = ts
		}
		next.UpdatedAt = ts
		enc, err := encodeTool(next, hash)
		if err != nil {
			return err
		}
		if err := b.Put(name, enc); err != nil {
			return err
		}
		stored, changed = next, true
		return bumpRevision(tx)
	})
	var owned *OwnedError
	if errors.As(err, &owned) {
		return nil, false, owned
	}
	if err != nil {
		return nil, false, fmt.Errorf("store tool: %w", err)
	}
	return stored, changed, nil
}

// GetTool implements Store.
func (s *BoltStore) GetTool(ctx context.Context, name string) (*StoredTool, error) {
	var out *StoredTool
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketTools).Get([]byte(name))
		if v == nil {
			return ErrNotFound
		}
		var err error
		out, err = decodeTool(v)
		return err
	})
	return out, err
}

// getToolShared is GetTool for a caller that only reads the tool (ExecuteTool): a record that
// is byte for byte the one decoded last time is not decoded again (its proto holds the schemas,
// and decoding it was a tenth of an MCP call's CPU in the service). Any write changes the record
// (version, updated_at), so a changed tool is always decoded afresh. While no tool was written
// since a record was read, it is not read again: no transaction (a bbolt read transaction was a
// twentieth of the service's CPU of an MCP call).
func (s *BoltStore) getToolShared(ctx context.Context, name string) (*StoredTool, error) {
	// Read before the transaction: a write that commits during it leaves the entry older than
	// gen, so it is read again next time.
	gen := s.gen.Load()
	s.mu.Lock()
	d, ok := s.decoded[name]
	s.mu.Unlock()
	if ok && d.gen == gen {
		return d.st, nil
	}
	var out *StoredTool
	err := s.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketTools).Get([]byte(name))
		if v == nil {
			return ErrNotFound
		}
		if ok && bytes.Equal(d.raw, v) {
			s.mu.Lock()
			if s.decoded[name].st == d.st {
				s.decoded[name] = decodedTool{raw: d.raw, st: d.st, gen: gen}
			}
			s.mu.Unlock()
			out = d.st
			return nil
		}
		st, err := decodeTool(v)
		if err != nil {
			return err
		}
		s.mu.Lock()
		if s.decoded == nil || len(s.decoded) >= maxDecodedTools {
			s.decoded = map[string]decodedTool{}
		}
		s.decoded[name] = decodedTool{raw: bytes.Clone(v), st: st, gen: gen} // v is valid only in the transaction
		s.mu.Unlock()
		out = st
		return nil
	})
	return out, err
}

// DeleteTool implements Store.
func (s *BoltStore) DeleteTool(ctx context.Context, name, source string) error {
	defer s.gen.Add(1) // after the commit (or the rollback)
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTools)
		v := b.Get([]byte(name))
		if v == nil {
			return ErrNotFound
		}
		if source != "" {
			cur, err := decodeTool(v)
			if err != nil {
				return err
			}
			if cur.Tool.GetSource() != source {
				return &OwnedError{Name: name, Source: cur.Tool.GetSource()}
			}
		}
		if err := b.Delete([]byte(name)); err != nil {
			return err
		}
		return bumpRevision(tx)
	})
}

// ListTools implements Store.
func (s *BoltStore) ListTools(ctx context.Context) ([]*StoredTool, int64, error) {
	var out []*StoredTool
	var rev int64
	err := s.db.View(func(tx *bolt.Tx) error {
		rev = readRevision(tx)
		return tx.Bucket(bucketTools).ForEach(func(k, v []byte) error {
			st, err := decodeTool(v)
			if err != nil {
				return err
			}
			out = append(out, st)
			return nil
		})
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Tool.GetSpec().GetName() < out[j].Tool.GetSpec().GetName() })
	return out, rev, err
}

func readRevision(tx *bolt.Tx) int64 {
	if v := tx.Bucket(bucketMeta).Get(keyRevision); len(v) == 8 {
		return int64(binary.BigEndian.Uint64(v))
	}
	return 0
}

// Revision implements Store.
func (s *BoltStore) Revision(ctx context.Context) (int64, error) {
	var rev int64
	err := s.db.View(func(tx *bolt.Tx) error {
		rev = readRevision(tx)
		return nil
	})
	return rev, err
}
