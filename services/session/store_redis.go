package session

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/errclass"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// RedisStore keeps sessions in Redis. Per session (all keys under the prefix):
//
//	s:<sid>  hash   identity ("rec"), state counters, summary
//	m:<sid>  list   the log; the message at index i has seq i+1, so seqs are dense by construction
//	c:<sid>  hash   client_id → seq, for de-duplicating retried appends
//	t:<sid>  zset   seqs of user messages (turn starts), to find the window without a scan
//	k:<sid>  hash   seq → sticky message
//	u:<uid>  zset   the user's session ids by last activity
//	i:<uid>:<term> zset "sid:seq" postings of the search index, scored by time
//
// Appends and summary updates run as Lua scripts, so a batch is all or nothing and concurrent
// appenders get dense, distinct seqs.
type RedisStore struct {
	rdb    *redis.Client
	prefix string
}

// NewRedisStore returns a store using rdb with every key under prefix.
func NewRedisStore(rdb *redis.Client, prefix string) *RedisStore {
	return &RedisStore{rdb: rdb, prefix: prefix}
}

func (r *RedisStore) key(kind, id string) string { return r.prefix + kind + ":" + id }

func (r *RedisStore) indexKey(userID, term string) string {
	return r.prefix + "i:" + userID + ":" + term
}

// redisErr marks backend failures so the server answers UNAVAILABLE.
func redisErr(op string, err error) error {
	return errclass.Mark(errclass.Unavailable, "redis "+op, err)
}

// CreateSession implements Store.
func (r *RedisStore) CreateSession(ctx context.Context, s *sessionv1.Session) error {
	rec, err := proto.Marshal(&sessionv1.Session{Id: s.GetId(), UserId: s.GetUserId(), Title: s.GetTitle(), Metadata: s.GetMetadata(), CreatedAt: s.GetCreatedAt(), Config: s.GetConfig()})
	if err != nil {
		return err
	}
	now := s.GetCreatedAt().AsTime().UnixMilli()
	ok, err := r.rdb.HSetNX(ctx, r.key("s", s.GetId()), "rec", rec).Result()
	if err != nil {
		return redisErr("create session", err)
	}
	if !ok {
		return fmt.Errorf("session %s already exists", s.GetId())
	}
	_, err = r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, r.key("s", s.GetId()), "updated_at", now)
		p.ZAdd(ctx, r.key("u", s.GetUserId()), redis.Z{Score: float64(now), Member: s.GetId()})
		return nil
	})
	if err != nil {
		return redisErr("create session", err)
	}
	return nil
}

var sessionFields = []string{"rec", "last_seq", "message_count", "token_count", "turn_count", "summary_seq", "updated_at"}

func decodeSession(vals []any) (*sessionv1.Session, error) {
	if len(vals) == 0 || vals[0] == nil {
		return nil, ErrNotFound
	}
	s := &sessionv1.Session{}
	if err := proto.Unmarshal([]byte(vals[0].(string)), s); err != nil {
		return nil, fmt.Errorf("decode session: %w", err)
	}
	n := func(i int) int64 {
		if str, ok := vals[i].(string); ok {
			v, _ := strconv.ParseInt(str, 10, 64)
			return v
		}
		return 0
	}
	s.State = &sessionv1.SessionState{
		LastSeq:           n(1),
		MessageCount:      n(2),
		TokenCount:        n(3),
		TurnCount:         n(4),
		SummaryThroughSeq: n(5),
		UpdatedAt:         timestamppb.New(time.UnixMilli(n(6))),
	}
	return s, nil
}

// GetSession implements Store.
func (r *RedisStore) GetSession(ctx context.Context, id string) (*sessionv1.Session, error) {
	vals, err := r.rdb.HMGet(ctx, r.key("s", id), sessionFields...).Result()
	if err != nil {
		return nil, redisErr("get session", err)
	}
	return decodeSession(vals)
}

