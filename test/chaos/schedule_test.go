//go:build linux

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/internal/testing/testbin"
	"github.com/elector/elector/pkg/lease"
)

// TestScheduleChaos is issue 45's proof under chaos: three `elector run --schedule '@every 2s'`
// replicas (the real binary) against a real redis-server with AOF (appendonly yes, appendfsync
// always), the job (./schedjob) working 700ms per slot and recording each run, through the
// faults of the gocron measurement and more, in rounds: SIGKILL of the leader mid-run (about
// every 10s), a rollout (each replica in turn: a new process starts, the old one gets SIGTERM),
// a restart of Redis mid-run (SIGKILL, then the AOF is loaded), steps of Redis's clock (the
// clock that decides slots: libfaketime, ahead by 0.5s, back by 2s, ahead again; every forward
// step within the lease's margin), and outages that make slots impossible: every replica down,
// or Redis down, for about 10s. The checker (CheckSchedule) then counts, over every slot from
// the first to the last: slots run twice at once (must be 0), slots lost that the policy
// should have run (0), slots reported missed (elector status -o json) against the slots the
// test made impossible (a slot whose starting deadline passed before a live replica held the
// lease again), and the delay from a slot to CMD's start beside the exec floor, measured
// interleaved.
//
// By default it covers 24 slots (about a minute; skipped with -short). Environment:
//
//	ELECTOR_SCHEDULE_CHAOS=1           the long run: ELECTOR_SCHEDULE_CHAOS_SLOTS slots (default 300)
//	ELECTOR_SCHEDULE_CHAOS_SLOTS       how many slots (with or without the above)
//	ELECTOR_SCHEDULE_CHAOS_DIR         keep the logs (job log, electors, status, summary) there
//
// hack/schedule-chaos.sh runs the long one.
func TestScheduleChaos(t *testing.T) {
	slots := 24
	long := os.Getenv("ELECTOR_SCHEDULE_CHAOS") != ""
	if long {
		slots = 300
	}
	if s := os.Getenv("ELECTOR_SCHEDULE_CHAOS_SLOTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 5 {
			t.Fatalf("ELECTOR_SCHEDULE_CHAOS_SLOTS=%q: want a number of slots, 5 or more", s)
		}
		slots = n
	}
	if testing.Short() && !long {
		t.Skip("the schedule chaos test takes about a minute (24 slots of 2s); run it without -short, or the long one with hack/schedule-chaos.sh")
	}
	faketime, server, why := faketimeServer(t)
	if faketime == "" {
		t.Logf("no steps of Redis's clock: %s", why)
	} else {
		t.Setenv("ELECTOR_REDIS_SERVER", server)
		t.Logf("Redis's clock is stepped with libfaketime (%s) on %s", faketime, server)
	}
	redistest.ServerPath(t) // skip (or fail in CI) before building anything
	elector, _ := binaries(t)
	job := filepath.Join(binDir, "schedjob")
	if err := testbin.Build(job, "./schedjob", false); err != nil {
		t.Fatal(err)
	}
	dir := os.Getenv("ELECTOR_SCHEDULE_CHAOS_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(filepath.Join(dir, "electors"), 0o755); err != nil {
		t.Fatal(err)
	}
	_ = os.MkdirAll(filepath.Join(dir, "electors"), 0o755)

	h := &schedHarness{t: t, dir: dir, elector: elector, job: job, period: 2 * time.Second, deadline: 5 * time.Second,
		procs: map[int]*schedProc{}, metrics: map[int]float64{}}
	h.specFile = filepath.Join(dir, "faketime")
	if err := os.WriteFile(h.specFile, []byte("+0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	if faketime != "" {
		env = []string{"LD_PRELOAD=" + faketime, "FAKETIME_TIMESTAMP_FILE=" + h.specFile, "FAKETIME_NO_CACHE=1", "FAKETIME_DONT_FAKE_MONOTONIC=1"}
		h.steps = true
	}
	h.srv = redistest.StartEnv(t, env, "--appendonly", "yes", "--appendfsync", "always")
	h.direct = h.srv.Client(t)
	var err error
	if h.lease, err = leasekit.New(h.direct, schedLease, lease.Options{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.killAll)
	h.run(slots)
}

const schedLease = "sched"

// faketimeServer returns libfaketime's library and a redis-server that runs under it (Debian's
// does not: its shared jemalloc hangs there; hack/compat.sh builds servers that do), or why
// there is none.
func faketimeServer(t *testing.T) (lib, server, why string) {
	for _, c := range []string{os.Getenv("ELECTOR_LIBFAKETIME"), "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
		"/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1", "/usr/lib/faketime/libfaketime.so.1"} {
		if c != "" {
			if _, err := os.Stat(c); err == nil {
				lib = c
				break
			}
		}
	}
	if lib == "" {
		return "", "", "libfaketime not found (apt-get install libfaketime)"
	}
	var candidates []string
	if s := os.Getenv("ELECTOR_REDIS_SERVER"); s != "" {
		candidates = append(candidates, s)
	} else if p, err := exec.LookPath("redis-server"); err == nil {
		candidates = append(candidates, p)
	}
	if home, err := os.UserHomeDir(); err == nil {
		built, _ := filepath.Glob(filepath.Join(home, ".cache", "elector-compat", "redis-7*", "bin", "redis-server"))
		candidates = append(candidates, built...)
	}
	for _, c := range candidates {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		cmd := exec.CommandContext(ctx, c, "--version")
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "FAKETIME=+1")
		out, err := cmd.CombinedOutput()
		cancel()
		if err == nil && strings.Contains(string(out), " v=") {
			return lib, c, ""
		}
	}
	return "", "", fmt.Sprintf("none of %q runs under libfaketime (Debian's redis-server hangs there; hack/compat.sh builds one that does)", candidates)
}

