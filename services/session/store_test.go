package session

import (
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/testenv"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

type backend struct {
	name string
	open func(t testing.TB) Store
}

func backends() []backend {
	return []backend{
		{"redis", func(t testing.TB) Store {
			rdb, prefix := testenv.Redis(t)
			return NewRedisStore(rdb, prefix)
		}},
		{"bolt", func(t testing.TB) Store {
			s, err := OpenBoltStore(filepath.Join(t.TempDir(), "session.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{"bolt files", func(t testing.TB) Store {
			files, err := OpenBoltFiles(t.TempDir(), 3)
			if err != nil {
				t.Fatal(err)
			}
			s := NewFiles(files)
			t.Cleanup(func() { _ = s.Close() })
			return s
		}},
	}
}

// TestStoreConformance runs the same suite against every backend.
func TestStoreConformance(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Run("sessions", func(t *testing.T) { testSessions(t, b.open(t)) })
			t.Run("append", func(t *testing.T) { testAppend(t, b.open(t)) })
			t.Run("concurrent appends", func(t *testing.T) { testConcurrentAppends(t, b.open(t)) })
			t.Run("isolation", func(t *testing.T) { testIsolation(t, b.open(t)) })
			t.Run("context matches reference", func(t *testing.T) { testLoadContext(t, b.open(t)) })
			t.Run("append and load", func(t *testing.T) { testAppendLoad(t, b.open(t)) })
			t.Run("summary", func(t *testing.T) { testSummary(t, b.open(t)) })
			t.Run("search", func(t *testing.T) { testSearch(t, b.open(t)) })
			t.Run("delete", func(t *testing.T) { testDelete(t, b.open(t)) })
		})
	}
}

var ctx = context.Background()

func newSession(t testing.TB, s Store, user string, at time.Time) *sessionv1.Session {
	t.Helper()
	sess := &sessionv1.Session{
		Id: newID(at), UserId: user, Title: "t", CreatedAt: timestamppb.New(at),
		Config: &sessionv1.SessionConfig{WindowTurns: 12, TokenBudget: 8000},
		State:  &sessionv1.SessionState{UpdatedAt: timestamppb.New(at)},
	}
	if err := s.CreateSession(ctx, sess); err != nil {
		t.Fatal(err)
	}
	return sess
}

func item(m *sessionv1.Message, clientID string) AppendItem {
	m = &sessionv1.Message{Id: newID(time.Now()), Role: m.Role, Kind: m.Kind, Content: m.Content, ToolCallId: m.ToolCallId, ToolName: m.ToolName, Sticky: m.Sticky, TokenCount: m.TokenCount, ClientId: clientID, CreatedAt: timestamppb.Now()}
	it := AppendItem{Message: m}
	if m.Kind == sessionv1.MessageKind_MESSAGE_KIND_TEXT {
		it.Terms = textTerms(m.Content)
	}
	return it
}

func mustAppend(t testing.TB, s Store, sess *sessionv1.Session, msgs ...*sessionv1.Message) *AppendResult {
	t.Helper()
	items := make([]AppendItem, len(msgs))
	for i, m := range msgs {
		items[i] = item(m, "")
	}
	res, err := s.Append(ctx, sess.GetUserId(), sess.GetId(), items, nil)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func allMessages(t testing.TB, s Store, sid string) []*sessionv1.Message {
	t.Helper()
	var out []*sessionv1.Message
	for after := int64(0); ; {
		page, err := s.ListMessages(ctx, sid, after, 7)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, page...)
		if len(page) < 7 {
			return out
		}
		after = page[len(page)-1].GetSeq()
	}
}