// ListSessions implements Store. The cursor is "<updated ms>:<session id>" of the last session
// returned; sessions with equal times are ordered by id, newest id first.
func (r *RedisStore) ListSessions(ctx context.Context, userID, cursor string, limit int) ([]*sessionv1.Session, string, error) {
	max := "+inf"
	var curScore float64
	var curID string
	if cursor != "" {
		ms, id, ok := strings.Cut(cursor, ":")
		v, err := strconv.ParseInt(ms, 10, 64)
		if !ok || err != nil {
			return nil, "", fmt.Errorf("%w: bad page token", ErrBadCursor)
		}
		curScore, curID, max = float64(v), id, ms
	}
	var ids []redis.Z
	for offset := int64(0); len(ids) < limit+1; {
		page, err := r.rdb.ZRevRangeByScoreWithScores(ctx, r.key("u", userID), &redis.ZRangeBy{Max: max, Min: "-inf", Offset: offset, Count: int64(limit + 1)}).Result()
		if err != nil {
			return nil, "", redisErr("list sessions", err)
		}
		for _, z := range page {
			if cursor != "" && z.Score == curScore && z.Member.(string) >= curID {
				continue
			}
			ids = append(ids, z)
		}
		if len(page) < limit+1 {
			break
		}
		offset += int64(len(page))
	}
	next := ""
	if len(ids) > limit {
		ids = ids[:limit]
		last := ids[len(ids)-1]
		next = fmt.Sprintf("%d:%s", int64(last.Score), last.Member.(string))
	}
	cmds, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, z := range ids {
			p.HMGet(ctx, r.key("s", z.Member.(string)), sessionFields...)
		}
		return nil
	})
	if err != nil {
		return nil, "", redisErr("list sessions", err)
	}
	out := make([]*sessionv1.Session, 0, len(ids))
	for _, c := range cmds {
		s, err := decodeSession(c.(*redis.SliceCmd).Val())
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, "", err
		}
		out = append(out, s)
	}
	return out, next, nil
}

// DeleteSession implements Store.
func (r *RedisStore) DeleteSession(ctx context.Context, userID, id string) (int64, error) {
	raw, err := r.rdb.LRange(ctx, r.key("m", id), 0, -1).Result()
	if err != nil {
		return 0, redisErr("delete session", err)
	}
	postings := map[string][]any{}
	for i, data := range raw {
		m := &sessionv1.Message{}
		if err := proto.Unmarshal([]byte(data), m); err != nil {
			continue
		}
		member := fmt.Sprintf("%s:%d", id, i+1)
		for _, t := range textTerms(m.GetContent()) {
			postings[t] = append(postings[t], member)
		}
	}
	var delSession *redis.IntCmd
	_, err = r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		delSession = p.Del(ctx, r.key("s", id))
		p.Del(ctx, r.key("m", id), r.key("c", id), r.key("t", id), r.key("k", id))
		p.ZRem(ctx, r.key("u", userID), id)
		for t, members := range postings {
			p.ZRem(ctx, r.indexKey(userID, t), members...)
		}
		return nil
	})
	if err != nil {
		return 0, redisErr("delete session", err)
	}
	if delSession.Val() == 0 {
		return 0, ErrNotFound
	}
	return int64(len(raw)), nil
}

// appendScript appends a batch atomically.
// KEYS: s, m, c, t, k, u, then the index keys of every message's terms.
// ARGV: sid, expected ("" for none), now ms, n, then per message: payload, client_id, is_user,
// sticky, tokens, term count; the term count says how many of the following KEYS it indexes.
// Returns {"ok", last_seq, message_count, token_count, turn_count, updated_at, then per message
// "n<seq>" (appended) or "d<seq>" (already stored)} or
// {"conflict", last_seq} or {"notfound"}.
var appendScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], 'rec') == 0 then return {'notfound'} end
local n = tonumber(ARGV[4])
local existing = {}
local fresh = 0
for i = 1, n do
  local cid = ARGV[4 + (i-1)*6 + 2]
  local seq = false
  if cid ~= '' then seq = redis.call('HGET', KEYS[3], cid) end
  if seq then existing[i] = seq else fresh = fresh + 1 end
end
local last = tonumber(redis.call('HGET', KEYS[1], 'last_seq') or '0')
if fresh > 0 and ARGV[2] ~= '' and tonumber(ARGV[2]) ~= last then
  return {'conflict', tostring(last)}
