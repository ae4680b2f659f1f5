package boltstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"

	"github.com/hermes-agent/hermes/internal/testenv"
)

func TestOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.db")
	db, err := Open(path, nil, []byte("a"), []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.View(func(tx *bolt.Tx) error {
		for _, name := range []string{"a", "b"} {
			if tx.Bucket([]byte(name)) == nil {
				t.Errorf("bucket %q missing", name)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// The file is locked by db: a second open fails after the timeout with a clear error.
	_, err = Open(path, &bolt.Options{NoSync: true})
	if err == nil || !strings.Contains(err.Error(), "in use by another hermes process") {
		t.Errorf("second open: %v", err)
	}
}

// TestGroupCommit checks that concurrent writes all land, that a failing write gets its own
// error without losing the others of its commit, and that writes of one commit share it.
func TestGroupCommit(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "g.db"), nil, []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := NewGroup(db)
	const writes = 64
	var wg sync.WaitGroup
	errs := make([]error, writes)
	first := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		// The first write holds its commit until every other write has queued behind it.
		errs[0] = g.Update(func(tx *bolt.Tx) error {
			close(first)
			for g.queued() < writes-1 {
				runtime.Gosched()
			}
			return tx.Bucket([]byte("b")).Put([]byte("0"), []byte("v"))
		})
	}()
	<-first
	for i := 1; i < writes; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = g.Update(func(tx *bolt.Tx) error {
				if i%10 == 3 {
					return fmt.Errorf("write %d refused", i)
				}
				return tx.Bucket([]byte("b")).Put([]byte(fmt.Sprint(i)), []byte("v"))
			})
		}()
	}
	wg.Wait()
	n := 0
	_ = db.View(func(tx *bolt.Tx) error {
		n = tx.Bucket([]byte("b")).Stats().KeyN
		return nil
	})
	for i, err := range errs {
		if (i%10 == 3) != (err != nil) {
			t.Errorf("write %d: error %v", i, err)
		}
	}
	if want := writes - 7; n != want {
		t.Errorf("%d keys stored, want %d", n, want)
	}
	// The first commit, then one for the 63 queued writes, plus for each of the 7 failing
	// writes a rolled-back attempt (at most the bound of the former one-by-one retry).
	if c := g.commits.Load(); c > 2+2*7 {
		t.Errorf("%d transactions for %d writes, want at most %d", c, writes, 2+2*7)
	}
}

func TestDropBuckets(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "x.db"), nil, []byte("old"), []byte("kept"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// "never" was not in the file: dropping it is no error.
	if err := DropBuckets(db, []byte("old"), []byte("never")); err != nil {
		t.Fatal(err)
	}
	var got []string
	_ = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, _ *bolt.Bucket) error { got = append(got, string(name)); return nil })
	})
	if diff := cmp.Diff([]string{"kept"}, got); diff != "" {
		t.Errorf("buckets (-want +got):\n%s", diff)
	}
}

