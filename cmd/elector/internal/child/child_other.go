//go:build unix && !linux

package child

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// sysProcAttr puts the child in a process group of its own. The
// parent-death signal exists only on Linux: elsewhere a child outlives an
// elector that is killed with SIGKILL.
func sysProcAttr(bool, int) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// shimSupported reports whether Spec.Shim works here: only on Linux.
const shimSupported = false

// shimExe and shimArgs are not used outside Linux.
const shimExe = ""

func shimArgs(string, []string) []string { return nil }

// foregroundTerminal hands no terminal to the child outside Linux.
func foregroundTerminal(any) (int, bool) { return -1, false }

// reclaimTerminal is not used outside Linux.
func reclaimTerminal(int) {}

// RunShim is the shim of Spec.Shim, which exists only on Linux.
func RunShim([]string) int {
	fmt.Fprintf(os.Stderr, "elector: %s is internal to elector run on Linux\n", ShimArg)
	return 2
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
