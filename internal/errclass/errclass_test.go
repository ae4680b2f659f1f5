package errclass

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestErrors(t *testing.T) {
	cause := errors.New("dial tcp 10.0.0.7:6379: connection refused")
	tests := []struct {
		name   string
		err    error
		class  error
		public string // "" when the error carries no message of its own
		text   string
	}{
		{"new", New(NotFound, "turn t1 not found", nil), NotFound, "turn t1 not found", "turn t1 not found"},
		{"new with cause", New(Unavailable, "the store is down", cause), Unavailable, "the store is down", "the store is down: " + cause.Error()},
		{"errorf", Errorf(Invalid, "content.%s: must be a string", "k"), Invalid, "content.k: must be a string", "content.k: must be a string"},
		{"mark", Mark(Unavailable, "redis get", cause), Unavailable, "", "redis get: unavailable: " + cause.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !errors.Is(tt.err, tt.class) {
				t.Errorf("%v is not of class %v", tt.err, tt.class)
			}
			var public string
			if p := Publisher(nil); errors.As(tt.err, &p) {
				public = p.Public()
			}
			if diff := cmp.Diff(tt.public, public); diff != "" {
				t.Errorf("public message (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.text, tt.err.Error()); diff != "" {
				t.Errorf("text (-want +got):\n%s", diff)
			}
		})
	}
	if err := Mark(Unavailable, "redis get", nil); err != nil {
		t.Errorf("Mark of no error = %v, want nil", err)
	}
	if errors.Is(Mark(Unavailable, "redis get", cause), NotFound) {
		t.Error("a marked error has a class it was not marked with")
	}
}
