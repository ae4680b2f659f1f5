package tools

import (
	"context"
	"fmt"
	"time"

	"github.com/hermes-agent/hermes/internal/errclass"
	"github.com/hermes-agent/hermes/internal/lease"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// ErrNotFound is returned for a tool that is not registered.
var ErrNotFound = errclass.New(errclass.NotFound, "tool not found", nil)

// OwnedError refuses to replace or remove a tool registered by another source: a name belongs
// to whoever registered it first (an API principal, an MCP server, the tools file, the builtins).
type OwnedError struct {
	Name, Source string
}

func (e *OwnedError) Error() string {
	return fmt.Sprintf("tool %q belongs to source %q", e.Name, e.Source)
}

// Is makes an OwnedError of class errclass.Denied.
func (e *OwnedError) Is(target error) bool { return target == errclass.Denied }

// Public says who owns the tool and who may replace it.
func (e *OwnedError) Public() string {
	if e.Source == SourceBuiltin {
		return fmt.Sprintf("%q is a builtin tool; builtins cannot be replaced or removed", e.Name)
	}
	return fmt.Sprintf("tool %q is registered by source %q; only an operator may replace or remove it", e.Name, e.Source)
}

// Sources the server sets itself: the builtins, which nothing replaces, and the tools file.
const (
	SourceBuiltin = "builtin"
	sourceFile    = "file"
)

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
	// (changed=false). A tool of another source is replaced only with replaceOthers, and a
	// builtin only by a builtin; otherwise the answer is an *OwnedError. It returns the tool as
	// stored, with version and timestamps set.
	PutTool(ctx context.Context, t *toolsv1.Tool, hash string, now time.Time, replaceOthers bool) (stored *toolsv1.Tool, changed bool, err error)
	// GetTool returns a tool, or ErrNotFound.
	GetTool(ctx context.Context, name string) (*StoredTool, error)
	// DeleteTool removes a tool, or returns ErrNotFound. With a source, only a tool of that
	// source is removed (an *OwnedError otherwise).
	DeleteTool(ctx context.Context, name, source string) error
	// ListTools returns every tool by name, with the registry revision they were read at.
	ListTools(ctx context.Context) ([]*StoredTool, int64, error)
	// Revision changes whenever the registry changes; caches compare it.
	Revision(ctx context.Context) (int64, error)

	// Leases holds the idempotency records: a lease per key while its call runs, completed
	// into the call's record.
	Leases() lease.Store
}
