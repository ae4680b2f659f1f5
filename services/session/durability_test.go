package session

import (
	"context"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/hermes-agent/hermes/internal/auth"
	"github.com/hermes-agent/hermes/internal/boltstore"
)

// TestOnlyServicesDeferWrites: a user who sends the durability header still gets a write of its
// own commit; Hermes' services and operators may defer theirs to the file's next commit.
func TestOnlyServicesDeferWrites(t *testing.T) {
	asked := metadata.NewIncomingContext(context.Background(), metadata.Pairs(boltstore.DeferHeader, "next-commit", "other", "kept"))
	for _, tc := range []struct {
		name string
		p    *auth.Principal
		want bool
	}{
		{"user", &auth.Principal{Role: auth.RoleUser, User: "alice", Name: "user:alice"}, false},
		{"service", &auth.Principal{Role: auth.RoleService, Name: "service:in-process"}, true},
		{"operator", &auth.Principal{Role: auth.RoleOperator, Name: "operator:ops"}, true},
		{"anonymous (authentication off)", &auth.Principal{Anonymous: true, Name: "anonymous"}, true},
	} {
		ctx := auth.NewContext(asked, *tc.p)
		got := durability(ctx)
		if boltstore.DeferRequested(got) != tc.want {
			t.Errorf("%s: deferred = %v, want %v", tc.name, !tc.want, tc.want)
		}
		if md, _ := metadata.FromIncomingContext(got); len(md.Get("other")) != 1 {
			t.Errorf("%s: other metadata lost", tc.name)
		}
	}
	if !boltstore.DeferRequested(asked) {
		t.Error("the header itself was changed")
	}
}
