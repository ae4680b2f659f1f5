package auth

import (
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseKeysQuota(t *testing.T) {
	keys, err := parseKeys([]byte("sk-carol-0123456789abcdef: {role: user, user: carol, quota: {concurrent_turns: 2, tokens_per_day: 0}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	two, zero := int64(2), int64(0)
	want := Principal{Role: RoleUser, User: "carol", Name: "user:carol", Quota: &Quota{ConcurrentTurns: &two, TokensPerDay: &zero}}
	if d := cmp.Diff(want, keys[sha256.Sum256([]byte("sk-carol-0123456789abcdef"))]); d != "" {
		t.Errorf("principal (-want +got):\n%s", d)
	}
	for _, tc := range []struct{ name, file, want string }{
		{"unknown limit", "sk-0123456789abcdef: {role: user, user: a, quota: {session: 3}}\n", "unknown limit"},
		{"negative", "sk-0123456789abcdef: {role: user, user: a, quota: {sessions: -1}}\n", "out of range"},
		{"not a number", "sk-0123456789abcdef: {role: user, user: a, quota: {sessions: many}}\n", "whole number"},
		{"not a map", "sk-0123456789abcdef: {role: user, user: a, quota: 3}\n", "want a map"},
		{"operator", "sk-0123456789abcdef: {role: operator, quota: {sessions: 3}}\n", "has no quota"},
	} {
		_, err := parseKeys([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}
