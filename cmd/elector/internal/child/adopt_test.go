//go:build linux

package child

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// escapeScript starts a worker in a session of its own that stays the command's child, and
// an orphan in another one (a double fork through setsid), adopted by the shim, besides a
// background process in the command's group; it writes their pids and its own to "$PIDS".
const escapeScript = `setsid sh -c 'echo $$ >> "$PIDS"; exec sleep ` + long + `' &
(setsid sh -c 'sleep ` + long + ` & echo $! >> "$PIDS"' &)
sleep ` + long + ` & echo $! >> "$PIDS"
echo $$ >> "$PIDS"
wait`

// subreaperForTest makes the test process a child subreaper until the test ends.
func subreaperForTest(t *testing.T) {
	t.Helper()
	if err := setSubreaper(true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := setSubreaper(false); err != nil {
			t.Error(err)
		}
	})
}

// reaped reports whether pid is gone from /proc: dead and reaped, not a zombie.
func reaped(pid int) bool {
	_, err := os.Stat("/proc/" + strconv.Itoa(pid))
	return errors.Is(err, os.ErrNotExist)
}

// TestShimKilledKillsAdopted: when the shim is SIGKILLed from outside, its orphans, the
// processes that left the command's group and session among them, come back to this
// process, a child subreaper, which kills and reaps them all before Done: none runs or is
// left a zombie once the status is known, and the status says errShimKilled, not
// ErrSurvivors. A child of this process's own (a prepared shim) is left alone.
func TestShimKilledKillsAdopted(t *testing.T) {
	subreaperForTest(t)
	spec := shimSpec()
	spec.Path, spec.Args = "sh", []string{"-c", "exit 0"}
	other := Prepare(spec)
	otherDone := other.Exited()
	if otherDone == nil {
		t.Fatal("no shim prepared")
	}
	t.Cleanup(func() {
		other.Close()
		<-otherDone
	})
	pidFile := filepath.Join(t.TempDir(), "pids")
	p := startSh(t, shimSpec("PIDS="+pidFile), escapeScript)
	pids := waitPids(t, pidFile, 4)
	for _, pid := range pids {
		killLong(t, pid)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	st := waitStatus(t, p)
	if !errors.Is(st.Err, errShimKilled) || errors.Is(st.Err, ErrSurvivors) {
		t.Errorf("status %+v, want the error %v only", st, errShimKilled)
	}
	for _, pid := range pids {
		if !reaped(pid) {
			t.Errorf("process %d of the command is still there (running or a zombie) when the status is known", pid)
		}
	}
	select {
	case <-otherDone:
		t.Error("the prepared shim, a child of this process's own, was killed too")
	default:
	}
}

// TestShimKilledNotSubreaper: without the child subreaper attribute, a killed shim's orphans
// go elsewhere and cannot be found: the status says ErrSurvivors, which keeps `elector run`
// from releasing.
func TestShimKilledNotSubreaper(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	p := startSh(t, shimSpec("PIDS="+pidFile), escapeScript)
	pids := waitPids(t, pidFile, 4)
	for _, pid := range pids {
		killLong(t, pid)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st := waitStatus(t, p); !errors.Is(st.Err, ErrSurvivors) {
		t.Errorf("status %+v, want the error %v", st, ErrSurvivors)
	}
}
