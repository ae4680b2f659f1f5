package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/lease"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// RedisStore keeps records in Redis under a prefix, shared by every replica:
//
//	task:<session>:done     list of steps (JSON)
//	task:<session>:pending  JSON
//	turn:<id>               the record (protobuf), expiring after the retention
//	turns:<session>         sorted set of "<started ms, 13 digits>:<turn id>" (lexical order)
//	outbox                  sorted set of turn ids waiting to be published, by finish time
//	outbox:<id>             the event (protobuf)
//	cancel:<id>             "<by>\x00<reason>", expiring
//	running                 hash of turn id → session id, while the turn's record is RUNNING
//	lease:…                 leases (internal/lease)
type RedisStore struct {
	rdb    *redis.Client
	prefix string
	leases *lease.Redis

	mu sync.Mutex // guards steps
	// steps memoizes decoded done steps by their stored JSON: a session's list is read on every
	// turn and mostly holds the steps it held the turn before (decoding them all again was 5% of
	// an orchestrator's CPU). Content-addressed, so it is never stale; cleared at maxCachedSteps.
	steps map[string]Step
}

const maxCachedSteps = 8192

// NewRedisStore returns a store over rdb with every key under prefix.
func NewRedisStore(rdb *redis.Client, prefix string, log *slog.Logger) *RedisStore {
	return &RedisStore{rdb: rdb, prefix: prefix, leases: lease.NewRedis(rdb, prefix+"lease:", log), steps: map[string]Step{}}
}

// Close ends the lease wake-up subscription.
func (s *RedisStore) Close() error { return s.leases.Close() }

// Leases implements Store.
func (s *RedisStore) Leases() lease.Store { return s.leases }

func (s *RedisStore) doneKey(sid string) string    { return s.prefix + "task:" + sid + ":done" }
func (s *RedisStore) pendingKey(sid string) string { return s.prefix + "task:" + sid + ":pending" }
func (s *RedisStore) turnKey(id string) string     { return s.prefix + "turn:" + id }
func (s *RedisStore) turnsKey(sid string) string   { return s.prefix + "turns:" + sid }
func (s *RedisStore) outboxKey() string            { return s.prefix + "outbox" }
func (s *RedisStore) eventKey(id string) string    { return s.prefix + "outbox:" + id }
func (s *RedisStore) cancelKey(id string) string   { return s.prefix + "cancel:" + id }
func (s *RedisStore) runningKey() string           { return s.prefix + "running" }

// turnMember orders a session's turns by start time in lexical order.
func turnMember(t *orchestratorv1.Turn) string {
	return fmt.Sprintf("%013d:%s", t.GetStartedAt().AsTime().UnixMilli(), t.GetId())
}

// backendErr marks a Redis failure as the backend's (UNAVAILABLE); a context's end stays what
// it is, so that a turn ended by its caller is not reported as a failed store.
func backendErr(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return errclass.Mark(errclass.Unavailable, op, err)
}

// TaskState implements Store.
func (s *RedisStore) TaskState(ctx context.Context, sid string) (TaskState, error) {
	var st TaskState
	pipe := s.rdb.Pipeline()
	done := pipe.LRange(ctx, s.doneKey(sid), 0, -1)
	pending := pipe.Get(ctx, s.pendingKey(sid))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return st, backendErr("load task state", err)
	}
	if raws := done.Val(); len(raws) > 0 {
		st.Done = make([]Step, len(raws))
		s.mu.Lock()
		for i, raw := range raws {
			step, ok := s.steps[raw]
			if !ok {
				if err := json.Unmarshal([]byte(raw), &step); err != nil {
					s.mu.Unlock()
					return TaskState{}, fmt.Errorf("task state of %s: %w", sid, err)
				}
				if len(s.steps) >= maxCachedSteps {
					clear(s.steps)
				}
				s.steps[raw] = step
			}
			st.Done[i] = step
		}
		s.mu.Unlock()
	}
	if raw, err := pending.Result(); err == nil && raw != "" {
		if err := json.Unmarshal([]byte(raw), &st.Pending); err != nil {
			return st, fmt.Errorf("pending of %s: %w", sid, err)
		}
	}
	return st, nil
}

