package child

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"
)

// subreaper is set once BecomeSubreaper made this process a child subreaper.
var subreaper atomic.Bool

// errNotSubreaper is killAdopted's error when this process is not a child subreaper: the
// orphans of a killed shim went to another process, where they cannot be found.
var errNotSubreaper = errors.New("this process is not a child subreaper: the processes a killed shim left were re-parented elsewhere")

// BecomeSubreaper makes this process a child subreaper (PR_SET_CHILD_SUBREAPER), so that a
// shim killed from outside leaves its orphans, the command's processes that left its
// process group among them, to this process, which kills and reaps them before the
// Process's Done (see checkShimTree). Every child of this process must then be started
// through this package, as with a Reaper: any other child would be taken for one of those
// orphans once a shim is killed, if it started after that shim. Orphans of a live shim still
// go to the shim, itself a subreaper; without a shim nothing changes. It fails outside Linux.
func BecomeSubreaper() error { return setSubreaper(true) }

// setSubreaper sets or clears this process's child subreaper attribute (tests clear it).
func setSubreaper(on bool) error {
	var arg uintptr
	if on {
		arg = 1
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, arg, 0); errno != 0 {
		return fmt.Errorf("set the child subreaper attribute to %v: %w", on, errno)
	}
	subreaper.Store(on)
	return nil
}

// adoptedPoll is how often killAdopted walks /proc again while adopted processes die.
const adoptedPoll = time.Millisecond

// killAdopted SIGKILLs every process that this process adopted from the killed shim, and
// every descendant of those, and reaps the adopted ones, until a walk of /proc finds no
// child of this process that it did not start (forks) and that started no earlier than the
// shim: every descendant of the shim then is gone, as each one's chain of parents would
// reach this process through such a child. It reaps only those pids, one by one, never
// wait4(-1), which would take the status of a Process's child from exec.Cmd. It returns an
// error when that cannot be made sure of within timeout, or at all.
func killAdopted(shim int, timeout time.Duration) error {
	if !subreaper.Load() {
		return errNotSubreaper
	}
	self := os.Getpid()
	var since uint64 // the shim's start time: its descendants started no earlier
	if e, ok := readProcStat(shim); ok {
		since = e.start
	}
	deadline := time.Now().Add(timeout)
	for {
		adopted, err := killAdoptedOnce(self, since)
		if err != nil {
			return err
		}
		if len(adopted) == 0 {
			return nil
		}
		for _, pid := range adopted {
			var ws syscall.WaitStatus
			// A dead one is reaped now; a live one is looked at again at the next walk. ECHILD:
			// a Reaper (PID 1) reaped it first.
			_, _ = syscall.Wait4(pid, &ws, syscall.WNOHANG|syscall.WALL, nil)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("adopted processes %v still there %v after their SIGKILL", adopted, timeout)
		}
		time.Sleep(adoptedPoll)
	}
}

// killAdoptedOnce walks /proc once, holding the lock of forks so that no child of this
// package's is forked meanwhile, and SIGKILLs each child of self that this package did not
// start and that started at since or later, and every descendant of it. It returns the
// pids of those children (zombies included, which the caller reaps).
func killAdoptedOnce(self int, since uint64) ([]int, error) {
	forks.Lock()
	defer forks.Unlock()
	table, err := procTable()
	if err != nil {
		return nil, err
	}
	var adopted []int
	for _, c := range table[self] {
		if forks.pids[c.pid] > 0 || c.start < since {
			continue
		}
		adopted = append(adopted, c.pid)
		// Parent first: a SIGKILLed process forks no more, so a child forked meanwhile shows
		// up at the next walk, adopted in its turn once its parent died.
		_ = syscall.Kill(c.pid, syscall.SIGKILL)
		queue := []int{c.pid}
		for len(queue) > 0 {
			p := queue[0]
			queue = queue[1:]
			for _, d := range table[p] {
				_ = syscall.Kill(d.pid, syscall.SIGKILL)
				queue = append(queue, d.pid)
			}
		}
	}
	return adopted, nil
}

// procTable returns every process of /proc by parent pid; an error when /proc cannot be
// listed (a process that exits during the walk is left out).
func procTable() (map[int][]procEntry, error) {
	dir, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	defer dir.Close()
	names, err := dir.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	table := make(map[int][]procEntry)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if e, ok := readProcStat(pid); ok {
			table[e.ppid] = append(table[e.ppid], e)
		}
	}
	return table, nil
}