func testSessions(t *testing.T, s Store) {
	base := time.Now().Add(-time.Hour)
	var ids []string
	for i := range 5 {
		ids = append(ids, newSession(t, s, "alice", base.Add(time.Duration(i)*time.Second)).GetId())
	}
	newSession(t, s, "bob", base)
	// Activity moves a session to the front.
	mustAppend(t, s, &sessionv1.Session{Id: ids[1], UserId: "alice"}, user("hello"))

	got, err := s.GetSession(ctx, ids[1])
	if err != nil {
		t.Fatal(err)
	}
	if got.GetUserId() != "alice" || got.GetState().GetLastSeq() != 1 || got.GetState().GetMessageCount() != 1 || got.GetState().GetTurnCount() != 1 || got.GetState().GetTokenCount() != 10 {
		t.Errorf("state after one append = %v", got.GetState())
	}
	if _, err := s.GetSession(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSession(nope) error = %v, want ErrNotFound", err)
	}

	var listed []string
	cursor := ""
	for page := 0; ; page++ {
		list, next, err := s.ListSessions(ctx, "alice", cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range list {
			listed = append(listed, x.GetId())
		}
		if next == "" {
			break
		}
		cursor = next
		if page > 5 {
			t.Fatal("pagination does not end")
		}
	}
	want := []string{ids[1], ids[4], ids[3], ids[2], ids[0]}
	if diff := cmp.Diff(want, listed); diff != "" {
		t.Errorf("ListSessions newest first (-want +got):\n%s", diff)
	}
	if _, _, err := s.ListSessions(ctx, "alice", "garbage", 2); err == nil {
		t.Error("ListSessions with a forged cursor succeeded")
	}
}

func testAppend(t *testing.T, s Store) {
	sess := newSession(t, s, "alice", time.Now())
	res, err := s.Append(ctx, "alice", sess.GetId(), []AppendItem{item(user("a"), "c1"), item(assistant("b"), "c2")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := seqList(res.Messages); !cmp.Equal(got, []int64{1, 2}) {
		t.Errorf("seqs = %v, want [1 2]", got)
	}
	// A retried batch is not appended again; the stored copies come back.
	again, err := s.Append(ctx, "alice", sess.GetId(), []AppendItem{item(user("a"), "c1"), item(assistant("b"), "c2")}, ptr(int64(0)))
	if err != nil {
		t.Fatalf("retried append: %v", err)
	}
	if again.Deduplicated != 2 || !cmp.Equal(seqList(again.Messages), []int64{1, 2}) || again.Messages[0].GetId() != res.Messages[0].GetId() {
		t.Errorf("retried append = dedup %d seqs %v", again.Deduplicated, seqList(again.Messages))
	}
	// Optimistic concurrency: a stale expectation changes nothing.
	_, err = s.Append(ctx, "alice", sess.GetId(), []AppendItem{item(user("c"), "c3"), item(user("d"), "")}, ptr(int64(1)))
	var conflict *ConflictError
	if !errors.As(err, &conflict) || conflict.Actual != 2 {
		t.Fatalf("stale append error = %v, want conflict at 2", err)
	}
	if n := len(allMessages(t, s, sess.GetId())); n != 2 {
		t.Errorf("after the conflict the log has %d messages, want 2", n)
	}
	ok, err := s.Append(ctx, "alice", sess.GetId(), []AppendItem{item(user("c"), "c3"), item(sticky(user("d")), "")}, ptr(int64(2)))
	if err != nil {
		t.Fatal(err)
	}
	if ok.State.GetLastSeq() != 4 || ok.State.GetMessageCount() != 4 || ok.State.GetTurnCount() != 3 || ok.State.GetTokenCount() != 40 {
		t.Errorf("state = %v", ok.State)
	}
	got := allMessages(t, s, sess.GetId())
	want := []*sessionv1.Message{res.Messages[0], res.Messages[1], ok.Messages[0], ok.Messages[1]}
	if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
		t.Errorf("ListMessages replays the log (-want +got):\n%s", diff)
	}
	if _, err := s.Append(ctx, "alice", "nope", []AppendItem{item(user("x"), "")}, nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("append to a missing session: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }

func testConcurrentAppends(t *testing.T, s Store) {
	sess := newSession(t, s, "alice", time.Now())
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				batch := []AppendItem{item(user(fmt.Sprintf("w%d-%d", w, i)), fmt.Sprintf("w%d-%d", w, i)), item(assistant("ok"), "")}
				if _, err := s.Append(ctx, "alice", sess.GetId(), batch, nil); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	msgs := allMessages(t, s, sess.GetId())
	if len(msgs) != writers*each*2 {
		t.Fatalf("%d messages, want %d", len(msgs), writers*each*2)
	}
	seen := map[string]bool{}
	for i, m := range msgs {
		if m.GetSeq() != int64(i+1) {
			t.Fatalf("message %d has seq %d: gap or duplicate", i, m.GetSeq())
		}
		// A batch's two messages stay adjacent: appends are atomic.
		if m.GetRole() == sessionv1.Role_ROLE_USER {
			if seen[m.GetContent()] {
				t.Fatalf("%q appended twice", m.GetContent())
			}
			seen[m.GetContent()] = true
			if i+1 >= len(msgs) || msgs[i+1].GetContent() != "ok" {
				t.Fatalf("batch split at seq %d", m.GetSeq())
			}
		}
	}
	got, _ := s.GetSession(ctx, sess.GetId())
	if got.GetState().GetLastSeq() != int64(len(msgs)) || got.GetState().GetTurnCount() != writers*each {
		t.Errorf("state = %v", got.GetState())
	}
}

func testIsolation(t *testing.T, s Store) {
	a := newSession(t, s, "alice", time.Now())
	b := newSession(t, s, "alice", time.Now())
	mustAppend(t, s, a, user("window one: book a table"))
	mustAppend(t, s, b, user("window two: check the weather"), assistant("sunny"))
	ca, err := s.LoadContext(ctx, a.GetId(), 12, 100)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := s.LoadContext(ctx, b.GetId(), 12, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(ca.Window) != 1 || ca.Window[0].GetContent() != "window one: book a table" {
		t.Errorf("session A context = %v", seqs(ca.Window))
	}
	if len(cb.Window) != 2 || cb.Window[0].GetContent() != "window two: check the weather" {
		t.Errorf("session B context = %v", seqs(cb.Window))
	}
	if ca.Session.GetState().GetLastSeq() != 1 || cb.Session.GetState().GetLastSeq() != 2 {
		t.Error("seqs are not per session")
	}
}

// randomLog returns a random but valid conversation: turns of a user message, optional tool
// steps, an answer; some user messages sticky.
func randomLog(n int, seed int64) []*sessionv1.Message {
	rng := mrand.New(mrand.NewPCG(uint64(seed), 0x5e55))
	r := func(k int64) int64 { return rng.Int64N(k) }
	var out []*sessionv1.Message
	callN := 0
	for len(out) < n {
		u := user(fmt.Sprintf("turn %d", len(out)))
		if r(5) == 0 {
			u.Sticky = true
		}
		out = append(out, u)
		for range r(3) {
			id := fmt.Sprintf("call%d", callN)
			callN++
			out = append(out, call(id), result(id))
		}
		out = append(out, assistant("done"))
	}
	return numbered(out...)
}

// TestRandomLogSeed: the log is a function of its seed, so a failure of a test that uses it can
// be replayed.
func TestRandomLogSeed(t *testing.T) {
	opts := protocmp.Transform()
	if d := cmp.Diff(randomLog(200, 7), randomLog(200, 7), opts); d != "" {
		t.Errorf("two logs of seed 7 differ:\n%s", d)
	}
	if cmp.Equal(randomLog(200, 7), randomLog(200, 8), opts) {
		t.Errorf("the logs of seeds 7 and 8 are the same")
	}
}

func testLoadContext(t *testing.T, s Store) {
	sess := newSession(t, s, "alice", time.Now())
	log := randomLog(120, 1)
	mustAppend(t, s, sess, log[:60]...)
	mustAppend(t, s, sess, log[60:]...)
	for _, tc := range []struct {
		turns, maxEvicted int
		summary           int64
	}{{12, 200, 0}, {3, 10, 0}, {12, 5, 20}, {1000, 200, 0}, {1, 1000, int64(len(log) - 1)}} {
		if tc.summary > 0 {
			if _, err := s.UpdateSummary(ctx, sess.GetId(), &Summary{Content: "summary", ThroughSeq: tc.summary}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.LoadContext(ctx, sess.GetId(), tc.turns, tc.maxEvicted)
		if err != nil {
			t.Fatal(err)
		}
		want := referenceContext(log, tc.summary, tc.turns, tc.maxEvicted)
		opts := cmp.Options{protocmp.Transform(), protocmp.IgnoreFields(&sessionv1.Message{}, "id", "created_at", "client_id")}
		if diff := cmp.Diff(seqs(want.Window), seqs(got.Window)); diff != "" {
			t.Errorf("turns=%d window (-want +got):\n%s", tc.turns, diff)
		}
		if diff := cmp.Diff(want.Sticky, got.Sticky, opts); diff != "" {
			t.Errorf("turns=%d sticky (-want +got):\n%s", tc.turns, diff)
		}
		if diff := cmp.Diff(seqs(want.Evicted), seqs(got.Evicted)); diff != "" || want.EvictedMore != got.EvictedMore {
			t.Errorf("turns=%d evicted more=%v/%v (-want +got):\n%s", tc.turns, want.EvictedMore, got.EvictedMore, diff)
		}
	}
}

// testAppendLoad: AppendLoad stores the batch as Append does and returns the context
// LoadContext reads right after; a refused append loads nothing and stores nothing.
func testAppendLoad(t *testing.T, s Store) {
	sess := newSession(t, s, "alice", time.Now())
	log := randomLog(80, 3)
	mustAppend(t, s, sess, log[:60]...)
	batch := make([]AppendItem, 0, len(log)-60)
	for i, m := range log[60:] {
		batch = append(batch, item(m, fmt.Sprintf("c%d", i)))
	}
	res, d, err := s.AppendLoad(ctx, sess.GetUserId(), sess.GetId(), batch, ptr(int64(60)), 12, 200)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range res.Messages {
		if m.GetSeq() != int64(61+i) {
			t.Errorf("appended message %d has seq %d, want %d", i, m.GetSeq(), 61+i)
		}
	}
	if res.State.GetLastSeq() != int64(len(log)) {
		t.Errorf("last seq %d after the append, want %d", res.State.GetLastSeq(), len(log))
	}
	want := referenceContext(log, 0, 12, 200)
	if diff := cmp.Diff(seqs(want.Window), seqs(d.Window)); diff != "" {
		t.Errorf("window (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(seqs(want.Sticky), seqs(d.Sticky)); diff != "" {
		t.Errorf("sticky (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(seqs(want.Evicted), seqs(d.Evicted)); diff != "" || want.EvictedMore != d.EvictedMore {
		t.Errorf("evicted more=%v/%v (-want +got):\n%s", want.EvictedMore, d.EvictedMore, diff)
	}
	if d.Session.GetState().GetLastSeq() != int64(len(log)) {
		t.Errorf("the loaded session's last seq is %d, want %d", d.Session.GetState().GetLastSeq(), len(log))
	}
	loaded, err := s.LoadContext(ctx, sess.GetId(), 12, 200)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(seqs(loaded.Window), seqs(d.Window)); diff != "" {
		t.Errorf("AppendLoad's window against LoadContext's (-load +appendload):\n%s", diff)
	}

	// The same client ids again: nothing new, the stored copies and the same context.
	res, d, err = s.AppendLoad(ctx, sess.GetUserId(), sess.GetId(), batch, nil, 12, 200)
	if err != nil {
		t.Fatal(err)
	}
	if res.Deduplicated != len(batch) || d.Session.GetState().GetLastSeq() != int64(len(log)) {
		t.Errorf("repeated batch: %d deduplicated, last seq %d; want %d, %d", res.Deduplicated, d.Session.GetState().GetLastSeq(), len(batch), len(log))
	}

	// Refused: a stale expected seq, and an unknown session.
	more := []AppendItem{item(user("one more"), "")}
	var conflict *ConflictError
	if _, d, err := s.AppendLoad(ctx, sess.GetUserId(), sess.GetId(), more, ptr(int64(3)), 12, 200); !errors.As(err, &conflict) || d != nil {
		t.Errorf("stale expected seq: context %v, error %v; want a *ConflictError and no context", d, err)
	}
	if _, d, err := s.AppendLoad(ctx, sess.GetUserId(), "no-such-session", more, nil, 12, 200); !errors.Is(err, ErrNotFound) || d != nil {
		t.Errorf("unknown session: context %v, error %v; want ErrNotFound", d, err)
	}
	if n := len(allMessages(t, s, sess.GetId())); n != len(log) {
		t.Errorf("%d messages stored after the refusals, want %d", n, len(log))
	}
}

func testSummary(t *testing.T, s Store) {
	sess := newSession(t, s, "alice", time.Now())
	mustAppend(t, s, sess, user("a"), assistant("b"), user("c"))
	if prev, err := s.UpdateSummary(ctx, sess.GetId(), &Summary{Content: "one", ThroughSeq: 2}); err != nil || prev != 0 {
		t.Fatalf("first summary: prev %d err %v", prev, err)
	}
	if _, err := s.UpdateSummary(ctx, sess.GetId(), &Summary{Content: "less", ThroughSeq: 1}); !errors.Is(err, ErrSummaryBehind) {
		t.Errorf("summary covering less: %v, want ErrSummaryBehind", err)
	}
	if _, err := s.UpdateSummary(ctx, sess.GetId(), &Summary{Content: "future", ThroughSeq: 4}); !errors.Is(err, ErrSummaryAhead) {
		t.Errorf("summary beyond the log: %v, want ErrSummaryAhead", err)
	}
	if prev, err := s.UpdateSummary(ctx, sess.GetId(), &Summary{Content: "two", ThroughSeq: 3}); err != nil || prev != 2 {
		t.Fatalf("second summary: prev %d err %v", prev, err)
	}
	d, err := s.LoadContext(ctx, sess.GetId(), 12, 10)
	if err != nil {
		t.Fatal(err)
	}
	if d.Summary == nil || d.Summary.Content != "two" || d.Summary.ThroughSeq != 3 {
		t.Errorf("stored summary = %+v", d.Summary)
	}
	if got, _ := s.GetSession(ctx, sess.GetId()); got.GetState().GetSummaryThroughSeq() != 3 {
		t.Errorf("state summary seq = %d", got.GetState().GetSummaryThroughSeq())
	}
}

func testSearch(t *testing.T, s Store) {
	a := newSession(t, s, "alice", time.Now().Add(-time.Minute))
	b := newSession(t, s, "alice", time.Now())
	other := newSession(t, s, "mallory", time.Now())
	mustAppend(t, s, a, user("I want Sichuan food tonight"), assistant("How about 蜀香园?"), user("帮我订蜀香园的位置"), assistant("好的"))
	mustAppend(t, s, b, user("Book the sichuan place again"), assistant("Done"))
	mustAppend(t, s, other, user("sichuan secrets 蜀香园"))

	find := func(query, sid string) []string {
		t.Helper()
		res, err := s.Search(ctx, "alice", queryTerms(query), sid, 1, 10)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range res {
			out = append(out, fmt.Sprintf("%s/%d %s (%d/%d)", map[string]string{a.GetId(): "a", b.GetId(): "b"}[r.SessionID], r.Message.GetSeq(), r.Message.GetContent(), len(r.Before), len(r.After)))
		}
		return out
	}
	tests := []struct {
		query, session string
		want           []string
	}{
		{"Sichuan", "", []string{"b/1 Book the sichuan place again (0/1)", "a/1 I want Sichuan food tonight (0/1)"}},
		{"sichuan food", "", []string{"a/1 I want Sichuan food tonight (0/1)"}},
		{"蜀香园", "", []string{"a/3 帮我订蜀香园的位置 (1/1)", "a/2 How about 蜀香园? (1/1)"}},
		{"订", "", []string{"a/3 帮我订蜀香园的位置 (1/1)"}},
		{"sichuan", a.GetId(), []string{"a/1 I want Sichuan food tonight (0/1)"}},
		{"secrets", "", nil},
	}
	for _, tc := range tests {
		if diff := cmp.Diff(tc.want, find(tc.query, tc.session)); diff != "" {
			t.Errorf("search %q (-want +got):\n%s", tc.query, diff)
		}
	}
}

func testDelete(t *testing.T, s Store) {
	sess := newSession(t, s, "alice", time.Now())
	keep := newSession(t, s, "alice", time.Now())
	mustAppend(t, s, sess, sticky(user("unique-word-zebra")), assistant("x"))
	mustAppend(t, s, keep, user("unique-word-zebra too"))
	if _, err := s.UpdateSummary(ctx, sess.GetId(), &Summary{Content: "s", ThroughSeq: 1}); err != nil {
		t.Fatal(err)
	}
	n, err := s.DeleteSession(ctx, "alice", sess.GetId())
	if err != nil || n != 2 {
		t.Fatalf("DeleteSession = %d, %v", n, err)
	}
	if _, err := s.GetSession(ctx, sess.GetId()); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted session still found: %v", err)
	}
	if _, err := s.DeleteSession(ctx, "alice", sess.GetId()); !errors.Is(err, ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	res, err := s.Search(ctx, "alice", queryTerms("zebra"), "", 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].SessionID != keep.GetId() {
		t.Errorf("search after delete returned %d hits", len(res))
	}
	list, _, _ := s.ListSessions(ctx, "alice", "", 10)
	if len(list) != 1 {
		t.Errorf("ListSessions after delete: %d sessions", len(list))
	}
	if rs, ok := s.(*RedisStore); ok {
		keys, _ := rs.rdb.Keys(ctx, rs.prefix+"*"+sess.GetId()+"*").Result()
		if len(keys) > 0 {
			t.Errorf("keys of the deleted session remain: %v", keys)
		}
	}
}

func TestBoltSurvivesRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "session.db")
	s, err := OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	sess := newSession(t, s, "alice", time.Now())
	mustAppend(t, s, sess, sticky(user("pinned")), assistant("ok"))
	if _, err := OpenBoltStore(path); err == nil {
		t.Fatal("a second open of a held file succeeded")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := OpenBoltStore(path)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	msgs := allMessages(t, s2, sess.GetId())
	if len(msgs) != 2 || msgs[0].GetContent() != "pinned" || !msgs[0].GetSticky() {
		t.Errorf("after restart: %v", seqs(msgs))
	}
}

// TestRedisAppendLoadWithoutCachedScripts: AppendLoad pipelines the two scripts by their SHA;
// when Redis has neither cached (a restarted or flushed server), or only the context's (whose
// load then ran before the append), the batch is still appended exactly once and the context
// loaded after it.
func TestRedisAppendLoadWithoutCachedScripts(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	s := NewRedisStore(rdb, prefix)
	sess := newSession(t, s, "alice", time.Now())
	mustAppend(t, s, sess, user("first"), assistant("one"))
	const (
		cached = iota
		none
		onlyContext
	)
	for round, scripts := range []int{none, cached, onlyContext, cached} {
		if scripts != cached {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if scripts == onlyContext {
			if err := loadContextScript.Load(ctx, rdb).Err(); err != nil {
				t.Fatal(err)
			}
		}
		batch := []AppendItem{item(user(fmt.Sprintf("round %d", round)), "")}
		res, d, err := s.AppendLoad(ctx, sess.GetUserId(), sess.GetId(), batch, nil, 12, 200)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(3 + round)
		if res.Messages[0].GetSeq() != want || d.Session.GetState().GetLastSeq() != want || d.Window[len(d.Window)-1].GetSeq() != want {
			t.Errorf("round %d (scripts %d): appended seq %d, loaded last seq %d, window ends at %d; want %d",
				round, scripts, res.Messages[0].GetSeq(), d.Session.GetState().GetLastSeq(), d.Window[len(d.Window)-1].GetSeq(), want)
		}
	}
	if n := len(allMessages(t, s, sess.GetId())); n != 6 {
		t.Errorf("%d messages stored, want 6 (each batch once)", n)
	}
}
