package mcpgateway

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// lockedBuffer is a log sink safe for concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// A stored server this replica refuses (here a stdio command off its allowlist) is warned about
// once per back-off step, not at every sync; a changed spec is tried at once.
func TestRejectedStoredServerWarnsWithBackoff(t *testing.T) {
	store, err := OpenBoltServerStore(filepath.Join(t.TempDir(), "gw.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	ctx := context.Background()
	spec := &pb.ServerSpec{Name: "shell", Prefix: "sh", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{Command: "/bin/sh"}}}
	if err := store.CreateServer(ctx, spec); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	g := New(testConfig(), Options{Store: store, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(g.Close)
	const warning = "stored MCP server not connected"

	for range 5 {
		if err := g.syncStore(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := logs.count(warning); n != 1 {
		t.Fatalf("%d warnings after 5 syncs, want 1", n)
	}
	if !strings.Contains(logs.b.String(), "mcpgateway.stdio-allow") {
		t.Errorf("the warning does not say why: %s", logs.b.String())
	}
	first := g.rejected["shell"].next.Sub(time.Now())
	if first < 5*time.Second {
		t.Errorf("next try in %s, want the back-off's first step", first)
	}

	// The back-off passes: tried again, warned again, and the next pause is longer.
	g.rejected["shell"].next = time.Now().Add(-time.Millisecond)
	if err := g.syncStore(ctx); err != nil {
		t.Fatal(err)
	}
	if n := logs.count(warning); n != 2 || logs.count("failures=2") != 1 {
		t.Fatalf("%d warnings after the back-off passed, want 2 (the second with failures=2)", n)
	}
	if second := g.rejected["shell"].next.Sub(time.Now()); second <= first {
		t.Errorf("second pause %s is not longer than the first %s", second, first)
	}

	// The operator changes the spec: tried at the next sync.
	if err := store.DeleteServer(ctx, "shell"); err != nil {
		t.Fatal(err)
	}
	spec.GetStdio().Args = []string{"-c", "true"}
	if err := store.CreateServer(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := g.syncStore(ctx); err != nil {
		t.Fatal(err)
	}
	if n := logs.count(warning); n != 3 || logs.count("failures=1") != 2 {
		t.Errorf("%d warnings after the spec changed, want 3 (a fresh failures=1)", n)
	}

	// Removed from the store: forgotten.
	if err := store.DeleteServer(ctx, "shell"); err != nil {
		t.Fatal(err)
	}
	if err := g.syncStore(ctx); err != nil {
		t.Fatal(err)
	}
	if len(g.rejected) != 0 {
		t.Errorf("rejections kept for removed servers: %v", g.rejected)
	}
}
