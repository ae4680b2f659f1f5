package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	bolt "go.etcd.io/bbolt"
)

// journaledDB opens path as Open does, keeping the journal at hand.
func journaledDB(t *testing.T, path string) (*bolt.DB, *journal) {
	t.Helper()
	j, err := openJournal(path, false, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, PreLoadFreelist: true, Journal: j, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, j
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// crash writes the disk that power loss may leave into a new directory and returns the path of
// the bbolt file there: each page of the file is, at random, the synced one or the live one; the
// journal is the one at path, its last record torn when tear is set.
func crash(t *testing.T, path string, synced, live []byte, rng *rand.Rand, tear int64) string {
	t.Helper()
	disk := make([]byte, len(live))
	for off := 0; off < len(live); off += journalBlock {
		src := live
		if rng.IntN(2) == 0 {
			src = synced
		}
		if off < len(src) {
			copy(disk[off:min(off+journalBlock, len(live))], src[off:])
		}
	}
	jr := readFile(t, path+journalSuffix)
	if tear > 0 {
		// Garbage over one block of the last record: it was never acknowledged.
		for i := tear; i < tear+journalBlock; i++ {
			jr[i] = byte(rng.Uint32())
		}
	}
	dst := filepath.Join(t.TempDir(), "crashed.db")
	if err := os.WriteFile(dst, disk, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+journalSuffix, jr, 0o600); err != nil {
		t.Fatal(err)
	}
	return dst
}

// contents reads the bucket "b" of the file at path (opened by Open, which replays its journal)
// and checks the file's consistency.
func contents(t *testing.T, path string) map[string]string {
	t.Helper()
	db, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got := map[string]string{}
	err = db.View(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			return fmt.Errorf("check: %w", err)
		}
		b := tx.Bucket([]byte("b"))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			got[string(k)] = fmt.Sprintf("%d bytes, %x", len(v), v[:min(8, len(v))])
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestJournalPowerLoss replays power loss at many points of a run of commits that fills the
// journal's halves several times: every acknowledged commit is in the file opened afterwards,
// which bbolt's check finds consistent; a torn last record loses only its own commit.
func TestJournalPowerLoss(t *testing.T) {
	for _, tc := range []struct {
		name    string
		commits int
		tear    bool
		// unfinished: the last checkpoint had not finished, so the file holds only what the one
		// before it synced, and replay needs the older half's records too.
		unfinished bool
	}{
		{"first commits", 3, false, false},
		{"within a half", 40, false, false},
		{"torn last record", 40, true, false},
		{"after one switch of halves", 180, false, false},
		{"after one switch, checkpoint unfinished", 180, false, true},
		{"after several switches", 700, false, false},
		{"after several switches, checkpoint unfinished", 700, false, true},
		{"after several switches, torn", 700, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(tc.commits), 7))
			path := filepath.Join(t.TempDir(), "j.db")
			db, j := journaledDB(t, path)
			synced := readFile(t, path) // bbolt synced the new file's first pages itself
			pending := synced           // what the last checkpoint synced, when unfinished
			model := map[string]string{}
			var before map[string]string // the model without the last commit
			var last int64               // where the last record starts in the journal
			var prev []byte              // the file before the last commit
			for i := range tc.commits {
				prev = readFile(t, path)
				ckpts, half := j.checkpoints, j.half
				last = j.off
				before = make(map[string]string, len(model))
				for k, v := range model {
					before[k] = v
				}
				err := db.Update(func(tx *bolt.Tx) error {
					b, err := tx.CreateBucketIfNotExists([]byte("b"))
					if err != nil {
						return err
					}
					// Values of a few pages, over a few keys, so records are large and pages
					// are rewritten and freed.
					for range 1 + rng.IntN(3) {
						k := fmt.Sprintf("k%02d", rng.IntN(24))
						v := make([]byte, 1000+rng.IntN(40_000))
						binary.LittleEndian.PutUint64(v, uint64(i)<<8|uint64(rng.IntN(256)))
						if err := b.Put([]byte(k), v); err != nil {
							return err
						}
						model[k] = fmt.Sprintf("%d bytes, %x", len(v), v[:8])
					}
					if rng.IntN(5) == 0 {
						k := fmt.Sprintf("k%02d", rng.IntN(24))
						delete(model, k)
						return b.Delete([]byte(k))
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if j.checkpoints != ckpts {
					// The checkpoint began before this commit wrote into the file.
					if err := j.waitCheckpoint(); err != nil {
						t.Fatal(err)
					}
					synced = prev
					if tc.unfinished {
						synced, pending = pending, prev
					}
				}
				if j.half != half {
					last = halfStart(j.half)
				}
			}
			want, live, tear := model, readFile(t, path), int64(0)
			if tc.tear {
				// The torn commit's pages may be in the file, its meta page not: bbolt writes
				// that only once the record is synced.
				want, tear = before, last
				copy(live, prev[:2*os.Getpagesize()])
			}
			for trial := range 3 {
				dst := crash(t, path, synced, live, rng, tear)
				if diff := cmp.Diff(want, contents(t, dst)); diff != "" {
					t.Fatalf("trial %d: after power loss (-want +got):\n%s", trial, diff)
				}
			}
		})
	}
}

// TestJournalLargeCommit checks a commit too large for a half of the journal: it goes into the
// file with two syncs and a new epoch, and power loss after it and after later journaled commits
// loses nothing.
func TestJournalLargeCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	db, j := journaledDB(t, path)
	// The large value goes into a bucket of its own: bbolt rewrites a leaf with all its values,
	// so later commits to its leaf would be as large.
	put := func(bucket, k string, n int) {
		t.Helper()
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte(bucket))
			if err != nil {
				return err
			}
			return b.Put([]byte(k), bytes.Repeat([]byte{byte(n)}, n))
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	put("b", "small", 100)
	epoch := j.epoch
	put("large", "large", journalHalf+journalBlock)
	if j.epoch == epoch || j.seq != 0 {
		t.Fatalf("a commit larger than a half was journaled (epoch %d → %d, %d records)", epoch, j.epoch, j.seq)
	}
	synced := readFile(t, path)
	put("b", "after", 5000)
	put("b", "small", 200)
	if j.seq != 2 {
		t.Fatalf("%d records after the large commit, want 2", j.seq)
	}
	got := contents(t, crash(t, path, synced, readFile(t, path), rand.New(rand.NewPCG(1, 2)), 0))
	want := map[string]string{}
	for k, n := range map[string]int{"small": 200, "after": 5000} {
		want[k] = fmt.Sprintf("%d bytes, %x", n, bytes.Repeat([]byte{byte(n)}, 8))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

// TestJournalClose checks that a closed file needs no replay (Close synced it and began a new
// epoch), that the journal is written ahead to its full size once, and that a second process
// cannot open a file whose journal is held.
func TestJournalClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	db, err := Open(path, nil, []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, nil); err == nil || !strings.Contains(err.Error(), "in use by another hermes process") {
		t.Fatalf("second open: %v, want the file in use", err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path + journalSuffix)
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != journalBlock+journalSize {
		t.Fatalf("journal of %d bytes, want %d", st.Size(), journalBlock+journalSize)
	}
	f, err := os.Open(path + journalSuffix)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, n, err := replayJournal(f, &memFile{readFile(t, path)}); err != nil || n != 0 {
		t.Fatalf("replay after Close: %d records, %v; want none", n, err)
	}
	// A read-only open, as MoveInto does, is not held up by a journal.
	ro, err := Open(path, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = ro.Close()
}

// memFile is a bbolt file in memory, of at most 1 MiB.
type memFile struct{ b []byte }

func (m *memFile) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 || off >= int64(len(m.b)) {
		return 0, io.EOF
	}
	n := copy(b, m.b[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memFile) WriteAt(b []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(b)) > 1<<20 {
		return 0, errors.New("offset out of bounds")
	}
	if end := int(off) + len(b); end > len(m.b) {
		// Doubling: replay writes a file of many pages a piece at a time.
		if end > cap(m.b) {
			nb := make([]byte, end, max(end, 2*cap(m.b)))
			copy(nb, m.b)
			m.b = nb
		}
		m.b = m.b[:end]
	}
	return copy(m.b[off:], b), nil
}

// FuzzReplayJournal checks that replay of any journal neither panics nor writes outside its
// bounds, and that a valid journal written by Log replays its records.
func FuzzReplayJournal(f *testing.F) {
	// A seed from a real journal: a few small commits (a larger seed makes each run slow).
	dir := f.TempDir()
	path := filepath.Join(dir, "seed.db")
	j, err := openJournal(path, false, time.Second)
	if err != nil {
		f.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, &bolt.Options{Journal: j})
	if err != nil {
		f.Fatal(err)
	}
	for i := range 3 {
		_ = db.Update(func(tx *bolt.Tx) error {
			b, _ := tx.CreateBucketIfNotExists([]byte("b"))
			return b.Put([]byte{byte(i)}, bytes.Repeat([]byte{1}, 100))
		})
	}
	jr, err := os.ReadFile(path + journalSuffix)
	if err != nil {
		f.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	// The file as bbolt initialised it, before the journaled commits.
	data = data[:4*os.Getpagesize()]
	used := j.off
	_ = db.Close()
	// Only the used part, so that fuzzing mutates records rather than zeros.
	f.Add(jr[:used])
	f.Add(jr[:journalBlock+100])
	if _, n, err := replayJournal(bytes.NewReader(jr[:used]), &memFile{bytes.Clone(data)}); err != nil || n != 3 {
		f.Fatalf("seed: %d records replayed, %v; want 3", n, err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _ = replayJournal(bytes.NewReader(b), &memFile{bytes.Clone(data)})
	})
}

// TestJournalForeignFile replays an operator's mistake: after a crash, the file is restored from
// an older copy while the crashed process's journal stays beside it. Its records (of commits
// after one the copy lacks) would corrupt the copy; Open refuses with what to do, and opens the
// copy once the journal is moved away.
func TestJournalForeignFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "j.db")
	db, err := Open(path, nil, []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	put := func(k string) {
		t.Helper()
		if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("b")).Put([]byte(k), []byte(k)) }); err != nil {
			t.Fatal(err)
		}
	}
	reopen := func() {
		t.Helper()
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		if db, err = Open(path, nil); err != nil {
			t.Fatal(err)
		}
	}
	put("a")
	reopen()
	backup := readFile(t, path) // a copy taken while the file was closed: a, at commit 3
	put("b")
	reopen()
	for _, k := range []string{"c", "d"} {
		put(k) // commits 5 and 6, in the journal
	}
	// The crash: the files as they are, the DB never closed.
	dst := filepath.Join(t.TempDir(), "restored.db")
	if err := os.WriteFile(dst, backup, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst+journalSuffix, readFile(t, path+journalSuffix), 0o600); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	if _, err := Open(dst, nil); !errors.Is(err, errJournalForeign) {
		t.Fatalf("open of a restored copy beside a foreign journal: %v, want %v", err, errJournalForeign)
	}
	if err := os.Rename(dst+journalSuffix, dst+journalSuffix+".old"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]string{"a": "1 bytes, 61"}, contents(t, dst)); diff != "" {
		t.Fatalf("restored copy (-want +got):\n%s", diff)
	}
}
