package session_test

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/hermes-agent/hermes/internal/testenv"
	sessionv1 "github.com/hermes-agent/hermes/proto/hermes/session/v1"
	"github.com/hermes-agent/hermes/services/session"
)

// buggyStore is a working store whose GetSession fails with an error no class marks: a bug.
type buggyStore struct{ session.Store }

func (buggyStore) GetSession(context.Context, string) (*sessionv1.Session, error) {
	return nil, errors.New("decode s:42 at 10.0.0.7: unexpected EOF")
}

// TestErrorClasses: a backend that is down is UNAVAILABLE (clients retry), an error without a
// class is INTERNAL (never retried), and neither status carries the cause's text.
func TestErrorClasses(t *testing.T) {
	tests := []struct {
		name  string
		store session.Store
		want  codes.Code
	}{
		{"redis down", session.NewRedisStore(testenv.DownRedis(t), "x:"), codes.Unavailable},
		{"unclassified", buggyStore{redisStore(t)}, codes.Internal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serve(t, tt.store)
			_, err := c.GetSession(bg, &sessionv1.GetSessionRequest{SessionId: "s1", UserId: "u1"})
			testenv.WantStatus(t, err, tt.want, "10.0.0.7", "127.0.0.1", "dial tcp", "EOF")
		})
	}
}
