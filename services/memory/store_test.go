package memory

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/qdrant/go-client/qdrant"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/hermes-agent/hermes/internal/qdranttest"
	"github.com/hermes-agent/hermes/internal/testenv"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

const testDim = 64

// testQdrant returns a client of a real Qdrant (HERMES_TEST_QDRANT_ADDR) or of the test double,
// and a fresh collection name.
func testQdrant(t testing.TB) (*qdrant.Client, string) {
	t.Helper()
	addr := qdranttest.Addr(t)
	host, port := splitHostPort(t, addr)
	c, err := qdrant.NewClient(&qdrant.Config{Host: host, Port: port, SkipCompatibilityCheck: true, PoolSize: 1})
	if err != nil {
		t.Fatalf("qdrant client: %v", err)
	}
	coll := "test_" + randomToken()
	t.Cleanup(func() {
		_ = c.DeleteCollection(context.Background(), coll)
		_ = c.Close()
	})
	return c, coll
}

func splitHostPort(t testing.TB, addr string) (string, int) {
	t.Helper()
	host, port, err := parseHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return host, port
}

// tierBackend is one TierStore implementation under test, with a clock the test can move for
// stores that keep one.
type tierBackend struct {
	name   string
	new    func(t *testing.T, ttl time.Duration) TierStore
	hasTTL bool // the store gives memories a TTL (episodic tiers)
	// newClocked, for stores that read their clock (not Redis, whose TTLs are the server's),
	// opens one on a clock the test moves.
	newClocked func(t *testing.T, ttl time.Duration, now func() time.Time) TierStore
	semOnly    bool
}

