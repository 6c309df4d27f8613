//go:build linux

package child

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// treeScript starts, besides itself, a background process in its group and an orphan in
// a session of its own (a double fork through setsid), all ignoring SIGTERM, and writes
// their pids to "$PIDS" (one a line, three in all) before it runs on.
const treeScript = `trap '' TERM
sleep ` + long + ` & echo $! >> "$PIDS"
(setsid sh -c 'trap "" TERM; sleep ` + long + ` & echo $! >> "$PIDS"' &)
echo $$ >> "$PIDS"
`

// waitPids waits until path lists n pids and returns them.
func waitPids(t *testing.T, path string, n int) []int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		var pids []int
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		if len(pids) == n {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s lists %v, want %d pids", path, pids, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func shimSpec(env ...string) Spec {
	return Spec{Shim: true, Env: append(env, "PATH="+os.Getenv("PATH"))}
}

// TestShimExitStatus checks that the shim passes the command's status on exactly: its exit
// code, or the signal that killed it, including those the Go runtime handles itself. With
// files (or nothing) as stdio the status comes from the shim's report that the command's
// tree is gone (see finish); with output copied through a pipe, from the shim's own exit,
// after the copy is complete.
func TestShimExitStatus(t *testing.T) {
	for _, copied := range []bool{false, true} {
		start := func(script string) (*Process, *bytes.Buffer) {
			spec, out := shimSpec(), &bytes.Buffer{}
			if copied {
				spec.Stdout = out
			}
			return startSh(t, spec, "echo out; "+script), out
		}
		check := func(script string, ok func(ExitStatus) bool) {
			t.Helper()
			p, out := start(script)
			st := waitStatus(t, p)
			if !ok(st) || st.Err != nil || p.direct == copied {
				t.Errorf("%q under the shim (output copied: %v, direct: %v): %+v", script, copied, p.direct, st)
			}
			if copied && out.String() != "out\n" {
				t.Errorf("%q under the shim: output %q once the status was known, want %q", script, out.String(), "out\n")
			}
		}
		for _, code := range []int{0, 3, 255} {
			check(fmt.Sprintf("exit %d", code), func(st ExitStatus) bool { return st.Code == code && st.Signal == 0 })
		}
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGQUIT, syscall.SIGSEGV, syscall.SIGPIPE} {
			check(fmt.Sprintf("kill -%d $$", int(sig)), func(st ExitStatus) bool { return st.Signal == sig && st.ExitCode() == 128+int(sig) })
		}
	}
}

// TestShimFinishesAtGone: with files as stdio, a Process is done, with the command's status,
// once the shim reports the command's tree gone, while the shim itself still runs (here it
// lingers until the test lets it go); with output copied, only once the shim has exited and
// the copy is complete.
func TestShimFinishesAtGone(t *testing.T) {
	for _, copied := range []bool{false, true} {
		release := filepath.Join(t.TempDir(), "exit")
		spec, out := shimSpec(shimLingerEnv+"="+release), &bytes.Buffer{}
		if copied {
			spec.Stdout = out
		}
		p := startSh(t, spec, "echo out; exit 7")
		if !copied {
			st := waitStatus(t, p)
			if st.Code != 7 || st.Err != nil {
				t.Errorf("status %+v, want exit code 7", st)
			}
			if !running(p.Pid()) {
				t.Errorf("the shim %d had exited when the Process was done: done should come with its report of the tree gone, not with its exit", p.Pid())
			}
		} else {
			waitGone(t, p.CommandPid(), "the command")
			select {
			case <-p.Done():
				t.Errorf("done while the shim %d still runs and the output copy may not be complete", p.Pid())
			case <-time.After(100 * time.Millisecond):
			}
		}
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if st := waitStatus(t, p); st.Code != 7 || st.Err != nil || (copied && out.String() != "out\n") {
			t.Errorf("output copied %v: status %+v, output %q; want exit code 7 and %q", copied, st, out.String(), "out\n")
		}
	}
}