end
local out = {'ok'}
local tokens, turns, keyi = 0, 0, 7
local seqs = {}
for i = 1, n do
  local base = 4 + (i-1)*6
  local nterms = tonumber(ARGV[base + 6])
  if existing[i] then
    seqs[i] = 'd' .. existing[i]
  else
    local payload, cid = ARGV[base + 1], ARGV[base + 2]
    local seq = redis.call('RPUSH', KEYS[2], payload)
    if cid ~= '' then redis.call('HSET', KEYS[3], cid, seq) end
    if ARGV[base + 3] == '1' then redis.call('ZADD', KEYS[4], seq, seq); turns = turns + 1 end
    if ARGV[base + 4] == '1' then redis.call('HSET', KEYS[5], seq, payload) end
    tokens = tokens + tonumber(ARGV[base + 5])
    local member = ARGV[1] .. ':' .. seq
    for j = 0, nterms - 1 do
      redis.call('ZADD', KEYS[keyi + j], ARGV[3], member)
    end
    seqs[i] = 'n' .. seq
  end
  keyi = keyi + nterms
end
if fresh > 0 then
  redis.call('HINCRBY', KEYS[1], 'message_count', fresh)
  redis.call('HINCRBY', KEYS[1], 'token_count', tokens)
  redis.call('HINCRBY', KEYS[1], 'turn_count', turns)
  redis.call('HSET', KEYS[1], 'last_seq', redis.call('LLEN', KEYS[2]), 'updated_at', ARGV[3])
  redis.call('ZADD', KEYS[6], ARGV[3], ARGV[1])
