package scale

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/bench/internal/redisproc"
	"github.com/elector/elector/internal/testing/redistest"
)

// scenario is one size of the benchmark, from ELECTOR_SCALE and its overrides.
type scenario struct {
	name          string
	leases        int
	replicas      int
	cluster       bool // a 3-master Redis Cluster rather than one redis-server
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
	window        time.Duration // the steady-state window
	settle        time.Duration // from the spread to the window
	spreadLimit   time.Duration // how long to wait for the spread before going on without it
	maxRSS        int64         // the replicas' and Redis's RSS together above which the run is aborted
	returnAtOnce  bool          // OnStartedLeading returns at once (no goroutine per term) rather than blocking
}

// scenarioFromEnv reads ELECTOR_SCALE (100k or 1m) and the overrides ELECTOR_SCALE_LEASES,
// _REPLICAS, _CLUSTER (0 or 1), _WINDOW, _SETTLE, _TIMING ("15s,10s,2s"), _SPREAD_LIMIT,
// _MAX_RSS_GB and _CALLBACK (block or return).
func scenarioFromEnv(t *testing.T) scenario {
	var s scenario
	switch v := os.Getenv("ELECTOR_SCALE"); strings.ToLower(v) {
	case "":
		t.Skip("the scale benchmark runs only when ELECTOR_SCALE is set: ELECTOR_SCALE=100k (100,000 leases, 3 replica processes, one redis-server) or ELECTOR_SCALE=1m (1,000,000 leases, 10 replica processes, a 3-master Redis Cluster); see bench/scale/README.md")
	case "100k":
		s = scenario{name: "100k", leases: 100000, replicas: 3}
	case "1m":
		s = scenario{name: "1m", leases: 1000000, replicas: 10, cluster: true}
	default:
		t.Fatalf("ELECTOR_SCALE=%q: want 100k or 1m", v)
	}
	s.leaseDuration, s.renewDeadline, s.retryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	s.spreadLimit, s.maxRSS = 10*time.Minute, 14<<30
	envInt := func(name string, dst *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				t.Fatalf("%s=%q: want a positive integer", name, v)
			}
			*dst = n
		}
	}
	envDur := func(name string, dst *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				t.Fatalf("%s=%q: want a positive duration", name, v)
			}
			*dst = d
		}
	}
	envInt("ELECTOR_SCALE_LEASES", &s.leases)
	envInt("ELECTOR_SCALE_REPLICAS", &s.replicas)
	if v := os.Getenv("ELECTOR_SCALE_CLUSTER"); v != "" {
		s.cluster = v == "1"
	}
	envDur("ELECTOR_SCALE_SPREAD_LIMIT", &s.spreadLimit)
	if v := os.Getenv("ELECTOR_SCALE_TIMING"); v != "" {
		parts := strings.Split(v, ",")
		if len(parts) != 3 {
			t.Fatalf("ELECTOR_SCALE_TIMING=%q: want LeaseDuration,RenewDeadline,RetryPeriod, e.g. 15s,10s,2s", v)
		}
		for i, dst := range []*time.Duration{&s.leaseDuration, &s.renewDeadline, &s.retryPeriod} {
			d, err := time.ParseDuration(parts[i])
			if err != nil {
				t.Fatalf("ELECTOR_SCALE_TIMING=%q: %v", v, err)
			}
			*dst = d
		}
	}
	// The steady state begins once every follower tried each of the others' leases at its
	// share and parked it (election.Group: the first attempt at the holder's expiry, within a
	// LeaseDuration of the spread), and those that the spread had unparked came due.
	// The window is one cycle of those parked attempts (each comes once per 4 ×
	// LeaseDuration), so that it measures their mean rate, not one of their waves.
	s.settle, s.window = 4*s.leaseDuration, 4*s.leaseDuration
	envDur("ELECTOR_SCALE_SETTLE", &s.settle)
	envDur("ELECTOR_SCALE_WINDOW", &s.window)
	switch v := os.Getenv("ELECTOR_SCALE_CALLBACK"); v {
	case "", "block":
	case "return":
		s.returnAtOnce = true
	default:
		t.Fatalf("ELECTOR_SCALE_CALLBACK=%q: want block (OnStartedLeading blocks until its ctx is cancelled) or return (it returns at once)", v)
	}
	gb := 0
	envInt("ELECTOR_SCALE_MAX_RSS_GB", &gb)
	if gb > 0 {
		s.maxRSS = int64(gb) << 30
	}
	return s
}

