//go:build linux

package child

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// standbyScript records the command's pid and $TOKEN in $MARK, then sleeps.
const standbyScript = `echo "$$ $TOKEN" > "$MARK"; exec sleep ` + long

// standbySpec is a shim spec of standbyScript whose own environment names mark and the
// token "shim": the command must get its environment from the go-ahead only.
func standbySpec(mark string) Spec {
	return Spec{Shim: true, Path: "sh", Args: []string{"-c", standbyScript},
		Env: []string{"PATH=" + os.Getenv("PATH"), "MARK=" + mark, "TOKEN=shim"}}
}

// shimChildren returns the children of pid.
func shimChildren(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		t.Fatalf("read the children of the shim %d: %v", pid, err)
	}
	return strings.TrimSpace(string(b))
}

// waitExited waits until a prepared shim has exited.
func waitExited(t *testing.T, exited <-chan struct{}) {
	t.Helper()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the prepared shim did not exit within 30s")
	}
}

// TestStandbyStartsOnlyOnGoAhead checks that a prepared shim starts nothing while it waits,
// and that the command gets the environment of the go-ahead, not the shim's.
func TestStandbyStartsOnlyOnGoAhead(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "mark")
	sb := Prepare(standbySpec(mark))
	exited := sb.Exited()
	if exited == nil {
		t.Fatal("Prepare started no shim")
	}
	shimPid := sb.p.pid
	time.Sleep(300 * time.Millisecond) // long enough for the shim to be up and waiting
	if c := shimChildren(t, shimPid); c != "" {
		t.Errorf("the waiting shim has children %q before the go-ahead", c)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Errorf("the command ran before the go-ahead")
	}
	p, err := sb.Start(context.Background(), []string{"PATH=" + os.Getenv("PATH"), "MARK=" + mark, "TOKEN=term-7"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	f := strings.Fields(waitFile(t, mark))
	killLong(t, p.CommandPid())
	if p.Pid() != shimPid || len(f) != 2 || f[0] != strconv.Itoa(p.CommandPid()) || f[1] != "term-7" {
		t.Errorf("command wrote %q, shim %d, CommandPid %d; want the prepared shim %d and TOKEN=term-7", f, p.Pid(), p.CommandPid(), shimPid)
	}
	if _, err := sb.Start(context.Background(), nil); !errors.Is(err, errStandbyUsed) {
		t.Errorf("second Start of a Standby: %v, want %v", err, errStandbyUsed)
	}
}

// TestStandbyCloseStartsNothing checks that Close makes the waiting shim exit unused.
func TestStandbyCloseStartsNothing(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "mark")
	sb := Prepare(standbySpec(mark))
	exited := sb.Exited()
	time.Sleep(100 * time.Millisecond)
	sb.Close()
	waitExited(t, exited)
	if _, err := os.Stat(mark); err == nil {
		t.Error("the command ran after Close")
	}
}

// TestStandbyShimLostStartsCold SIGKILLs a waiting shim: Start notices that the go-ahead
// cannot reach it and starts the command with a new shim.
func TestStandbyShimLostStartsCold(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "mark")
	sb := Prepare(standbySpec(mark))
	exited, dead := sb.Exited(), sb.p.pid
	if err := syscall.Kill(dead, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExited(t, exited)
	p, err := sb.Start(context.Background(), append(standbySpec(mark).Env, "TOKEN=term-8"))
	if err != nil {
		t.Fatalf("Start after the prepared shim died: %v", err)
	}
	defer p.Stop(context.Background())
	f := strings.Fields(waitFile(t, mark))
	killLong(t, p.CommandPid())
	if !p.Shimmed() || p.Pid() == dead || len(f) != 2 || f[1] != "term-8" {
		t.Errorf("shimmed %v, shim %d (dead: %d), command wrote %q", p.Shimmed(), p.Pid(), dead, f)
	}
	st := p.Stop(context.Background())
	if st.Err != nil || st.Signal != syscall.SIGTERM {
		t.Errorf("stop: %+v", st)
	}
}

