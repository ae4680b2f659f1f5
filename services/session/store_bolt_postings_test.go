package session

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// TestBoltSearchAcrossBlocks checks Search against every message read back and matched by hand,
// in sessions long enough for a term's postings to span many lists (a list holds a block of 256
// seqs): newest session first, highest seq first, every term in the message; flushed at random
// points, so that a query meets lists and pending postings, and after a last flush.
func TestBoltSearchAcrossBlocks(t *testing.T) {
	// A flush writes three lists a transaction: most flushes take several.
	o := manualFlush
	o.chunk = 3
	s := openBolt(t, filepath.Join(t.TempDir(), "session.db"), o)
	t.Cleanup(func() { _ = s.Close() })
	rng := mrand.New(mrand.NewPCG(7, 8))
	vocab := []string{"amber", "basalt", "cobalt", "dune", "ember", "fjord", "灯笼", "港口"}
	base := time.Now().Add(-time.Hour)
	sessions := []*sessionv1.Session{
		newSession(t, s, "alice", base),
		newSession(t, s, "alice", base.Add(time.Minute)),
		newSession(t, s, "bob", base.Add(2*time.Minute)),
	}
	for range 320 {
		// Mostly the first session, to about 700 messages: its postings fill several blocks.
		sess := sessions[0]
		if r := rng.IntN(10); r >= 8 {
			sess = sessions[r-7]
		}
		var msgs []*sessionv1.Message
		for range 1 + rng.IntN(4) {
			w := make([]string, 1+rng.IntN(3))
			for i := range w {
				w[i] = vocab[rng.IntN(len(vocab))]
			}
			msgs = append(msgs, user(strings.Join(w, " ")))
		}
		mustAppend(t, s, sess, msgs...)
		if rng.IntN(20) == 0 {
			if err := s.flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if pendingCount(s) == 0 {
		t.Fatal("nothing pending: the mixed state is not checked")
	}
	type hit struct {
		Sid     string
		Seq     int64
		Matched int
	}
	// want matches the messages by hand, in Search's order.
	all := map[string][]*sessionv1.Message{}
	for _, sess := range sessions {
		msgs, err := s.ListMessages(ctx, sess.GetId(), 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		all[sess.GetId()] = msgs
	}
	if n := len(all[sessions[0].GetId()]); n < 600 {
		t.Fatalf("the long session has %d messages, want at least 600", n)
	}
	want := func(uid string, terms []string, sid string, limit int) []hit {
		var out []hit
		for _, sess := range sessions {
			if sess.GetUserId() != uid || (sid != "" && sess.GetId() != sid) {
				continue
			}
			for _, m := range all[sess.GetId()] {
				have := textTerms(m.GetContent())
				if !slices.ContainsFunc(terms, func(t string) bool { return !slices.Contains(have, t) }) {
					out = append(out, hit{sess.GetId(), m.GetSeq(), len(terms)})
				}
			}
		}
		slices.SortFunc(out, func(a, b hit) int {
			if c := cmp.Compare(b.Sid, a.Sid); c != 0 {
				return c
			}
			return cmp.Compare(b.Seq, a.Seq)
		})
		return out[:min(limit, len(out))]
	}
	check := func(state string) {
		t.Helper()
		found := 0
		for _, text := range []string{"amber", "basalt cobalt", "dune ember fjord", "灯笼", "港口 amber", "glacier"} {
			for _, sid := range []string{"", sessions[0].GetId(), sessions[1].GetId()} {
				for _, limit := range []int{1, 7, 100000} {
					for _, uid := range []string{"alice", "bob"} {
						terms := queryTerms(text)
						res, err := s.Search(ctx, uid, terms, sid, 0, limit)
						if err != nil {
							t.Fatal(err)
						}
						var got []hit
						for _, r := range res {
							got = append(got, hit{r.SessionID, r.Message.GetSeq(), r.Matched})
						}
						w := want(uid, terms, sid, limit)
						found += len(w)
						if diff := gocmp.Diff(w, got); diff != "" {
							t.Errorf("%s: %s %q in %q, limit %d (-want +got):\n%s", state, uid, text, sid, limit, diff)
						}
					}
				}
			}
		}
		if found < 1000 {
			t.Errorf("%s: %d hits in all, too few to compare", state, found)
		}
	}
	check("mixed")
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	check("flushed")
}

func TestMergeOffsets(t *testing.T) {
	for _, tc := range []struct{ list, offs, want []byte }{
		{nil, []byte{3}, []byte{3}},
		{[]byte{1, 5, 9}, []byte{0, 5, 6, 255}, []byte{0, 1, 5, 6, 9, 255}},
		{[]byte{1, 2}, nil, []byte{1, 2}},
		{[]byte{7}, []byte{7, 7}, []byte{7}},
	} {
		list := bytes.Clone(tc.list)
		if got := mergeOffsets(list, tc.offs); !bytes.Equal(got, tc.want) {
			t.Errorf("mergeOffsets(%v, %v) = %v, want %v", tc.list, tc.offs, got, tc.want)
		}
		if !bytes.Equal(list, tc.list) {
			t.Errorf("mergeOffsets changed its list: %v, was %v", list, tc.list)
		}
	}
}

// FuzzMergeOffsets: any list (a damaged file's too) merges without a panic, in order inputs give
// their union in order, and hasPosting's search finds each of it.
func FuzzMergeOffsets(f *testing.F) {
	f.Add([]byte{1, 5, 9}, []byte{0, 5, 255})
	f.Add([]byte{9, 1}, []byte{4})
	f.Fuzz(func(t *testing.T, list, offs []byte) {
		got := mergeOffsets(list, offs)
		if !slices.IsSorted(list) || !slices.IsSorted(offs) {
			return
		}
		want := slices.Compact(slices.Sorted(slices.Values(append(bytes.Clone(list), offs...))))
		if !bytes.Equal(got, want) {
			t.Fatalf("mergeOffsets(%v, %v) = %v, want %v", list, offs, got, want)
		}
		for _, b := range want {
			if _, ok := slices.BinarySearch(got, b); !ok {
				t.Fatalf("%d not found in %v", b, got)
			}
		}
	})
}

// TestBoltFlushCutShort: a flush that ended after some of its transactions (a crash) left its
// entries in unindexed; the next open flushes them again, and every posting is in its list once.
func TestBoltFlushCutShort(t *testing.T) {
	path := filepath.Join(t.TempDir(), "session.db")
	s := openBolt(t, path, manualFlush)
	sess := newSession(t, s, "alice", time.Now())
	for i := range 40 {
		mustAppend(t, s, sess, user(fmt.Sprintf("amber basalt step%d", i%7)))
	}
	// The first lists of the flush, as its first transactions would have written them.
	s.mu.Lock()
	entries := slices.Collect(maps.Values(s.pending))
	s.mu.Unlock()
	if err := s.db.Update(func(tx *bolt.Tx) error {
		lists := tx.Bucket(bPostings)
		for _, e := range entries {
			for _, term := range e.terms {
				if term == "amber" || strings.HasPrefix(term, "step") {
					k := postingKey(e.uid, term, e.sid, e.seq)
					if err := lists.Put(k, mergeOffsets(lists.Get(k), []byte{postingOffset(e.seq)})); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	crash(t, s)
	s = openBolt(t, path, manualFlush)
	defer s.Close()
	if n := pendingCount(s); n != 40 {
		t.Fatalf("%d entries pending after the crash, want 40", n)
	}
	if err := s.flush(); err != nil {
		t.Fatal(err)
	}
	if indexed, unindexed := postingsOf(t, s, sess.GetId()); indexed != 40*3 || unindexed != 0 {
		t.Errorf("%d postings in lists and %d entries left, want %d and 0", indexed, unindexed, 40*3)
	}
	for _, q := range []struct {
		text string
		want int
	}{{"amber", 40}, {"basalt step3", 6}, {"step6 amber", 5}} {
		res, err := s.Search(ctx, "alice", queryTerms(q.text), "", 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != q.want {
			t.Errorf("%q: %d hits, want %d", q.text, len(res), q.want)
		}
	}
}
