// Package child supervises the one child process of `elector run`.
//
// The child runs in its own process group, so that a signal reaches it and
// everything it started. On Linux it dies with the elector, even when the
// elector is killed with SIGKILL, through the parent-death signal
// (Pdeathsig). When the child has exited, whatever is left of its process
// group is killed too: a singleton job must not leave a background process
// running unsupervised, possibly next to the next leader's job.
//
// # The shim
//
// A process group does not hold everything a command starts: a worker that
// called setsid(2) or setpgid(2), or a double-forked daemon, is outside it,
// and the parent-death signal kills only the child itself. With Spec.Shim
// (Linux) the child is therefore a shim: this program re-executed through
// /proc/self/exe with ShimArg, which runs RunShim. The shim is alone in a
// process group of its own, is a child subreaper (every orphaned descendant
// becomes its child, whatever its group or session) and runs the command as
// its own child in another process group, the command's (the terminal's
// foreground passes on to it). So neither the command (`kill -9 0`) nor a stop
// signal, SIGKILL included, can reach the shim: Process.Signal asks the shim
// over its control pipe, and the shim sends the signal to the command's group
// and to every descendant outside it, found by walking /proc. The shim
// SIGKILLs every descendant when the command exits, when Process.Kill (or the
// end of KillGrace) or a SIGKILL stop signal asks it to, and when the elector
// dies (its parent-death signal, or the control pipe's end); it reports stops
// of its children on a second pipe, which Process logs; it exits only once no
// child is left (so no descendant is), reports that ("gone"), and exits as
// the command did, with the same exit code or killed by the same signal. A
// shim that ends without that report was killed from outside: its orphans, the
// command's processes outside the command's group among them, are then
// re-parented to the nearest child subreaper above it. Process SIGKILLs the
// command's group and, when this process is that subreaper (BecomeSubreaper),
// every process the shim left, found by walking /proc for children of this
// process that it did not start, and reaps them, before Done; it sets
// ExitStatus.Err, to ErrSurvivors when it cannot make sure that none is left.
//
// The shim starts the command only on a go-ahead on its control pipe, which
// carries the command's environment. Start sends it at once; Prepare starts a
// shim ahead (while `elector run` follows) and Standby.Start sends it when the
// term begins, so that the term's start costs the command's fork and exec only,
// not the start of this program. A shim that never gets the go-ahead exits
// without starting anything when its control pipe ends.
//
// # Pdeathsig and threads
//
// Linux sends the parent-death signal when the *thread* that forked the
// child exits, not when the process does. The Go runtime may end the thread
// a goroutine ran on (it does so when a goroutine exits while locked to its
// thread). Start therefore forks from a goroutine that it locks to its OS
// thread, and that goroutine stays on that thread, blocked in waitid(2),
// until the child has exited. The child can never outlive the elector nor be
// killed early because some other goroutine's thread went away. (The kernel
// clears the parent-death signal when the child executes a set-user-ID or
// set-group-ID program.) The shim forks the command from a locked thread too.
//
// # Zombies when running as PID 1
//
// As a container's entrypoint the elector is PID 1 and inherits every
// orphaned process of the container; nobody else reaps them. A Reaper does
// that without stealing the exit status of the supervised child: see Reaper.
//
// # Terminal
//
// The command runs in a process group of its own. When Stdin is a terminal
// whose foreground group is the elector's (Linux), the command's group gets
// the foreground while the child runs (with a shim, the elector hands it to
// the shim's group and the shim on to the command's), and the elector's group
// gets it back after the child exited: the child can read from the terminal, and Ctrl-C and
// Ctrl-Z reach it as they reach a shell's foreground job. Otherwise (the
// elector in the background) a child that reads from the terminal is stopped
// by SIGTTIN, which the shim reports and Process logs. Containers normally
// have no terminal.
//
// It owns the child's process group, its signals and its exit status. It must not know of
// leases or terms: `elector run` tells it when to start and stop.
package child

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// waitDelay bounds how long Wait keeps copying the output of a child that has
// exited, when Stdout or Stderr is not an *os.File and a process outside the
// child's group still holds the pipe.
const waitDelay = 2 * time.Second

