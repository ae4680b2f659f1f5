package orchestrator

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// apiKeys maps API keys to users, from a YAML file of "<key>: <user_id>" entries. The file is
// re-read when it changes (checked at most every two seconds), so keys can be added or revoked
// without a restart. Keys are held only as SHA-256 digests.
type apiKeys struct {
	path string

	mu      sync.Mutex
	users   map[[32]byte]string
	modTime time.Time
	size    int64
	checked time.Time
}

// loadAPIKeys reads the file; an empty path means API keys are off (nil).
func loadAPIKeys(path string) (*apiKeys, error) {
	if path == "" {
		return nil, nil
	}
	k := &apiKeys{path: path}
	if err := k.reload(true); err != nil {
		return nil, err
	}
	return k, nil
}

// parseAPIKeys parses the file's content.
func parseAPIKeys(data []byte) (map[[32]byte]string, error) {
	var raw map[string]string
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("want a YAML map of \"<key>: <user_id>\": %w", err)
	}
	users := make(map[[32]byte]string, len(raw))
	for key, user := range raw {
		key, user = strings.TrimSpace(key), strings.TrimSpace(user)
		switch {
		case len(key) < 16:
			return nil, fmt.Errorf("key for user %q is shorter than 16 characters", user)
		case user == "" || len(user) > 128:
			return nil, fmt.Errorf("a key maps to user %q: want 1 to 128 bytes", user)
		}
		users[sha256.Sum256([]byte(key))] = user
	}
	return users, nil
}

func (k *apiKeys) reload(force bool) error {
	fi, err := os.Stat(k.path)
	if err != nil {
		return fmt.Errorf("auth file: %w", err)
	}
	if !force && fi.ModTime().Equal(k.modTime) && fi.Size() == k.size {
		return nil
	}
	data, err := os.ReadFile(k.path)
	if err != nil {
		return fmt.Errorf("auth file: %w", err)
	}
	users, err := parseAPIKeys(data)
	if err != nil {
		return fmt.Errorf("auth file %s: %w", k.path, err)
	}
	k.users, k.modTime, k.size = users, fi.ModTime(), fi.Size()
	return nil
}

// user returns the user of a key, re-reading a changed file first. A file that became
// unreadable keeps the last good keys.
func (k *apiKeys) user(key string) (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if now := time.Now(); now.Sub(k.checked) > 2*time.Second {
		k.checked = now
		_ = k.reload(false)
	}
	u, ok := k.users[sha256.Sum256([]byte(key))]
	return u, ok
}

// keyFromContext reads "authorization: Bearer <key>" or "x-api-key: <key>".
func keyFromContext(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		if after, ok := strings.CutPrefix(v, "Bearer "); ok {
			return strings.TrimSpace(after)
		}
	}
	if v := md.Get("x-api-key"); len(v) > 0 {
		return strings.TrimSpace(v[0])
	}
	return ""
}

// authorize returns the user a request runs for. Without API keys it is the user the request
// names. With keys the user comes from the key; naming another user is PERMISSION_DENIED.
func (s *Service) authorize(ctx context.Context, requested string) (string, error) {
	if s.keys == nil {
		return requested, nil
	}
	key := keyFromContext(ctx)
	if key == "" {
		return "", status.Error(codes.Unauthenticated, "an API key is required: send the metadata \"authorization: Bearer <key>\"")
	}
	user, ok := s.keys.user(key)
	if !ok {
		return "", status.Error(codes.Unauthenticated, "the API key is not known")
	}
	if requested != "" && requested != user {
		return "", status.Errorf(codes.PermissionDenied, "the API key belongs to another user than %q", requested)
	}
	return user, nil
}