// TestStandbyParentDeath SIGKILLs a helper that prepared a shim: while the shim waits, and
// right after it wrote the go-ahead. The shim must exit, and a command it started must die.
func TestStandbyParentDeath(t *testing.T) {
	for _, goAhead := range []bool{false, true} {
		t.Run(fmt.Sprintf("goAhead=%v", goAhead), func(t *testing.T) {
			dir := t.TempDir()
			mark, shimFile := filepath.Join(dir, "mark"), filepath.Join(dir, "shim")
			helper := exec.Command(os.Args[0], "-test.run=^$")
			helper.Env = append(os.Environ(), helperEnv+"=standby", "MARK="+mark, "SHIMPID="+shimFile, "GOAHEAD="+strconv.FormatBool(goAhead))
			helper.Stderr = os.Stderr
			helper.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := helper.Start(); err != nil {
				t.Fatal(err)
			}
			shimPid := readPid(t, shimFile)
			killLong(t, shimPid)
			if !goAhead {
				time.Sleep(300 * time.Millisecond) // the shim is up and waiting
				_ = helper.Process.Signal(syscall.SIGKILL)
			}
			_ = helper.Wait() // with the go-ahead, the helper SIGKILLs itself after sending it
			waitGone(t, shimPid, "prepared shim of the SIGKILLed helper")
			// Whatever the mark says (the command may die between its redirect and its
			// echo), no process with this test's environment may outlive the helper and
			// its shim: the command would be the only one left.
			for _, pid := range pidsWithEnv("MARK=" + mark) {
				killLong(t, pid)
				waitGone(t, pid, "a process of the SIGKILLed helper's command")
			}
			b, err := os.ReadFile(mark)
			switch {
			case err != nil:
				// The command never started: the shim saw the elector die first.
			case !goAhead:
				t.Errorf("the command ran without the go-ahead: %q", b)
			case len(strings.Fields(string(b))) == 0:
				// The command started (its redirect created the mark) and was killed before
				// echo wrote its pid (CI): by the shim, which kills every descendant before it
				// exits, and which is gone.
			default:
				pid, _ := strconv.Atoi(strings.Fields(string(b))[0])
				killLong(t, pid)
				waitGone(t, pid, "command started on the go-ahead of the SIGKILLed helper")
			}
		})
	}
}

// pidsWithEnv returns the live processes whose environment holds kv.
func pidsWithEnv(kv string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && slices.Contains(strings.Split(string(env), "\x00"), kv) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// helperStandby prepares standbySpec($MARK), writes the shim's pid to $SHIMPID and, with
// GOAHEAD=true, sends the go-ahead as Standby.Start does and SIGKILLs itself at once.
func helperStandby() {
	sb := Prepare(standbySpec(os.Getenv("MARK")))
	p, _ := sb.take()
	if p == nil {
		fmt.Fprintln(os.Stderr, "no shim prepared")
		os.Exit(1)
	}
	if err := os.WriteFile(os.Getenv("SHIMPID"), []byte(strconv.Itoa(p.pid)+"\n"), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if os.Getenv("GOAHEAD") == "true" {
		time.Sleep(300 * time.Millisecond) // the shim is up and waiting
		p.begun.Store(true)
		_, _ = p.pipes.ctrl.Write(startMessage(standbySpec(os.Getenv("MARK")).Env))
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	for {
		time.Sleep(time.Hour)
	}
}

// TestShimForkingThreadDeath ends the thread that forked a shim while the process lives on,
// as happens first when the elector is SIGKILLed (its threads exit one by one): the kernel
// sends the shim its parent-death signal while its parent pid is still this process's. The
// shim must not take it for a signal to pass on: the command gets no SIGTERM and runs on.
func TestShimForkingThreadDeath(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "mark")
	env := []string{"PATH=" + os.Getenv("PATH"), "MARK=" + mark}
	sh, err := LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	pipes, err := newShimPipes()
	if err != nil {
		t.Fatal(err)
	}
	defer pipes.closeAll()
	cmd := &exec.Cmd{Path: shimExe, Env: env, SysProcAttr: sysProcAttr(true, -1),
		Args:       shimArgs(sh, []string{"sh", "-c", `trap 'echo TERM >> "$MARK"' TERM; echo "$$" > "$MARK"; while :; do sleep 0.05; done`}),
		ExtraFiles: []*os.File{pipes.shimCtrl, pipes.shimReport}}
	started, release := make(chan error), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		started <- cmd.Start()
		<-release
	}()
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	pipes.closeShimEnds()
	if _, err := pipes.ctrl.Write(startMessage(env)); err != nil {
		t.Fatal(err)
	}
	if _, err := readShimStart(bufio.NewReader(pipes.report)); err != nil {
		t.Fatal(err)
	}
	pid := readPid(t, mark) // the trap is set
	killLong(t, pid)
	close(release)
	time.Sleep(500 * time.Millisecond) // the thread's end and its signal are long past
	if b, _ := os.ReadFile(mark); strings.Contains(string(b), "TERM") || !running(pid) {
		t.Errorf("after the end of the forking thread the command got a SIGTERM (%q) or died (running: %v)", b, running(pid))
	}
	if _, err := pipes.ctrl.Write([]byte{shimKill}); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pid, "command after the kill request")
}
