package child

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"
)

// shimPdeathsig is the shim's parent-death signal: a real-time signal (glibc's SIGRTMIN+6)
// that nobody else sends, whose default action terminates (before exec, it kills the forked
// child). The kernel sends it whenever the shim is reparented: when the elector dies, and
// also when only the elector's forking thread dies first, as happens when the elector is
// SIGKILLed (its threads exit one by one), while the shim's parent pid is still the
// elector's. The shim acts on it only once its parent pid has changed, and never forwards
// it: with SIGTERM here, a command would get a SIGTERM, as if stopped gracefully, just
// before the SIGKILL of its tree.
const shimPdeathsig = syscall.Signal(40)

// shimArgs returns the argv of the shim that runs path with argv (argv[0] first).
func shimArgs(path string, argv []string) []string {
	return append([]string{shimExe, ShimArg, strconv.Itoa(os.Getpid()), path}, argv...)
}

// shimExe is the executable the shim is: this very program, even if its file was replaced.
const shimExe = "/proc/self/exe"

// rekillInterval is how often the shim walks /proc again while it kills the tree, to catch
// processes forked between a walk and the SIGKILL of their parent.
const rekillInterval = 5 * time.Millisecond

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of prctl(2).
const prSetChildSubreaper = 36

// RunShim is the shim: the program's main must call it, and exit with its result, when its
// first argument is ShimArg; args are the arguments after that. It starts nothing until the
// elector's go-ahead (shimStart on the control pipe, with the command's environment): it may
// be started ahead of a term, while the elector is a follower (see Prepare). If the control
// pipe ends first, or the elector dies (the parent-death signal with a changed parent pid),
// it exits without starting anything. After the go-ahead it runs the command as its child in
// a process group of the command's own (never the shim's, so that neither the command nor a
// signal to its group can kill the shim) and waits until the command and every descendant
// are gone, then exits as the command did (the same code, or death by the same signal).
//
// It is a child subreaper, so every orphaned descendant, whatever session or process group
// it moved to, becomes its child: it reaps them, and it can find all of them by walking
// /proc. It SIGKILLs every descendant when the command exits, when the elector asks (on its
// control pipe), and when the elector dies (the control pipe's EOF, or the parent-death
// signal with a changed parent pid). A signal the elector asks for on the control pipe, or
// that the shim receives itself, goes to the command's process group and to every
// descendant outside it, so that it reaches processes that called setsid or setpgid too.
func RunShim(args []string) int {
	// The command's parent-death signal follows the thread that forks it: this goroutine
	// keeps its thread for the shim's life.
	runtime.LockOSThread()
	if len(args) < 3 {
		fmt.Fprintf(os.Stderr, "elector: %s is internal to elector run and not for direct use\n", ShimArg)
		return 2
	}
	parent, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "elector: %s: bad parent pid %q\n", ShimArg, args[0])
		return 2
	}
	report := os.NewFile(shimReportFd, "report")
	for _, fd := range []int{shimControlFd, shimReportFd} {
		if _, err := fcntlGetfd(fd); err != nil {
			fmt.Fprintf(os.Stderr, "elector: %s: file descriptor %d: %v (run by elector run only)\n", ShimArg, fd, err)
			return 2
		}
		syscall.CloseOnExec(fd) // never inherited by the command
	}
	ctrl := bufio.NewReader(os.NewFile(shimControlFd, "control"))
	fail := func(err error) int {
		fmt.Fprintf(report, "%s %s\n", shimReportError, strings.ReplaceAll(err.Error(), "\n", " "))
		return 127
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return fail(fmt.Errorf("become a child subreaper: %w", errno))
	}
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs) // every signal: the shim must outlive whatever its group receives
	warmStart()
	env, ok := awaitStart(ctrl, sigs)
	if !ok {
		return 0 // given up, or the elector died: nothing was started
	}
	// The go-ahead may have been sent just before the elector died.
	if os.Getppid() != parent {
		return fail(errors.New("the elector exited before the command started"))
	}
	cmd, err := startCommand(args[1], args[2:], env)
	if err != nil {
		return fail(err)
	}
	s := &shim{self: os.Getpid(), parent: parent, cmd: cmd.Process.Pid, report: report}
	fmt.Fprintf(report, "%s %d\n", shimReportStarted, s.cmd)
	return s.loop(sigs, ctrl)
}

