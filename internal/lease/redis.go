package lease

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hermes-agent/hermes/internal/errclass"
)

// Redis keeps leases in Redis under a prefix, shared by every replica: <prefix><key> is a hash
// (s: "h" held or "d" done, o: owner, d: data) with the lease's or record's expiry. Releases,
// completions and signals are published on the channel <prefix>lease-wake (the message is the
// key), which one subscription per store turns into wake-ups of local watchers. It takes one
// node's client or Sentinel's (*redis.Client), as every Redis store of Hermes does.
type Redis struct {
	rdb     *redis.Client
	prefix  string
	channel string
	hub     hub
	log     *slog.Logger

	// mu guards sub and closed, and is held while subscribing, so one subscription is made.
	mu sync.Mutex
	// sub is the subscription, started by the first Watch; nil before and after Close.
	sub    *redis.PubSub
	closed bool
}

// NewRedis returns a store whose keys start with prefix.
func NewRedis(rdb *redis.Client, prefix string, log *slog.Logger) *Redis {
	if log == nil {
		log = slog.Default()
	}
	return &Redis{rdb: rdb, prefix: prefix, channel: prefix + "lease-wake", log: log}
}

// Close ends the subscription.
func (r *Redis) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.sub == nil {
		return nil
	}
	err := r.sub.Close()
	r.sub = nil
	return err
}

// acquireScript: KEYS[1] lease; ARGV owner, data, ttl ms. Returns {state, owner, data, pttl}.
var acquireScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 's', 'o', 'd')
if cur[1] == 'd' then return {'d', '', cur[3] or '', redis.call('PTTL', KEYS[1])} end
if cur[1] == 'h' and cur[2] ~= ARGV[1] then return {'h', cur[2] or '', cur[3] or '', redis.call('PTTL', KEYS[1])} end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 's', 'h', 'o', ARGV[1], 'd', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {'a', ARGV[1], ARGV[2], tonumber(ARGV[3])}`)

// ownedScript changes the owner's lease. KEYS[1] lease; ARGV owner, op (renew|release|complete),
// ttl ms, record, channel, key. Returns 1 when owner held it.
var ownedScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 's', 'o')
if cur[1] ~= 'h' or cur[2] ~= ARGV[1] then return 0 end
if ARGV[2] == 'renew' then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return 1
end
if ARGV[2] == 'release' then
  redis.call('DEL', KEYS[1])
else
  redis.call('HSET', KEYS[1], 's', 'd', 'd', ARGV[4])
  redis.call('HDEL', KEYS[1], 'o')
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
redis.call('PUBLISH', ARGV[5], ARGV[6])
return 1`)

// redisErr marks a failure of Redis as the backend's (errclass.Unavailable), so that a service
// answering with it says UNAVAILABLE without the cause's text.
func redisErr(op, key string, err error) error {
	return errclass.Mark(errclass.Unavailable, "lease: "+op+" "+key, err)
}

// Acquire implements Store.
func (r *Redis) Acquire(ctx context.Context, key, owner string, data []byte, ttl time.Duration) (Claim, error) {
	if err := check(key, owner, ttl); err != nil {
		return Claim{}, err
	}
	res, err := acquireScript.Run(ctx, r.rdb, []string{r.prefix + key}, owner, data, max(ttl.Milliseconds(), 1)).Slice()
	if err != nil {
		return Claim{}, redisErr("acquire", key, err)
	}
	if len(res) != 4 {
		return Claim{}, fmt.Errorf("lease: acquire %s: unexpected script reply %v", key, res)
	}
	st, _ := res[0].(string)
	c := Claim{Data: []byte(str(res[2])), TTL: time.Duration(toInt(res[3])) * time.Millisecond}
	switch st {
	case "a":
		c.State, c.Owner = Acquired, owner
	case "h":
		c.State, c.Owner = Held, str(res[1])
	case "d":
		c.State = Done
	default:
		return Claim{}, fmt.Errorf("lease: acquire %s: unknown state %q", key, st)
	}
	return c, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func toInt(v any) int64 {
	n, _ := v.(int64)
	return n
}

func (r *Redis) owned(ctx context.Context, op, key, owner string, ttl time.Duration, record []byte) (bool, error) {
	n, err := ownedScript.Run(ctx, r.rdb, []string{r.prefix + key}, owner, op, max(ttl.Milliseconds(), 1), record, r.channel, key).Int()
	if err != nil {
		return false, redisErr(op, key, err)
	}
	return n == 1, nil
}

// Renew implements Store.
func (r *Redis) Renew(ctx context.Context, key, owner string, ttl time.Duration) (bool, error) {
	if err := check(key, owner, ttl); err != nil {
		return false, err
	}
	return r.owned(ctx, "renew", key, owner, ttl, nil)
}

// Release implements Store.
func (r *Redis) Release(ctx context.Context, key, owner string) (bool, error) {
	return r.owned(ctx, "release", key, owner, time.Millisecond, nil)
}

// QueueRelease queues what Release does in p, a pipeline or transaction of the store's client,
// so a holder's last writes and the release share one round trip; the command's Int() is 1 when
// owner held the lease. The script is sent whole (EVAL): a pipeline cannot load it on NOSCRIPT.
func (r *Redis) QueueRelease(ctx context.Context, p redis.Pipeliner, key, owner string) *redis.Cmd {
	return ownedScript.Eval(ctx, p, []string{r.prefix + key}, owner, "release", 1, nil, r.channel, key)
}

// Complete implements Store.
func (r *Redis) Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) (bool, error) {
	if err := check(key, owner, ttl); err != nil {
		return false, err
	}
	return r.owned(ctx, "complete", key, owner, ttl, record)
}

// Signal implements Store.
func (r *Redis) Signal(ctx context.Context, key string) error {
	if err := r.rdb.Publish(ctx, r.channel, key).Err(); err != nil {
		return redisErr("signal", key, err)
	}
	return nil
}

// subscribeTimeout bounds the wait for the subscription's confirmation; without one, waiters
// still retry every maxWaitSlice.
const subscribeTimeout = 2 * time.Second

// Watch implements Store. The first call subscribes to the wake-up channel and waits for the
// subscription to be confirmed, so no wake-up published after Watch returns is missed.
func (r *Redis) Watch(key string) (<-chan struct{}, func()) {
	ch, stop := r.hub.watch(key)
	r.subscribe()
	return ch, stop
}

func (r *Redis) subscribe() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sub != nil || r.closed {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), subscribeTimeout)
	defer cancel()
	sub := r.rdb.Subscribe(ctx, r.channel)
	if _, err := sub.Receive(ctx); err != nil {
		// Waiters fall back to retrying; the next Watch subscribes again.
		r.log.Warn("lease wake-ups unavailable; waiters retry every second", "channel", r.channel, "error", err)
		_ = sub.Close()
		return
	}
	r.sub = sub
	msgs := sub.Channel()
	go func() {
		for m := range msgs {
			r.hub.notify(m.Payload)
		}
	}()
}
