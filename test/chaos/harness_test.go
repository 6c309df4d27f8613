//go:build linux

package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// Election timing of the replicas. Every acquire and renew call of the elector is bounded by
// max(retry period, half the renew deadline) (its context and its client's dial, read and
// write timeouts, timing.CallTimeout), so that bound must exceed the 200ms round trip of the
// latency fault with room for the scheduling delays of a loaded machine: with a 1s lease, 600ms renew deadline and 150ms retry period, every call
// times out for as long as the latency lasts and nobody leads.
const (
	leaseDuration = 2 * time.Second
	renewDeadline = 1200 * time.Millisecond
	retryPeriod   = 500 * time.Millisecond
	// killGrace fits well in leaseDuration - renewDeadline, so that a worker that ignores its
	// stop signal is killed before another replica can acquire.
	killGrace = 300 * time.Millisecond
	// leaderlessBound is the bound on the time without a worker after a fault while
	// Redis is reachable.
	leaderlessBound = leaseDuration + time.Second
)

const (
	replicas     = 5
	leaseName    = "chaos"
	fenceKey     = "chaos:fence"
	listKey      = "chaos:writes"
	restartDelay = 500 * time.Millisecond // before a replica whose elector exited runs again
	drainEvery   = 500 * time.Millisecond
	// recoveryTimeout bounds the wait for an accepted write after a fault; the checker fails
	// the run long before (leaderlessBound).
	recoveryTimeout = 10 * time.Second
)

// harness runs the replicas, the fault proxy and Redis, injects faults and collects what the
// checker needs.
type harness struct {
	t        *testing.T
	rng      *rand.Rand
	dir      string // logs of the run
	elector  string // binary
	worker   string // binary
	srv      *redistest.Server
	proxy    *faultproxy.Proxy
	direct   *redis.Client   // straight to Redis, for the test's own reads
	lease    *leasekit.Lease // the lease, read through direct
	replicas []*replica
	start    time.Time

	mu       sync.Mutex
	stalls   []Stall
	events   []Event
	faults   []Fault
	acquired []Acquisition // from the lease's channel

	drainMu sync.Mutex // held while draining the list and while Redis restarts
	epochs  [][]Entry
	last    Entry // the last entry drained
}

// newHarness starts Redis, the proxy and nothing else yet.
func newHarness(t *testing.T, seed int64, dir string) *harness {
	elector, worker := binaries(t)
	h := &harness{
		t: t, rng: rand.New(rand.NewPCG(uint64(seed), uint64(seed)^0x9e3779b97f4a7c15)),
		dir: dir, elector: elector, worker: worker,
		epochs: [][]Entry{nil},
	}
	for _, sub := range []string{"workers", "electors"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.srv = redistest.Start(t)
	h.direct = h.srv.Client(t)
	var err error
	if h.lease, err = leasekit.New(h.direct, leaseName, lease.Options{}); err != nil {
		t.Fatal(err)
	}
	h.proxy = faultproxy.Start(t, h.srv.Addr())
	// Registered last, so it runs first: no process outlives the test, whatever failed.
	t.Cleanup(h.killAll)
	return h
}

// event records a line for the timeline.
func (h *harness) event(format string, args ...any) {
	h.addEvent(Event{Time: time.Now(), Text: fmt.Sprintf(format, args...)})
}

// problem records a violation found by the harness.
func (h *harness) problem(format string, args ...any) {
	h.addEvent(Problem(time.Now(), format, args...))
}

func (h *harness) addEvent(e Event) {
	h.mu.Lock()
	h.events = append(h.events, e)
	h.mu.Unlock()
}

// cleanEnv is the test's environment without anything that would configure the elector.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "ELECTOR_") || name == "REDIS_PASSWORD" || name == "POD_NAME" || name == "GORACE" {
			continue
		}
		env = append(env, kv)
	}
	// A race report makes the elector exit with 66, which the supervisor reports.
	return append(env, "GORACE=exitcode=66 atexit_sleep_ms=0")
}

// replica is one slot of the deployment: an elector process, restarted when it exits.
type replica struct {
	h        *harness
	identity string
	done     chan struct{} // closed when the supervising loop has ended

	mu       sync.Mutex
	cur      *proc
	expected bool // the next exit was asked for
	stopping bool
	starts   int
	wake     chan struct{} // closed to cut the restart delay short when stopping
}