// awaitStart waits for the go-ahead on ctrl and returns the command's environment; ok is
// false when the control pipe ended (or carried anything else) first. It reads on the
// shim's own thread, with no goroutine between the pipe and the command's fork, which
// would cost the start a wake-up. The elector's death ends the pipe (the kernel closes its
// end). Signals that came meanwhile are dropped: there was no command to pass them to, and
// the parent-death signal is checked by the caller through the parent pid.
func awaitStart(ctrl *bufio.Reader, sigs <-chan os.Signal) (env []string, ok bool) {
	env, err := readStartMessage(ctrl)
	for {
		select {
		case <-sigs:
		default:
			return env, err == nil
		}
	}
}

// warmStart does ahead of the go-ahead what the command's start would otherwise do first: the
// os package's one-time check that pidfds work (pidfd_open, waitid, and a clone of a child
// that exits at once), which os.FindProcess runs as os.StartProcess does. A shim prepared
// ahead (Prepare) thus starts the command 0.1-0.2 ms sooner.
func warmStart() {
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Release()
	}
}

// startCommand starts path with argv and env as the shim's child, in a process group of
// its own, with the terminal's foreground if the shim's group has it.
func startCommand(path string, argv, env []string) (*exec.Cmd, error) {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if tty, ok := foregroundTerminal(os.Stdin); ok {
		attr.Foreground, attr.Ctty = true, tty // the elector gave the shim's group the terminal
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        argv,
		Env:         env,
		Stdin:       os.Stdin,
		Stdout:      os.Stdout,
		Stderr:      os.Stderr,
		SysProcAttr: attr,
	}
	return cmd, cmd.Start()
}

// shim is the state of RunShim once the command runs.
type shim struct {
	self, parent, cmd int
	report            *os.File
}

// shimWait is one result of wait4 in the shim.
type shimWait struct {
	pid  int
	ws   syscall.WaitStatus
	err  error
	gone bool // the command's exit, with no child left, was reported already: exit as it did
}

// loop supervises until no child is left, and returns (or dies) as the command did.
func (s *shim) loop(sigs <-chan os.Signal, ctrl *bufio.Reader) int {
	waits := make(chan shimWait, 16)
	go s.reap(waits)
	requests := make(chan syscall.Signal, 16)
	go readRequests(ctrl, requests)
	// A forwarded signal's /proc walk, for descendants that left the command's group, runs
	// here, in order, off the loop and at the lowest priority: a walk reads every process's
	// stat file (milliseconds of CPU on a busy node), while the loop must see the command's
	// exit the moment it comes, and the release and the next term's start follow it on the
	// same few CPUs. Nothing waits for these walks.
	walks := make(chan syscall.Signal, 64)
	go func() {
		runtime.LockOSThread() // nice applies to a thread: this one, until the shim exits
		_ = syscall.Setpriority(syscall.PRIO_PROCESS, syscall.Gettid(), 19)
		for n := range walks {
			signalDescendants(s.self, n, s.cmd)
		}
	}()

	var (
		status  *syscall.WaitStatus
		killing bool
		rekill  <-chan time.Time
	)
	startKilling := func() {
		if !killing {
			killing = true
			rekill = time.NewTicker(rekillInterval).C // runs until the shim exits
			if status == nil {
				// Most of the tree at once, before the walk; the group id is the unreaped
				// command's own.
				_ = syscall.Kill(-s.cmd, syscall.SIGKILL)
			}
		}
		signalDescendants(s.self, syscall.SIGKILL, 0)
	}
	forward := func(n syscall.Signal) {
		switch {
		case killing:
		case n == syscall.SIGKILL:
			startKilling()
		default:
			// The command is not reaped before killing starts: its group id is still its own.
			_ = syscall.Kill(-s.cmd, n)
			walks <- n
		}
	}
	for {
		select {
		case sig := <-sigs:
			if os.Getppid() != s.parent {
				startKilling() // the parent-death signal, or any signal after the elector died
				continue
			}
			if n, ok := sig.(syscall.Signal); ok && n != syscall.SIGCHLD && n != syscall.SIGURG && n != shimPdeathsig {
				forward(n) // SIGURG: the Go runtime's own preemption signal
			}
		case n := <-requests:
			forward(n)
		case <-rekill:
			signalDescendants(s.self, syscall.SIGKILL, 0)
		case w := <-waits:
			switch {
			case w.gone:
				return exitAs(w.ws)
			case w.err != nil:
				if status == nil {
					return 1 // cannot happen: the command is a child until reaped here
				}
				fmt.Fprintf(s.report, "%s %d\n", shimReportGone, uint32(*status)) // ECHILD: no descendant is left
				return exitAs(*status)
			case w.pid == s.cmd: // reaped with descendants left (reap)
				ws := w.ws
				status = &ws
				startKilling() // nothing the command started may outlive it
			}
		}
	}
}

