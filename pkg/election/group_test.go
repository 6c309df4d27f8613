package election_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
)

// work records which replica works on which lease, and fails on the first overlap.
type work struct {
	mu      sync.Mutex
	running map[string]liveWork // lease -> the term working on it
	overlap []string
	terms   int
}

type liveWork struct {
	who string
	ctx context.Context
}

// start records that who began working on lease name with the term's ctx. The term working
// on it before is an overlap if its ctx is not done at this moment: asked here, since its
// callback, which records the end once it wakes up, may run late on a loaded machine.
func (w *work) start(ctx context.Context, who, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if other, ok := w.running[name]; ok && other.ctx.Err() == nil {
		w.overlap = append(w.overlap, fmt.Sprintf("%s started %s while %s worked on it", who, name, other.who))
	}
	w.running[name] = liveWork{who: who, ctx: ctx}
	w.terms++
}

func (w *work) end(who, name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running[name].who == who {
		delete(w.running, name)
	}
}

type groupReplica struct {
	name   string
	g      *election.Group
	proxy  *faultproxy.Proxy
	cancel context.CancelFunc
	done   chan error
}

// The timing of TestGroupSpreadFailoverAndJoin's replicas.
const spreadLease, spreadRenew, spreadRetry = 3 * time.Second, 2 * time.Second, 500 * time.Millisecond

