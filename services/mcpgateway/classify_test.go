package mcpgateway

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

// buggyStore is a working store whose DeleteServer fails with an error no class marks: a bug.
type buggyStore struct{ ServerStore }

func (buggyStore) DeleteServer(context.Context, string) error {
	return errors.New("decode servers at 10.0.0.7: unexpected EOF")
}

// TestErrorClasses: a backend that is down is UNAVAILABLE (clients retry), an error without a
// class is INTERNAL (never retried), and neither status carries the cause's text.
func TestErrorClasses(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	tests := []struct {
		name  string
		store ServerStore
		want  codes.Code
	}{
		{"redis down", NewRedisServerStore(testenv.DownRedis(t), "x:"), codes.Unavailable},
		{"unclassified", buggyStore{NewRedisServerStore(rdb, prefix)}, codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, _ := startGateway(t, testConfig(), Options{Store: tt.store})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := c.RemoveServer(ctx, &pb.RemoveServerRequest{Name: "x"})
			testenv.WantStatus(t, err, tt.want, "10.0.0.7", "127.0.0.1", "dial tcp", "EOF")
		})
	}
}
