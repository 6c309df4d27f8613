package election_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
)

// Timing of the indicator tests: a call timeout (max(RetryPeriod, RenewDeadline/2) = 1s) well
// above the slowest round trip they cause (2 × 200ms through the proxy), so that no term ends
// by its deadline; the handovers are releases, so the lease duration costs no time.
const (
	indLease = 3 * time.Second
	indRenew = 2 * time.Second
	indRetry = 500 * time.Millisecond
)

// indReplica is one elector with its own proxy, metrics registry and a flag that its
// callbacks keep the way the CLI keeps its status file: set as OnStartedLeading begins,
// cleared in OnStoppedLeading.
type indReplica struct {
	name   string
	e      *election.Elector
	proxy  *faultproxy.Proxy
	reg    *prometheus.Registry
	flag   atomic.Bool
	starts atomic.Int64
	cancel context.CancelFunc
	done   chan error
}

// indPair is two replicas of one lease; each one's OnStartedLeading checks the other's
// indicators the moment it begins.
type indPair struct {
	lease   string
	r       [2]*indReplica
	mu      sync.Mutex
	windows []string // one entry per start that found the other replica still saying leader
}

// TestIndicatorsBeforeRelease checks the step-down order (docs/DESIGN.md, "Step-down order:
// indicators before release"): when a successor's OnStartedLeading begins, the old leader's
// IsLeader, Status, /leader, metrics and OnStoppedLeading (which the CLI's status file
// follows) already say it does not lead. Delays on the old leader's path make the release
// reply late, which is when a step-down that ran OnStoppedLeading after the release showed.
func TestIndicatorsBeforeRelease(t *testing.T) {
	if testing.Short() {
		t.Skip("handovers with delays take ~20s")
	}
	srv := redistest.Start(t)
	const handovers = 20
	for _, how := range []string{"resign", "cancel"} {
		for _, d := range []time.Duration{0, 2 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/delay=%v", how, d), func(t *testing.T) {
				t.Parallel()
				p := newIndPair(t, srv, fmt.Sprintf("ind-%s-%d", how, d.Milliseconds()))
				for i := 0; i < handovers; i++ {
					p.handover(t, how, d)
				}
				p.mu.Lock()
				defer p.mu.Unlock()
				t.Logf("%s, delay %v: %d handovers, %d windows", how, d, handovers, len(p.windows))
				if len(p.windows) > 0 {
					t.Errorf("%d of %d successors started while the old leader still said leader:\n%s",
						len(p.windows), handovers, strings.Join(p.windows, "\n"))
				}
			})
		}
	}
}

func newIndPair(t *testing.T, srv *redistest.Server, name string) *indPair {
	p := &indPair{lease: name}
	for i, id := range []string{"a", "b"} {
		p.r[i] = p.newReplica(t, srv, id, i)
	}
	for _, r := range p.r {
		r.start()
		t.Cleanup(r.stop)
	}
	return p
}

func (p *indPair) newReplica(t *testing.T, srv *redistest.Server, id string, i int) *indReplica {
	r := &indReplica{name: id, proxy: faultproxy.Start(t, srv.Addr()), reg: prometheus.NewRegistry()}
	client := redis.NewClient(&redis.Options{Addr: r.proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = client.Close() })
	metrics, err := election.NewMetrics(r.reg)
	if err != nil {
		t.Fatal(err)
	}
	r.e, err = election.New(election.Config{
		Client: client, LeaseName: p.lease, Identity: id, Metrics: metrics,
		LeaseDuration: indLease, RenewDeadline: indRenew, RetryPeriod: indRetry,
		ReleaseOnCancel: true, Recampaign: true,
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				// First the check, then our own flag: nothing of ours may delay it.
				if said := p.r[1-i].saysLeader(t, p.lease); len(said) > 0 {
					p.mu.Lock()
					p.windows = append(p.windows, fmt.Sprintf("  %s started (token %d) while %s said leader by %v",
						id, election.TokenFrom(ctx), p.r[1-i].name, said))
					p.mu.Unlock()
				}
				r.flag.Store(true)
				r.starts.Add(1)
				<-ctx.Done()
			},
			OnStoppedLeading: func() { r.flag.Store(false) },
		},
	})
	if err != nil {
		t.Fatalf("election.New: %v", err)
	}
	return r
}

func (r *indReplica) start() {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel, r.done = cancel, make(chan error, 1)
	go func() { r.done <- r.e.Run(ctx) }()
}

func (r *indReplica) stop() {
	if r.done != nil {
		r.cancel()
		<-r.done
		r.done = nil
	}
}