end
for _, f in ipairs({'last_seq', 'message_count', 'token_count', 'turn_count', 'updated_at'}) do
  out[#out + 1] = redis.call('HGET', KEYS[1], f) or '0'
end
for i = 1, n do out[#out + 1] = seqs[i] end
return out
`)

// Append implements Store.
func (r *RedisStore) Append(ctx context.Context, userID, sessionID string, batch []AppendItem, expectedLastSeq *int64) (*AppendResult, error) {
	keys, args, err := r.appendCall(userID, sessionID, batch, expectedLastSeq)
	if err != nil {
		return nil, err
	}
	res, err := appendScript.Run(ctx, r.rdb, keys, args...).StringSlice()
	if err != nil {
		return nil, redisErr("append", err)
	}
	return r.appended(ctx, sessionID, batch, expectedLastSeq, res)
}

// AppendLoad implements Store: the append script and the context script go in one pipeline, so
// Redis runs the load right after the append, on the log that includes it (a script Redis does
// not have cached yet is sent again on its own, after the append when it is the append's).
func (r *RedisStore) AppendLoad(ctx context.Context, userID, sessionID string, batch []AppendItem, expectedLastSeq *int64, turns, maxEvicted int) (*AppendResult, *ContextData, error) {
	akeys, aargs, err := r.appendCall(userID, sessionID, batch, expectedLastSeq)
	if err != nil {
		return nil, nil, err
	}
	lkeys, largs := r.loadCall(sessionID, turns, maxEvicted)
	pipe := r.rdb.Pipeline()
	ac := appendScript.EvalSha(ctx, pipe, akeys, aargs...)
	lc := loadContextScript.EvalSha(ctx, pipe, lkeys, largs...)
	_, _ = pipe.Exec(ctx) // each command's error is read below
	if noScript(ac.Err()) {
		// The load ran before the append: both again, in order.
		ac = appendScript.Run(ctx, r.rdb, akeys, aargs...)
		if ac.Err() == nil {
			lc = loadContextScript.Run(ctx, r.rdb, lkeys, largs...)
		}
	}
	ares, err := ac.StringSlice()
	if err != nil {
		return nil, nil, redisErr("append", err)
	}
	res, err := r.appended(ctx, sessionID, batch, expectedLastSeq, ares)
	if err != nil {
		return nil, nil, err
	}
	if noScript(lc.Err()) {
		lc = loadContextScript.Run(ctx, r.rdb, lkeys, largs...)
	}
	lres, err := lc.Slice()
	if err != nil {
		return nil, nil, redisErr("load context", err)
	}
	d, err := decodeContext(lres, maxEvicted)
	if err != nil {
		return nil, nil, err
	}
	return res, d, nil
}

// noScript reports whether a script call failed because Redis does not have the script cached.
func noScript(err error) bool { return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") }

// appendCall is the keys and arguments of appendScript for a batch.
func (r *RedisStore) appendCall(userID, sessionID string, batch []AppendItem, expectedLastSeq *int64) ([]string, []any, error) {
	keys := []string{r.key("s", sessionID), r.key("m", sessionID), r.key("c", sessionID), r.key("t", sessionID), r.key("k", sessionID), r.key("u", userID)}
	expected := ""
	if expectedLastSeq != nil {
		expected = strconv.FormatInt(*expectedLastSeq, 10)
	}
	now := time.Now()
	args := []any{sessionID, expected, now.UnixMilli(), len(batch)}
	for _, it := range batch {
		m := it.Message
		payload, err := proto.Marshal(m)
		if err != nil {
			return nil, nil, err
		}
		for _, t := range it.Terms {
			keys = append(keys, r.indexKey(userID, t))
		}
		args = append(args, payload, m.GetClientId(), boolArg(m.GetRole() == sessionv1.Role_ROLE_USER), boolArg(m.GetSticky()), m.GetTokenCount(), len(it.Terms))
	}
	return keys, args, nil
}

// appended decodes appendScript's reply for batch.
func (r *RedisStore) appended(ctx context.Context, sessionID string, batch []AppendItem, expectedLastSeq *int64, res []string) (*AppendResult, error) {
	if len(res) == 0 {
		return nil, errors.New("append: an empty reply from the script")
	}
	switch res[0] {
	case "notfound":
		return nil, ErrNotFound
	case "conflict":
		actual, _ := strconv.ParseInt(res[1], 10, 64)
		return nil, &ConflictError{Expected: *expectedLastSeq, Actual: actual}
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(res[i], 10, 64); return v }
	out := &AppendResult{
		Messages: make([]*sessionv1.Message, len(batch)),
		State: &sessionv1.SessionState{
			LastSeq: n(1), MessageCount: n(2), TokenCount: n(3), TurnCount: n(4),
			UpdatedAt: timestamppb.New(time.UnixMilli(n(5))),
		},
	}
	for i, v := range res[6:] {
		seq, _ := strconv.ParseInt(v[1:], 10, 64)
		if v[0] == 'd' {
			stored, err := r.messageAt(ctx, sessionID, seq)
			if err != nil {
				return nil, err
			}
			out.Messages[i] = stored
			out.Deduplicated++
			continue
		}
		batch[i].Message.Seq = seq
		out.Messages[i] = batch[i].Message
	}
	return out, nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func decodeMessage(data string, seq int64) (*sessionv1.Message, error) {
	m := &sessionv1.Message{}
	if err := proto.Unmarshal([]byte(data), m); err != nil {
		return nil, fmt.Errorf("decode message %d: %w", seq, err)
	}
	m.Seq = seq
	return m, nil
}

func (r *RedisStore) messageAt(ctx context.Context, sessionID string, seq int64) (*sessionv1.Message, error) {
	msgs, err := r.messageRange(ctx, sessionID, seq, seq)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, fmt.Errorf("message %d of session %s is missing", seq, sessionID)
	}
	return msgs[0], nil
}

// messageRange returns the messages with from <= seq <= to.
func (r *RedisStore) messageRange(ctx context.Context, sessionID string, from, to int64) ([]*sessionv1.Message, error) {
	if from < 1 {
		from = 1
	}
	if to < from {
		return nil, nil
	}
	raw, err := r.rdb.LRange(ctx, r.key("m", sessionID), from-1, to-1).Result()
	if err != nil {
		return nil, redisErr("read messages", err)
	}
	out := make([]*sessionv1.Message, 0, len(raw))
	for i, data := range raw {
		m, err := decodeMessage(data, from+int64(i))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// ListMessages implements Store.
func (r *RedisStore) ListMessages(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]*sessionv1.Message, error) {
	return r.messageRange(ctx, sessionID, afterSeq+1, afterSeq+int64(limit))
}

// loadContextScript reads what LoadContext needs in one round trip, consistently: the session's
// fields, its summary, the turn index's tail (the seqs of the last turns+1 user messages, newest
// first), the sticky messages, the window's range of the log and the capped evicted range (from
// summary_seq, which UpdateSummary sets with the summary). KEYS: session, turns, sticky,
// messages. ARGV: turns, maxEvicted, then sessionFields (summary_seq sixth).
var loadContextScript = redis.NewScript(`
local sess = redis.call('HMGET', KEYS[1], unpack(ARGV, 3))
if not sess[1] then return {sess} end
local turns, maxEvicted = tonumber(ARGV[1]), tonumber(ARGV[2])
local summary = redis.call('HGET', KEYS[1], 'summary')
local starts = redis.call('ZREVRANGE', KEYS[2], 0, turns)
local start = 1
if turns > 0 and #starts > turns then start = tonumber(starts[turns]) end
local last = tonumber(sess[2] or '0')
local window = {}
if last >= start then window = redis.call('LRANGE', KEYS[4], start - 1, last - 1) end
local from = 1
if summary then from = tonumber(sess[6] or '0') + 1 end
local to = math.min(start - 1, from + maxEvicted - 1)
local evicted = {}
if to >= from then evicted = redis.call('LRANGE', KEYS[4], from - 1, to - 1) end
return {sess, summary, redis.call('HGETALL', KEYS[3]), start, window, from, evicted}
`)

// LoadContext implements Store: one script (loadContextScript) reads a bounded amount whatever
// the log's length.
func (r *RedisStore) LoadContext(ctx context.Context, sessionID string, turns, maxEvicted int) (*ContextData, error) {
	keys, args := r.loadCall(sessionID, turns, maxEvicted)
	res, err := loadContextScript.Run(ctx, r.rdb, keys, args...).Slice()
	if err != nil {
		return nil, redisErr("load context", err)
	}
	return decodeContext(res, maxEvicted)
}

// loadCall is the keys and arguments of loadContextScript.
func (r *RedisStore) loadCall(sessionID string, turns, maxEvicted int) ([]string, []any) {
	args := make([]any, 0, 2+len(sessionFields))
	args = append(args, turns, maxEvicted)
	for _, f := range sessionFields {
		args = append(args, f)
	}
	return []string{r.key("s", sessionID), r.key("t", sessionID), r.key("k", sessionID), r.key("m", sessionID)}, args
}

// decodeContext decodes loadContextScript's reply.
func decodeContext(res []any, maxEvicted int) (*ContextData, error) {
	if len(res) == 0 {
		return nil, errors.New("load context: an empty reply from the script")
	}
	fields, _ := res[0].([]any)
	s, err := decodeSession(fields)
	if err != nil {
		return nil, err
	}
	if len(res) < 7 {
		return nil, fmt.Errorf("load context: %d results from the script, want 7", len(res))
	}
	d := &ContextData{Session: s}
	if raw, ok := res[1].(string); ok {
		m := &sessionv1.Message{}
		if err := proto.Unmarshal([]byte(raw), m); err != nil {
			return nil, fmt.Errorf("decode summary: %w", err)
		}
		d.Summary = summaryFromMessage(m)
	}
	start, _ := res[3].(int64)
	from, _ := res[5].(int64)
	if d.Window, err = decodeMessages(res[4], start); err != nil {
		return nil, err
	}
	sticky, _ := res[2].([]any)
	for i := 0; i+1 < len(sticky); i += 2 {
		seqStr, _ := sticky[i].(string)
		data, _ := sticky[i+1].(string)
		seq, _ := strconv.ParseInt(seqStr, 10, 64)
		if seq >= start {
			continue
		}
		m, err := decodeMessage(data, seq)
		if err != nil {
			return nil, err
		}
		d.Sticky = append(d.Sticky, m)
	}
	sort.Slice(d.Sticky, func(i, j int) bool { return d.Sticky[i].GetSeq() < d.Sticky[j].GetSeq() })
	if d.Evicted, err = decodeMessages(res[6], from); err != nil {
		return nil, err
	}
	d.EvictedMore = from+int64(maxEvicted) < start
	return d, nil
}

// decodeMessages decodes a script's list of stored messages, the first of which has seq from.
func decodeMessages(v any, from int64) ([]*sessionv1.Message, error) {
	raw, _ := v.([]any)
	out := make([]*sessionv1.Message, 0, len(raw))
	for i, r := range raw {
		data, _ := r.(string)
		m, err := decodeMessage(data, from+int64(i))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

var summaryScript = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], 'rec') == 0 then return {'notfound'} end
local cur = tonumber(redis.call('HGET', KEYS[1], 'summary_seq') or '0')
local last = tonumber(redis.call('HGET', KEYS[1], 'last_seq') or '0')
local through = tonumber(ARGV[1])
if through < cur then return {'behind', tostring(cur)} end
if through > last then return {'ahead', tostring(last)} end
redis.call('HSET', KEYS[1], 'summary', ARGV[2], 'summary_seq', ARGV[1])
return {'ok', tostring(cur)}
`)

// UpdateSummary implements Store.
func (r *RedisStore) UpdateSummary(ctx context.Context, sessionID string, sum *Summary) (int64, error) {
	payload, err := proto.Marshal(summaryMessage(sum))
	if err != nil {
		return 0, err
	}
	res, err := summaryScript.Run(ctx, r.rdb, []string{r.key("s", sessionID)}, sum.ThroughSeq, payload).StringSlice()
	if err != nil {
		return 0, redisErr("update summary", err)
	}
	var v int64
	if len(res) > 1 {
		v, _ = strconv.ParseInt(res[1], 10, 64)
	}
	switch res[0] {
	case "notfound":
		return 0, ErrNotFound
	case "behind":
		return v, summaryBehind(v)
	case "ahead":
		return v, summaryAhead(v)
	}
	return v, nil
}

// Search implements Store.
func (r *RedisStore) Search(ctx context.Context, userID string, terms []string, sessionID string, neighbors, limit int) ([]*SearchResult, error) {
	keys := make([]string, len(terms))
	for i, t := range terms {
		keys[i] = r.indexKey(userID, t)
	}
	hits, err := r.rdb.ZInterWithScores(ctx, &redis.ZStore{Keys: keys, Aggregate: "MAX"}).Result()
	if err != nil {
		return nil, redisErr("search", err)
	}
	// Newest first; ties by member for a stable order.
	sort.Slice(hits, func(i, j int) bool {
		if hits[i].Score != hits[j].Score {
			return hits[i].Score > hits[j].Score
		}
		return hits[i].Member.(string) > hits[j].Member.(string)
	})
	var out []*SearchResult
	for _, h := range hits {
		if len(out) >= limit {
			break
		}
		sid, seqStr, _ := strings.Cut(h.Member.(string), ":")
		if sessionID != "" && sid != sessionID {
			continue
		}
		seq, _ := strconv.ParseInt(seqStr, 10, 64)
		msgs, err := r.messageRange(ctx, sid, seq-int64(neighbors), seq+int64(neighbors))
		if err != nil {
			return nil, err
		}
		res := splitNeighbors(sid, seq, msgs, len(terms))
		if res == nil {
			continue // the session was deleted after the posting was read
		}
		out = append(out, res)
	}
	return out, nil
}

// splitNeighbors turns a range of messages around seq into a SearchResult, nil when seq is not
// in the range.
func splitNeighbors(sid string, seq int64, msgs []*sessionv1.Message, matched int) *SearchResult {
	res := &SearchResult{SessionID: sid, Matched: matched}
	for _, m := range msgs {
		switch {
		case m.GetSeq() < seq:
			res.Before = append(res.Before, m)
		case m.GetSeq() == seq:
			res.Message = m
		default:
			res.After = append(res.After, m)
		}
	}
	if res.Message == nil {
		return nil
	}
	return res
}

// summaryMessage and summaryFromMessage convert between a Summary and its stored form, a
// message of kind summary whose seq is the last seq it covers.
func summaryMessage(s *Summary) *sessionv1.Message {
	return &sessionv1.Message{
		Role:       sessionv1.Role_ROLE_SYSTEM,
		Kind:       sessionv1.MessageKind_MESSAGE_KIND_SUMMARY,
		Content:    s.Content,
		Seq:        s.ThroughSeq,
		TokenCount: s.TokenCount,
		CreatedAt:  timestamppb.New(time.UnixMilli(s.UpdatedAtUnixMilli)),
	}
}

func summaryFromMessage(m *sessionv1.Message) *Summary {
	return &Summary{Content: m.GetContent(), ThroughSeq: m.GetSeq(), TokenCount: m.GetTokenCount(), UpdatedAtUnixMilli: m.GetCreatedAt().AsTime().UnixMilli()}
}
