package session

import (
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

func TestBoltAppendPagesWritten(t *testing.T) {
	s, err := OpenBoltStore(filepath.Join(t.TempDir(), "session.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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
		var batch = make([]*sessionv1.Message, 50)
		for i := range batch {
			batch[i] = user(words(10))
		}
		mustAppend(t, s, sess, batch...)
	}
	written := func() int64 { st := s.db.Stats(); return st.TxStats.GetWrite() }
	before := written()
	distinct := make([]string, 20)
	for i := range distinct {
		distinct[i] = fmt.Sprintf("term%03d", i*25)
	}
	mustAppend(t, s, sess, user(strings.Join(distinct, " ")))
	t.Logf("pages written: %d", written()-before)
}
