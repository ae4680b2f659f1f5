package orchestrator

import (
	"testing"
)

// TestCanonicalJSONRefusesTrailingData: whatever follows the value, valid JSON or not, makes
// the input invalid; trailing white space does not.
func TestCanonicalJSONRefusesTrailingData(t *testing.T) {
	for _, in := range []string{`{"a":1} xyz`, `{"a":1} }`, `1 2`, `"a" "b"`, `{"a":1}]`, `null nul`} {
		if got, err := CanonicalJSON(in); err == nil {
			t.Errorf("CanonicalJSON(%q) = %q, want an error", in, got)
		}
	}
	for _, in := range []string{"{\"a\":1}  \n\t", " 1 "} {
		if _, err := CanonicalJSON(in); err != nil {
			t.Errorf("CanonicalJSON(%q): %v", in, err)
		}
	}
}
