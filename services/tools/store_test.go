package tools

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// TestStoreConformance runs one suite against every Store backend.
func TestStoreConformance(t *testing.T) {
	backends := map[string]func(t *testing.T) Store{
		"redis": func(t *testing.T) Store { return testRedisStore(t) },
		"bolt":  func(t *testing.T) Store { return testBoltStore(t) },
	}
	for name, open := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			t.Run("registry", func(t *testing.T) { testStoreRegistry(t, open(t)) })
			t.Run("idempotency records", func(t *testing.T) { testStoreIdempotencyRecords(t, open(t)) })
		})
	}
}

func storeTool(name, desc, source string) *toolsv1.Tool {
	return &toolsv1.Tool{
		Spec: &toolsv1.ToolSpec{
			Name: name, Description: desc, InputSchema: emptyObjectSchema,
			Groups:   []string{"g"},
			Executor: &toolsv1.ToolSpec_Builtin{Builtin: &toolsv1.BuiltinExecutor{Name: "calculator"}},
		},
		Source:       source,
		SchemaTokens: 42,
	}
}

func testStoreRegistry(t *testing.T, s Store) {
	ctx := context.Background()
	t0 := time.Unix(1_700_000_000, 0)

	if _, err := s.GetTool(ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetTool of a missing tool: %v, want ErrNotFound", err)
	}
	if err := s.DeleteTool(ctx, "nope", ""); !errors.Is(err, ErrNotFound) {
		t.Fatalf("DeleteTool of a missing tool: %v, want ErrNotFound", err)
	}
	rev0, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}

	steps := []struct {
		name        string
		tool        *toolsv1.Tool
		hash        string
		at          time.Time
		wantChanged bool
		wantVersion int64
		wantCreated time.Time
		wantUpdated time.Time
		wantSource  string
	}{
		{"new", storeTool("b", "one", "api"), "h1", t0, true, 1, t0, t0, "api"},
		{"same again", storeTool("b", "one", "api"), "h1", t0.Add(time.Second), false, 1, t0, t0, "api"},
		{"new spec", storeTool("b", "two", "api"), "h2", t0.Add(2 * time.Second), true, 2, t0, t0.Add(2 * time.Second), "api"},
		{"same spec, other source", storeTool("b", "two", "file"), "h2", t0.Add(3 * time.Second), true, 2, t0, t0.Add(3 * time.Second), "file"},
		{"other tool", storeTool("a", "x", "api"), "h3", t0, true, 1, t0, t0, "api"},
	}
	for _, st := range steps {
		got, changed, err := s.PutTool(ctx, st.tool, st.hash, st.at, true)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if changed != st.wantChanged || got.GetVersion() != st.wantVersion || got.GetSource() != st.wantSource ||
			!got.GetCreatedAt().AsTime().Equal(st.wantCreated) || !got.GetUpdatedAt().AsTime().Equal(st.wantUpdated) {
			t.Errorf("%s: changed=%v version=%d source=%s created=%v updated=%v; want %v %d %s %v %v", st.name,
				changed, got.GetVersion(), got.GetSource(), got.GetCreatedAt().AsTime(), got.GetUpdatedAt().AsTime(),
				st.wantChanged, st.wantVersion, st.wantSource, st.wantCreated, st.wantUpdated)
		}
		stored, err := s.GetTool(ctx, st.tool.GetSpec().GetName())
		if err != nil {
			t.Fatalf("%s: get: %v", st.name, err)
		}
		if diff := cmp.Diff(got, stored.Tool, protocmp.Transform()); diff != "" {
			t.Errorf("%s: PutTool returned something else than GetTool reads (-put +get):\n%s", st.name, diff)
		}
		if stored.Hash != st.hash {
			t.Errorf("%s: hash %q, want %q", st.name, stored.Hash, st.hash)
		}
	}
	b, _ := s.GetTool(ctx, "b")
	if diff := cmp.Diff(storeTool("b", "two", "file").GetSpec(), b.Tool.GetSpec(), protocmp.Transform()); diff != "" {
		t.Errorf("stored spec (-want +got):\n%s", diff)
	}
	if b.Tool.GetSchemaTokens() != 42 {
		t.Errorf("schema tokens %d, want 42", b.Tool.GetSchemaTokens())
	}

	list, rev, err := s.ListTools(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, st := range list {
		names = append(names, st.Tool.GetSpec().GetName())
	}
	if diff := cmp.Diff([]string{"a", "b"}, names); diff != "" {
		t.Errorf("ListTools names (-want +got):\n%s", diff)
	}
	// Four changes so far (the repeated put changed nothing).
	if rev-rev0 != 4 {
		t.Errorf("revision moved by %d, want 4", rev-rev0)
	}
	// A name belongs to its source: another source replaces or removes it only when allowed to,
	// and a builtin never; nothing changes when refused.
	var owned *OwnedError
	if _, _, err := s.PutTool(ctx, storeTool("a", "x2", "mcp:evil"), "h9", t0, false); !errors.As(err, &owned) || owned.Source != "api" {
		t.Errorf("PutTool over another source: %v, want OwnedError of api", err)
	}
	if err := s.DeleteTool(ctx, "a", "mcp:evil"); !errors.As(err, &owned) || owned.Source != "api" {
		t.Errorf("DeleteTool of another source: %v, want OwnedError of api", err)
	}
	if _, _, err := s.PutTool(ctx, storeTool("calc", "c", SourceBuiltin), "hb", t0, true); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.PutTool(ctx, storeTool("calc", "evil", "api"), "he", t0, true); !errors.As(err, &owned) || owned.Source != SourceBuiltin {
		t.Errorf("PutTool over a builtin: %v, want OwnedError of builtin", err)
	}
	if err := s.DeleteTool(ctx, "calc", SourceBuiltin); err != nil {
		t.Fatal(err)
	}
	if rev1, _ := s.Revision(ctx); rev1 != rev+2 {
		t.Errorf("revision after refused changes moved by %d, want 2 (the builtin's put and delete)", rev1-rev)
	}
	rev, _ = s.Revision(ctx)
	if err := s.DeleteTool(ctx, "a", "api"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTool(ctx, "a"); !errors.Is(err, ErrNotFound) {
		t.Errorf("deleted tool still readable: %v", err)
	}
	rev2, _ := s.Revision(ctx)
	if rev2 != rev+1 {
		t.Errorf("revision after delete %d, want %d", rev2, rev+1)
	}
	list, _, _ = s.ListTools(ctx)
	if len(list) != 1 || list[0].Tool.GetSpec().GetName() != "b" {
		t.Errorf("after delete, list has %d tools", len(list))
	}
	// A name registered again after deletion starts over at version 1.
	got, _, err := s.PutTool(ctx, storeTool("a", "y", "api"), "h4", t0, false)
	if err != nil || got.GetVersion() != 1 {
		t.Errorf("re-registered after delete: version %d err %v, want 1", got.GetVersion(), err)
	}
}

// testStoreIdempotencyRecords checks the records through the store's leases: the first claim
// owns the key, a finished call's result is found by the next claim with the same arguments,
// other arguments conflict, and a released claim frees the key.
func testStoreIdempotencyRecords(t *testing.T, s Store) {
	ctx := context.Background()
	d := newIdempotency(s.Leases(), time.Hour, slog.Default())
	owner, c, err := d.claim(ctx, "k1", "args1")
	if err != nil || owner == "" || c.State != CallOwned {
		t.Fatalf("first claim: %q %+v %v", owner, c, err)
	}
	res := &toolsv1.ToolResult{Success: true, Output: `{"paid":true}`}
	d.finish("k1", owner, res, true)
	_, c, err = d.claim(ctx, "k1", "args1")
	if err != nil || c.State != CallDone || c.ArgsHash != "args1" {
		t.Fatalf("claim after the record: %+v %v", c, err)
	}
	got := &toolsv1.ToolResult{}
	if err := proto.Unmarshal(c.Result, got); err != nil || !proto.Equal(got, res) {
		t.Errorf("recorded result %v (%v), want %v", got, err, res)
	}
	if _, c, _ := d.claim(ctx, "k1", "args2"); c.ArgsHash != "args1" {
		t.Errorf("claim with other arguments: %+v, want the first call's hash", c)
	}
	owner, _, _ = d.claim(ctx, "k2", "a")
	d.finish("k2", owner, nil, false)
	if o, c, _ := d.claim(ctx, "k2", "a"); o == "" || c.State != CallOwned {
		t.Errorf("a released key is not free: %+v", c)
	}
	if n := d.pending(); n != 1 {
		t.Errorf("%d claims pending, want 1 (k2)", n)
	}
}

// TestBoltSharedGetFollowsWrites checks that the decoded records ExecuteTool reuses are never
// stale: after each write (new spec, same spec from another source, deletion, a new tool under
// the old name) the shared read equals a fresh GetTool, and an unchanged record is not decoded
// again.
func TestBoltSharedGetFollowsWrites(t *testing.T) {
	ctx := context.Background()
	s := testBoltStore(t)
	t0 := time.Unix(1_700_000_000, 0)
	descs := []string{"weather in Berlin", "北京的天气", "weather in Berlin", "查询航班"}
	for i, desc := range descs {
		at := t0.Add(time.Duration(i) * time.Second)
		if _, _, err := s.PutTool(ctx, storeTool("w", desc, "api"), "h-"+desc, at, true); err != nil {
			t.Fatal(err)
		}
		for _, src := range []string{"api", "file"} {
			if i == 2 && src == "file" {
				if _, _, err := s.PutTool(ctx, storeTool("w", desc, src), "h-"+desc, at.Add(time.Millisecond), true); err != nil {
					t.Fatal(err)
				}
			}
			shared, err := s.getToolShared(ctx, "w")
			if err != nil {
				t.Fatal(err)
			}
			fresh, err := s.GetTool(ctx, "w")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(fresh, shared, protocmp.Transform(), cmp.AllowUnexported(StoredTool{})); diff != "" {
				t.Fatalf("write %d (%s): the shared read is stale (-fresh +shared):\n%s", i, src, diff)
			}
			again, _ := s.getToolShared(ctx, "w")
			if again != shared {
				t.Errorf("write %d: an unchanged record was decoded again", i)
			}
		}
	}
	// Readers racing the writes: once a write has returned, no read sees the record before it.
	var written atomic.Int64 // the last description index whose PutTool returned
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				floor := written.Load()
				st, err := s.getToolShared(ctx, "w")
				if err != nil {
					t.Error(err)
					return
				}
				if got := st.Tool.GetSpec().GetDescription(); got < fmt.Sprintf("v%03d", floor) {
					t.Errorf("read %q after v%03d was written", got, floor)
					return
				}
			}
		}()
	}
	for i := range 200 {
		if _, _, err := s.PutTool(ctx, storeTool("w", fmt.Sprintf("v%03d", i), "api"), fmt.Sprintf("hv%03d", i), t0.Add(time.Hour+time.Duration(i)*time.Second), true); err != nil {
			t.Fatal(err)
		}
		written.Store(int64(i))
	}
	close(stop)
	wg.Wait()
	if err := s.DeleteTool(ctx, "w", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := s.getToolShared(ctx, "w"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("shared read of a deleted tool: %v, want ErrNotFound", err)
	}
}