// putTurn queues the writes of a record, its index entry and its entry in the running turns.
func (s *RedisStore) putTurn(ctx context.Context, p redis.Pipeliner, turn *orchestratorv1.Turn, raw []byte, ttl time.Duration) {
	p.Set(ctx, s.turnKey(turn.GetId()), raw, ttl)
	p.ZAdd(ctx, s.turnsKey(turn.GetSessionId()), redis.Z{Member: turnMember(turn)})
	p.Expire(ctx, s.turnsKey(turn.GetSessionId()), ttl)
	if turn.GetStatus() == orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
		p.HSet(ctx, s.runningKey(), turn.GetId(), turn.GetSessionId())
	} else {
		p.HDel(ctx, s.runningKey(), turn.GetId())
	}
}

// PutTurn implements Store.
func (s *RedisStore) PutTurn(ctx context.Context, turn *orchestratorv1.Turn, ttl time.Duration) error {
	raw, err := proto.Marshal(turn)
	if err != nil {
		return err
	}
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		s.putTurn(ctx, p, turn, raw, ttl)
		return nil
	}); err != nil {
		return backendErr("put turn", err)
	}
	return nil
}

// FinishTurn implements Store: one MULTI, which ends with the lease's release. Keeping the
// pending items reads them first; the session's turn lease makes this turn the session's only
// writer.
func (s *RedisStore) FinishTurn(ctx context.Context, f *Finish) (err error) {
	var released *redis.Cmd
	if f.Lease != nil {
		defer func() {
			// Released by the transaction unless it failed before.
			if released == nil || released.Err() != nil {
				if _, rerr := s.leases.Release(ctx, f.Lease.Key, f.Lease.Owner); rerr != nil && err == nil {
					err = rerr
				}
			}
		}()
	}
	w, err := s.prepareFinish(ctx, s.rdb, f)
	if err != nil {
		return err
	}
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		s.queueFinish(ctx, p, f, w)
		if f.Lease != nil {
			released = s.leases.QueueRelease(ctx, p, f.Lease.Key, f.Lease.Owner)
		}
		return nil
	})
	if err != nil {
		return backendErr("finish turn", err)
	}
	return nil
}

// finishWrites are a Finish's values, encoded for Redis.
type finishWrites struct {
	raw, event, pending []byte
	steps               []any
}

// prepareFinish encodes f's writes, reading the pending items f keeps through r (the client,
// or a WATCH transaction that watches the pending key).
func (s *RedisStore) prepareFinish(ctx context.Context, r redis.Cmdable, f *Finish) (finishWrites, error) {
	var w finishWrites
	var err error
	if w.raw, w.event, err = f.encode(); err != nil {
		return w, err
	}
	if f.SetPending {
		var prev []Pending
		if f.KeepPending {
			raw, err := r.Get(ctx, s.pendingKey(f.Turn.GetSessionId())).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return w, backendErr("load pending", err)
			}
			if raw != "" {
				if err := json.Unmarshal([]byte(raw), &prev); err != nil {
					return w, fmt.Errorf("pending of %s: %w", f.Turn.GetSessionId(), err)
				}
			}
		}
		if merged := f.mergePending(prev); len(merged) > 0 {
			if w.pending, err = json.Marshal(merged); err != nil {
				return w, err
			}
		}
	}
	w.steps = make([]any, len(f.Steps))
	for i, st := range f.Steps {
		if w.steps[i], err = json.Marshal(st); err != nil {
			return w, err
		}
	}
	return w, nil
}

// queueFinish queues a Finish's writes (all but the lease's release) in p.
func (s *RedisStore) queueFinish(ctx context.Context, p redis.Pipeliner, f *Finish, w finishWrites) {
	turn := f.Turn
	sid := turn.GetSessionId()
	s.putTurn(ctx, p, turn, w.raw, f.TTL)
	if w.event != nil {
		p.Set(ctx, s.eventKey(turn.GetId()), w.event, 0)
		p.ZAdd(ctx, s.outboxKey(), redis.Z{Score: float64(time.Now().UnixMilli()), Member: turn.GetId()})
	}
	if len(w.steps) > 0 {
		p.RPush(ctx, s.doneKey(sid), w.steps...)
		p.LTrim(ctx, s.doneKey(sid), int64(-f.KeepSteps), -1)
		p.Expire(ctx, s.doneKey(sid), taskStateTTL)
	}
	switch {
	case f.SetPending && w.pending == nil:
		p.Del(ctx, s.pendingKey(sid))
	case f.SetPending:
		p.Set(ctx, s.pendingKey(sid), w.pending, taskStateTTL)
	case len(w.steps) > 0:
		p.Expire(ctx, s.pendingKey(sid), taskStateTTL)
	}
}

