package orchestrator

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/lease"
	eventsv1 "github.com/hermes-agent/hermes/proto/hermes/events/v1"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// ErrNotFound is returned when a turn record does not exist (or has expired).
var ErrNotFound = errclass.New(errclass.NotFound, "not found", nil)

// ErrBadCursor is returned for a page token the store did not issue.
var ErrBadCursor = errclass.New(errclass.Invalid, "page_token is not valid: pass the next_page_token of a previous call", nil)

// taskStateTTL is how long a session's task state outlives its last change.
const taskStateTTL = 30 * 24 * time.Hour

// Step is a tool call that succeeded, with its key result: the task state lists these so that
// after trimming the model neither forgets a finished step nor runs it twice.
type Step struct {
	Tool string `json:"tool"`
	// Arguments is the canonical JSON the tool ran with.
	Arguments string `json:"arguments"`
	// Result is a short preview of the output.
	Result         string    `json:"result"`
	TurnID         string    `json:"turn_id"`
	CallID         string    `json:"call_id"`
	IdempotencyKey string    `json:"idempotency_key,omitempty"`
	Replayed       bool      `json:"replayed,omitempty"`
	At             time.Time `json:"at"`
}

// Pending is something the session's task still needs: a request whose turn did not finish, or
// a tool call that failed and was not done since.
type Pending struct {
	What   string    `json:"what"`
	TurnID string    `json:"turn_id"`
	At     time.Time `json:"at"`
}

// TaskState is a session's task-state record.
type TaskState struct {
	Done    []Step    `json:"done"`
	Pending []Pending `json:"pending"`
}

// Finish is everything a finished turn stores, written at once: the final record, the steps it
// did and what it leaves pending (the session's task state), and its turn.finished event in the
// outbox, from which it is published until acknowledged.
type Finish struct {
	Turn *orchestratorv1.Turn
	// TTL is how long the record is kept.
	TTL time.Duration
	// Steps are appended to the session's done steps, of which the newest KeepSteps are kept.
	Steps     []Step
	KeepSteps int
	// SetPending replaces the session's pending list with Pending, after the items already
	// pending when KeepPending; the newest MaxPending are kept.
	SetPending  bool
	KeepPending bool
	Pending     []Pending
	MaxPending  int
	// Event goes to the outbox; nil when events are not published.
	Event *eventsv1.TurnFinished
	// eventData is Event's encoding, made once (encode) for the outbox and the publish after it.
	eventData []byte
	// Lease, when set, is the session lease the turn holds (in the store's Leases): the store
	// releases it after the writes, in the same round trip where it can, so the session's next
	// turn reads them. It is released even when the writes fail.
	Lease *HeldLease
}

// HeldLease names a lease and its owner.
type HeldLease struct {
	Key, Owner string
}

// encode returns the record's and the event's protobuf (nil without an event). The event's is
// kept for the publish (publishedData): the bytes are only read, by the store and the publisher.
func (f *Finish) encode() (record, event []byte, err error) {
	if record, err = proto.Marshal(f.Turn); err != nil {
		return nil, nil, err
	}
	if f.Event != nil && f.eventData == nil {
		if f.eventData, err = proto.Marshal(f.Event); err != nil {
			return nil, nil, err
		}
	}
	return record, f.eventData, nil
}

// publishedData is the event's encoding as the store wrote it to the outbox, nil when the store
// did not encode it.
func (f *Finish) publishedData() []byte { return f.eventData }

// mergePending is the pending list a Finish leaves.
func (f *Finish) mergePending(prev []Pending) []Pending {
	var out []Pending
	if f.KeepPending {
		out = append(out, prev...)
	}
	out = append(out, f.Pending...)
	if f.MaxPending > 0 && len(out) > f.MaxPending {
		out = out[len(out)-f.MaxPending:]
	}
	return out
}

// keepSteps appends steps to done and keeps the newest keep.
func keepSteps(done, steps []Step, keep int) []Step {
	done = append(done, steps...)
	if keep > 0 && len(done) > keep {
		// A re-slice: append copies only the kept steps when it next grows the array.
		done = done[len(done)-keep:]
	}
	return done
}

// Store keeps the orchestrator's records: each session's task state, each turn's record (and a
// per-session index of them), the outbox of turn.finished events, cancellation requests, and
// the leases (session turns, outbox claims). Implementations are safe for concurrent use; every
// method is atomic.
type Store interface {
	// TaskState returns a session's task state; a session without one has an empty state.
	TaskState(ctx context.Context, sessionID string) (TaskState, error)
	// PutTurn stores a running turn's record, kept for ttl, so GetTurn, ListTurns and CancelTurn
	// find it on any replica.
	PutTurn(ctx context.Context, turn *orchestratorv1.Turn, ttl time.Duration) error
	// FinishTurn stores a finished turn in one write.
	FinishTurn(ctx context.Context, f *Finish) error
	// GetTurn returns a turn record or ErrNotFound.
	GetTurn(ctx context.Context, turnID string) (*orchestratorv1.Turn, error)
	// ListTurns returns up to limit of a session's turns, newest first, after the cursor (""
	// for the first page), with the cursor of the next page ("" at the end).
	ListTurns(ctx context.Context, sessionID, cursor string, limit int) ([]*orchestratorv1.Turn, string, error)
	// DeleteSession removes a session's task state.
	DeleteSession(ctx context.Context, sessionID string) error
	// Outbox returns up to limit events waiting to be published, oldest first.
	Outbox(ctx context.Context, limit int) ([]*eventsv1.TurnFinished, error)
	// DeleteOutbox removes a published event.
	DeleteOutbox(ctx context.Context, turnID string) error
	// RequestCancel records that a turn is to be cancelled, for ttl, and wakes the watchers of
	// cancelKey(turnID).
	RequestCancel(ctx context.Context, turnID, by, reason string, ttl time.Duration) error
	// CancelRequest returns who asked to cancel the turn and why; ok is false when nobody did.
	CancelRequest(ctx context.Context, turnID string) (by, reason string, ok bool, err error)
	// Leases holds session turn leases and outbox claims.
	Leases() lease.Store
	// OrphanedTurns returns up to limit ids of turns whose record is RUNNING while their
	// session's lease is not held by them: the orchestrator running them stopped. It is a hint;
	// InterruptTurn checks again.
	OrphanedTurns(ctx context.Context, limit int) ([]string, error)
	// InterruptTurn ends an orphaned turn: atomically, when the turn's record is still RUNNING
	// and its session's lease is not the turn's, it stores end(record) as FinishTurn does (its
	// Lease unused). It reports whether it did; of several callers at once, one does. A missing
	// record is ErrNotFound. A turn that lost its lease stores its own end through it too.
	InterruptTurn(ctx context.Context, turnID string, end func(*orchestratorv1.Turn) *Finish) (bool, error)
}

// Lease keys.
func sessionKey(sessionID string) string { return "session:" + sessionID }
func outboxKey(turnID string) string     { return "outbox:" + turnID }
func cancelKey(turnID string) string     { return "cancel:" + turnID }
