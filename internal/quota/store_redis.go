package quota

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hermes-agent/hermes/internal/errclass"
)

// RedisStore keeps the counters in Redis, shared by every replica. Each operation is one Lua
// script, atomic on the server, and takes the time from the Redis server's clock, so replicas
// with skewed clocks agree.
type RedisStore struct {
	rdb    *redis.Client
	prefix string
}

// NewRedisStore returns a store whose keys start with prefix.
func NewRedisStore(rdb *redis.Client, prefix string) *RedisStore {
	return &RedisStore{rdb: rdb, prefix: prefix}
}

// serverMicros is the Redis server's clock in microseconds.
const serverMicros = `local t = redis.call('TIME'); local now = tonumber(t[1]) * 1000000 + tonumber(t[2])`

// takeScript is GCRA: KEYS[1] holds the theoretical arrival time (µs); ARGV: tokens, the
// interval of one token (µs), the window (µs). Returns 0, or the wait in µs.
var takeScript = redis.NewScript(serverMicros + `
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local nxt = tat + tonumber(ARGV[1]) * tonumber(ARGV[2])
local wait = nxt - now - tonumber(ARGV[3])
if wait > 0 then return wait end
redis.call('SET', KEYS[1], nxt, 'PX', math.ceil((nxt - now) / 1000) + 1)
return 0
`)

// Take implements Store.
func (r *RedisStore) Take(ctx context.Context, key string, n, perMinute int64) (time.Duration, error) {
	interval := time.Minute.Microseconds() / perMinute
	wait, err := takeScript.Run(ctx, r.rdb, []string{r.prefix + key}, n, interval, time.Minute.Microseconds()).Int64()
	if err != nil {
		return 0, errclass.Mark(errclass.Unavailable, "quota: redis", err)
	}
	return time.Duration(wait) * time.Microsecond, nil
}

// acquireScript: KEYS[1] is a sorted set of holders scored by their expiry (µs); ARGV: holder,
// limit, ttl (µs). Returns 1 when the holder holds a slot.
var acquireScript = redis.NewScript(serverMicros + `
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local ttl = tonumber(ARGV[3])
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then
  return 0
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl / 1000) + 1)
return 1
`)

// Acquire implements Store.
func (r *RedisStore) Acquire(ctx context.Context, key, holder string, limit int64, ttl time.Duration) (bool, error) {
	ok, err := acquireScript.Run(ctx, r.rdb, []string{r.prefix + key}, holder, limit, ttl.Microseconds()).Int64()
	if err != nil {
		return false, errclass.Mark(errclass.Unavailable, "quota: redis", err)
	}
	return ok == 1, nil
}

// Release implements Store.
func (r *RedisStore) Release(ctx context.Context, key, holder string) error {
	return errclass.Mark(errclass.Unavailable, "quota: redis", r.rdb.ZRem(ctx, r.prefix+key, holder).Err())
}

// addScript: KEYS[1] is the counter; ARGV: n, limit, ttl (ms). Returns {value, added}.
var addScript = redis.NewScript(`
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local n, limit, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if n > 0 and limit > 0 and v + n > limit then return {v, 0} end
v = v + n
if v < 0 then v = 0 end
if ttl > 0 then
  redis.call('SET', KEYS[1], v, 'PX', ttl)
else
  redis.call('SET', KEYS[1], v, 'KEEPTTL')
end
return {v, 1}
`)

// Add implements Store.
func (r *RedisStore) Add(ctx context.Context, key string, n, limit int64, ttl time.Duration) (int64, bool, error) {
	res, err := addScript.Run(ctx, r.rdb, []string{r.prefix + key}, n, limit, ttl.Milliseconds()).Int64Slice()
	if err != nil {
		return 0, false, errclass.Mark(errclass.Unavailable, "quota: redis", err)
	}
	if len(res) != 2 {
		return 0, false, fmt.Errorf("quota: redis add answered %d values", len(res))
	}
	return res[0], res[1] == 1, nil
}

// Drain implements Store.
func (r *RedisStore) Drain(ctx context.Context, key string) (int64, error) {
	v, err := r.rdb.GetDel(ctx, r.prefix+key).Int64()
	if err == redis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, errclass.Mark(errclass.Unavailable, "quota: redis", err)
	}
	return v, nil
}
