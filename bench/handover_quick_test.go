package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/bench/internal/redisproc"
	"github.com/elector/elector/bench/internal/stats"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/testing/redistest/serverbin"
	"github.com/elector/elector/pkg/lease"
)

// The guard of TestQuickRunHandover (issue 27 item 4). Its floor is the start of the same
// worker (bench/cmd/benchchild, a Go program) by a plain exec.Cmd, measured interleaved with
// the handovers, so that both move with the machine's load: from exec to the worker's first
// line. A handover through `elector run` is that start plus the old worker's exit through
// its shim, the release, the follower's wake-up and acquire, and the go-ahead to a shim
// prepared while the replica was a follower: each step a wake-up of an idle process, which
// costs most on a loaded machine. Measured on the shared 2-core machine at load average 19
// (30 interleaved trials): floor median 3.2 ms, handover 13.8 ms (4.3 × the floor); with the
// shim started only when the term begins (the regression this guards against, which adds
// the start of the whole elector binary) 20.4 ms (6.3 ×). On a quiet machine the floor and
// the wake-ups shrink, the elector binary's start much less. The bound, median handover ≤
// runGuardRatio × median floor + runGuardSlack, lets the first pass at that load, with the
// slack for the wake-ups that the floor has not; on a quiet machine, where the regression
// added some 18 ms (28 against 10 ms), it stays well below the regression; it is a tripwire for such a regression,
// not a target.
//
// The guard has a structural half that load cannot blur: the shim that starts each new
// worker must have been started before the handover began, i.e. prepared while its replica
// followed (read from /proc: the worker's parent's start time against the time the old
// leader was signalled). Without the preparation (a mutant that skips it) 0 of 21 handovers
// pass it, and the ratio fails too (55 ms against a bound of 24 ms). The ratio half stays for
// slowdowns elsewhere on the path; a burst of load on the shared machine once kept three
// rounds in a row above it (24-33 ms against bounds of 22-30 ms, the same tree measuring 9 ms
// a minute later), so it takes five.
const (
	runGuardRatio = 4.0
	runGuardSlack = 8 * time.Millisecond
	// runGuardRounds is how many rounds may measure before the guard fails.
	runGuardRounds = 5
	// runGuardTrials handovers and as many floor starts: their medians are stable to about a
	// millisecond here.
	runGuardTrials = 21
)

// runFiguresEnv makes TestQuickRunHandover measure for docs/PERFORMANCE.md: more trials, the
// takeover after a crash too, and, when runBeforeEnv names other elector binaries (e.g.
// built from older commits; a list like PATH), their figures interleaved with this tree's:
//
//	ELECTOR_RUN_FIGURES=60 ELECTOR_RUN_BEFORE=/tmp/elector-old:/tmp/elector-older go test -count=1 -run QuickRunHandover -v .
const (
	runFiguresEnv = "ELECTOR_RUN_FIGURES"
	runBeforeEnv  = "ELECTOR_RUN_BEFORE"
)