func startGroupReplica(t *testing.T, srv *redistest.Server, w *work, name string, leases []string) *groupReplica {
	t.Helper()
	proxy := faultproxy.Start(t, srv.Addr())
	// The Group's own call timeout for this timing is RenewDeadline/2; the client's must not
	// be shorter. The timing is slower than the other tests': a batch of 1,000 attempts under
	// -race on a loaded machine (load 25) took longer than a 600ms renew deadline, so the
	// Group rightly released what such late replies won and never spread.
	client := redis.NewClient(&redis.Options{
		Addr: proxy.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1,
		DialTimeout: spreadRenew / 2, ReadTimeout: spreadRenew / 2, WriteTimeout: spreadRenew / 2,
	})
	t.Cleanup(func() { client.Close() })
	g, err := election.NewGroup(election.GroupConfig{
		Client: client, Group: "shards", Identity: name, Leases: leases,
		LeaseDuration: spreadLease, RenewDeadline: spreadRenew, RetryPeriod: spreadRetry,
		Callbacks: election.GroupCallbacks{
			OnStartedLeading: func(ctx context.Context, lease string) {
				token := election.TokenFrom(ctx)
				if election.TokenFrom(ctx) != token {
					panic("TokenFrom(ctx) differs from the token passed")
				}
				w.start(ctx, name, lease)
				<-ctx.Done()
				w.end(name, lease)
			},
			OnStoppedLeading: func(string) {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &groupReplica{name: name, g: g, proxy: proxy, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- g.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// holders samples Held() of every replica twice and returns, per lease, the replicas that
// held it in both samples (a lease moving between two reads is not counted twice).
func holders(rs []*groupReplica) map[string][]string {
	first := map[string]map[string]bool{}
	for _, r := range rs {
		for name := range r.g.Held() {
			if first[name] == nil {
				first[name] = map[string]bool{}
			}
			first[name][r.name] = true
		}
	}
	out := map[string][]string{}
	for _, r := range rs {
		for name := range r.g.Held() {
			if first[name][r.name] {
				out[name] = append(out[name], r.name)
			}
		}
	}
	return out
}

func waitGroup(t *testing.T, within time.Duration, what string, f func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < within {
		ok, state := f()
		if ok {
			return time.Since(start)
		}
		last = state
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s not reached within %v; last state: %s", what, within, last)
	return 0
}

// balanced reports whether every lease is held by exactly one of rs and each replica holds
// K/len(rs) ± 10%.
func balanced(rs []*groupReplica, k int) (bool, string) {
	h := holders(rs)
	counts := map[string]int{}
	for _, who := range h {
		for _, r := range who {
			counts[r]++
		}
	}
	want := float64(k) / float64(len(rs))
	ok := len(h) == k
	for _, r := range rs {
		if c := float64(counts[r.name]); c < 0.9*want || c > 1.1*want {
			ok = false
		}
	}
	return ok, fmt.Sprintf("%d of %d leases held, per replica %v", len(h), k, counts)
}

func TestGroupSpreadFailoverAndJoin(t *testing.T) {
	const k = 1000
	srv := redistest.Start(t)
	names := make([]string, k)
	for i := range names {
		names[i] = fmt.Sprintf("tenant-%04d", i)
	}
	w := &work{running: map[string]liveWork{}}
	rs := []*groupReplica{
		startGroupReplica(t, srv, w, "pod-a", names),
		startGroupReplica(t, srv, w, "pod-b", names),
		startGroupReplica(t, srv, w, "pod-c", names),
	}

	// A sampler checks that no lease ever has two holders.
	stop := make(chan struct{})
	sampled := make(chan int)
	var live sync.Map // replicas sampled: all of them, the dead one too
	for _, r := range rs {
		live.Store(r.name, r)
	}
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				sampled <- n
				return
			case <-time.After(5 * time.Millisecond):
			}
			var all []*groupReplica
			live.Range(func(_, v any) bool { all = append(all, v.(*groupReplica)); return true })
			for name, who := range holders(all) {
				if len(who) > 1 {
					t.Errorf("lease %s held by %v at once", name, who)
				}
			}
			n++
		}
	}()

	settle := waitGroup(t, 20*spreadLease, "initial spread", func() (bool, string) { return balanced(rs, k) })
	t.Logf("3 replicas, %d leases: balanced within ±10%% after %v", k, settle)

	// pod-c dies: cut off from Redis, it stops renewing and never releases.
	dead := rs[2]
	deadHeld := len(dead.g.Held())
	dead.proxy.Blackhole(true)
	cut := time.Now()
	survivors := rs[:2]
	takeover := waitGroup(t, 20*spreadLease, "takeover of the dead replica's leases", func() (bool, string) {
		h := holders(survivors)
		return len(h) == k, fmt.Sprintf("%d of %d leases held by the survivors", len(h), k)
	})
	// The leases expire a lease duration after the last renew; without -race the survivors
	// hold them all again about then. What matters is that they do (waited for above, up to
	// twenty lease durations) with no two holders (the sampler); the time is a measurement.
	t.Logf("pod-c (held %d) cut off: all %d leases held again by the survivors %v after the cut (lease duration %v)", deadHeld, k, takeover, spreadLease)
	if len(dead.g.Held()) != 0 {
		t.Errorf("the cut-off replica still believes it holds %d leases %v after the cut", len(dead.g.Held()), time.Since(cut))
	}
	dead.cancel()
	<-dead.done
	dead.done <- nil // for the cleanup
	live.Delete(dead.name)

	rebalance := waitGroup(t, 20*spreadLease, "spread over two", func() (bool, string) { return balanced(survivors, k) })
	t.Logf("2 replicas: balanced after %v more", rebalance)

	// pod-d joins: it gets its share from the others shedding, without double holders.
	joiner := startGroupReplica(t, srv, w, "pod-d", names)
	live.Store(joiner.name, joiner)
	now3 := append(survivors[:2:2], joiner)
	join := waitGroup(t, 20*spreadLease, "spread after a join", func() (bool, string) { return balanced(now3, k) })
	t.Logf("pod-d joined: balanced within ±10%% after %v", join)

	close(stop)
	n := <-sampled
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range w.overlap {
		t.Error(o)
	}
	t.Logf("%d samples, %d terms, %d overlapping terms", n, w.terms, len(w.overlap))
}

func TestGroupAddRemoveAndCap(t *testing.T) {
	srv := redistest.Start(t)
	w := &work{running: map[string]liveWork{}}
	client := srv.Client(t)
	stopped := make(chan string, 100)
	g, err := election.NewGroup(election.GroupConfig{
		Client: client, Group: "jobs", Identity: "pod-a", MaxLeases: 3,
		Leases:        []string{"a", "b", "c", "d", "e"},
		LeaseDuration: time.Second, RenewDeadline: 600 * time.Millisecond, RetryPeriod: 150 * time.Millisecond,
		Callbacks: election.GroupCallbacks{
			OnStartedLeading: func(ctx context.Context, lease string) {
				w.start(ctx, "pod-a", lease)
				<-ctx.Done()
				w.end("pod-a", lease)
			},
			OnStoppedLeading: func(name string) { stopped <- name },
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	waitGroup(t, 10*time.Second, "3 leases held (the cap)", func() (bool, string) {
		return len(g.Held()) == 3, fmt.Sprint(g.Held())
	})
	time.Sleep(500 * time.Millisecond)
	if n := len(g.Held()); n != 3 {
		t.Fatalf("holds %d leases with MaxLeases 3", n)
	}
	var removed string
	for name := range g.Held() {
		removed = name
		break
	}
	g.Remove(removed)
	select {
	case name := <-stopped:
		if name != removed {
			t.Fatalf("OnStoppedLeading(%q), want %q", name, removed)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("removed lease not stopped")
	}
	if st, _ := client.Exists(context.Background(), "elector:{"+removed+"}:lease").Result(); st != 0 {
		t.Fatalf("removed lease %s was not released", removed)
	}
	// Its place under the cap goes to another lease.
	waitGroup(t, 10*time.Second, "cap refilled", func() (bool, string) {
		h := g.Held()
		_, still := h[removed]
		return len(h) == 3 && !still, fmt.Sprint(h)
	})
	if err := g.Add("f", "bad name"); err == nil {
		t.Fatal("Add accepted a name with a space")
	}
	for _, n := range election.GroupNames(g) {
		if n == removed {
			t.Fatalf("Names still lists removed %q", removed)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	if keys, _ := client.Keys(context.Background(), "elector:{*}:lease").Result(); len(keys) != 0 {
		t.Fatalf("leases left held after Run returned: %v", keys)
	}
	if n, _ := client.ZCard(context.Background(), "elector:{jobs}:members").Result(); n != 0 {
		t.Fatalf("membership not left: %d members", n)
	}
}
