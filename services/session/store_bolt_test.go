package session

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/hermes-agent/hermes/internal/boltstore"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// manualFlush leaves the postings pending until the test flushes them.
var manualFlush = flushOptions{delay: time.Hour, postings: math.MaxInt}

func openBolt(t testing.TB, path string, o flushOptions) *BoltStore {
	t.Helper()
	s, err := openBoltStore(path, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// crash ends the store as a killed process would: nothing is flushed, the file is closed.
func crash(t testing.TB, s *BoltStore) {
	t.Helper()
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.flusherDone
	if err := s.db.Close(); err != nil {
		t.Fatal(err)
	}
}

// postingsOf counts the postings of session sid in postings and the entries of sid in unindexed.
func postingsOf(t testing.TB, s *BoltStore, sid string) (indexed, unindexed int) {
	t.Helper()
	err := s.db.View(func(tx *bolt.Tx) error {
		err := tx.Bucket(bPostings).ForEach(func(k, v []byte) error {
			if bytes.Contains(k, []byte("\x00"+sid+"\x00")) {
				indexed += len(v)
			}
			return nil
		})
		if err != nil {
			return err
		}
		return tx.Bucket(bUnindexed).ForEach(func(k, v []byte) error {
			e, err := decodePending(k, v)
			if err != nil {
				return err
			}
			if e.sid == sid {
				unindexed++
			}
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return indexed, unindexed
}

func pendingCount(s *BoltStore) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

func hits(t testing.TB, s Store, uid, query, sid string) []string {
	t.Helper()
	res, err := s.Search(ctx, uid, queryTerms(query), sid, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range res {
		out = append(out, fmt.Sprintf("%d %s", r.Message.GetSeq(), r.Message.GetContent()))
	}
	return out
}

// TestBoltSearchBehindAppend: a message is found right after its append (pending), after a
// crash that left it unflushed, after the flush, and after a clean restart.
func TestBoltSearchBehindAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "session.db")
	s := openBolt(t, path, manualFlush)
	t.Cleanup(func() { _ = s.Close() })
	sess := newSession(t, s, "alice", time.Now())
	mustAppend(t, s, sess, user("I want Sichuan food tonight"), assistant("How about 蜀香园?"), call("c1"))

	stages := []struct {
		name    string
		do      func()
		pending bool
	}{
		{"pending", func() {}, true},
		{"reopened after a crash", func() {
			crash(t, s)
			s = openBolt(t, path, manualFlush)
		}, true},
		{"flushed", func() {
			if err := s.flush(); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"reopened after Close", func() {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openBolt(t, path, manualFlush)
		}, false},
	}
	for _, st := range stages {
		st.do()
		if diff := cmp.Diff([]string{"1 I want Sichuan food tonight"}, hits(t, s, "alice", "sichuan food", "")); diff != "" {
			t.Errorf("%s: search (-want +got):\n%s", st.name, diff)
		}
		if diff := cmp.Diff([]string{"2 How about 蜀香园?"}, hits(t, s, "alice", "蜀香园", sess.GetId())); diff != "" {
			t.Errorf("%s: search in the session (-want +got):\n%s", st.name, diff)
		}
		if got := hits(t, s, "bob", "sichuan", ""); got != nil {
			t.Errorf("%s: another user finds %v", st.name, got)
		}
		indexed, unindexed := postingsOf(t, s, sess.GetId())
		// Two text messages are pending; the tool call has no terms.
		if st.pending && (pendingCount(s) != 2 || unindexed != 2 || indexed != 0) {
			t.Errorf("%s: %d pending in memory, %d in unindexed, %d postings in index; want 2, 2, 0", st.name, pendingCount(s), unindexed, indexed)
		}
		if !st.pending && (pendingCount(s) != 0 || unindexed != 0 || indexed == 0) {
			t.Errorf("%s: %d pending in memory, %d in unindexed, %d postings in index; want 0, 0, some", st.name, pendingCount(s), unindexed, indexed)
		}
	}
}

// TestBoltSearchMixedMatchesFlushed: with some postings flushed and some pending, Search
// answers exactly as it does once all are in the index: order, limit, neighbors, session.
func TestBoltSearchMixedMatchesFlushed(t *testing.T) {
	s := openBolt(t, filepath.Join(t.TempDir(), "session.db"), manualFlush)
	t.Cleanup(func() { _ = s.Close() })
	rng := mrand.New(mrand.NewPCG(3, 4))
	vocab := []string{"apple", "banana", "cherry", "date", "elder", "fig"}
	base := time.Now().Add(-time.Hour)
	var sids []string
	for i := range 4 {
		uid := "alice"
		if i == 3 {
			uid = "bob"
		}
		sids = append(sids, newSession(t, s, uid, base.Add(time.Duration(i)*time.Minute)).GetId())
	}
	for b := range 24 {
		sid := sids[rng.IntN(len(sids))]
		uid := "alice"
		if sid == sids[3] {
			uid = "bob"
		}
		var msgs []*sessionv1.Message
		for range 1 + rng.IntN(4) {
			w := make([]string, 1+rng.IntN(3))
			for i := range w {
				w[i] = vocab[rng.IntN(len(vocab))]
			}
			msgs = append(msgs, user(strings.Join(w, " ")))
		}
		mustAppend(t, s, &sessionv1.Session{Id: sid, UserId: uid}, msgs...)
		if b%3 == 1 {
			if err := s.flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if pendingCount(s) == 0 {
		t.Fatal("nothing pending: the test compares nothing")
	}
	type query struct {
		uid, text, sid   string
		neighbors, limit int
	}
	var queries []query
	for _, text := range []string{"apple", "banana cherry", "fig date elder", "grape"} {
		for _, sid := range []string{"", sids[0], sids[2]} {
			for _, limit := range []int{1, 3, 100} {
				queries = append(queries, query{"alice", text, sid, limit % 3, limit})
			}
		}
		queries = append(queries, query{"bob", text, "", 1, 100})
	}
	run := func() [][]*SearchResult {
		var out [][]*SearchResult
		for _, q := range queries {
			res, err := s.Search(ctx, q.uid, queryTerms(q.text), q.sid, q.neighbors, q.limit)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, res)
		}
		return out
	}
	mixed := run()
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	flushed := run()
	for i, q := range queries {
		if diff := cmp.Diff(flushed[i], mixed[i], protocmp.Transform()); diff != "" {
			t.Errorf("%+v: mixed state (-flushed +mixed):\n%s", q, diff)
		}
	}
	// queries[9] is bob's "apple", queries[2] alice's with no limit to speak of.
	if len(flushed[9]) == 0 || len(flushed[2]) < 5 {
		t.Errorf("queries found too little to compare: %d, %d hits", len(flushed[9]), len(flushed[2]))
	}
}

// TestBoltDeleteSessionLeavesNoPostings: neither the pending nor the flushed postings of a
// deleted session remain, and a later flush writes none.
func TestBoltDeleteSessionLeavesNoPostings(t *testing.T) {
	s := openBolt(t, filepath.Join(t.TempDir(), "session.db"), manualFlush)
	t.Cleanup(func() { _ = s.Close() })
	gone := newSession(t, s, "alice", time.Now())
	keep := newSession(t, s, "alice", time.Now())
	mustAppend(t, s, gone, user("zebra flushed"))
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, gone, user("zebra pending"))
	mustAppend(t, s, keep, user("zebra kept"))
	if _, err := s.DeleteSession(ctx, "alice", gone.GetId()); err != nil {
		t.Fatal(err)
	}
	check := func(stage string) {
		t.Helper()
		if indexed, unindexed := postingsOf(t, s, gone.GetId()); indexed != 0 || unindexed != 0 {
			t.Errorf("%s: %d postings in index, %d entries in unindexed of the deleted session", stage, indexed, unindexed)
		}
		s.mu.Lock()
		for _, e := range s.pending {
			if e.sid == gone.GetId() {
				t.Errorf("%s: pending in memory: %+v", stage, e)
			}
		}
		s.mu.Unlock()
		if diff := cmp.Diff([]string{"1 zebra kept"}, hits(t, s, "alice", "zebra", "")); diff != "" {
			t.Errorf("%s: search (-want +got):\n%s", stage, diff)
		}
	}
	check("after the delete")
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	check("after a flush")
}

// TestBoltFlushTriggers: the flushing goroutine moves the postings when the delay has passed,
// and before it when enough postings are pending.
func TestBoltFlushTriggers(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    flushOptions
	}{
		{"delay", flushOptions{delay: 10 * time.Millisecond, postings: math.MaxInt}},
		{"threshold", flushOptions{delay: time.Hour, postings: 5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flushed := make(chan error, 10)
			tc.o.done = func(err error) { flushed <- err }
			s := openBolt(t, filepath.Join(t.TempDir(), "session.db"), tc.o)
			t.Cleanup(func() { _ = s.Close() })
			sess := newSession(t, s, "alice", time.Now())
			mustAppend(t, s, sess, user("one two three four five six"))
			select {
			case err := <-flushed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("no flush")
			}
			if indexed, unindexed := postingsOf(t, s, sess.GetId()); pendingCount(s) != 0 || unindexed != 0 || indexed != 6 {
				t.Errorf("after the flush: %d pending, %d unindexed, %d postings; want 0, 0, 6", pendingCount(s), unindexed, indexed)
			}
		})
	}
}

// TestBoltAppendPagesWritten: an append no longer dirties a leaf of the index per term. The
// code that wrote the postings in the append wrote 47 pages here.
func TestBoltAppendPagesWritten(t *testing.T) {
	s := openBolt(t, filepath.Join(t.TempDir(), "session.db"), manualFlush)
	t.Cleanup(func() { _ = s.Close() })
	rng := mrand.New(mrand.NewPCG(1, 2))
	words := func(n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = fmt.Sprintf("term%03d", rng.IntN(500))
		}
		return strings.Join(w, " ")
	}
	sess := newSession(t, s, "alice", time.Now())
	for range 60 {
		batch := make([]*sessionv1.Message, 50)
		for i := range batch {
			batch[i] = user(words(10))
		}
		mustAppend(t, s, sess, batch...)
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	written := func() int64 { st := s.db.Stats(); return st.TxStats.GetWrite() }
	distinct := make([]string, 20)
	for i := range distinct {
		distinct[i] = fmt.Sprintf("term%03d", i*25)
	}
	before := written()
	mustAppend(t, s, sess, user(strings.Join(distinct, " ")))
	if n := written() - before; n > 16 {
		t.Errorf("the append wrote %d pages, want at most 16", n)
	}
}

// TestBoltConcurrentAppendsAndSearches: while appends and flushes run, a message is found as
// soon as its append returns, exactly once, and results stay in index order.
func TestBoltConcurrentAppendsAndSearches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "session.db")
	s := openBolt(t, path, flushOptions{delay: time.Millisecond, postings: 20})
	const writers, each = 4, 25
	var sessions []*sessionv1.Session
	for range writers {
		sessions = append(sessions, newSession(t, s, "alice", time.Now()))
	}
	done := make(chan struct{})
	var wg, searchers sync.WaitGroup
	errs := make(chan error, writers+2)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				word := fmt.Sprintf("w%dx%d", w, i)
				res, err := s.Append(ctx, "alice", sessions[w].GetId(), []AppendItem{item(user("common "+word), "")}, nil)
				if err != nil {
					errs <- err
					return
				}
				got, err := s.Search(ctx, "alice", queryTerms(word), "", 0, 10)
				if err != nil {
					errs <- err
					return
				}
				if len(got) != 1 || got[0].Message.GetSeq() != res.Messages[0].GetSeq() {
					errs <- fmt.Errorf("%s right after its append: %d hits", word, len(got))
					return
				}
			}
		}()
	}
	for range 2 {
		searchers.Add(1)
		go func() {
			defer searchers.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				got, err := s.Search(ctx, "alice", queryTerms("common"), "", 0, 50)
				if err != nil {
					errs <- err
					return
				}
				for i := 1; i < len(got); i++ {
					a, b := got[i-1], got[i]
					if a.SessionID < b.SessionID || (a.SessionID == b.SessionID && a.Message.GetSeq() <= b.Message.GetSeq()) {
						errs <- fmt.Errorf("results out of order or repeated: %s/%d then %s/%d", a.SessionID, a.Message.GetSeq(), b.SessionID, b.Message.GetSeq())
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	searchers.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openBolt(t, path, manualFlush)
	defer s.Close()
	if n := pendingCount(s); n != 0 {
		t.Errorf("%d entries pending after Close", n)
	}
	res, err := s.Search(ctx, "alice", queryTerms("common"), "", 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != writers*each {
		t.Errorf("%d messages found after a restart, want %d", len(res), writers*each)
	}
}

// TestBoltDeferredWrites: appends and a summary sent with boltstore.DeferHeader get their seqs
// (and an AppendLoad its context, the batch in it) at once, are seen by readers after the next
// commit (here another store's write of the same file, through the group), and survive Close; a
// deferred append that conflicts fails alone.
func TestBoltDeferredWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.db")
	s := openBolt(t, path, manualFlush)
	s.group = boltstore.NewGroupDelay(s.db, time.Hour) // the test commits
	sess := newSession(t, s, "alice", time.Now())
	dctx := metadata.NewIncomingContext(ctx, metadata.Pairs(boltstore.DeferHeader, "next-commit"))

	res, d, err := s.AppendLoad(dctx, "alice", sess.GetId(), []AppendItem{item(user("天气 weather"), "u1")}, nil, 4, 10)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Messages[0].GetSeq(); got != 1 {
		t.Errorf("deferred append: seq %d, want 1", got)
	}
	if len(d.Window) != 1 || d.Window[0].GetContent() != "天气 weather" {
		t.Errorf("deferred AppendLoad's context: %v, want the batch", d.Window)
	}
	step := []AppendItem{item(assistant("calling 计算器"), "a1"), item(assistant("the answer is 4"), "a2")}
	if res, err = s.Append(dctx, "alice", sess.GetId(), step, nil); err != nil || res.Messages[1].GetSeq() != 3 {
		t.Fatalf("deferred append: %v, %v", res, err)
	}
	// The caller owns the messages it got back: what it does with them does not reach the
	// writes applied again after the conflict below rolls the open transaction back.
	for _, m := range res.Messages {
		m.Content, m.Seq = "changed by the caller", 99
	}
	if _, err := s.Append(dctx, "alice", sess.GetId(), []AppendItem{item(user("x"), "x1")}, ptr(int64(0))); !errors.Is(err, ErrConflict) {
		t.Errorf("deferred append with a stale expected seq: %v, want ErrConflict", err)
	}
	if _, err := s.UpdateSummary(dctx, sess.GetId(), &Summary{Content: "摘要", ThroughSeq: 2}); err != nil {
		t.Fatal(err)
	}
	if got := allMessages(t, s, sess.GetId()); len(got) != 0 {
		t.Errorf("deferred writes seen before a commit: %d messages", len(got))
	}
	// Another write of the file commits them.
	if err := s.group.Update(func(tx *bolt.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	got := allMessages(t, s, sess.GetId())
	var contents []string
	for _, m := range got {
		contents = append(contents, fmt.Sprintf("%d %s", m.GetSeq(), m.GetContent()))
	}
	if diff := cmp.Diff([]string{"1 天气 weather", "2 calling 计算器", "3 the answer is 4"}, contents); diff != "" {
		t.Errorf("after the commit (-want +got):\n%s", diff)
	}
	if _, err := s.Append(dctx, "alice", sess.GetId(), []AppendItem{item(assistant("最后 last"), "a3")}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openBolt(t, path, manualFlush)
	defer s.Close()
	d, err = s.LoadContext(ctx, sess.GetId(), 4, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Window) != 4 || d.Summary == nil || d.Summary.ThroughSeq != 2 {
		t.Errorf("after reopening: %d messages, summary %v; want 4 and one through seq 2", len(d.Window), d.Summary)
	}
}
