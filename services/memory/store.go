package memory

import (
	"context"
	"time"

	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// TierStore holds one tier's memories with their vectors, scoped by user: nothing a method does
// for one user reads or changes another user's memories. Implementations: RedisEpisodic,
// QdrantSemantic, and BoltStore's two tiers. One conformance suite (store_test.go) runs over
// all of them.
type TierStore interface {
	// Put inserts or replaces a memory (by user and id).
	Put(ctx context.Context, e Entry) error
	// Get returns one memory, or ErrNotFound.
	Get(ctx context.Context, userID, id string) (Entry, error)
	// Delete removes one memory and reports whether it existed.
	Delete(ctx context.Context, userID, id string) (bool, error)
	// Search returns the user's live memories that pass q's filters, best first. Hits may come
	// without their vectors.
	Search(ctx context.Context, userID string, q SearchQuery) ([]Hit, error)
	// Scan calls fn for every memory of the user, live or expired, in no particular order.
	Scan(ctx context.Context, userID string, fn func(Entry) error) error
	// BySubject returns the user's live memories of the given (normalised) subject.
	BySubject(ctx context.Context, userID, subject string) ([]Entry, error)
	// Touch records a recall of the memories that still exist: last_recalled_at = at and
	// recall_count + 1 (episodic memories also get their TTL renewed). A memory deleted or
	// moved meanwhile is not brought back. It returns the ids touched.
	Touch(ctx context.Context, userID string, ids []string, at time.Time) ([]string, error)
	// DeleteUser removes every memory of the user and counts them.
	DeleteUser(ctx context.Context, userID string) (UserCounts, error)
}

// SearchQuery is a Search: a lexical query, a dense one, or both, and filters.
//
// With a lexical query, memories are scored by BM25 (Σ query weight × IDF × the memory's term
// weight over the terms they share; IDF over the tier's statistics, see each backend) and
// those scoring at least MinLexical (and above zero) are ranked. With a dense vector, memories
// are ranked by cosine similarity at least MinSimilarity. With both, each ranking is cut at
// Limit and the two are fused by reciprocal rank fusion (rrfFuse); Similarity is then the
// fused score. An attribute lookup (AttributeKeys set, MinLexical ≤ 0) ranks every memory that
// carries a key, matching words or not.
type SearchQuery struct {
	// Vector is the dense query vector, unit length; nil for none.
	Vector []float32
	// MinSimilarity drops dense hits below it (raw cosine similarity).
	MinSimilarity float64
	// Lexical is the lexical query (lexQuery); empty for none.
	Lexical sparseVec
	// MinLexical drops lexical hits below this BM25 score.
	MinLexical float64
	// Limit is the most hits returned.
	Limit int
	// Types keeps only these types (empty keeps all).
	Types []memoryv1.MemoryType
	// UpdatedAfter drops memories not updated since, except facts; zero keeps all.
	UpdatedAfter time.Time
	// OccurredAfter and OccurredBefore keep memories that happened in [after, before); zero
	// leaves that side open.
	OccurredAfter, OccurredBefore time.Time
	// AttributeKeys keeps only memories that carry one of these attribute keys (empty keeps
	// all).
	AttributeKeys []string
	// ContextPool returns lexical hits below MinLexical too (any positive score), each with the
	// threshold in Floor, so that recall can admit a memory on its conversation context (see
	// contextBoost). Only for a lexical query without a vector.
	ContextPool bool
}

// Hit is a memory found by Search.
type Hit struct {
	Entry
	Similarity float64
	// Floor is the lexical threshold the search applied, MinLexical after the backend's cap
	// for users with few memories (lexicalFloor); set with ContextPool.
	Floor float64
}

// UserCounts are what DeleteUser removed.
type UserCounts struct {
	Live    int64
	Expired int64
}

// StateStore holds what is not a memory: behaviour counters, extraction (processed turn)
// records, the registry of users and the maintenance lock.
type StateStore interface {
	// AddUser records that a user has memories, so maintenance of all users finds them.
	AddUser(ctx context.Context, userID string) error
	// Users lists the users recorded by AddUser.
	Users(ctx context.Context) ([]string, error)
	// CountBehavior adds one event of key at time at, drops events older than window, and
	// returns the count. When the count is above threshold and no habit is recorded for the key,
	// exactly one caller gets claim = true and must then call SetHabit; habitID is the recorded
	// habit memory, if any.
	CountBehavior(ctx context.Context, userID, key string, at time.Time, window time.Duration, threshold int) (count int64, claim bool, habitID string, err error)
	// SetHabit records the habit memory of a key ("" releases a claim that failed).
	SetHabit(ctx context.Context, userID, key, memoryID string) error
	// ClaimTurn starts processing a turn: it returns the stored record when the turn was already
	// processed, busy when another worker holds it, or claims it for lease.
	ClaimTurn(ctx context.Context, userID, turnID string, lease time.Duration) (rec *TurnRecord, busy bool, token string, err error)
	// FinishTurn stores the record of a turn claimed with token, kept for ttl.
	FinishTurn(ctx context.Context, userID, turnID, token string, rec TurnRecord, ttl time.Duration) error
	// ReleaseTurn gives up a claim that failed, so a redelivery can try again.
	ReleaseTurn(ctx context.Context, userID, turnID, token string) error
	// Lock takes a named lock for ttl; ok is false when another holder has it.
	Lock(ctx context.Context, name string, ttl time.Duration) (unlock func(), ok bool, err error)
	// DeleteUser removes the user's counters, habits, turn records and registry entry.
	DeleteUser(ctx context.Context, userID string) (counters, records int64, err error)
}

// TurnRecord is what extraction stored for a processed turn.
type TurnRecord struct {
	// MemoryIDs are the memories written or updated.
	MemoryIDs []string `json:"memory_ids,omitempty"`
	// SupersededIDs are the memories the turn superseded.
	SupersededIDs []string `json:"superseded_ids,omitempty"`
	// Candidates is how many candidates the model proposed.
	Candidates int `json:"candidates"`
	// At is when the turn was processed.
	At time.Time `json:"at"`
}
