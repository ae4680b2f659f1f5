// Package proto_test checks the API definitions: buf lint and format are clean, and the
// committed generated code is exactly what the .proto files produce, so a stale generation fails
// the test run.
package proto_test

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func buf(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"tool", "buf"}, args...)...)
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("buf %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestLintAndFormat(t *testing.T) {
	buf(t, "lint")
	if out := buf(t, "format", "-d", "--exit-code"); out != "" {
		t.Errorf("buf format would change the .proto files (run make proto):\n%s", out)
	}
}

func TestGeneratedCodeIsCurrent(t *testing.T) {
	out := t.TempDir()
	buf(t, "generate", "-o", out)
	generated := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(out, "proto"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(filepath.Join(out, "proto"), path)
		generated[rel] = true
		want, _ := os.ReadFile(path)
		got, err := os.ReadFile(rel)
		if err != nil {
			t.Errorf("%s is not committed (run make proto)", rel)
			return nil
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: the .proto changed since it was generated (run make proto)", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// No generated file without its .proto.
	_ = filepath.WalkDir("hermes", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".pb.go") && !generated[path] {
			t.Errorf("%s has no .proto any more (delete it)", path)
		}
		return nil
	})
	if len(generated) == 0 {
		t.Fatal("buf generated nothing")
	}
}

// TestNoBreakingChangeAgainstMain runs buf breaking (FILE rules) against the main branch, so a
// change that breaks the wire or generated-code compatibility of the API fails the tests.
func TestNoBreakingChangeAgainstMain(t *testing.T) {
	if err := exec.Command("git", "-C", "..", "rev-parse", "--verify", "--quiet", "refs/heads/main").Run(); err != nil {
		t.Skip("no main branch in this checkout to compare against")
	}
	buf(t, "breaking", "--against", ".git#branch=main")
}
