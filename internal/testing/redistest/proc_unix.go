//go:build unix && !linux

package redistest

import "syscall"

// sysProcAttr puts the child in its own process group. Pdeathsig exists only on Linux; elsewhere a
// child can outlive a test binary that is killed before its t.Cleanup functions run.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
