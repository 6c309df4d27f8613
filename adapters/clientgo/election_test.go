package clientgo

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/client-go/tools/leaderelection"
)

// timing is a client-go LeaderElectionConfig's durations.
type timing struct {
	lease, renew, retry time.Duration
}

// candidate is one replica running client-go's own LeaderElector over a Lock with its own
// Redis client.
type candidate struct {
	id     string
	client *redis.Client
	lock   *Lock
	le     *leaderelection.LeaderElector
	cancel context.CancelFunc
	done   chan struct{} // closed when Run returned
}

// term is one leadership as the callbacks saw it.
type term struct {
	id    string
	token int64
	at    time.Time
}

// field runs candidates and checks, each time one starts leading, that every other leader's
// ctx is already cancelled: client-go's one-leader-at-a-time guarantee.
type field struct {
	t          *testing.T
	mu         sync.Mutex
	leading    map[string]context.Context
	stopped    map[string]int
	violations []string
	terms      chan term
}

func newField(t *testing.T) *field {
	return &field{t: t, leading: map[string]context.Context{}, stopped: map[string]int{}, terms: make(chan term, 16)}
}

// start runs a candidate called id against the Redis server of rc.
func (f *field) start(rc *redis.Client, id string, tm timing, releaseOnCancel bool) *candidate {
	f.t.Helper()
	c := &candidate{id: id, client: newClient(f.t, rc), done: make(chan struct{})}
	var err error
	if c.lock, err = New(c.client, "controller", id, Options{}); err != nil {
		f.t.Fatal(err)
	}
	c.le, err = leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            c.lock,
		LeaseDuration:   tm.lease,
		RenewDeadline:   tm.renew,
		RetryPeriod:     tm.retry,
		ReleaseOnCancel: releaseOnCancel,
		Name:            "controller",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) { f.started(c, ctx) },
			OnStoppedLeading: func() { f.stoppedLeading(id) },
		},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go func() {
		defer close(c.done)
		c.le.Run(ctx)
	}()
	f.t.Cleanup(func() { c.stop(f.t) })
	return c
}

func (f *field) started(c *candidate, ctx context.Context) {
	tok := c.lock.Token()
	f.mu.Lock()
	for other, octx := range f.leading {
		if octx.Err() == nil {
			f.violations = append(f.violations, fmt.Sprintf("%s started leading while %s still led", c.id, other))
		}
	}
	f.leading[c.id] = ctx
	f.mu.Unlock()
	f.terms <- term{id: c.id, token: tok, at: time.Now()}
}

func (f *field) stoppedLeading(id string) {
	f.mu.Lock()
	f.stopped[id]++
	f.mu.Unlock()
}

// check fails the test if two candidates ever led at once.
func (f *field) check() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.violations {
		f.t.Error(v)
	}
}

// next waits for the next term to begin.
func (f *field) next(within time.Duration) term {
	f.t.Helper()
	select {
	case tm := <-f.terms:
		return tm
	case <-time.After(within):
		f.t.Fatalf("no candidate became leader within %v", within)
		return term{}
	}
}

// none checks that no term begins for d.
func (f *field) none(d time.Duration) {
	f.t.Helper()
	select {
	case tm := <-f.terms:
		f.t.Fatalf("%s became leader while the lease was held", tm.id)
	case <-time.After(d):
	}
}

// stop cancels the candidate's Run and waits for it to return.
func (c *candidate) stop(t *testing.T) {
	c.cancel()
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Errorf("LeaderElector %s did not return within 30s of its cancel", c.id)
	}
}

func byID(cands []*candidate, id string) *candidate {
	for _, c := range cands {
		if c.id == id {
			return c
		}
	}
	panic("no candidate " + id)
}