// deleteIn puts keys (each with its first byte as value) into a new bucket b of db, runs del on
// it and returns del's count and the keys left.
func deleteIn(t *testing.T, db *bolt.DB, keys []string, del func(*bolt.Bucket) (int, error)) (int, []string) {
	t.Helper()
	var n int
	var left []string
	err := db.Update(func(tx *bolt.Tx) error {
		_ = tx.DeleteBucket([]byte("b"))
		b, err := tx.CreateBucket([]byte("b"))
		if err != nil {
			return err
		}
		for _, k := range keys {
			if err := b.Put([]byte(k), []byte(k[:1])); err != nil {
				return err
			}
		}
		if n, err = del(b); err != nil {
			return err
		}
		return b.ForEach(func(k, _ []byte) error {
			left = append(left, string(k))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, left
}

func TestDeleteWhere(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	n, left := deleteIn(t, db, []string{"a1", "a2", "b1", "a3", "c1"}, func(b *bolt.Bucket) (int, error) {
		return DeleteWhere(b, func(_, v []byte) (bool, error) { return string(v) == "a", nil })
	})
	if diff := cmp.Diff([]string{"b1", "c1"}, left); n != 3 || diff != "" {
		t.Errorf("DeleteWhere deleted %d (want 3); left (-want +got):\n%s", n, diff)
	}
}

func TestDeleteRange(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "x.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, tc := range []struct {
		from, to string
		n        int
		left     []string
	}{
		{"a2", "b", 2, []string{"a1", "b", "b1", "c1"}}, // to is excluded
		{"a", "a", 0, []string{"a1", "a2", "a3", "b", "b1", "c1"}},
		{"", "z", 6, nil},
		{"b1", "a", 0, []string{"a1", "a2", "a3", "b", "b1", "c1"}}, // an empty range
		{"c", "d", 1, []string{"a1", "a2", "a3", "b", "b1"}},
	} {
		n, left := deleteIn(t, db, []string{"a1", "a2", "b1", "a3", "c1", "b"}, func(b *bolt.Bucket) (int, error) {
			return DeleteRange(b, []byte(tc.from), []byte(tc.to))
		})
		if diff := cmp.Diff(tc.left, left); n != tc.n || diff != "" {
			t.Errorf("DeleteRange [%q, %q) deleted %d (want %d); left (-want +got):\n%s", tc.from, tc.to, n, tc.n, diff)
		}
	}
}

// TestGroupDefer checks that a deferred write is applied at once (its result is known) but seen
// by readers only after a commit: the next Update's, or the group's own after its delay; that a
// deferred write that fails leaves the others; and that an Update failing in the same
// transaction does not lose them (they are applied again).
func TestGroupDefer(t *testing.T) {
	_, g, stored := openTestGroup(t)
	put := func(k string) func(*bolt.Tx, bool) error {
		return func(tx *bolt.Tx, _ bool) error { return tx.Bucket([]byte("b")).Put([]byte(k), []byte("v")) }
	}
	var seen int
	err := g.Defer(func(tx *bolt.Tx, again bool) error {
		b := tx.Bucket([]byte("b"))
		if !again {
			seen = b.Stats().KeyN // a result the caller reads
		}
		return b.Put([]byte("d1"), []byte("v"))
	})
	if err != nil || seen != 0 {
		t.Fatalf("Defer: %v, saw %d keys", err, seen)
	}
	if err := g.Defer(func(*bolt.Tx, bool) error { return errors.New("refused") }); err == nil {
		t.Error("a failing deferred write reported no error")
	}
	if err := g.Defer(put("d2 数据")); err != nil {
		t.Fatal(err)
	}
	if got := stored(); len(got) != 0 {
		t.Errorf("deferred writes visible before a commit: %v", got)
	}
	// An Update that fails rolls the open transaction back; the deferred writes are applied
	// again and committed by the next Update.
	if err := g.Update(func(tx *bolt.Tx) error {
		_ = tx.Bucket([]byte("b")).Put([]byte("bad"), []byte("v"))
		return errors.New("refused")
	}); err == nil {
		t.Error("a failing Update reported no error")
	}
	if err := g.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte("u"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"d1", "d2 数据", "u"}, stored()); diff != "" {
		t.Errorf("after the Update (-want +got):\n%s", diff)
	}
	// Without an Update, the group commits a deferred write after its delay.
	g.delay = 10 * time.Millisecond
	if err := g.Defer(put("d3")); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the deferred write to be committed", func() bool {
		return len(stored()) == 4
	})
	// Sync commits at once.
	g.delay = time.Hour
	if err := g.Defer(put("d4")); err != nil {
		t.Fatal(err)
	}
	g.Sync()
	if n := len(stored()); n != 5 {
		t.Errorf("after Sync: %d keys, want 5", n)
	}
	// A deferred write whose only following Update fails is still committed by the timer.
	g.delay = 10 * time.Millisecond
	if err := g.Defer(put("d5")); err != nil {
		t.Fatal(err)
	}
	if err := g.Update(func(*bolt.Tx) error { return errors.New("refused") }); err == nil {
		t.Error("a failing Update reported no error")
	}
	testenv.WaitFor(t, 30*time.Second, "the deferred write to be committed after a failed Update", func() bool {
		return len(stored()) == 6
	})
}

