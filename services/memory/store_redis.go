package memory

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/lease"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// Redis key layout, every key under the configured prefix P (for example "hermes:memory:"):
//
//	P u:{<user>}:m:<id>   hash {e: encoded entry}, PEXPIRE = episodic TTL
//	P u:<user>:mi         zset id → TTL deadline (unix ms): the user's episodic memories
//	P u:<user>:b:<key>    zset of behaviour events (score unix ms)
//	P u:<user>:h:<key>    string: the habit memory id of a behaviour ("pending" while claimed)
//	P u:<user>:t:<turn>   lease (internal/lease): the turn's claim, completed into its record (JSON)
//	P u:<user>:x:<turn>   string: a turn record of before the leases, until its TTL ends
//	P users               set of user ids with memories
//	P locks:<name>        lease: a named lock (maintenance)
//
// <user> is the user id in unpadded base64url, so no id can break out of its namespace or
// act as a SCAN pattern.
type redisKeys struct{ prefix string }

func (k redisKeys) user(userID string) string {
	return k.prefix + "u:{" + base64.RawURLEncoding.EncodeToString([]byte(userID)) + "}:"
}
func (k redisKeys) mem(userID, id string) string  { return k.user(userID) + "m:" + id }
func (k redisKeys) memIndex(userID string) string { return k.user(userID) + "mi" }
func (k redisKeys) behavior(userID, key string) string {
	return k.user(userID) + "b:" + base64.RawURLEncoding.EncodeToString([]byte(key))
}
func (k redisKeys) habit(userID, key string) string {
	return k.user(userID) + "h:" + base64.RawURLEncoding.EncodeToString([]byte(key))
}

// turn is a turn's claim or record, a lease (internal/lease) under the prefix: the key is
// relative to it. Records of before the leases were strings under "x:", gone after the record
// TTL; DeleteUser still removes them.
func (k redisKeys) turn(userID, turnID string) string {
	return k.user(userID)[len(k.prefix):] + "t:" + base64.RawURLEncoding.EncodeToString([]byte(turnID))
}
func (k redisKeys) users() string { return k.prefix + "users" }

// RedisEpisodic is the episodic tier in Redis: one hash per memory with the tier's TTL, and a
// sorted set per user listing them by TTL deadline. Similarity search loads the user's episodic
// memories and scores them in process: the tier holds hours to days of memories, so it stays
// small per user.
type RedisEpisodic struct {
	rdb  *redis.Client
	keys redisKeys
	ttl  time.Duration
	dim  int
	now  func() time.Time
}

var _ TierStore = (*RedisEpisodic)(nil)

// NewRedisEpisodic returns the episodic tier under prefix with the given TTL and dimension.
func NewRedisEpisodic(rdb *redis.Client, prefix string, ttl time.Duration, dim int) *RedisEpisodic {
	return &RedisEpisodic{rdb: rdb, keys: redisKeys{prefix}, ttl: ttl, dim: dim, now: time.Now}
}

// putScript writes a memory, its TTL and its index entry atomically; with ARGV[4] = "1" it
// writes only when the memory still exists (a recall's touch must not resurrect a memory that
// maintenance or Forget removed meanwhile).
var putScript = redis.NewScript(`
if ARGV[4] == "1" and redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'e', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1`)

