//go:build unix && !linux

package child

import (
	"errors"
	"syscall"
)

// sysProcAttr puts the child in a process group of its own. The
// parent-death signal exists only on Linux: elsewhere a child outlives an
// elector that is killed with SIGKILL.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

var errUnsupported = errors.New("not supported on this system")

// waitExitedNoReap is not available here: the child is reaped by
// exec.Cmd.Wait directly, and what remains of its process group is not
// killed after it exits (its id could already name another group).
func waitExitedNoReap(int) error { return errUnsupported }

// reapOrphans does nothing outside Linux.
func reapOrphans(map[int]struct{}) ([]int, error) { return nil, errUnsupported }

// reapSupported reports whether Reaper.Run can reap on this system.
const reapSupported = false
