package quota

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hermes-agent/hermes/internal/auth"
)

func TestConfigFor(t *testing.T) {
	cfg := Config{Limits: Limits{Sessions: 10, StoredBytes: 100, AppendsPerMinute: 60, ConcurrentTurns: 4, TurnsPerMinute: 30, TokensPerDay: 1000}}
	one, zero := int64(1), int64(0)
	tests := []struct {
		name    string
		p       auth.Principal
		want    Limits
		limited bool
	}{
		{"user", auth.Principal{Role: auth.RoleUser, User: "a"}, cfg.Limits, true},
		{"override", auth.Principal{Role: auth.RoleUser, User: "a", Quota: &auth.Quota{Sessions: &one, TokensPerDay: &zero}},
			Limits{Sessions: 1, StoredBytes: 100, AppendsPerMinute: 60, ConcurrentTurns: 4, TurnsPerMinute: 30, TokensPerDay: 0}, true},
		{"operator", auth.Principal{Role: auth.RoleOperator}, Limits{}, false},
		{"service", auth.Principal{Role: auth.RoleService}, Limits{}, false},
		{"anonymous", auth.Principal{Anonymous: true}, Limits{}, false},
	}
	for _, tt := range tests {
		got, limited := cfg.For(tt.p)
		if d := cmp.Diff(tt.want, got); d != "" || limited != tt.limited {
			t.Errorf("%s: limited %v (want %v), limits (-want +got):\n%s", tt.name, limited, tt.limited, d)
		}
	}
	if err := (Config{Limits: Limits{Sessions: -1}}).Validate(); err == nil {
		t.Error("a negative limit was accepted")
	}
}
