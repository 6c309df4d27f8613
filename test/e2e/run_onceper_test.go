package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
	"github.com/elector/elector/pkg/schedule"
)

// doneKey is the done mark of a lease with the default prefix.
func doneKey(name string) string { return "elector:{" + name + "}:done" }

// markTTL returns the remaining time of the done mark of name, 0 when there is none.
func markTTL(t *testing.T, c *redis.Client, name string) time.Duration {
	t.Helper()
	d, err := c.PTTL(context.Background(), doneKey(name)).Result()
	if err != nil {
		t.Fatal(err)
	}
	return max(d, 0)
}

// TestRunOncePer runs a job on two replicas with --once-per: it runs once; SIGTERM to the
// holder hands the lease over, and the other replica does not rerun it while the mark holds,
// only after it expired (the period ended), and then once.
func TestRunOncePer(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	dir := t.TempDir()
	log := workerLog(filepath.Join(dir, "worker.log"))
	lock := filepath.Join(dir, "lock")
	const name = "once-per"
	// Long enough that the handover (a few lease durations of the test timing at most) is
	// over before it ends, on a loaded machine; the test checks that it was.
	const period = 8 * time.Second
	flags := []string{"--once-per", period.String()}
	a := runReplica(t, srv.Addr(), name, "a", log, lock, flags, "-exit-after", "100ms", "-exit-code", "0")
	first, _ := log.waitEvent(t, 0, 10*time.Second, "the worker", isStart)
	if first.ID != "a" {
		t.Fatalf("first worker runs for %q", first.ID)
	}
	b := runReplica(t, srv.Addr(), name, "b", log, lock, flags, "-exit-after", "100ms", "-exit-code", "0")
	waitFor(t, 10*time.Second, "the done mark", func() bool { return markTTL(t, client, name) > 0 })
	waitFor(t, 10*time.Second, "b to see a as the leader", func() bool {
		return strings.Contains(b.stderr.String(), `"New leader observed" leader="a"`)
	})
	a.signal(syscall.SIGTERM)
	if code := a.wait(10 * time.Second); code != 0 {
		t.Errorf("a exited with %d after SIGTERM, want 0", code)
	}
	waitFor(t, 10*time.Second, "b to lead", func() bool { return holderOf(leaseValue(t, client, name)) == "b" })
	left := markTTL(t, client, name)
	if left == 0 {
		t.Fatalf("the mark expired before b led: inconclusive, raise the period; worker log:\n%s", log.dump(t))
	}
	t.Logf("b leads with the mark holding %v more", left)
	// While the mark holds, nobody reruns the job.
	for markTTL(t, client, name) > 0 {
		if n := len(log.events(t)); n != 2 { // a's start and exit
			t.Fatalf("the job ran again within the period, %v before the mark expired; worker log:\n%s", markTTL(t, client, name), log.dump(t))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(b.stderr.String(), `"Not running the command: it succeeded in this period already (--once-per)" doneBy="a"`) {
		t.Errorf("b does not log the mark it found; stderr:\n%s", b.stderr.String())
	}
	// The period is over: b runs it, once.
	second, _ := log.waitEvent(t, 2, 10*time.Second, "the rerun after the period", isStart)
	if second.ID != "b" {
		t.Errorf("the rerun is %q's, want b's", second.ID)
	}
	if gap := second.time().Sub(first.time()); gap < period-time.Second {
		t.Errorf("the rerun began %v after the first run, want about the period %v", gap, period)
	}
	waitFor(t, 10*time.Second, "b's done mark", func() bool { return markTTL(t, client, name) > 0 })
	time.Sleep(time.Second)
	if n := log.checkWorkers(t); n != 2 {
		t.Errorf("the job ran %d times, want twice; worker log:\n%s", n, log.dump(t))
	}
	b.signal(syscall.SIGTERM)
	if code := b.wait(10 * time.Second); code != 0 {
		t.Errorf("b exited with %d after SIGTERM, want 0", code)
	}
	assertLeaseGone(t, client, name)
}

// TestRunOncePerExitIfDone is the CronJob form: the replica that runs the job exits 0 after
// writing the mark; the next one finds the mark and exits 0 without running it; elector status
// shows the mark; --force runs it again.
func TestRunOncePerExitIfDone(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	dir := t.TempDir()
	log := workerLog(filepath.Join(dir, "worker.log"))
	lock := filepath.Join(dir, "lock")
	const name = "once-exit"
	flags := []string{"--once-per", "1m", "--exit-if-done"}
	a := runReplica(t, srv.Addr(), name, "a", log, lock, flags, "-exit-after", "100ms", "-exit-code", "0")
	if code := a.wait(15 * time.Second); code != 0 {
		t.Fatalf("a exited with %d, want 0 after its job succeeded", code)
	}
	if ttl := markTTL(t, client, name); ttl <= 50*time.Second {
		t.Errorf("the mark holds %v, want about 1m", ttl)
	}
	assertLeaseGone(t, client, name)
	b := runReplica(t, srv.Addr(), name, "b", log, lock, flags, "-exit-after", "100ms", "-exit-code", "0")
	if code := b.wait(15 * time.Second); code != 0 {
		t.Errorf("b exited with %d, want 0 (done already)", code)
	}
	if n := log.checkWorkers(t); n != 1 {
		t.Errorf("the job ran %d times, want once; worker log:\n%s", n, log.dump(t))
	}
	if !strings.Contains(b.stderr.String(), "Exiting without running the command: it succeeded in this period already (--exit-if-done)") {
		t.Errorf("b does not say why it exits; stderr:\n%s", b.stderr.String())
	}
	assertLeaseGone(t, client, name)

	_, out, _ := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", name, "-o", "json")
	var st struct {
		Done *struct {
			Holder   string    `json:"holder"`
			Token    int64     `json:"token"`
			ExitCode int       `json:"exitCode"`
			Finished time.Time `json:"finished"`
			TTLMs    int64     `json:"ttlMs"`
		} `json:"done"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Done == nil || st.Done.Holder != "a" || st.Done.Token == 0 || st.Done.TTLMs <= 0 || st.Done.Finished.IsZero() {
		t.Errorf("status -o json = %s (%v); want the done mark of a", out, err)
	}
	_, text, _ := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", name)
	if !strings.Contains(text, "done:") || !strings.Contains(text, "by a (token") {
		t.Errorf("status text does not show the mark:\n%s", text)
	}

	c := runReplica(t, srv.Addr(), name, "c", log, lock, append(flags, "--force"), "-exit-after", "100ms", "-exit-code", "0")
	if code := c.wait(15 * time.Second); code != 0 {
		t.Errorf("c exited with %d, want 0", code)
	}
	// Two runs: a's and c's; a term of c lost while its job ran (a starved machine) stops that
	// run before its success, and c runs the job again in its next term.
	cLost := strings.Contains(c.stderr.String(), `reason="renew deadline exceeded"`) || strings.Contains(c.stderr.String(), `reason="lease lost"`)
	if evs, n := log.events(t), log.checkWorkers(t); n < 2 || (n > 2 && !cLost) || evs[len(evs)-1].ID != "c" {
		t.Errorf("--force did not run the job again (%d runs; a term of c lost: %v); worker log:\n%s", n, cLost, log.dump(t))
	}
}

// TestRunOncePerFailedJob checks that a failed job writes no mark: its exit code passes
// through and the next replica runs the job.
func TestRunOncePerFailedJob(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	dir := t.TempDir()
	log := workerLog(filepath.Join(dir, "worker.log"))
	lock := filepath.Join(dir, "lock")
	const name = "once-fail"
	flags := []string{"--once-per", "1m", "--exit-if-done"}
	a := runReplica(t, srv.Addr(), name, "a", log, lock, flags, "-exit-after", "100ms", "-exit-code", "5")
	if code := a.wait(15 * time.Second); code != 5 {
		t.Fatalf("a exited with %d, want the job's 5", code)
	}
	if ttl := markTTL(t, client, name); ttl != 0 {
		t.Errorf("a failed job left a mark (%v)", ttl)
	}
	b := runReplica(t, srv.Addr(), name, "b", log, lock, flags, "-exit-after", "100ms", "-exit-code", "0")
	if code := b.wait(15 * time.Second); code != 0 {
		t.Errorf("b exited with %d, want 0", code)
	}
	if n := log.checkWorkers(t); n != 2 {
		t.Errorf("the job ran %d times, want twice (the failure is retried); worker log:\n%s", n, log.dump(t))
	}
	// Both runs are recorded as a schedule's are: a's failed with its exit code, then b's done.
	st, found, err := schedule.ReadStatus(context.Background(), client, "", name)
	if err != nil || !found || len(st.Runs) != 2 || st.Runs[0].Result != "done" || st.Runs[1].Result != "failed" || st.Runs[1].ExitCode != 5 {
		t.Errorf("schedule status %+v, %v, %v; want b's done run after a's failed one (exit 5)", st, found, err)
	}
}

// TestRunOncePerMarkWriteFails is the documented failure case of a job that succeeded but
// whose done mark could not be written (here an ACL that lets the replica read the mark but
// not write it): the replica retries, bounded, says that the next leader will rerun the job,
// and does not rerun it itself within the period; once it stops, the next leader reruns the
// job (at least once per period, not at most once).
func TestRunOncePerMarkWriteFails(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	dir := t.TempDir()
	log := workerLog(filepath.Join(dir, "worker.log"))
	lock := filepath.Join(dir, "lock")
	const name = "once-acl"
	rules := []any{"ACL", "SETUSER", "nodone", "on", ">pw", "resetkeys", "resetchannels", "&elector:*", "+@all",
		"~elector:{" + name + "}:lease", "~elector:{" + name + "}:token", "~elector:{" + name + "}:terms",
		"~elector:{" + name + "}:resign", "~elector:{" + name + "}:schedule", "~elector:{" + name + "}:runs",
		"%R~elector:{" + name + "}:done"}
	if err := client.Do(context.Background(), rules...).Err(); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--once-per", "1m"}
	args := append([]string{"run"}, leaseArgs(srv.Addr(), name, "a")...)
	args = append(args, "--redis-username", "nodone")
	args = append(args, flags...)
	args = append(args, workerArgs(log, lock, "-exit-after", "100ms", "-exit-code", "0")...)
	a := startElector(t, "a", []string{"REDIS_PASSWORD=pw"}, args...)
	waitFor(t, 20*time.Second, "a to give up writing the mark", func() bool {
		return strings.Contains(a.stderr.String(), "Cannot write the done mark; giving up: the next leader runs the command again (at-least-once)")
	})
	if !strings.Contains(a.stderr.String(), "Cannot write the done mark; retrying") {
		t.Errorf("a did not retry the write; stderr:\n%s", a.stderr.String())
	}
	if ttl := markTTL(t, client, name); ttl != 0 {
		t.Fatalf("a mark exists (%v) although the ACL forbids writing it", ttl)
	}
	b := runReplica(t, srv.Addr(), name, "b", log, lock, flags, "-exit-after", "100ms", "-exit-code", "0")
	// a keeps leading without rerunning the job: three lease durations of the test timing.
	time.Sleep(3 * time.Second)
	if n := log.checkWorkers(t); n != 1 || holderOf(leaseValue(t, client, name)) != "a" {
		t.Fatalf("the job ran %d times, holder %q; want once, a holding; worker log:\n%s", n, holderOf(leaseValue(t, client, name)), log.dump(t))
	}
	a.signal(syscall.SIGTERM)
	if code := a.wait(10 * time.Second); code != 0 {
		t.Errorf("a exited with %d after SIGTERM, want 0", code)
	}
	ev, _ := log.waitEvent(t, 2, 10*time.Second, "b's rerun", isStart)
	if ev.ID != "b" {
		t.Errorf("the rerun is %q's, want b's", ev.ID)
	}
	waitFor(t, 10*time.Second, "b's mark", func() bool { return markTTL(t, client, name) > 0 })
	b.signal(syscall.SIGTERM)
	b.wait(10 * time.Second)
}

// TestRunOncePerMarkCompat checks that --once-per on the slot machinery keeps the done mark of
// before: a mark written by the code before (leasekit.MarkDone, done.lua) stops a rerun; the
// documented reset (DEL of the done key) makes the job due; the mark the new code writes reads
// as before (leasekit.GetDone, the reader of every elector since --once-per), and elector
// status shows it beside the run the schedule state records.
func TestRunOncePerMarkCompat(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	dir := t.TempDir()
	log := workerLog(filepath.Join(dir, "worker.log"))
	lock := filepath.Join(dir, "lock")
	const name = "once-compat"
	old, err := leasekit.New(client, name, lease.Options{Identity: "old"})
	if err != nil {
		t.Fatal(err)
	}
	ok, st, err := old.Acquire(ctx, time.Minute)
	if err != nil || !ok {
		t.Fatalf("acquire as old: %v %v", ok, err)
	}
	if ok, err := old.MarkDone(ctx, leasekit.Done{Term: st.Record, Finished: time.Now(), TTL: time.Minute}); err != nil || !ok {
		t.Fatalf("the old writer's MarkDone = %v, %v", ok, err)
	}
	if _, err := old.Release(ctx, st.Record); err != nil {
		t.Fatal(err)
	}
	flags := []string{"--once-per", "1m", "--exit-if-done"}
	a := runReplica(t, srv.Addr(), name, "a", log, lock, flags, "-exit-after", "100ms", "-exit-code", "0")
	if code := a.wait(15 * time.Second); code != 0 {
		t.Fatalf("a exited with %d, want 0 (done already by the old mark)", code)
	}
	if n := log.checkWorkers(t); n != 0 {
		t.Fatalf("the job ran %d times under an old mark; worker log:\n%s", n, log.dump(t))
	}
	if !strings.Contains(a.stderr.String(), `"Not running the command: it succeeded in this period already (--once-per)" doneBy="old"`) {
		t.Errorf("a does not log the old mark; stderr:\n%s", a.stderr.String())
	}

	if err := client.Del(ctx, doneKey(name)).Err(); err != nil { // the documented reset
		t.Fatal(err)
	}
	b := runReplica(t, srv.Addr(), name, "b", log, lock, flags, "-exit-after", "100ms", "-exit-code", "0")
	if code := b.wait(15 * time.Second); code != 0 {
		t.Fatalf("b exited with %d, want 0 after its job succeeded", code)
	}
	if n := log.checkWorkers(t); n != 1 {
		t.Fatalf("the job ran %d times after the reset, want once; worker log:\n%s", n, log.dump(t))
	}
	d, err := old.GetDone(ctx)
	if err != nil || d == nil || d.Term.Identity != "b" || d.ExitCode != 0 || d.TTL <= 50*time.Second || d.Finished.IsZero() {
		t.Fatalf("the new mark reads %+v, %v; want b's, about 1m", d, err)
	}

	_, out, _ := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", name, "-o", "json")
	var status struct {
		Done *struct {
			Holder string `json:"holder"`
		} `json:"done"`
		Schedule *struct {
			Spec string `json:"spec"`
			Next string `json:"next"`
			Runs []struct {
				Holder string `json:"holder"`
				Result string `json:"result"`
			} `json:"runs"`
		} `json:"schedule"`
	}
	if err := json.Unmarshal([]byte(out), &status); err != nil || status.Done == nil || status.Done.Holder != "b" ||
		status.Schedule == nil || status.Schedule.Spec != "@once-per 1m0s" || status.Schedule.Next == "" ||
		len(status.Schedule.Runs) != 1 || status.Schedule.Runs[0].Holder != "b" || status.Schedule.Runs[0].Result != "done" {
		t.Errorf("status -o json = %s (%v); want b's mark and its done run under @once-per 1m0s", out, err)
	}
}