// proc is one elector process.
type proc struct {
	cmd     *exec.Cmd
	pid     int
	logPath string
	done    chan struct{}
	status  syscall.WaitStatus // valid after done
}

// startReplicas starts the supervising loop of every replica.
func (h *harness) startReplicas() {
	for i := range replicas {
		r := &replica{h: h, identity: fmt.Sprintf("r%d", i), done: make(chan struct{}), wake: make(chan struct{})}
		h.replicas = append(h.replicas, r)
		go r.supervise()
	}
}

// supervise runs the replica's elector again and again until the replica is stopping.
func (r *replica) supervise() {
	defer close(r.done)
	for {
		p, err := r.launch()
		if err != nil {
			r.h.problem("start elector %s: %v", r.identity, err)
			return
		}
		<-p.done
		r.mu.Lock()
		expected, stopping := r.expected, r.stopping
		r.expected, r.cur = false, nil
		r.mu.Unlock()
		how := fmt.Sprintf("exit code %d", p.status.ExitStatus())
		if p.status.Signaled() {
			how = "killed by " + p.status.Signal().String()
		}
		if expected {
			r.h.event("elector %s (pid %d) exits: %s", r.identity, p.pid, how)
		} else {
			r.h.problem("elector %s (pid %d) exited by itself: %s; last lines of %s:\n%s", r.identity, p.pid, how, p.logPath, tailFile(p.logPath, 15))
		}
		if stopping {
			return
		}
		select {
		case <-time.After(restartDelay):
		case <-r.wake:
		}
		r.mu.Lock()
		stopping = r.stopping
		r.mu.Unlock()
		if stopping {
			return
		}
	}
}

// launch starts a new elector process for the replica.
func (r *replica) launch() (*proc, error) {
	h := r.h
	r.mu.Lock()
	r.starts++
	n := r.starts
	r.mu.Unlock()
	p := &proc{logPath: filepath.Join(h.dir, "electors", fmt.Sprintf("elector-%s-%d.log", r.identity, n)), done: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own descriptor
	args := []string{"run",
		"--redis-addr", h.proxy.Addr(), "--lease-name", leaseName, "--identity", r.identity,
		"--lease-duration", leaseDuration.String(), "--renew-deadline", renewDeadline.String(),
		"--retry-period", retryPeriod.String(), "--kill-grace", killGrace.String(),
		"--", h.worker, "-dir", filepath.Join(h.dir, "workers"), "-redis", h.proxy.Addr(),
		"-fence", fenceKey, "-list", listKey,
	}
	p.cmd = exec.Command(h.elector, args...)
	p.cmd.Env = cleanEnv()
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	// Its own process group, so that faults and the cleanup reach all of it; Pdeathsig, so
	// that it dies with the test binary (its worker dies with it in turn).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return nil, errors.New("stopping")
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	p.pid = p.cmd.Process.Pid
	r.cur = p
	go func() {
		_ = p.cmd.Wait()
		p.status, _ = p.cmd.ProcessState.Sys().(syscall.WaitStatus)
		close(p.done)
	}()
	h.event("elector %s (pid %d) starts", r.identity, p.pid)
	return p, nil
}

// signalForExit sends sig to the replica's elector and marks the exit as asked for. It returns
// the process, nil when none runs.
func (r *replica) signalForExit(sig syscall.Signal) *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.cur
	if p == nil {
		return nil
	}
	r.expected = true
	_ = syscall.Kill(p.pid, sig)
	return p
}

// current returns the running elector process, nil between two runs.
func (r *replica) current() *proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cur
}

// stop ends the replica: SIGTERM to its elector, SIGKILL to its process group after timeout.
func (r *replica) stop(timeout time.Duration) {
	r.mu.Lock()
	if !r.stopping {
		r.stopping = true
		close(r.wake)
	}
	r.mu.Unlock()
	p := r.signalForExit(syscall.SIGTERM)
	if p != nil {
		select {
		case <-p.done:
		case <-time.After(timeout):
			r.h.problem("elector %s (pid %d) did not exit within %v of SIGTERM", r.identity, p.pid, timeout)
			killGroups(p.pid)
		}
	}
	<-r.done
}

