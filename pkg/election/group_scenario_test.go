package election_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/internal/testing/wakeprobe"
	"github.com/elector/elector/pkg/election"
)

// intervals records, per lease and replica, the interval [OnStartedLeading start, its ctx
// cancelled] on one clock (replicas are goroutines of this process), and the order of each
// lease's callbacks per replica. A strict overlap is a start while another replica's ctx for
// the same lease is still live.
type intervals struct {
	mu       sync.Mutex
	live     map[string]map[string]liveTerm // lease -> replica -> its live interval
	phase    map[string]string              // replica/lease -> "working", "returned" or ""
	lastTok  map[string]int64               // lease -> token of the last term
	lastWho  map[string]string
	overlaps []*overlap
	errs     []string
	terms    int
}

// liveTerm is a term whose OnStartedLeading began and whose ctx was not seen done yet.
type liveTerm struct {
	token int64
	ctx   context.Context
}

type overlap struct {
	lease, first, second string
	at                   time.Time
	dur                  time.Duration // until first's ctx was cancelled; 0 while it is live
}

func newIntervals() *intervals {
	return &intervals{live: map[string]map[string]liveTerm{}, phase: map[string]string{}, lastTok: map[string]int64{}, lastWho: map[string]string{}}
}

// start records that who's OnStartedLeading(ctx, name, token) began. Another replica's term
// of the lease is an overlap if its ctx is not done at this moment: asked here, not told by
// the goroutine that records the cancel, which a loaded machine may run tens of ms late.
func (iv *intervals) start(ctx context.Context, who, name string, token int64) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	now := time.Now()
	key := who + "/" + name
	if p := iv.phase[key]; p != "" {
		iv.errs = append(iv.errs, fmt.Sprintf("%s: OnStartedLeading(%s, %d) while the previous term's callbacks are not over (%s)", who, name, token, p))
	}
	for other, lt := range iv.live[name] {
		switch {
		case other == who:
		case lt.ctx.Err() != nil:
			delete(iv.live[name], other) // cancelled; its recorder has not run yet
		default:
			iv.overlaps = append(iv.overlaps, &overlap{lease: name, first: other, second: who, at: now})
		}
	}
	last, lastWho := iv.lastTok[name], iv.lastWho[name]
	// A replica that stepped down while Redis still held its term may resume that same term
	// (docs/DESIGN.md, Guarantees 3); any other start needs a larger token.
	if token < last || (token == last && lastWho != who) {
		iv.errs = append(iv.errs, fmt.Sprintf("%s started %s with token %d, not above %d of %s", who, name, token, last, lastWho))
	}
	iv.lastTok[name], iv.lastWho[name] = max(token, last), who
	if iv.live[name] == nil {
		iv.live[name] = map[string]liveTerm{}
	}
	iv.live[name][who] = liveTerm{token: token, ctx: ctx}
	iv.phase[key] = "working"
	iv.terms++
}

// cancelled records that the ctx of who's term token of lease name is done.
func (iv *intervals) cancelled(who, name string, token int64) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	if lt, ok := iv.live[name][who]; !ok || lt.token != token {
		return // a watcher that ran after the next term began: that one is live
	}
	now := time.Now()
	for _, o := range iv.overlaps {
		if o.lease == name && o.first == who && o.dur == 0 {
			o.dur = now.Sub(o.at)
		}
	}
	delete(iv.live[name], who)
}

func (iv *intervals) returned(who, name string) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	iv.phase[who+"/"+name] = "returned"
}

func (iv *intervals) stopped(who, name string) {
	iv.mu.Lock()
	defer iv.mu.Unlock()
	key := who + "/" + name
	if p := iv.phase[key]; p != "returned" {
		iv.errs = append(iv.errs, fmt.Sprintf("%s: OnStoppedLeading(%s) while its term's OnStartedLeading is %q, want returned", who, name, p))
	}
	iv.phase[key] = ""
}

// check fails on every strict overlap and callback-order error, and returns the longest overlap.
func (iv *intervals) check(t testing.TB) time.Duration {
	t.Helper()
	iv.mu.Lock()
	defer iv.mu.Unlock()
	var worst time.Duration
	for _, o := range iv.overlaps {
		d := o.dur
		if d == 0 {
			d = time.Since(o.at) // still live
		}
		worst = max(worst, d)
		t.Errorf("strict overlap on %s: %s started while %s's ctx was live for %v more", o.lease, o.second, o.first, d.Round(time.Millisecond))
	}
	for i, e := range iv.errs {
		if i == 10 {
			t.Errorf("... %d more", len(iv.errs)-10)
			break
		}
		t.Error(e)
	}
	t.Logf("%d terms, %d strict overlaps (longest %v), %d callback-order or token errors", iv.terms, len(iv.overlaps), worst.Round(time.Millisecond), len(iv.errs))
	return worst
}