// reap reaps the shim's children and reports their stops and continuations. The command's
// exit with no child left, the common end of a handover, is reported right here: no
// descendant is left (an orphan becomes the subreaper's child), so it needs no /proc walk,
// and the elector, which releases the lease on this report, waits for no hand-off to the
// loop's goroutine (a thread's wake-up); the loop then only exits. The command's exit with
// children left, the other reaped children and wait4's ECHILD go to the loop as they are.
func (s *shim) reap(waits chan<- shimWait) {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WUNTRACED|syscall.WCONTINUED|syscall.WALL, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			waits <- shimWait{err: err}
			return // ECHILD: no child is left
		case ws.Stopped():
			fmt.Fprintf(s.report, "%s %d %d\n", shimReportStopped, pid, int(ws.StopSignal()))
		case ws.Continued():
			fmt.Fprintf(s.report, "%s %d\n", shimReportContinued, pid)
		case pid == s.cmd && noChild():
			fmt.Fprintf(s.report, "%s %d\n", shimReportGone, uint32(ws))
			waits <- shimWait{pid: pid, ws: ws, gone: true}
			return
		default:
			waits <- shimWait{pid: pid, ws: ws}
		}
	}
}

// noChild reports whether the shim has no child left, reaped or not.
func noChild() bool {
	_, err := waitid(pAll, 0, syscall.WEXITED|syscall.WNOHANG|syscall.WNOWAIT)
	return errors.Is(err, syscall.ECHILD)
}

// readRequests reads the control pipe and sends each request on requests: a signal, SIGKILL
// for shimKill and for the pipe's end (the elector is gone).
func readRequests(r *bufio.Reader, requests chan<- syscall.Signal) {
	for {
		b, err := r.ReadByte()
		if err == nil && b == shimSignal {
			b, err = r.ReadByte()
			if err == nil && b != 0 {
				requests <- syscall.Signal(b)
			}
		}
		if err != nil || b == shimKill {
			requests <- syscall.SIGKILL
		}
		if err != nil {
			return
		}
	}
}

// signalDescendants sends sig to every descendant of root found in /proc, except those in
// process group skipGroup (which got it already; 0 skips none).
func signalDescendants(root int, sig syscall.Signal, skipGroup int) {
	for _, d := range descendants(root) {
		if skipGroup != 0 && d.pgid == skipGroup {
			continue
		}
		_ = syscall.Kill(d.pid, sig)
	}
}

// procEntry is a process as /proc/PID/stat shows it.
type procEntry struct {
	pid, ppid, pgid int
	start           uint64 // start time, in clock ticks after boot
}

// descendants returns every process whose chain of parents reaches root, from /proc.
func descendants(root int) []procEntry {
	dir, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer dir.Close()
	names, _ := dir.Readdirnames(-1)
	children := make(map[int][]procEntry)
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		if e, ok := readProcStat(pid); ok {
			children[e.ppid] = append(children[e.ppid], e)
		}
	}
	var out []procEntry
	queue := []int{root}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c.pid)
		}
	}
	return out
}

// readProcStat reads the parent, the process group and the start time of pid.
func readProcStat(pid int) (procEntry, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procEntry{}, false
	}
	// "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procEntry{}, false
	}
	// After it: state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
	// utime stime cutime cstime priority nice num_threads itrealvalue starttime ...
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return procEntry{}, false
	}
	ppid, err1 := strconv.Atoi(f[1])
	pgid, err2 := strconv.Atoi(f[2])
	start, err3 := strconv.ParseUint(f[19], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return procEntry{}, false
	}
	return procEntry{pid: pid, ppid: ppid, pgid: pgid, start: start}, true
}

// exitAs ends the shim the way ws says its command ended: with the same exit code, or by
// the same signal, so that the elector sees the command's own status.
func exitAs(ws syscall.WaitStatus) int {
	if !ws.Signaled() {
		return ws.ExitStatus()
	}
	sig := ws.Signal()
	// The command may have dumped core already; the shim's core is of no use.
	_ = syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{})
	// Go's handler would not die of SIGQUIT, SIGSEGV and the like as the kernel does:
	// restore the default action behind the runtime's back, then raise the signal.
	var act [4]uint64 // struct sigaction, zero: SIG_DFL, no flags, empty mask
	_, _, _ = syscall.RawSyscall6(syscall.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	_ = syscall.Kill(os.Getpid(), sig)
	time.Sleep(time.Second) // the signal is fatal; this is only in case it was not
	return 128 + int(sig)
}

// fcntlGetfd checks that fd is open.
func fcntlGetfd(fd int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}
