package cluster

import "syscall"

// sysProcAttr puts the child in its own process group (so a kill reaches everything it
// started) and has the kernel kill it when the parent dies, so a test that crashes or times out
// leaves no process behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
