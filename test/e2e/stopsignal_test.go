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

// stopSignalJob is the command of TestRunStopSignalKillsTree: "$1" is its log, "$2" the lock
// of the term's worker, "$3" what it does once its worker runs. At its start it checks that
// no worker of an earlier term holds the lock ("overlap" in the log, before "start"); then it
// starts a worker in a session of its own (setsid; flock holds the lock for the worker, which
// ignores SIGTERM) and logs the worker's pids. $3 is "loop" (run until stopped), "trap-kill0"
// (on SIGTERM, the clean-up idiom `kill -9 0`) or "exit-kill0" (end with `kill -9 0` by
// itself).
const stopSignalJob = `t=$ELECTOR_FENCING_TOKEN
flock -n "$2" true || echo "overlap $t" >> "$1"
echo "start $t $$" >> "$1"
setsid flock -n "$2" sh -c 'trap "" TERM; echo "worker $0 $$" >> "$1"; while :; do sleep 1; done' "$t" "$1" &
echo "spawned $t $!" >> "$1"
case $3 in
trap-kill0) trap 'kill -9 0' TERM; while :; do sleep 0.05; done ;;
exit-kill0) sleep 0.3; kill -9 0 ;;
*) while :; do sleep 0.05; done ;;
esac
`

// stopSignalLog is the log of stopSignalJob: its lines, split in fields.
type stopSignalLog string

func (l stopSignalLog) lines() [][]string {
	b, _ := os.ReadFile(string(l))
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			out = append(out, f)
		}
	}
	return out
}

// count returns the number of lines of kind.
func (l stopSignalLog) count(kind string) int {
	n := 0
	for _, f := range l.lines() {
		if f[0] == kind {
			n++
		}
	}
	return n
}

// pids returns the pids the log names, with the token of their term.
func (l stopSignalLog) pids() map[int]string {
	out := map[int]string{}
	for _, f := range l.lines() {
		if len(f) == 3 {
			if pid, err := strconv.Atoi(f[2]); err == nil {
				out[pid] = f[1]
			}
		}
	}
	return out
}

// TestRunStopSignalKillsTree: for every kind of stop (the stop signal SIGKILL, 9 or SIGTERM;
// a command that answers SIGTERM with `kill -9 0`; a command that ends with `kill -9 0`), no
// worker of a term, not even one in another session that ignores SIGTERM, still runs when
// the next term's command starts on the other replica. Each new command checks it with the
// flock its predecessor's worker held; leadership moves with `elector resign --to`.
func TestRunStopSignalKillsTree(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	cases := []struct {
		name, signal, mode string
		rounds             int
	}{
		{"SIGKILL", "SIGKILL", "loop", 3},
		{"9", "9", "loop", 3},
		{"SIGTERM", "SIGTERM", "loop", 3},
		{"trap-kill0", "SIGTERM", "trap-kill0", 3},
		{"exit-kill0", "SIGTERM", "exit-kill0", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log, lock := stopSignalLog(filepath.Join(dir, "log")), filepath.Join(dir, "lock")
			name := "stopsig-" + strings.ToLower(tc.name)
			ids := []string{"a", "b"}
			for _, id := range ids {
				// The timing: a renew deadline that a loaded machine does not miss
				// while the shim kills, so that each resign hands over with a release.
				args := []string{"run", "--redis-addr", srv.Addr(), "--lease-name", name, "--identity", id,
					"--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "500ms",
					"--stop-signal", tc.signal, "--kill-grace", "300ms",
					"--", "sh", "-c", stopSignalJob, "sh", string(log), lock, tc.mode}
				startElector(t, id, nil, args...)
			}
			t.Cleanup(func() { // before the electors' cleanups, which wait for their pipes
				for pid := range log.pids() {
					if !processGone(pid) {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			})
			overlaps := 0
			for round := range tc.rounds {
				waitFor(t, 20*time.Second, "the term's worker", func() bool {
					return log.count("spawned") > round && log.count("worker")+log.count("overlap") > round
				})
				holder := ""
				for _, f := range log.lines() {
					if f[0] == "start" {
						holder = f[1]
					}
				}
				if tc.mode != "exit-kill0" {
					to := ids[0]
					if holderOf(leaseValue(t, client, name)) == to {
						to = ids[1]
					}
					// The other replica must follow (be subscribed to the lease's events),
					// else resign refuses --to: on a loaded machine it may not even have
					// started yet, or not yet resubscribed after the last handover.
					waitFollowers(t, client, name, 1)
					if code, _, stderr := resignCLI(t, srv.Addr(), name, 20*time.Second, "--to", to); code != 0 {
						t.Fatalf("elector resign --to %s: exit %d\n%s", to, code, stderr)
					}
				}
				waitFor(t, 20*time.Second, "the next term's command", func() bool { return log.count("start") >= round+2 })
				if n := log.count("overlap"); n > overlaps {
					overlaps = n
					var alive []int
					for pid, token := range log.pids() {
						if token == holder && !processGone(pid) {
							alive = append(alive, pid)
						}
					}
					t.Errorf("round %d: a worker of term %s held its lock when the next term's command started (alive now: %v)", round, holder, alive)
				}
			}
			t.Logf("stop signal %s, %s: %d of %d handovers with a worker of the old term alive", tc.signal, tc.mode, overlaps, tc.rounds)
		})
	}
}
