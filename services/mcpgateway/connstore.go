package mcpgateway

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	bolt "go.etcd.io/bbolt"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/errclass"
)

// ConnectionStore keeps the users' connections to servers with per-user OAuth and the pending
// authorizations, shared by every replica (the browser's redirect may reach any of them). It
// only ever sees sealed bytes: the gateway encrypts every record with the operator's key
// before it is stored (sealer), so neither a Redis value nor the bbolt file holds a token in
// clear. Both stores of this package implement it.
type ConnectionStore interface {
	// PutConnection stores (replaces) the sealed connection of user to server.
	PutConnection(ctx context.Context, server, user string, sealed []byte) error
	// GetConnection returns the sealed connection, or nil when there is none.
	GetConnection(ctx context.Context, server, user string) ([]byte, error)
	// DeleteConnection forgets a connection and reports whether there was one.
	DeleteConnection(ctx context.Context, server, user string) (bool, error)
	// ConnectionUsers returns up to max users with a connection to server.
	ConnectionUsers(ctx context.Context, server string, max int) ([]string, error)
	// PutAuthState stores a pending authorization under id until ttl passes.
	PutAuthState(ctx context.Context, id string, sealed []byte, ttl time.Duration) error
	// TakeAuthState returns and deletes a pending authorization, atomically: of two callers
	// with the same id at most one gets it. Nil when it is unknown, taken or expired.
	TakeAuthState(ctx context.Context, id string) ([]byte, error)
}

// The per-user OAuth keys: a hash per server (user → sealed connection), a string per pending
// authorization (expiring with it).
func (s *RedisServerStore) connKey(server string) string { return s.prefix + "oauth:conn:" + server }
func (s *RedisServerStore) stateKey(id string) string    { return s.prefix + "oauth:state:" + id }

// PutConnection implements ConnectionStore.
func (s *RedisServerStore) PutConnection(ctx context.Context, server, user string, sealed []byte) error {
	if err := s.rdb.HSet(ctx, s.connKey(server), user, sealed).Err(); err != nil {
		return errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return nil
}

// GetConnection implements ConnectionStore.
func (s *RedisServerStore) GetConnection(ctx context.Context, server, user string) ([]byte, error) {
	v, err := s.rdb.HGet(ctx, s.connKey(server), user).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return v, nil
}

// DeleteConnection implements ConnectionStore.
func (s *RedisServerStore) DeleteConnection(ctx context.Context, server, user string) (bool, error) {
	n, err := s.rdb.HDel(ctx, s.connKey(server), user).Result()
	if err != nil {
		return false, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return n > 0, nil
}

// ConnectionUsers implements ConnectionStore.
func (s *RedisServerStore) ConnectionUsers(ctx context.Context, server string, max int) ([]string, error) {
	keys, _, err := s.rdb.HScan(ctx, s.connKey(server), 0, "", int64(max)).Result()
	if err != nil {
		return nil, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	var users []string
	for i := 0; i+1 < len(keys) && len(users) < max; i += 2 {
		users = append(users, keys[i])
	}
	return users, nil
}

// PutAuthState implements ConnectionStore.
func (s *RedisServerStore) PutAuthState(ctx context.Context, id string, sealed []byte, ttl time.Duration) error {
	if err := s.rdb.Set(ctx, s.stateKey(id), sealed, ttl).Err(); err != nil {
		return errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return nil
}

// TakeAuthState implements ConnectionStore.
func (s *RedisServerStore) TakeAuthState(ctx context.Context, id string) ([]byte, error) {
	v, err := s.rdb.GetDel(ctx, s.stateKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return v, nil
}

var (
	bConnections = []byte("oauth_connections") // server NUL user → sealed connection
	bAuthStates  = []byte("oauth_states")      // id → 8-byte expiry (Unix ns) + sealed state
)

func connID(server, user string) []byte { return []byte(server + "\x00" + user) }

// PutConnection implements ConnectionStore.
func (s *BoltServerStore) PutConnection(_ context.Context, server, user string, sealed []byte) error {
	return s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bConnections).Put(connID(server, user), sealed)
	})
}

// GetConnection implements ConnectionStore.
func (s *BoltServerStore) GetConnection(_ context.Context, server, user string) ([]byte, error) {
	var out []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bConnections).Get(connID(server, user)); v != nil {
			out = append([]byte(nil), v...)
		}
		return nil
	})
	return out, err
}