type schedProc struct {
	identity string
	cmd      *exec.Cmd
	pid      int
	http     string
	done     chan struct{}
	status   syscall.WaitStatus
}

type schedHarness struct {
	t                *testing.T
	dir              string
	elector, job     string
	period, deadline time.Duration
	srv              *redistest.Server
	direct           *redis.Client
	lease            *leasekit.Lease
	specFile         string
	steps            bool

	mu       sync.Mutex
	procs    map[int]*schedProc // replica index → its current process
	metrics  map[int]float64    // pid → elector_schedule_missed_slots_total at its last scrape
	gen      int
	floor    []time.Duration
	jobFloor []time.Duration

	outages []Outage
	clock   []ClockStep
	faults  []FaultWindow
	kills   map[string]int
}

func (h *schedHarness) logf(format string, args ...any) {
	h.t.Logf("%s %s", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// start starts a new elector process for replica i.
func (h *schedHarness) start(i int) *schedProc {
	h.mu.Lock()
	h.gen++
	p := &schedProc{identity: fmt.Sprintf("r%d-%d", i, h.gen), http: redistest.FreeAddr(h.t), done: make(chan struct{})}
	h.mu.Unlock()
	logf, err := os.Create(filepath.Join(h.dir, "electors", p.identity+".log"))
	if err != nil {
		h.t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(h.elector, "run",
		"--redis-addr", h.srv.Addr(), "--lease-name", schedLease, "--identity", p.identity,
		"--lease-duration", leaseDuration.String(), "--renew-deadline", renewDeadline.String(),
		"--retry-period", retryPeriod.String(), "--kill-grace", killGrace.String(),
		"--http-addr", p.http,
		"--schedule", "@every "+h.period.String(), "--overlap", "wait", "--catch-up", "all",
		"--starting-deadline", h.deadline.String(), "--schedule-history", "100000",
		"--", h.job, "-log", filepath.Join(h.dir, "job.log"), "-lock", filepath.Join(h.dir, "job.lock"), "-work", "700ms")
	p.cmd.Env = cleanEnv()
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	p.pid = p.cmd.Process.Pid
	go func() {
		_ = p.cmd.Wait()
		p.status, _ = p.cmd.ProcessState.Sys().(syscall.WaitStatus)
		close(p.done)
	}()
	h.mu.Lock()
	h.procs[i] = p
	h.mu.Unlock()
	return p
}

func (h *schedHarness) killAll() {
	h.mu.Lock()
	ps := make([]*schedProc, 0, len(h.procs))
	for _, p := range h.procs {
		ps = append(ps, p)
	}
	h.mu.Unlock()
	for _, p := range ps {
		killGroups(p.pid)
		<-p.done
	}
}

// leader returns the replica index whose live process holds the lease, -1 if none.
func (h *schedHarness) leader() (int, *schedProc) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	st, err := h.lease.Get(ctx)
	cancel()
	if err != nil || !st.Held {
		return -1, nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, p := range h.procs {
		if p.identity == st.Record.Identity {
			select {
			case <-p.done:
				return -1, nil
			default:
				return i, p
			}
		}
	}
	return -1, nil
}

// waitLeader waits until a live replica holds the lease and returns when the test saw it.
func (h *schedHarness) waitLeader(timeout time.Duration) time.Time {
	deadline := time.Now().Add(timeout)
	for {
		if i, _ := h.leader(); i >= 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			h.t.Errorf("no live replica held the lease within %v", timeout)
			return time.Now()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// slotAt returns the slot at or before t; sleepUntil sleeps until t.
func (h *schedHarness) slotAt(t time.Time) time.Time {
	p := h.period.Milliseconds()
	return time.UnixMilli(t.UnixMilli() / p * p)
}

func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// midRun sleeps until 300ms after the next slot: inside its run.
func (h *schedHarness) midRun() {
	sleepUntil(h.slotAt(time.Now()).Add(h.period + 300*time.Millisecond))
}

// betweenRuns sleeps until 900ms after a slot, when its 700ms run has ended.
func (h *schedHarness) betweenRuns() time.Time {
	s := h.slotAt(time.Now().Add(-900 * time.Millisecond))
	t := s.Add(900 * time.Millisecond)
	if t.Before(time.Now()) {
		t = t.Add(h.period)
	}
	sleepUntil(t)
	return t
}

func (h *schedHarness) fault(kind string, from time.Time) {
	till := h.waitLeader(30 * time.Second)
	h.faults = append(h.faults, FaultWindow{Kind: kind, From: from, Till: till})
	h.kills[kind]++
	h.logf("%s: a live replica leads again after %v", kind, till.Sub(from).Round(time.Millisecond))
}

func (h *schedHarness) killLeader() {
	h.midRun()
	i, p := h.leader()
	if i < 0 {
		h.logf("sigkill: no leader to kill")
		return
	}
	from := time.Now()
	killGroups(p.pid)
	<-p.done // a dead holder is no leader
	h.logf("sigkill: leader %s (pid %d)", p.identity, p.pid)
	go func() { // the replica comes back, as a pod would
		time.Sleep(500 * time.Millisecond)
		h.start(i)
	}()
	h.fault("sigkill", from)
}

// rollout replaces every replica, the leader last and mid-run: a new process first, then
// SIGTERM to the old one.
func (h *schedHarness) rollout() {
	li, _ := h.leader()
	order := []int{}
	for i := range 3 {
		if i != li {
			order = append(order, i)
		}
	}
	if li >= 0 {
		order = append(order, li)
	}
	from := time.Now()
	for n, i := range order {
		h.mu.Lock()
		old := h.procs[i]
		h.mu.Unlock()
		if n == len(order)-1 {
			h.midRun()
			from = time.Now()
		}
		h.start(i)
		_ = syscall.Kill(old.pid, syscall.SIGTERM)
		select {
		case <-old.done:
		case <-time.After(10 * time.Second):
			h.t.Errorf("%s did not exit within 10s of SIGTERM", old.identity)
		}
		if c := old.status.ExitStatus(); !old.status.Signaled() && c != 0 && c != 143 {
			h.t.Errorf("%s exited %d after SIGTERM", old.identity, c)
		}
		h.logf("rollout: %s (pid %d) replaced", old.identity, old.pid)
		time.Sleep(time.Second)
	}
	h.fault("rollout", from)
}

func (h *schedHarness) restartRedis() {
	h.midRun()
	from := time.Now()
	h.srv.Restart() // SIGKILL; the AOF (fsync always) is loaded again
	h.logf("redis restart: back after %v", time.Since(from).Round(time.Millisecond))
	h.fault("redis-restart", from)
}

// step sets Redis's clock to the wall clock plus offset.
func (h *schedHarness) step(offset time.Duration) {
	if err := os.WriteFile(h.specFile, []byte(fmt.Sprintf("%+.3f\n", offset.Seconds())), 0o644); err != nil {
		h.t.Fatal(err)
	}
	at := time.Now()
	h.clock = append(h.clock, ClockStep{At: at, Offset: offset})
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	rt, err := h.direct.Time(ctx).Result()
	cancel()
	h.logf("clock step: Redis's clock at the wall clock %+v (TIME reads %v ahead: %v)", offset, rt.Sub(time.Now()).Round(time.Millisecond), err)
	h.kills["clock-step"]++
}

// clockSteps steps Redis's clock ahead by 0.5s, back by 2s, then ahead in 0.5s steps to 0,
// with a SIGKILL of the leader while it is behind. Forward steps stay within the lease's margin
// (LeaseDuration − RenewDeadline − drift, 778ms here): a larger one ends the lease early, as
// docs/DESIGN.md says.
func (h *schedHarness) clockSteps(short bool) {
	if !h.steps {
		return
	}
	from := time.Now()
	h.step(500 * time.Millisecond)
	time.Sleep(4 * time.Second)
	if short {
		h.step(0)
	} else {
		h.step(-1500 * time.Millisecond)
		time.Sleep(4 * time.Second)
		h.killLeader()
		for _, o := range []time.Duration{-1000, -500, 0} {
			time.Sleep(3 * time.Second)
			h.step(o * time.Millisecond)
		}
	}
	h.faults = append(h.faults, FaultWindow{Kind: "clock-steps", From: from, Till: time.Now().Add(h.deadline)})
	time.Sleep(2 * time.Second)
}

// outage makes slots impossible for about 10s: every replica down (SIGKILL), or Redis down.
// It ends at a time B with B − starting deadline halfway between two slots, so that which
// slots were impossible does not hang on the recovery's few hundred milliseconds.
func (h *schedHarness) outage(redisDown bool) {
	from := h.betweenRuns()
	until := h.slotAt(from.Add(9 * time.Second)).Add((h.period/2 + h.deadline) % h.period)
	for until.Before(from.Add(9 * time.Second)) {
		until = until.Add(h.period)
	}
	kind := "all-replicas-down"
	if redisDown {
		kind = "redis-down"
		h.srv.Stop()
	} else {
		h.killAll()
	}
	h.logf("%s until %s", kind, until.UTC().Format("15:04:05.000"))
	sleepUntil(until)
	if redisDown {
		h.srv.Restart()
	} else {
		for i := range 3 {
			h.start(i)
		}
	}
	rec := h.waitLeader(30 * time.Second)
	h.outages = append(h.outages, Outage{Kind: kind, From: from, Until: until, Recovered: rec})
	h.faults = append(h.faults, FaultWindow{Kind: kind, From: from, Till: rec})
	h.kills[kind]++
	h.logf("%s: a live replica leads %v after the outage ended", kind, rec.Sub(until).Round(time.Millisecond))
}

// background measures the exec floors and scrapes the replicas' metrics until ctx ends.
func (h *schedHarness) background(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(700 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if n%2 == 0 {
			t0 := time.Now()
			if err := exec.Command("/bin/true").Run(); err == nil {
				d := time.Since(t0)
				h.mu.Lock()
				h.floor = append(h.floor, d)
				h.mu.Unlock()
			}
			t0 = time.Now()
			if out, err := exec.Command(h.job, "-floor").Output(); err == nil {
				if ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64); err == nil {
					h.mu.Lock()
					h.jobFloor = append(h.jobFloor, time.Unix(0, ns).Sub(t0))
					h.mu.Unlock()
				}
			}
		}
		h.scrape()
	}
}

// scrape reads elector_schedule_missed_slots_total of every live replica.
func (h *schedHarness) scrape() {
	h.mu.Lock()
	ps := make([]*schedProc, 0, len(h.procs))
	for _, p := range h.procs {
		ps = append(ps, p)
	}
	h.mu.Unlock()
	cl := http.Client{Timeout: 300 * time.Millisecond}
	for _, p := range ps {
		resp, err := cl.Get("http://" + p.http + "/metrics")
		if err != nil {
			continue
		}
		sum, ok := 0.0, false
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, "elector_schedule_missed_slots_total{") {
				f := strings.Fields(line)
				if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
					sum += v
					ok = true
				}
			}
		}
		resp.Body.Close()
		if ok {
			h.mu.Lock()
			h.metrics[p.pid] = sum
			h.mu.Unlock()
		}
	}
}

func (h *schedHarness) run(slots int) {
	t := h.t
	h.kills = map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	bg := make(chan struct{})
	go h.background(ctx, bg)
	defer func() { cancel(); <-bg }()

	for i := range 3 {
		h.start(i)
	}
	seen := h.waitLeader(30 * time.Second)
	first := h.slotAt(seen).Add(h.period)
	enough := func() bool { return !h.slotAt(time.Now()).Before(first.Add(time.Duration(slots-1) * h.period)) }
	short := slots < 100
	var round []func()
	if short {
		round = []func(){h.killLeader, h.rollout, h.restartRedis, func() { h.clockSteps(true) }, func() { h.outage(false) }}
	} else {
		round = []func(){h.killLeader, h.rollout, h.killLeader, h.restartRedis, h.killLeader,
			func() { h.clockSteps(false) }, h.killLeader, func() { h.outage(false) },
			h.killLeader, h.restartRedis, h.killLeader, func() { h.outage(true) }}
	}
	for n := 0; !enough(); n++ {
		round[n%len(round)]()
		time.Sleep(4 * time.Second)
	}
	for !enough() {
		time.Sleep(100 * time.Millisecond)
	}
	// End between runs, so that every slot up to the last is decided.
	end := h.betweenRuns()
	last := h.slotAt(end)
	h.scrape()
	cancel()
	<-bg
	h.mu.Lock()
	ps := make([]*schedProc, 0, len(h.procs))
	for _, p := range h.procs {
		ps = append(ps, p)
	}
	h.mu.Unlock()
	for _, p := range ps {
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
	}
	for _, p := range ps {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not exit within 10s of SIGTERM", p.identity)
		}
	}

	// The lease is free now: elector status exits 3 and prints it all the same.
	status := exec.Command(h.elector, "status", "--redis-addr", h.srv.Addr(), "--lease-name", schedLease, "-o", "json")
	status.Env = cleanEnv()
	var stderr strings.Builder
	status.Stderr = &stderr
	out, err := status.Output()
	_ = os.WriteFile(filepath.Join(h.dir, "status.json"), out, 0o644)
	var st struct {
		Schedule ScheduleStatus `json:"schedule"`
	}
	if jerr := json.Unmarshal(out, &st); jerr != nil {
		t.Fatalf("elector status -o json: %v, %v: %s%s", err, jerr, out, stderr.String())
	}
	jobs, err := ParseJobLog(filepath.Join(h.dir, "job.log"))
	if err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	metrics := 0.0
	for _, v := range h.metrics {
		metrics += v
	}
	run := SchedRun{Period: h.period, Deadline: h.deadline, First: first.UTC(), Last: last.UTC(), Jobs: jobs, Status: st.Schedule,
		Metrics: metrics, Outages: h.outages, Steps: h.clock, Faults: h.faults, Floor: h.floor, JobFloor: h.jobFloor}
	h.mu.Unlock()
	rep := CheckSchedule(run)
	sum := fmt.Sprintf("faults: %v\n%s", h.kills, rep.Summary(run))
	_ = os.WriteFile(filepath.Join(h.dir, "summary.txt"), []byte(sum), 0o644)
	t.Logf("\n%s", sum)
	if rep.Failed() {
		t.Errorf("the schedule broke a promise (logs in %s; set ELECTOR_SCHEDULE_CHAOS_DIR to keep them)", h.dir)
	}
}