// node is one redis-server of the run, with a plain client for INFO.
type node struct {
	srv    *redistest.Server
	client *redis.Client
}

// nodeStats is what the run reads from a node's INFO at each end of the window.
type nodeStats struct {
	cpu   time.Duration // used_cpu_sys + used_cpu_user
	calls map[string]int64
	usec  map[string]int64 // time in each command (a script's includes its commands')
}

func (n node) stats(ctx context.Context) (nodeStats, error) {
	m, err := redisproc.Info(ctx, n.client, "cpu")
	if err != nil {
		return nodeStats{}, fmt.Errorf("node %s: %w", n.srv.Addr(), err)
	}
	sys, _ := strconv.ParseFloat(m["used_cpu_sys"], 64)
	user, _ := strconv.ParseFloat(m["used_cpu_user"], 64)
	calls, usec, err := redisproc.CommandStatsTimes(ctx, n.client)
	if err != nil {
		return nodeStats{}, fmt.Errorf("node %s: %w", n.srv.Addr(), err)
	}
	return nodeStats{cpu: time.Duration((sys + user) * float64(time.Second)), calls: calls, usec: usec}, nil
}

// results are the figures of a run, printed at its end even when it stopped early.
type results struct {
	s         scenario
	loadStart string
	loadEnd   string

	spread     time.Duration // 0: not reached
	spreadNote string

	windowSecs   float64
	cpuPct       []float64 // per replica, % of one core
	heapMB       []float64 // per replica, the highest heap in use in the window
	liveMB       []float64 // per replica, the highest live heap in the window
	rssMB        []float64 // per replica, at the end of the window
	heldAtWindow []int
	redisPct     []float64 // per node, % of one core
	callsPerSec  map[string]float64
	usecPerSec   map[string]float64 // Redis's time in each command, µs per second
	redisRSSMB   []float64

	killedShare  int
	reheldMedian time.Duration
	reheldMax    time.Duration
	reheldNever  int

	overlap   *overlaps
	terms     int
	aborted   string
	memPeakGB float64
}