// Spec describes the child to start.
type Spec struct {
	// Path is the command: a name looked up in PATH (see LookPath) or a path
	// containing a slash. It is also the child's argv[0].
	Path string
	// Args are the arguments after the command.
	Args []string
	// Env is the child's whole environment, as "KEY=value" entries. Nil
	// means the elector's own environment (os.Environ()).
	Env []string
	// Stdin, Stdout and Stderr are the child's standard streams. An *os.File
	// (such as os.Stdin) is passed to the child directly; any other value is
	// copied through a pipe. Nil means the null device.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// StopSignal is what Stop sends to the child's process group first;
	// zero means SIGTERM.
	StopSignal syscall.Signal
	// KillGrace is how long Stop waits after StopSignal before it sends
	// SIGKILL to the group. Zero or less means SIGKILL right away.
	KillGrace time.Duration
	// Reaper, when not nil, is the running Reaper of this process. It must be
	// set whenever a Reaper runs, so that the Reaper leaves this child to
	// its Process.
	Reaper *Reaper
	// Shim runs the command under the shim on Linux (see the package
	// comment): this program re-executed with ShimArg, whose main must then
	// call RunShim. Every descendant of the command, including those that
	// left its process group or session, then dies with the command, with
	// the elector, and at SIGKILL after KillGrace. Ignored elsewhere.
	Shim bool
}

// ExitStatus is how the child ended.
type ExitStatus struct {
	// Code is the exit code when the child exited by itself, -1 when a
	// signal killed it.
	Code int
	// Signal is the signal that killed the child, 0 when it exited.
	Signal syscall.Signal
	// Killed reports that Stop had to escalate to SIGKILL because the child
	// outlived StopSignal by KillGrace (or Stop's context ended first).
	Killed bool
	// Err is a problem with the child's I/O after it was started (for
	// example an output copy that did not finish within a short delay after
	// the child exited); Code and Signal are still valid.
	Err error
}

// ExitCode returns the code a shell would report: the exit code, or 128+N
// for a child killed by signal N.
func (s ExitStatus) ExitCode() int {
	if s.Signal != 0 {
		return 128 + int(s.Signal)
	}
	return s.Code
}

// String describes the status for logs, e.g. "exit code 3" or "killed by
// signal 15 (terminated), exit code 143".
func (s ExitStatus) String() string {
	var out string
	if s.Signal != 0 {
		out = fmt.Sprintf("killed by signal %d (%v), exit code %d", int(s.Signal), s.Signal, s.ExitCode())
	} else {
		out = fmt.Sprintf("exit code %d", s.Code)
	}
	if s.Killed {
		out += " after the stop grace period"
	}
	if s.Err != nil {
		out += ": " + s.Err.Error()
	}
	return out
}

// LookPathError reports a command that cannot be found or is not an
// executable file. It is a usage error: the elector checks the command with
// LookPath before it campaigns for leadership.
type LookPathError struct {
	// Name is the command as given.
	Name string
	// Err is why it cannot be used, e.g. exec.ErrNotFound or fs.ErrPermission.
	Err error
}

// Error returns e.g. `command "frobnicate": executable file not found in $PATH`.
func (e *LookPathError) Error() string { return fmt.Sprintf("command %q: %v", e.Name, e.Err) }

// Unwrap returns the cause.
func (e *LookPathError) Unwrap() error { return e.Err }

// LookPath resolves name like a shell (without shell features): a name
// without a slash is searched in PATH, a name with a slash is used as it is.
// Either way the result must be an executable file. Errors are *LookPathError.
func LookPath(name string) (string, error) {
	if name == "" {
		return "", &LookPathError{Name: name, Err: errors.New("empty command")}
	}
	path, err := exec.LookPath(name)
	if err != nil {
		var ee *exec.Error
		if errors.As(err, &ee) {
			err = ee.Err
		}
		return "", &LookPathError{Name: name, Err: err}
	}
	return path, nil
}

// Process is a started child. Its methods are safe for concurrent use.
type Process struct {
	spec   Spec
	cmd    *exec.Cmd
	pid    int        // the child: the shim, or the command without one
	cmdPid int        // the command
	pipes  *shimPipes // nil without a shim
	// direct: the child's stdin, stdout and stderr are files (or nil), which exec.Cmd copies
	// nothing to or from; a shim's report of the command's tree gone then finishes the
	// Process without waiting for the shim's own exit (see finish).
	direct bool
	tty    int // the terminal whose foreground the child's group got, -1: none
	done   chan struct{}

	reportsDone chan struct{} // with a shim: closed when its reports have all been read
	startRes    chan error    // with a shim: its first report, nil once the command runs
	begun       atomic.Bool   // with a shim: the go-ahead was sent
	cmdStarted  atomic.Bool   // with a shim: it reported the command started
	treeGone    atomic.Bool   // the shim reported the command and its descendants reaped

	mu       sync.Mutex
	exited   bool // the child has exited, or the shim reported the command's tree gone: nothing is left to signal
	finished bool // status is set and done closed
	killed   bool // Stop escalated to SIGKILL while the child was running
	status   ExitStatus
	ctxStop  func() bool // unregisters the stop-on-ctx-done callback
	backup   *time.Timer // SIGKILL of the group should the shim not act on a kill request

	stopOnce sync.Once
}

