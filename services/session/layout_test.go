package session

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/testing/protocmp"

	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// layoutReads is what a store answers about layoutScript's sessions, and about appends after
// it: one with a client id it has seen (deduplicated) and one new message.
func layoutReads(t *testing.T, s Store) map[string]any {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	for _, ls := range layoutSessions {
		msgs, err := s.ListMessages(ctx, ls.sid, 0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		out["messages "+ls.sid] = msgs
		for _, w := range []struct{ turns, evicted int }{{1, 0}, {3, 4}, {100, 100}} {
			d, err := s.LoadContext(ctx, ls.sid, w.turns, w.evicted)
			if err != nil {
				t.Fatal(err)
			}
			d.Session.State.UpdatedAt = nil
			out[fmt.Sprintf("context %s %d %d", ls.sid, w.turns, w.evicted)] = d
		}
		for _, terms := range [][]string{{"harbour"}, {"灯笼"}, {"answer", "copper"}, {"turn"}} {
			res, err := s.Search(ctx, ls.uid, terms, "", 1, 20)
			if err != nil {
				t.Fatal(err)
			}
			out["search "+ls.uid+" "+terms[0]] = res
		}
	}
	ls := layoutSessions[1]
	seen := &sessionv1.Message{Role: sessionv1.Role_ROLE_USER, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: "again", ClientId: "client-1-3"}
	fresh := &sessionv1.Message{Role: sessionv1.Role_ROLE_USER, Kind: sessionv1.MessageKind_MESSAGE_KIND_TEXT, Content: "new", ClientId: "client-1-new", Id: "new"}
	res, err := s.Append(ctx, ls.uid, ls.sid, []AppendItem{{Message: seen}, {Message: fresh}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.State.UpdatedAt = nil
	out["append"] = res
	d, err := s.LoadContext(ctx, ls.sid, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	d.Session.State.UpdatedAt = nil
	out["context after append"] = d
	return out
}

// TestBoltLayout1Migrates opens a file the store of layout 1 wrote (four nested buckets a
// session) and checks that the store answers as one that wrote layoutScript's sessions itself:
// opened at once, and after a crash part way through the migration.
func TestBoltLayout1Migrates(t *testing.T) {
	fresh := openBolt(t, filepath.Join(t.TempDir(), "fresh.db"), manualFlush)
	if err := layoutScript(context.Background(), fresh); err != nil {
		t.Fatal(err)
	}
	want := layoutReads(t, fresh)
	for _, k := range []string{"search alice harbour", "search alice 灯笼", "search bob turn"} {
		if res, _ := want[k].([]*SearchResult); len(res) == 0 {
			t.Fatalf("%s: no results to compare", k)
		}
	}
	if d := want["context 01JEXAMPLE0000000000000002 3 4"].(*ContextData); len(d.Sticky) == 0 || len(d.Window) == 0 || len(d.Evicted) == 0 || d.Summary == nil {
		t.Fatalf("the second session's context lacks a part to compare: %d sticky, %d in the window, %d evicted, summary %v",
			len(d.Sticky), len(d.Window), len(d.Evicted), d.Summary != nil)
	}
	if err := fresh.Close(); err != nil {
		t.Fatal(err)
	}
	fixture, err := os.ReadFile("testdata/layout1.db")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		// before runs on the copied file before the store opens it.
		before func(t *testing.T, path string)
	}{
		{"opened", func(*testing.T, string) {}},
		{"crashed after one session", func(t *testing.T, path string) {
			db, err := bolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucketIfNotExists(bLayout); return err }); err != nil {
				t.Fatal(err)
			}
			var old [][]byte
			if err := db.View(func(tx *bolt.Tx) error { old = oldSessionBuckets(tx); return nil }); err != nil {
				t.Fatal(err)
			}
			if len(old) != len(layoutSessions) {
				t.Fatalf("%d sessions of layout 1 found, want %d", len(old), len(layoutSessions))
			}
			left, err := migrateBatch(db, 1, old)
			if err != nil || len(left) != len(layoutSessions)-1 {
				t.Fatalf("first batch: %d sessions left, err %v; want %d left", len(left), err, len(layoutSessions)-1)
			}
			if n := oldSessions(t, db); n != len(layoutSessions)-1 {
				t.Fatalf("after one batch %d sessions of layout 1, want %d", n, len(layoutSessions)-1)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}},
		{"crashed part way through the postings", func(t *testing.T, path string) {
			db := layout2File(t, path)
			defer db.Close()
			if err := db.Update(func(tx *bolt.Tx) error {
				moved, err := movePostings(tx.Bucket(bIndex), tx.Bucket(bPostings), 5)
				if moved != 5 {
					t.Errorf("moved %d postings, want 5", moved)
				}
				return err
			}); err != nil {
				t.Fatal(err)
			}
		}},
		{"postings moved three a transaction", func(t *testing.T, path string) {
			db := layout2File(t, path)
			defer db.Close()
			if err := migrateIndex(db, 3); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "session.db")
			if err := os.WriteFile(path, fixture, 0o600); err != nil {
				t.Fatal(err)
			}
			tc.before(t, path)
			s := openBolt(t, path, manualFlush)
			if n := oldSessions(t, s.db); n != 0 {
				t.Errorf("%d sessions of layout 1 left", n)
			}
			if err := s.db.View(func(tx *bolt.Tx) error {
				if v := tx.Bucket(bLayout).Get(layoutKey); !bytes.Equal(v, layoutValue) {
					t.Errorf("layout %v, want %v", v, layoutValue)
				}
				if tx.Bucket(bIndex) != nil {
					t.Error("layout 2's postings left")
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			got := layoutReads(t, s)
			if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
				t.Errorf("reads of the migrated file (-fresh +migrated):\n%s", diff)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// Opened again: layout 3 is recorded, nothing moves.
			s = openBolt(t, path, manualFlush)
			defer s.Close()
			if _, err := s.ListMessages(context.Background(), layoutSessions[0].sid, 0, 1); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// layout2File opens the layout-1 fixture at path and moves its sessions into layout 2, leaving
// its postings of layout 2 (at least 20, so that moving them can stop part way) to move.
func layout2File(t *testing.T, path string) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	var old [][]byte
	indexed := 0
	if err := db.Update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bLayout, bPostings} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		old = oldSessionBuckets(tx)
		indexed = tx.Bucket(bIndex).Stats().KeyN
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if indexed < 20 {
		t.Fatalf("the fixture has %d postings of layout 2, too few to move part of them", indexed)
	}
	if left, err := migrateBatch(db, migrateBytes, old); err != nil || left != nil {
		t.Fatalf("sessions' migration: %d left, err %v", len(left), err)
	}
	return db
}

// oldSessions counts the sessions of layout 1 in db.
func oldSessions(t *testing.T, db *bolt.DB) int {
	t.Helper()
	n := 0
	if err := db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			if bytes.HasPrefix(name, []byte("s/")) && hasOldParts(b) {
				n++
			}
			return nil
		})
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBoltLayout1Refused: a layout-1 file whose session holds what the layout never wrote (a
// bucket inside its messages) is not opened, and the migration leaves it as it was.
func TestBoltLayout1Refused(t *testing.T) {
	fixture, err := os.ReadFile("testdata/layout1.db")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "session.db")
	if err := os.WriteFile(path, fixture, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad := sessionBucketName(layoutSessions[2].sid)
	if err := db.Update(func(tx *bolt.Tx) error {
		_, err := tx.Bucket(bad).Bucket([]byte("m")).CreateBucket([]byte("odd"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := openBoltStore(path, manualFlush)
	if err == nil {
		s.Close()
		t.Fatal("opened a file with a bucket inside a session's messages")
	}
	if !strings.Contains(err.Error(), string(bad)) {
		t.Errorf("error %q does not name the session's bucket %s", err, bad)
	}
	db, err = bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if n := oldSessions(t, db); n != len(layoutSessions) {
		t.Errorf("%d sessions of layout 1 after the refused migration, want all %d", n, len(layoutSessions))
	}
}

// TestBoltLayoutLaterRefused: a file a later release marked with another layout is not opened
// (nor marked as this release's layout).
func TestBoltLayoutLaterRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "session.db")
	s := openBolt(t, path, manualFlush)
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bLayout).Put(layoutKey, []byte{4}) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err := openBoltStore(path, manualFlush); err == nil {
		s.Close()
		t.Fatal("opened a file of layout 4")
	} else if !strings.Contains(err.Error(), "layout 04") {
		t.Errorf("error %q does not name the layout", err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket(bLayout).Get(layoutKey); !bytes.Equal(v, []byte{4}) {
			t.Errorf("layout %v after the refused open, want [4]", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
