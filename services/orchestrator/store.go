package orchestrator

import (
	"context"
	"errors"
	"time"

	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// ErrNotFound is returned when a turn record does not exist (or has expired).
var ErrNotFound = errors.New("not found")

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

// Store keeps the orchestrator's records: each session's task state and each turn's record.
// Implementations are safe for concurrent use; every method is atomic.
type Store interface {
	// TaskState returns a session's task state; a session without one has an empty state.
	TaskState(ctx context.Context, sessionID string) (TaskState, error)
	// AddSteps appends done steps, keeping only the newest keep.
	AddSteps(ctx context.Context, sessionID string, steps []Step, keep int) error
	// SetPending replaces the pending list.
	SetPending(ctx context.Context, sessionID string, pending []Pending) error
	// PutTurn stores or replaces a turn record, kept for ttl.
	PutTurn(ctx context.Context, turn *orchestratorv1.Turn, ttl time.Duration) error
	// GetTurn returns a turn record or ErrNotFound.
	GetTurn(ctx context.Context, turnID string) (*orchestratorv1.Turn, error)
	// DeleteSession removes a session's task state.
	DeleteSession(ctx context.Context, sessionID string) error
	// LockSession takes a session's turn lease for holder (a turn id) for ttl, or extends it
	// when holder has it already, or reports the current holder. One turn runs per session at a time, whichever replica serves it: two
	// turns at once would interleave their messages in the log.
	LockSession(ctx context.Context, sessionID, holder string, ttl time.Duration) (acquired bool, current string, err error)
	// UnlockSession releases the lease if holder still has it.
	UnlockSession(ctx context.Context, sessionID, holder string) error
}
