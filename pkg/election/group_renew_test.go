package election_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// groupCalls counts the acquire, renew and renew_many calls a client sends, in any form
// (FCALL, EVALSHA, EVAL), its GET commands ("get"), and the most keys of one renew_many call.
type groupCalls struct {
	bySHA map[string]string // script SHA1 -> name
	mu    sync.Mutex
	n     map[string]int
	most  int
}

func newGroupCalls(t *testing.T) *groupCalls {
	t.Helper()
	r := &groupCalls{bySHA: map[string]string{}, n: map[string]int{}}
	for _, name := range []string{"acquire", "renew", "renew_many"} {
		src, err := os.ReadFile("../lease/scripts/" + name + ".lua")
		if err != nil {
			t.Fatal(err)
		}
		sum := sha1.Sum(src)
		r.bySHA[hex.EncodeToString(sum[:])] = name
		r.bySHA[string(src)] = name
	}
	return r
}

func (r *groupCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *groupCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(cmd)
		return next(ctx, cmd)
	}
}
func (r *groupCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			r.record(cmd)
		}
		return next(ctx, cmds)
	}
}

func (r *groupCalls) record(cmd redis.Cmder) {
	args := cmd.Args()
	if cmd.Name() == "get" {
		r.mu.Lock()
		r.n["get"]++
		r.mu.Unlock()
		return
	}
	if len(args) < 3 {
		return
	}
	var name string
	switch cmd.Name() {
	case "fcall":
		name = strings.TrimPrefix(fmt.Sprint(args[1]), lualib.FunctionName(""))
	case "evalsha", "eval":
		name = r.bySHA[fmt.Sprint(args[1])]
	}
	if name != "acquire" && name != "renew" && name != "renew_many" {
		return
	}
	keys, _ := args[2].(int)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[name]++
	if name == "renew_many" {
		r.most = max(r.most, keys)
	}
}

// count returns how many calls of script name were counted since the last take.
func (r *groupCalls) count(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[name]
}

// take returns the calls counted since the last take, by script, and the most keys of one
// renew_many call.
func (r *groupCalls) take() (map[string]int, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n, most := r.n, r.most
	r.n, r.most = map[string]int{}, 0
	return n, most
}

// shardNames returns the k lease names shard-0000, shard-0001, ...
func shardNames(k int) []string {
	names := make([]string, k)
	for i := range names {
		names[i] = fmt.Sprintf("shard-%04d", i)
	}
	return names
}

