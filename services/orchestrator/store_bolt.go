package orchestrator

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/boltstore"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

var (
	bucketTasks = []byte("tasks")
	bucketTurns = []byte("turns")
)

// BoltStore keeps records in a bbolt file (monolithic mode): bucket "tasks" maps a session to
// its task state as JSON, bucket "turns" maps a turn id to an 8-byte expiry (Unix ms) followed by
// the protobuf record.
type BoltStore struct {
	db  *bolt.DB
	now func() time.Time

	// Session leases live in memory: the embedded store serves one process.
	leaseMu sync.Mutex
	leases  map[string]lease
}

type lease struct {
	holder  string
	expires time.Time
}

// OpenBoltStore opens or creates the file; a second process opening it fails after a second.
func OpenBoltStore(path string) (*BoltStore, error) {
	db, err := boltstore.Open(path, nil, bucketTasks, bucketTurns)
	if err != nil {
		return nil, err
	}
	s := &BoltStore{db: db, now: time.Now, leases: map[string]lease{}}
	if err := s.pruneTurns(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the file.
func (s *BoltStore) Close() error { return s.db.Close() }

// pruneTurns deletes expired turn records; called at open, expired records are otherwise
// skipped on read.
func (s *BoltStore) pruneTurns() error {
	now := s.now().UnixMilli()
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTurns)
		var stale [][]byte
		err := b.ForEach(func(k, v []byte) error {
			if len(v) < 8 || int64(binary.BigEndian.Uint64(v)) < now {
				stale = append(stale, append([]byte(nil), k...))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range stale {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
}

func loadTask(b *bolt.Bucket, sid string) (TaskState, error) {
	var st TaskState
	if raw := b.Get([]byte(sid)); raw != nil {
		if err := json.Unmarshal(raw, &st); err != nil {
			return st, fmt.Errorf("task state of %s: %w", sid, err)
		}
	}
	return st, nil
}

func putTask(b *bolt.Bucket, sid string, st TaskState) error {
	if len(st.Done) == 0 && len(st.Pending) == 0 {
		return b.Delete([]byte(sid))
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return err
	}
	return b.Put([]byte(sid), raw)
}

// TaskState implements Store.
func (s *BoltStore) TaskState(_ context.Context, sid string) (TaskState, error) {
	var st TaskState
	err := s.db.View(func(tx *bolt.Tx) error {
		var err error
		st, err = loadTask(tx.Bucket(bucketTasks), sid)
		return err
	})
	return st, err
}

// AddSteps implements Store.
func (s *BoltStore) AddSteps(_ context.Context, sid string, steps []Step, keep int) error {
	if len(steps) == 0 {
		return nil
	}
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTasks)
		st, err := loadTask(b, sid)
		if err != nil {
			return err
		}
		st.Done = append(st.Done, steps...)
		if keep > 0 && len(st.Done) > keep {
			st.Done = append([]Step(nil), st.Done[len(st.Done)-keep:]...)
		}
		return putTask(b, sid, st)
	})
}

// SetPending implements Store.
func (s *BoltStore) SetPending(_ context.Context, sid string, pending []Pending) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketTasks)
		st, err := loadTask(b, sid)
		if err != nil {
			return err
		}
		st.Pending = pending
		return putTask(b, sid, st)
	})
}

// PutTurn implements Store.
func (s *BoltStore) PutTurn(_ context.Context, turn *orchestratorv1.Turn, ttl time.Duration) error {
	raw, err := proto.Marshal(turn)
	if err != nil {
		return err
	}
	v := make([]byte, 8, 8+len(raw))
	binary.BigEndian.PutUint64(v, uint64(s.now().Add(ttl).UnixMilli()))
	v = append(v, raw...)
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTurns).Put([]byte(turn.GetId()), v)
	})
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

// DeleteSession implements Store.
func (s *BoltStore) DeleteSession(_ context.Context, sid string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketTasks).Delete([]byte(sid))
	})
}

// LockSession implements Store.
func (s *BoltStore) LockSession(_ context.Context, sid, holder string, ttl time.Duration) (bool, string, error) {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	now := s.now()
	if l, ok := s.leases[sid]; ok && l.holder != holder && now.Before(l.expires) {
		return false, l.holder, nil
	}
	s.leases[sid] = lease{holder: holder, expires: now.Add(ttl)}
	return true, holder, nil
}

// UnlockSession implements Store.
func (s *BoltStore) UnlockSession(_ context.Context, sid, holder string) error {
	s.leaseMu.Lock()
	defer s.leaseMu.Unlock()
	if s.leases[sid].holder == holder {
		delete(s.leases, sid)
	}
	return nil
}
