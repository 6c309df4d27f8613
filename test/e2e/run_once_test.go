package e2e

import (
	"context"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest"
)

// TestRunOnSuccessHold runs a job that succeeds on two replicas with --on-success=hold: the
// job runs once, the replica that ran it keeps the lease for several lease durations (nobody
// reruns it), and SIGTERM then releases the lease and exits 0. A term lost while the job
// still ran (a starved machine: the flake hunt once saw the renew deadline pass 0.5 s into
// a job of 0.1 s) stops it before its success was seen, and the job rightly runs again in the
// next term; such runs are counted from the electors' logs, and what must hold is that no
// run follows the one whose success was seen.
func TestRunOnSuccessHold(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	dir := t.TempDir()
	log := workerLog(filepath.Join(dir, "worker.log"))
	lock := filepath.Join(dir, "lock")
	const name = "hold"
	hold := []string{"--on-success", "hold"}
	a := runReplica(t, srv.Addr(), name, "a", log, lock, hold, "-exit-after", "100ms", "-exit-code", "0")
	first, _ := log.waitEvent(t, 0, 10*time.Second, "the worker", isStart)
	if first.ID != "a" {
		t.Fatalf("first worker runs for %q", first.ID)
	}
	b := runReplica(t, srv.Addr(), name, "b", log, lock, hold, "-exit-after", "100ms", "-exit-code", "0")
	log.waitEvent(t, 0, 5*time.Second, "the worker's exit", func(ev workerEvent) bool { return ev.Ev == "exit" })
	waitFor(t, 10*time.Second, "b to see a as the leader", func() bool {
		return strings.Contains(b.stderr.String(), `"New leader observed" leader="a"`)
	})
	// Five lease durations of the test timing: without hold, b would have run the job at once.
	time.Sleep(5 * time.Second)
	if !a.running() || !b.running() {
		t.Fatalf("an elector exited: a running %v, b running %v", a.running(), b.running())
	}
	// The replica that saw the job succeed says so, with the job's pid, and holds the lease.
	succeeded := regexp.MustCompile(`"The command succeeded; holding the lease until SIGTERM or SIGINT \(--on-success=hold\)" pid=(\d+)`)
	out := map[string]string{"a": a.stderr.String(), "b": b.stderr.String()}
	// Terms that ended by themselves ("Stopped leading" with these reasons): the job rightly
	// runs again in the next term.
	lost := 0
	for _, reason := range []string{`reason="renew deadline exceeded"`, `reason="lease lost"`} {
		lost += strings.Count(out["a"], reason) + strings.Count(out["b"], reason)
	}
	holder, pid := "", 0
	for _, id := range []string{"a", "b"} {
		if m := succeeded.FindStringSubmatch(out[id]); m != nil {
			if holder != "" && lost == 0 {
				t.Errorf("both replicas say that their job succeeded and that they hold the lease, and no term was lost")
			}
			pid, _ = strconv.Atoi(m[1]) // \d+
			holder = id
		}
	}
	if holder == "" || (lost == 0 && holder != "a") {
		t.Fatalf("want a (or, after a lost term, whoever ran the job next) to say that its job succeeded and that it holds the lease; a:\n%s\nb:\n%s", out["a"], out["b"])
	}
	if h := holderOf(leaseValue(t, client, name)); h != holder {
		t.Errorf("lease held by %q, want %s holding it after its job succeeded", h, holder)
	}
	// No run after the one whose success was seen; every other run was stopped by a lost term.
	n := log.checkWorkers(t)
	var lastStart workerEvent
	for _, ev := range log.events(t) {
		if isStart(ev) {
			lastStart = ev
		}
	}
	if lastStart.PID != pid || n > 1+lost {
		t.Errorf("the job ran %d times, the last as pid %d; want once after the %d runs stopped by a lost term, the last the one that succeeded (pid %d); worker log:\n%s",
			n, lastStart.PID, lost, pid, log.dump(t))
	} else if lost > 0 {
		t.Logf("%d runs of the job were stopped by a lost term (a starved machine) and ran again", lost)
	}
	b.signal(syscall.SIGTERM)
	if code := b.wait(5 * time.Second); code != 0 {
		t.Errorf("follower b exited with %d after SIGTERM, want 0", code)
	}
	a.signal(syscall.SIGTERM)
	if code := a.wait(5 * time.Second); code != 0 {
		t.Errorf("a exited with %d after SIGTERM while holding, want 0", code)
	}
	assertLeaseGone(t, client, name)
}

