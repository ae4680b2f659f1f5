package tools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// pendingGrace keeps a claim alive a little past its call's deadline, so it never expires while
// its owner can still finish; if the owner dies, the key frees itself after it.
const pendingGrace = 30 * time.Second

// idempotency runs one execution per key. The claim lives in the store (a pending marker set
// only if absent), so it holds across replicas; calls that find the key pending wait for the
// result: woken at once in this process, by polling the store across processes.
type idempotency struct {
	store Store
	ttl   time.Duration
	log   *slog.Logger
	node  string
	seq   atomic.Uint64

	mu   sync.Mutex
	wake map[string]*wakeup
}

// wakeup is closed when a key's call in this process finishes; n counts its waiters so the
// entry goes away with the last one.
type wakeup struct {
	ch chan struct{}
	n  int
}

func newIdempotency(store Store, ttl time.Duration, log *slog.Logger) *idempotency {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &idempotency{store: store, ttl: ttl, log: log, node: hex.EncodeToString(b), wake: map[string]*wakeup{}}
}

// claim takes the key or waits until it is done. It returns the owner id when this call must
// run the tool (then finish must follow), else the claim: done with its result, or pending with
// other arguments. It returns ctx's error when ctx ends while waiting.
func (d *idempotency) claim(ctx context.Context, key, argsHash string) (string, *Claim, error) {
	poll := 10 * time.Millisecond
	for {
		// Subscribe before reading the store, so a finish in between is not missed.
		ch := d.subscribe(key)
		owner := d.node + "-" + strconv.FormatUint(d.seq.Add(1), 10)
		ttl := pendingGrace
		if dl, ok := ctx.Deadline(); ok {
			ttl += time.Until(dl)
		}
		c, err := d.store.ClaimCall(ctx, key, owner, argsHash, ttl)
		if err != nil {
			d.unsubscribe(key, ch)
			return "", nil, err
		}
		switch {
		case c.State == CallOwned:
			d.unsubscribe(key, ch)
			return owner, c, nil
		case c.State == CallDone, c.ArgsHash != argsHash:
			d.unsubscribe(key, ch)
			return "", c, nil
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			d.unsubscribe(key, ch)
			return "", nil, ctx.Err()
		case <-ch:
			t.Stop()
		case <-t.C:
			poll = min(poll*3/2, 200*time.Millisecond)
		}
		d.unsubscribe(key, ch)
	}
}

func (d *idempotency) subscribe(key string) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	w, ok := d.wake[key]
	if !ok {
		w = &wakeup{ch: make(chan struct{})}
		d.wake[key] = w
	}
	w.n++
	return w.ch
}

func (d *idempotency) unsubscribe(key string, ch chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.wake[key]; ok && w.ch == ch {
		if w.n--; w.n <= 0 {
			delete(d.wake, key)
		}
	}
}

// finish records the result (when record) or releases the key, then wakes local waiters. It
// uses its own short deadline: the caller's may have passed, and the record must still be
// written.
func (d *idempotency) finish(key, owner string, res *toolsv1.ToolResult, record bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	defer d.notify(key)
	if !record {
		if err := d.store.ReleaseCall(ctx, key, owner); err != nil {
			d.log.Warn("release idempotency key", "key", key, "error", err)
		}
		return
	}
	b, err := proto.Marshal(res)
	if err != nil {
		d.log.Error("encode idempotency record", "key", key, "error", err)
		return
	}
	ok, err := d.store.CompleteCall(ctx, key, owner, b, d.ttl)
	switch {
	case err != nil:
		d.log.Warn("store idempotency record; the key frees itself when its claim expires", "key", key, "error", err)
	case !ok:
		d.log.Warn("idempotency claim expired before the call finished; another call may have run the tool", "key", key)
	}
}

func (d *idempotency) notify(key string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w, ok := d.wake[key]; ok {
		close(w.ch)
		delete(d.wake, key)
	}
}

// pending counts keys with local waiters, for tests.
func (d *idempotency) pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.wake)
}
