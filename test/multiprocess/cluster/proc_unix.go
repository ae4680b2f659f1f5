//go:build unix && !linux

package cluster

import "syscall"

// sysProcAttr puts the child in its own process group, so a kill reaches everything it started.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
