package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseKeys(t *testing.T) {
	digest := sha256.Sum256([]byte("sk-carol-0123456789abcdef"))
	file := "sk-alice-0123456789abcdef: alice\n" +
		"sk-ops-0123456789abcdefgh: {role: operator, name: ops}\n" +
		"sk-svc-0123456789abcdefgh: {role: service}\n" +
		"\"sha256:" + hex.EncodeToString(digest[:]) + "\": {role: user, user: carol}\n"
	keys, err := parseKeys([]byte(file))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Principal{
		"sk-alice-0123456789abcdef": {Role: RoleUser, User: "alice", Name: "user:alice"},
		"sk-ops-0123456789abcdefgh": {Role: RoleOperator, Name: "operator:ops"},
		"sk-svc-0123456789abcdefgh": {Role: RoleService, Name: "service:service"},
		"sk-carol-0123456789abcdef": {Role: RoleUser, User: "carol", Name: "user:carol"},
	}
	got := map[string]Principal{}
	for k := range want {
		if p, ok := keys[sha256.Sum256([]byte(k))]; ok {
			got[k] = p
		}
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("parsed keys (-want +got):\n%s", d)
	}
}

func TestParseKeysRefuses(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"short key", "short: alice\n", "shorter than 16"},
		{"empty user", "sk-0123456789abcdef: \"\"\n", "user is required"},
		{"not a map", "[1, 2]", "want a YAML map"},
		{"bad role", "sk-0123456789abcdef: {role: root}\n", "want user, operator or service"},
		{"user on operator", "sk-0123456789abcdef: {role: operator, user: bob}\n", "has no user"},
		{"bad digest", "\"sha256:abcd\": alice\n", "64 hex digits"},
		{"duplicate", "sk-0123456789abcdef: a\nsk-0123456789abcdef: b\n", "line"},
		{"blank in key", "\"sk 0123456789abcdef\": a\n", "blank or control"},
		{"control in user", "sk-0123456789abcdef: \"a\\u0007b\"\n", "control character"},
	} {
		_, err := parseKeys([]byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
		// An error never repeats a key.
		if err != nil && strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("%s: the error %q shows the key", tc.name, err)
		}
	}
}

// TestKeyFileReloads: a changed file is picked up without a restart, a broken one keeps the last
// good keys, and a revoked key stops working.
func TestKeyFileReloads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	write := func(s string, mtime time.Time) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	base := time.Now().Add(-time.Hour)
	write("sk-alice-0123456789abcdef: alice\n", base)
	k, err := LoadKeyFile(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := k.Lookup("sk-alice-0123456789abcdef"); !ok || p.User != "alice" {
		t.Fatalf("alice's key: %v %v", p, ok)
	}
	write("sk-bob-0123456789abcdefgh: bob\n", base.Add(time.Minute))
	k.mu.Lock()
	k.checked = time.Time{}
	k.mu.Unlock()
	if p, ok := k.Lookup("sk-bob-0123456789abcdefgh"); !ok || p.User != "bob" {
		t.Errorf("after the change, bob's key: %v %v", p, ok)
	}
	if _, ok := k.Lookup("sk-alice-0123456789abcdef"); ok {
		t.Error("alice's revoked key still works")
	}
	write(": : not yaml", base.Add(2*time.Minute))
	k.mu.Lock()
	k.checked = time.Time{}
	k.mu.Unlock()
	if p, ok := k.Lookup("sk-bob-0123456789abcdefgh"); !ok || p.User != "bob" {
		t.Errorf("after a broken file: %v %v, want the last good keys", p, ok)
	}
}

// FuzzParseKeys: any file either fails or yields principals that hold together (a role, a user
// exactly for user keys, a name), and parsing is deterministic.
func FuzzParseKeys(f *testing.F) {
	f.Add([]byte("sk-alice-0123456789abcdef: alice\n"))
	f.Add([]byte("sk-ops-0123456789abcdefgh: {role: operator, name: ops}\n"))
	f.Add([]byte("\"sha256:0000000000000000000000000000000000000000000000000000000000000000\": {role: service}\n"))
	f.Add([]byte("a: &x {role: user, user: *x}\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := parseKeys(data)
		if err != nil {
			return
		}
		again, err := parseKeys(data)
		if err != nil || len(again) != len(keys) {
			t.Fatalf("second parse differs: %v", err)
		}
		for d, p := range keys {
			if again[d] != p {
				t.Fatalf("second parse differs for one key")
			}
			switch p.Role {
			case RoleUser:
				if p.User == "" || p.Name != "user:"+p.User {
					t.Fatalf("user principal %+v", p)
				}
			case RoleOperator, RoleService:
				if p.User != "" || !strings.HasPrefix(p.Name, p.Role.String()+":") {
					t.Fatalf("%s principal %+v", p.Role, p)
				}
			default:
				t.Fatalf("principal without a role: %+v", p)
			}
			if p.Anonymous {
				t.Fatal("a key made an anonymous principal")
			}
		}
	})
}
