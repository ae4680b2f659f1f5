package mcpgateway_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/hermes-agent/hermes/services/mcpgateway"
)

func TestTmpDebugScenario(t *testing.T) {
	sc := os.Getenv("SCENARIO")
	if sc == "" {
		t.Skip()
	}
	dir := mcpgateway.NPMDir(t)
	h := startConformanceHermes(t)
	args := []string{filepath.Join(dir, "node_modules/@modelcontextprotocol/conformance/dist/index.js"), "server", "--url", h.mcpURL}
	if sc == "active" || sc == "all" || sc == "pending" {
		args = append(args, "--suite", sc)
	} else {
		args = append(args, "--scenario", sc, "--verbose")
	}
	cmd := exec.Command(mcpgateway.Node(t), args...)
	out, _ := cmd.CombinedOutput()
	t.Logf("%s", out)
}
