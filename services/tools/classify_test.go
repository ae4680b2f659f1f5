package tools

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/hermes-agent/hermes/internal/testenv"
	toolsv1 "github.com/hermes-agent/hermes/proto/hermes/tools/v1"
)

// buggyStore is a working store whose GetTool fails with an error no class marks: a bug.
type buggyStore struct{ Store }

func (buggyStore) GetTool(context.Context, string) (*StoredTool, error) {
	return nil, errors.New("decode t:42 at 10.0.0.7: unexpected EOF")
}

// TestErrorClasses: a backend that is down is UNAVAILABLE (clients retry), an error without a
// class is INTERNAL (never retried), and neither status carries the cause's text.
func TestErrorClasses(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	tests := []struct {
		name  string
		store Store
		want  codes.Code
	}{
		{"redis down", NewRedisStore(testenv.DownRedis(t), prefix), codes.Unavailable},
		{"unclassified", buggyStore{NewRedisStore(rdb, prefix)}, codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serve(t, newTestService(t, tt.store, Options{}))
			_, err := c.GetTool(ctxTimeout(t, 10*time.Second), &toolsv1.GetToolRequest{Name: "t"})
			testenv.WantStatus(t, err, tt.want, "10.0.0.7", "127.0.0.1", "dial tcp", "EOF")
		})
	}
}
