package tools

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/lease"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// RedisStore keeps the registry and the idempotency records in Redis, so every replica sees the
// same tools and one idempotency key runs once across replicas. Layout, under the prefix:
//
//	tool:<name>  hash: spec (ToolSpec protobuf), hash, source, tokens, version, created, updated
//	tools        sorted set of names (score 0, ordered by name)
//	revision     counter bumped by every registry change
//	idem:<key>   the idempotency record of a key (internal/lease)
type RedisStore struct {
	rdb    *redis.Client
	prefix string
	leases *lease.Redis
}

// NewRedisStore returns a store whose keys all start with prefix.
func NewRedisStore(rdb *redis.Client, prefix string) *RedisStore {
	return &RedisStore{rdb: rdb, prefix: prefix, leases: lease.NewRedis(rdb, prefix+"idem:", nil)}
}

// Leases implements Store.
func (s *RedisStore) Leases() lease.Store { return s.leases }

// Close ends the idempotency records' wake-up subscription.
func (s *RedisStore) Close() error { return s.leases.Close() }

func (s *RedisStore) toolKey(name string) string { return s.prefix + "tool:" + name }
func (s *RedisStore) namesKey() string           { return s.prefix + "tools" }
func (s *RedisStore) revKey() string             { return s.prefix + "revision" }

// putToolScript stores a spec unless the same hash and source are stored, bumping the version
// only when the hash differs; a tool of another source is replaced only when ARGV[7] is "1",
// a builtin never. KEYS: tool, names, revision. ARGV: name, spec, hash, source, tokens, now
// (unix nanos), replace others. Returns {changed, version, created}, or {-1, owner source}.
var putToolScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'hash', 'source', 'version', 'created')
if cur[1] == ARGV[3] and cur[2] == ARGV[4] then
  return {0, tonumber(cur[3]), cur[4]}
end
if cur[2] and cur[2] ~= ARGV[4] and (ARGV[7] ~= '1' or cur[2] == 'builtin') then
  return {-1, cur[2], ''}
end
local version = 1
local created = ARGV[6]
if cur[3] then
  version = tonumber(cur[3])
  created = cur[4]
  if cur[1] ~= ARGV[3] then version = version + 1 end
end
redis.call('HSET', KEYS[1], 'spec', ARGV[2], 'hash', ARGV[3], 'source', ARGV[4], 'tokens', ARGV[5],
  'version', version, 'created', created, 'updated', ARGV[6])
