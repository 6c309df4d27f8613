package e2e

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/redistest"
)

// shimKilledJobs start the worker ("$@" after the pid file "$1") outside the command's
// process group and session, where the kill of that group does not reach it, and write the
// command's pid to "$1".
var shimKilledJobs = []struct{ name, script string }{
	// setsid(1) execs the worker in a session of its own; its parent stays the command.
	{"setsid", `f=$1; shift; setsid "$@" & echo $$ > "$f"; wait`},
	// A double fork through setsid: the worker is an orphan, adopted by the shim.
	{"setsid-double-fork", `f=$1; shift; (setsid "$@" &); echo $$ > "$f"; while :; do sleep 1; done`},
}

// TestRunShimKilledKillsEscapedWorkers SIGKILLs the shim of the leader's command from
// outside (as by pid, `kill -9 -1` or the OOM killer) while a worker that left the
// command's process group and session runs: the leader kills that worker, which it adopted
// as a child subreaper, before it releases the lease, so the follower's worker never runs
// beside it (issue 42, item 2: before, 3 of 3 rounds overlapped, the escaped worker running on
// after the release).
func TestRunShimKilledKillsEscapedWorkers(t *testing.T) {
	srv := redistest.Start(t)
	for _, job := range shimKilledJobs {
		t.Run(job.name, func(t *testing.T) {
			dir := t.TempDir()
			log := workerLog(filepath.Join(dir, "worker.log"))
			lock := filepath.Join(dir, "worker.lock")
			pidFile := filepath.Join(dir, "cmd.pid")
			name := "shim-killed-" + job.name
			args := append([]string{"run"}, leaseArgs(srv.Addr(), name, "a")...)
			args = append(args, "--", "sh", "-c", job.script, "sh", pidFile, bins.worker, "-log", string(log), "-lock", lock)
			a := startElector(t, "a", nil, args...)
			w, _ := log.waitEvent(t, 0, 10*time.Second, "a's worker", isStart)
			t.Cleanup(func() { // it holds a's output pipes: before a's cleanup, which waits for them
				if !processGone(w.PID) {
					_ = syscall.Kill(w.PID, syscall.SIGKILL)
				}
			})
			if sessionOf(w.PID) == sessionOf(a.pid()) {
				t.Fatalf("the worker %d is in the elector's session %d", w.PID, sessionOf(a.pid()))
			}
			var cmdPid int
			waitFor(t, 10*time.Second, "the command's pid", func() bool {
				cmdPid = readPidFile(pidFile)
				return cmdPid > 0
			})
			_, shim, ok := procStat(cmdPid)
			if _, parent, _ := procStat(shim); !ok || parent != a.pid() {
				t.Fatalf("the command %d's parent %d is not a child of the elector %d (its shim)", cmdPid, shim, a.pid())
			}

			b := runReplica(t, srv.Addr(), name, "b", log, lock, nil)
			waitFor(t, 10*time.Second, "b following a", func() bool {
				return strings.Contains(b.stderr.String(), `"New leader observed" leader="a"`)
			})

			if err := syscall.Kill(shim, syscall.SIGKILL); err != nil {
				t.Fatalf("SIGKILL the shim: %v", err)
			}
			killed := time.Now()
			nb, _ := log.waitEvent(t, 0, 15*time.Second, "b's worker", func(ev workerEvent) bool { return isStart(ev) && ev.ID == "b" })
			gone := processGone(w.PID) // when b's worker had started
			t.Logf("b's worker started %v after the SIGKILL of a's shim", nb.time().Sub(killed).Round(time.Millisecond))
			if !gone {
				t.Errorf("a's worker %d still ran when b's worker started", w.PID)
			}
			log.checkWorkers(t)
			// A worker left running would hold a's output pipes, and this wait would fail.
			t.Logf("a exited with %d", a.wait(10*time.Second))
			if !strings.Contains(a.stderr.String(), "The command's process supervisor was killed") {
				t.Errorf("a did not log the killed shim; stderr:\n%s", a.stderr.String())
			}
		})
	}
}

// readPidFile returns the pid in path, 0 while it holds none.
func readPidFile(path string) int {
	if pids := readPids(path); len(pids) > 0 {
		return pids[0]
	}
	return 0
}