// TestShimCommandPid checks that CommandPid is the command, a child of the shim, which
// leads the process group.
func TestShimCommandPid(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	p := startSh(t, shimSpec("PIDFILE="+pidFile), `echo $$ > "$PIDFILE"; exec sleep `+long)
	pid := readPid(t, pidFile)
	killLong(t, pid)
	if p.CommandPid() != pid || p.Pid() == pid {
		t.Errorf("Pid %d, CommandPid %d; the command is %d", p.Pid(), p.CommandPid(), pid)
	}
	if e, ok := readProcStat(pid); !ok || e.ppid != p.Pid() || e.pgid != pid {
		t.Errorf("the command's /proc entry %+v; want parent %d (the shim) and a group of its own %d", e, p.Pid(), pid)
	}
	if e, ok := readProcStat(p.Pid()); !ok || e.pgid != p.Pid() {
		t.Errorf("the shim's /proc entry %+v; want a process group of its own", e)
	}
}

// assertTreeGone checks that the command's status is clean (the shim reported its tree
// gone) and that none of pids runs once the child has exited.
func assertTreeGone(t *testing.T, st ExitStatus, pids []int) {
	t.Helper()
	if st.Err != nil {
		t.Errorf("status %+v: %v", st, st.Err)
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("process %d still runs after the child exited (status %v)", pid, st)
		}
	}
}

// TestShimSurvivesKillOfCommandGroup: a command that ends with the clean-up idiom
// `kill -9 0` kills its own process group, never the shim, which then kills the orphan in
// another session before it exits as the command did.
func TestShimSurvivesKillOfCommandGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	p := startSh(t, shimSpec("PIDS="+pidFile), treeScript+`
while [ "$(wc -l < "$PIDS")" -lt 3 ]; do sleep 0.01; done
kill -9 0`)
	pids := waitPids(t, pidFile, 3)
	for _, pid := range pids {
		killLong(t, pid)
	}
	st := waitStatus(t, p)
	if st.Signal != syscall.SIGKILL {
		t.Errorf("status %+v, want killed by SIGKILL", st)
	}
	assertTreeGone(t, st, pids)
}

// TestShimStopSignalKill: SIGKILL, and every other signal, as the stop signal reaches the
// command's group and the processes outside it, never the shim, so that nothing of the tree
// runs when Stop returns.
func TestShimStopSignalKill(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1} {
		t.Run(sig.String(), func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pids")
			// A setsid'd orphan that ignores nothing, besides treeScript's processes.
			spec := Spec{Shim: true, StopSignal: sig, KillGrace: 200 * time.Millisecond, Env: []string{"PIDS=" + pidFile, "PATH=" + os.Getenv("PATH")}}
			p := startSh(t, spec, `(setsid sh -c 'sleep `+long+` & echo $! >> "$PIDS"' &)
`+treeScript+`while :; do sleep 0.05; done`)
			pids := waitPids(t, pidFile, 4)
			for _, pid := range pids {
				killLong(t, pid)
			}
			assertTreeGone(t, p.Stop(testCtx(t)), pids)
		})
	}
}

// TestShimKilledIsReported: a shim SIGKILLed from outside cannot report the command's tree
// gone; the status says so, and the command's own group is SIGKILLed. This process is no
// child subreaper here, so it cannot make sure that nothing else is left: ErrSurvivors.
func TestShimKilledIsReported(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	p := startSh(t, shimSpec("PIDS="+pidFile), `sleep `+long+` & echo $! >> "$PIDS"; echo $$ >> "$PIDS"; wait`)
	pids := waitPids(t, pidFile, 2)
	for _, pid := range pids {
		killLong(t, pid)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, p)
	if !errors.Is(st.Err, ErrSurvivors) {
		t.Errorf("status %+v, want the error %v", st, ErrSurvivors)
	}
	for _, pid := range pids {
		waitGone(t, pid, "process of the command's group")
	}
}

// TestShimKillsTreeWhenCommandExits: nothing the command started outlives it, not even an
// orphan in another session.
func TestShimKillsTreeWhenCommandExits(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	p := startSh(t, shimSpec("PIDS="+pidFile), treeScript+`
while [ "$(wc -l < "$PIDS")" -lt 3 ]; do sleep 0.01; done
exit 4`)
	pids := waitPids(t, pidFile, 3)
	for _, pid := range pids {
		killLong(t, pid)
	}
	if st := waitStatus(t, p); st.Code != 4 {
		t.Errorf("status %+v, want exit code 4", st)
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("process %d still runs after the command exited", pid)
		}
	}
}

