package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/redistest"
)

// treeGoneBound is how soon after the death of a SIGKILLed elector every descendant of its
// command must be gone. The shim needs a /proc walk and a kill(2) per process: a few
// milliseconds (5–50ms measured under load); without the shim they would never go. It is
// counted from the elector's death, not from the SIGKILL: the kernel takes a while to tear
// a process down (up to 0.5s measured for a race-instrumented elector on a loaded machine),
// and the shim learns of the death only during that teardown.
const treeGoneBound = 100 * time.Millisecond

// treeJobs are commands that leave processes behind in different ways. Each appends the pid
// of every process it starts, and its own, to the file "$1", and runs until killed.
var treeJobs = []struct {
	name   string
	script string
	procs  int // lines it writes to "$1"
}{
	// A background grandchild in the command's process group (job.sh with `worker &`).
	{"grandchild", `sleep 1001 & echo $! >> "$1"; echo $$ >> "$1"; wait`, 2},
	// A double fork through setsid: the worker is in another session and process group, and
	// its parent has exited, so it is an orphan.
	{"setsid-double-fork", `(setsid sh -c 'sleep 1002 & echo $! >> "$1"' sh "$1" &); echo $$ >> "$1"; exec sleep 1003`, 2},
	// Everything ignores SIGTERM.
	{"ignores-sigterm", `trap '' TERM; sleep 1004 & echo $! >> "$1"; setsid sh -c 'trap "" TERM; echo $$ >> "$1"; exec sleep 1005' sh "$1" & echo $$ >> "$1"; while :; do sleep 1; done`, 3},
}

// readPids returns the pids in a file of one pid per line.
func readPids(path string) []int {
	b, _ := os.ReadFile(path)
	var pids []int
	for _, line := range strings.Split(string(b), "\n") {
		if n, err := strconv.Atoi(strings.TrimSpace(line)); err == nil {
			pids = append(pids, n)
		}
	}
	return pids
}

// killPidsAtCleanup SIGKILLs at the end of the test whatever of pids still runs, so that a
// failing test leaves nothing behind on the machine. Call it after startElector: cleanups run
// last first, and the elector's waits until nothing holds its output pipes.
func killPidsAtCleanup(t *testing.T, path string) {
	t.Cleanup(func() {
		for _, pid := range readPids(path) {
			if !processGone(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// sessionOf returns the session id of pid, -1 if it is gone.
func sessionOf(pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 4 {
		return -1
	}
	n, _ := strconv.Atoi(f[3])
	return n
}

// TestRunKillsDescendantsWithElector SIGKILLs the elector while its command has started
// processes in each of the ways of treeJobs: every one of them is gone within treeGoneBound,
// so that no worker runs on next to the next leader's.
func TestRunKillsDescendantsWithElector(t *testing.T) {
	srv := redistest.Start(t)
	for _, job := range treeJobs {
		t.Run(job.name, func(t *testing.T) {
			pidFile := filepath.Join(t.TempDir(), "pids")
			args := append([]string{"run"}, leaseArgs(srv.Addr(), "tree-"+job.name, "a")...)
			args = append(args, "--", "sh", "-c", job.script, "sh", pidFile)
			p := startElector(t, "elector", nil, args...)
			killPidsAtCleanup(t, pidFile) // before the elector's cleanup, which waits for its pipes
			var pids []int
			waitFor(t, 10*time.Second, "the job's processes", func() bool {
				pids = readPids(pidFile)
				return len(pids) == job.procs
			})
			for _, pid := range pids {
				if processGone(pid) {
					t.Fatalf("process %d of the job is not running", pid)
				}
			}
			if job.name != "grandchild" {
				elsewhere := false
				for _, pid := range pids {
					elsewhere = elsewhere || sessionOf(pid) != sessionOf(p.pid())
				}
				if !elsewhere {
					t.Fatalf("no process of %v left the elector's session %d", pids, sessionOf(p.pid()))
				}
			}

			killed := time.Now()
			p.signal(syscall.SIGKILL)
			var left []int
			for {
				left = left[:0]
				for _, pid := range pids {
					if !processGone(pid) {
						left = append(left, pid)
					}
				}
				if len(left) == 0 || time.Since(killed) > 5*time.Second {
					break
				}
				time.Sleep(time.Millisecond)
			}
			took := time.Since(killed)
			if len(left) > 0 {
				// They hold the elector's output pipes: the elector's Wait ends only with them.
				for _, pid := range left {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
			<-p.done
			died := p.exited.Sub(killed)
			t.Logf("%d processes of the job gone %v after the SIGKILL of the elector, which was reaped %v after it",
				len(pids), took.Round(100*time.Microsecond), died.Round(100*time.Microsecond))
			if len(left) > 0 || took > died+treeGoneBound {
				t.Errorf("processes %v of %v were still running %v after the SIGKILL of the elector (reaped %v after it); want none %v after its death",
					left, pids, took.Round(time.Millisecond), died.Round(time.Millisecond), treeGoneBound)
			}
		})
	}
}

// TestRunStopKillsSetsidDescendants stops the elector with SIGTERM while its command's
// descendants, one of them in another session, ignore SIGTERM: after --kill-grace all of them
// are SIGKILLed, the elector exits 137 and releases the lease.
func TestRunStopKillsSetsidDescendants(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	const name = "tree-stop"
	job := treeJobs[2]
	pidFile := filepath.Join(t.TempDir(), "pids")
	args := append([]string{"run"}, leaseArgs(srv.Addr(), name, "a")...)
	args = append(args, "--kill-grace", "300ms", "--", "sh", "-c", job.script, "sh", pidFile)
	p := startElector(t, "elector", nil, args...)
	killPidsAtCleanup(t, pidFile)
	var pids []int
	waitFor(t, 10*time.Second, "the job's processes", func() bool {
		pids = readPids(pidFile)
		return len(pids) == job.procs
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit code %d, want %d: the job ignores SIGTERM", code, 128+int(syscall.SIGKILL))
	}
	for _, pid := range pids {
		if !processGone(pid) {
			t.Errorf("process %d of the job still runs after the elector exited", pid)
		}
	}
	assertLeaseGone(t, client, name)
}

// TestRunSecondSignalKills checks that a second SIGTERM or SIGINT during the kill grace
// SIGKILLs the command at once instead of waiting for the grace to end.
func TestRunSecondSignalKills(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			log := workerLog(filepath.Join(dir, "worker.log"))
			name := "second-" + strconv.Itoa(int(sig))
			const grace = time.Minute // within the bound of a 2m lease: 2m - 10s - 1.202s
			p := runReplica(t, srv.Addr(), name, "a", log, filepath.Join(dir, "lock"), []string{"--lease-duration", "2m", "--renew-deadline", "10s", "--kill-grace", grace.String()}, "-ignore-term")
			w, _ := log.waitEvent(t, 0, 10*time.Second, "the worker", isStart)
			p.signal(sig)
			log.waitEvent(t, 0, 5*time.Second, "the first signal at the worker", func(ev workerEvent) bool { return ev.Ev == "signal" })
			if !p.running() {
				t.Fatal("the elector exited although its worker ignores the signal")
			}
			sent := time.Now()
			p.signal(sig)
			code := p.wait(grace / 2)
			if code != 128+int(syscall.SIGKILL) {
				t.Errorf("exit code %d, want %d (the worker SIGKILLed)", code, 128+int(syscall.SIGKILL))
			}
			t.Logf("exited %v after the second %v", p.exited.Sub(sent), sig)
			if !processGone(w.PID) {
				t.Errorf("worker %d still runs", w.PID)
			}
			assertLeaseGone(t, client, name)
		})
	}
}
