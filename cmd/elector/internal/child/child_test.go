//go:build linux

package child

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/elector/elector/internal/testing/wakeprobe"
)

// helperEnv selects a helper mode when the test binary re-executes itself.
const helperEnv = "ELECTOR_CHILD_TEST_HELPER"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ShimArg {
		code := RunShim(os.Args[2:]) // Spec.Shim re-executes this test binary
		lingerUntil(os.Getenv(shimLingerEnv))
		os.Exit(code)
	}
	switch mode := os.Getenv(helperEnv); mode {
	case "":
		// A test binary started with SIGHUP ignored (nohup, some CI runners) passes that on
		// to every child it execs, and a shell cannot trap a signal ignored on entry:
		// TestSignalForwarding's child never exited on its SIGHUP (CI, run under nohup: its
		// /proc status showed SigIgn bit 1). Likewise SIGINT and SIGQUIT, which a
		// non-interactive shell ignores in the commands it starts with `&`:
		// TestStopWithReceivedSignal's child ignored its SIGINT under a flake hunt started
		// that way, and was killed after the grace. Handling the signal here (and dropping
		// it) gives the children the default disposition back, as exec resets handled
		// signals.
		for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT} {
			if signal.Ignored(sig) {
				signal.Notify(make(chan os.Signal, 1), sig)
			}
		}
		goleak.VerifyTestMain(m)
	case "pdeathsig":
		helperPdeathsig()
	case "shim-tree":
		helperShimTree()
	case "reaper":
		os.Exit(helperReaper())
	case "standby":
		helperStandby()
	default:
		fmt.Fprintf(os.Stderr, "unknown helper mode %q\n", mode)
		os.Exit(2)
	}
}

// shimLingerEnv names a file: a shim of this test binary that finds it in its environment
// does not exit, once its work is done, before the file exists (TestShimFinishesAtGone).
const shimLingerEnv = "ELECTOR_CHILD_TEST_SHIM_LINGER"

// lingerUntil waits until path exists, or the test binary that started this shim is gone
// (a test that failed or timed out must not leave the shim behind); "" waits for nothing.
func lingerUntil(path string) {
	parent := os.Getppid()
	for path != "" && os.Getppid() == parent {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// long is the duration of processes that should only ever end by a signal.
// It is unusual, so that cleanup never kills an unrelated "sleep".
const long = "987.654"

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// startSh starts `sh -c script` and makes sure it is gone at the end of the test.
func startSh(t *testing.T, spec Spec, script string) *Process {
	t.Helper()
	spec.Path = "sh"
	spec.Args = append([]string{"-c", script}, spec.Args...)
	p, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Stop(ctx)
	})
	return p
}

func waitStatus(t *testing.T, p *Process) ExitStatus {
	t.Helper()
	select {
	case <-p.Done():
		return p.Wait()
	case <-time.After(30 * time.Second):
		t.Fatalf("child %d did not exit within 30s; its processes:\n%s", p.Pid(), procStates(p.Pid()))
		return ExitStatus{}
	}
}

