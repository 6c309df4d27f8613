package e2e

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/faultproxy"
)

// TestStalledStderr: replicas whose stderr is a pipe that nobody reads (full before they
// start, as a container runtime's log pipe that backed up) still never work at once, through
// a graceful handover and through the leader's loss of Redis: `elector run` (its logs never
// wait for stderr) and a program written with the library (klog straight to stderr: its
// lead loop blocks in its first log line, and the trust guard ends each term at its renew
// deadline all the same). The workers flock a file: a second one at once logs an overlap.
func TestStalledStderr(t *testing.T) {
	for _, kind := range []string{"run", "library"} {
		for _, how := range []string{"handover", "cut"} {
			t.Run(kind+"/"+how, func(t *testing.T) {
				t.Parallel()
				stalledStderr(t, kind, how)
			})
		}
	}
}

func stalledStderr(t *testing.T, kind, how string) {
	srv, log, lock := workerFixture(t)
	name := "stalled-" + kind + "-" + how
	start := func(id string, proxy *faultproxy.Proxy) *exec.Cmd {
		args := leaseArgs(proxy.Addr(), name, id)
		bin := bins.libreplica
		if kind == "run" {
			bin = bins.elector
			args = append([]string{"run", "--kill-grace", "200ms", "-v=4"}, args...)
		}
		return startStalled(t, bin, append(args, workerArgs(log, lock)...))
	}
	pa, pb := faultproxy.Start(t, srv.Addr()), faultproxy.Start(t, srv.Addr())
	a := start("a", pa)
	first, _ := log.waitEvent(t, 0, 30*time.Second, "the first worker's start", func(e workerEvent) bool { return e.Ev == "start" })
	if first.ID != "a" {
		t.Fatalf("the first worker is %s's, want a's", first.ID)
	}
	start("b", pb)
	switch how {
	case "handover":
		_ = a.Process.Signal(syscall.SIGTERM)
	case "cut":
		pa.Blackhole(true)
	}
	log.waitEvent(t, 0, 30*time.Second, "b's worker start", func(e workerEvent) bool { return e.Ev == "start" && e.ID == "b" })
	// Several lease durations more: a replica that stopped checking its deadline would still
	// run its worker beside the next term's.
	lease, _ := time.ParseDuration(testLease)
	time.Sleep(4 * lease)
	starts := log.checkWorkers(t)
	t.Logf("%s, %s: %d worker starts, no overlap", kind, how, starts)
}

// startStalled starts bin with a stderr pipe that is full before it starts and never read, and
// kills its process group at the end of the test.
func startStalled(t *testing.T, bin string, args []string) *exec.Cmd {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fillPipe(t, w)
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	cmd.Stderr = w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		r.Close()
		w.Close()
	})
	return cmd
}

// fillPipe writes to w until the pipe is full; w is left blocking.
func fillPipe(t *testing.T, w *os.File) {
	t.Helper()
	raw, err := w.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	chunk := []byte(strings.Repeat("x", 4095) + "\n")
	var werr error
	if err := raw.Control(func(fd uintptr) {
		if werr = syscall.SetNonblock(int(fd), true); werr != nil {
			return
		}
		for {
			if _, werr = syscall.Write(int(fd), chunk); werr != nil {
				break
			}
		}
		if errors.Is(werr, syscall.EAGAIN) {
			werr = syscall.SetNonblock(int(fd), false)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if werr != nil {
		t.Fatalf("fill the stderr pipe: %v", werr)
	}
}
