package lease

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// Holder returns the owner holding key's lease now, or "" when nobody holds it (free, expired
// or done): for a caller that must tell a dead holder's lease from a live one without taking it.
func (m *Memory) Holder(key string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.live(key, m.now())
	if !ok || e.done {
		return ""
	}
	return e.owner
}

// RedisKey is the Redis key that keeps key's lease, for a caller that WATCHes it in a
// transaction of its own.
func (r *Redis) RedisKey(key string) string { return r.prefix + key }

// QueueHolder queues the read of key's holder on c (the client, a pipeline or a WATCH
// transaction); the returned function gives the owner holding the lease, "" when nobody does,
// once c has run the command. An expired lease reads as free.
func (r *Redis) QueueHolder(ctx context.Context, c redis.Cmdable, key string) func() (string, error) {
	cmd := c.HMGet(ctx, r.prefix+key, "s", "o")
	return func() (string, error) {
		vals, err := cmd.Result()
		if err != nil {
			return "", redisErr("read holder", key, err)
		}
		if len(vals) != 2 || str(vals[0]) != "h" {
			return "", nil
		}
		return str(vals[1]), nil
	}
}
