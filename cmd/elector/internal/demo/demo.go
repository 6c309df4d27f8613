// Package demo is the simulation behind `elector demo`: replicas as goroutines, each with
// its own Redis client, elect a leader for a lease of their own; the leader runs a toy job
// that makes fenced writes, and the demo crashes or stops it on a schedule while it prints a
// timeline and checks the promise (never two terms at once, a larger token for every new
// term, every crash takeover after the lease expired).
//
// The package owns the demo's schedule, timeline and summary, and its keys: prefix
// elector-demo, a random lease name per run, removed at the end. It must not touch any other
// key of the Redis it is given, and it parses no flags: the CLI validates its Config.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/fence"
)

// The demo's election timing (short, so that a crash takeover at lease expiry is over in two
// seconds) and schedule.
const (
	demoLeaseDuration   = 2 * time.Second
	demoRenewDeadline   = 1200 * time.Millisecond
	demoRetryPeriod     = 300 * time.Millisecond
	demoFirstDisruption = 2 * time.Second        // the first crash, after the start
	demoInterval        = 4 * time.Second        // between disruptions
	demoRestartDelay    = 500 * time.Millisecond // a stopped replica comes back this long after the handover
	demoJobTick         = 100 * time.Millisecond // the toy job makes one fenced write per tick
	// MaxReplicas is the largest Config.Replicas; the smallest is 2.
	MaxReplicas = 9
	// keyPrefix is the key prefix of the demo's lease and keys.
	keyPrefix = "elector-demo"
)

// CallTimeout is the Redis call timeout of the demo's timing (timing.CallTimeout): the CLI
// gives Config.Redis these dial, read and write timeouts.
func CallTimeout() time.Duration { return timing.CallTimeout(demoRenewDeadline, demoRetryPeriod) }

// Kinds of handover in the demo's timeline and summary.
const (
	kindFirst    = "first"
	kindCrash    = "crash"
	kindGraceful = "graceful"
	kindLost     = "takeover" // after a leader stepped down without being told to
)

// Config is what a demo run needs besides its output.
type Config struct {
	Replicas int                // number of electors, 2 to MaxReplicas
	Duration time.Duration      // how long the demo runs
	Redis    redisclient.Config // the Redis the replicas and the demo connect to
	Where    string             // describes the Redis, for the header
	Logger   logr.Logger        // for the electors; logr.Discard() for none
}

// Run runs the demo on the Redis of cfg and prints its timeline and summary to out. It
// returns the safety checks that failed, none when the demo passed; err is set when the demo
// could not run (Redis unreachable).
func Run(ctx context.Context, out io.Writer, cfg Config) (failures []string, err error) {
	res, err := runDemo(ctx, out, cfg)
	return res.failures, err
}

// handover is one change of leader seen by the demo.
type handover struct {
	kind        string
	from, to    string
	at          time.Duration // since the start
	gap         time.Duration // with no job running
	afterExpiry time.Duration // crash: from the old lease's expiry to the new term's start
}

// result is what a demo run observed.
type result struct {
	terms            int
	handovers        []handover
	overlaps         int
	tokensIncreasing bool
	fencedOK         int
	fencedStale      int
	failures         []string
}

// replica is one elector of the demo, a "process" with its own Redis client.
type replica struct {
	id       string
	client   redis.UniversalClient
	elector  *election.Elector
	fence    *fence.Fence
	cancel   context.CancelFunc
	done     chan struct{}
	stopping bool // set (under demo.mu) before the demo stops or crashes it
}

// demo runs the replicas and keeps the timeline.
type demo struct {
	cfg       Config
	out       io.Writer
	leaseName string
	fenceKey  string
	workKey   string
	admin     redis.UniversalClient // the demo's own client, for PTTL and cleanup
	start     time.Time

	mu          sync.Mutex
	running     map[string]int64 // replicas whose job runs now, with their token
	lastToken   int64
	lastElector *election.Elector // the elector (a replica process, with its instance id) that led last
	prevEnd     time.Time         // when the last job ended
	prevWho     string
	crash       *crashInfo // the crash the next handover answers
	graceful    string     // the replica whose graceful stop the next handover answers
	ending      bool
	res         result
}

type crashInfo struct {
	who    string
	expiry time.Time
}