// killGroups SIGKILLs the process group of pid and those of its children (the worker has a
// group of its own).
func killGroups(pid int) {
	kids := children(pid)
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(-k, syscall.SIGKILL)
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
}

// killAll kills every elector and worker of the test; it runs at the test's cleanup.
func (h *harness) killAll() {
	for _, r := range h.replicas {
		r.mu.Lock()
		r.stopping = true
		select {
		case <-r.wake:
		default:
			close(r.wake)
		}
		p := r.cur
		if p != nil {
			r.expected = true
		}
		r.mu.Unlock()
		if p != nil {
			killGroups(p.pid)
		}
	}
	for _, r := range h.replicas {
		<-r.done
	}
	for _, pid := range processesOf(h.worker, h.elector) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// children returns the process ids of the children of pid, from /proc.
func children(pid int) []int {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	var out []int
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(s); err == nil && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// processesOf returns the live (not zombie) processes that run one of the executables.
func processesOf(exes ...string) []int {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	var out []int
	for _, d := range dirs {
		exe, err := os.Readlink(filepath.Join(d, "exe"))
		if err != nil || !slices.Contains(exes, exe) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || processGone(pid) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// processGone reports whether pid has exited (a zombie counts as gone).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

// leader returns the replica that holds the lease and the token of its term, waiting up to
// timeout for one; nil if none.
func (h *harness) leader(timeout time.Duration) (*replica, int64) {
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := h.lease.Get(ctx)
		cancel()
		if err == nil && st.Held {
			for _, r := range h.replicas {
				if r.identity == st.Record.Identity && r.current() != nil {
					return r, st.Record.Token
				}
			}
		}
		if time.Now().After(deadline) {
			return nil, 0
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// observe records the "acquired" announcements of the lease, read straight from Redis (not
// through the proxy), until ctx ends: the beginning of each term in Redis's order. A
// subscription ends when Redis restarts; it is made again at once, and announcements made
// while there was none are missed: the electors' logs cover those.
func (h *harness) observe(ctx context.Context, done chan<- struct{}) error {
	sub, err := h.lease.Subscribe(ctx)
	if err != nil {
		return err
	}
	go func() {
		defer close(done)
		for sub != nil {
			h.record(ctx, sub)
			_ = sub.Close()
			sub = nil
			for sub == nil && ctx.Err() == nil {
				next, err := h.lease.Subscribe(ctx)
				if err != nil {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				sub = next
			}
		}
	}()
	return nil
}

// record appends the "acquired" announcements of sub until ctx ends or sub does.
func (h *harness) record(ctx context.Context, sub *leasekit.Subscription) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.Events():
			if !ok {
				return
			}
			if ev.Kind == leasekit.Acquired {
				h.mu.Lock()
				h.acquired = append(h.acquired, Acquisition{Time: time.Now(), Token: ev.Record.Token, Identity: ev.Record.Identity})
				h.mu.Unlock()
			}
		}
	}
}

// stallTick and minStall define a stall of the test process: a 10ms sleep that took 100ms
// longer than asked.
const (
	stallTick = 10 * time.Millisecond
	minStall  = 100 * time.Millisecond
)

// watchStalls records the times the test process was not scheduled, until ctx ends.
func (h *harness) watchStalls(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	prev := time.Now()
	for ctx.Err() == nil {
		time.Sleep(stallTick)
		now := time.Now()
		if late := now.Sub(prev) - stallTick; late >= minStall {
			h.mu.Lock()
			h.stalls = append(h.stalls, Stall{From: prev.Add(stallTick), To: now})
			h.mu.Unlock()
		}
		prev = now
	}
}

// drainer moves the accepted writes from Redis into h.epochs until ctx ends.
func (h *harness) drainer(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(drainEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			h.drainMu.Lock()
			_ = h.drainLocked()
			h.drainMu.Unlock()
		}
	}
}

// drainLocked reads and deletes the list in one transaction and appends its entries to the
// current epoch. h.drainMu must be held.
func (h *harness) drainLocked() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var lr *redis.StringSliceCmd
	_, err := h.direct.TxPipelined(ctx, func(p redis.Pipeliner) error {
		lr = p.LRange(ctx, listKey, 0, -1)
		p.Del(ctx, listKey)
		return nil
	})
	if err != nil {
		return fmt.Errorf("drain %s: %w", listKey, err)
	}
	cur := len(h.epochs) - 1
	for _, s := range lr.Val() {
		e, err := ParseEntry(s)
		if err != nil {
			h.problem("Redis list %s: %v", listKey, err)
			continue
		}
		h.epochs[cur] = append(h.epochs[cur], e)
		h.last = e
	}
	return nil
}

// newestAccepted returns the last write Redis accepted (zero if none yet).
func (h *harness) newestAccepted() Entry {
	h.drainMu.Lock()
	defer h.drainMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if s, err := h.direct.LIndex(ctx, listKey, -1).Result(); err == nil {
		if e, err := ParseEntry(s); err == nil {
			return e
		}
	}
	return h.last
}

// waitRecovered waits until the current leader works: Redis accepted a write sent after from,
// of the term that holds the lease, whose token is above notToken (the term a fault ended). It
// gives up after timeout and reports whether the leader works.
func (h *harness) waitRecovered(from time.Time, notToken int64, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for {
		e := h.newestAccepted()
		if e.Sent.After(from) && e.Token > notToken {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := h.lease.Get(ctx)
			cancel()
			if err == nil && st.Held && st.Record.Token == e.Token {
				return true
			}
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// randDuration returns a random duration in [lo, hi).
func (h *harness) randDuration(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(h.rng.Int64N(int64(hi-lo)))
}

// inject injects one fault of kind and returns it, or false when there was no leader to hit.
func (h *harness) inject(kind Kind) (Fault, bool) {
	f := Fault{Kind: kind}
	var target *replica
	switch kind {
	case SigKill, SigTerm, SigStop:
		target, f.Token = h.leader(5 * time.Second)
		if target == nil {
			h.problem("no leader to hit with %s within 5s", kind)
			return f, false
		}
		f.Target = target.identity
	default:
		_, f.Token = h.leader(0)
	}
	switch kind {
	case SigKill, SigTerm:
		sig := syscall.SIGKILL
		if kind == SigTerm {
			sig = syscall.SIGTERM
		}
		f.Start = time.Now()
		p := target.signalForExit(sig)
		if p == nil {
			return f, false
		}
		f.Heal = f.Start
		f.Detail = fmt.Sprintf("%v to elector pid %d", sig, p.pid)
	case SigStop:
		p := target.current()
		if p == nil {
			return f, false
		}
		d := h.randDuration(leaseDuration+200*time.Millisecond, leaseDuration+1500*time.Millisecond)
		f.Start = time.Now()
		// The elector first, so that it cannot start a worker that escapes the freeze.
		_ = syscall.Kill(-p.pid, syscall.SIGSTOP)
		kids := children(p.pid)
		for _, k := range kids {
			_ = syscall.Kill(-k, syscall.SIGSTOP)
		}
		time.Sleep(d)
		// The worker first: the worst case, a frozen job that runs on before its elector
		// can tell it that the term is over.
		for _, k := range kids {
			_ = syscall.Kill(-k, syscall.SIGCONT)
		}
		_ = syscall.Kill(-p.pid, syscall.SIGCONT)
		f.Heal = time.Now()
		f.Detail = fmt.Sprintf("elector pid %d and worker pids %v frozen for %v", p.pid, kids, f.Heal.Sub(f.Start).Round(time.Millisecond))
	case Restart:
		h.drainMu.Lock()
		if err := h.drainLocked(); err != nil {
			h.problem("%v", err)
		}
		f.Start = time.Now()
		h.srv.Restart()
		f.Heal = time.Now()
		h.epochs = append(h.epochs, nil)
		h.drainMu.Unlock()
		f.Detail = fmt.Sprintf("down for %v", f.Heal.Sub(f.Start).Round(time.Millisecond))
	case Unreachable:
		d := 2 * leaseDuration
		f.Start = time.Now()
		if h.rng.IntN(2) == 0 {
			h.proxy.Blackhole(true)
			time.Sleep(d)
			h.proxy.Blackhole(false)
			f.Detail = fmt.Sprintf("black hole (silent) for %v", d)
		} else {
			h.proxy.Refuse(true)
			h.proxy.Cut()
			time.Sleep(d)
			h.proxy.Refuse(false)
			f.Detail = fmt.Sprintf("connections cut and refused for %v", d)
		}
		f.Heal = time.Now()
	case Latency:
		d := h.randDuration(1500*time.Millisecond, 3*time.Second)
		f.Start = time.Now()
		h.proxy.SetLatency(100 * time.Millisecond) // each way: +200ms per round trip
		time.Sleep(d)
		h.proxy.SetLatency(0)
		f.Heal = time.Now()
		f.Detail = fmt.Sprintf("+200ms round trip for %v", f.Heal.Sub(f.Start).Round(time.Millisecond))
	case Cut:
		f.Start = time.Now()
		h.proxy.Cut()
		f.Heal = f.Start
	}
	return f, true
}

// schedule injects faults until the deadline: each round is every kind once, in random order;
// after each fault it waits until the leader works again, then a random pause.
func (h *harness) schedule(deadline time.Time) {
	kinds := Kinds()
	for time.Now().Before(deadline) {
		h.rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
		for _, kind := range kinds {
			if !time.Now().Before(deadline) {
				return
			}
			f, ok := h.inject(kind)
			if !ok {
				continue
			}
			h.mu.Lock()
			f.Seq = len(h.faults) + 1
			h.faults = append(h.faults, f)
			h.mu.Unlock()
			from, notToken := f.Start, int64(0)
			if !kind.redisReachableDuring() {
				from = f.Heal
			}
			if f.Target != "" {
				notToken = f.Token // the term the fault ended; its dying worker's last write is no recovery
			}
			if !h.waitRecovered(from, notToken, recoveryTimeout) {
				h.event("no leader works within %v after %v", recoveryTimeout, f)
			}
			time.Sleep(h.randDuration(500*time.Millisecond, 1500*time.Millisecond))
		}
	}
}

// readWorkers parses every worker log.
func (h *harness) readWorkers() []Worker {
	paths, err := filepath.Glob(filepath.Join(h.dir, "workers", "worker-*.log"))
	if err != nil {
		h.t.Fatal(err)
	}
	var out []Worker
	for _, p := range paths {
		w, err := ParseWorkerLog(p)
		if err != nil {
			h.problem("%v", err)
			continue
		}
		out = append(out, w)
	}
	return out
}

// kloghead matches the header of a klog line: severity, date, time.
var kloghead = regexp.MustCompile(`^[IWEF](\d{4} \d{2}:\d{2}:\d{2}\.\d{6})\s`)

// electorLogs returns the lines of the electors' logs that tell what their terms did, for the
// timeline, and the terms they began ("Became leader"); it reports data races as problems.
func (h *harness) electorLogs() ([]Event, []Acquisition) {
	paths, _ := filepath.Glob(filepath.Join(h.dir, "electors", "elector-*.log"))
	interesting := []string{"Became leader", "Stopped leading", "Started the command", "Stopping the command",
		"The command stopped", "The command exited", "Redis call failed", "Redis calls succeed again", "Released the lease"}
	year := h.start.Year()
	var out []Event
	var acq []Acquisition
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".log")
		identity := strings.Split(name, "-")[1] // elector-<identity>-<n>
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "WARNING: DATA RACE") {
				out = append(out, Problem(time.Now(), "data race in %s (see %s)", name, p))
			}
			m := kloghead.FindStringSubmatch(line)
			if m == nil || !slices.ContainsFunc(interesting, func(s string) bool { return strings.Contains(line, s) }) {
				continue
			}
			t, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
			if err != nil {
				continue
			}
			t = t.AddDate(year, 0, 0)
			if _, i, ok := strings.Cut(line, "] "); ok {
				line = i
			}
			out = append(out, Event{Time: t, Text: name + ": " + line})
			if m := becameLeader.FindStringSubmatch(line); m != nil {
				if tok, err := strconv.ParseInt(m[1], 10, 64); err == nil {
					acq = append(acq, Acquisition{Time: t, Token: tok, Identity: identity})
				}
			}
		}
		f.Close()
	}
	return out, acq
}

// becameLeader matches the log line of an elector that began a term.
var becameLeader = regexp.MustCompile(`^"Became leader" .*\btoken=(\d+)`)

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