// runCountingGroup runs a Group of the leases names on client, identity pod-a, with spread
// timing, until the test ends; it returns the Group once it holds them all.
func runCountingGroup(t *testing.T, client redis.UniversalClient, names []string) *election.Group {
	t.Helper()
	k := len(names)
	w := &work{running: map[string]liveWork{}}
	g, err := election.NewGroup(election.GroupConfig{
		Client: client, Group: "shards", Identity: "pod-a", Leases: names,
		LeaseDuration: spreadLease, RenewDeadline: spreadRenew, RetryPeriod: spreadRetry,
		Callbacks: election.GroupCallbacks{
			OnStartedLeading: func(ctx context.Context, lease string) {
				w.start(ctx, "pod-a", lease)
				<-ctx.Done()
				w.end("pod-a", lease)
			},
			OnStoppedLeading: func(string) {},
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
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	waitGroup(t, 30*time.Second, fmt.Sprintf("all %d leases held", k), func() (bool, string) {
		n := len(g.Held())
		return n == k, fmt.Sprintf("%d held", n)
	})
	return g
}

// keepsTerms waits until calls has counted calls of script (a condition, not a time: a
// loaded machine renews late) and checks that g kept every term it held (no lease was lost
// and won again) and that the renewals went on: every lease key expires later than its last
// renewal's LeaseDuration would allow had they stopped.
func keepsTerms(t *testing.T, client redis.UniversalClient, g *election.Group, calls *groupCalls, script string, want int) {
	t.Helper()
	before := g.Held()
	waitGroup(t, 30*time.Second, fmt.Sprintf("%d %s calls", want, script), func() (bool, string) {
		n := calls.count(script)
		return n >= want, fmt.Sprintf("%d sent", n)
	})
	after := g.Held()
	for name, token := range before {
		if after[name] != token {
			t.Errorf("lease %s: token %d, then %d: the term did not last", name, token, after[name])
		}
	}
	ctx := context.Background()
	least := time.Duration(-1)
	for name := range after {
		pttl, err := client.PTTL(ctx, "elector:{"+name+"}:lease").Result()
		if err != nil {
			t.Fatal(err)
		}
		if least < 0 || pttl < least {
			least = pttl
		}
	}
	if floor := spreadLease - spreadRenew; least < floor {
		t.Errorf("a lease key expires in %v, below %v: its renewals stopped", least, floor)
	}
}

// TestGroupRenewsManyLeasesPerCall: on a standalone client the Group renews its leases with
// renew_many, at most RenewManyChunk per call, never with one renew call per lease, and the
// terms last.
func TestGroupRenewsManyLeasesPerCall(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	calls := newGroupCalls(t)
	client.AddHook(calls)
	k := election.RenewManyChunk + 76 // two calls per renewal
	g := runCountingGroup(t, client, shardNames(k))
	calls.take()
	keepsTerms(t, client, g, calls, "renew_many", 2*3) // 3 renewals of 2 calls each
	n, most := calls.take()
	if n["renew"] != 0 || most != election.RenewManyChunk {
		t.Errorf("the Group sent %v, at most %d leases in one renew_many; want no renew, renew_many calls of at most %d leases",
			n, most, election.RenewManyChunk)
	}
	t.Logf("in 3 renewals: %v", n)
}

// TestGroupRenewsPerSlotInCluster: on a Redis Cluster client the Group renews the leases of
// one hash slot together, in one renew_many call (one script call may touch only one slot's
// keys), never with one renew call per lease, and the terms last: 20 slots of 3 leases each
// take 20 calls per renewal, each of 3 keys.
func TestGroupRenewsPerSlotInCluster(t *testing.T) {
	client := redistest.StartCluster(t, 3).Client(t)
	calls := newGroupCalls(t)
	client.AddHook(calls)
	const slots, perSlot = 20, 3
	bySlot := map[int][]string{}
	var names []string
	for i := 0; len(names) < slots*perSlot; i++ {
		name := fmt.Sprintf("shard-%06d", i)
		slot := leasewire.LeaseSlot(name)
		if len(bySlot) == slots && bySlot[slot] == nil || len(bySlot[slot]) == perSlot {
			continue
		}
		if bySlot[slot] = append(bySlot[slot], name); len(bySlot[slot]) == perSlot {
			names = append(names, bySlot[slot]...)
		}
	}
	g := runCountingGroup(t, client, names)
	calls.take()
	keepsTerms(t, client, g, calls, "renew_many", 3*slots) // 3 renewals of 20 calls each
	n, most := calls.take()
	if n["renew"] != 0 || most != perSlot {
		t.Errorf("the Group sent %v, at most %d leases in one renew_many; want no renew, renew_many calls of %d leases (one slot's)",
			n, most, perSlot)
	}
	t.Logf("in 3 renewals: %v", n)
}

// TestGroupReadsBeforeItAttempts: an attempt on a lease that another process holds is a read
// (GET, PTTL), not an acquire call; once that holder released the leases, the Group's
// attempts go on to the acquire script and win them all.
func TestGroupReadsBeforeItAttempts(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	client := srv.Client(t)
	calls := newGroupCalls(t)
	client.AddHook(calls)
	const k = 20
	names := make([]string, k)
	theirs := make([]*leasekit.Lease, k)
	terms := make([]lease.Record, k)
	for i := range names {
		names[i] = fmt.Sprintf("shard-%04d", i)
		l, err := leasekit.New(admin, names[i], lease.Options{Identity: "pod-x"})
		if err != nil {
			t.Fatal(err)
		}
		ok, st, err := l.Acquire(ctx, time.Minute)
		if !ok || err != nil {
			t.Fatalf("acquire %s: %v %v", names[i], ok, err)
		}
		theirs[i], terms[i] = l, st.Record
	}
	g, err := election.NewGroup(election.GroupConfig{
		Client: client, Group: "shards", Identity: "pod-a", Leases: names,
		LeaseDuration: spreadLease, RenewDeadline: spreadRenew, RetryPeriod: spreadRetry,
		Callbacks: election.GroupCallbacks{
			OnStartedLeading: func(ctx context.Context, _ string) { <-ctx.Done() },
			OnStoppedLeading: func(string) {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- g.Run(runCtx) }()
	defer func() {
		cancel()
		<-done
	}()
	waitGroup(t, 30*time.Second, fmt.Sprintf("%d reads", k), func() (bool, string) {
		n := calls.count("get")
		return n >= k, fmt.Sprintf("%d GETs", n)
	})
	if n := calls.count("acquire"); n != 0 || len(g.Held()) != 0 {
		t.Fatalf("%d acquire calls, %d held, on leases held elsewhere for a minute; want none", n, len(g.Held()))
	}
	for i, l := range theirs {
		if ok, err := l.Release(ctx, terms[i]); !ok || err != nil {
			t.Fatalf("release %s: %v %v", names[i], ok, err)
		}
	}
	waitGroup(t, 30*time.Second, fmt.Sprintf("all %d leases held", k), func() (bool, string) {
		n := len(g.Held())
		return n == k, fmt.Sprintf("%d held", n)
	})
	if n := calls.count("acquire"); n < k {
		t.Errorf("%d leases won with %d acquire calls", k, n)
	}
}
