package mcpgateway

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hermes-agent/hermes/internal/testenv"
	pb "github.com/hermes-agent/hermes/proto/hermes/mcpgateway/v1"
)

func TestIsPackageRunner(t *testing.T) {
	for _, tc := range []struct {
		cmd  string
		args []string
		want bool
	}{
		{"npx", []string{"-y", "@modelcontextprotocol/server-everything"}, true},
		{"/usr/local/bin/uvx", []string{"mcp-server-time"}, true},
		{"bunx", nil, true},
		{"NPX.CMD", nil, true},
		{"pnpm", []string{"dlx", "x"}, true},
		{"pnpm", []string{"exec", "x"}, false},
		{"yarn", []string{"dlx", "x"}, true},
		{"pipx", []string{"run", "x"}, true},
		{"uv", []string{"tool", "run", "x"}, true},
		{"uv", []string{"run", "server.py"}, false},
		{"npm", []string{"exec", "x"}, true},
		{"node", []string{"server.js"}, false},
		{"python3", []string{"-m", "server"}, false},
	} {
		if got := isPackageRunner(&pb.StdioTransport{Command: tc.cmd, Args: tc.args}); got != tc.want {
			t.Errorf("isPackageRunner(%s %v) = %v, want %v", tc.cmd, tc.args, got, tc.want)
		}
	}
}

// A stdio server started through a package runner gets the runner-start timeout on its first
// connection (a cold npx downloads the package first), the log says it is still waiting, and the
// timeout's error names the cause and the flag; any other server gets the connect timeout.
func TestRunnerStartTimeout(t *testing.T) {
	for _, tc := range []struct {
		name     string
		wantFlag string
		minWait  time.Duration
	}{
		{"npx", "--mcpgateway.runner-start-timeout", 1500 * time.Millisecond},
		{"slow-server", "--mcpgateway.connect-timeout", 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A server that never answers the handshake, as a runner still downloading looks.
			script := filepath.Join(t.TempDir(), tc.name)
			if err := os.WriteFile(script, []byte("#!/bin/sh\nexec sleep 60\n"), 0o700); err != nil {
				t.Fatal(err)
			}
			cfg := testConfig()
			cfg.ConnectTimeout = 300 * time.Millisecond
			cfg.RunnerStartTimeout = 1500 * time.Millisecond
			cfg.ReconnectMin, cfg.ReconnectMax = time.Minute, time.Minute
			cfg.StdioAllow = []string{script}
			var logs lockedBuffer
			g := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			g.progressEvery = 400 * time.Millisecond
			t.Cleanup(g.Close)
			began := time.Now()
			if _, err := g.connect(&pb.ServerSpec{Name: "slow", Prefix: "slow", Transport: &pb.ServerSpec_Stdio{Stdio: &pb.StdioTransport{Command: script}}}, false); err != nil {
				t.Fatal(err)
			}
			var last string
			testenv.WaitFor(t, 30*time.Second, "the first attempt to fail", func() bool {
				for _, s := range g.Servers() {
					if s.GetState() == pb.ServerState_SERVER_STATE_FAILED {
						last = s.GetLastError()
						return true
					}
				}
				return false
			})
			if waited := time.Since(began); waited < tc.minWait {
				t.Errorf("failed after %s, want at least %s", waited, tc.minWait)
			}
			if !strings.Contains(last, tc.wantFlag) {
				t.Errorf("error %q does not name %s", last, tc.wantFlag)
			}
			if runner := tc.name == "npx"; runner != strings.Contains(last, "downloading the package") {
				t.Errorf("error %q: the package-download cause is named %v, want %v", last, !runner, runner)
			}
			if tc.name == "npx" && logs.count("MCP server still starting") == 0 {
				t.Errorf("no progress line while waiting; logs:\n%s", logs.b.String())
			}
			testenv.WaitFor(t, 5*time.Second, "the failure's WARN line", func() bool { return logs.count("MCP server not connected; retrying") == 1 })
		})
	}
}