// groupOpts configures one Group replica of a scenario.
type groupOpts struct {
	group   string // membership: replicas with different names do not share out the leases
	client  redis.UniversalClient
	leases  []string
	timing  [3]time.Duration // lease, renew deadline, retry
	stopFor map[string]time.Duration
	logger  logr.Logger
}

// runGroup starts a Group whose callbacks feed iv; it is stopped at cleanup.
func runGroup(t *testing.T, iv *intervals, who string, o groupOpts) *election.Group {
	t.Helper()
	g, err := election.NewGroup(election.GroupConfig{
		Client: o.client, Group: o.group, Identity: who, Leases: o.leases,
		LeaseDuration: o.timing[0], RenewDeadline: o.timing[1], RetryPeriod: o.timing[2],
		Callbacks: election.GroupCallbacks{
			OnStartedLeading: func(ctx context.Context, name string) {
				token := election.TokenFrom(ctx)
				iv.start(ctx, who, name, token)
				<-ctx.Done()
				iv.cancelled(who, name, token)
				iv.returned(who, name)
			},
			OnStoppedLeading: func(name string) {
				iv.stopped(who, name)
				time.Sleep(o.stopFor[name])
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if o.logger.GetSink() != nil {
		ctx = klog.NewContext(ctx, o.logger)
	}
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Errorf("%s: Run did not return within 30s of its ctx being cancelled", who)
		}
	})
	return g
}

func proxiedClient(t *testing.T, addr string, timeout time.Duration, user, pass string) redis.UniversalClient {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr: addr, Username: user, Password: pass, ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: timeout, ReadTimeout: timeout, WriteTimeout: timeout,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func holdsAll(g *election.Group, names ...string) bool {
	h := g.Held()
	for _, n := range names {
		if _, ok := h[n]; !ok {
			return false
		}
	}
	return true
}

// assertLoopNotHeld checks that a Group's loop was not held by a call that blocks for
// blocked: such a loop wakes up at least blocked late, while a free one wakes up as late as
// the machine lets any goroutine, the probe's control. Half the blocked call's duration
// above the control separates the two, whatever the load (the old Group woke up a whole
// RetryPeriod or OnStoppedLeading late). The figures are logged either way.
func assertLoopNotHeld(t *testing.T, lag, control, blocked time.Duration) {
	t.Helper()
	limit := wakeprobe.Limit(control, blocked)
	t.Logf("A's loop woke up at most %v late; the probe beside it %v; a loop held by the blocked call would be %v late (limit %v)",
		lag.Round(time.Millisecond), control.Round(time.Millisecond), blocked, limit.Round(time.Millisecond))
	if lag >= limit {
		t.Errorf("A's loop woke up %v late, the probe beside it %v: the loop was held by the call that blocked for %v", lag, control, blocked)
	}
}

// TestGroupSlowStopDoesNotFreezeOtherLeases is issue #12's first path: replica A holds X and
// Y; Remove(X); A's OnStoppedLeading(X) takes 3 s. Y must go on being renewed (the old Group
// ran OnStoppedLeading on its loop: Y expired, B led Y while A's ctx for Y stayed live).
func TestGroupSlowStopDoesNotFreezeOtherLeases(t *testing.T) {
	const lease, renew, retry = time.Second, 600 * time.Millisecond, 150 * time.Millisecond
	const stopFor = 3 * time.Second // OnStoppedLeading(x)
	srv := redistest.Start(t)
	admin := srv.Client(t)
	iv := newIntervals()
	timing := [3]time.Duration{lease, renew, retry}
	a := runGroup(t, iv, "pod-a", groupOpts{group: "a", client: proxiedClient(t, srv.Addr(), renew/2, "", ""), leases: []string{"x", "y"}, timing: timing,
		stopFor: map[string]time.Duration{"x": stopFor}})
	waitUntil(t, 10*time.Second, "A holds x and y", func() bool { return holdsAll(a, "x", "y") })
	// B campaigns for both (its own membership, so A keeps its share of 2).
	b := runGroup(t, iv, "pod-b", groupOpts{group: "b", client: proxiedClient(t, srv.Addr(), renew/2, "", ""), leases: []string{"x", "y"}, timing: timing})
	time.Sleep(2 * retry)
	yTok := a.Held()["y"]

	// Sample y's remaining lease time: every renewal shows as a jump up.
	ctx := context.Background()
	var maxGap time.Duration
	lastRenew, lastTTL := time.Now(), time.Duration(0)
	election.ResetGroupMaxLag(a)
	probe := wakeprobe.Start(t)
	a.Remove("x")
	start := time.Now()
	for time.Since(start) < 3500*time.Millisecond {
		ttl, err := admin.PTTL(ctx, "elector:{y}:lease").Result()
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		if ttl > lastTTL {
			maxGap = max(maxGap, now.Sub(lastRenew))
			lastRenew = now
		}
		lastTTL = ttl
		time.Sleep(5 * time.Millisecond)
	}
	maxGap = max(maxGap, time.Since(lastRenew))
	lag, control := election.GroupMaxLag(a), probe.Stop()
	waitUntil(t, 10*time.Second, "B takes x", func() bool { return holdsAll(b, "x") })
	worst := iv.check(t)
	t.Logf("during A's 3 s OnStoppedLeading(x): y renewed at most %v apart (retry period %v); A's loop woke up at most %v late; longest overlap %v",
		maxGap.Round(time.Millisecond), retry, lag.Round(time.Millisecond), worst)
	if got := a.Held()["y"]; got != yTok {
		t.Errorf("A lost y during the slow OnStoppedLeading(x): token %d, was %d", got, yTok)
	}
	// A renewal is due every RetryPeriod, and a loop that waits for OnStoppedLeading shows a
	// 3 s gap; the sampling goroutine is as late as the probe beside it.
	if limit := retry + wakeprobe.Limit(control, stopFor); maxGap >= limit {
		t.Errorf("y went %v without a renewal (retry period %v, probe %v): the renewals waited for the %v OnStoppedLeading(x)", maxGap, retry, control, stopFor)
	}
	assertLoopNotHeld(t, lag, control, stopFor)
}

// captureLog returns a logger that keeps every line, and the lines.
func captureLog() (logr.Logger, func() []string) {
	var mu sync.Mutex
	var lines []string
	l := funcr.New(func(prefix, args string) {
		mu.Lock()
		lines = append(lines, prefix+" "+args)
		mu.Unlock()
	}, funcr.Options{Verbosity: 2})
	return l, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
}

// TestGroupRefusedSubscribeAndStalledPath is issue #12's second path: A's ACL user lacks
// +psubscribe (the single-lease ACL line with the Group's membership commands), and then A's
// path to Redis stalls, at lease 1 s / renew deadline 900 ms / retry 700 ms. The old Group
// subscribed on its loop at every renewal, which blocked up to RetryPeriod once the path
// stalled: A's deadline check ran late and B led while A's ctx stayed live.
func TestGroupRefusedSubscribeAndStalledPath(t *testing.T) {
	const lease, renew, retry = time.Second, 900 * time.Millisecond, 700 * time.Millisecond
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	// The Group's tested ACL line (README, docs/RELIABILITY.md) without +psubscribe.
	acl := strings.Fields("on >pw resetkeys resetchannels ~elector:* &elector:* -@all +evalsha +eval +get +set +pexpire +pttl +del +time +publish +multi +exec +subscribe +ping +zadd +zrem +zremrangebyscore +zrange +script|load")
	args := []any{"ACL", "SETUSER", "nopsub"}
	for _, a := range acl {
		args = append(args, a)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatal(err)
	}
	names := []string{"l0", "l1", "l2", "l3"}
	timing := [3]time.Duration{lease, renew, retry}
	proxy := faultproxy.Start(t, srv.Addr())
	logger, lines := captureLog()
	iv := newIntervals()
	a := runGroup(t, iv, "pod-a", groupOpts{group: "a", client: proxiedClient(t, proxy.Addr(), renew/2, "nopsub", "pw"), leases: names, timing: timing, logger: logger})
	waitUntil(t, 10*time.Second, "A holds every lease", func() bool { return holdsAll(a, names...) })
	b := runGroup(t, iv, "pod-b", groupOpts{group: "b", client: proxiedClient(t, srv.Addr(), renew/2, "", ""), leases: names, timing: timing})
	time.Sleep(3 * retry) // renewals with the refused subscription
	election.ResetGroupMaxLag(a)
	probe := wakeprobe.Start(t)
	proxy.Blackhole(true)
	stalled := time.Now()
	waitUntil(t, 10*time.Second, "B takes every lease", func() bool { return holdsAll(b, names...) })
	took := time.Since(stalled)
	lag, control := election.GroupMaxLag(a), probe.Stop()
	if n := len(a.Held()); n != 0 {
		t.Errorf("A still believes it holds %d leases %v after its path stalled", n, time.Since(stalled))
	}
	worst := iv.check(t)
	t.Logf("A stalled: B led every lease after %v; longest overlap %v", took.Round(time.Millisecond), worst)
	// A call on the stalled path blocks for the client's timeout (renew/2) at least.
	assertLoopNotHeld(t, lag, control, renew/2)
	refusals := 0
	for _, l := range lines() {
		if strings.Contains(l, "refused the pattern subscription") {
			refusals++
			if !strings.Contains(l, "+psubscribe") || !strings.Contains(l, "&elector:{*}:events") {
				t.Errorf("the refusal does not name the permission to add: %s", l)
			}
		}
	}
	if refusals != 1 {
		t.Errorf("the refused PSUBSCRIBE was reported %d times, want once", refusals)
	}
}

// TestGroupAddAfterRemoveWhileReleasing is issue #12's third path: Remove(X), then Add(X)
// while X's release has not come back. A fault proxy holds back the release batch that is in
// flight (that of other leases removed just before, which X's release queues behind): its
// latency is raised for the moment that batch passes and lowered again, so later calls go
// through at once. The old Group tried X again at once: the acquire resumed X's very term
// (it is idempotent for the owner) and started OnStartedLeading again; then the queued
// release deleted that live term, and B led X while A worked on it; A's OnStoppedLeading(X)
// also ran during the resumed term.
func TestGroupAddAfterRemoveWhileReleasing(t *testing.T) {
	const lease, renew, retry = 1500 * time.Millisecond, 900 * time.Millisecond, 400 * time.Millisecond
	const holdBack = 300 * time.Millisecond // one way, for the batch in flight: under the retry period
	srv := redistest.Start(t)
	xs := []string{"x0", "x1", "x2", "x3"}
	ws := []string{"w0", "w1", "w2", "w3"}
	all := append(append([]string{}, xs...), ws...)
	timing := [3]time.Duration{lease, renew, retry}
	proxy := faultproxy.Start(t, srv.Addr())
	iv := newIntervals()
	a := runGroup(t, iv, "pod-a", groupOpts{group: "a", client: proxiedClient(t, proxy.Addr(), renew/2, "", ""), leases: all, timing: timing})
	waitUntil(t, 10*time.Second, "A holds every lease", func() bool { return holdsAll(a, all...) })
	b := runGroup(t, iv, "pod-b", groupOpts{group: "b", client: proxiedClient(t, srv.Addr(), renew/2, "", ""), leases: xs, timing: timing})
	time.Sleep(2 * retry)
	election.ResetGroupMaxLag(a)
	probe := wakeprobe.Start(t)

	proxy.SetLatency(holdBack)
	a.Remove(ws...) // their release batch goes into the proxy and is held back
	time.Sleep(30 * time.Millisecond)
	proxy.SetLatency(0)
	a.Remove(xs...) // X's terms end; their release queues behind
	waitUntil(t, 5*time.Second, "A's work on x returned", func() bool {
		iv.mu.Lock()
		defer iv.mu.Unlock()
		for _, x := range xs {
			if iv.phase["pod-a/"+x] == "working" {
				return false
			}
		}
		return true
	})
	time.Sleep(10 * time.Millisecond)
	a.Add(xs...) // the release of X has not come back
	waitUntil(t, 10*time.Second, "B leads every x", func() bool { return holdsAll(b, xs...) })
	time.Sleep(lease + 2*retry) // A tries X again once the others had their chance
	lag, control := election.GroupMaxLag(a), probe.Stop()
	worst := iv.check(t)
	t.Logf("Remove then Add during the release: longest overlap %v", worst)
	for _, x := range xs {
		_, inA := a.Held()[x]
		_, inB := b.Held()[x]
		if inA && inB {
			t.Errorf("A and B both hold %s", x)
		}
	}
	assertLoopNotHeld(t, lag, control, holdBack) // the held-back batch blocks at least one way
	if got := election.GroupNames(a); len(got) != len(xs) {
		t.Errorf("A campaigns for %v, want %v", got, xs)
	}
}