// waitFile waits until path exists and is not empty and returns its content.
// procStates describes pid and its descendants from /proc (state and signal masks), for a
// test that timed out waiting for a signal's effect.
func procStates(pid int) string {
	var b strings.Builder
	for _, p := range append([]int{pid}, childPids(pid)...) {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
		if err != nil {
			fmt.Fprintf(&b, "  %d: %v\n", p, err)
			continue
		}
		fmt.Fprintf(&b, "  %d:", p)
		for _, line := range strings.Split(string(status), "\n") {
			for _, k := range []string{"Name:", "State:", "PPid:", "SigPnd:", "ShdPnd:", "SigBlk:", "SigIgn:", "SigCgt:"} {
				if strings.HasPrefix(line, k) {
					fmt.Fprintf(&b, " %s", strings.Join(strings.Fields(line), " "))
				}
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// childPids returns the children of pid, as /proc/PID/task/*/children lists them.
func childPids(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, f := range tasks {
		b, _ := os.ReadFile(f)
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
				out = append(out, childPids(c)...)
			}
		}
	}
	return out
}

func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && len(b) > 0 && b[len(b)-1] == '\n' {
			return strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not written within 30s", path)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(waitFile(t, path))
	if err != nil {
		t.Fatalf("pid file %s: %v", path, err)
	}
	return pid
}

// running reports whether pid is a live process (not gone, not a zombie).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name in parentheses, which may contain spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// waitGone waits until pid no longer runs.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for running(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still running after 10s", what, pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// killLong kills pid at cleanup if it is still one of our long sleeps.
func killLong(t *testing.T, pid int) {
	t.Cleanup(func() {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(b), long) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

func TestExitCodePassthrough(t *testing.T) {
	for _, code := range []int{0, 3, 42, 255} {
		p := startSh(t, Spec{}, fmt.Sprintf("exit %d", code))
		st := waitStatus(t, p)
		if st.Code != code || st.Signal != 0 || st.ExitCode() != code || st.Killed || st.Err != nil {
			t.Errorf("exit %d: status %+v, ExitCode %d", code, st, st.ExitCode())
		}
		if want := fmt.Sprintf("exit code %d", code); st.String() != want {
			t.Errorf("String() = %q, want %q", st.String(), want)
		}
	}
}

func TestSignalDeath(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGUSR1, syscall.SIGSEGV} {
		p := startSh(t, Spec{}, fmt.Sprintf("kill -%d $$", int(sig)))
		st := waitStatus(t, p)
		if st.Signal != sig || st.ExitCode() != 128+int(sig) || st.Code != -1 {
			t.Errorf("kill -%d: status %+v, ExitCode %d; want signal %v, %d", sig, st, st.ExitCode(), sig, 128+int(sig))
		}
		if want := fmt.Sprintf("killed by signal %d (%v), exit code %d", int(sig), sig, 128+int(sig)); st.String() != want {
			t.Errorf("String() = %q, want %q", st.String(), want)
		}
	}
}

func TestStdioArgsEnv(t *testing.T) {
	var stdout, stderr bytes.Buffer
	p := startSh(t, Spec{
		Args:   []string{"argv0", "one", "two words"},
		Env:    []string{"GREETING=hello", "PATH=" + os.Getenv("PATH")},
		Stdin:  strings.NewReader("from stdin\n"),
		Stdout: &stdout,
		Stderr: &stderr,
	}, `read line; echo "$GREETING|$0|$1|$2|$line|${HOME-unset}"; echo oops >&2; exit 4`)
	st := waitStatus(t, p)
	if st.Code != 4 || st.Err != nil {
		t.Errorf("status %+v", st)
	}
	if got, want := stdout.String(), "hello|argv0|one|two words|from stdin|unset\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
	if stderr.String() != "oops\n" {
		t.Errorf("stderr %q", stderr.String())
	}
}

func TestNilEnvInherits(t *testing.T) {
	t.Setenv("ELECTOR_CHILD_TEST_INHERITED", "yes")
	var stdout bytes.Buffer
	p := startSh(t, Spec{Stdout: &stdout}, `echo "$ELECTOR_CHILD_TEST_INHERITED"`)
	waitStatus(t, p)
	if stdout.String() != "yes\n" {
		t.Errorf("child saw %q, want the inherited variable", stdout.String())
	}
}

func TestOwnProcessGroup(t *testing.T) {
	var stdout bytes.Buffer
	p := startSh(t, Spec{Stdout: &stdout}, `ps -o pgid= -p $$ 2>/dev/null || cut -d' ' -f5 /proc/$$/stat`)
	waitStatus(t, p)
	if got := strings.TrimSpace(stdout.String()); got != strconv.Itoa(p.Pid()) {
		t.Errorf("child's process group %q, want its own pid %d", got, p.Pid())
	}
}

// TestStopReachesGrandchild checks that the stop signal goes to the whole
// process group: the grandchild handles SIGTERM itself and leaves a mark.
func TestStopReachesGrandchild(t *testing.T) {
	dir := t.TempDir()
	mark, gpid, ready := filepath.Join(dir, "mark"), filepath.Join(dir, "gpid"), filepath.Join(dir, "ready")
	script := `
sh -c 'trap "echo got-term > \"$MARK\"; exit 0" TERM; echo $$ > "$GPID"; while :; do sleep 0.05; done' &
gc=$!
trap 'wait $gc; exit 0' TERM
while [ ! -s "$GPID" ]; do sleep 0.01; done
echo ready > "$READY"
wait $gc
exit 9`
	p := startSh(t, Spec{
		Env:       []string{"MARK=" + mark, "GPID=" + gpid, "READY=" + ready, "PATH=" + os.Getenv("PATH")},
		KillGrace: 20 * time.Second,
	}, script)
	waitFile(t, ready)
	grandchild := readPid(t, gpid)
	ctx := testCtx(t)
	st := p.Stop(ctx)
	if st.Code != 0 || st.Killed {
		t.Errorf("Stop = %+v; want exit code 0 from the child's TERM trap, no SIGKILL", st)
	}
	if got := waitFile(t, mark); got != "got-term" {
		t.Errorf("grandchild mark %q", got)
	}
	waitGone(t, grandchild, "grandchild")
}

// TestGroupKilledAfterChildExits checks that a background process of the
// child does not survive the child.
func TestGroupKilledAfterChildExits(t *testing.T) {
	dir := t.TempDir()
	gpid := filepath.Join(dir, "gpid")
	var stdout bytes.Buffer
	// The grandchild also holds the stdout pipe: Wait must not hang on it.
	p := startSh(t, Spec{Stdout: &stdout, Env: []string{"GPID=" + gpid, "PATH=" + os.Getenv("PATH")}},
		`sleep `+long+` & echo $! > "$GPID"; echo started; exit 5`)
	grandchild := readPid(t, gpid)
	killLong(t, grandchild)
	st := waitStatus(t, p)
	if st.Code != 5 || st.Killed || st.Err != nil {
		t.Errorf("status %+v; want exit code 5 and no I/O error", st)
	}
	if stdout.String() != "started\n" {
		t.Errorf("stdout %q", stdout.String())
	}
	waitGone(t, grandchild, "background process of the exited child")
}

func TestKillGraceEscalation(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	const grace = 300 * time.Millisecond
	p := startSh(t, Spec{KillGrace: grace, Env: []string{"READY=" + ready, "PATH=" + os.Getenv("PATH")}},
		`trap '' TERM; echo ready > "$READY"; while :; do sleep 0.05; done`)
	waitFile(t, ready)
	probe := wakeprobe.Start(t)
	start := time.Now()
	st := p.Stop(testCtx(t))
	elapsed := time.Since(start)
	control := probe.Stop()
	if st.Signal != syscall.SIGKILL || !st.Killed || st.ExitCode() != 137 {
		t.Errorf("Stop of a child ignoring SIGTERM = %+v", st)
	}
	// Not before the grace; then SIGKILL, not a wait that never ends (a margin of many
	// graces above the same run's control).
	if elapsed < grace || elapsed >= grace+wakeprobe.Limit(control, 40*grace) {
		t.Errorf("Stop took %v (probe lag %v); want the grace period of %v, then SIGKILL", elapsed, control, grace)
	}
	if !strings.Contains(st.String(), "after the stop grace period") {
		t.Errorf("String() = %q", st.String())
	}
}

func TestCustomStopSignal(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	p := startSh(t, Spec{StopSignal: syscall.SIGUSR2, KillGrace: 30 * time.Second, Env: []string{"READY=" + ready, "PATH=" + os.Getenv("PATH")}},
		`trap 'exit 12' USR2; trap '' TERM; echo ready > "$READY"; while :; do sleep 0.05; done`)
	waitFile(t, ready)
	if st := p.Stop(testCtx(t)); st.Code != 12 || st.Killed {
		t.Errorf("Stop with SIGUSR2 = %+v; want the USR2 trap's exit code 12", st)
	}
}

func TestStopWithReceivedSignal(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	p := startSh(t, Spec{KillGrace: 30 * time.Second, Env: []string{"READY=" + ready, "PATH=" + os.Getenv("PATH")}},
		`trap 'exit 30' INT; trap 'exit 31' TERM; echo ready > "$READY"; while :; do sleep 0.05; done`)
	waitFile(t, ready)
	if st := p.StopWith(testCtx(t), syscall.SIGINT); st.Code != 30 || st.Killed {
		t.Errorf("StopWith(SIGINT) = %+v; want the INT trap's exit code 30 (and no SIGTERM)", st)
	}
}

func TestStopContextForcesKill(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	p := startSh(t, Spec{KillGrace: time.Hour, Env: []string{"READY=" + ready, "PATH=" + os.Getenv("PATH")}},
		`trap '' TERM; echo ready > "$READY"; while :; do sleep 0.05; done`)
	waitFile(t, ready)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	probe := wakeprobe.Start(t)
	start := time.Now()
	st := p.Stop(ctx)
	if st.Signal != syscall.SIGKILL || !st.Killed {
		t.Errorf("Stop with an expiring context = %+v", st)
	}
	if elapsed, control := time.Since(start), probe.Stop(); elapsed >= wakeprobe.Limit(control, 40*time.Second) {
		t.Errorf("Stop took %v despite its context ending after 200ms", elapsed)
	}
}

func TestStopIdempotent(t *testing.T) {
	p := startSh(t, Spec{KillGrace: 10 * time.Second}, `exec sleep `+long)
	killLong(t, p.Pid())
	ctx := testCtx(t)
	var wg sync.WaitGroup
	statuses := make([]ExitStatus, 8)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = p.Stop(ctx)
		}()
	}
	wg.Wait()
	for i, st := range statuses {
		if st.Signal != syscall.SIGTERM || st.Killed || st != statuses[0] {
			t.Errorf("Stop #%d = %+v", i, st)
		}
	}
	if st := p.Stop(ctx); st != statuses[0] {
		t.Errorf("Stop after exit = %+v", st)
	}
	if err := p.Signal(syscall.SIGTERM); !errors.Is(err, os.ErrProcessDone) {
		t.Errorf("Signal after exit = %v, want os.ErrProcessDone", err)
	}
}

func TestStopAfterOwnExit(t *testing.T) {
	p := startSh(t, Spec{}, `exit 3`)
	<-p.Done()
	if st := p.Stop(testCtx(t)); st.Code != 3 || st.Killed {
		t.Errorf("Stop of an exited child = %+v", st)
	}
}

func TestSignalForwarding(t *testing.T) {
	dir := t.TempDir()
	ready := filepath.Join(dir, "ready")
	p := startSh(t, Spec{Env: []string{"READY=" + ready, "PATH=" + os.Getenv("PATH")}},
		`trap 'exit 21' HUP; echo ready > "$READY"; while :; do sleep 0.05; done`)
	waitFile(t, ready)
	if err := p.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	if st := waitStatus(t, p); st.Code != 21 {
		t.Errorf("status after SIGHUP %+v", st)
	}
}

func TestStartContextStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p, err := Start(ctx, Spec{Path: "sleep", Args: []string{long}, KillGrace: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	killLong(t, p.Pid())
	select {
	case <-p.Done():
		t.Fatal("child exited before its context was cancelled")
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if st := waitStatus(t, p); st.Signal != syscall.SIGTERM {
		t.Errorf("status after cancelling Start's context = %+v", st)
	}

	if _, err := Start(ctx, Spec{Path: "true"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Start with a cancelled context = %v", err)
	}
}

func TestLookPath(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "not-executable")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if p, err := LookPath("sh"); err != nil || !filepath.IsAbs(p) {
		t.Errorf("LookPath(sh) = %q, %v", p, err)
	}
	for _, tt := range []struct {
		name   string
		target error
		msg    string
	}{
		{"no-such-command-elector-test", exec.ErrNotFound, `command "no-such-command-elector-test": executable file not found in $PATH`},
		{filepath.Join(dir, "missing"), fs.ErrNotExist, "no such file"},
		{notExec, fs.ErrPermission, "permission denied"},
		{"", nil, "empty command"},
	} {
		_, err := LookPath(tt.name)
		var lpe *LookPathError
		if !errors.As(err, &lpe) || lpe.Name != tt.name {
			t.Errorf("LookPath(%q) = %v, want *LookPathError", tt.name, err)
			continue
		}
		if tt.target != nil && !errors.Is(err, tt.target) {
			t.Errorf("LookPath(%q) = %v, want errors.Is %v", tt.name, err, tt.target)
		}
		if !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("LookPath(%q) = %q, want it to contain %q", tt.name, err, tt.msg)
		}
		if _, err := Start(context.Background(), Spec{Path: tt.name}); !errors.As(err, &lpe) {
			t.Errorf("Start(%q) = %v, want *LookPathError", tt.name, err)
		}
	}
}

// TestPdeathsigSurvivesCallerThreadExit starts the child from a goroutine
// that exits while locked to its OS thread, which makes the Go runtime end
// that thread. A child forked from that thread would get its parent-death
// signal right away; Start forks from a thread of its own.
func TestPdeathsigSurvivesCallerThreadExit(t *testing.T) {
	type result struct {
		p      *Process
		err    error
		onMain bool
	}
	ch := make(chan result)
	release := make(chan struct{})
	defer close(release)
	var r result
	for {
		go func() {
			runtime.LockOSThread()
			if syscall.Gettid() == syscall.Getpid() {
				// The runtime never ends the main thread; keep this
				// goroutine on it so that the next one gets another thread.
				ch <- result{onMain: true}
				<-release
				runtime.UnlockOSThread()
				return
			}
			// Never unlocked: the thread ends with this goroutine.
			p, err := Start(context.Background(), Spec{Path: "sleep", Args: []string{long}})
			ch <- result{p: p, err: err}
		}()
		if r = <-ch; !r.onMain {
			break
		}
	}
	if r.err != nil {
		t.Fatal(r.err)
	}
	killLong(t, r.p.Pid())
	t.Cleanup(func() { r.p.Stop(context.Background()) })
	// Start more threads and let the runtime retire the dead one.
	for range 4 {
		go func() { runtime.LockOSThread() }()
	}
	runtime.GC()
	select {
	case <-r.p.Done():
		t.Fatalf("child died after the starting goroutine's thread exited: %+v", r.p.Wait())
	case <-time.After(500 * time.Millisecond):
	}
	if !running(r.p.Pid()) {
		t.Fatal("child not running")
	}
}

// TestPdeathsig kills a helper process that started a child through this
// package with SIGKILL and checks that the child dies with it.
func TestPdeathsig(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "pid")
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), helperEnv+"=pdeathsig", "ELECTOR_CHILD_TEST_PIDFILE="+pidFile)
	helper.Stderr = os.Stderr
	helper.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })
	pid := readPid(t, pidFile)
	killLong(t, pid)
	if !running(pid) {
		t.Fatalf("child %d of the helper is not running", pid)
	}
	// Give the helper's runtime time to do what it does (GC, thread churn).
	time.Sleep(200 * time.Millisecond)
	if !running(pid) {
		t.Fatalf("child %d died while the helper was alive", pid)
	}
	if err := helper.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = helper.Wait()
	waitGone(t, pid, "child of the SIGKILLed helper")
}

// helperPdeathsig starts a long child, writes its pid and waits to be killed.
func helperPdeathsig() {
	p, err := Start(context.Background(), Spec{Path: "sleep", Args: []string{long}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// Churn threads, as a busy elector would.
	for range 8 {
		go func() { runtime.LockOSThread() }()
	}
	if err := os.WriteFile(os.Getenv("ELECTOR_CHILD_TEST_PIDFILE"), []byte(strconv.Itoa(p.Pid())+"\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