// TestQuickRunHandover checks that a handover between two `elector run` replicas (old
// worker's last line → new worker's first) stays within a ratio of the worker's own start,
// measured in the same run (see runGuardRatio).
func TestQuickRunHandover(t *testing.T) {
	if _, err := serverbin.Server(); err != nil {
		if os.Getenv("CI") != "" || os.Getenv("ELECTOR_REQUIRE_REDIS") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	work := t.TempDir()
	bin, worker := buildRunBinaries(t, work)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	srv, err := redisproc.Start(ctx, work)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	n, figures := runGuardTrials, 0
	if v, err := strconv.Atoi(os.Getenv(runFiguresEnv)); err == nil && v > 0 {
		n, figures = v, v
	}
	var pairs []*runPair
	defer func() { // before the server stops: the electors release on the way out
		for _, p := range pairs {
			p.stop()
		}
	}()
	pairs = append(pairs, newRunPair(t, "this tree", bin, worker, srv.Addr(), rdb, work))
	if figures > 0 {
		for _, before := range filepath.SplitList(os.Getenv(runBeforeEnv)) {
			pairs = append(pairs, newRunPair(t, before, before, worker, srv.Addr(), rdb, work))
		}
	}
	// Up to runGuardRounds rounds: the guard fails only when every round's median is above
	// the bound, so that a burst of load in one round (CI runs beside other builds) does not
	// fail it; a regression is above it in every round.
	var floor []float64
	for round := 1; ; round++ {
		floor = nil
		for _, p := range pairs {
			p.handovers, p.prepared, p.unprepared = nil, 0, 0
		}
		for i := range n {
			ms, err := directStart(ctx, worker, filepath.Join(work, fmt.Sprintf("direct-%d-%d.log", round, i)))
			if err != nil {
				t.Fatal(err)
			}
			floor = append(floor, ms)
			for _, p := range pairs {
				p.trial(ctx, t, false)
			}
		}
		got, bound := stats.Median(pairs[0].handovers), runGuardRatio*stats.Median(floor)+ms(runGuardSlack)
		if got <= bound || figures > 0 {
			break
		}
		if round == runGuardRounds {
			t.Errorf("elector run handover median %.2f ms > %.1f × the worker's start (median %.2f ms) + %v = %.2f ms in each of %d rounds: did the start of a term get slower?",
				got, runGuardRatio, stats.Median(floor), runGuardSlack, bound, round)
			break
		}
		t.Logf("round %d: handover median %.2f ms above the bound %.2f ms (floor median %.2f ms); measuring again", round, got, bound, stats.Median(floor))
	}
	if figures > 0 {
		for range n {
			for _, p := range pairs {
				p.trial(ctx, t, true)
			}
		}
	}
	t.Logf("worker started by exec (floor): %s", summary(floor))
	for _, p := range pairs {
		t.Logf("%s: handover %s; takeover after expiry %s; old workers that got a SIGTERM when their elector was SIGKILLed: %d; new workers whose shim was prepared before the handover: %d of %d",
			p.name, summary(p.handovers), summary(p.takeovers), p.sigtermsOnCrash, p.prepared, p.prepared+p.unprepared)
	}
	// The structural half of the guard, which load cannot blur: the shim that starts a term's
	// worker was started while its replica followed, not on the handover's path (where its
	// start cost 5-18 ms). A replica restarted just before a trial on a starved machine may
	// not have prepared it yet, so the rule is most handovers, not all.
	if p := pairs[0]; p.prepared+p.unprepared > 0 && p.prepared*2 <= p.prepared+p.unprepared {
		t.Errorf("the new worker's shim was started after the handover began in %d of %d handovers: elector run no longer prepares the next term's shim while it follows",
			p.unprepared, p.prepared+p.unprepared)
	}
}

// summary formats the median and p99 of xs, in milliseconds.
func summary(xs []float64) string {
	if len(xs) == 0 {
		return "not measured"
	}
	return fmt.Sprintf("median %.2f ms, p99 %.2f ms (n=%d)", stats.Median(xs), stats.Quantile(xs, 0.99), len(xs))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// buildRunBinaries builds cmd/elector and the worker.
func buildRunBinaries(t *testing.T, work string) (bin, worker string) {
	t.Helper()
	bin, worker = filepath.Join(work, "elector"), filepath.Join(work, "benchchild")
	for _, b := range []struct{ dir, out, pkg string }{{"..", bin, "./cmd/elector"}, {".", worker, "./cmd/benchchild"}} {
		cmd := exec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir = b.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("build %s: %v\n%s", b.pkg, err, out)
		}
	}
	return bin, worker
}

// directStart starts the worker with a plain exec.Cmd and returns the time from the call to
// its first line, in milliseconds; then stops it.
func directStart(ctx context.Context, worker, logPath string) (float64, error) {
	cmd := exec.Command(worker)
	cmd.Env = append(os.Environ(), "BENCHCHILD_LOG="+logPath)
	t0 := time.Now().UnixNano()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	lines, err := waitLines(ctx, logPath, 1)
	if err != nil {
		return 0, err
	}
	return float64(lineTime(lines[0])-t0) / 1e6, nil
}

// runPair is two `elector run` replicas of one binary on a lease of their own, whose worker
// logs to one file.
type runPair struct {
	name, bin, worker, redis, lease, log string
	rdb                                  *redis.Client
	procs                                [2]*exec.Cmd
	leader, lines                        int
	handovers, takeovers                 []float64
	sigtermsOnCrash                      int // old workers that wrote an end when their elector was SIGKILLed
	// Handovers whose new worker's shim was started before the handover began (prepared
	// while its replica followed) and after it (on the handover's path); see shimStartTicks.
	prepared, unprepared int
}

// newRunPair starts the pair and waits for the first worker; the caller stops it.
func newRunPair(t *testing.T, name, bin, worker, addr string, rdb *redis.Client, work string) *runPair {
	t.Helper()
	p := &runPair{name: name, bin: bin, worker: worker, redis: addr, rdb: rdb,
		lease: fmt.Sprintf("handover-%d", time.Now().UnixNano()), log: filepath.Join(work, fmt.Sprintf("worker-%d.log", time.Now().UnixNano()))}
	for i := range p.procs {
		if err := p.start(i); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if _, err := waitLines(context.Background(), p.log, 1); err != nil {
				t.Fatalf("%s: first worker: %v", name, err)
			}
			p.lines = 1
		}
	}
	return p
}

