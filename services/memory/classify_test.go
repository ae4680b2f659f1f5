package memory

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	memoryv1 "github.com/hermes-agent/hermes/proto/hermes/memory/v1"
)

// buggyTier is a working tier whose Scan fails with an error no class marks: a bug.
type buggyTier struct{ TierStore }

func (buggyTier) Scan(ctx context.Context, userID string, fn func(Entry) error) error {
	return errors.New("decode m:42 at 10.0.0.7: unexpected EOF")
}

// TestErrorClasses: a backend that is down is UNAVAILABLE (clients retry), an error without a
// class is INTERNAL (never retried), and neither status carries the cause's text.
func TestErrorClasses(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaintenanceInterval = 0
	emb := NewLexicalEmbedder(cfg.LexicalDimensions)
	bs, err := OpenBoltStore(filepath.Join(t.TempDir(), "memory.db"), BoltOptions{EpisodicTTL: cfg.EpisodicTTL, Embedder: emb.Name(), Dimension: emb.Dimension()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bs.Close() })
	tests := []struct {
		name     string
		episodic TierStore
		want     codes.Code
	}{
		{"redis down", NewRedisEpisodic(testenv.DownRedis(t), "x:", cfg.EpisodicTTL, emb.Dimension()), codes.Unavailable},
		{"unclassified", buggyTier{bs.Episodic()}, codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, err := NewService(cfg, Options{Embedder: emb, Logger: testLogger(), Episodic: tt.episodic, Semantic: bs.Semantic(), State: bs})
			if err != nil {
				t.Fatal(err)
			}
			srv := rpc.NewServer(rpc.ServerOptions{Logger: testLogger(), ShutdownTimeout: time.Second})
			srv.Register(&memoryv1.MemoryService_ServiceDesc, svc)
			t.Cleanup(svc.Close)
			c := memoryv1.NewMemoryServiceClient(testenv.Serve(t, srv))
			_, err = c.ListMemories(ctxT(t), &memoryv1.ListMemoriesRequest{UserId: "u1"})
			testenv.WantStatus(t, err, tt.want, "10.0.0.7", "127.0.0.1", "dial tcp", "EOF")
		})
	}
}
