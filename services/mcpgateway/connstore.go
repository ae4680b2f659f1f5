package mcpgateway

import (
	"bytes"
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
//
// A sealed record is its own version: every sealing draws a fresh nonce, so two stored records
// are equal byte for byte only when they are the same record. SwapConnection and
// DeleteConnectionIf compare on that, which lets replicas that refresh one user's token at the
// same time agree on one winner.
type ConnectionStore interface {
	// PutConnection stores (replaces) the sealed connection of user to server.
	PutConnection(ctx context.Context, server, user string, sealed []byte) error
	// GetConnection returns the sealed connection, or nil when there is none.
	GetConnection(ctx context.Context, server, user string) ([]byte, error)
	// SwapConnection replaces the connection with sealed only if the stored one is still old,
	// atomically; it reports whether it did (false: another writer got there first, or the
	// connection was deleted).
	SwapConnection(ctx context.Context, server, user string, old, sealed []byte) (bool, error)
	// DeleteConnection forgets a connection and reports whether there was one.
	DeleteConnection(ctx context.Context, server, user string) (bool, error)
	// DeleteConnectionIf forgets the connection only if the stored one is still old,
	// atomically; it reports whether it did.
	DeleteConnectionIf(ctx context.Context, server, user string, old []byte) (bool, error)
	// ConnectionUsers returns up to max users with a connection to server.
	ConnectionUsers(ctx context.Context, server string, max int) ([]string, error)
	// PutAuthState stores a pending authorization until its TTL passes. A user has at most one
	// pending authorization per server: p replaces the one p.User had with p.Server, whose id
	// is unknown from then on. When maxPerServer other users have one pending with p.Server,
	// it stores nothing and returns an error that is errPendingFull.
	PutAuthState(ctx context.Context, p PendingAuth, maxPerServer int) error
	// PendingAuthState returns user's pending authorization with server (its id and sealed
	// state), or an empty id when there is none unexpired. It does not take it.
	PendingAuthState(ctx context.Context, server, user string) (id string, sealed []byte, err error)
	// TakeAuthState returns and deletes a pending authorization, atomically: of two callers
	// with the same id at most one gets it. Nil when it is unknown, taken, replaced or
	// expired. Taking it frees its user's place among the server's pending authorizations.
	TakeAuthState(ctx context.Context, id string) ([]byte, error)
}

// PendingAuth is a pending authorization as a ConnectionStore keeps it.
type PendingAuth struct {
	ID     string // the SHA-256 of the state parameter (stateID)
	Server string
	User   string
	Sealed []byte // the sealed authState
	TTL    time.Duration
}

// errPendingFull: a server has its maximum of pending authorizations.
var errPendingFull = errclass.Errorf(errclass.Exhausted, "too many pending authorizations for this MCP server")

// The per-user OAuth keys: a hash per server (user → sealed connection); a hash per pending
// authorization (the sealed state, its server and user; expiring with it); per server, a sorted
// set of the users with a pending authorization (scored by its expiry, in Unix ms) and a hash of
// their state ids.
func (s *RedisServerStore) connKey(server string) string { return s.prefix + "oauth:conn:" + server }
func (s *RedisServerStore) stateKey(id string) string    { return s.prefix + "oauth:state:" + id }
func (s *RedisServerStore) pendingPrefix() string        { return s.prefix + "oauth:pending:" }
func (s *RedisServerStore) pendingIDsPrefix() string     { return s.prefix + "oauth:pendingid:" }

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

// swapConnScript replaces (or, with ARGV[3] empty and ARGV[4] "del", deletes) a hash field
// only while it holds ARGV[2]. KEYS: the server's connections. ARGV: user, old, new, op.
var swapConnScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
if ARGV[4] == 'del' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
return 1
`)

// SwapConnection implements ConnectionStore.
func (s *RedisServerStore) SwapConnection(ctx context.Context, server, user string, old, sealed []byte) (bool, error) {
	n, err := swapConnScript.Run(ctx, s.rdb, []string{s.connKey(server)}, user, old, sealed, "put").Int()
	if err != nil {
		return false, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return n == 1, nil
}

// DeleteConnection implements ConnectionStore.
func (s *RedisServerStore) DeleteConnection(ctx context.Context, server, user string) (bool, error) {
	n, err := s.rdb.HDel(ctx, s.connKey(server), user).Result()
	if err != nil {
		return false, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return n > 0, nil
}

// DeleteConnectionIf implements ConnectionStore.
func (s *RedisServerStore) DeleteConnectionIf(ctx context.Context, server, user string, old []byte) (bool, error) {
	n, err := swapConnScript.Run(ctx, s.rdb, []string{s.connKey(server)}, user, old, "", "del").Int()
	if err != nil {
		return false, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return n == 1, nil
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

// putStateScript stores a pending authorization, replacing the user's previous one with the
// server, unless the server has ARGV[5] others pending. Users whose authorization expired are
// dropped from the server's set first. KEYS: the server's pending set, its ids, the new state.
// ARGV: user, now (ms), expiry (ms), TTL (ms), max, sealed, the state keys' prefix, server, id.
// Returns 1, or 0 when the server is full. The replaced state's key is derived in the script,
// as the store's other keys are all on one Redis (no cluster slots to declare).
var putStateScript = redis.NewScript(`
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
for _, u in ipairs(expired) do
  redis.call('ZREM', KEYS[1], u)
  redis.call('HDEL', KEYS[2], u)
end
local old = redis.call('HGET', KEYS[2], ARGV[1])
if old then
  redis.call('DEL', ARGV[7] .. old)
elseif redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[5]) then
  return 0