// With ReleaseOnCancel, a leader that stops hands over in about a retry period: long before
// its lease (10s) could have expired. Tokens grow with every term.
func TestLeaderElectorHandoverOnReleaseOnCancel(t *testing.T) {
	rc := startRedis(t)
	f := newField(t)
	tm := timing{lease: 10 * time.Second, renew: 5 * time.Second, retry: 200 * time.Millisecond}
	var cands []*candidate
	for _, id := range []string{"pod-a", "pod-b", "pod-c"} {
		cands = append(cands, f.start(rc, id, tm, true))
	}
	first := f.next(30 * time.Second)
	f.none(time.Second) // the others see a valid lease and wait
	prev := first
	seen := map[string]bool{first.id: true}
	for range 2 {
		leader := byID(cands, prev.id)
		stopAt := time.Now()
		leader.stop(t)
		next := f.next(tm.lease / 2) // a takeover at expiry would take 10s
		t.Logf("%s -> %s in %v", prev.id, next.id, next.at.Sub(stopAt))
		if seen[next.id] {
			t.Fatalf("%s led again after it stopped", next.id)
		}
		if next.token <= prev.token {
			t.Fatalf("token of %s's term %d is not larger than %s's %d", next.id, next.token, prev.id, prev.token)
		}
		seen[next.id] = true
		prev = next
	}
	rec, _, err := byID(cands, prev.id).lock.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rec.HolderIdentity != prev.id || rec.LeaderTransitions != 2 {
		t.Errorf("record = %+v, want holder %s after 2 transitions", rec, prev.id)
	}
	f.check()
}

// A leader that crashes (stops without releasing) is replaced once its lease has expired by
// client-go's own reckoning: not before, and not much after.
func TestLeaderElectorTakeoverAfterCrash(t *testing.T) {
	rc := startRedis(t)
	f := newField(t)
	tm := timing{lease: 2 * time.Second, renew: time.Second, retry: 200 * time.Millisecond}
	var cands []*candidate
	for _, id := range []string{"pod-a", "pod-b", "pod-c"} {
		cands = append(cands, f.start(rc, id, tm, false))
	}
	first := f.next(30 * time.Second)
	f.none(2 * tm.lease) // renewals keep the others out for several lease durations
	crashAt := time.Now()
	byID(cands, first.id).stop(t) // ReleaseOnCancel is off: the record stays as it was
	next := f.next(30 * time.Second)
	took := next.at.Sub(crashAt)
	t.Logf("%s -> %s %v after the crash", first.id, next.id, took)
	// The last renewal was at most a retry period before the crash; client-go waits a lease
	// duration after it observed that renewal.
	if min := tm.lease - 2*tm.retry; took < min {
		t.Fatalf("%s took over %v after the crash, before the lease can have expired (%v)", next.id, took, min)
	}
	if next.id == first.id || next.token <= first.token {
		t.Fatalf("takeover by %s with token %d after %s with %d", next.id, next.token, first.id, first.token)
	}
	f.check()
}

// A leader cut off from Redis steps down (RenewDeadline) before anyone else can take over
// (LeaseDuration), and its late writes are refused.
func TestLeaderElectorCutOffLeaderStepsDownFirst(t *testing.T) {
	rc := startRedis(t)
	f := newField(t)
	tm := timing{lease: 3 * time.Second, renew: time.Second, retry: 200 * time.Millisecond}
	var cands []*candidate
	for _, id := range []string{"pod-a", "pod-b", "pod-c"} {
		cands = append(cands, f.start(rc, id, tm, true))
	}
	first := f.next(30 * time.Second)
	old := byID(cands, first.id)
	_ = old.client.Close() // every later call of the leader fails
	next := f.next(30 * time.Second)
	select {
	case <-old.done: // client-go's Run returns once leadership is lost
	case <-time.After(30 * time.Second):
		t.Fatal("the cut-off leader's Run did not return")
	}
	f.mu.Lock()
	stopped := f.stopped[first.id]
	f.mu.Unlock()
	if stopped != 1 {
		t.Errorf("OnStoppedLeading of the cut-off leader ran %d times, want 1", stopped)
	}
	if next.token <= first.token {
		t.Fatalf("token %d of the new term is not larger than %d", next.token, first.token)
	}
	f.check() // the old leader's ctx was cancelled before the new one began
}