func tierBackends() []tierBackend {
	return []tierBackend{
		{name: "bolt-episodic", hasTTL: true, new: func(t *testing.T, ttl time.Duration) TierStore {
			s := openTestBolt(t, ttl)
			return s.Episodic()
		}, newClocked: func(t *testing.T, ttl time.Duration, now func() time.Time) TierStore {
			s, err := OpenBoltStore(filepath.Join(t.TempDir(), "memory.db"), BoltOptions{EpisodicTTL: ttl, Embedder: "test", Dimension: testDim, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s.Episodic()
		}},
		{name: "bolt-semantic", new: func(t *testing.T, ttl time.Duration) TierStore {
			return openTestBolt(t, ttl).Semantic()
		}},
		{name: "redis-episodic", hasTTL: true, new: func(t *testing.T, ttl time.Duration) TierStore {
			rdb, prefix := testenv.Redis(t)
			return NewRedisEpisodic(rdb, prefix, ttl, testDim)
		}},
		{name: "qdrant-semantic", new: func(t *testing.T, _ time.Duration) TierStore {
			c, coll := testQdrant(t)
			s, err := NewQdrantSemantic(context.Background(), c, coll, testDim)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}},
	}
}

func openTestBolt(t testing.TB, ttl time.Duration) *BoltStore {
	t.Helper()
	s, err := OpenBoltStore(filepath.Join(t.TempDir(), "memory.db"), BoltOptions{EpisodicTTL: ttl, Embedder: "test", Dimension: testDim})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// vecOf is a unit vector pointing mostly along axis i, slightly along j.
func vecOf(i, j int, w float32) []float32 {
	v := make([]float32, testDim)
	v[i%testDim] = 1
	v[j%testDim] += w
	return normalize(v)
}

func testMemory(user, id string, typ memoryv1.MemoryType, content string, updated time.Time) *memoryv1.Memory {
	return &memoryv1.Memory{
		Id: id, UserId: user, Type: typ, Content: content, Confidence: 0.9,
		Source: memoryv1.Source_SOURCE_EXPLICIT, CreatedAt: ts(updated), UpdatedAt: ts(updated),
		Attributes: map[string]string{}, Subject: "",
	}
}

func hitIDs(hits []Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Memory.GetId()
	}
	return out
}

// TestTierStoreConformance runs one suite over every TierStore backend.
func TestTierStoreConformance(t *testing.T) {
	for _, b := range tierBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := b.new(t, time.Hour)
			now := time.Now()
			idA, idB, idC, idD, idOther := newID(), newID(), newID(), newID(), newID()
			mA := testMemory("alice", idA, memoryv1.MemoryType_MEMORY_TYPE_PREFERENCE, "likes tea", now)
			mA.Attributes = map[string]string{"drink": "tea"}
			mA.Subject = "drink"
			mB := testMemory("alice", idB, memoryv1.MemoryType_MEMORY_TYPE_FACT, "old fact", now.Add(-90*24*time.Hour))
			mC := testMemory("alice", idC, memoryv1.MemoryType_MEMORY_TYPE_EVENT, "old event", now.Add(-90*24*time.Hour))
			mD := testMemory("alice", idD, memoryv1.MemoryType_MEMORY_TYPE_PREFERENCE, "expired pref", now)
			mD.ExpiredAt = ts(now)
			mD.SupersededBy = idA
			mD.Subject = "drink"
			mOther := testMemory("bob", idOther, memoryv1.MemoryType_MEMORY_TYPE_PREFERENCE, "bob likes tea", now)
			for _, e := range []Entry{
				{mA, vecOf(1, 2, 0.1)}, {mB, vecOf(1, 3, 0.3)}, {mC, vecOf(1, 4, 0.5)}, {mD, vecOf(1, 2, 0.1)}, {mOther, vecOf(1, 2, 0.1)},
			} {
				if err := s.Put(ctx, e); err != nil {
					t.Fatalf("put: %v", err)
				}
			}

			t.Run("get returns what was put", func(t *testing.T) {
				got, err := s.Get(ctx, "alice", idA)
				if err != nil {
					t.Fatal(err)
				}
				want := cloneMemory(mA)
				if d := cmp.Diff(want, got.Memory, protocmp.Transform(), protocmp.IgnoreFields(&memoryv1.Memory{}, "expires_at")); d != "" {
					t.Errorf("memory (-want +got):\n%s", d)
				}
				if c := cosine(got.Vector, vecOf(1, 2, 0.1)); c < 0.999 {
					t.Errorf("vector cosine to the original = %v", c)
				}
				if b.hasTTL != (got.Memory.GetExpiresAt() != nil) {
					t.Errorf("expires_at = %v, want set only for a tier with TTL", got.Memory.GetExpiresAt())
				}
			})
			t.Run("another user's id is not found", func(t *testing.T) {
				if _, err := s.Get(ctx, "alice", idOther); !errors.Is(err, ErrNotFound) {
					t.Errorf("get bob's memory as alice: %v, want ErrNotFound", err)
				}
				if ok, err := s.Delete(ctx, "alice", idOther); err != nil || ok {
					t.Errorf("delete bob's memory as alice = %v, %v; want false", ok, err)
				}
				if _, err := s.Get(ctx, "bob", idOther); err != nil {
					t.Errorf("bob's memory after alice's delete: %v", err)
				}
			})
			tests := []struct {
				name string
				q    SearchQuery
				want []string
			}{
				{"best first, live only, user only", SearchQuery{Vector: vecOf(1, 2, 0.1), MinSimilarity: 0, Limit: 10}, []string{idA, idB, idC}},
				{"limit", SearchQuery{Vector: vecOf(1, 2, 0.1), MinSimilarity: 0, Limit: 1}, []string{idA}},
				{"threshold", SearchQuery{Vector: vecOf(1, 2, 0.1), MinSimilarity: 0.95, Limit: 10}, []string{idA, idB}},
				{"types", SearchQuery{Vector: vecOf(1, 2, 0.1), Limit: 10, Types: []memoryv1.MemoryType{memoryv1.MemoryType_MEMORY_TYPE_EVENT}}, []string{idC}},
				{"age keeps facts", SearchQuery{Vector: vecOf(1, 2, 0.1), Limit: 10, UpdatedAfter: now.Add(-30 * 24 * time.Hour)}, []string{idA, idB}},
				{"attribute keys", SearchQuery{Vector: vecOf(9, 9, 0), MinSimilarity: -1, Limit: 10, AttributeKeys: []string{"drink"}}, []string{idA}},
				{"nothing similar", SearchQuery{Vector: vecOf(20, 21, 0.1), MinSimilarity: 0.5, Limit: 10}, []string{}},
			}
			for _, tc := range tests {
				t.Run("search "+tc.name, func(t *testing.T) {
					hits, err := s.Search(ctx, "alice", tc.q)
					if err != nil {
						t.Fatal(err)
					}
					if d := cmp.Diff(tc.want, hitIDs(hits)); d != "" {
						t.Errorf("ids (-want +got):\n%s", d)
					}
					for i := 1; i < len(hits); i++ {
						if hits[i].Similarity > hits[i-1].Similarity {
							t.Errorf("hits not ordered by similarity: %v", hits)
						}
					}
				})
			}
			t.Run("lexical search ranks by shared words", func(t *testing.T) {
				hits, err := s.Search(ctx, "alice", SearchQuery{Lexical: lexQuery("does she like tea or coffee"), MinLexical: 1e-9, Limit: 10})
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff([]string{idA}, hitIDs(hits)); d != "" {
					t.Errorf("ids (-want +got):\n%s", d)
				}
				hits, _ = s.Search(ctx, "alice", SearchQuery{Lexical: lexQuery("fact event"), MinLexical: 1e-9, Limit: 10})
				got := hitIDs(hits)
				sort.Strings(got)
				want := []string{idB, idC}
				sort.Strings(want)
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("ids (-want +got):\n%s", d)
				}
				hits, _ = s.Search(ctx, "alice", SearchQuery{Lexical: lexQuery("zebra"), MinLexical: 0, Limit: 10})
				if len(hits) != 0 {
					t.Errorf("a word no memory has found %v", hitIDs(hits))
				}
				hits, _ = s.Search(ctx, "alice", SearchQuery{Lexical: lexQuery("zebra"), Limit: 10, AttributeKeys: []string{"drink"}})
				if d := cmp.Diff([]string{idA}, hitIDs(hits)); d != "" {
					t.Errorf("attribute lookup ids (-want +got):\n%s", d)
				}
			})
			t.Run("a context pool returns hits under the threshold with it", func(t *testing.T) {
				q := SearchQuery{Lexical: lexQuery("old fact event likes tea"), MinLexical: 1000, Limit: 10}
				above, err := s.Search(ctx, "alice", q)
				if err != nil {
					t.Fatal(err)
				}
				q.ContextPool = true
				pool, err := s.Search(ctx, "alice", q)
				if err != nil {
					t.Fatal(err)
				}
				got := hitIDs(pool)
				sort.Strings(got)
				want := []string{idA, idB, idC}
				sort.Strings(want)
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("pool ids (-want +got):\n%s", d)
				}
				// The threshold (capped for a user with few memories, see lexicalFloor) comes
				// with each hit, and the hits at or above it are what the plain search returns.
				var passed []string
				for _, h := range pool {
					if h.Floor <= 0 || h.Floor > 1000 {
						t.Errorf("%s: floor %v", h.Memory.GetId(), h.Floor)
					}
					if h.Similarity >= h.Floor {
						passed = append(passed, h.Memory.GetId())
					}
				}
				if d := cmp.Diff(hitIDs(above), passed, cmpopts.EquateEmpty()); d != "" {
					t.Errorf("hits at or above the floor (-plain search +pool):\n%s", d)
				}
			})
			t.Run("hybrid search fuses both rankings", func(t *testing.T) {
				hits, err := s.Search(ctx, "alice", SearchQuery{Vector: vecOf(1, 4, 0.5), MinSimilarity: 0, Lexical: lexQuery("tea"), MinLexical: 1e-9, Limit: 10})
				if err != nil {
					t.Fatal(err)
				}
				// tea: A only; the vector: C, then B, then A. A is in both lists.
				if d := cmp.Diff([]string{idA, idC, idB}, hitIDs(hits)); d != "" {
					t.Errorf("ids (-want +got):\n%s", d)
				}
			})
			t.Run("by subject is live only", func(t *testing.T) {
				got, err := s.BySubject(ctx, "alice", "drink")
				if err != nil {
					t.Fatal(err)
				}
				ids := []string{}
				for _, e := range got {
					ids = append(ids, e.Memory.GetId())
				}
				if d := cmp.Diff([]string{idA}, ids); d != "" {
					t.Errorf("ids (-want +got):\n%s", d)
				}
			})
			t.Run("scan includes expired, not other users", func(t *testing.T) {
				var ids []string
				if err := s.Scan(ctx, "alice", func(e Entry) error { ids = append(ids, e.Memory.GetId()); return nil }); err != nil {
					t.Fatal(err)
				}
				sort.Strings(ids)
				want := []string{idA, idB, idC, idD}
				sort.Strings(want)
				if d := cmp.Diff(want, ids); d != "" {
					t.Errorf("ids (-want +got):\n%s", d)
				}
			})
			t.Run("touch counts recalls and skips missing", func(t *testing.T) {
				at := now.Add(time.Minute).Truncate(time.Millisecond)
				missing := newID()
				got, err := s.Touch(ctx, "alice", []string{idA, missing, idOther}, at)
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff([]string{idA}, got); d != "" {
					t.Errorf("touched (-want +got):\n%s", d)
				}
				if _, err := s.Touch(ctx, "alice", []string{idA}, at); err != nil {
					t.Fatal(err)
				}
				e, err := s.Get(ctx, "alice", idA)
				if err != nil {
					t.Fatal(err)
				}
				if e.Memory.GetRecallCount() != 2 || !e.Memory.GetLastRecalledAt().AsTime().Equal(at) {
					t.Errorf("after two touches: count %d, last %v", e.Memory.GetRecallCount(), e.Memory.GetLastRecalledAt().AsTime())
				}
				if _, err := s.Get(ctx, "alice", missing); !errors.Is(err, ErrNotFound) {
					t.Errorf("touch brought a missing memory into being: %v", err)
				}
				if e, _ := s.Get(ctx, "bob", idOther); e.Memory.GetRecallCount() != 0 {
					t.Errorf("alice's touch changed bob's memory")
				}
			})
			t.Run("put replaces", func(t *testing.T) {
				m := cloneMemory(mC)
				m.Content = "replaced event"
				if err := s.Put(ctx, Entry{m, vecOf(1, 4, 0.5)}); err != nil {
					t.Fatal(err)
				}
				e, err := s.Get(ctx, "alice", idC)
				if err != nil || e.Memory.GetContent() != "replaced event" {
					t.Errorf("after replace: %v, %v", e.Memory.GetContent(), err)
				}
			})
			t.Run("delete", func(t *testing.T) {
				ok, err := s.Delete(ctx, "alice", idC)
				if err != nil || !ok {
					t.Fatalf("delete = %v, %v", ok, err)
				}
				if _, err := s.Get(ctx, "alice", idC); !errors.Is(err, ErrNotFound) {
					t.Errorf("get after delete: %v", err)
				}
				hits, _ := s.Search(ctx, "alice", SearchQuery{Vector: vecOf(1, 4, 0.5), Limit: 10})
				for _, h := range hits {
					if h.Memory.GetId() == idC {
						t.Errorf("search found a deleted memory")
					}
				}
			})
			t.Run("delete user counts and leaves nothing", func(t *testing.T) {
				c, err := s.DeleteUser(ctx, "alice")
				if err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(UserCounts{Live: 2, Expired: 1}, c); d != "" {
					t.Errorf("counts (-want +got):\n%s", d)
				}
				n := 0
				_ = s.Scan(ctx, "alice", func(Entry) error { n++; return nil })
				hits, _ := s.Search(ctx, "alice", SearchQuery{Vector: vecOf(1, 2, 0.1), MinSimilarity: -1, Limit: 10})
				if n != 0 || len(hits) != 0 {
					t.Errorf("after delete user: %d scanned, %d found", n, len(hits))
				}
				if _, err := s.Get(ctx, "bob", idOther); err != nil {
					t.Errorf("bob's memory after alice's deletion: %v", err)
				}
			})
			t.Run("vector of another dimension is refused", func(t *testing.T) {
				m := testMemory("alice", newID(), memoryv1.MemoryType_MEMORY_TYPE_FACT, "x", now)
				if err := s.Put(ctx, Entry{m, make([]float32, testDim+1)}); err == nil {
					t.Errorf("put with a wrong dimension succeeded")
				}
			})
		})
	}
}