// TestShimStopEscalationKillsTree: after the grace, SIGKILL reaches every descendant, also
// those outside the process group, which also got the stop signal.
func TestShimStopEscalationKillsTree(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	p := startSh(t, Spec{Shim: true, KillGrace: 200 * time.Millisecond, Env: []string{"PIDS=" + pidFile, "PATH=" + os.Getenv("PATH")}},
		treeScript+`while :; do sleep 0.05; done`)
	pids := waitPids(t, pidFile, 3)
	for _, pid := range pids {
		killLong(t, pid)
	}
	st := p.Stop(testCtx(t))
	if st.Signal != syscall.SIGKILL || !st.Killed {
		t.Errorf("Stop = %+v, want SIGKILL after the grace", st)
	}
	for _, pid := range pids {
		if running(pid) {
			t.Errorf("process %d still runs after Stop", pid)
		}
	}
}

// TestShimForwardsOutsideGroup: a signal to the group reaches a descendant that left it.
func TestShimForwardsOutsideGroup(t *testing.T) {
	dir := t.TempDir()
	mark := filepath.Join(dir, "mark")
	ready := filepath.Join(dir, "ready")
	p := startSh(t, shimSpec("MARK="+mark, "READY="+ready),
		// The outer shell says ready only once it ignores USR1 itself: killed by the signal,
		// it would end the command, and the shim would kill the inner shell before its trap
		// wrote the mark (CI, at a load of 17). It ignores USR1 only after starting the inner
		// shell, which could not trap a signal ignored on entry.
		`setsid sh -c 'trap "echo got-usr1 > \"$MARK\"; exit 0" USR1; echo ready > "$READY.in"; while :; do sleep 0.05; done' &
trap '' USR1
while [ ! -s "$READY.in" ]; do sleep 0.01; done
echo ready > "$READY"
wait`)
	waitFile(t, ready)
	if err := p.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	if got := waitFile(t, mark); got != "got-usr1" {
		t.Errorf("mark %q", got)
	}
}

// TestShimParentDeath SIGKILLs a helper process that runs a tree under the shim: the shim
// kills every descendant when its parent dies.
func TestShimParentDeath(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=shim-tree", "PIDS="+pidFile)
	helper.Stderr = os.Stderr
	helper.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	pids := waitPids(t, pidFile, 3)
	for _, pid := range pids {
		killLong(t, pid)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	for _, pid := range pids {
		waitGone(t, pid, "descendant of the SIGKILLed helper")
	}
}

// helperShimTree runs treeScript under the shim and waits to be killed.
func helperShimTree() {
	_, err := Start(context.Background(), Spec{Shim: true, Path: "sh", Args: []string{"-c", treeScript + "while :; do sleep 0.05; done"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		time.Sleep(time.Hour)
	}
}

// openFds counts the open file descriptors of this process.
func openFds(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestShimStartErrorAndNoFdLeak checks that a command the shim cannot execute is a Start
// error, and that neither that nor a normal run leaves a pipe of the shim open here.
func TestShimStartErrorAndNoFdLeak(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "not-a-program")
	if err := os.WriteFile(bad, []byte{0x7f, 'X', 0, 1, 2, 3}, 0o755); err != nil {
		t.Fatal(err)
	}
	before := openFds(t)
	for range 3 {
		waitStatus(t, startSh(t, shimSpec(), "exit 0"))
		if _, err := Start(context.Background(), Spec{Shim: true, Path: bad}); err == nil || !strings.Contains(err.Error(), "exec format error") {
			t.Errorf("Start of a file that is no program under the shim: %v, want exec format error", err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for openFds(t) > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // the report readers close their pipe at its EOF
	}
	if after := openFds(t); after > before {
		t.Errorf("%d file descriptors open before, %d after", before, after)
	}
}
