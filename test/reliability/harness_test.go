package reliability

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/pkg/election"
)

// timing is one set of election durations.
type timing struct {
	lease, renew, retry time.Duration
}

// work is one term as the worker saw it: from the start of OnStartedLeading to the
// cancellation of its ctx.
type work struct {
	who        string
	lease      string
	token      int64
	start, end time.Time // end is zero while the work runs
}

func (w work) String() string {
	end := "running"
	if !w.end.IsZero() {
		end = w.end.Format("15:04:05.000000")
	}
	return fmt.Sprintf("%s %s token=%d %s .. %s", w.lease, w.who, w.token, w.start.Format("15:04:05.000000"), end)
}

// ledger is the safety checker's record: workers report which token did work when.
type ledger struct {
	mu    sync.Mutex
	terms []*work
}

// begin records that who began the work of the term with token on lease at start, and returns
// the function that records its end.
func (l *ledger) begin(lease, who string, token int64, start time.Time) (end func(at time.Time)) {
	w := &work{who: who, lease: lease, token: token, start: start}
	l.mu.Lock()
	l.terms = append(l.terms, w)
	l.mu.Unlock()
	return func(at time.Time) {
		l.mu.Lock()
		w.end = at
		l.mu.Unlock()
	}
}

// snapshot returns a copy of the terms, in start order.
func (l *ledger) snapshot() []work {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]work, len(l.terms))
	for i, w := range l.terms {
		out[i] = *w
	}
	return out
}

func (l *ledger) String() string {
	var b strings.Builder
	for _, w := range l.snapshot() {
		fmt.Fprintf(&b, "  %s\n", w)
	}
	return b.String()
}

// check fails the test when, for one lease, the work of two terms overlapped or a term began
// with a token not above every earlier token (the same holder may resume the same term). excuse may explain an overlap of an earlier term a
// with a later term b (the documented async-replication window): it returns the explanation, or
// "" when the overlap is a failure. check returns the number of terms and the excused overlaps.
func (l *ledger) check(t testing.TB, excuse func(a, b work) string) (terms int, excused []string) {
	t.Helper()
	byLease := map[string][]work{}
	for _, w := range l.snapshot() {
		byLease[w.lease] = append(byLease[w.lease], w)
	}
	for name, ws := range byLease {
		var maxToken int64
		for i, b := range ws {
			// An elector that stepped down at RenewDeadline re-acquires its own record if it is
			// still there (acquire is idempotent for the holding instance): the same term again,
			// with the same token, and nobody else can have begun a term in between.
			again := i > 0 && ws[i-1].who == b.who && ws[i-1].token == b.token
			if b.token <= maxToken && !again {
				t.Errorf("lease %s: %s began with token %d, not above %d; terms:\n%s", name, b.who, b.token, maxToken, l)
			}
			maxToken = max(maxToken, b.token)
			for _, a := range ws[:i] {
				if !a.end.IsZero() && !a.end.After(b.start) {
					continue
				}
				why := ""
				if excuse != nil {
					why = excuse(a, b)
				}
				if why == "" {
					t.Errorf("lease %s: two workers at once: %v began while %v was working; terms:\n%s", name, b, a, l)
					continue
				}
				excused = append(excused, fmt.Sprintf("%v overlapped %v: %s", b, a, why))
			}
		}
		terms += len(ws)
	}
	return terms, excused
}

// replica is one elector, run by the test.
type replica struct {
	name   string
	e      *election.Elector
	cancel context.CancelFunc
	done   chan error
}

// startElector creates an elector for identity on lease through client, records its work in led
// and runs it until stop or the end of the test. opts change the Config before New.
func startElector(t testing.TB, client redis.UniversalClient, leaseName, identity string, tm timing, led *ledger, opts ...func(*election.Config)) *replica {
	t.Helper()
	r := &replica{name: identity}
	cfg := election.Config{
		Client:          client,
		LeaseName:       leaseName,
		Identity:        identity,
		LeaseDuration:   tm.lease,
		RenewDeadline:   tm.renew,
		RetryPeriod:     tm.retry,
		ReleaseOnCancel: true,
		Recampaign:      true,
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				end := led.begin(leaseName, identity, r.e.Status().Token, time.Now())
				<-ctx.Done()
				end(time.Now())
			},
			OnStoppedLeading: func() {},
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	e, err := election.New(cfg)
	if err != nil {
		t.Fatalf("election.New(%s): %v", identity, err)
	}
	r.e = e
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

// waitLeader waits until exactly one of reps leads and, when since is not zero, has renewed or
// acquired its lease after since. It returns that replica.
func waitLeader(t testing.TB, reps []*replica, since time.Time, within time.Duration) *replica {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		var leaders []*replica
		for _, r := range reps {
			if st := r.e.Status(); st.IsLeader && (since.IsZero() || (st.LastRenew != nil && st.LastRenew.After(since))) {
				leaders = append(leaders, r)
			}
		}
		if len(leaders) == 1 {
			return leaders[0]
		}
		time.Sleep(5 * time.Millisecond)
	}
	var states []string
	for _, r := range reps {
		states = append(states, fmt.Sprintf("%s: %+v", r.name, r.e.Status()))
	}
	t.Fatalf("no single leader renewing after %s within %v:\n  %s", since.Format("15:04:05.000"), within, strings.Join(states, "\n  "))
	return nil
}

// newClient builds a client the way the elector command does (internal/redisclient), with
// timeouts of half the renew deadline and no go-redis retries: retrying is the elector's job.
func newClient(t testing.TB, cfg redisclient.Config, tm timing) redis.UniversalClient {
	t.Helper()
	cfg.DialTimeout, cfg.ReadTimeout, cfg.WriteTimeout = tm.renew/2, tm.renew/2, tm.renew/2
	cfg.MaxRetries = -1
	c, err := redisclient.New(cfg)
	if err != nil {
		t.Fatalf("redisclient.New(%v): %v", cfg, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// percentile returns the q-quantile (0..1) of ds.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
