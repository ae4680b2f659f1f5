package auth

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// Limits of the auth file.
const (
	// MinKeyLength is the shortest API key accepted in clear.
	MinKeyLength = 16
	// maxKeyFileBytes bounds the file read on every change.
	maxKeyFileBytes = 8 << 20
	maxUserBytes    = 128
	maxNameBytes    = 64
	// reloadEvery is how often a changed file is noticed.
	reloadEvery  = 2 * time.Second
	digestPrefix = "sha256:"
)

// KeyFile holds the API keys of the auth file, as SHA-256 digests only. The file is re-read
// when it changes (checked at most every two seconds on use), so keys can be added or revoked
// without a restart; a file that becomes unreadable or invalid keeps the last good keys and the
// problem is logged.
//
// The file is a YAML map from key to principal:
//
//	sk-alice-0123456789abcdef: alice                      # a user key: the value is the user id
//	sk-ops-0123456789abcdefgh: {role: operator, name: ops}
//	sk-svc-0123456789abcdefgh: {role: service}
//	"sha256:<64 hex digits>":  {role: user, user: bob}      # the key's digest instead of the key
//	sk-carol-0123456789abcdef: {role: user, user: carol, quota: {concurrent_turns: 2, tokens_per_day: 0}}
//
// A user key's quota overrides the operator's per-user defaults (internal/quota); each field is
// optional, 0 means no limit. Operator and service keys have no quotas.
type KeyFile struct {
	path string
	log  *slog.Logger

	// mu guards everything below.
	mu      sync.Mutex
	keys    map[[32]byte]Principal
	modTime time.Time
	size    int64
	checked time.Time
}

// LoadKeyFile reads the auth file; it fails when the file is missing or invalid.
func LoadKeyFile(path string, log *slog.Logger) (*KeyFile, error) {
	if log == nil {
		log = slog.Default()
	}
	k := &KeyFile{path: path, log: log}
	if err := k.reload(true); err != nil {
		return nil, err
	}
	return k, nil
}

// Len is the number of keys.
func (k *KeyFile) Len() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.keys)
}

// Lookup returns the principal of an API key, re-reading a changed file first.
func (k *KeyFile) Lookup(key string) (Principal, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if now := time.Now(); now.Sub(k.checked) >= reloadEvery {
		k.checked = now
		if err := k.reloadLocked(false); err != nil {
			k.log.Error("auth file: keeping the last good keys", "error", err)
		}
	}
	p, ok := k.keys[sha256.Sum256([]byte(key))]
	return p, ok
}

func (k *KeyFile) reload(force bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.checked = time.Now()
	return k.reloadLocked(force)
}

func (k *KeyFile) reloadLocked(force bool) error {
	fi, err := os.Stat(k.path)
	if err != nil {
		return fmt.Errorf("auth file: %w", err)
	}
	if !force && fi.ModTime().Equal(k.modTime) && fi.Size() == k.size {
		return nil
	}
	if fi.Size() > maxKeyFileBytes {
		return fmt.Errorf("auth file %s: %d bytes; at most %d", k.path, fi.Size(), maxKeyFileBytes)
	}
	data, err := os.ReadFile(k.path)
	if err != nil {
		return fmt.Errorf("auth file: %w", err)
	}
	keys, err := parseKeys(data)
	if err != nil {
		return fmt.Errorf("auth file %s: %w", k.path, err)
	}
	if !force && k.keys != nil {
		k.log.Info("auth file reloaded", "keys", len(keys))
	}
	k.keys, k.modTime, k.size = keys, fi.ModTime(), fi.Size()
	return nil
}

// keyEntry is the object form of an entry.
type keyEntry struct {
	Role  string    `yaml:"role"`
	User  string    `yaml:"user"`
	Name  string    `yaml:"name"`
	Quota yaml.Node `yaml:"quota"` // Kind 0 when absent
}