redis.call('ZADD', KEYS[2], 0, ARGV[1])
redis.call('INCR', KEYS[3])
return {1, version, created}
`)

// deleteToolScript removes a tool, of the source ARGV[2] when it is not empty. KEYS: tool,
// names, revision. ARGV: name, source. Returns 1, 0 (no such tool) or the owner's source.
var deleteToolScript = redis.NewScript(`
local src = redis.call('HGET', KEYS[1], 'source')
if not src then return 0 end
if ARGV[2] ~= '' and src ~= ARGV[2] then return src end
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('INCR', KEYS[3])
return 1
`)

// PutTool implements Store.
func (s *RedisStore) PutTool(ctx context.Context, t *toolsv1.Tool, hash string, now time.Time, replaceOthers bool) (*toolsv1.Tool, bool, error) {
	spec, err := proto.MarshalOptions{Deterministic: true}.Marshal(t.GetSpec())
	if err != nil {
		return nil, false, err
	}
	name := t.GetSpec().GetName()
	res, err := putToolScript.Run(ctx, s.rdb, []string{s.toolKey(name), s.namesKey(), s.revKey()},
		name, spec, hash, t.GetSource(), t.GetSchemaTokens(), now.UnixNano(), boolArg(replaceOthers)).Slice()
	if err != nil {
		return nil, false, errclass.Mark(errclass.Unavailable, "redis store tool", err)
	}
	if len(res) != 3 {
		return nil, false, errors.New("store tool: unexpected script reply")
	}
	if toInt64(res[0]) == -1 {
		owner, _ := res[1].(string)
		return nil, false, &OwnedError{Name: name, Source: owner}
	}
	changed := toInt64(res[0]) == 1
	if !changed {
		st, err := s.GetTool(ctx, name)
		if err != nil {
			return nil, false, err
		}
		return st.Tool, false, nil
	}
	out := proto.Clone(t).(*toolsv1.Tool)
	out.Version = toInt64(res[1])
	out.CreatedAt = nanosToTimestamp(toInt64(res[2]))
	out.UpdatedAt = timestamppb.New(now)
	return out, true, nil
}

func toInt64(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case string:
		n, _ := strconv.ParseInt(x, 10, 64)
		return n
	}
	return 0
}

func nanosToTimestamp(n int64) *timestamppb.Timestamp {
	return timestamppb.New(time.Unix(0, n))
}

func decodeRedisTool(m map[string]string) (*StoredTool, error) {
	spec := &toolsv1.ToolSpec{}
	if err := proto.Unmarshal([]byte(m["spec"]), spec); err != nil {
		return nil, fmt.Errorf("corrupt tool record: %w", err)
	}
	version, _ := strconv.ParseInt(m["version"], 10, 64)
	tokens, _ := strconv.ParseInt(m["tokens"], 10, 32)
	created, _ := strconv.ParseInt(m["created"], 10, 64)
	updated, _ := strconv.ParseInt(m["updated"], 10, 64)
	return &StoredTool{
		Tool: &toolsv1.Tool{
			Spec:         spec,
			Version:      version,
			Source:       m["source"],
			CreatedAt:    nanosToTimestamp(created),
			UpdatedAt:    nanosToTimestamp(updated),
			SchemaTokens: int32(tokens),
		},
		Hash: m["hash"],
	}, nil
}

// GetTool implements Store.
func (s *RedisStore) GetTool(ctx context.Context, name string) (*StoredTool, error) {
	m, err := s.rdb.HGetAll(ctx, s.toolKey(name)).Result()
	if err != nil {
		return nil, errclass.Mark(errclass.Unavailable, "redis read tool", err)
	}
	if len(m) == 0 || m["spec"] == "" && m["hash"] == "" {
		return nil, ErrNotFound
	}
	return decodeRedisTool(m)
}

// DeleteTool implements Store.
func (s *RedisStore) DeleteTool(ctx context.Context, name, source string) error {
	res, err := deleteToolScript.Run(ctx, s.rdb, []string{s.toolKey(name), s.namesKey(), s.revKey()}, name, source).Result()
	if err != nil {
		return errclass.Mark(errclass.Unavailable, "redis delete tool", err)
	}
	switch x := res.(type) {
	case string:
		return &OwnedError{Name: name, Source: x}
	case int64:
		if x == 0 {
			return ErrNotFound
		}
	}
	return nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// ListTools implements Store. The revision is read first, so a change that races with the
// listing shows up as a newer revision on the next call.
func (s *RedisStore) ListTools(ctx context.Context) ([]*StoredTool, int64, error) {
	rev, err := s.Revision(ctx)
	if err != nil {
		return nil, 0, err
	}
	names, err := s.rdb.ZRange(ctx, s.namesKey(), 0, -1).Result()
	if err != nil {
		return nil, 0, errclass.Mark(errclass.Unavailable, "redis list tools", err)
	}
	cmds := make([]*redis.MapStringStringCmd, len(names))
	_, err = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range names {
			cmds[i] = p.HGetAll(ctx, s.toolKey(n))
		}
		return nil
	})
	if err != nil {
		return nil, 0, errclass.Mark(errclass.Unavailable, "redis list tools", err)
	}
	out := make([]*StoredTool, 0, len(names))
	for _, c := range cmds {
		m := c.Val()
		if len(m) == 0 {
			continue // deleted between the two reads
		}
		st, err := decodeRedisTool(m)
		if err != nil {
			return nil, 0, err
		}
		out = append(out, st)
	}
	return out, rev, nil
}

// Revision implements Store.
func (s *RedisStore) Revision(ctx context.Context) (int64, error) {
	rev, err := s.rdb.Get(ctx, s.revKey()).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, errclass.Mark(errclass.Unavailable, "redis read registry revision", err)
	}
	return rev, nil
}