// Start starts the child described by spec and returns once it runs. The
// command is resolved with LookPath first (a *LookPathError if that fails).
//
// When ctx is done before the child exits, the child is stopped as by Stop
// (StopSignal, KillGrace, SIGKILL). Start itself fails if ctx is already done.
func Start(ctx context.Context, spec Spec) (*Process, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start %q: %w", spec.Path, err)
	}
	p, err := newProcess(spec)
	if err != nil {
		return nil, err
	}
	if err := p.fork(); err != nil {
		return nil, fmt.Errorf("start %q: %w", spec.Path, err)
	}
	if p.pipes != nil {
		if _, err := p.begin(spec.Env); err != nil {
			return nil, fmt.Errorf("start %q: %w", spec.Path, err)
		}
	}
	p.watch(ctx)
	return p, nil
}

// newProcess resolves spec's command and prepares the exec.Cmd that starts it: the shim's
// when spec asks for one and this system has it.
func newProcess(spec Spec) (*Process, error) {
	path, err := LookPath(spec.Path)
	if err != nil {
		return nil, err
	}
	if spec.StopSignal == 0 {
		spec.StopSignal = syscall.SIGTERM
	}
	argv := append([]string{spec.Path}, spec.Args...)
	cmd := &exec.Cmd{
		Path:      path,
		Args:      argv,
		Env:       spec.Env,
		Stdin:     spec.Stdin,
		Stdout:    spec.Stdout,
		Stderr:    spec.Stderr,
		WaitDelay: waitDelay,
	}
	p := &Process{spec: spec, cmd: cmd, tty: -1, done: make(chan struct{}),
		direct: isFile(spec.Stdin) && isFile(spec.Stdout) && isFile(spec.Stderr)}
	if fd, ok := foregroundTerminal(spec.Stdin); ok {
		p.tty = fd
	}
	if spec.Shim && shimSupported {
		if _, err := os.Stat(shimExe); err != nil {
			// Without /proc the shim could neither start nor find descendants.
			klog.Warningf("Running the command without the shim (%v): descendants that leave its process group are not killed with it", err)
		} else {
			p.pipes = &shimPipes{} // created by fork
			cmd.Path, cmd.Args = shimExe, shimArgs(path, argv)
		}
	}
	return p, nil
}

// fork starts the child: the command, or a shim that waits for begin. It returns once the
// child runs.
func (p *Process) fork() error {
	if p.pipes != nil {
		pipes, err := newShimPipes()
		if err != nil {
			return err
		}
		p.pipes, p.reportsDone, p.startRes = pipes, make(chan struct{}), make(chan error, 1)
		p.cmd.ExtraFiles = []*os.File{pipes.shimCtrl, pipes.shimReport} // fds 3 and 4
	}
	p.cmd.SysProcAttr = sysProcAttr(p.pipes != nil, p.tty)
	started := make(chan error, 1)
	go p.run(started)
	if err := <-started; err != nil {
		if p.pipes != nil {
			p.pipes.closeAll()
		}
		return err
	}
	p.cmdPid = p.pid
	if p.pipes != nil {
		p.pipes.closeShimEnds()
		go p.readReports(bufio.NewReader(p.pipes.report))
	}
	return nil
}

// begin gives a forked shim the go-ahead to start the command with env (nil: this
// process's environment) and waits until the command runs. sent is false when the shim
// had exited before the go-ahead could reach it: it started nothing.
func (p *Process) begin(env []string) (sent bool, err error) {
	if env == nil {
		env = os.Environ()
	}
	select {
	case <-p.done:
		return false, errors.New("the shim exited before it was told to start the command")
	default:
	}
	p.begun.Store(true)
	if _, err := p.pipes.ctrl.Write(startMessage(env)); err != nil {
		// EPIPE: the shim, the only reader, is gone without the whole go-ahead.
		p.begun.Store(false)
		p.Wait()
		return false, fmt.Errorf("tell the shim to start the command: %w", err)
	}
	if err := <-p.startRes; err != nil {
		if st := p.Wait(); errors.Is(st.Err, ErrSurvivors) {
			err = fmt.Errorf("%w (%w)", err, st.Err) // the shim may have started the command before it was killed
		}
		return true, err
	}
	return true, nil
}