// TestGroupDeferQueued: a deferred write that arrives while a commit holds the transaction
// waits for no lock: the commit applies it and covers it (the Update that returns has it on
// disk), and its caller gets what its write saw.
func TestGroupDeferQueued(t *testing.T) {
	_, g, stored := openTestGroup(t)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	updated := make(chan error, 1)
	go func() {
		updated <- g.Update(func(tx *bolt.Tx) error {
			once.Do(func() { close(started); <-release })
			return tx.Bucket([]byte("b")).Put([]byte("u"), []byte("v"))
		})
	}()
	<-started
	var seen bool
	deferred := make(chan error, 1)
	go func() {
		deferred <- g.Defer(func(tx *bolt.Tx, again bool) error {
			b := tx.Bucket([]byte("b"))
			if !again {
				seen = b.Get([]byte("u")) != nil
			}
			return b.Put([]byte("d"), []byte("v"))
		})
	}()
	testenv.WaitFor(t, 30*time.Second, "the deferred write to queue behind the commit", func() bool {
		return g.deferQueued() == 1
	})
	close(release)
	if err := <-updated; err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"d", "u"}, stored()); diff != "" {
		t.Errorf("after the Update (-want +got):\n%s", diff)
	}
	if err := <-deferred; err != nil || !seen {
		t.Errorf("Defer: %v, saw the Update's write: %v, want true", err, seen)
	}
}

// TestGroupDeferConcurrent: deferred writes and commits from many goroutines at once are each
// applied once, in some order (each sees the count the ones before it left), and all of them
// are on disk after Sync.
func TestGroupDeferConcurrent(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "c.db"), nil, []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := NewGroup(db)
	const workers, each = 16, 20
	seen := make([][]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				err := g.Defer(func(tx *bolt.Tx, again bool) error {
					b := tx.Bucket([]byte("b"))
					n := 0
					if v := b.Get([]byte("n")); v != nil {
						n, _ = strconv.Atoi(string(v))
					}
					if !again {
						seen[w] = append(seen[w], n)
					}
					return b.Put([]byte("n"), []byte(strconv.Itoa(n+1)))
				})
				if err != nil {
					t.Error(err)
					return
				}
				if i%5 == 0 {
					if err := g.Update(func(tx *bolt.Tx) error {
						return tx.Bucket([]byte("b")).Put(fmt.Appendf(nil, "u%d-%d", w, i), []byte("v"))
					}); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	g.Sync()
	var all []int
	for _, s := range seen {
		all = append(all, s...)
	}
	slices.Sort(all)
	want := make([]int, workers*each)
	for i := range want {
		want[i] = i
	}
	if diff := cmp.Diff(want, all); diff != "" {
		t.Errorf("counts the deferred writes saw (-want +got):\n%s", diff)
	}
	var n, keys int
	_ = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("b"))
		n, _ = strconv.Atoi(string(b.Get([]byte("n"))))
		keys = b.Stats().KeyN
		return nil
	})
	if n != workers*each || keys != 1+workers*each/5 {
		t.Errorf("on disk: count %d, %d keys; want %d, %d", n, keys, workers*each, 1+workers*each/5)
	}
}

// TestGroupLater: a later write waits for the next commit (an Update's, the timer's, Sync's),
// reads its value when it runs, is dropped alone when it fails, and outlives a failed Update.
func TestGroupLater(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "l.db"), nil, []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := NewGroup(db)
	g.delay, g.laterDelay = time.Hour, time.Hour
	stored := func() map[string]string {
		out := map[string]string{}
		_ = db.View(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("b")).ForEach(func(k, v []byte) error { out[string(k)] = string(v); return nil })
		})
		return out
	}
	put := func(k string, v *string) func(*bolt.Tx) error {
		return func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte(k), []byte(*v)) }
	}
	update := func(k string) error {
		return g.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte(k), []byte("u")) })
	}
	v := "old"
	g.Later(put("l1", &v))
	g.Later(func(*bolt.Tx) error { return errors.New("refused") })
	v = "new" // the value when the write runs is the one stored
	if got := stored(); len(got) != 0 {
		t.Errorf("a later write visible before a commit: %v", got)
	}
	// Other commits do not take them before their delay: each bucket a commit writes costs it
	// pages. Nor does SyncDeferred.
	if err := update("u1"); err != nil {
		t.Fatal(err)
	}
	g.SyncDeferred()
	if diff := cmp.Diff(map[string]string{"u1": "u"}, stored()); diff != "" {
		t.Errorf("after an Update and SyncDeferred, before the delay (-want +got):\n%s", diff)
	}
	g.Sync()
	if diff := cmp.Diff(map[string]string{"l1": "new", "u1": "u"}, stored()); diff != "" {
		t.Errorf("after Sync (-want +got):\n%s", diff)
	}
	// A failed Update leaves the later write for the next commit: Sync's.
	g.Later(put("l2", &v))
	if err := g.Update(func(*bolt.Tx) error { return errors.New("refused") }); err == nil {
		t.Error("a failing Update reported no error")
	}
	if _, ok := stored()["l2"]; ok {
		t.Error("a later write committed by a failed Update")
	}
	g.Sync()
	if _, ok := stored()["l2"]; !ok {
		t.Error("a later write not committed by Sync")
	}
	// Without an Update, the group commits it after its delay for later writes.
	g.laterDelay = 10 * time.Millisecond
	g.Later(put("l3", &v))
	testenv.WaitFor(t, 30*time.Second, "the later write to be committed", func() bool {
		_, ok := stored()["l3"]
		return ok
	})
}

