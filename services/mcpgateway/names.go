package mcpgateway

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"regexp"
	"strings"
)

// Name limits. Tool names follow the tool service's contract (and OpenAI's function names);
// server names and prefixes are kept short so that <prefix>_<tool> leaves room for the tool.
const (
	maxToolName   = 64
	maxServerName = 32
	// hashLen is the number of hex digits of the hash that makes a clamped name unique.
	hashLen = 8
)

var (
	toolNameRE   = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)
	serverNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,32}$`)
)

// validName reports whether r may appear in a tool name.
func validName(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-'
}

// CleanName turns raw into a name matching ^[a-zA-Z0-9_-]{1,max}$: every other character becomes
// "_", and a name longer than max keeps a readable head followed by "_" and a short hash of the
// raw name, so two long names that share their head still differ. An empty name becomes "_".
// The result depends only on raw and max.
func CleanName(raw string, max int) string {
	var b strings.Builder
	b.Grow(len(raw))
	for _, r := range raw {
		if validName(r) {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	s := b.String()
	if s == "" {
		return "_"
	}
	if len(s) <= max {
		return s
	}
	sum := sha256.Sum256([]byte(raw))
	tag := hex.EncodeToString(sum[:])
	if max <= hashLen+1 { // no room for a head
		return tag[:min(max, len(tag))]
	}
	return s[:max-hashLen-1] + "_" + tag[:hashLen]
}

// ToolName is the namespaced name of a server's tool: "<prefix>_<tool>", cleaned.
func ToolName(prefix, tool string) string {
	return CleanName(prefix+"_"+tool, maxToolName)
}

// filter decides which of a server's tools are registered, by glob patterns on original names
// (path.Match syntax: *, ?, [a-z]).
type filter struct {
	include, exclude []string
}

// validatePatterns reports the first malformed glob.
func validatePatterns(patterns []string) error {
	for _, p := range patterns {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("pattern %q: %w", p, err)
		}
	}
	return nil
}

// allows reports whether the tool is kept, and if not, why.
func (f filter) allows(name string) (bool, string) {
	if len(f.include) > 0 {
		matched := false
		for _, p := range f.include {
			if ok, _ := path.Match(p, name); ok {
				matched = true
				break
			}
		}
		if !matched {
			return false, "not matched by include " + strings.Join(f.include, ", ")
		}
	}
	for _, p := range f.exclude {
		if ok, _ := path.Match(p, name); ok {
			return false, "excluded by " + p
		}
	}
	return true, ""
}