// start starts replica i. A takeover after a crash is measured from the lease's expiry, so
// the lease may be long: 5s/3s leaves room for a --kill-grace of 1.5s (the bound is 1.948s;
// elector run refuses more), which lets a worker on a loaded machine write its end.
func (p *runPair) start(i int) error {
	cmd := exec.Command(p.bin, "run", "--lease-name", p.lease, "--identity", fmt.Sprintf("replica-%d", i),
		"--redis-addr", p.redis, "--lease-duration", "5s", "--renew-deadline", "3s", "--retry-period", "150ms",
		"--kill-grace", "1500ms", "--", p.worker)
	// Without the benchmark's own ELECTOR_* variables (ELECTOR_RUN_BEFORE…): the elector
	// refuses a variable that no flag reads.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "ELECTOR_") })
	cmd.Env = append(env, "BENCHCHILD_LOG="+p.log)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := os.OpenFile(p.log+".elector", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s run: %w", p.bin, err)
	}
	p.procs[i] = cmd
	return nil
}

// stop ends both replicas.
func (p *runPair) stop() {
	for _, c := range p.procs {
		if c != nil && c.ProcessState == nil {
			_ = c.Process.Signal(syscall.SIGTERM)
			_ = c.Wait()
		}
	}
}

// trial hands the lease over once, gracefully (SIGTERM to the leader's elector) or, with
// crash, by SIGKILL, and records the latency; then it restarts the old leader as a follower.
func (p *runPair) trial(ctx context.Context, t *testing.T, crash bool) {
	t.Helper()
	time.Sleep(500 * time.Millisecond) // the follower has subscribed and prepared its shim
	old := p.procs[p.leader]
	began, procOK := uptimeTicks()
	var expiry int64
	if crash {
		_ = old.Process.Signal(syscall.SIGKILL)
		_ = old.Wait()
		var err error
		if expiry, err = leaseExpiry(ctx, p.rdb, leasewire.KeysFor(lease.DefaultPrefix, p.lease).Lease); err != nil {
			t.Fatalf("%s: the lease's expiry after the crash: %v", p.name, err)
		}
	} else {
		_ = old.Process.Signal(syscall.SIGTERM)
	}
	end, begin, pid, err := p.waitHandover(ctx, crash)
	if err != nil {
		b, _ := os.ReadFile(p.log + ".elector")
		t.Fatalf("%s: %v; the electors' log:\n%s", p.name, err, b)
	}
	if shim, ok := shimStartTicks(pid); ok && procOK {
		// A shim prepared ahead was started when its replica began to follow, about half a
		// second before; one started on the handover's path, after began. The clock ticks
		// are 10 ms: 2 of them keep the rounding of both readings out.
		if shim+2 < began {
			p.prepared++
		} else {
			p.unprepared++
		}
	}
	if crash {
		p.takeovers = append(p.takeovers, float64(begin-expiry)/1e6)
	} else {
		p.handovers = append(p.handovers, float64(begin-end)/1e6)
		_ = old.Wait()
	}
	if err := p.start(p.leader); err != nil {
		t.Fatal(err)
	}
	p.leader = 1 - p.leader
}

