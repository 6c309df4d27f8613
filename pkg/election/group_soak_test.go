package election_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
)

// TestGroupSoak runs 3 Groups of 200 leases against one real Redis while a seeded random
// schedule removes and adds leases, makes callbacks slow (and sometimes panic, or return
// early), pauses Redis (SIGSTOP) and stalls or slows each replica's path. It checks that no
// lease ever had two replicas' ctx live at once (no strict overlap), that each lease's
// callbacks come in order per replica, and that fencing tokens strictly increase per lease.
//
//	ELECTOR_GROUP_SOAK_SEED=N      replay a schedule (the seed is logged, and repeated on failure)
//	ELECTOR_GROUP_SOAK_DURATION=D  how long the chaos lasts (default 20s; 5s with -short)
func TestGroupSoak(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("ELECTOR_GROUP_SOAK_SEED"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("ELECTOR_GROUP_SOAK_SEED=%q: want an integer", s)
		}
		seed = n
	}
	dur := 20 * time.Second
	if testing.Short() {
		dur = 5 * time.Second
	}
	if s := os.Getenv("ELECTOR_GROUP_SOAK_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("ELECTOR_GROUP_SOAK_DURATION=%q: want a positive duration such as 30s", s)
		}
		dur = d
	}
	t.Logf("seed %d, chaos for %v (replay: ELECTOR_GROUP_SOAK_SEED=%d)", seed, dur, seed)
	defer func() {
		if t.Failed() {
			t.Logf("FAILED with seed %d: replay with ELECTOR_GROUP_SOAK_SEED=%d ELECTOR_GROUP_SOAK_DURATION=%v", seed, seed, dur)
		}
	}()
	rng := rand.New(rand.NewPCG(uint64(seed), 0x9e3779b97f4a7c15))
	var rngMu sync.Mutex
	roll := func(f func(r *rand.Rand) int) int {
		rngMu.Lock()
		defer rngMu.Unlock()
		return f(rng)
	}
	ms := func(lo, hi int) time.Duration {
		return time.Duration(roll(func(r *rand.Rand) int { return lo + r.IntN(hi-lo+1) })) * time.Millisecond
	}
	chance := func(pct int) bool { return roll(func(r *rand.Rand) int { return r.IntN(100) }) < pct }

	const k, replicas = 200, 3
	const lease, renew, retry = time.Second, 600 * time.Millisecond, 150 * time.Millisecond
	srv := redistest.Start(t)
	names := make([]string, k)
	for i := range names {
		names[i] = fmt.Sprintf("soak-%03d", i)
	}
	iv := newIntervals()
	var panics, early, slow atomic.Int64
	type rep struct {
		name    string
		g       *election.Group
		proxy   *faultproxy.Proxy
		removed map[string]bool
	}
	var reps []*rep
	for i := 0; i < replicas; i++ {
		who := fmt.Sprintf("pod-%d", i)
		proxy := faultproxy.Start(t, srv.Addr())
		client := proxiedClient(t, proxy.Addr(), renew/2, "", "")
		g, err := election.NewGroup(election.GroupConfig{
			Client: client, Group: "soak", Identity: who, Leases: names,
			LeaseDuration: lease, RenewDeadline: renew, RetryPeriod: retry,
			Callbacks: election.GroupCallbacks{
				OnStartedLeading: func(ctx context.Context, name string) {
					token := election.TokenFrom(ctx)
					iv.start(ctx, who, name, token)
					go func() { <-ctx.Done(); iv.cancelled(who, name, token) }()
					defer iv.returned(who, name)
					switch {
					case chance(2):
						panics.Add(1)
						panic("soak: a panicking OnStartedLeading")
					case chance(10):
						early.Add(1)
						time.Sleep(ms(0, 300)) // the work ends by itself; the lease is kept
						return
					}
					<-ctx.Done()
					if chance(10) {
						time.Sleep(ms(0, 200)) // winds down slowly: renewed meanwhile
					}
				},
				OnStoppedLeading: func(name string) {
					iv.stopped(who, name)
					if chance(1) {
						panics.Add(1)
						panic("soak: a panicking OnStoppedLeading")
					}
					if chance(15) {
						slow.Add(1)
						time.Sleep(ms(100, 1500))
					}
				},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s: Run = %v", who, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("%s: Run did not return within 30s of its ctx being cancelled", who)
			}
		})
		reps = append(reps, &rep{name: who, g: g, proxy: proxy, removed: map[string]bool{}})
	}

	var actions = map[string]int{}
	start := time.Now()
	for time.Since(start) < dur {
		time.Sleep(ms(20, 250))
		r := reps[roll(func(x *rand.Rand) int { return x.IntN(replicas) })]
		switch p := roll(func(x *rand.Rand) int { return x.IntN(100) }); {
		case p < 30:
			n := roll(func(x *rand.Rand) int { return 1 + x.IntN(10) })
			var rm []string
			for j := 0; j < n; j++ {
				name := names[roll(func(x *rand.Rand) int { return x.IntN(k) })]
				r.removed[name] = true
				rm = append(rm, name)
			}
			r.g.Remove(rm...)
			actions["remove"]++
		case p < 60:
			var add []string
			for name := range r.removed {
				if chance(60) {
					add = append(add, name)
					delete(r.removed, name)
				}
			}
			if err := r.g.Add(add...); err != nil {
				t.Fatal(err)
			}
			actions["add"]++
		case p < 70:
			srv.Pause()
			time.Sleep(ms(50, 900))
			srv.Resume()
			actions["redis SIGSTOP"]++
		case p < 85:
			r.proxy.Blackhole(true)
			time.Sleep(ms(50, 1200))
			r.proxy.Blackhole(false)
			actions["path stalled"]++
		default:
			r.proxy.SetLatency(ms(10, 150))
			time.Sleep(ms(100, 1000))
			r.proxy.SetLatency(0)
			actions["path slowed"]++
		}
	}
	// Heal, put every lease back and let the group settle before stopping.
	for _, r := range reps {
		var add []string
		for name := range r.removed {
			add = append(add, name)
		}
		if err := r.g.Add(add...); err != nil {
			t.Fatal(err)
		}
	}
	settled := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		total := 0
		for _, r := range reps {
			total += len(r.g.Held())
		}
		if total == k {
			settled = true
			break
		}
	}
	if !settled {
		t.Errorf("leases not all held again within 20s after the chaos")
	}
	iv.check(t)
	t.Logf("chaos: %v; callbacks: %d panics, %d early returns, %d slow OnStoppedLeading", actions, panics.Load(), early.Load(), slow.Load())
	iv.mu.Lock() // the Groups still run until the cleanup: their callbacks write iv
	terms := iv.terms
	iv.mu.Unlock()
	if terms < k {
		t.Errorf("only %d terms started for %d leases: the soak did not exercise anything", terms, k)
	}
}