// runDemo runs the demo on the Redis of cfg and prints its timeline and summary to out.
func runDemo(ctx context.Context, out io.Writer, cfg Config) (result, error) {
	suffix, err := leasewire.NewInstanceID()
	if err != nil {
		return result{}, err
	}
	d := &demo{
		cfg:       cfg,
		out:       out,
		leaseName: "demo-" + suffix[:8],
		running:   map[string]int64{},
		res:       result{tokensIncreasing: true},
	}
	keys := leasewire.KeysFor(keyPrefix, d.leaseName)
	d.fenceKey, d.workKey = keys.Other("fence"), keys.Other("work")

	admin, err := redisclient.New(cfg.Redis)
	if err != nil {
		return result{}, err
	}
	defer func() { _ = admin.Close() }()
	d.admin = admin
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	err = admin.Ping(pctx).Err()
	cancel()
	if err != nil {
		return result{}, fmt.Errorf("cannot reach %s: %w", cfg.Where, err)
	}
	defer d.cleanup(admin)

	d.header()
	d.start = time.Now()
	d.play(ctx)
	d.summary()
	return d.res, nil
}

// header prints what the demo is about to show.
func (d *demo) header() {
	fmt.Fprintf(d.out, "elector demo: %d replicas elect a leader for lease %q on %s, for %v.\n",
		d.cfg.Replicas, d.leaseName, d.cfg.Where, d.cfg.Duration)
	fmt.Fprintf(d.out, "Lease duration %v, renew deadline %v, retry period %v. Each leader runs a toy job that\n",
		demoLeaseDuration, demoRenewDeadline, demoRetryPeriod)
	fmt.Fprintf(d.out, "makes fenced writes with its token. Every %v the leader crashes (stops renewing, never\n", demoInterval)
	fmt.Fprintf(d.out, "releases: the next leader waits for the lease to expire) or stops gracefully (releases:\n")
	fmt.Fprintf(d.out, "the next leader takes over at once), alternately, and comes back %v after the handover.\n\n", demoRestartDelay)
	fmt.Fprintf(d.out, "%8s  %-6s  %-9s %s\n", "time", "who", "event", "details")
}

// line prints one timeline entry; d.mu must be held or the timeline otherwise quiet.
func (d *demo) line(at time.Time, who, event, format string, args ...any) {
	fmt.Fprintf(d.out, "%8s  %-6s  %-9s %s\n", fmt.Sprintf("+%.2fs", at.Sub(d.start).Seconds()), who, event, fmt.Sprintf(format, args...))
}

// fail records and prints a failed safety check; d.mu must be held.
func (d *demo) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	d.res.failures = append(d.res.failures, msg)
	fmt.Fprintf(d.out, "%8s  %-6s  %-9s %s\n", "", "", "FAILURE", msg)
}

// play runs the schedule until the duration is over or ctx ends.
func (d *demo) play(ctx context.Context) {
	end := d.start.Add(d.cfg.Duration)
	reps := make([]*replica, d.cfg.Replicas)
	for i := range reps {
		reps[i] = d.startReplica(ctx, fmt.Sprintf("pod-%d", i))
	}
	defer func() { d.stopAll(reps) }()

	next := d.start.Add(demoFirstDisruption)
	crash := true
	for next.Before(end) && sleepUntil(ctx, next) {
		i := d.waitLeader(ctx, reps, end)
		if i < 0 {
			break
		}
		terms := d.termCount()
		if crash {
			if time.Until(end) < demoLeaseDuration+demoRestartDelay {
				break // a crash takeover would not be over before the end
			}
			expiry, ok := d.crashReplica(ctx, reps[i])
			if !ok {
				continue // it was not renewing (an overloaded machine): pick the leader again
			}
			// The takeover must come at the lease's expiry; allow a generous margin.
			if !d.waitTerms(ctx, terms, expiry.Add(demoLeaseDuration)) && ctx.Err() == nil {
				d.mu.Lock()
				d.fail("no replica took over within %v after the lease of %s expired: does the Redis server expire keys in real time?", demoLeaseDuration, reps[i].id)
				d.mu.Unlock()
			}
		} else {
			d.stopReplica(reps[i])
			d.waitTerms(ctx, terms, time.Now().Add(demoLeaseDuration))
		}
		if !sleepUntil(ctx, time.Now().Add(demoRestartDelay)) || !time.Now().Before(end) {
			break
		}
		reps[i] = d.startReplica(ctx, reps[i].id)
		d.mu.Lock()
		d.line(time.Now(), reps[i].id, "RESTARTS", "a new process (new instance id): campaigns as a follower")
		d.mu.Unlock()
		crash = !crash
		next = next.Add(demoInterval)
	}
	sleepUntil(ctx, end)
}