// watch stops the child as Stop does once ctx is done.
func (p *Process) watch(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { p.Stop(context.Background()) })
	p.mu.Lock()
	p.ctxStop = stop
	p.mu.Unlock()
	select {
	case <-p.done: // exited already: run could not unregister the callback
		stop()
	default:
	}
}

// run starts the child and supervises it until it has been reaped. It owns
// the OS thread the child was forked from for as long as the child lives;
// see the package comment.
func (p *Process) run(started chan<- error) {
	runtime.LockOSThread()
	if err := p.start(); err != nil {
		runtime.UnlockOSThread()
		started <- err
		return
	}
	started <- nil

	// Wait for the exit without reaping: while the child is a zombie its
	// pid, and so its process group id, cannot be reused, which makes the
	// last group kill below and any concurrent Signal safe.
	waitErr := waitExitedNoReap(p.pid)
	runtime.UnlockOSThread()
	var treeErr error
	if waitErr == nil {
		p.markExited()
		// Kill whatever is left of the child's process group.
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		treeErr = p.checkShimTree()
	}
	err := p.cmd.Wait() // reaps, and finishes copying I/O
	forgetFork(p.pid)
	if waitErr != nil {
		p.markExited()
	}
	p.mu.Lock()
	if p.backup != nil {
		p.backup.Stop()
	}
	if p.pipes != nil {
		p.pipes.ctrl.Close()
	}
	p.mu.Unlock()
	if r := p.spec.Reaper; r != nil {
		r.forget(p.pid)
	}
	st := ExitStatus{Code: 1}
	if ps := p.cmd.ProcessState; ps != nil {
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
			st = statusOf(ws)
		} else {
			st.Code = ps.ExitCode()
		}
	}
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		st.Err = err
	}
	if treeErr != nil {
		st.Err = errors.Join(st.Err, treeErr)
	}
	p.finish(st)
}

// statusOf is how a process that ended with ws ended.
func statusOf(ws syscall.WaitStatus) ExitStatus {
	if ws.Signaled() {
		return ExitStatus{Code: -1, Signal: ws.Signal()}
	}
	return ExitStatus{Code: ws.ExitStatus()}
}

// finish records how the command ended and closes done, once: when the child has been
// reaped, or, for a direct Process, as soon as its shim reports the command's tree gone
// with the command's status. Nothing of the command is left then; the shim exits as the
// command did a moment later, and its exit (the teardown of a Go process, 1-2 ms on a
// small VM) is off the path of the release that follows. With I/O copied by exec.Cmd the
// copy ends only with the shim's exit, so such a Process finishes then.
func (p *Process) finish(st ExitStatus) {
	p.mu.Lock()
	if p.finished {
		p.mu.Unlock()
		return
	}
	p.finished, p.exited = true, true
	st.Killed = p.killed
	p.status = st
	stop := p.ctxStop
	p.mu.Unlock()
	if p.tty >= 0 {
		reclaimTerminal(p.tty) // before done: a next term may give the terminal to its command
	}
	close(p.done)
	if stop != nil {
		stop()
	}
}

// isFile reports whether exec.Cmd passes f to the child as it is, copying nothing.
func isFile(f any) bool {
	switch f.(type) {
	case nil, *os.File:
		return true
	}
	return false
}

// errShimKilled is the status error of a shim that died before it reported the command's
// tree gone, when this process killed and reaped every process the shim left (see
// BecomeSubreaper).
var errShimKilled = errors.New("the shim was killed before the command's processes were all gone; every process it left was killed")

// ErrSurvivors is in ExitStatus.Err, and in the error of Start and Standby.Start, when the
// shim was killed from outside (by pid, `kill -9 -1`, the OOM killer) before it reported
// the command's tree gone, and this process could not make sure that every process the
// command started is gone: it is not a child subreaper (BecomeSubreaper), /proc cannot be
// read, or an adopted process did not die within adoptedKillTimeout. Some of them may still
// run: whoever started the command must not let another one start elsewhere on the strength
// of this exit (`elector run` then exits without releasing its lease, which expires).
var ErrSurvivors = errors.New("the shim was killed before the command's processes were all gone, and they could not all be killed: some may still run")