end
redis.call('HSET', KEYS[3], 'v', ARGV[6], 's', ARGV[8], 'u', ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[9])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
`)

// takeStateScript returns and deletes a pending authorization, and frees its user's place in
// the server's set (unless a newer one of theirs holds it). KEYS: the state. ARGV: the pending
// sets' prefix, the ids' prefix, the id.
var takeStateScript = redis.NewScript(`
local f = redis.call('HMGET', KEYS[1], 'v', 's', 'u')
if not f[1] then return false end
redis.call('DEL', KEYS[1])
if f[2] and f[3] then
  local ids = ARGV[2] .. f[2]
  if redis.call('HGET', ids, f[3]) == ARGV[3] then
    redis.call('HDEL', ids, f[3])
    redis.call('ZREM', ARGV[1] .. f[2], f[3])
  end
end
return f[1]
`)

// PutAuthState implements ConnectionStore.
func (s *RedisServerStore) PutAuthState(ctx context.Context, p PendingAuth, maxPerServer int) error {
	now := time.Now()
	ttl := max(p.TTL.Milliseconds(), 1)
	n, err := putStateScript.Run(ctx, s.rdb,
		[]string{s.pendingPrefix() + p.Server, s.pendingIDsPrefix() + p.Server, s.stateKey(p.ID)},
		p.User, now.UnixMilli(), now.UnixMilli()+ttl, ttl, maxPerServer, p.Sealed, s.stateKey(""), p.Server, p.ID).Int()
	if err != nil {
		return errclass.Mark(errclass.Unavailable, "redis", err)
	}
	if n == 0 {
		return errPendingFull
	}
	return nil
}

// PendingAuthState implements ConnectionStore.
func (s *RedisServerStore) PendingAuthState(ctx context.Context, server, user string) (string, []byte, error) {
	id, err := s.rdb.HGet(ctx, s.pendingIDsPrefix()+server, user).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	// The state's key expires with it: found, it is unexpired.
	v, err := s.rdb.HGet(ctx, s.stateKey(id), "v").Bytes()
	if errors.Is(err, redis.Nil) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return id, v, nil
}

// TakeAuthState implements ConnectionStore.
func (s *RedisServerStore) TakeAuthState(ctx context.Context, id string) ([]byte, error) {
	v, err := takeStateScript.Run(ctx, s.rdb, []string{s.stateKey(id)}, s.pendingPrefix(), s.pendingIDsPrefix(), id).Text()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return []byte(v), nil
}

var (
	bConnections = []byte("oauth_connections") // server NUL user → sealed connection
	// id → 8-byte expiry (Unix ns), 4-byte length of the owner, the owner (server NUL user),
	// the sealed state
	bAuthStates  = []byte("oauth_states")
	bPendingAuth = []byte("oauth_pending") // server NUL user → 8-byte expiry (Unix ns) + state id
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

// swapIf replaces the connection with sealed (nil: deletes it) if it is still old.
func (s *BoltServerStore) swapIf(server, user string, old, sealed []byte) (bool, error) {
	done := false
	err := s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bConnections)
		if cur := b.Get(connID(server, user)); cur == nil || !bytes.Equal(cur, old) {
			return nil
		}
		done = true
		if sealed == nil {
			return b.Delete(connID(server, user))
		}
		return b.Put(connID(server, user), sealed)
	})
	return done, err
}

// SwapConnection implements ConnectionStore.
func (s *BoltServerStore) SwapConnection(_ context.Context, server, user string, old, sealed []byte) (bool, error) {
	if sealed == nil {
		sealed = []byte{}
	}
	return s.swapIf(server, user, old, sealed)
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

// DeleteConnectionIf implements ConnectionStore.
func (s *BoltServerStore) DeleteConnectionIf(_ context.Context, server, user string, old []byte) (bool, error) {
	return s.swapIf(server, user, old, nil)
}

// ConnectionUsers implements ConnectionStore.
func (s *BoltServerStore) ConnectionUsers(_ context.Context, server string, max int) ([]string, error) {
	var users []string
	prefix := []byte(server + "\x00")
	err := s.db.View(func(tx *bolt.Tx) error {
		cur := tx.Bucket(bConnections).Cursor()
		for k, _ := cur.Seek(prefix); k != nil && len(users) < max && bytes.HasPrefix(k, prefix); k, _ = cur.Next() {
			users = append(users, string(k[len(prefix):]))
		}
		return nil
	})
	return users, err
}

// expired reads the 8-byte expiry that starts a pending record (a short record is expired).
func expired(v []byte, now time.Time) bool {
	return len(v) < 8 || int64(binary.BigEndian.Uint64(v)) < now.UnixNano()
}

// PutAuthState implements ConnectionStore. Expired states are dropped as new ones are stored,
// so abandoned authorizations do not pile up in the file.
func (s *BoltServerStore) PutAuthState(_ context.Context, p PendingAuth, maxPerServer int) error {
	now := time.Now()
	exp := binary.BigEndian.AppendUint64(nil, uint64(now.Add(p.TTL).UnixNano()))
	owner := connID(p.Server, p.User)
	v := binary.BigEndian.AppendUint32(append([]byte(nil), exp...), uint32(len(owner)))
	v = append(append(v, owner...), p.Sealed...)
	return s.db.Update(func(tx *bolt.Tx) error {
		states, pending := tx.Bucket(bAuthStates), tx.Bucket(bPendingAuth)
		for _, b := range []*bolt.Bucket{states, pending} {
			if _, err := boltstore.DeleteWhere(b, func(_, v []byte) (bool, error) { return expired(v, now), nil }); err != nil {
				return err
			}
		}
		if old := pending.Get(owner); old != nil {
			if err := states.Delete(append([]byte(nil), old[8:]...)); err != nil {
				return err
			}
		} else {
			n, prefix := 0, []byte(p.Server+"\x00")
			cur := pending.Cursor()
			for k, _ := cur.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && n < maxPerServer; k, _ = cur.Next() {
				n++
			}
			if n >= maxPerServer {
				return errPendingFull
			}
		}
		if err := pending.Put(owner, append(exp, p.ID...)); err != nil {
			return err
		}
		return states.Put([]byte(p.ID), v)
	})
}

// PendingAuthState implements ConnectionStore.
func (s *BoltServerStore) PendingAuthState(_ context.Context, server, user string) (string, []byte, error) {
	var id string
	var sealed []byte
	err := s.db.View(func(tx *bolt.Tx) error {
		p := tx.Bucket(bPendingAuth).Get(connID(server, user))
		if len(p) <= 8 {
			return nil
		}
		v := tx.Bucket(bAuthStates).Get(p[8:])
		now := time.Now()
		if len(v) < 12 || expired(v, now) {
			return nil
		}
		n := int(binary.BigEndian.Uint32(v[8:12]))
		if 12+n > len(v) || !bytes.Equal(v[12:12+n], connID(server, user)) {
			return nil
		}
		id, sealed = string(p[8:]), append([]byte(nil), v[12+n:]...)
		return nil
	})
	return id, sealed, err
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
		states, pending := tx.Bucket(bAuthStates), tx.Bucket(bPendingAuth)
		v := states.Get([]byte(id))
		if v == nil {
			return nil
		}
		if len(v) >= 12 {
			n := int(binary.BigEndian.Uint32(v[8:12]))
			if 12+n <= len(v) {
				owner := v[12 : 12+n]
				if !expired(v, time.Now()) {
					out = append([]byte(nil), v[12+n:]...)
				}
				if p := pending.Get(owner); len(p) >= 8 && string(p[8:]) == id {
					if err := pending.Delete(append([]byte(nil), owner...)); err != nil {
						return err
					}
				}
			}
		}
		return states.Delete([]byte(id))
	})
	return out, err
}

// memConnStore is the ConnectionStore of a gateway without a shared store (one process, or
// tests): connections last as long as the process.
type memConnStore struct {
	mu      sync.Mutex // guards conns, states, pending
	conns   map[string]map[string][]byte
	states  map[string]memState
	pending map[string]map[string]string // server → user → state id
}

type memState struct {
	sealed       []byte
	server, user string
	expires      time.Time
}

func newMemConnStore() *memConnStore {
	return &memConnStore{conns: map[string]map[string][]byte{}, states: map[string]memState{}, pending: map[string]map[string]string{}}
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

func (m *memConnStore) SwapConnection(_ context.Context, server, user string, old, sealed []byte) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.conns[server][user]
	if !ok || !bytes.Equal(cur, old) {
		return false, nil
	}
	m.conns[server][user] = sealed
	return true, nil
}

func (m *memConnStore) DeleteConnection(_ context.Context, server, user string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.conns[server][user]
	delete(m.conns[server], user)
	return ok, nil
}

func (m *memConnStore) DeleteConnectionIf(_ context.Context, server, user string, old []byte) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, ok := m.conns[server][user]
	if !ok || !bytes.Equal(cur, old) {
		return false, nil
	}
	delete(m.conns[server], user)
	return true, nil
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

func (m *memConnStore) PutAuthState(_ context.Context, p PendingAuth, maxPerServer int) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := time.Now()
	for k, s := range m.states {
		if now.After(s.expires) {
			delete(m.states, k)
			if m.pending[s.server][s.user] == k {
				delete(m.pending[s.server], s.user)
			}
		}
	}
	users := m.pending[p.Server]
	if old, ok := users[p.User]; ok {
		delete(m.states, old)
	} else if len(users) >= maxPerServer {
		return errPendingFull
	}
	if users == nil {
		users = map[string]string{}
		m.pending[p.Server] = users
	}
	users[p.User] = p.ID
	m.states[p.ID] = memState{sealed: p.Sealed, server: p.Server, user: p.User, expires: now.Add(p.TTL)}
	return nil
}

func (m *memConnStore) PendingAuthState(_ context.Context, server, user string) (string, []byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	id, ok := m.pending[server][user]
	if !ok {
		return "", nil, nil
	}
	st, ok := m.states[id]
	if !ok || time.Now().After(st.expires) {
		return "", nil, nil
	}
	return id, st.sealed, nil
}

func (m *memConnStore) TakeAuthState(_ context.Context, id string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.states[id]
	delete(m.states, id)
	if !ok {
		return nil, nil
	}
	if m.pending[s.server][s.user] == id {
		delete(m.pending[s.server], s.user)
	}
	if time.Now().After(s.expires) {
		return nil, nil
	}
	return s.sealed, nil
}