// TestScale runs the scale benchmark chosen by ELECTOR_SCALE; see README.md. It fails only on
// a lease held by two processes at once (or when it cannot run); every other figure is
// reported against its goal, not asserted.
func TestScale(t *testing.T) {
	s := scenarioFromEnv(t)
	ctx := context.Background()
	res := &results{s: s, loadStart: loadavg()}
	t.Cleanup(func() { // registered first: runs last, after every process is gone
		res.loadEnd = loadavg()
		t.Log("\n" + res.table())
	})
	// ELECTOR_SCALE_LOGS=DIR keeps the replicas' logs and term records there; else they go
	// with the test's temp directory.
	dir := os.Getenv("ELECTOR_SCALE_LOGS")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("ELECTOR_SCALE_LOGS: %v", err)
	}
	bin := buildReplica(t, dir)

	var nodes []node
	var addrs []string
	if s.cluster {
		c := redistest.StartCluster(t, 3)
		for _, srv := range c.Nodes {
			nodes = append(nodes, node{srv: srv, client: srv.Client(t)})
		}
		addrs = c.Addrs()
	} else {
		srv := redistest.Start(t)
		nodes = []node{{srv: srv, client: srv.Client(t)}}
		addrs = []string{srv.Addr()}
	}

	args := []string{
		"-addrs", strings.Join(addrs, ","), "-cluster=" + strconv.FormatBool(s.cluster),
		"-count", strconv.Itoa(s.leases), "-offset", "0",
		"-lease-duration", s.leaseDuration.String(), "-renew-deadline", s.renewDeadline.String(),
		"-retry-period", s.retryPeriod.String(),
	}
	if s.returnAtOnce {
		args = append(args, "-return-at-once")
	}
	t.Logf("scenario %s: %d leases, %d replica processes, %s, timing %v/%v/%v; load average %s",
		s.name, s.leases, s.replicas, map[bool]string{false: "one redis-server", true: "a 3-master Redis Cluster"}[s.cluster],
		s.leaseDuration, s.renewDeadline, s.retryPeriod, res.loadStart)
	start := time.Now()
	reps := make([]*replica, s.replicas)
	// ELECTOR_SCALE_PROFILE=DIR: replica 0 writes a CPU profile of the window and a heap
	// profile at its end into DIR (its CPU figure then includes the profiler's cost).
	profDir := os.Getenv("ELECTOR_SCALE_PROFILE")
	for i := range reps {
		a := args
		if i == 0 && profDir != "" {
			if err := os.MkdirAll(profDir, 0o755); err != nil {
				t.Fatalf("ELECTOR_SCALE_PROFILE: %v", err)
			}
			a = append(slices.Clone(args), "-profile", profDir)
		}
		reps[i] = startReplica(t, bin, dir, i, a)
	}
	var tripped atomic.Value // string: why the memory guard killed the run
	guardDone, guardExited := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		close(guardDone)
		<-guardExited
	})
	go func() {
		defer close(guardExited)
		guard(s.maxRSS, reps, nodes, &tripped, &res.memPeakGB, guardDone)
	}()
	abort := func() bool {
		why, _ := tripped.Load().(string)
		if why == "" {
			return false
		}
		if res.aborted == "" {
			var held []int
			var heap []float64
			for _, r := range reps {
				x := r.last()
				held, heap = append(held, x.held), append(heap, float64(x.inuse)/(1<<20))
			}
			res.aborted = fmt.Sprintf("%s, %.0f s after the start; leases held %v; last heap in use per replica %s MB",
				why, time.Since(start).Seconds(), held, spreadOf(heap, "%.0f"))
		}
		return true
	}

	// 1. Time to a fair spread: every lease held, each replica within ±10% of K/R.
	share := float64(s.leases) / float64(s.replicas)
	for {
		total, ok := 0, true
		var counts []int
		for _, r := range reps {
			n := r.last().held
			counts = append(counts, n)
			total += n
			ok = ok && float64(n) >= 0.9*share && float64(n) <= 1.1*share
		}
		if ok && total == s.leases {
			res.spread = time.Since(start)
			break
		}
		if abort() {
			t.Fatalf("aborted before the spread: %s", res.aborted)
		}
		if time.Since(start) > s.spreadLimit {
			res.spreadNote = fmt.Sprintf("not reached in %v: held %v (total %d of %d)", s.spreadLimit, counts, total, s.leases)
			t.Log(res.spreadNote)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if res.spread > 0 {
		t.Logf("spread after %v", res.spread.Round(time.Millisecond))
	}

	// 2. Steady state: settle, then a window.
	time.Sleep(s.settle)
	before := make([]nodeStats, len(nodes))
	for i, n := range nodes {
		st, err := n.stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		before[i] = st
	}
	w0 := time.Now()
	if profDir != "" {
		_ = syscall.Kill(reps[0].pid(), syscall.SIGUSR1)
	}
	time.Sleep(s.window)
	w1 := time.Now()
	if profDir != "" {
		_ = syscall.Kill(reps[0].pid(), syscall.SIGUSR2)
		t.Logf("replica 0's profiles of the window: %s/cpu.pprof, %s/heap.pprof", profDir, profDir)
	}
	if abort() {
		t.Fatalf("aborted in the steady-state window: %s", res.aborted)
	}
	res.windowSecs = w1.Sub(w0).Seconds()
	res.callsPerSec, res.usecPerSec = map[string]float64{}, map[string]float64{}
	for i, n := range nodes {
		st, err := n.stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res.redisPct = append(res.redisPct, 100*(st.cpu-before[i].cpu).Seconds()/res.windowSecs)
		for cmd, c := range st.calls {
			res.callsPerSec[cmd] += float64(c-before[i].calls[cmd]) / res.windowSecs
			res.usecPerSec[cmd] += float64(st.usec[cmd]-before[i].usec[cmd]) / res.windowSecs
		}
		res.redisRSSMB = append(res.redisRSSMB, float64(rss(n.srv.PID()))/(1<<20))
	}
	for _, r := range reps {
		rs := r.between(w0, w1)
		if len(rs) < 2 {
			t.Fatalf("replica %d: %d reports in the window (its log: %s)", r.id, len(rs), r.stderr)
		}
		a, b := rs[0], rs[len(rs)-1]
		res.cpuPct = append(res.cpuPct, 100*(b.cpu-a.cpu).Seconds()/b.at.Sub(a.at).Seconds())
		var inuse, live int64
		for _, x := range rs {
			inuse, live = max(inuse, x.inuse), max(live, x.live)
		}
		res.heapMB = append(res.heapMB, float64(inuse)/(1<<20))
		res.liveMB = append(res.liveMB, float64(live)/(1<<20))
		res.rssMB = append(res.rssMB, float64(rss(r.pid()))/(1<<20))
		res.heldAtWindow = append(res.heldAtWindow, b.held)
	}

	// 3. Kill the last replica; wait until the survivors hold every lease.
	victim := reps[len(reps)-1]
	killedAt := time.Now()
	victim.kill()
	t.Logf("killed replica %d (held %d) with SIGKILL", victim.id, res.heldAtWindow[len(reps)-1])
	reheldLimit := 4*s.leaseDuration + time.Minute
	for {
		total := 0
		for _, r := range reps[:len(reps)-1] {
			total += r.last().held
		}
		if total == s.leases || time.Since(killedAt) > reheldLimit || abort() {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // the last starts reach the term files

	// 4. Stop the survivors gracefully; check every term.
	for _, r := range reps[:len(reps)-1] {
		if !r.stop(2 * time.Minute) {
			t.Logf("replica %d did not stop by itself within 2 minutes; killed (its open terms end when it was reaped)", r.id)
		}
	}
	var all []interval
	for _, r := range reps {
		iv, err := readTerms(r.terms, r.id, r.exitAt)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, iv...)
	}
	res.terms = len(all)
	res.reheldMedian, res.reheldMax, res.reheldNever, res.killedShare = reheld(all, victim.id, killedAt.UnixNano())
	o := findOverlaps(all)
	res.overlap = &o
	if o.count > 0 {
		t.Errorf("%d double holds: a lease held by two processes at once; worst: %s", o.count, o.first)
	}
	if res.aborted == "" {
		abort()
	}
}

// guard samples the RSS of the replicas and of Redis every second; above limit it kills the
// replicas (to protect the machine and the other work on it) and sets why.
func guard(limit int64, reps []*replica, nodes []node, why *atomic.Value, peakGB *float64, done <-chan struct{}) {
	var peak int64
	defer func() { *peakGB = float64(peak) / (1 << 30) }()
	for {
		select {
		case <-done:
			return
		case <-time.After(time.Second):
		}
		var total int64
		for _, r := range reps {
			if r.alive() {
				total += rss(r.pid())
			}
		}
		for _, n := range nodes {
			if pid := n.srv.PID(); pid != 0 {
				total += rss(pid)
			}
		}
		peak = max(peak, total)
		if total > limit {
			why.Store(fmt.Sprintf("memory guard: replicas and Redis reached %.1f GB RSS (limit %.1f GB, ELECTOR_SCALE_MAX_RSS_GB); replicas killed",
				float64(total)/(1<<30), float64(limit)/(1<<30)))
			for _, r := range reps {
				if r.alive() {
					_ = syscall.Kill(-r.pid(), syscall.SIGKILL)
				}
			}
			return
		}
	}
}

// loadavg returns the first three fields of /proc/loadavg.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// table formats the figures against the scale goals (README.md).
func (r *results) table() string {
	var b strings.Builder
	s := r.s
	fmt.Fprintf(&b, "scale %s: %d leases, %d replicas, %s, timing %v/%v/%v, OnStartedLeading %s, window %.0f s, load average %s before, %s after\n",
		s.name, s.leases, s.replicas, map[bool]string{false: "standalone redis-server", true: "3-master Redis Cluster"}[s.cluster],
		s.leaseDuration, s.renewDeadline, s.retryPeriod, map[bool]string{false: "blocks", true: "returns at once"}[s.returnAtOnce],
		r.windowSecs, r.loadStart, r.loadEnd)
	if r.aborted != "" {
		fmt.Fprintf(&b, "ABORTED: %s\n", r.aborted)
	}
	fmt.Fprintf(&b, "%-42s %-28s %s\n", "figure", "measured", "goal")
	row := func(name, measured, goal string) { fmt.Fprintf(&b, "%-42s %-28s %s\n", name, measured, goal) }
	if r.spread > 0 {
		row("time to a fair spread (±10%)", fmt.Sprintf("%.1f s", r.spread.Seconds()), "≤ 15 s")
	} else {
		row("time to a fair spread (±10%)", "not reached", "≤ 15 s")
		if r.spreadNote != "" {
			fmt.Fprintf(&b, "  (%s)\n", r.spreadNote)
		}
	}
	if len(r.cpuPct) > 0 {
		sum := 0.0
		for _, c := range r.cpuPct {
			sum += c
		}
		row("CPU per replica (% of one core)", spreadOf(r.cpuPct, "%.1f"), "≤ 3 %")
		row("CPU, replicas together", fmt.Sprintf("%.1f %%", sum), "≤ 100 % (1M)")
		row("Go heap in use per replica, max (MB)", spreadOf(r.heapMB, "%.0f"), "≤ 64 MB")
		row("Go heap live per replica, max (MB)", spreadOf(r.liveMB, "%.0f"), "")
		row("RSS per replica (MB)", spreadOf(r.rssMB, "%.0f"), "")
		row("leases held per replica", fmt.Sprint(r.heldAtWindow), "")
	}
	if len(r.redisPct) > 0 {
		sum := 0.0
		for _, c := range r.redisPct {
			sum += c
		}
		per := ""
		if len(r.redisPct) > 1 {
			per = " (nodes " + spreadOf(r.redisPct, "%.1f") + ")"
		}
		row("Redis CPU (INFO cpu, % of one core)", fmt.Sprintf("%.1f %%%s", sum, per), "≤ 10 % (100k), ≤ 100 % (1M)")
		row("Redis RSS (MB)", spreadOf(r.redisRSSMB, "%.0f"), "")
		type kv struct {
			k string
			v float64
		}
		var calls []kv
		total := 0.0
		for k, v := range r.callsPerSec {
			if v > 0 {
				calls = append(calls, kv{k, v})
				total += v
			}
		}
		sort.Slice(calls, func(i, j int) bool { return calls[i].v > calls[j].v })
		row("Redis calls/s, all (scripts' included)", fmt.Sprintf("%.0f", total), "")
		for _, c := range calls {
			if c.v >= 1 {
				// The share of a core Redis spent in the command (a script's includes its
				// commands'), from commandstats' usec.
				row("  "+c.k, fmt.Sprintf("%.0f (%.1f %% of a core)", c.v, r.usecPerSec[c.k]/1e4), "")
			}
		}
	}
	if r.killedShare > 0 {
		row("killed replica's share held again: longest", fmt.Sprintf("%.1f s (median %.1f s)", r.reheldMax.Seconds(), r.reheldMedian.Seconds()),
			fmt.Sprintf("≤ LD+2 s = %v", s.leaseDuration+2*time.Second))
		row("  leases of its share, never held again", fmt.Sprintf("%d of %d", r.reheldNever, r.killedShare), "0")
	}
	if r.overlap != nil {
		row("double holds (terms overlapping > 0)", fmt.Sprintf("%d of %d terms", r.overlap.count, r.terms), "0")
		if r.overlap.count > 0 {
			fmt.Fprintf(&b, "  worst: %s\n", r.overlap.first)
		}
	}
	row("peak RSS, replicas and Redis together", fmt.Sprintf("%.1f GB", r.memPeakGB), "")
	return b.String()
}

// spreadOf formats values as "min–max (v1 v2 ...)" with format.
func spreadOf(v []float64, format string) string {
	if len(v) == 0 {
		return "-"
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if len(v) > 4 {
		return fmt.Sprintf(format+"–"+format, lo, hi)
	}
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf(format, x)
	}
	return strings.Join(parts, " ")
}