// TestRunTimeout checks --timeout: a replica that cannot lead within it exits 4 without ever
// running its command or touching the holder's lease; one that leads in time is not
// affected by it.
func TestRunTimeout(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	dir := t.TempDir()
	log := workerLog(filepath.Join(dir, "worker.log"))
	const name = "timeout"
	const other = "v1:42:0123456789abcdef:other"
	holdLease(t, client, name, other)
	const timeout = 500 * time.Millisecond
	start := time.Now()
	p := runReplica(t, srv.Addr(), name, "a", log, filepath.Join(dir, "lock"), []string{"--timeout", timeout.String()})
	assertGaveUp(t, p, start, 10*time.Second, log, client, name, other)
	if took := p.exited.Sub(start); took < timeout {
		t.Errorf("gave up %v after the start, before --timeout %v", took, timeout)
	}
	if !strings.Contains(p.stderr.String(), "not the leader within --timeout 500ms") {
		t.Errorf("no reason for giving up in stderr:\n%s", p.stderr.String())
	}

	// A replica that leads within --timeout runs its command to its end, longer than it.
	free := "timeout-free"
	q := runReplica(t, srv.Addr(), free, "a", log, filepath.Join(dir, "lock2"), []string{"--timeout", "300ms"}, "-exit-after", "1s", "-exit-code", "6")
	if code := q.wait(10 * time.Second); code != 6 {
		t.Errorf("exit code %d, want the worker's 6: --timeout must not matter once leading", code)
	}
	assertLeaseGone(t, client, free)
}

// TestRunTryOnce checks --try-once: exit 4 at once (not at the holder's expiry) when another
// replica holds the lease, and run the command as usual when the lease is free.
func TestRunTryOnce(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	dir := t.TempDir()
	log := workerLog(filepath.Join(dir, "worker.log"))
	const name = "try-once"
	// Another replica, then an earlier process with this replica's identity (another
	// instance): both are someone else's term. The lease lasts a minute: 20s is well before.
	for _, holder := range []string{"v1:42:0123456789abcdef:other", "v1:43:0123456789abcdef:a"} {
		holdLease(t, client, name, holder)
		start := time.Now()
		p := runReplica(t, srv.Addr(), name, "a", log, filepath.Join(dir, "lock"), []string{"--try-once"})
		assertGaveUp(t, p, start, 20*time.Second, log, client, name, holder)
	}

	free := "try-once-free"
	r := runReplica(t, srv.Addr(), free, "a", log, filepath.Join(dir, "lock"), []string{"--try-once"}, "-exit-after", "200ms", "-exit-code", "7")
	if code := r.wait(10 * time.Second); code != 7 {
		t.Errorf("exit code %d with a free lease, want the worker's 7", code)
	}
	assertLeaseGone(t, client, free)
}

// TestRunOnceFlagErrors checks that bad values of the new flags are usage errors naming
// the flag, from the command line and from the environment.
func TestRunOnceFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--on-success", "maybe"}, `--on-success: want release or hold, got "maybe"`},
		{[]string{"ELECTOR_ON_SUCCESS=keep"}, nil, `--on-success: want release or hold, got "keep"`},
		{nil, []string{"--timeout", "-1s"}, "--timeout: must be 0 (no timeout) or a positive duration"},
		{[]string{"ELECTOR_TIMEOUT=soon"}, nil, "ELECTOR_TIMEOUT (flag --timeout)"},
		{[]string{"ELECTOR_TRY_ONCE=perhaps"}, nil, "ELECTOR_TRY_ONCE (flag --try-once)"},
	} {
		args := append([]string{"run", "--lease-name", "x", "--identity", "a"}, tc.args...)
		args = append(args, "--", "true")
		code, _, stderr := runElector(t, 10*time.Second, tc.env, args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%v %v: exit code %d, stderr %q; want 2 and %q", tc.env, tc.args, code, stderr, tc.want)
		}
		oneLine(t, stderr)
	}
}

// holdLease sets the lease key of name to record for a minute, as another replica's term.
func holdLease(t *testing.T, client *redis.Client, name, record string) {
	t.Helper()
	if err := client.Set(context.Background(), leaseKey(name), record, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
}

// assertGaveUp checks that p exited 4 within limit of start, without running its command
// or touching the lease held as record.
func assertGaveUp(t *testing.T, p *proc, start time.Time, limit time.Duration, log workerLog, client *redis.Client, name, record string) {
	t.Helper()
	if code := p.wait(limit); code != 4 {
		t.Errorf("exit code %d, want 4 (gave up without leading)", code)
	}
	if evs := log.events(t); len(evs) != 0 {
		t.Errorf("the command ran:\n%s", log.dump(t))
	}
	if v := leaseValue(t, client, name); v != record {
		t.Errorf("lease is %q, want the holder's %q untouched", v, record)
	}
	t.Logf("gave up %v after the start", p.exited.Sub(start))
}