// TestMoveInto: the buckets of an old file (nested ones and sequences too) are copied into the
// group's file, the old file is renamed, and a second call finds nothing to move.
func TestMoveInto(t *testing.T) {
	dir := t.TempDir()
	old, err := Open(filepath.Join(dir, "old.db"), nil, []byte("turns"), []byte("outbox"))
	if err != nil {
		t.Fatal(err)
	}
	err = old.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("turns"))
		if err := b.SetSequence(41); err != nil {
			return err
		}
		if err := b.Put([]byte("t1"), []byte("记录 one")); err != nil {
			return err
		}
		n, err := b.CreateBucket([]byte("nested"))
		if err != nil {
			return err
		}
		return n.Put([]byte("k"), []byte("v"))
	})
	if err != nil {
		t.Fatal(err)
	}
	_ = old.Close()
	db, err := Open(filepath.Join(dir, "new.db"), nil, []byte("sessions"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	g := NewGroup(db)
	if moved, err := MoveInto(g, filepath.Join(dir, "old.db")); err != nil || !moved {
		t.Fatalf("MoveInto: %v, %v", moved, err)
	}
	_ = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("turns"))
		if b == nil || string(b.Get([]byte("t1"))) != "记录 one" || b.Sequence() != 41 ||
			string(b.Bucket([]byte("nested")).Get([]byte("k"))) != "v" || tx.Bucket([]byte("outbox")) == nil {
			t.Error("the old file's buckets were not copied whole")
		}
		return nil
	})
	if moved, err := MoveInto(g, filepath.Join(dir, "old.db")); err != nil || moved {
		t.Errorf("second MoveInto: %v, %v; want nothing moved", moved, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "old.db.moved")); err != nil {
		t.Errorf("the old file was not renamed: %v", err)
	}
}

// TestPages reads an index under several prefixes (Latin and Chinese keys) page by page with
// ParseCursor and SeekPage: every key of the prefix once, in order, none of another prefix.
func TestPages(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "x.db"), nil, []byte("idx"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	users := []string{"alice", "alicia", "用户甲", "用户"}
	want := map[string][]string{}
	if err := db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("idx"))
		for i, u := range users {
			for j := range 3 + 2*i {
				k := fmt.Sprintf("%s\x00%03d", u, j)
				want[u] = append(want[u], k)
				if err := b.Put([]byte(k), nil); err != nil {
					return err
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, u := range users {
		prefix := append([]byte(u), 0)
		for _, size := range []int{1, 2, 100} {
			var got []string
			cursor := ""
			for range 100 {
				after, ok := ParseCursor(cursor, prefix)
				if !ok {
					t.Fatalf("%s: cursor %q refused", u, cursor)
				}
				var page []string
				_ = db.View(func(tx *bolt.Tx) error {
					c := tx.Bucket([]byte("idx")).Cursor()
					for k := SeekPage(c, prefix, after); k != nil && strings.HasPrefix(string(k), string(prefix)) && len(page) < size; k, _ = c.Next() {
						page = append(page, string(k))
					}
					return nil
				})
				got = append(got, page...)
				if len(page) < size {
					break
				}
				cursor = fmt.Sprintf("%x", page[len(page)-1])
			}
			if diff := cmp.Diff(want[u], got); diff != "" {
				t.Errorf("%s in pages of %d (-want +got):\n%s", u, size, diff)
			}
		}
	}
	for _, bad := range []string{"zz", fmt.Sprintf("%x", "bob\x00001")} {
		if _, ok := ParseCursor(bad, []byte("alice\x00")); ok {
			t.Errorf("cursor %q accepted", bad)
		}
	}
}

// TestGroupLaterAfterClose: a later write made after the file was closed is dropped by the
// commit that cannot begin, not queued again for a timer that would retry it forever.
func TestGroupLaterAfterClose(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "c.db"), nil, []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	g := NewGroup(db)
	g.delay, g.laterDelay = time.Hour, time.Hour
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	g.Later(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte("k"), []byte("v")) })
	g.Sync()
	g.mu.Lock()
	queued, armed := len(g.later), g.laterTimer != nil
	g.mu.Unlock()
	if queued != 0 || armed {
		t.Errorf("after a commit on the closed file: %d later writes queued, timer armed %t; want none", queued, armed)
	}
}