// sleepUntil sleeps until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// startReplica starts one elector with its own Redis client, as a new process would.
func (d *demo) startReplica(ctx context.Context, id string) *replica {
	r := &replica{id: id, done: make(chan struct{})}
	client, err := redisclient.New(d.cfg.Redis)
	if err == nil {
		r.client = client
		r.fence, err = fence.New(client, d.fenceKey)
	}
	if err == nil {
		r.elector, err = election.New(election.Config{
			Client:        client,
			LeaseName:     d.leaseName,
			KeyPrefix:     keyPrefix,
			Identity:      id,
			LeaseDuration: demoLeaseDuration,
			RenewDeadline: demoRenewDeadline,
			RetryPeriod:   demoRetryPeriod,
			Callbacks: election.Callbacks{
				OnStartedLeading: func(ctx context.Context) { d.job(ctx, r) },
				OnStoppedLeading: func() { d.stoppedLeading(r) },
			},
			ReleaseOnCancel: true,
			Recampaign:      true,
		})
	}
	rctx, cancel := context.WithCancel(klog.NewContext(ctx, d.cfg.Logger.WithValues("replica", id)))
	r.cancel = cancel
	if err != nil { // cannot happen with the validated configuration
		d.mu.Lock()
		d.fail("start %s: %v", id, err)
		d.mu.Unlock()
		close(r.done)
		return r
	}
	go func() {
		defer close(r.done)
		_ = r.elector.Run(rctx)
		_ = client.Close()
	}()
	return r
}

// job is the toy singleton job: a fenced write with the term's token every tick.
func (d *demo) job(ctx context.Context, r *replica) {
	// The term's token comes with its ctx: Status may already describe a later term.
	token := election.TokenFrom(ctx)
	if token == 0 || ctx.Err() != nil {
		return
	}
	d.termStarted(r.id, r.elector, token)
	defer d.termEnded(r.id)
	tick := time.NewTicker(demoJobTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		_, err := r.fence.Do(ctx, token, []string{d.workKey}, "INCR", d.workKey)
		d.mu.Lock()
		switch {
		case err == nil:
			d.res.fencedOK++
		case errors.Is(err, fence.ErrStale):
			d.res.fencedStale++
			d.fail("%s: fenced write with token %d rejected: %v", r.id, token, err)
		}
		// Other errors come from the job being stopped or crashed mid-write.
		d.mu.Unlock()
	}
}

// termStarted records and prints the start of a term, with the handover it completes.
func (d *demo) termStarted(who string, e *election.Elector, token int64) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.res.terms++
	if len(d.running) > 0 {
		d.res.overlaps++
		d.fail("%s starts leading while %v still runs its job", who, d.running)
	}
	// A replica that stepped down (renew deadline) while Redis still held its lease acquires
	// the same term again, with the same token: nobody else led in between.
	resumed := token == d.lastToken && e == d.lastElector
	if token < d.lastToken || token == d.lastToken && !resumed {
		d.res.tokensIncreasing = false
		d.fail("%s has token %d, not larger than the previous token %d", who, token, d.lastToken)
	}
	d.lastToken, d.lastElector = token, e
	d.running[who] = token
	if resumed {
		d.line(now, who, "RESUMES", "token %d  its lease was still its own after it stepped down: the same term goes on", token)
		return
	}

	h := handover{to: who, from: d.prevWho, at: now.Sub(d.start), gap: now.Sub(d.prevEnd)}
	var detail string
	switch {
	case d.prevWho == "":
		h.kind, h.gap = kindFirst, now.Sub(d.start)
		detail = fmt.Sprintf("first leader, %v after the start", fmtDuration(h.gap))
	case d.crash != nil && d.crash.who == d.prevWho:
		h.kind, h.afterExpiry = kindCrash, now.Sub(d.crash.expiry)
		detail = fmt.Sprintf("crash takeover from %s: no leader for %v, %v after its lease expired",
			h.from, fmtDuration(h.gap), fmtDuration(h.afterExpiry))
		if h.afterExpiry < 0 {
			d.fail("%s took over %v BEFORE the lease of %s expired", who, fmtDuration(-h.afterExpiry), h.from)
		}
	case d.graceful != "" && d.graceful == d.prevWho:
		h.kind = kindGraceful
		detail = fmt.Sprintf("graceful handover from %s in %v", h.from, fmtDuration(h.gap))
	default:
		h.kind = kindLost
		detail = fmt.Sprintf("takeover after %s stepped down: no leader for %v", h.from, fmtDuration(h.gap))
	}
	d.crash, d.graceful = nil, ""
	d.res.handovers = append(d.res.handovers, h)
	d.line(now, who, "LEADS", "token %d  %s", token, detail)
}