// maxOrphanScan bounds the running turns one OrphanedTurns call looks at.
const maxOrphanScan = 10000

// OrphanedTurns implements Store: the running turns (one HSCAN) whose session lease (read in
// one pipeline) their turn does not hold.
func (s *RedisStore) OrphanedTurns(ctx context.Context, limit int) ([]string, error) {
	type entry struct{ id, sid string }
	var running []entry
	var cursor uint64
	for {
		kv, next, err := s.rdb.HScan(ctx, s.runningKey(), cursor, "", 500).Result()
		if err != nil {
			return nil, backendErr("scan running turns", err)
		}
		for i := 0; i+1 < len(kv); i += 2 {
			running = append(running, entry{kv[i], kv[i+1]})
		}
		if cursor = next; cursor == 0 || len(running) >= maxOrphanScan {
			break
		}
	}
	if len(running) == 0 {
		return nil, nil
	}
	holders := make([]func() (string, error), len(running))
	pipe := s.rdb.Pipeline()
	for i, e := range running {
		holders[i] = s.leases.QueueHolder(ctx, pipe, sessionKey(e.sid))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, backendErr("read session leases", err)
	}
	var out []string
	seen := map[string]bool{}
	for i, e := range running {
		h, err := holders[i]()
		if err != nil {
			return nil, err
		}
		if h != e.id && !seen[e.id] && len(out) < limit {
			seen[e.id] = true
			out = append(out, e.id)
		}
	}
	return out, nil
}

// InterruptTurn implements Store: a WATCH on the record, the session's lease and its pending
// items, so the write happens only when none of them changed since they were read (a turn that
// finished or renewed meanwhile, or another replica that interrupted it first, wins).
func (s *RedisStore) InterruptTurn(ctx context.Context, turnID string, end func(*orchestratorv1.Turn) *Finish) (bool, error) {
	// A check without the transaction first: GetTurn calls this for every running turn.
	rec, err := s.GetTurn(ctx, turnID)
	if errors.Is(err, ErrNotFound) {
		// Expired with its retention: forget it.
		_ = s.rdb.HDel(ctx, s.runningKey(), turnID).Err()
		return false, ErrNotFound
	}
	if err != nil {
		return false, err
	}
	if rec.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
		return false, nil
	}
	sid := rec.GetSessionId()
	if h, err := s.leases.QueueHolder(ctx, s.rdb, sessionKey(sid))(); err != nil || h == turnID {
		return false, err
	}
	done := false
	err = s.rdb.Watch(ctx, func(tx *redis.Tx) error {
		raw, err := tx.Get(ctx, s.turnKey(turnID)).Bytes()
		if err != nil {
			return err
		}
		cur := &orchestratorv1.Turn{}
		if err := proto.Unmarshal(raw, cur); err != nil {
			return fmt.Errorf("turn %s: %w", turnID, err)
		}
		if cur.GetStatus() != orchestratorv1.TurnStatus_TURN_STATUS_RUNNING {
			return nil
		}
		if h, err := s.leases.QueueHolder(ctx, tx, sessionKey(sid))(); err != nil || h == turnID {
			return err
		}
		f := end(cur)
		w, err := s.prepareFinish(ctx, tx, f)
		if err != nil {
			return err
		}
		if _, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			s.queueFinish(ctx, p, f, w)
			return nil
		}); err != nil {
			return err
		}
		done = true
		return nil
	}, s.turnKey(turnID), s.leases.RedisKey(sessionKey(sid)), s.pendingKey(sid))
	switch {
	case errors.Is(err, redis.TxFailedErr), errors.Is(err, redis.Nil):
		// Changed meanwhile (or gone): the next look decides.
		return false, nil
	case err != nil:
		return false, backendErr("interrupt turn", err)
	}
	return done, nil
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

