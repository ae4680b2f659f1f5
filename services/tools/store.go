package tools

import (
	"context"
	"errors"
	"time"

	"github.com/hermes-agent/hermes/internal/lease"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// ErrNotFound is returned for a tool that is not registered.
var ErrNotFound = errors.New("tool not found")

// StoredTool is a registered tool with the hash of its normalized spec, which identifies the
// spec's content (compiled schemas are cached by it).
type StoredTool struct {
	Tool *toolsv1.Tool
	Hash string
}

// Store keeps the tool registry and the idempotency records, shared by every replica.
// Implementations must make each method atomic.
type Store interface {
	// PutTool stores t (its spec, source and schema_tokens) under t.Spec.Name. A new name gets
	// version 1; a different hash bumps the version; the same hash and source change nothing
	// (changed=false). It returns the tool as stored, with version and timestamps set.
	PutTool(ctx context.Context, t *toolsv1.Tool, hash string, now time.Time) (stored *toolsv1.Tool, changed bool, err error)
	// GetTool returns a tool, or ErrNotFound.
	GetTool(ctx context.Context, name string) (*StoredTool, error)
	// DeleteTool removes a tool, or returns ErrNotFound.
	DeleteTool(ctx context.Context, name string) error
	// ListTools returns every tool by name, with the registry revision they were read at.
	ListTools(ctx context.Context) ([]*StoredTool, int64, error)
	// Revision changes whenever the registry changes; caches compare it.
	Revision(ctx context.Context) (int64, error)

	// Leases holds the idempotency records: a lease per key while its call runs, completed
	// into the call's record.
	Leases() lease.Store
}
