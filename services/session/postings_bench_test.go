package session

import (
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// postingsCorpus is a store of users × sessions × msgs messages, their postings flushed, written
// from a generated vocabulary (Zipf-distributed English-like words and CJK bigrams) so that
// terms repeat as in conversation: a few often, most rarely.
func postingsCorpus(b *testing.B, users, sessions, msgs int) (*BoltStore, []*sessionv1.Session, func() string, []string) {
	b.Helper()
	s := openBolt(b, filepath.Join(b.TempDir(), "session.db"), manualFlush)
	b.Cleanup(func() { _ = s.Close() })
	rng := mrand.New(mrand.NewPCG(11, 12))
	syll := []string{"ka", "lo", "mi", "ren", "sa", "tor", "ve", "qui", "dan", "pe", "zu", "hol"}
	han := []rune("港口灯笼航班预订会议天气旅行餐厅文件报告项目客户")
	var vocab []string
	for i := range 3000 {
		if i%5 == 0 {
			vocab = append(vocab, string([]rune{han[rng.IntN(len(han))], han[rng.IntN(len(han))]}))
			continue
		}
		var w strings.Builder
		for range 2 + rng.IntN(3) {
			w.WriteString(syll[rng.IntN(len(syll))])
		}
		vocab = append(vocab, w.String())
	}
	zipf := mrand.NewZipf(rng, 1.1, 2, uint64(len(vocab)-1))
	text := func() string {
		w := make([]string, 8+rng.IntN(10))
		for i := range w {
			w[i] = vocab[zipf.Uint64()]
		}
		return strings.Join(w, " ")
	}
	var all []*sessionv1.Session
	base := time.Now().Add(-time.Hour)
	for u := range users {
		for range sessions {
			all = append(all, newSession(b, s, fmt.Sprintf("user-%d", u), base.Add(time.Duration(len(all))*time.Second)))
		}
	}
	for range msgs {
		for _, sess := range all {
			mustAppend(b, s, sess, user(text()))
		}
		if pendingCount(s) > 20000 {
			if err := s.flush(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := s.flush(); err != nil {
		b.Fatal(err)
	}
	return s, all, text, vocab
}

// BenchmarkPostingsFlush: a flush of one new message in each of 64 sessions (a second of 64
// turns at once, about 800 postings) into a store of 64 × 300 messages; pages/flush is what its
// commits wrote.
func BenchmarkPostingsFlush(b *testing.B) {
	s, all, text, _ := postingsCorpus(b, 8, 8, 300)
	var pages int64
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		for _, sess := range all {
			mustAppend(b, s, sess, user(text()))
		}
		before := s.db.Stats().TxStats
		b.StartTimer()
		if err := s.flush(); err != nil {
			b.Fatal(err)
		}
		after := s.db.Stats().TxStats
		d := after.Sub(&before)
		pages += d.GetWrite()
	}
	b.ReportMetric(float64(pages)/float64(b.N), "pages/flush")
	b.StopTimer()
	var size int64
	if err := s.db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil }); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(size)/(1<<20), "file-MiB")
}

// BenchmarkPostingsSearch: a user's search over 8 sessions of 300 messages, 20 hits at most, for
// the most common term (a CJK bigram), a rare one, two common ones and a term no message has.
func BenchmarkPostingsSearch(b *testing.B) {
	s, _, _, vocab := postingsCorpus(b, 8, 8, 300)
	for _, q := range []struct{ name, text string }{
		{"common", vocab[0]}, {"rare", vocab[2500]}, {"two", vocab[1] + " " + vocab[2]}, {"none", "absent"},
	} {
		b.Run(q.name, func(b *testing.B) {
			terms := queryTerms(q.text)
			hits := 0
			for b.Loop() {
				res, err := s.Search(ctx, "user-3", terms, "", 1, 20)
				if err != nil {
					b.Fatal(err)
				}
				hits = len(res)
			}
			b.ReportMetric(float64(hits), "hits")
		})
	}
}
