package session

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/hermes-agent/hermes/internal/boltstore"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// TestBoltFilesAnswerAsOne writes the same sessions into one file and into four, and compares
// every page of every user's sessions and searches across them: the files' merged answers must
// be one file's, cursors included.
func TestBoltFilesAnswerAsOne(t *testing.T) {
	one, err := OpenBoltStore(filepath.Join(t.TempDir(), "one.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = one.Close() })
	files, err := OpenBoltFiles(t.TempDir(), 4)
	if err != nil {
		t.Fatal(err)
	}
	four := NewFiles(files)
	t.Cleanup(func() { _ = four.Close() })

	words := []string{"river", "invoice", "garden", "Lisbon", "violin", "ticket", "refund", "北京", "合同", "咖啡", "航班", "退款", "花园"}
	users := []string{"ana", "bo", "陈"}
	rng := rand.New(rand.NewPCG(7, 25))
	base := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	perFile := make([]int, len(files))
	type sessionBatch struct {
		sess  *sessionv1.Session
		batch []AppendItem
	}
	var batches []sessionBatch
	for i := range 150 {
		// Few distinct times, so that many sessions tie and their ids order them.
		at := base.Add(time.Duration(rng.IntN(20)) * time.Minute)
		sess := &sessionv1.Session{
			Id: newID(base.Add(time.Duration(i) * time.Millisecond)), UserId: users[rng.IntN(len(users))], CreatedAt: timestamppb.New(at),
			Config: &sessionv1.SessionConfig{WindowTurns: 12, TokenBudget: 8000},
		}
		perFile[boltstore.FileOf(sess.GetId(), len(files))]++
		var batch []AppendItem
		for j := range 1 + rng.IntN(6) {
			var text []string
			for range 2 + rng.IntN(4) {
				text = append(text, words[rng.IntN(len(words))])
			}
			role := []sessionv1.Role{sessionv1.Role_ROLE_USER, sessionv1.Role_ROLE_ASSISTANT}[j%2]
			m := &sessionv1.Message{Role: role, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: strings.Join(text, " ")}
			batch = append(batch, item(m, fmt.Sprintf("c%d", j)))
		}
		for _, s := range []Store{one, four} {
			if err := s.CreateSession(ctx, sess); err != nil {
				t.Fatal(err)
			}
		}
		batches = append(batches, sessionBatch{sess, batch})
	}
	for i, n := range perFile {
		if n == 0 {
			t.Fatalf("file %d holds no session of 150: %v", i, perFile)
		}
	}

	type page struct {
		IDs  []string
		Next string
	}
	list := func(s Store, user string, limit int) []page {
		var out []page
		for cursor := ""; ; {
			got, next, err := s.ListSessions(ctx, user, cursor, limit)
			if err != nil {
				t.Fatal(err)
			}
			p := page{Next: next}
			for _, g := range got {
				p.IDs = append(p.IDs, g.GetId())
			}
			out = append(out, p)
			if next == "" {
				return out
			}
			cursor = next
		}
	}
	for _, user := range users {
		for _, limit := range []int{1, 3, 7, 50, 200} {
			want := list(one, user, limit)
			if diff := cmp.Diff(want, list(four, user, limit)); diff != "" {
				t.Errorf("ListSessions(%s, limit %d) (-one +four):\n%s", user, limit, diff)
			}
		}
	}

	// The appends come after the listings: an append sets the session's time to its own.
	for _, b := range batches {
		for _, s := range []Store{one, four} {
			if _, err := s.Append(ctx, b.sess.GetUserId(), b.sess.GetId(), b.batch, nil); err != nil {
				t.Fatal(err)
			}
		}
	}

	type hit struct {
		Session       string
		Seq           int64
		Content       string
		Before, After int
	}
	search := func(s Store, user string, terms []string, limit int) []hit {
		res, err := s.Search(ctx, user, terms, "", 1, limit)
		if err != nil {
			t.Fatal(err)
		}
		var out []hit
		for _, r := range res {
			out = append(out, hit{r.SessionID, r.Message.GetSeq(), r.Message.GetContent(), len(r.Before), len(r.After)})
		}
		return out
	}
	compared := 0
	for _, user := range users {
		for i, w := range words {
			for _, terms := range [][]string{queryTerms(w), queryTerms(w + " " + words[(i+3)%len(words)])} {
				for _, limit := range []int{1, 5, 40} {
					want := search(one, user, terms, limit)
					compared += len(want)
					if diff := cmp.Diff(want, search(four, user, terms, limit)); diff != "" {
						t.Errorf("Search(%s, %q, limit %d) (-one +four):\n%s", user, terms, limit, diff)
					}
				}
			}
		}
	}
	if compared < 1000 {
		t.Fatalf("the searches compared only %d results", compared)
	}
}

// TestBoltFilesPlaces checks how many files a data directory has and that a file out of its
// place is refused.
func TestBoltFilesPlaces(t *testing.T) {
	open := func(t *testing.T, dir string, n int) ([]*BoltStore, error) {
		files, err := OpenBoltFiles(dir, n)
		if err == nil {
			t.Cleanup(func() { _ = NewFiles(files).Close() })
		}
		return files, err
	}
	closeAll := func(files []*BoltStore) {
		if err := NewFiles(files).Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("a new directory gets n, later opens keep it", func(t *testing.T) {
		dir := t.TempDir()
		files, err := OpenBoltFiles(dir, 3)
		if err != nil || len(files) != 3 {
			t.Fatalf("first open: %d files, %v", len(files), err)
		}
		sess := newSession(t, NewFiles(files), "ana", time.Now())
		closeAll(files)
		files, err = open(t, dir, 5)
		if err != nil || len(files) != 3 {
			t.Fatalf("second open, asking for 5: %d files, %v", len(files), err)
		}
		if _, err := NewFiles(files).GetSession(ctx, sess.GetId()); err != nil {
			t.Fatalf("the session is lost: %v", err)
		}
		if _, err := os.Stat(filepath.Join(dir, FileName(3))); err == nil {
			t.Error("a fourth file was created")
		}
	})
	t.Run("a session.db of an earlier release stays one file", func(t *testing.T) {
		dir := t.TempDir()
		old, err := OpenBoltStore(filepath.Join(dir, FileName(0)))
		if err != nil {
			t.Fatal(err)
		}
		sess := newSession(t, old, "ana", time.Now())
		if err := old.Close(); err != nil {
			t.Fatal(err)
		}
		files, err := open(t, dir, 4)
		if err != nil || len(files) != 1 {
			t.Fatalf("open: %d files, %v", len(files), err)
		}
		if _, err := NewFiles(files).GetSession(ctx, sess.GetId()); err != nil {
			t.Fatalf("the session is lost: %v", err)
		}
	})
	t.Run("files swapped", func(t *testing.T) {
		dir := t.TempDir()
		files, err := OpenBoltFiles(dir, 3)
		if err != nil {
			t.Fatal(err)
		}
		closeAll(files)
		a, b := filepath.Join(dir, FileName(1)), filepath.Join(dir, FileName(2))
		if err := os.Rename(a, a+".x"); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(b, a); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(a+".x", b); err != nil {
			t.Fatal(err)
		}
		if _, err := open(t, dir, 3); err == nil || !strings.Contains(err.Error(), "file 2 of 3, not file 1 of 3") {
			t.Fatalf("open = %v, want a refusal naming the places", err)
		}
	})
	t.Run("another directory's file", func(t *testing.T) {
		dir, other := t.TempDir(), t.TempDir()
		files, err := OpenBoltFiles(dir, 2)
		if err != nil {
			t.Fatal(err)
		}
		closeAll(files)
		files, err = OpenBoltFiles(other, 3)
		if err != nil {
			t.Fatal(err)
		}
		closeAll(files)
		if err := os.Rename(filepath.Join(other, FileName(0)), filepath.Join(dir, FileName(0))); err != nil {
			t.Fatal(err)
		}
		if _, err := open(t, dir, 2); err == nil || !strings.Contains(err.Error(), "file 1 of 2, not file 1 of 3") {
			t.Fatalf("open = %v, want a refusal", err)
		}
	})
	for _, n := range []int{0, -1, MaxFiles + 1} {
		if _, err := open(t, t.TempDir(), n); err == nil {
			t.Errorf("OpenBoltFiles(%d) succeeded", n)
		}
	}
}

// TestFilesOrDefault: session.files as set, else one file for every 8 CPUs Go may use, 1 to 8.
func TestFilesOrDefault(t *testing.T) {
	if got := (Config{Files: 3}).FilesOrDefault(); got != 3 {
		t.Errorf("Files 3: %d", got)
	}
	procs := runtime.GOMAXPROCS(0)
	got := Config{}.FilesOrDefault()
	if got < 1 || got > 8 || (procs < 16 && got != 1) || (procs >= 16 && got < 2) {
		t.Errorf("the default with %d CPUs is %d files", procs, got)
	}
}