// leaseExpiry returns when Redis deletes key, in Unix ns. Redis keeps a key's expiry in whole
// milliseconds of its clock (this machine's) and deletes the key once its millisecond count
// is past it: at PEXPIRETIME + 1 ms. A server without PEXPIRETIME (before 7.0) gives the
// remaining PTTL, in whole milliseconds too: the estimate is then up to 1 ms early.
func leaseExpiry(ctx context.Context, rdb *redis.Client, key string) (int64, error) {
	if at, err := rdb.PExpireTime(ctx, key).Result(); err == nil && at > 0 {
		return (at + time.Millisecond).Nanoseconds(), nil
	}
	sent := time.Now()
	pttl, err := rdb.PTTL(ctx, key).Result()
	if err != nil || pttl <= 0 {
		return 0, fmt.Errorf("PTTL %s: %v, %w", key, pttl, err)
	}
	return sent.Add(time.Since(sent)/2 + pttl).UnixNano(), nil
}

// waitHandover waits for the new worker's start and, unless crash, the old one's end, and
// returns their times and the new worker's pid. After a crash an end is not expected: the
// shim SIGKILLs the old worker; one written anyway (the worker got a SIGTERM) is counted in
// sigtermsOnCrash.
func (p *runPair) waitHandover(ctx context.Context, crash bool) (end, begin int64, pid int, err error) {
	for n := p.lines + 1; ; n++ {
		lines, err := waitLines(ctx, p.log, n)
		if err != nil {
			return 0, 0, 0, err
		}
		switch l := lines[n-1]; strings.Fields(l)[0] {
		case "end":
			end = lineTime(l)
			if crash {
				p.sigtermsOnCrash++
			}
		case "start":
			begin = lineTime(l)
			if f := strings.Fields(l); len(f) > 2 {
				pid, _ = strconv.Atoi(f[2])
			}
		}
		if begin != 0 && (crash || end != 0) {
			p.lines = n
			return end, begin, pid, nil
		}
	}
}

// uptimeTicks returns the time since boot in clock ticks (1/100 s, the unit of a process's
// start time in /proc), and false where /proc cannot tell.
func uptimeTicks() (int64, bool) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	s, err := strconv.ParseFloat(f[0], 64)
	return int64(s * 100), err == nil
}

// shimStartTicks returns the start time, in clock ticks since boot, of the parent of the
// worker pid (its shim), and false where /proc cannot tell. The clock tick is USER_HZ, 100
// on Linux.
func shimStartTicks(pid int) (int64, bool) {
	fields := func(pid int) []string { // the fields of /proc/PID/stat after "(comm)"
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return nil
		}
		s := string(b)
		return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	}
	w := fields(pid)
	if len(w) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(w[1]) // field 4
	if err != nil {
		return 0, false
	}
	s := fields(ppid)
	if len(s) < 20 {
		return 0, false
	}
	start, err := strconv.ParseInt(s[19], 10, 64) // field 22, starttime
	return start, err == nil
}

// lineTime returns the time of a worker's line: "start|end UNIX-NS PID".
func lineTime(line string) int64 {
	f := strings.Fields(line)
	if len(f) < 2 {
		return 0
	}
	ns, _ := strconv.ParseInt(f[1], 10, 64)
	return ns
}

// waitLines waits until the worker log at path has n lines and returns them.
func waitLines(ctx context.Context, path string, n int) ([]string, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		f, err := os.Open(path)
		if err == nil {
			var lines []string
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
			_ = f.Close()
			if len(lines) >= n {
				return lines, nil
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("worker log %s has fewer than %d lines after 20s", path, n)
		}
		time.Sleep(time.Millisecond)
	}
}
