//go:build !unix

package mcpgateway

import (
	"os"
	"os/exec"
)

func ownProcessGroup(*exec.Cmd) {}

func killProcessGroup(pid int) {
	if p, err := os.FindProcess(pid); err == nil && pid > 0 {
		_ = p.Kill()
	}
}
