package bench

import (
	"context"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/bench/internal/redisproc"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
)

// TestCandidateCalls measures the Redis calls per replica per lease period of an idle election
// (issue 46: the candidate registry must stay O(1) calls per replica per period): 3 Electors,
// each on a client of its own, run for ELECTOR_BENCH_PERIODS lease durations (10 by default)
// after one of warm-up, at the defaults' proportions scaled down (LeaseDuration 1.5s,
// RenewDeadline 1s, RetryPeriod 200ms: 15s/10s/2s ÷ 10). MONITOR counts the commands that
// crossed the network by connection (a script's own commands are not counted), CLIENT LIST
// names the replica of each connection, and the script calls on the registry key are counted
// apart. It uses only the public API, so the same file measures a tree before the registry
// (there the registry's column is 0). Run: cd bench && go test -count=1 -v -run TestCandidateCalls .
func TestCandidateCalls(t *testing.T) {
	periods := 10
	if n, err := strconv.Atoi(os.Getenv("ELECTOR_BENCH_PERIODS")); err == nil && n > 0 {
		periods = n
	}
	const ld, rd, rp = 1500 * time.Millisecond, time.Second, 200 * time.Millisecond
	srv := redistest.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const name = "calls"
	ids := []string{"r0", "r1", "r2"}
	var wg sync.WaitGroup
	electors := map[string]*election.Elector{}
	for _, id := range ids {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true,
			OnConnect: func(ctx context.Context, cn *redis.Conn) error { return cn.ClientSetName(ctx, id).Err() }})
		t.Cleanup(func() { _ = c.Close() })
		e, err := election.New(election.Config{Client: c, LeaseName: name, Identity: id,
			LeaseDuration: ld, RenewDeadline: rd, RetryPeriod: rp,
			Callbacks: election.Callbacks{OnStartedLeading: func(ctx context.Context) { <-ctx.Done() }}})
		if err != nil {
			t.Fatal(err)
		}
		electors[id] = e
		wg.Add(1)
		go func() { defer wg.Done(); _ = e.Run(ctx) }()
	}
	time.Sleep(ld) // warm-up: a leader, followers asleep on the events channel
	mon, err := redisproc.StartMonitor(srv.Addr(), func(c redisproc.Call) callKey {
		script := c.Name == "evalsha" || c.Name == "eval" || c.Name == "fcall"
		return callKey{c.From, c.Name, script && strings.Contains(c.Args, ":candidates\"")}
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Duration(periods) * ld)
	counts := mon.Take()
	_ = mon.Close()
	admin := srv.Client(t)
	list, err := admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{} // addr → client name
	for _, line := range strings.Split(list, "\n") {
		var addr, cname string
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "addr="); ok {
				addr = v
			}
			if v, ok := strings.CutPrefix(f, "name="); ok {
				cname = v
			}
		}
		names[addr] = cname
	}
	type tally struct{ all, registry int64 }
	per := map[string]*tally{}
	cmds := map[string]map[string]int64{}
	for k, n := range counts {
		id := names[k.addr]
		if id == "" {
			id = "?" + k.addr // a connection closed before CLIENT LIST
		}
		if per[id] == nil {
			per[id], cmds[id] = &tally{}, map[string]int64{}
		}
		per[id].all += n
		cmds[id][k.cmd] += n
		if k.registry {
			per[id].registry += n
		}
	}
	leader := ""
	for id, e := range electors {
		if e.IsLeader() {
			leader = id
		}
	}
	cancel()
	wg.Wait()
	keys := make([]string, 0, len(per))
	for id := range per {
		keys = append(keys, id)
	}
	sort.Strings(keys)
	var total, registry int64
	for _, id := range keys {
		role := "follower"
		if id == leader {
			role = "leader"
		}
		p := per[id]
		total, registry = total+p.all, registry+p.registry
		t.Logf("%s (%s): %.2f calls per lease period (%d in %d periods), of which the candidate registry %.2f; by command %v",
			id, role, float64(p.all)/float64(periods), p.all, periods, float64(p.registry)/float64(periods), cmds[id])
	}
	n := float64(periods * len(ids))
	t.Logf("per replica per lease period (LeaseDuration %v, RetryPeriod %v): %.2f calls, of which the candidate registry %.2f (without it: %.2f)",
		ld, rp, float64(total)/n, float64(registry)/n, float64(total-registry)/n)
	// The registry's heartbeat is one call per LeaseDuration/3: about 3 per period per
	// replica; more would be a loop gone wrong.
	if r := float64(registry) / n; r > 3.5 {
		t.Errorf("the candidate registry costs %.2f calls per replica per lease period; want about 3 (one per LeaseDuration/3)", r)
	}
}

// callKey is what callMonitor counts by: the client's address, the command, and whether it
// is a script call on the candidate registry's key.
type callKey struct {
	addr, cmd string
	registry  bool
}