// TestEpisodicTTL: a memory is gone once its TTL passes. Stores with their own clock are moved
// past it; Redis expires keys by its own clock, so the test waits (polling) for that, with a TTL
// long enough that the put and the first get fit in it on a loaded machine.
func TestEpisodicTTL(t *testing.T) {
	for _, b := range tierBackends() {
		if !b.hasTTL {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const ttl = 3 * time.Second
			clock := &fakeClock{t: time.Now()}
			var s TierStore
			if b.newClocked != nil {
				s = b.newClocked(t, ttl, clock.Now)
			} else {
				s = b.new(t, ttl)
			}
			m := testMemory("carol", newID(), memoryv1.MemoryType_MEMORY_TYPE_EVENT, "short lived", time.Now())
			if err := s.Put(ctx, Entry{m, vecOf(1, 2, 0)}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Get(ctx, "carol", m.GetId()); err != nil {
				t.Fatalf("fresh memory: %v", err)
			}
			gone := func() bool {
				_, err := s.Get(ctx, "carol", m.GetId())
				return errors.Is(err, ErrNotFound)
			}
			if b.newClocked != nil {
				clock.Set(clock.Now().Add(ttl - time.Millisecond))
				if gone() {
					t.Fatalf("gone before its TTL")
				}
				clock.Set(clock.Now().Add(2 * time.Millisecond))
				if !gone() {
					t.Errorf("after the TTL: still there")
				}
			} else {
				testenv.WaitFor(t, 30*time.Second, "the memory to expire", gone)
			}
			hits, _ := s.Search(ctx, "carol", SearchQuery{Vector: vecOf(1, 2, 0), MinSimilarity: -1, Limit: 5})
			if len(hits) != 0 {
				t.Errorf("search after the TTL found %d", len(hits))
			}
		})
	}
}