// parseKeys parses the auth file's content into key digests and principals. Errors never
// contain a key.
func parseKeys(data []byte) (map[[32]byte]Principal, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("want a YAML map of \"<key>: <user_id>\" or \"<key>: {role: …}\": %s", yamlErrorWithoutData(err))
	}
	out := map[[32]byte]Principal{}
	if len(root.Content) == 0 {
		return out, nil
	}
	m := root.Content[0]
	if m.Kind != yaml.MappingNode {
		return nil, errors.New("want a YAML map of \"<key>: <user_id>\" or \"<key>: {role: …}\"")
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], m.Content[i+1]
		line := kn.Line
		if kn.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: a key must be a string", line)
		}
		digest, err := keyDigest(strings.TrimSpace(kn.Value))
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		p, err := entryPrincipal(vn)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if _, dup := out[digest]; dup {
			return nil, fmt.Errorf("line %d: the same key is listed twice", line)
		}
		out[digest] = p
	}
	return out, nil
}

// keyDigest returns the SHA-256 digest of a clear key, or decodes a "sha256:<hex>" entry.
func keyDigest(key string) ([32]byte, error) {
	var d [32]byte
	if hexDigest, ok := strings.CutPrefix(key, digestPrefix); ok {
		b, err := hex.DecodeString(hexDigest)
		if err != nil || len(b) != len(d) {
			return d, errors.New("a sha256: key needs 64 hex digits")
		}
		copy(d[:], b)
		return d, nil
	}
	if len(key) < MinKeyLength {
		return d, fmt.Errorf("a key is shorter than %d characters", MinKeyLength)
	}
	for _, r := range key {
		if r <= ' ' || r == 0x7f || !utf8.ValidRune(r) {
			return d, errors.New("a key contains a blank or control character")
		}
	}
	return sha256.Sum256([]byte(key)), nil
}

func entryPrincipal(n *yaml.Node) (Principal, error) {
	var e keyEntry
	switch n.Kind {
	case yaml.ScalarNode:
		e = keyEntry{Role: "user", User: n.Value}
	case yaml.MappingNode:
		if err := n.Decode(&e); err != nil {
			return Principal{}, fmt.Errorf("want {role: user|operator|service, user: …, name: …}: %s", yamlErrorWithoutData(err))
		}
	default:
		return Principal{}, errors.New("want a user id or {role: …}")
	}
	e.User, e.Name = strings.TrimSpace(e.User), strings.TrimSpace(e.Name)
	role, ok := parseRole(strings.TrimSpace(e.Role))
	if !ok {
		return Principal{}, fmt.Errorf("role %q: want user, operator or service", truncate(e.Role, 40))
	}
	if err := checkIdent("name", e.Name, maxNameBytes, false); err != nil {
		return Principal{}, err
	}
	p := Principal{Role: role}
	switch role {
	case RoleUser:
		if err := checkIdent("user", e.User, maxUserBytes, true); err != nil {
			return Principal{}, err
		}
		p.User = e.User
		p.Name = "user:" + e.User
		if e.Quota.Kind != 0 {
			q, err := parseQuota(&e.Quota)
			if err != nil {
				return Principal{}, err
			}
			p.Quota = q
		}
	default:
		if e.User != "" {
			return Principal{}, fmt.Errorf("a %s key has no user", role)
		}
		if e.Quota.Kind != 0 {
			return Principal{}, fmt.Errorf("a %s key has no quota: quotas limit users", role)
		}
		name := e.Name
		if name == "" {
			name = role.String()
		}
		p.Name = role.String() + ":" + name
	}
	return p, nil
}

func checkIdent(field, v string, max int, required bool) error {
	switch {
	case v == "" && required:
		return fmt.Errorf("%s is required", field)
	case len(v) > max:
		return fmt.Errorf("%s is %d bytes; at most %d", field, len(v), max)
	case !utf8.ValidString(v):
		return fmt.Errorf("%s is not valid UTF-8", field)
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return fmt.Errorf("%s contains a control character", field)
		}
	}
	return nil
}

// yamlErrorWithoutData keeps YAML's line information but not the text it quotes, which could be
// a key.
func yamlErrorWithoutData(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, "line "); i >= 0 {
		end := strings.IndexAny(msg[i:], ":")
		if end > 0 {
			return "syntax error at " + msg[i:i+end]
		}
	}
	return "syntax error"
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