func (s *RedisEpisodic) put(ctx context.Context, e Entry, onlyExisting bool) (bool, error) {
	if len(e.Vector) != s.dim {
		return false, fmt.Errorf("memory store: vector of size %d, want %d", len(e.Vector), s.dim)
	}
	now := s.now()
	e.Memory = cloneMemory(e.Memory)
	deadline := now.Add(s.ttl)
	e.Memory.ExpiresAt = ts(deadline)
	v, err := encodeEntry(e)
	if err != nil {
		return false, err
	}
	only := "0"
	if onlyExisting {
		only = "1"
	}
	user := e.Memory.GetUserId()
	n, err := putScript.Run(ctx, s.rdb, []string{s.keys.mem(user, e.Memory.GetId()), s.keys.memIndex(user)},
		v, s.ttl.Milliseconds(), deadline.UnixMilli(), only, e.Memory.GetId(), now.UnixMilli()).Int()
	if err != nil {
		return false, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return n == 1, nil
}

// Put implements TierStore.
func (s *RedisEpisodic) Put(ctx context.Context, e Entry) error {
	_, err := s.put(ctx, e, false)
	return err
}

// Get implements TierStore.
func (s *RedisEpisodic) Get(ctx context.Context, userID, id string) (Entry, error) {
	v, err := s.rdb.HGet(ctx, s.keys.mem(userID, id), "e").Bytes()
	if errors.Is(err, redis.Nil) {
		return Entry{}, ErrNotFound
	}
	if err != nil {
		return Entry{}, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return decodeEntry(v)
}

// Delete implements TierStore.
func (s *RedisEpisodic) Delete(ctx context.Context, userID, id string) (bool, error) {
	pipe := s.rdb.TxPipeline()
	del := pipe.Del(ctx, s.keys.mem(userID, id))
	pipe.ZRem(ctx, s.keys.memIndex(userID), id)
	if _, err := pipe.Exec(ctx); err != nil {
		return false, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return del.Val() == 1, nil
}

// all loads every episodic memory of the user still within its TTL.
func (s *RedisEpisodic) all(ctx context.Context, userID string) ([]Entry, error) {
	now := s.now()
	ids, err := s.rdb.ZRangeByScore(ctx, s.keys.memIndex(userID), &redis.ZRangeBy{Min: "(" + unixMs(now), Max: "+inf"}).Result()
	if err != nil {
		return nil, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	out := make([]Entry, 0, len(ids))
	const batch = 256
	for start := 0; start < len(ids); start += batch {
		end := min(start+batch, len(ids))
		pipe := s.rdb.Pipeline()
		cmds := make([]*redis.StringCmd, 0, end-start)
		for _, id := range ids[start:end] {
			cmds = append(cmds, pipe.HGet(ctx, s.keys.mem(userID, id), "e"))
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, errclass.Mark(errclass.Unavailable, "redis", err)
		}
		for _, c := range cmds {
			b, err := c.Bytes()
			if errors.Is(err, redis.Nil) {
				continue // expired between the index read and this one
			}
			if err != nil {
				return nil, errclass.Mark(errclass.Unavailable, "redis", err)
			}
			e, err := decodeEntry(b)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
	}
	return out, nil
}

// Search implements TierStore.
func (s *RedisEpisodic) Search(ctx context.Context, userID string, q SearchQuery) ([]Hit, error) {
	all, err := s.all(ctx, userID)
	if err != nil {
		return nil, err
	}
	return searchEntries(all, q, s.now()), nil
}

// searchEntries is exact search over loaded entries, with SearchQuery's semantics; lexical
// statistics are those of the loaded entries (the user's episodic memories, expired ones
// included as in the other backends).
func searchEntries(all []Entry, q SearchQuery, now time.Time) []Hit {
	if q.Limit <= 0 {
		return nil
	}
	byID := make(map[string]Entry, len(all))
	var idf []float32
	var docs []sparseVec
	if !q.Lexical.empty() {
		docs, idf = lexicalStats(all, q.Lexical)
		q.MinLexical = lexicalFloor(q.MinLexical, len(all))
	}
	var floor float64
	if q.ContextPool {
		floor, q.MinLexical = q.MinLexical, 0
	}
	lexT, denseT := topK{k: q.Limit}, topK{k: q.Limit}
	lookup := len(q.AttributeKeys) > 0 && q.MinLexical <= 0
	for i, e := range all {
		m := e.Memory
		if !q.admits(m, now) {
			continue
		}
		byID[m.GetId()] = e
		if docs != nil {
			if sc := float64(sparseDot(q.Lexical, idf, docs[i])); (sc >= q.MinLexical && sc > 0) || lookup {
				lexT.offer(m.GetId(), sc)
			}
		}
		if len(q.Vector) > 0 && len(e.Vector) == len(q.Vector) {
			if sim := cosine(q.Vector, e.Vector); sim >= q.MinSimilarity {
				denseT.offer(m.GetId(), sim)
			}
		}
	}
	var lists [][]scored
	if docs != nil {
		lists = append(lists, lexT.best())
	}
	if len(q.Vector) > 0 {
		lists = append(lists, denseT.best())
	}
	var ranked []scored
	switch len(lists) {
	case 1:
		ranked = lists[0]
	case 2:
		ranked = rrfFuse(lists...)
		ranked = ranked[:min(len(ranked), q.Limit)]
	}
	hits := make([]Hit, len(ranked))
	for i, r := range ranked {
		hits[i] = Hit{Entry: byID[r.id], Similarity: r.sim, Floor: floor}
	}
	return hits
}

// lexicalStats is the lexical vector of each entry and the BM25 idf of each query term over
// the entries.
func lexicalStats(all []Entry, query sparseVec) (docs []sparseVec, idf []float32) {
	docs = make([]sparseVec, len(all))
	df := make([]int, len(query.idx))
	for i, e := range all {
		docs[i] = lexDoc(embedText(e.Memory))
		for j, k := range query.idx {
			if _, ok := slices.BinarySearch(docs[i].idx, k); ok {
				df[j]++
			}
		}
	}
	idf = make([]float32, len(df))
	for j := range df {
		idf[j] = bm25IDF(len(all), df[j])
	}
	return docs, idf
}

// admits reports whether m passes the query's filters at now: live, of an allowed type, not
// expired, in the time windows, with one of the attribute keys.
func (q SearchQuery) admits(m *memoryv1.Memory, now time.Time) bool {
	if !live(m) || !typeAllowed(q.Types, m.GetType()) || (m.GetExpiresAt() != nil && !m.GetExpiresAt().AsTime().After(now)) {
		return false
	}
	if !q.UpdatedAfter.IsZero() && m.GetType() != memoryv1.MemoryType_MEMORY_TYPE_FACT && m.GetUpdatedAt().AsTime().Before(q.UpdatedAfter) {
		return false
	}
	if o := occurredAt(m); (!q.OccurredAfter.IsZero() && o.Before(q.OccurredAfter)) || (!q.OccurredBefore.IsZero() && !o.Before(q.OccurredBefore)) {
		return false
	}
	return len(q.AttributeKeys) == 0 || hasAnyKey(attrKeys(m), q.AttributeKeys)
}

// Scan implements TierStore.
func (s *RedisEpisodic) Scan(ctx context.Context, userID string, fn func(Entry) error) error {
	all, err := s.all(ctx, userID)
	if err != nil {
		return err
	}
	for _, e := range all {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// BySubject implements TierStore.
func (s *RedisEpisodic) BySubject(ctx context.Context, userID, subject string) ([]Entry, error) {
	if subject == "" {
		return nil, nil
	}
	all, err := s.all(ctx, userID)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, e := range all {
		if live(e.Memory) && e.Memory.GetSubject() == subject {
			out = append(out, e)
		}
	}
	return out, nil
}

// Touch implements TierStore.
func (s *RedisEpisodic) Touch(ctx context.Context, userID string, ids []string, at time.Time) ([]string, error) {
	return touchEach(ids, at,
		func(id string) (Entry, error) { return s.Get(ctx, userID, id) },
		func(_ string, e Entry) (bool, error) { return s.put(ctx, e, true) })
}

// DeleteUser implements TierStore. It scans for the user's memory keys rather than trusting
// the index, so nothing is left behind even if the index is out of date.
func (s *RedisEpisodic) DeleteUser(ctx context.Context, userID string) (UserCounts, error) {
	var c UserCounts
	keys, err := scanKeys(ctx, s.rdb, s.keys.user(userID)+"m:*")
	if err != nil {
		return c, err
	}
	for _, k := range keys {
		b, err := s.rdb.HGet(ctx, k, "e").Bytes()
		if err == nil {
			if e, derr := decodeEntry(b); derr == nil && !live(e.Memory) {
				c.Expired++
			} else {
				c.Live++
			}
		}
	}
	keys = append(keys, s.keys.memIndex(userID))
	if err := s.rdb.Del(ctx, keys...).Err(); err != nil {
		return UserCounts{}, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return c, nil
}

func scanKeys(ctx context.Context, rdb *redis.Client, pattern string) ([]string, error) {
	var out []string
	var cursor uint64
	for {
		keys, next, err := rdb.Scan(ctx, cursor, pattern, 1000).Result()
		if err != nil {
			return nil, errclass.Mark(errclass.Unavailable, "redis scan", err)
		}
		out = append(out, keys...)
		if next == 0 {
			return out, nil
		}
		cursor = next
	}
}

// RedisState is the StateStore in Redis. Turn claims and locks are leases under the prefix
// (turns at <user>t:<turn>, locks at locks:<name>).
type RedisState struct {
	claims
	rdb  *redis.Client
	keys redisKeys
}

var _ StateStore = (*RedisState)(nil)

// NewRedisState returns the state store under prefix.
func NewRedisState(rdb *redis.Client, prefix string) *RedisState {
	keys := redisKeys{prefix}
	return &RedisState{
		claims: claims{
			turns:   lease.NewRedis(rdb, prefix, nil),
			turnKey: keys.turn,
			locks:   lease.NewRedis(rdb, prefix+"locks:", nil),
		},
		rdb: rdb, keys: keys,
	}
}

// AddUser implements StateStore.
func (s *RedisState) AddUser(ctx context.Context, userID string) error {
	return errclass.Mark(errclass.Unavailable, "redis add user", s.rdb.SAdd(ctx, s.keys.users(), userID).Err())
}

// Users implements StateStore.
func (s *RedisState) Users(ctx context.Context) ([]string, error) {
	users, err := s.rdb.SMembers(ctx, s.keys.users()).Result()
	return users, errclass.Mark(errclass.Unavailable, "redis users", err)
}

// countScript adds an event, trims the window, counts, and claims the habit when the count is
// above the threshold and no habit is recorded — atomically, so of several replicas counting
// the same behaviour exactly one writes the habit memory.
var countScript = redis.NewScript(`
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local n = redis.call('ZCARD', KEYS[1])
local h = redis.call('GET', KEYS[2])
if n > tonumber(ARGV[5]) and not h then
  redis.call('SET', KEYS[2], 'pending', 'PX', 60000)
  return {n, 1, ''}
end
if not h or h == 'pending' then h = '' end
return {n, 0, h}`)

// CountBehavior implements StateStore.
func (s *RedisState) CountBehavior(ctx context.Context, userID, key string, at time.Time, window time.Duration, threshold int) (int64, bool, string, error) {
	member := strconv.FormatInt(at.UnixNano(), 10) + ":" + randomToken()
	res, err := countScript.Run(ctx, s.rdb, []string{s.keys.behavior(userID, key), s.keys.habit(userID, key)},
		at.UnixMilli(), member, at.Add(-window).UnixMilli(), window.Milliseconds(), threshold).Slice()
	if err != nil {
		return 0, false, "", errclass.Mark(errclass.Unavailable, "redis", err)
	}
	n, _ := res[0].(int64)
	claim, _ := res[1].(int64)
	habit, _ := res[2].(string)
	return n, claim == 1, habit, nil
}

// SetHabit implements StateStore.
func (s *RedisState) SetHabit(ctx context.Context, userID, key, memoryID string) error {
	if memoryID == "" {
		return errclass.Mark(errclass.Unavailable, "redis release habit", s.rdb.Del(ctx, s.keys.habit(userID, key)).Err())
	}
	return errclass.Mark(errclass.Unavailable, "redis set habit", s.rdb.Set(ctx, s.keys.habit(userID, key), memoryID, 0).Err())
}

// DeleteUser implements StateStore.
func (s *RedisState) DeleteUser(ctx context.Context, userID string) (int64, int64, error) {
	base := s.keys.user(userID)
	counters, err := scanKeys(ctx, s.rdb, base+"b:*")
	if err != nil {
		return 0, 0, err
	}
	habits, err := scanKeys(ctx, s.rdb, base+"h:*")
	if err != nil {
		return 0, 0, err
	}
	turns, err := scanKeys(ctx, s.rdb, base+"t:*")
	if err != nil {
		return 0, 0, err
	}
	legacy, err := scanKeys(ctx, s.rdb, base+"x:*")
	if err != nil {
		return 0, 0, err
	}
	turns = append(turns, legacy...)
	all := append(append(append([]string{}, counters...), habits...), turns...)
	pipe := s.rdb.TxPipeline()
	if len(all) > 0 {
		pipe.Del(ctx, all...)
	}
	pipe.SRem(ctx, s.keys.users(), userID)
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, 0, errclass.Mark(errclass.Unavailable, "redis", err)
	}
	return int64(len(counters)), int64(len(turns)), nil
}
