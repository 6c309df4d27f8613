//go:build linux

package redistest

import "syscall"

// sysProcAttr puts the child in its own process group (so the whole group can be signalled) and
// asks the kernel to SIGKILL it when the test binary dies, even if the binary is killed with
// SIGKILL and no t.Cleanup runs.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
