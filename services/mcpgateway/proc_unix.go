//go:build unix

package mcpgateway

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the server in a process group of its own, so that a server launched
// through a wrapper (npx, uvx, a shell script) can be stopped with everything it started.
func ownProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killProcessGroup kills the process group led by pid; a group already gone is fine.
func killProcessGroup(pid int) {
	if pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}
