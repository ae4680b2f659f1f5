package tools

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/lease"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// pendingGrace keeps a claim alive a little past its call's deadline, so it never expires while
// its owner can still finish; if the owner dies, the key frees itself after it.
const pendingGrace = 30 * time.Second

// CallState is the state of an idempotency record.
type CallState int

// Idempotency record states.
const (
	// CallOwned: the caller claimed the key and must run the tool, then finish.
	CallOwned CallState = iota + 1
	// CallPending: another call holds the key with other arguments.
	CallPending
	// CallDone: the key's result is stored.
	CallDone
)

// Claim is the outcome of claiming a key.
type Claim struct {
	State CallState
	// ArgsHash is the hash of the arguments the key was first used with.
	ArgsHash string
	// Result is the stored result when State is CallDone.
	Result []byte
}

// idempotency runs one execution per key, with a lease per key (internal/lease) in the tool
// store, so it holds across replicas: the lease's data is the arguments' hash, and completing it
// stores the result. Calls that find the key held with the same arguments wait for the result,
// woken when the lease is completed or released, in this process or another.
type idempotency struct {
	leases lease.Store
	ttl    time.Duration
	log    *slog.Logger
	node   string
	seq    atomic.Uint64

	mu sync.Mutex // guards hashes
	// hashes holds the arguments' hash of each claim this process owns, for its record.
	hashes map[string]string
}

func newIdempotency(leases lease.Store, ttl time.Duration, log *slog.Logger) *idempotency {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &idempotency{leases: leases, ttl: ttl, log: log, node: hex.EncodeToString(b), hashes: map[string]string{}}
}

// encodeRecord stores the arguments' hash (its length first) with the result.
func encodeRecord(argsHash string, result []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(len(argsHash)))
	b = append(b, argsHash...)
	return append(b, result...)
}

func decodeRecord(b []byte) (string, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return "", nil, errors.New("corrupt idempotency record")
	}
	return string(b[k : k+int(n)]), b[k+int(n):], nil
}

// claim takes the key or waits until it is done. It returns the owner id when this call must
// run the tool (then finish must follow), else the claim: done with its result, or pending with
// other arguments. It returns ctx's error when ctx ends while waiting.
func (d *idempotency) claim(ctx context.Context, key, argsHash string) (string, *Claim, error) {
	owner := d.node + "-" + strconv.FormatUint(d.seq.Add(1), 10)
	ttl := pendingGrace
	if dl, ok := ctx.Deadline(); ok {
		ttl += time.Until(dl)
	}
	sameArgs := func(c lease.Claim) bool { return string(c.Data) == argsHash }
	c, err := lease.Wait(ctx, d.leases, key, owner, []byte(argsHash), ttl, sameArgs)
	if err != nil {
		return "", nil, err
	}
	switch c.State {
	case lease.Acquired:
		d.mu.Lock()
		d.hashes[owner] = argsHash
		d.mu.Unlock()
		return owner, &Claim{State: CallOwned, ArgsHash: argsHash}, nil
	case lease.Done:
		hash, result, err := decodeRecord(c.Data)
		if err != nil {
			return "", nil, err
		}
		return "", &Claim{State: CallDone, ArgsHash: hash, Result: result}, nil
	default:
		return "", &Claim{State: CallPending, ArgsHash: string(c.Data)}, nil
	}
}

// finish records the result (when record) or releases the key; either wakes the key's waiters.
// It uses its own short deadline: the caller's may have passed, and the record must still be
// written.
func (d *idempotency) finish(key, owner string, res *toolsv1.ToolResult, record bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d.mu.Lock()
	hash := d.hashes[owner]
	delete(d.hashes, owner)
	d.mu.Unlock()
	if !record {
		if _, err := d.leases.Release(ctx, key, owner); err != nil {
			d.log.Warn("release idempotency key", "key", key, "error", err)
		}
		return
	}
	b, err := proto.Marshal(res)
	if err != nil {
		d.log.Error("encode idempotency record", "key", key, "error", err)
		return
	}
	ok, err := d.leases.Complete(ctx, key, owner, encodeRecord(hash, b), d.ttl)
	switch {
	case err != nil:
		d.log.Warn("store idempotency record; the key frees itself when its claim expires", "key", key, "error", err)
	case !ok:
		d.log.Warn("idempotency claim expired before the call finished; another call may have run the tool", "key", key)
	}
}

// pending counts claims this process owns and has not finished, for tests.
func (d *idempotency) pending() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.hashes)
}
