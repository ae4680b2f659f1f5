package orchestrator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/hermes-agent/hermes/internal/rpc"
	"github.com/hermes-agent/hermes/internal/testenv"
	orchestratorv1 "github.com/hermes-agent/hermes/proto/hermes/orchestrator/v1"
)

// buggyStore is a working store whose GetTurn fails with an error no class marks: a bug.
type buggyStore struct{ Store }

func (buggyStore) GetTurn(context.Context, string) (*orchestratorv1.Turn, error) {
	return nil, errors.New("decode t:42 at 10.0.0.7: unexpected EOF")
}

// TestErrorClasses: a backend that is down is UNAVAILABLE (clients retry), an error without a
// class is INTERNAL (never retried), and neither status carries the cause's text.
func TestErrorClasses(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	tok, err := testTokenizer()
	if err != nil {
		t.Fatal(err)
	}
	bolt, err := OpenBoltStore(filepath.Join(t.TempDir(), "orchestrator.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bolt.Close() })
	tests := []struct {
		name  string
		store Store
		want  codes.Code
	}{
		{"redis down", NewRedisStore(testenv.DownRedis(t), "x:", quiet), codes.Unavailable},
		{"unclassified", buggyStore{bolt}, codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, err := NewService(Config{}, Options{Session: newFakeSession(), Tools: &fakeTools{}, Tokenizer: tok, Store: tt.store, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { svc.Close(time.Second) })
			srv := rpc.NewServer(rpc.ServerOptions{Logger: quiet, ShutdownTimeout: time.Second})
			srv.Register(&orchestratorv1.OrchestratorService_ServiceDesc, svc)
			c := orchestratorv1.NewOrchestratorServiceClient(testenv.Serve(t, srv))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err = c.GetTurn(ctx, &orchestratorv1.GetTurnRequest{TurnId: "t1", UserId: "u1"})
			testenv.WantStatus(t, err, tt.want, "10.0.0.7", "127.0.0.1", "dial tcp", "EOF")
		})
	}
}
