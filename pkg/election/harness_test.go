package election_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
)

// fast timing for tests: handover and takeover figures do not depend on it, safety margins do.
const (
	testLease = 600 * time.Millisecond
	testRenew = 350 * time.Millisecond
	testRetry = 100 * time.Millisecond
)

// timeline records what every replica did, in one linear order.
type timeline struct {
	mu     sync.Mutex
	events []event
}

type event struct {
	at       time.Time
	who      string
	kind     string // start, end (of OnStartedLeading), stopped (OnStoppedLeading), leader (OnNewLeader)
	token    int64
	observed string
}

func (tl *timeline) add(ev event) {
	tl.mu.Lock()
	ev.at = time.Now()
	tl.events = append(tl.events, ev)
	tl.mu.Unlock()
}

func (tl *timeline) snapshot() []event {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.events)
}

// waitFor waits until an event matching f is recorded after index from, and returns it.
func (tl *timeline) waitFor(t testing.TB, from int, within time.Duration, what string, f func(event) bool) (event, int) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		evs := tl.snapshot()
		for i := from; i < len(evs); i++ {
			if f(evs[i]) {
				return evs[i], i
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("no %s within %v; timeline:\n%s", what, within, tl)
	return event{}, 0
}

func (tl *timeline) String() string {
	var b []byte
	for _, ev := range tl.snapshot() {
		b = fmt.Appendf(b, "  %s %-8s %-8s token=%d %s\n", ev.at.Format("15:04:05.000000"), ev.who, ev.kind, ev.token, ev.observed)
	}
	return string(b)
}

// checkNoOverlap fails when the work of two terms overlapped, or tokens did not increase.
// One replica may start twice with the same token: a leader that stepped down at its renew
// deadline while Redis still held its term resumes that term (docs/DESIGN.md, guarantee 3).
func (tl *timeline) checkNoOverlap(t testing.TB) (terms int) {
	t.Helper()
	running, lastWho := "", ""
	var last int64
	for _, ev := range tl.snapshot() {
		switch ev.kind {
		case "start":
			if running != "" {
				t.Fatalf("%s started work (token %d) while %s was still working; timeline:\n%s", ev.who, ev.token, running, tl)
			}
			if ev.token < last || ev.token == last && ev.who != lastWho {
				t.Fatalf("%s started with token %d, not above %d (of %s)", ev.who, ev.token, last, lastWho)
			}
			running, last, lastWho = ev.who, ev.token, ev.who
			terms++
		case "end":
			if running != ev.who {
				t.Fatalf("%s ended work it was not doing (running: %q)", ev.who, running)
			}
			running = ""
		}
	}
	return terms
}

// replica is one elector with its own connection to Redis through a fault proxy.
type replica struct {
	name   string
	e      *election.Elector
	proxy  *faultproxy.Proxy
	client *redis.Client
	cancel context.CancelFunc
	done   chan error
}

type cluster struct {
	t        testing.TB
	srv      *redistest.Server
	tl       *timeline
	replicas []*replica
}

type option func(*election.Config)

func newCluster(t testing.TB, n int, opts ...option) *cluster {
	t.Helper()
	c := &cluster{t: t, srv: redistest.Start(t), tl: &timeline{}}
	for i := 0; i < n; i++ {
		c.add(fmt.Sprintf("pod-%d", i), opts...)
	}
	return c
}

func (c *cluster) add(name string, opts ...option) *replica {
	t := c.t
	proxy := faultproxy.Start(t, c.srv.Addr())
	client := redis.NewClient(&redis.Options{
		Addr:                  proxy.Addr(),
		DialTimeout:           testRenew / 2,
		ReadTimeout:           testRenew / 2,
		WriteTimeout:          testRenew / 2,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
	})
	t.Cleanup(func() { client.Close() })
	tl := c.tl
	cfg := election.Config{
		Client:          client,
		LeaseName:       "test-lease",
		Identity:        name,
		LeaseDuration:   testLease,
		RenewDeadline:   testRenew,
		RetryPeriod:     testRetry,
		ReleaseOnCancel: true,
		Recampaign:      true,
		Callbacks: election.Callbacks{
			OnStoppedLeading: func() { tl.add(event{who: name, kind: "stopped"}) },
			OnNewLeader:      func(id string) { tl.add(event{who: name, kind: "leader", observed: id}) },
		},
	}
	r := &replica{name: name, proxy: proxy, client: client}
	cfg.Callbacks.OnStartedLeading = func(ctx context.Context) {
		token := election.TokenFrom(ctx)
		if token != r.e.Status().Token || token == 0 {
			panic(fmt.Sprintf("TokenFrom(ctx) = %d, Elector.Token() = %d", token, r.e.Status().Token))
		}
		tl.add(event{who: name, kind: "start", token: token})
		<-ctx.Done()
		tl.add(event{who: name, kind: "end"})
	}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := election.New(cfg)
	if err != nil {
		t.Fatalf("election.New: %v", err)
	}
	r.e = e
	c.replicas = append(c.replicas, r)
	r.start()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- r.e.Run(ctx) }()
}

// stop cancels Run and waits for it to return.
func (r *replica) stop() {
	if r.done == nil {
		return
	}
	r.cancel()
	<-r.done
	r.done = nil
}

func (c *cluster) byName(name string) *replica {
	for _, r := range c.replicas {
		if r.name == name {
			return r
		}
	}
	c.t.Fatalf("no replica %q", name)
	return nil
}

// leader waits until exactly one replica leads and returns it.
func (c *cluster) leader(within time.Duration) *replica {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var leaders []*replica
		for _, r := range c.replicas {
			if r.e.IsLeader() {
				leaders = append(leaders, r)
			}
		}
		if len(leaders) == 1 {
			return leaders[0]
		}
		time.Sleep(time.Millisecond)
	}
	c.t.Fatalf("no single leader within %v; timeline:\n%s", within, c.tl)
	return nil
}

// percentiles returns the median and the 99th percentile of ds.
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	idx := func(q float64) int { return min(len(s)-1, int(q*float64(len(s)))) }
	return s[idx(0.5)], s[idx(0.99)]
}