type stateBackend struct {
	name string
	new  func(t *testing.T) StateStore
}

func stateBackends() []stateBackend {
	return []stateBackend{
		{"bolt", func(t *testing.T) StateStore { return openTestBolt(t, time.Hour) }},
		{"redis", func(t *testing.T) StateStore {
			rdb, prefix := testenv.Redis(t)
			return NewRedisState(rdb, prefix)
		}},
	}
}

// TestStateStoreConformance runs one suite over every StateStore backend.
func TestStateStoreConformance(t *testing.T) {
	for _, b := range stateBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := b.new(t)
			t.Run("users", func(t *testing.T) {
				for _, u := range []string{"u1", "u2", "u1"} {
					if err := s.AddUser(ctx, u); err != nil {
						t.Fatal(err)
					}
				}
				got, err := s.Users(ctx)
				if err != nil {
					t.Fatal(err)
				}
				sort.Strings(got)
				if d := cmp.Diff([]string{"u1", "u2"}, got); d != "" {
					t.Errorf("users (-want +got):\n%s", d)
				}
			})
			t.Run("behaviour window and one habit claim", func(t *testing.T) {
				base := time.Now()
				type step struct {
					count int64
					claim bool
				}
				var got []step
				for i := range 6 {
					n, claim, _, err := s.CountBehavior(ctx, "u1", "weather:tomorrow", base.Add(time.Duration(i)*time.Second), time.Hour, 3)
					if err != nil {
						t.Fatal(err)
					}
					got = append(got, step{n, claim})
				}
				want := []step{{1, false}, {2, false}, {3, false}, {4, true}, {5, false}, {6, false}}
				if d := cmp.Diff(want, got, cmp.AllowUnexported(step{})); d != "" {
					t.Errorf("steps (-want +got):\n%s", d)
				}
				if err := s.SetHabit(ctx, "u1", "weather:tomorrow", "habit-1"); err != nil {
					t.Fatal(err)
				}
				_, claim, habit, _ := s.CountBehavior(ctx, "u1", "weather:tomorrow", base.Add(7*time.Second), time.Hour, 3)
				if claim || habit != "habit-1" {
					t.Errorf("after SetHabit: claim %v habit %q", claim, habit)
				}
				// Events older than the window are not counted.
				n, _, _, _ := s.CountBehavior(ctx, "u1", "other", base, time.Hour, 3)
				n2, _, _, _ := s.CountBehavior(ctx, "u1", "other", base.Add(2*time.Hour), time.Hour, 3)
				if n != 1 || n2 != 1 {
					t.Errorf("window counts %d then %d, want 1 then 1", n, n2)
				}
				// Another user's counter is separate.
				n3, _, _, _ := s.CountBehavior(ctx, "u2", "weather:tomorrow", base, time.Hour, 3)
				if n3 != 1 {
					t.Errorf("u2 count = %d, want 1", n3)
				}
			})
			t.Run("turn claim, busy, release, finish", func(t *testing.T) {
				rec, busy, tok, err := s.ClaimTurn(ctx, "u1", "turn-1", time.Minute)
				if err != nil || rec != nil || busy || tok == "" {
					t.Fatalf("first claim = %v %v %q %v", rec, busy, tok, err)
				}
				if _, busy, _, _ := s.ClaimTurn(ctx, "u1", "turn-1", time.Minute); !busy {
					t.Errorf("second claim is not busy")
				}
				if err := s.ReleaseTurn(ctx, "u1", "turn-1", "not-the-token"); err != nil {
					t.Fatal(err)
				}
				if _, busy, _, _ := s.ClaimTurn(ctx, "u1", "turn-1", time.Minute); !busy {
					t.Errorf("a release with the wrong token freed the claim")
				}
				if err := s.ReleaseTurn(ctx, "u1", "turn-1", tok); err != nil {
					t.Fatal(err)
				}
				_, busy, tok2, _ := s.ClaimTurn(ctx, "u1", "turn-1", time.Minute)
				if busy || tok2 == "" {
					t.Fatalf("claim after release: busy %v", busy)
				}
				want := TurnRecord{MemoryIDs: []string{"m1"}, Candidates: 2, At: time.Now().UTC().Truncate(time.Millisecond)}
				if err := s.FinishTurn(ctx, "u1", "turn-1", tok2, want, time.Hour); err != nil {
					t.Fatal(err)
				}
				got, busy, _, err := s.ClaimTurn(ctx, "u1", "turn-1", time.Minute)
				if err != nil || busy || got == nil {
					t.Fatalf("claim of a finished turn = %v %v %v", got, busy, err)
				}
				if d := cmp.Diff(want, *got); d != "" {
					t.Errorf("record (-want +got):\n%s", d)
				}
				if rec, busy, _, _ := s.ClaimTurn(ctx, "u2", "turn-1", time.Minute); rec != nil || busy {
					t.Errorf("u2's turn of the same id is u1's")
				}
			})
			t.Run("lock", func(t *testing.T) {
				unlock, ok, err := s.Lock(ctx, "maint", time.Minute)
				if err != nil || !ok {
					t.Fatalf("lock = %v %v", ok, err)
				}
				if _, ok, _ := s.Lock(ctx, "maint", time.Minute); ok {
					t.Errorf("second holder got the lock")
				}
				unlock()
				u2, ok, _ := s.Lock(ctx, "maint", time.Minute)
				if !ok {
					t.Errorf("lock not free after unlock")
				} else {
					u2()
				}
				_, ok, _ = s.Lock(ctx, "short", 100*time.Millisecond)
				time.Sleep(250 * time.Millisecond)
				if _, ok2, _ := s.Lock(ctx, "short", time.Minute); !ok || !ok2 {
					t.Errorf("lock not free after its ttl")
				}
			})
			t.Run("delete user", func(t *testing.T) {
				counters, records, err := s.DeleteUser(ctx, "u1")
				if err != nil {
					t.Fatal(err)
				}
				if counters != 2 || records != 1 {
					t.Errorf("deleted %d counters, %d records; want 2, 1", counters, records)
				}
				n, claim, habit, _ := s.CountBehavior(ctx, "u1", "weather:tomorrow", time.Now(), time.Hour, 3)
				if n != 1 || claim || habit != "" {
					t.Errorf("after delete: count %d claim %v habit %q", n, claim, habit)
				}
				users, _ := s.Users(ctx)
				if fmt.Sprint(users) != "[u2]" {
					t.Errorf("users after delete = %v", users)
				}
			})
		})
	}
}

