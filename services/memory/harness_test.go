package memory

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/qdrant/go-client/qdrant"

	"github.com/hermes-agent/hermes/internal/model"
	"github.com/hermes-agent/hermes/internal/model/scripted"
	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// harness is a memory service behind real gRPC (bufconn) on one backend.
type harness struct {
	backend string
	client  memoryv1.MemoryServiceClient
	svc     *Service
	clock   *fakeClock

	// What the ForgetUser checks look into.
	rdb    interface{ Close() error }
	prefix string
	qs     *QdrantSemantic
	bolt   *BoltStore
	redis  *redisHandle
}

type redisHandle struct {
	keys func(pattern string) []string
}

// backends are the two deployments a harness can run on.
var backends = []string{"embedded", "redis+qdrant"}

type harnessOpts struct {
	cfg      func(*Config)
	model    Completer
	embedder Embedder
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newHarness(t *testing.T, backend string, o harnessOpts) *harness {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MaintenanceInterval = 0
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	emb := o.embedder
	if emb == nil {
		emb = NewLexicalEmbedder(cfg.LexicalDimensions)
	}
	h := &harness{backend: backend, clock: &fakeClock{t: time.Now().UTC()}}
	opts := Options{Embedder: emb, Model: o.model, Logger: testLogger(), Now: h.clock.Now}
	switch backend {
	case "embedded":
		bs, err := OpenBoltStore(filepath.Join(t.TempDir(), "memory.db"), BoltOptions{EpisodicTTL: cfg.EpisodicTTL, Embedder: emb.Name(), Dimension: emb.Dimension()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = bs.Close() })
		h.bolt = bs
		opts.Episodic, opts.Semantic, opts.State = bs.Episodic(), bs.Semantic(), bs
	case "redis+qdrant":
		rdb, prefix := testenv.Redis(t)
		h.prefix = prefix
		h.redis = &redisHandle{keys: func(p string) []string {
			k, err := scanKeys(context.Background(), rdb, p)
			if err != nil {
				t.Fatal(err)
			}
			return k
		}}
		qc, coll := testQdrant(t)
		qs, err := NewQdrantSemantic(context.Background(), qc, coll, emb.Dimension())
		if err != nil {
			t.Fatal(err)
		}
		h.qs = qs
		opts.Episodic = NewRedisEpisodic(rdb, prefix, cfg.EpisodicTTL, emb.Dimension())
		opts.State = NewRedisState(rdb, prefix)
		opts.Semantic = qs
	default:
		t.Fatalf("unknown backend %q", backend)
	}
	svc, err := NewService(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	h.svc = svc
	srv := rpc.NewServer(rpc.ServerOptions{Logger: testLogger(), ShutdownTimeout: time.Second})
	srv.Register(&memoryv1.MemoryService_ServiceDesc, svc)
	t.Cleanup(svc.Close) // after the server has stopped: cleanups run last-in first-out
	conn := testenv.Serve(t, srv)
	h.client = memoryv1.NewMemoryServiceClient(conn)
	return h
}

// scriptedModel starts the scripted model (a real OpenAI-compatible HTTP server in process)
// and returns the real internal/model client talking to it.
func scriptedModel(t *testing.T, h scripted.Handler) (*model.Client, *scripted.Server) {
	t.Helper()
	srv, err := scripted.New(h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c, err := model.New(model.Config{BaseURL: srv.URL(), Model: "scripted-extractor", MaxRetries: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c, srv
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// countUserKeys counts every record of a user in every bucket: ForgetUser must leave
// nothing.
func (s *BoltStore) countUserKeys(userID string) (int, error) {
	n := 0
	err := s.db.View(func(tx *bolt.Tx) error {
		for _, bn := range [][]byte{bucketEpisodic, bucketSemantic, bucketBehavior, bucketHabits, bucketClaims} {
			if err := forPrefix(tx.Bucket(bn), userKey(userID), func(_, _ []byte) error { n++; return nil }); err != nil {
				return err
			}
		}
		if tx.Bucket(bucketUsers).Get([]byte(userID)) != nil {
			n++
		}
		return nil
	})
	return n, err
}

// userKeyPattern is the SCAN pattern of every key of a user under prefix: ForgetUser
// must leave nothing.
func userKeyPattern(prefix, userID string) string { return redisKeys{prefix}.user(userID) + "*" }

// claimTurn claims a turn that no one holds and returns the claim's token.
func claimTurn(t *testing.T, st StateStore, userID, turnID string) string {
	t.Helper()
	rec, busy, token, err := st.ClaimTurn(ctxT(t), userID, turnID, time.Minute)
	if err != nil || rec != nil || busy {
		t.Fatalf("claim of %s/%s = %v %v %v", userID, turnID, rec, busy, err)
	}
	return token
}

// countUser counts the user's points: ForgetUser must leave nothing.
func (s *QdrantSemantic) countUser(ctx context.Context, userID string) (uint64, error) {
	exact := true
	return s.c.Count(ctx, &qdrant.CountPoints{CollectionName: s.coll, Filter: userFilter(userID), Exact: &exact})
}