// adoptedKillTimeout bounds how long checkShimTree waits for the processes a killed shim
// left, SIGKILLed, to die before it reports ErrSurvivors. A SIGKILLed process dies in
// microseconds to milliseconds; one in uninterruptible sleep (a hung NFS read) may not die
// at all.
const adoptedKillTimeout = 5 * time.Second

// checkShimTree waits, once a shim has exited, until its reports are read. If the shim
// never reported the command's tree gone (something outside the elector killed it), it
// SIGKILLs the command's own process group and every process the shim left, which this
// process adopted as a child subreaper, and reaps them (killAdopted): errShimKilled once
// none is left, ErrSurvivors when that cannot be made sure of. With no shim, or a shim that
// reported the tree gone or never got the go-ahead, it returns nil. Nothing is logged
// before the kills.
func (p *Process) checkShimTree() error {
	if p.pipes == nil {
		return nil
	}
	<-p.reportsDone // the shim has exited: its report pipe ends now
	if p.treeGone.Load() || !p.begun.Load() {
		return nil // a shim that exits before the go-ahead started nothing
	}
	_ = syscall.Kill(-p.cmdPid, syscall.SIGKILL)
	// The shim is a zombie until cmd.Wait: its pid, and so its start time, are still its own.
	if err := killAdopted(p.pid, adoptedKillTimeout); err != nil {
		err = fmt.Errorf("%w: %w", ErrSurvivors, err)
		klog.ErrorS(err, "The command's process supervisor was killed; processes of the command may still run", "shimPid", p.pid, "commandPid", p.cmdPid)
		return err
	}
	klog.ErrorS(errShimKilled, "The command's process supervisor was killed", "shimPid", p.pid, "commandPid", p.cmdPid)
	return errShimKilled
}

// markExited makes Signal refuse to signal the child's pid or group.
func (p *Process) markExited() {
	p.mu.Lock()
	p.exited = true
	p.mu.Unlock()
}

// start forks the child; with a Reaper, under the Reaper's lock, so that the
// Reaper cannot reap the child before it is registered as supervised.
func (p *Process) start() error {
	if r := p.spec.Reaper; r != nil {
		r.mu.Lock()
		defer r.mu.Unlock()
	}
	forks.Lock()
	defer forks.Unlock()
	if err := p.cmd.Start(); err != nil {
		return err
	}
	p.pid = p.cmd.Process.Pid
	forks.pids[p.pid]++
	if r := p.spec.Reaper; r != nil {
		r.supervised[p.pid] = struct{}{}
	}
	return nil
}

// forks are the children this package started and has not reaped yet, by pid (a count, in
// case a reaped pid is reused before it is forgotten). Every fork registers under the lock,
// so that killAdopted, which holds it while it walks /proc, tells them from the orphans
// this process adopted: any other child of this process must be one of those (as for the
// Reaper, a child subreaper must start its children through this package).
var forks = struct {
	sync.Mutex
	pids map[int]int
}{pids: make(map[int]int)}

// forgetFork unregisters pid once its Process reaped it.
func forgetFork(pid int) {
	forks.Lock()
	defer forks.Unlock()
	if forks.pids[pid]--; forks.pids[pid] <= 0 {
		delete(forks.pids, pid)
	}
}

// Pid returns the child's process id: the shim's with Spec.Shim (on Linux),
// which is alone in its process group, else the command's.
func (p *Process) Pid() int { return p.pid }

// Shimmed reports whether the command runs under the shim, which kills every
// descendant of the command (found by walking /proc) with it; without it, only
// the command's process group is killed.
func (p *Process) Shimmed() bool { return p.pipes != nil }

// CommandPid returns the process id of the command itself, which is also the
// id of the command's process group.
func (p *Process) CommandPid() int { return p.cmdPid }

// Done returns a channel that is closed when the child has exited and its
// status is known; with a shim and no I/O copied (Spec's Stdin, Stdout and Stderr
// files or nil), as soon as the command and every descendant are gone, while the shim
// itself may still be exiting.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait waits until the child has exited and returns how it ended.
func (p *Process) Wait() ExitStatus {
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Signal sends sig to the command's process group (and to the command itself,
// should it have left its group). With a shim, the shim does so, and sends sig
// to every descendant outside the group as well; SIGKILL then kills them all
// as Kill does. It returns os.ErrProcessDone once the child has exited.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return os.ErrProcessDone
	}
	if p.pipes != nil {
		msg := []byte{shimSignal, byte(sig)}
		if sig == syscall.SIGKILL {
			msg = []byte{shimKill}
		}
		if _, err := p.pipes.ctrl.Write(msg); err == nil {
			return nil
		}
		// The shim is exiting: what is left is its own process group.
	}
	return p.signalLocked(sig)
}