// TestQdrantMatchesEmbedded: on the same memories, the embedded index and Qdrant (the double, or
// a real one with HERMES_TEST_QDRANT_ADDR) give the same lexical scores — Qdrant computing the
// IDF itself from the sparse vectors — and the same fused rankings with dense vectors. One
// user's memories, so Qdrant's statistics (over the collection) and the embedded ones (over the
// user's memories) are over the same memories.
func TestQdrantMatchesEmbedded(t *testing.T) {
	set := loadDialogues(t)
	ctx := context.Background()
	const dim = 64
	bolt, err := OpenBoltStore(filepath.Join(t.TempDir(), "m.db"), BoltOptions{EpisodicTTL: time.Hour, Embedder: "test", Dimension: dim, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bolt.Close() })
	c, coll := testQdrant(t)
	qs, err := NewQdrantSemantic(ctx, c, coll, dim)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for _, conv := range set.convs {
		for _, turn := range conv.turns {
			m := testMemory("u", newID(), memoryv1.MemoryType_MEMORY_TYPE_EVENT, turn.text, now)
			m.Speaker = turn.speaker
			vec := hashedVectors([]string{embedText(m)}, dim)[0]
			for _, s := range []TierStore{bolt.Semantic(), qs} {
				if err := s.Put(ctx, Entry{m, vec}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	type result struct {
		ids  []string
		sims []float64
	}
	search := func(s TierStore, q SearchQuery) result {
		hits, err := s.Search(ctx, "u", q)
		if err != nil {
			t.Fatal(err)
		}
		var r result
		for _, h := range hits {
			r.ids = append(r.ids, h.Memory.GetId())
			r.sims = append(r.sims, h.Similarity)
		}
		return r
	}
	for _, q := range set.questions {
		lex := SearchQuery{Lexical: lexQuery(q.text), MinLexical: 1.0, Limit: 8}
		hyb := lex
		hyb.Vector, hyb.MinSimilarity = hashedVectors([]string{q.text}, dim)[0], 0.1
		// Fused: equal scores within a list may be ordered either way (and cut either way at
		// the limit), which moves RRF scores; where the best fused memory is clear in both, it
		// is the same with the same score.
		want, got := search(bolt.Semantic(), hyb), search(qs, hyb)
		if len(want.ids) > 1 && len(got.ids) > 1 && want.sims[0] > want.sims[1]+1e-4 && got.sims[0] > got.sims[1]+1e-4 {
			if want.ids[0] != got.ids[0] {
				t.Errorf("hybrid %q: best embedded %s %.5f, Qdrant %s %.5f", q.text, want.ids[0], want.sims[0], got.ids[0], got.sims[0])
			}
		}
		for name, sq := range map[string]SearchQuery{"lexical": lex} {
			want, got := search(bolt.Semantic(), sq), search(qs, sq)
			if d := cmp.Diff(want.sims, got.sims, cmpopts.EquateApprox(1e-4, 1e-5)); d != "" {
				t.Errorf("%s %q: scores, embedded vs Qdrant (-embedded +qdrant):\n%s", name, q.text, d)
				continue
			}
			// Equal scores may come in either order, and a tie at the limit keep either memory.
			above := func(r result) []string {
				var ids []string
				for i, id := range r.ids {
					if r.sims[i] > r.sims[len(r.sims)-1]+1e-4 {
						ids = append(ids, id)
					}
				}
				sort.Strings(ids)
				return ids
			}
			if len(want.ids) > 0 {
				if d := cmp.Diff(above(want), above(got)); d != "" {
					t.Errorf("%s %q: memories, embedded vs Qdrant (-embedded +qdrant):\n%s", name, q.text, d)
				}
			}
		}
	}
}

// TestQdrantCountReused: Search reads the collection's point count at most every countTTL, and
// a write of the same store makes it count again; another replica's write shows after countTTL.
func TestQdrantCountReused(t *testing.T) {
	ctx := context.Background()
	qc, coll := testQdrant(t)
	a, err := NewQdrantSemantic(ctx, qc, coll, 0)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewQdrantSemantic(ctx, qc, coll, 0)
	if err != nil {
		t.Fatal(err)
	}
	a.countTTL = time.Hour // no expiry between the calls, however slow the machine
	put := func(s *QdrantSemantic, id string) {
		t.Helper()
		m := testMemory("u1", id, memoryv1.MemoryType_MEMORY_TYPE_FACT, "likes tea "+id, time.Now())
		if err := s.Put(ctx, Entry{Memory: m}); err != nil {
			t.Fatal(err)
		}
	}
	count := func(s *QdrantSemantic) uint64 {
		t.Helper()
		n, err := s.pointCount(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	put(a, newID())
	first := count(a)
	put(b, newID()) // another replica's write
	if got := count(a); got != first {
		t.Errorf("count within countTTL = %d, want the reused %d", got, first)
	}
	put(a, newID()) // this store's write
	if got := count(a); got != first+2 {
		t.Errorf("count after this store's write = %d, want %d", got, first+2)
	}
}