// DeleteConnection implements ConnectionStore.
func (s *BoltServerStore) DeleteConnection(_ context.Context, server, user string) (bool, error) {
	found := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bConnections)
		if b.Get(connID(server, user)) == nil {
			return nil
		}
		found = true
		return b.Delete(connID(server, user))
	})
	return found, err
}

// ConnectionUsers implements ConnectionStore.
func (s *BoltServerStore) ConnectionUsers(_ context.Context, server string, max int) ([]string, error) {
	var users []string
	prefix := []byte(server + "\x00")
	err := s.db.View(func(tx *bolt.Tx) error {
		cur := tx.Bucket(bConnections).Cursor()
		for k, _ := cur.Seek(prefix); k != nil && len(users) < max && len(k) >= len(prefix) && string(k[:len(prefix)]) == string(prefix); k, _ = cur.Next() {
			users = append(users, string(k[len(prefix):]))
		}
		return nil
	})
	return users, err
}

// PutAuthState implements ConnectionStore. Expired states are dropped as new ones are stored,
// so abandoned authorizations do not pile up in the file.
func (s *BoltServerStore) PutAuthState(_ context.Context, id string, sealed []byte, ttl time.Duration) error {
	now := time.Now()
	v := binary.BigEndian.AppendUint64(nil, uint64(now.Add(ttl).UnixNano()))
	v = append(v, sealed...)
	return s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bAuthStates)
		if _, err := boltstore.DeleteWhere(b, func(_, v []byte) (bool, error) {
			return len(v) < 8 || int64(binary.BigEndian.Uint64(v)) < now.UnixNano(), nil
		}); err != nil {
			return err
		}
		return b.Put([]byte(id), v)
	})
}

// TakeAuthState implements ConnectionStore.
func (s *BoltServerStore) TakeAuthState(_ context.Context, id string) ([]byte, error) {
	// The callback is public: a state nobody issued is answered from a read, without taking the
	// file's writer lock or a commit.
	var found bool
	if err := s.db.View(func(tx *bolt.Tx) error {
		found = tx.Bucket(bAuthStates).Get([]byte(id)) != nil
		return nil
	}); err != nil || !found {
		return nil, err
	}
	var out []byte
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bAuthStates)
		v := b.Get([]byte(id))
		if v == nil {
			return nil
		}
		if len(v) >= 8 && int64(binary.BigEndian.Uint64(v)) >= time.Now().UnixNano() {
			out = append([]byte(nil), v[8:]...)
		}
		return b.Delete([]byte(id))
	})
	return out, err
}

// memConnStore is the ConnectionStore of a gateway without a shared store (one process, or
// tests): connections last as long as the process.
type memConnStore struct {
	mu     sync.Mutex // guards conns and states
	conns  map[string]map[string][]byte
	states map[string]memState
}

type memState struct {
	sealed  []byte
	expires time.Time
}

func newMemConnStore() *memConnStore {
	return &memConnStore{conns: map[string]map[string][]byte{}, states: map[string]memState{}}
}

func (m *memConnStore) PutConnection(_ context.Context, server, user string, sealed []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.conns[server] == nil {
		m.conns[server] = map[string][]byte{}
	}
	m.conns[server][user] = sealed
	return nil
}

func (m *memConnStore) GetConnection(_ context.Context, server, user string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.conns[server][user], nil
}

func (m *memConnStore) DeleteConnection(_ context.Context, server, user string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.conns[server][user]
	delete(m.conns[server], user)
	return ok, nil
}

func (m *memConnStore) ConnectionUsers(_ context.Context, server string, max int) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for u := range m.conns[server] {
		if len(out) == max {
			break
		}
		out = append(out, u)
	}
	return out, nil
}

func (m *memConnStore) PutAuthState(_ context.Context, id string, sealed []byte, ttl time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for k, s := range m.states {
		if now.After(s.expires) {
			delete(m.states, k)
		}
	}
	m.states[id] = memState{sealed: sealed, expires: now.Add(ttl)}
	return nil
}

func (m *memConnStore) TakeAuthState(_ context.Context, id string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.states[id]
	delete(m.states, id)
	if !ok || time.Now().After(s.expires) {
		return nil, nil
	}
	return s.sealed, nil
}
