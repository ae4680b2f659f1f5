package memory

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// The embedded store's StateStore: behaviour counters, habits, turn records (leases in the file;
// their claims in memory), the user registry, and the maintenance lock (a lease in memory: one
// process holds the file), in the same bbolt file as the tiers (store_bolt.go).

var _ StateStore = (*BoltStore)(nil)

// AddUser implements StateStore.
func (s *BoltStore) AddUser(_ context.Context, userID string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketUsers).Put([]byte(userID), []byte{1})
	})
}

// Users implements StateStore.
func (s *BoltStore) Users(_ context.Context) ([]string, error) {
	var out []string
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketUsers).ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, err
}

// behaviorRec is the stored sliding window of one behaviour key.
type behaviorRec struct {
	Events []int64 `json:"events"` // unix ms
}

// CountBehavior implements StateStore.
func (s *BoltStore) CountBehavior(_ context.Context, userID, key string, at time.Time, window time.Duration, threshold int) (int64, bool, string, error) {
	var count int64
	var claim bool
	var habit string
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketBehavior)
		k := itemKey(userID, key)
		var rec behaviorRec
		if v := b.Get(k); v != nil {
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("behaviour record: %w", err)
			}
		}
		cut := at.Add(-window).UnixMilli()
		kept := rec.Events[:0]
		for _, e := range rec.Events {
			if e > cut {
				kept = append(kept, e)
			}
		}
		rec.Events = append(kept, at.UnixMilli())
		count = int64(len(rec.Events))
		v, err := json.Marshal(rec)
		if err != nil {
			return err
		}
		if err := b.Put(k, v); err != nil {
			return err
		}
		hb := tx.Bucket(bucketHabits)
		habit = string(hb.Get(k))
		if count > int64(threshold) && habit == "" {
			claim = true
			return hb.Put(k, []byte(pendingHabit))
		}
		if habit == pendingHabit {
			habit = ""
		}
		return nil
	})
	return count, claim, habit, err
}

// pendingHabit marks a claimed habit whose memory is being written.
const pendingHabit = "pending"

// SetHabit implements StateStore.
func (s *BoltStore) SetHabit(_ context.Context, userID, key, memoryID string) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		hb := tx.Bucket(bucketHabits)
		if memoryID == "" {
			return hb.Delete(itemKey(userID, key))
		}
		return hb.Put(itemKey(userID, key), []byte(memoryID))
	})
}

// DeleteUser implements StateStore.
func (s *BoltStore) DeleteUser(_ context.Context, userID string) (int64, int64, error) {
	// The user's records still only in memory are written first, so they are deleted too.
	if err := s.records.Flush(); err != nil {
		return 0, 0, err
	}
	var counters, records int64
	err := s.db.Update(func(tx *bolt.Tx) error {
		for _, bn := range [][]byte{bucketBehavior, bucketHabits, bucketClaims} {
			b := tx.Bucket(bn)
			var keys [][]byte
			if err := forPrefix(b, userKey(userID), func(k, _ []byte) error {
				keys = append(keys, bytes.Clone(k))
				return nil
			}); err != nil {
				return err
			}
			for _, k := range keys {
				if err := b.Delete(k); err != nil {
					return err
				}
			}
			switch string(bn) {
			case string(bucketBehavior):
				counters += int64(len(keys))
			case string(bucketClaims):
				records += int64(len(keys))
			}
		}
		return tx.Bucket(bucketUsers).Delete([]byte(userID))
	})
	return counters, records, err
}
