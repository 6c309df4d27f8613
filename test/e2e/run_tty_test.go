package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/elector/elector/internal/testing/ciskip"
	"github.com/elector/elector/internal/testing/outbuf"
	"github.com/elector/elector/internal/testing/redistest"
)

// openPty opens a new pseudo-terminal pair through /dev/ptmx: the master, and the slave to
// give a process as its terminal. Both are closed at the end of the test.
func openPty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		ciskip.Skip(t, "no pseudo-terminals here: %v", err)
	}
	t.Cleanup(func() { master.Close() })
	unlock := int32(0)
	if err := ioctl(master, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	var n uint32
	if err := ioctl(master, syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	return master, slave
}

func ioctl(f *os.File, req uint, arg unsafe.Pointer) error {
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), uintptr(req), uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// foregroundGroup returns the foreground process group of the terminal of master.
func foregroundGroup(t *testing.T, master *os.File) int {
	t.Helper()
	var pgrp int32
	if err := ioctl(master, syscall.TIOCGPGRP, unsafe.Pointer(&pgrp)); err != nil {
		t.Fatalf("tcgetpgrp: %v", err)
	}
	return int(pgrp)
}

// ptyOutput collects what is written to the terminal.
func ptyOutput(master *os.File) *outbuf.Buffer {
	var out outbuf.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	return &out
}

// TestRunUnderTerminal runs the elector as the session leader of a new pseudo-terminal, as
// an interactive shell's foreground job is, with a command that reads from the terminal: the
// command's group gets the foreground (a background group would be stopped by SIGTTIN), it
// reads a line, and once it exited the elector's group has the foreground again.
func TestRunUnderTerminal(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	master, slave := openPty(t)
	out := ptyOutput(master)
	const name = "tty"
	args := append([]string{"run"}, leaseArgs(srv.Addr(), name, "a")...)
	args = append(args, "--on-success", "hold", "--", "sh", "-c", `echo ready; read x; echo "got:$x"`)
	p := startCmd(t, "elector on a terminal", exec.Command(bins.elector, args...), func(p *proc) {
		p.cmd.Stdin, p.cmd.Stdout = slave, slave
		// A session of its own with the terminal as its controlling terminal, in whose
		// foreground it is: as an interactive shell's foreground job.
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0, Pdeathsig: syscall.SIGKILL}
	})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("terminal:\n%s", out.String())
		}
	})

	waitFor(t, 10*time.Second, "the command to start", func() bool { return strings.Contains(out.String(), "ready") })
	if fg := foregroundGroup(t, master); fg == p.pid() {
		t.Errorf("the elector's group %d has the terminal's foreground while the command runs", fg)
	}
	if _, err := master.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the command to read the line", func() bool { return strings.Contains(out.String(), "got:hello") })
	waitFor(t, 10*time.Second, "the elector to get the foreground back", func() bool { return foregroundGroup(t, master) == p.pid() })
	if err := syscall.Kill(p.pid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(10 * time.Second); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	assertLeaseGone(t, client, name)
}

// TestRunLogsStoppedCommand checks that a command stopped by a signal (here SIGTSTP, as from
// Ctrl-Z; SIGTTIN and SIGTTOU alike) is logged, and that it runs again on SIGCONT.
func TestRunLogsStoppedCommand(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	const name = "stopped"
	dir := t.TempDir()
	pidFile, goOn := filepath.Join(dir, "pid"), filepath.Join(dir, "go-on")
	// After SIGCONT the command waits for goOn, which the test creates once the elector has
	// logged the continue: a command that exited at once could be reaped before its
	// "continued" state was seen (waitpid reports the exit instead), so the log would race.
	args := append([]string{"run"}, leaseArgs(srv.Addr(), name, "a")...)
	args = append(args, "--", "sh", "-c", `echo $$ > "$1"; kill -TSTP $$; while [ ! -e "$2" ]; do sleep 0.02; done; exit 5`, "sh", pidFile, goOn)
	p := startElector(t, "elector", nil, args...)
	waitFor(t, 10*time.Second, "the stop to be logged", func() bool {
		return strings.Contains(p.stderr.String(), "A process of the command is stopped")
	})
	pids := readPids(pidFile)
	if len(pids) != 1 {
		t.Fatalf("pid file: %v", pids)
	}
	if !strings.Contains(p.stderr.String(), "pid="+strconv.Itoa(pids[0])) {
		t.Errorf("the log does not name the stopped process %d:\n%s", pids[0], p.stderr.String())
	}
	if err := syscall.Kill(pids[0], syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the continue to be logged", func() bool {
		return strings.Contains(p.stderr.String(), "A stopped process of the command runs again")
	})
	if err := os.WriteFile(goOn, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(10 * time.Second); code != 5 {
		t.Errorf("exit code %d, want 5 after SIGCONT", code)
	}
	assertLeaseGone(t, client, name)
}
