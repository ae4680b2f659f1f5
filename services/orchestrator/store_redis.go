package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// RedisStore keeps records in Redis under a prefix: <prefix>task:<session>:done (a list of
// steps), <prefix>task:<session>:pending (JSON), <prefix>turn:<id> (protobuf).
type RedisStore struct {
	rdb    *redis.Client
	prefix string
}

// NewRedisStore returns a store over rdb with every key under prefix.
func NewRedisStore(rdb *redis.Client, prefix string) *RedisStore {
	return &RedisStore{rdb: rdb, prefix: prefix}
}

func (s *RedisStore) doneKey(sid string) string    { return s.prefix + "task:" + sid + ":done" }
func (s *RedisStore) pendingKey(sid string) string { return s.prefix + "task:" + sid + ":pending" }
func (s *RedisStore) turnKey(id string) string     { return s.prefix + "turn:" + id }

func backendErr(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%s: %w: %w", op, errBackend, err)
}

// errBackend marks a store failure that is the backend's, mapped to UNAVAILABLE.
var errBackend = errors.New("orchestrator store unavailable")

// TaskState implements Store.
func (s *RedisStore) TaskState(ctx context.Context, sid string) (TaskState, error) {
	var st TaskState
	pipe := s.rdb.Pipeline()
	done := pipe.LRange(ctx, s.doneKey(sid), 0, -1)
	pending := pipe.Get(ctx, s.pendingKey(sid))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return st, backendErr("load task state", err)
	}
	for _, raw := range done.Val() {
		var step Step
		if err := json.Unmarshal([]byte(raw), &step); err != nil {
			return st, fmt.Errorf("task state of %s: %w", sid, err)
		}
		st.Done = append(st.Done, step)
	}
	if raw, err := pending.Result(); err == nil && raw != "" {
		if err := json.Unmarshal([]byte(raw), &st.Pending); err != nil {
			return st, fmt.Errorf("pending of %s: %w", sid, err)
		}
	}
	return st, nil
}

// AddSteps implements Store: RPUSH and LTRIM in one MULTI, so readers never see the list longer
// than keep.
func (s *RedisStore) AddSteps(ctx context.Context, sid string, steps []Step, keep int) error {
	if len(steps) == 0 {
		return nil
	}
	vals := make([]any, len(steps))
	for i, st := range steps {
		b, err := json.Marshal(st)
		if err != nil {
			return err
		}
		vals[i] = b
	}
	_, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, s.doneKey(sid), vals...)
		p.LTrim(ctx, s.doneKey(sid), int64(-keep), -1)
		p.Expire(ctx, s.doneKey(sid), taskStateTTL)
		p.Expire(ctx, s.pendingKey(sid), taskStateTTL)
		return nil
	})
	if err != nil {
		return backendErr("add steps", err)
	}
	return nil
}

// SetPending implements Store.
func (s *RedisStore) SetPending(ctx context.Context, sid string, pending []Pending) error {
	var err error
	if len(pending) == 0 {
		err = s.rdb.Del(ctx, s.pendingKey(sid)).Err()
	} else {
		var b []byte
		if b, err = json.Marshal(pending); err != nil {
			return err
		}
		err = s.rdb.Set(ctx, s.pendingKey(sid), b, taskStateTTL).Err()
	}
	if err != nil {
		return backendErr("set pending", err)
	}
	return nil
}

// PutTurn implements Store.
func (s *RedisStore) PutTurn(ctx context.Context, turn *orchestratorv1.Turn, ttl time.Duration) error {
	b, err := proto.Marshal(turn)
	if err != nil {
		return err
	}
	if err := s.rdb.Set(ctx, s.turnKey(turn.GetId()), b, ttl).Err(); err != nil {
		return backendErr("put turn", err)
	}
	return nil
}

// GetTurn implements Store.
func (s *RedisStore) GetTurn(ctx context.Context, id string) (*orchestratorv1.Turn, error) {
	b, err := s.rdb.Get(ctx, s.turnKey(id)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, backendErr("get turn", err)
	}
	t := &orchestratorv1.Turn{}
	if err := proto.Unmarshal(b, t); err != nil {
		return nil, fmt.Errorf("turn %s: %w", id, err)
	}
	return t, nil
}

// DeleteSession implements Store.
func (s *RedisStore) DeleteSession(ctx context.Context, sid string) error {
	if err := s.rdb.Del(ctx, s.doneKey(sid), s.pendingKey(sid)).Err(); err != nil {
		return backendErr("delete task state", err)
	}
	return nil
}

func (s *RedisStore) lockKey(sid string) string { return s.prefix + "lock:" + sid }

// lockScript takes a free lease, or extends the caller's own; it returns 1, or the holder.
var lockScript = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]); return 1 end
if not cur then return '' end
return cur`)

// LockSession implements Store; the holder calling again extends its lease.
func (s *RedisStore) LockSession(ctx context.Context, sid, holder string, ttl time.Duration) (bool, string, error) {
	res, err := lockScript.Run(ctx, s.rdb, []string{s.lockKey(sid)}, holder, ttl.Milliseconds()).Result()
	if err != nil {
		return false, "", backendErr("lock session", err)
	}
	if n, ok := res.(int64); ok && n == 1 {
		return true, holder, nil
	}
	cur, _ := res.(string)
	return false, cur, nil
}

var unlockScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// UnlockSession implements Store; a lease that expired and went to another holder is kept.
func (s *RedisStore) UnlockSession(ctx context.Context, sid, holder string) error {
	if err := unlockScript.Run(ctx, s.rdb, []string{s.lockKey(sid)}, holder).Err(); err != nil {
		return backendErr("unlock session", err)
	}
	return nil
}
