package auth

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// maxQuotaValue bounds a quota in the auth file (a typo of many digits is an error, not "no
// limit in practice").
const maxQuotaValue = 1 << 50

// Quota is a user key's own limits, each overriding the operator's default (internal/quota)
// when set. Zero means no limit.
type Quota struct {
	Sessions         *int64 `yaml:"sessions"`
	StoredBytes      *int64 `yaml:"stored_bytes"`
	AppendsPerMinute *int64 `yaml:"appends_per_minute"`
	ConcurrentTurns  *int64 `yaml:"concurrent_turns"`
	TurnsPerMinute   *int64 `yaml:"turns_per_minute"`
	TokensPerDay     *int64 `yaml:"tokens_per_day"`
}

// parseQuota reads a key's quota map; unknown names and negative values are errors.
func parseQuota(n *yaml.Node) (*Quota, error) {
	if n.Kind != yaml.MappingNode {
		return nil, errors.New("quota: want a map such as {sessions: 100, tokens_per_day: 1000000}")
	}
	q := &Quota{}
	fields := map[string]**int64{
		"sessions": &q.Sessions, "stored_bytes": &q.StoredBytes, "appends_per_minute": &q.AppendsPerMinute,
		"concurrent_turns": &q.ConcurrentTurns, "turns_per_minute": &q.TurnsPerMinute, "tokens_per_day": &q.TokensPerDay,
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		name := n.Content[i].Value
		dst, ok := fields[name]
		if !ok {
			return nil, fmt.Errorf("quota: unknown limit %q: want sessions, stored_bytes, appends_per_minute, concurrent_turns, turns_per_minute or tokens_per_day", truncate(name, 40))
		}
		var v int64
		if err := n.Content[i+1].Decode(&v); err != nil {
			return nil, fmt.Errorf("quota.%s: want a whole number (0 = no limit)", name)
		}
		if v < 0 || v > maxQuotaValue {
			return nil, fmt.Errorf("quota.%s: %d is out of range 0 to %d (0 = no limit)", name, v, int64(maxQuotaValue))
		}
		*dst = &v
	}
	return q, nil
}
