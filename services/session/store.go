package session

import (
	"context"
	"fmt"

	"github.com/hermes-agent/hermes/internal/errclass"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
)

// Errors a Store returns, each of its errclass class so that rpc.Classify answers with its code
// and message; backend failures are marked errclass.Unavailable where the store meets Redis.
var (
	ErrNotFound = errclass.New(errclass.NotFound, "session not found", nil)
	// ErrConflict: the expected last seq did not match.
	ErrConflict = errclass.New(errclass.Precondition, "session changed concurrently", nil)
	// ErrSummaryBehind: an update covers less than the stored summary.
	ErrSummaryBehind = errclass.New(errclass.Precondition, "summary not updated: it covers less than the stored one", nil)
	// ErrSummaryAhead: an update claims to cover messages that do not exist.
	ErrSummaryAhead = errclass.New(errclass.Precondition, "summary not updated: it covers messages that do not exist", nil)
	// ErrBadCursor is returned for a page token the store did not issue.
	ErrBadCursor = errclass.New(errclass.Invalid, "page_token is not valid: pass the next_page_token of a previous call", nil)
)

// summaryBehind is ErrSummaryBehind with the seq the stored summary covers.
func summaryBehind(stored int64) error {
	return errclass.New(errclass.Precondition, fmt.Sprintf("summary not updated: the stored summary covers through seq %d", stored), ErrSummaryBehind)
}

// summaryAhead is ErrSummaryAhead with the session's last seq.
func summaryAhead(last int64) error {
	return errclass.New(errclass.Precondition, fmt.Sprintf("summary not updated: the session's last seq is %d", last), ErrSummaryAhead)
}

// ConflictError reports the actual last seq on ErrConflict.
type ConflictError struct {
	Expected, Actual int64
}

func (e *ConflictError) Error() string {
	return "session changed concurrently"
}

// Unwrap makes errors.Is(err, ErrConflict) hold, and with it errclass.Precondition.
func (e *ConflictError) Unwrap() error { return ErrConflict }

// Public tells the caller both sequence numbers, so it knows what to read before retrying.
func (e *ConflictError) Public() string {
	return fmt.Sprintf("expected_last_seq is %d but the session's last seq is %d: another writer appended first; read the new messages and retry", e.Expected, e.Actual)
}

// Store keeps sessions and their append-only logs. Messages are stored as they arrive and never
// changed; seq numbers are dense per session, starting at 1. Implementations must make Append
// atomic: all messages of a batch are stored, or none is.
type Store interface {
	// CreateSession stores a new session (identity, config, zero state).
	CreateSession(ctx context.Context, s *sessionv1.Session) error
	// GetSession returns a session with its current state, or ErrNotFound.
	GetSession(ctx context.Context, id string) (*sessionv1.Session, error)
	// ListSessions returns up to limit sessions of a user, most recently active first, starting
	// after the cursor ("" for the first page), with the cursor of the next page ("" at the end).
	ListSessions(ctx context.Context, userID, cursor string, limit int) ([]*sessionv1.Session, string, error)
	// DeleteSession removes a session of userID, its messages, its summary and its search
	// entries, and returns the number of messages removed, or ErrNotFound.
	DeleteSession(ctx context.Context, userID, id string) (int64, error)
	// Append stores a batch atomically in a session of userID. Messages must have ids, created_at, token counts and
	// search terms set; Append assigns their seq. A message whose client_id is already stored
	// is not appended again; its stored copy is returned in its place. When expectedLastSeq is
	// set and new messages would be appended, the session's last seq must equal it, else a
	// *ConflictError and nothing changes.
	Append(ctx context.Context, userID, sessionID string, batch []AppendItem, expectedLastSeq *int64) (*AppendResult, error)
	// ListMessages returns up to limit messages with seq > afterSeq in seq order.
	ListMessages(ctx context.Context, sessionID string, afterSeq int64, limit int) ([]*sessionv1.Message, error)
	// LoadContext returns what BuildContext needs, reading only the window's share of the log.
	LoadContext(ctx context.Context, sessionID string, turns, maxEvicted int) (*ContextData, error)
	// AppendLoad is Append followed by LoadContext, the way AppendMessages with build_context
	// needs them, in one round trip where the backend allows. The context is loaded only when
	// the append succeeded, and includes the batch.
	AppendLoad(ctx context.Context, userID, sessionID string, batch []AppendItem, expectedLastSeq *int64, turns, maxEvicted int) (*AppendResult, *ContextData, error)
	// UpdateSummary stores a summary covering messages up to throughSeq and returns the seq the
	// previous one covered: ErrSummaryBehind when throughSeq is below it, ErrSummaryAhead when
	// above the last seq.
	UpdateSummary(ctx context.Context, sessionID string, sum *Summary) (previous int64, err error)
	// Search returns the user's messages that contain every term, newest first, at most limit,
	// optionally only in one session, each with up to neighbors messages on each side.
	Search(ctx context.Context, userID string, terms []string, sessionID string, neighbors, limit int) ([]*SearchResult, error)
}

// AppendItem is one message to append, with what the store indexes of it.
type AppendItem struct {
	Message *sessionv1.Message
	// Terms are the search terms of the message's text.
	Terms []string
}

// AppendResult is what Append did.
type AppendResult struct {
	// Messages in batch order, with seq set; deduplicated ones are the stored copies.
	Messages []*sessionv1.Message
	// Deduplicated counts messages that were already stored.
	Deduplicated int
	// State is the session's state after the append.
	State *sessionv1.SessionState
}

// Summary is the rolling summary of a session.
type Summary struct {
	Content    string
	ThroughSeq int64
	TokenCount int32
	// UpdatedAtUnixMilli is when it was stored.
	UpdatedAtUnixMilli int64
}

// ContextData is the raw material of a context: the session's last turns, the sticky messages
// before them, and the messages between the summary and the window.
type ContextData struct {
	Session *sessionv1.Session
	// Summary is the stored summary, nil when there is none.
	Summary *Summary
	// Window holds every message from the start of the turns-th last turn to the end of the log
	// (the whole log when it has fewer turns). Messages before the first user message count
	// as part of the first turn.
	Window []*sessionv1.Message
	// Sticky holds the sticky messages with seq below Window's first, in seq order.
	Sticky []*sessionv1.Message
	// Evicted holds, oldest first, at most maxEvicted messages with a seq above the summary's
	// and below Window's first.
	Evicted []*sessionv1.Message
	// EvictedMore is true when more such messages exist than Evicted holds.
	EvictedMore bool
}

// SearchResult is one hit of Search.
type SearchResult struct {
	SessionID string
	Message   *sessionv1.Message
	Before    []*sessionv1.Message
	After     []*sessionv1.Message
	// Matched is the number of distinct query terms in the message.
	Matched int
}