// termEnded records the end of who's term.
func (d *demo) termEnded(who string) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.running, who)
	d.prevEnd, d.prevWho = now, who
}

// stoppedLeading reports a leader that stepped down without being stopped by the demo.
func (d *demo) stoppedLeading(r *replica) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !r.stopping && !d.ending {
		d.line(time.Now(), r.id, "STEPS DOWN", "lost its lease (a renew failed or the renew deadline passed)")
	}
}

// termCount returns how many terms have begun.
func (d *demo) termCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.res.terms
}

// waitTerms waits until more than terms terms have begun; false at deadline or when ctx ends.
func (d *demo) waitTerms(ctx context.Context, terms int, deadline time.Time) bool {
	for time.Now().Before(deadline) {
		if d.termCount() > terms {
			return true
		}
		if !sleepUntil(ctx, time.Now().Add(5*time.Millisecond)) {
			return false
		}
	}
	return d.termCount() > terms
}

// waitLeader returns the index of the replica that leads, waiting for one until end.
func (d *demo) waitLeader(ctx context.Context, reps []*replica, end time.Time) int {
	for time.Now().Before(end) {
		for i, r := range reps {
			if r.elector != nil && r.elector.IsLeader() {
				return i
			}
		}
		if !sleepUntil(ctx, time.Now().Add(5*time.Millisecond)) {
			return -1
		}
	}
	return -1
}

// crashReplica makes r stop renewing and never release, as a killed process would: right
// after a successful renew (so that none is in flight) its Redis client is closed, then its
// elector is stopped. It returns the moment the lease expires in Redis, read from the server
// (PTTL) once nothing of r can reach it any more; ok is false, and nothing happened, when r
// did not renew within two retry periods or stopped leading meanwhile.
func (d *demo) crashReplica(ctx context.Context, r *replica) (expiry time.Time, ok bool) {
	before := r.elector.Status().LastRenew
	deadline := time.Now().Add(2 * demoRetryPeriod)
	for {
		st := r.elector.Status()
		if !st.IsLeader || before == nil || time.Now().After(deadline) {
			return time.Time{}, false
		}
		if st.LastRenew != nil && !st.LastRenew.Equal(*before) {
			// The lower bound of the expiry, until Redis tells the exact one below.
			expiry = st.LastRenew.Add(demoLeaseDuration)
			break
		}
		if !sleepUntil(ctx, time.Now().Add(time.Millisecond)) {
			return time.Time{}, false
		}
	}
	now := time.Now()
	d.mu.Lock()
	r.stopping = true
	d.crash = &crashInfo{who: r.id, expiry: expiry}
	d.mu.Unlock()
	_ = r.client.Close() // nothing more reaches Redis: no renew, no release
	r.cancel()           // the job stops with the process
	<-r.done

	sent := time.Now()
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	pttl, err := d.admin.PTTL(pctx, d.leaseKey()).Result()
	cancel()
	if err == nil && pttl > 0 {
		// The server answered at or after sent: the lease expires no earlier than this.
		expiry = sent.Add(pttl)
	}
	d.mu.Lock()
	if d.crash != nil && d.crash.who == r.id {
		d.crash.expiry = expiry
	}
	d.line(now, r.id, "CRASHES", "stops renewing and never releases; its lease expires at +%.2fs", expiry.Sub(d.start).Seconds())
	d.mu.Unlock()
	return expiry, true
}

// stopReplica stops r gracefully: its job ends, then the elector releases the lease.
func (d *demo) stopReplica(r *replica) {
	d.mu.Lock()
	r.stopping = true
	d.graceful = r.id
	d.line(time.Now(), r.id, "STOPS", "gracefully: ends its job and releases the lease")
	d.mu.Unlock()
	r.cancel()
	<-r.done
}