// ListTurns implements Store. The cursor is the last returned index member; members whose
// record expired are skipped and removed.
func (s *RedisStore) ListTurns(ctx context.Context, sid, cursor string, limit int) ([]*orchestratorv1.Turn, string, error) {
	max := "+"
	if cursor != "" {
		if _, id, ok := strings.Cut(cursor, ":"); !ok || id == "" || len(cursor) > 200 {
			return nil, "", ErrBadCursor
		}
		max = "(" + cursor
	}
	var out []*orchestratorv1.Turn
	var members []string
	for len(out) <= limit {
		page, err := s.rdb.ZRevRangeByLex(ctx, s.turnsKey(sid), &redis.ZRangeBy{Max: max, Min: "-", Count: int64(limit + 1 - len(out))}).Result()
		if err != nil {
			return nil, "", backendErr("list turns", err)
		}
		if len(page) == 0 {
			break
		}
		keys := make([]string, len(page))
		for i, m := range page {
			_, id, _ := strings.Cut(m, ":")
			keys[i] = s.turnKey(id)
		}
		vals, err := s.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, "", backendErr("list turns", err)
		}
		var stale []any
		for i, v := range vals {
			raw, ok := v.(string)
			if !ok {
				stale = append(stale, page[i])
				continue
			}
			t := &orchestratorv1.Turn{}
			if err := proto.Unmarshal([]byte(raw), t); err != nil {
				return nil, "", fmt.Errorf("turn %s: %w", keys[i], err)
			}
			out = append(out, t)
			members = append(members, page[i])
		}
		if len(stale) > 0 {
			_ = s.rdb.ZRem(ctx, s.turnsKey(sid), stale...).Err()
		}
		max = "(" + page[len(page)-1]
	}
	next := ""
	if len(out) > limit {
		out = out[:limit]
		next = members[limit-1]
	}
	return out, next, nil
}

// DeleteSession implements Store.
func (s *RedisStore) DeleteSession(ctx context.Context, sid string) error {
	if err := s.rdb.Del(ctx, s.doneKey(sid), s.pendingKey(sid)).Err(); err != nil {
		return backendErr("delete task state", err)
	}
	return nil
}

// Outbox implements Store.
func (s *RedisStore) Outbox(ctx context.Context, limit int) ([]*eventsv1.TurnFinished, error) {
	ids, err := s.rdb.ZRange(ctx, s.outboxKey(), 0, int64(limit-1)).Result()
	if err != nil {
		return nil, backendErr("read outbox", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = s.eventKey(id)
	}
	vals, err := s.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, backendErr("read outbox", err)
	}
	var out []*eventsv1.TurnFinished
	for i, v := range vals {
		raw, ok := v.(string)
		if !ok {
			// Published and deleted by another replica after the range was read.
			_ = s.rdb.ZRem(ctx, s.outboxKey(), ids[i]).Err()
			continue
		}
		ev := &eventsv1.TurnFinished{}
		if err := proto.Unmarshal([]byte(raw), ev); err != nil {
			return nil, fmt.Errorf("outbox entry %s: %w", ids[i], err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// DeleteOutbox implements Store.
func (s *RedisStore) DeleteOutbox(ctx context.Context, turnID string) error {
	if _, err := s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, s.eventKey(turnID))
		p.ZRem(ctx, s.outboxKey(), turnID)
		return nil
	}); err != nil {
		return backendErr("delete outbox entry", err)
	}
	return nil
}

// RequestCancel implements Store.
func (s *RedisStore) RequestCancel(ctx context.Context, turnID, by, reason string, ttl time.Duration) error {
	if err := s.rdb.Set(ctx, s.cancelKey(turnID), by+"\x00"+reason, ttl).Err(); err != nil {
		return backendErr("request cancel", err)
	}
	return s.leases.Signal(ctx, cancelKey(turnID))
}

// CancelRequest implements Store.
func (s *RedisStore) CancelRequest(ctx context.Context, turnID string) (string, string, bool, error) {
	v, err := s.rdb.Get(ctx, s.cancelKey(turnID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", "", false, nil
	}
	if err != nil {
		return "", "", false, backendErr("read cancel request", err)
	}
	by, reason, _ := strings.Cut(v, "\x00")
	return by, reason, true, nil
}
