package child

import (
	"encoding/binary"
	"errors"
	"os"
	"os/signal"
	"syscall"
	"unsafe"
)

// sysProcAttr puts the child in a process group of its own and has the
// kernel signal it when the forking thread (see the package comment) exits:
// SIGKILL for the command, shimPdeathsig for a shim, which kills the tree
// before it exits. With tty ≥ 0 the group gets that terminal's foreground.
func sysProcAttr(shim bool, tty int) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if shim {
		a.Pdeathsig = shimPdeathsig
	}
	if tty >= 0 {
		a.Foreground, a.Ctty = true, tty
	}
	return a
}

// shimSupported reports whether Spec.Shim works here.
const shimSupported = true

// foregroundTerminal returns the file descriptor of stdin if it is a
// terminal whose foreground process group is this process's: the child's
// group is then given the foreground, so that it can read from the terminal
// (a background group reading it is stopped by SIGTTIN) and gets Ctrl-C and
// Ctrl-Z as a shell's foreground job does. A process in the background
// (started with &) does not take the terminal from its shell.
func foregroundTerminal(stdin any) (int, bool) {
	f, ok := stdin.(*os.File)
	if !ok || f == nil {
		return -1, false
	}
	fd := int(f.Fd())
	var pgrp int32
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TIOCGPGRP, uintptr(unsafe.Pointer(&pgrp))); errno != 0 {
		return -1, false // not a terminal, or not this session's
	}
	return fd, int(pgrp) == syscall.Getpgrp()
}

// reclaimTerminal gives the foreground of the terminal tty back to this
// process's group after the child's group had it. This process is in the
// background meanwhile, where tcsetpgrp raises SIGTTOU unless it is ignored.
func reclaimTerminal(tty int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	pgrp := int32(syscall.Getpgrp())
	_, _, _ = syscall.Syscall(syscall.SYS_IOCTL, uintptr(tty), syscall.TIOCSPGRP, uintptr(unsafe.Pointer(&pgrp)))
}

// idtype_t values of waitid(2); package syscall does not define them.
const (
	pAll = 0
	pPID = 1
)

// siginfoPidOffset is where si_pid lies in the siginfo_t that waitid fills:
// after si_signo, si_errno and si_code, with the union aligned to a pointer.
const siginfoPidOffset = (3*4 + unsafe.Sizeof(uintptr(0)) - 1) &^ (unsafe.Sizeof(uintptr(0)) - 1)

// waitid calls waitid(2) and returns the pid of the child it reports, 0 when
// WNOHANG found none. EINTR is retried.
func waitid(idtype, id, options int) (int, error) {
	var info [16]uint64 // a 128-byte, 8-aligned siginfo_t
	for {
		_, _, errno := syscall.Syscall6(syscall.SYS_WAITID, uintptr(idtype), uintptr(id),
			uintptr(unsafe.Pointer(&info)), uintptr(options), 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		b := (*[128]byte)(unsafe.Pointer(&info))
		return int(int32(binary.NativeEndian.Uint32(b[siginfoPidOffset:]))), nil
	}
}

// waitExitedNoReap blocks until the child pid has exited, leaving it a
// zombie for exec.Cmd.Wait to reap.
func waitExitedNoReap(pid int) error {
	_, err := waitid(pPID, pid, syscall.WEXITED|syscall.WNOWAIT)
	return err
}

// reapOrphans reaps every exited child of this process that is not in
// supervised, and stops at the first one that is: that one belongs to its
// Process, which reaps it soon and then calls Reaper.forget, which wakes the
// Reaper again. It returns the pids it reaped.
func reapOrphans(supervised map[int]struct{}) ([]int, error) {
	var reaped []int
	for {
		pid, err := waitid(pAll, 0, syscall.WEXITED|syscall.WNOHANG|syscall.WNOWAIT)
		if errors.Is(err, syscall.ECHILD) || (err == nil && pid == 0) {
			return reaped, nil // no children, or none has exited
		}
		if err != nil {
			return reaped, err
		}
		if _, ok := supervised[pid]; ok {
			return reaped, nil
		}
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(pid, &ws, syscall.WNOHANG, nil)
		switch {
		case errors.Is(err, syscall.EINTR) || errors.Is(err, syscall.ECHILD):
			// Interrupted, or reaped by someone else meanwhile: ask again.
		case err != nil:
			return reaped, err
		case got == pid:
			reaped = append(reaped, pid)
		}
	}
}

// reapSupported reports whether Reaper.Run can reap on this system.
const reapSupported = true