// openTestGroup opens a file with bucket "b" and a group on it that commits only when asked
// (its timer an hour away); stored lists the bucket's committed keys.
func openTestGroup(t *testing.T) (db *bolt.DB, g *Group, stored func() []string) {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "g.db"), nil, []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	g = NewGroup(db)
	g.delay = time.Hour
	return db, g, func() []string {
		var keys []string
		_ = db.View(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte("b")).ForEach(func(k, _ []byte) error { keys = append(keys, string(k)); return nil })
		})
		return keys
	}
}

// TestGroupDeferDurable: a DeferDurable write hears of the commit that puts it on disk (an
// Update's, Sync's), also when the open transaction was rolled back and the write applied again
// meanwhile, and not before.
func TestGroupDeferDurable(t *testing.T) {
	_, g, stored := openTestGroup(t)
	put := func(k string) func(*bolt.Tx, bool) error {
		return func(tx *bolt.Tx, _ bool) error { return tx.Bucket([]byte("b")).Put([]byte(k), []byte("v")) }
	}
	pending := func(name string, ch <-chan error) {
		t.Helper()
		select {
		case err := <-ch:
			t.Fatalf("%s: told %v before a commit", name, err)
		default:
		}
	}
	durable := func(name string, ch <-chan error, want []string) {
		t.Helper()
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		default:
			t.Fatalf("%s: not told of its commit", name)
		}
		if diff := cmp.Diff(want, stored()); diff != "" {
			t.Errorf("%s: stored (-want +got):\n%s", name, diff)
		}
	}

	a, err := g.DeferDurable(put("a"))
	if err != nil {
		t.Fatal(err)
	}
	pending("a", a)
	if got := stored(); len(got) != 0 {
		t.Fatalf("a deferred write visible before its commit: %v", got)
	}
	if err := g.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte("u"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	durable("a, by an Update", a, []string{"a", "u"})

	b, err := g.DeferDurable(put("b"))
	if err != nil {
		t.Fatal(err)
	}
	// A failing deferred write rolls the open transaction back: b is applied again and still
	// hears of its commit.
	if err := g.Defer(func(*bolt.Tx, bool) error { return errors.New("refused") }); err == nil {
		t.Fatal("a failing deferred write reported no error")
	}
	pending("b", b)
	g.Sync()
	durable("b, by Sync after a rollback", b, []string{"a", "b", "u"})

	if _, err := g.DeferDurable(func(*bolt.Tx, bool) error { return errors.New("refused") }); err == nil {
		t.Error("a failing DeferDurable write reported no error")
	}
}

// TestGroupBusy: the writer's busy time counts the time writes hold the transaction (an Update's
// and a deferred one's, each made to take at least 3 ms) and no more than the wall time.
func TestGroupBusy(t *testing.T) {
	start := time.Now()
	_, g, _ := openTestGroup(t)
	if b := g.Busy(); b != 0 {
		t.Fatalf("Busy of a new group = %v", b)
	}
	spin := func() {
		for s := time.Now(); time.Since(s) < 3*time.Millisecond; {
		}
	}
	if err := g.Update(func(*bolt.Tx) error { spin(); return nil }); err != nil {
		t.Fatal(err)
	}
	if b := g.Busy(); b < 3*time.Millisecond {
		t.Errorf("Busy after a 3 ms write = %v", b)
	}
	if err := g.Defer(func(*bolt.Tx, bool) error { spin(); return nil }); err != nil {
		t.Fatal(err)
	}
	if b := g.Busy(); b < 6*time.Millisecond || b > time.Since(start) {
		t.Errorf("Busy after two 3 ms writes = %v, want at least 6 ms and at most the %v since the start", b, time.Since(start))
	}
	g.Sync()
}
