package lease

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/hermes-agent/hermes/internal/boltstore"
	"github.com/hermes-agent/hermes/internal/testenv"
)

// backends opens two handles on one fresh store of each backend: two replicas sharing Redis,
// or the same store twice for the in-process backends.
func backends() map[string]func(t *testing.T) (Store, Store) {
	return map[string]func(t *testing.T) (Store, Store){
		"memory": func(t *testing.T) (Store, Store) {
			m := NewMemory()
			return m, m
		},
		"bolt": func(t *testing.T) (Store, Store) {
			db, err := boltstore.Open(filepath.Join(t.TempDir(), "lease.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			b, err := NewBolt(db, "leases")
			if err != nil {
				t.Fatal(err)
			}
			return b, b
		},
		"bolt-records": func(t *testing.T) (Store, Store) {
			db, err := boltstore.Open(filepath.Join(t.TempDir(), "lease.db"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			b, err := NewBoltRecords(db, "leases")
			if err != nil {
				t.Fatal(err)
			}
			return b, b
		},
		"redis": func(t *testing.T) (Store, Store) {
			rdb, prefix := testenv.Redis(t)
			a, b := NewRedis(rdb, prefix, nil), NewRedis(rdb, prefix, nil)
			t.Cleanup(func() { _ = a.Close(); _ = b.Close() })
			return a, b
		},
	}
}

// TestConformance runs one suite against every backend.
func TestConformance(t *testing.T) {
	for name, open := range backends() {
		t.Run(name, func(t *testing.T) {
			t.Run("claims", func(t *testing.T) { testClaims(t, open) })
			t.Run("expiry", func(t *testing.T) { testExpiry(t, open) })
			t.Run("race", func(t *testing.T) { testRace(t, open) })
			t.Run("wake-ups", func(t *testing.T) { testWakeUps(t, open) })
			t.Run("wait", func(t *testing.T) { testWait(t, open) })
		})
	}
}

var ignoreTTL = cmpopts.IgnoreFields(Claim{}, "TTL")

func mustAcquire(t *testing.T, s Store, key, owner, data string, ttl time.Duration) Claim {
	t.Helper()
	c, err := s.Acquire(context.Background(), key, owner, []byte(data), ttl)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func testClaims(t *testing.T, open func(*testing.T) (Store, Store)) {
	a, b := open(t)
	ctx := context.Background()
	steps := []struct {
		name  string
		s     Store
		owner string
		data  string
		want  Claim
	}{
		{"first claim", a, "o1", "d1", Claim{State: Acquired, Owner: "o1", Data: []byte("d1")}},
		{"another owner finds it held", b, "o2", "d2", Claim{State: Held, Owner: "o1", Data: []byte("d1")}},
		{"the owner again extends it with new data", b, "o1", "d1b", Claim{State: Acquired, Owner: "o1", Data: []byte("d1b")}},
		{"others see the new data", a, "o3", "", Claim{State: Held, Owner: "o1", Data: []byte("d1b")}},
	}
	for _, st := range steps {
		got := mustAcquire(t, st.s, "k", st.owner, st.data, time.Minute)
		if diff := cmp.Diff(st.want, got, ignoreTTL); diff != "" {
			t.Errorf("%s (-want +got):\n%s", st.name, diff)
		}
		if got.TTL <= 0 || got.TTL > time.Minute {
			t.Errorf("%s: TTL %s, want within (0, 1m]", st.name, got.TTL)
		}
	}
	for _, op := range []struct {
		name string
		f    func() (bool, error)
		want bool
	}{
		{"renew by a non-owner", func() (bool, error) { return b.Renew(ctx, "k", "o2", time.Minute) }, false},
		{"release by a non-owner", func() (bool, error) { return b.Release(ctx, "k", "o2") }, false},
		{"complete by a non-owner", func() (bool, error) { return b.Complete(ctx, "k", "o2", []byte("x"), time.Minute) }, false},
		{"renew by the owner", func() (bool, error) { return b.Renew(ctx, "k", "o1", time.Minute) }, true},
		{"complete by the owner", func() (bool, error) { return a.Complete(ctx, "k", "o1", []byte("rec\x00bytes"), time.Minute) }, true},
		{"release of a done record", func() (bool, error) { return a.Release(ctx, "k", "o1") }, false},
		{"renew of a done record", func() (bool, error) { return a.Renew(ctx, "k", "o1", time.Minute) }, false},
	} {
		got, err := op.f()
		if err != nil || got != op.want {
			t.Errorf("%s = %v, %v; want %v", op.name, got, err, op.want)
		}
	}
	for _, owner := range []string{"o1", "o9"} {
		if diff := cmp.Diff(Claim{State: Done, Data: []byte("rec\x00bytes")}, mustAcquire(t, b, "k", owner, "", time.Minute), ignoreTTL); diff != "" {
			t.Errorf("claim of a done key by %s (-want +got):\n%s", owner, diff)
		}
	}
	// Release frees the key.
	mustAcquire(t, a, "k2", "o1", "", time.Minute)
	if ok, err := a.Release(ctx, "k2", "o1"); !ok || err != nil {
		t.Fatalf("release by the owner = %v, %v", ok, err)
	}
	if got := mustAcquire(t, b, "k2", "o2", "", time.Minute); got.State != Acquired {
		t.Errorf("after release: %v, want acquired", got.State)
	}
	if _, err := a.Acquire(ctx, "", "o", nil, time.Minute); err == nil {
		t.Error("an empty key was accepted")
	}
	if _, err := a.Acquire(ctx, "k3", "o", nil, 0); err == nil {
		t.Error("a zero TTL was accepted")
	}
}

// eventually polls cond until it holds, failing after a generous deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.WaitFor(t, 10*time.Second, what, cond)
}

func testExpiry(t *testing.T, open func(*testing.T) (Store, Store)) {
	a, b := open(t)
	ctx := context.Background()
	mustAcquire(t, a, "held", "dead", "", 30*time.Millisecond)
	eventually(t, "an expired lease goes to the next owner", func() bool {
		return mustAcquire(t, b, "held", "next", "", time.Minute).State == Acquired
	})
	if ok, _ := a.Renew(ctx, "held", "dead", time.Minute); ok {
		t.Error("the dead owner renewed a lease that passed on")
	}
	if ok, _ := a.Release(ctx, "held", "dead"); ok {
		t.Error("the dead owner released a lease that passed on")
	}
	mustAcquire(t, a, "done", "o", "", time.Minute)
	if ok, _ := a.Complete(ctx, "done", "o", []byte("r"), 30*time.Millisecond); !ok {
		t.Fatal("complete failed")
	}
	eventually(t, "an expired record frees its key", func() bool {
		return mustAcquire(t, b, "done", "o2", "", time.Minute).State == Acquired
	})
}

func testRace(t *testing.T, open func(*testing.T) (Store, Store)) {
	a, b := open(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	winners := 0
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			c, err := s.Acquire(context.Background(), "race", fmt.Sprint("o", i), nil, time.Minute)
			if err != nil {
				t.Error(err)
				return
			}
			if c.State == Acquired {
				mu.Lock()
				winners++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if winners != 1 {
		t.Errorf("%d owners acquired one key at once, want 1", winners)
	}
}

// testWakeUps checks that a watcher (on the other handle: another replica) is woken by a
// release, a completion and a signal, and that a key's watchers are not woken by another key.
func testWakeUps(t *testing.T, open func(*testing.T) (Store, Store)) {
	a, b := open(t)
	ctx := context.Background()
	woken := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(10 * time.Second):
			return false
		}
	}
	for _, tc := range []struct {
		name string
		act  func() error
	}{
		{"release", func() error { _, err := a.Release(ctx, "w-release", "o"); return err }},
		{"complete", func() error { _, err := a.Complete(ctx, "w-complete", "o", []byte("r"), time.Minute); return err }},
		{"signal", func() error { return a.Signal(ctx, "w-signal") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name != "signal" {
				mustAcquire(t, a, "w-"+tc.name, "o", "", time.Minute)
			}
			other, stopOther := b.Watch("unrelated")
			defer stopOther()
			ch, stop := b.Watch("w-" + tc.name)
			defer stop()
			if err := tc.act(); err != nil {
				t.Fatal(err)
			}
			if !woken(ch) {
				t.Fatalf("the watcher was not woken by the %s", tc.name)
			}
			select {
			case <-other:
				t.Error("a watcher of another key was woken")
			default:
			}
		})
	}
}

// testWait checks the hand-off: a waiter gets the lease once its holder releases it (long
// before the holder's TTL, which is an hour) and the record once the holder completes it.
func testWait(t *testing.T, open func(*testing.T) (Store, Store)) {
	a, b := open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, complete := range []bool{false, true} {
		key := fmt.Sprint("wait-", complete)
		mustAcquire(t, a, key, "holder", "", time.Hour)
		spy := &spyStore{Store: b, held: make(chan struct{})}
		res := make(chan Claim, 1)
		go func() {
			c, err := Wait(ctx, spy, key, "waiter", nil, time.Hour, nil)
			if err != nil {
				t.Error(err)
			}
			res <- c
		}()
		<-spy.held // the waiter found the lease held and is waiting
		if complete {
			_, _ = a.Complete(ctx, key, "holder", []byte("rec"), time.Minute)
		} else {
			_, _ = a.Release(ctx, key, "holder")
		}
		want := Claim{State: Acquired, Owner: "waiter", Data: []byte{}}
		if complete {
			want = Claim{State: Done, Data: []byte("rec")}
		}
		if diff := cmp.Diff(want, <-res, ignoreTTL, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Wait after complete=%v (-want +got):\n%s", complete, diff)
		}
	}
	// keepWaiting stops the wait for a holder it does not want to wait for.
	mustAcquire(t, a, "other-args", "holder", "args-1", time.Hour)
	c, err := Wait(ctx, b, "other-args", "waiter", []byte("args-2"), time.Hour, func(c Claim) bool { return string(c.Data) == "args-2" })
	if err != nil || c.State != Held || string(c.Data) != "args-1" {
		t.Errorf("Wait with keepWaiting false = %+v, %v; want held with args-1", c, err)
	}
	// A cancelled wait returns the context's error.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := Wait(cctx, b, "other-args", "waiter", nil, time.Hour, nil); err == nil {
		t.Error("a cancelled Wait returned no error")
	}
}

// spyStore closes held the first time Acquire finds the key held.
type spyStore struct {
	Store
	once sync.Once
	held chan struct{}
}

func (s *spyStore) Acquire(ctx context.Context, key, owner string, data []byte, ttl time.Duration) (Claim, error) {
	c, err := s.Store.Acquire(ctx, key, owner, data, ttl)
	if c.State == Held {
		s.once.Do(func() { close(s.held) })
	}
	return c, err
}

func TestWatchersAreForgotten(t *testing.T) {
	m := NewMemory()
	_, stop1 := m.Watch("k")
	_, stop2 := m.Watch("k")
	stop1()
	stop1() // twice is harmless
	if n := m.hub.watched(); n != 1 {
		t.Fatalf("%d watched keys after one of two watchers stopped, want 1", n)
	}
	stop2()
	if n := m.hub.watched(); n != 0 {
		t.Errorf("%d watched keys after every watcher stopped, want 0", n)
	}
}

func FuzzDecodeEntry(f *testing.F) {
	f.Add(encodeEntry(boltEntry{owner: "o", data: []byte("d"), expires: 5}))
	f.Add(encodeEntry(boltEntry{done: true, data: []byte("rec"), expires: 1}))
	f.Add([]byte("h\x00\x00\x00\x00\x00\x00\x00\x01\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, v []byte) {
		e, err := decodeEntry(v)
		if err != nil {
			return
		}
		back, err := decodeEntry(encodeEntry(e))
		if err != nil || !cmp.Equal(e, back, cmp.AllowUnexported(boltEntry{}), cmpopts.EquateEmpty()) {
			t.Fatalf("round trip of %+v: %+v, %v", e, back, err)
		}
	})
}

// TestBoltRecordsKeepsOnlyRecords: a NewBoltRecords store writes the file only for records, all
// those completed meanwhile in one commit (Flush here; a timer otherwise); a record is answered
// from memory until then; after a restart the record is found and a claim left by the dead
// process is not.
func TestBoltRecordsKeepsOnlyRecords(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "lease.db")
	open := func() (*Bolt, func()) {
		db, err := boltstore.Open(path, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := NewBoltRecords(db, "leases")
		if err != nil {
			t.Fatal(err)
		}
		return b, func() { _ = db.Close() }
	}
	b, closeDB := open()
	txs := func() int64 { s := b.db.Stats(); return s.TxStats.GetWrite() }
	before := txs()
	for _, key := range []string{"done", "left"} {
		if c, err := b.Acquire(ctx, key, "w1", nil, time.Hour); err != nil || c.State != Acquired {
			t.Fatalf("Acquire(%s) = %v, %v", key, c, err)
		}
		if ok, err := b.Renew(ctx, key, "w1", time.Hour); err != nil || !ok {
			t.Fatalf("Renew(%s) = %v, %v", key, ok, err)
		}
	}
	if got := txs() - before; got != 0 {
		t.Errorf("claims and renewals wrote %d times, want none", got)
	}
	for _, key := range []string{"done", "done2", "done3"} {
		if key != "done" {
			if c, err := b.Acquire(ctx, key, "w1", nil, time.Hour); err != nil || c.State != Acquired {
				t.Fatalf("Acquire(%s) = %v, %v", key, c, err)
			}
		}
		if ok, err := b.Complete(ctx, key, "w1", []byte("rec"), time.Hour); err != nil || !ok {
			t.Fatalf("Complete(%s) = %v, %v", key, ok, err)
		}
	}
	if c, err := b.Acquire(ctx, "done", "w3", nil, time.Hour); err != nil || c.State != Done || string(c.Data) != "rec" {
		t.Errorf("Acquire of a record not yet written = %+v, %v; want Done rec", c, err)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := txs() - before; got == 0 || got >= 6 {
		t.Errorf("three records wrote %d pages; one commit writes 3, three commits at least 9", got)
	}
	closeDB() // "left" is still held: the process dies holding it

	b, closeDB = open()
	defer closeDB()
	got := map[string]Claim{}
	for _, key := range []string{"done", "left"} {
		c, err := b.Acquire(ctx, key, "w2", nil, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		got[key] = Claim{State: c.State, Owner: c.Owner, Data: c.Data}
	}
	want := map[string]Claim{
		"done": {State: Done, Data: []byte("rec")},
		"left": {State: Acquired, Owner: "w2"},
	}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("after a restart (-want +got):\n%s", diff)
	}
}