// signalLocked sends sig to the child's process group: the command's, or
// the shim's, which holds the shim alone.
func (p *Process) signalLocked(sig syscall.Signal) error {
	if p.exited {
		return os.ErrProcessDone
	}
	err := syscall.Kill(-p.pid, sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %v to process group %d: %w", sig, p.pid, err)
	}
	// The child normally leads its group; if it moved to another group or
	// session, signal it on its own as well.
	if pgid, gerr := syscall.Getpgid(p.pid); gerr == nil && pgid != p.pid {
		if kerr := syscall.Kill(p.pid, sig); kerr != nil && !errors.Is(kerr, syscall.ESRCH) {
			return fmt.Errorf("signal %v to process %d: %w", sig, p.pid, kerr)
		}
	} else if err != nil {
		return fmt.Errorf("signal %v to process group %d: %w", sig, p.pid, err)
	}
	return nil
}

// Kill sends SIGKILL at once to the command's process group and, with a
// shim, to every descendant of the command; Stop and StopWith then return at once
// as well. It does nothing once the child has exited.
func (p *Process) Kill() { p.kill() }

// shimKillBackup is how long a shim has to act on a kill request before it
// and the command's process group get SIGKILL directly.
const shimKillBackup = 2 * time.Second

// kill sends SIGKILL to the group if the child still runs, and records that
// the stop had to be forced. A shim is asked to do it instead, so that it
// kills the descendants outside the group too before it exits.
func (p *Process) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return
	}
	if p.pipes != nil {
		_, err := p.pipes.ctrl.Write([]byte{shimKill})
		// A shim stopped by SIGSTOP could not read the request.
		_ = syscall.Kill(p.pid, syscall.SIGCONT)
		if err == nil {
			p.killed = true
			if p.backup == nil {
				p.backup = time.AfterFunc(shimKillBackup, func() {
					p.mu.Lock()
					defer p.mu.Unlock()
					if !p.exited {
						_ = syscall.Kill(-p.cmdPid, syscall.SIGKILL)
						_ = p.signalLocked(syscall.SIGKILL)
					}
				})
			}
			return
		}
	}
	if p.signalLocked(syscall.SIGKILL) == nil {
		p.killed = true
	}
}

// Stop stops the child: StopSignal to its process group, SIGKILL to the group
// KillGrace later (or as soon as ctx is done) if the child still runs. It
// waits until the child has exited and returns its status. Stop is
// idempotent: later and concurrent calls (of Stop or StopWith) send no
// further stop signal and wait for the same exit, though a done ctx still
// forces SIGKILL. Stopping a child that has already exited just returns its
// status.
func (p *Process) Stop(ctx context.Context) ExitStatus {
	return p.StopWith(ctx, p.spec.StopSignal)
}

// StopWith is Stop with sig in place of Spec.StopSignal: for passing on a
// signal the elector itself received (SIGTERM, SIGINT) with the same grace
// period and escalation.
func (p *Process) StopWith(ctx context.Context, sig syscall.Signal) ExitStatus {
	p.BeginStop(sig)
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
	}
	return p.Wait()
}

// BeginStop is the start of StopWith without the wait: it sends sig (SIGCONT after it) and
// arms SIGKILL after KillGrace, and returns at once, so that a caller can log the stop
// after the signal went out rather than before. Like StopWith it acts once: a later
// BeginStop, Stop or StopWith sends nothing more.
func (p *Process) BeginStop(sig syscall.Signal) {
	p.stopOnce.Do(func() {
		if err := p.Signal(sig); err != nil {
			if !errors.Is(err, os.ErrProcessDone) {
				p.kill()
			}
			return
		}
		if sig != syscall.SIGSTOP && sig != syscall.SIGTSTP {
			// A stopped process acts on the stop signal only once continued.
			_ = p.Signal(syscall.SIGCONT)
		}
		go func() {
			timer := time.NewTimer(p.spec.KillGrace)
			defer timer.Stop()
			select {
			case <-p.done:
			case <-timer.C:
				p.kill()
			}
		}()
	})
}