// stopAll ends the demo: followers first, so that nobody takes over, then the leader.
func (d *demo) stopAll(reps []*replica) {
	d.mu.Lock()
	d.ending = true
	for _, r := range reps {
		r.stopping = true
	}
	d.line(time.Now(), "all", "STOP", "the demo ends: the followers stop, then the leader releases the lease")
	d.mu.Unlock()
	var leaders []*replica
	for _, r := range reps {
		if r.elector != nil && r.elector.IsLeader() {
			leaders = append(leaders, r)
			continue
		}
		r.cancel()
		<-r.done
	}
	for _, r := range leaders {
		r.cancel()
		<-r.done
	}
}

// leaseKey is the Redis key of the demo's lease.
func (d *demo) leaseKey() string { return leasewire.LeaseKey(keyPrefix, d.leaseName) }

// cleanup removes the demo's keys; the lease itself was released.
func (d *demo) cleanup(admin redis.UniversalClient) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	keys := leasewire.KeysFor(keyPrefix, d.leaseName)
	_ = admin.Del(ctx, keys.Lease, keys.Token, keys.Terms, d.fenceKey, d.workKey).Err()
}

// summary prints the handover table and the safety checks.
func (d *demo) summary() {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := &d.res
	fmt.Fprintf(d.out, "\nSummary: %.1fs, %d replicas, %d terms\n", time.Since(d.start).Seconds(), d.cfg.Replicas, r.terms)
	row := "  %-9s %5s  %10s  %8s   %s\n"
	fmt.Fprintf(d.out, row, "handover", "count", "median gap", "max gap", "after lease expiry (median / max)")
	for _, kind := range []string{kindCrash, kindGraceful, kindLost} {
		var gaps, after []time.Duration
		for _, h := range r.handovers {
			if h.kind == kind {
				gaps = append(gaps, h.gap)
				after = append(after, h.afterExpiry)
			}
		}
		switch {
		case len(gaps) == 0 && kind == kindLost:
		case len(gaps) == 0:
			fmt.Fprintf(d.out, row, kind, "0", "-", "-", "-")
		case kind == kindCrash:
			fmt.Fprintf(d.out, row, kind, fmt.Sprint(len(gaps)), fmtDuration(median(gaps)), fmtDuration(slices.Max(gaps)),
				fmtDuration(median(after))+" / "+fmtDuration(slices.Max(after)))
		default:
			fmt.Fprintf(d.out, row, kind, fmt.Sprint(len(gaps)), fmtDuration(median(gaps)), fmtDuration(slices.Max(gaps)), "-")
		}
	}
	yes := map[bool]string{true: "yes", false: "NO"}
	fmt.Fprintf(d.out, "  larger token for every term:  %s\n", yes[r.tokensIncreasing])
	fmt.Fprintf(d.out, "  overlapping terms:            %d\n", r.overlaps)
	fmt.Fprintf(d.out, "  fenced writes:                %d accepted, %d rejected as stale\n", r.fencedOK, r.fencedStale)
	if r.terms == 0 {
		r.failures = append(r.failures, "no replica ever led")
	}
	if len(r.failures) == 0 {
		fmt.Fprintf(d.out, "PASS: never two leaders at once, a larger token for every new term, every crash takeover after the lease expired.\n")
		return
	}
	fmt.Fprintf(d.out, "FAIL: %d safety check(s) failed:\n", len(r.failures))
	for _, f := range r.failures {
		fmt.Fprintf(d.out, "  - %s\n", f)
	}
}

// median returns the middle of ds (the upper one of an even count).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// fmtDuration formats a handover time with three significant digits: 2.00s, 45.6ms, 3.89ms, 870µs.
func fmtDuration(d time.Duration) string {
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%s%.2fs", sign, d.Seconds())
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%s%.0fms", sign, float64(d)/float64(time.Millisecond))
	case d >= 10*time.Millisecond:
		return fmt.Sprintf("%s%.1fms", sign, float64(d)/float64(time.Millisecond))
	case d >= time.Millisecond:
		return fmt.Sprintf("%s%.2fms", sign, float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%s%dµs", sign, d.Microseconds())
	}
}