// saysLeader returns the indicators of r that say it leads, the fastest first.
func (r *indReplica) saysLeader(t *testing.T, lease string) []string {
	var said []string
	if r.flag.Load() {
		said = append(said, "OnStoppedLeading not yet run")
	}
	if r.e.IsLeader() {
		said = append(said, "IsLeader")
	}
	if s := r.e.Status(); s.IsLeader || s.Token != 0 || s.Name == r.name {
		said = append(said, fmt.Sprintf("Status %+v", s))
	}
	rec := httptest.NewRecorder()
	r.e.LeaderHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/leader", nil))
	var body struct {
		IsLeader bool `json:"isLeader"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil || body.IsLeader {
		said = append(said, fmt.Sprintf("/leader %q (%v)", rec.Body.String(), err))
	}
	return append(said, leaderGauges(t, r.reg, lease)...)
}

// leaderGauges returns the gauges of reg that say the elector of lease leads.
func leaderGauges(t *testing.T, reg *prometheus.Registry, lease string) []string {
	mfs, err := reg.Gather()
	if err != nil {
		t.Errorf("gather: %v", err)
	}
	var said []string
	for _, mf := range mfs {
		switch mf.GetName() {
		case "leader_election_master_status", "elector_is_leader", "elector_fencing_token", "elector_seconds_since_last_renew":
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == lease && m.GetGauge().GetValue() != 0 {
				said = append(said, fmt.Sprintf("%s=%v", mf.GetName(), m.GetGauge().GetValue()))
			}
		}
	}
	return said
}

// handover waits for one leader and a follower that knows it, delays the leader's path by d,
// ends its term (how: resign or cancel of Run's ctx, then Run again once the follower started) and waits for the
// follower's OnStartedLeading.
func (p *indPair) handover(t *testing.T, how string, d time.Duration) {
	t.Helper()
	old, next := p.waitSettled(t)
	starts := next.starts.Load()
	old.proxy.SetLatency(d)
	defer old.proxy.SetLatency(0)
	switch how {
	case "resign":
		// A resign call can time out on a loaded machine (its path is delayed by d): try
		// again while the old replica still leads; the handover is what is under test.
		waitUntil(t, 10*time.Second, old.name+" resigns", func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := old.e.ResignTo(ctx, "")
			if err != nil && old.e.IsLeader() {
				t.Logf("%s: Resign: %v; trying again after a heartbeat period", old.name, err)
				time.Sleep(indLease / 3) // a refusal by the registry lasts until the next heartbeat
				return false
			}
			return true
		})
	case "cancel":
		// Run again only once the successor started: a Run begun at once races the
		// successor's wake-up for the free lease and may win it, and then no handover
		// happened (CI on a loaded machine: "no b starts within 10s").
		old.stop()
		defer old.start()
	}
	waitUntil(t, 10*time.Second, next.name+" starts", func() bool { return next.starts.Load() > starts })
}

// waitSettled waits until one replica leads and the other has observed it (it campaigns and
// listens for the release), and returns them.
func (p *indPair) waitSettled(t *testing.T) (leader, follower *indReplica) {
	t.Helper()
	waitUntil(t, 10*time.Second, "one leader, observed by the other", func() bool {
		for i, r := range p.r {
			o := p.r[1-i]
			if r.e.IsLeader() && r.flag.Load() && !o.e.IsLeader() && o.e.Status().Name == r.name {
				leader, follower = r, o
				return true
			}
		}
		return false
	})
	return leader, follower
}

// TestBlockingStoppedLeadingDelaysOnlyTheHandover: an OnStoppedLeading that blocks holds the
// release back but not the lease: nothing renews it any more, so a follower takes over when
// it expires, while the callback still blocks and the old leader says follower.
func TestBlockingStoppedLeadingDelaysOnlyTheHandover(t *testing.T) {
	srv := redistest.Start(t)
	unblock, entered := make(chan struct{}), make(chan struct{}, 1)
	a := stoppedLeadingReplica(t, srv, "a", func() { entered <- struct{}{}; <-unblock })
	var bStarted atomic.Bool
	b := stoppedLeadingReplica(t, srv, "b", func() {})
	b.cfgStart = func() { bStarted.Store(true) }
	a.run(t)
	waitUntil(t, 10*time.Second, "a leads", a.e.IsLeader)
	b.run(t)
	waitUntil(t, 10*time.Second, "b observes a", func() bool { return b.e.Status().Name == "a" })
	a.cancel()
	<-entered
	waitUntil(t, 10*indLease, "b takes over at the lease's expiry", bStarted.Load)
	if a.e.IsLeader() {
		t.Errorf("a says leader while b leads")
	}
	select {
	case <-a.done:
		t.Errorf("a's Run returned while its OnStoppedLeading blocked")
	default:
	}
	close(unblock)
	<-a.done
}

// TestPanickingStoppedLeadingStillReleases: the release runs even when OnStoppedLeading
// panics, so that followers need not wait for the expiry.
func TestPanickingStoppedLeadingStillReleases(t *testing.T) {
	srv := redistest.Start(t)
	a := stoppedLeadingReplica(t, srv, "a", func() { panic("OnStoppedLeading failed") })
	a.run(t)
	waitUntil(t, 10*time.Second, "a leads", a.e.IsLeader)
	a.cancel()
	if got := <-a.done; got == nil || !strings.Contains(fmt.Sprint(got), "OnStoppedLeading failed") {
		t.Fatalf("Run ended with %v, want the callback's panic", got)
	}
	if n, err := srv.Client(t).Exists(context.Background(), "elector:{sl-a}:lease").Result(); err != nil || n != 0 {
		t.Errorf("after the panic the lease key exists (%d, %v): it was not released", n, err)
	}
}

// slReplica is one elector of the OnStoppedLeading tests; Run's panic, if any, ends up on done.
type slReplica struct {
	e        *election.Elector
	cancel   context.CancelFunc
	done     chan any
	cfgStart func()
}

func stoppedLeadingReplica(t *testing.T, srv *redistest.Server, id string, stopped func()) *slReplica {
	r := &slReplica{done: make(chan any, 1), cfgStart: func() {}}
	var err error
	r.e, err = election.New(election.Config{
		Client: srv.Client(t), LeaseName: "sl-a", Identity: id,
		LeaseDuration: testLease, RenewDeadline: testRenew, RetryPeriod: testRetry,
		ReleaseOnCancel: true,
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) { r.cfgStart(); <-ctx.Done() },
			OnStoppedLeading: stopped,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *slReplica) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	t.Cleanup(cancel)
	go func() {
		defer func() { r.done <- recover() }()
		_ = r.e.Run(ctx)
	}()
}
