package reliability

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/testing/redistest"
)

// replicationWindow bounds, generously for loopback, how long after a write a master can die and
// take the write with it (Redis replicates asynchronously). An overlap of two terms is excused
// only when the earlier term began less than this before the master was killed.
const replicationWindow = time.Second

// sentinelClient returns a Sentinel-mode client for s built by internal/redisclient.
func sentinelClient(t testing.TB, s *redistest.Sentinel, tm timing) redis.UniversalClient {
	t.Helper()
	return newClient(t, redisclient.Config{
		Mode:           redisclient.ModeSentinel,
		Addrs:          s.SentinelAddrs(),
		SentinelMaster: s.MasterName,
	}, tm)
}

// currentMaster returns the address of the master the sentinels agree on.
func currentMaster(t testing.TB, s *redistest.Sentinel) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr, err := s.CurrentMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// waitNewMaster waits until every running sentinel names a master other than old and that
// server reports role master. It returns the new master and when it was seen.
func waitNewMaster(t testing.TB, s *redistest.Sentinel, old string, within time.Duration) (string, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last string
	for {
		addrs := map[string]bool{}
		for _, sn := range s.Sentinels {
			if sn.PID() == 0 {
				continue
			}
			c := redis.NewSentinelClient(sn.Options())
			a, err := c.GetMasterAddrByName(ctx, s.MasterName).Result()
			_ = c.Close()
			if err == nil && len(a) == 2 {
				addrs[net.JoinHostPort(a[0], a[1])] = true
			} else {
				addrs[fmt.Sprintf("error: %v", err)] = true
			}
		}
		if len(addrs) == 1 {
			for a := range addrs {
				last = a
			}
			if last != old && roleOf(ctx, s.ServerAt(last)) == "master" {
				return last, time.Now()
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no failover away from %s within %v; sentinels say %v", old, within, addrs)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// roleOf returns the first element of ROLE of srv, "" when it cannot be asked.
func roleOf(ctx context.Context, srv *redistest.Server) string {
	if srv == nil || srv.PID() == 0 {
		return ""
	}
	c := redis.NewClient(srv.Options())
	defer c.Close()
	role, err := c.Do(ctx, "ROLE").Slice()
	if err != nil || len(role) == 0 {
		return ""
	}
	s, _ := role[0].(string)
	return s
}

// waitHealthyReplicas waits until the current master has n replicas online and every running
// sentinel sees n healthy replicas of it, so that the next failover has a replica to promote. It
// returns the master, which is not always the one of the last failover: a sentinel may fail over
// a second time when the new master is slow to answer its first pings.
func waitHealthyReplicas(t testing.TB, s *redistest.Sentinel, n int, within time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		master, why := healthyReplicas(ctx, s, n)
		if why == "" {
			return master
		}
		select {
		case <-ctx.Done():
			t.Fatalf("replicas not healthy within %v: %s", within, why)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// healthyReplicas checks what waitHealthyReplicas waits for and says why it does not hold yet.
func healthyReplicas(ctx context.Context, s *redistest.Sentinel, n int) (master, why string) {
	master, err := s.CurrentMaster(ctx)
	if err != nil {
		return "", err.Error()
	}
	srv := s.ServerAt(master)
	if srv == nil {
		return master, fmt.Sprintf("master %s is not a server of the test", master)
	}
	mc := redis.NewClient(srv.Options())
	info, err := mc.Info(ctx, "replication").Result()
	_ = mc.Close()
	if online := strings.Count(info, ",state=online,"); err != nil || online < n {
		return master, fmt.Sprintf("master %s: %d of %d replicas online (%v)", master, online, n, err)
	}
	for _, sn := range s.Sentinels {
		if sn.PID() == 0 {
			continue
		}
		c := redis.NewSentinelClient(sn.Options())
		reps, err := c.Replicas(ctx, s.MasterName).Result()
		_ = c.Close()
		healthy := 0
		for _, r := range reps {
			if r["flags"] == "slave" && r["master-link-status"] == "ok" && net.JoinHostPort(r["master-host"], r["master-port"]) == master {
				healthy++
			}
		}
		if err != nil || healthy < n {
			return master, fmt.Sprintf("sentinel %s sees %d of %d healthy replicas of %s (%v)", sn.Addr(), healthy, n, master, err)
		}
	}
	return master, ""
}

// switches records when the sentinels announce a new master (+switch-master), including
// failovers the test did not cause.
type switches struct {
	mu    sync.Mutex
	times []time.Time
	ps    *redis.PubSub
	done  chan struct{}
}

// watchSwitches subscribes to +switch-master on the first sentinel until the end of the test.
func watchSwitches(t testing.TB, s *redistest.Sentinel) *switches {
	t.Helper()
	c := redis.NewSentinelClient(s.Sentinels[0].Options())
	ctx := context.Background()
	ps := c.Subscribe(ctx, "+switch-master")
	if _, err := ps.Receive(ctx); err != nil {
		t.Fatalf("subscribe to +switch-master: %v", err)
	}
	sw := &switches{ps: ps, done: make(chan struct{})}
	go func() {
		defer close(sw.done)
		for range ps.Channel() {
			sw.mu.Lock()
			sw.times = append(sw.times, time.Now())
			sw.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ps.Close()
		<-sw.done
		_ = c.Close()
	})
	return sw
}

func (sw *switches) snapshot() []time.Time {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return slices.Clone(sw.times)
}

// rejoin restarts a killed server (empty, as after a crash without persistence) as a replica of
// master, the way a restarted pod would be configured. Sentinel would convert a returning old
// master by itself, but only 8 seconds after it came back.
func rejoin(t testing.TB, srv *redistest.Server, master string) {
	t.Helper()
	srv.Restart()
	prepare(t, srv)
	host, port, err := net.SplitHostPort(master)
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(srv.Options())
	defer c.Close()
	if err := c.ReplicaOf(context.Background(), host, port).Err(); err != nil {
		t.Fatalf("REPLICAOF %s on %s: %v", master, srv.Addr(), err)
	}
}

// Electors on Sentinel failover clients keep one leader at a time through failovers: the
// master is killed (once right after a handover, so that the newest term is milliseconds old),
// a replica is promoted, leadership resumes on it and fencing tokens keep increasing.
func TestSentinelFailoverKeepsOneLeader(t *testing.T) {
	s := redistest.StartSentinel(t, "elector", 2, 3)
	for _, srv := range append([]*redistest.Server{s.Master}, s.Replicas...) {
		prepare(t, srv)
	}
	sw := watchSwitches(t, s)
	tm := timing{lease: 4 * time.Second, renew: 3 * time.Second, retry: 200 * time.Millisecond}
	led := &ledger{}
	var reps []*replica
	for i := range 3 {
		reps = append(reps, startElector(t, sentinelClient(t, s, tm), "failover", fmt.Sprintf("pod-%d", i), tm, led))
	}
	leader := waitLeader(t, reps, time.Time{}, 30*time.Second)

	var kills []time.Time
	for round := range rounds(2, 10) {
		if round%2 == 1 {
			before := len(led.snapshot())
			leader.stop()
			leader.start()
			deadline := time.Now().Add(10 * time.Second)
			for len(led.snapshot()) == before {
				if time.Now().After(deadline) {
					t.Fatalf("no new term within 10s of a graceful handover; terms:\n%s", led)
				}
				time.Sleep(time.Millisecond)
			}
		}
		old := currentMaster(t, s)
		srv := s.ServerAt(old)
		kill := time.Now()
		srv.Stop()
		kills = append(kills, kill)
		promoted, at := waitNewMaster(t, s, old, 60*time.Second)
		next := waitLeader(t, reps, at, 30*time.Second)
		t.Logf("failover %d: master %s killed, %s promoted after %v; %s leads (before: %s), renewing %v after the promotion",
			round+1, old, promoted, at.Sub(kill).Round(time.Millisecond), next.name, leader.name, next.e.Status().LastRenew.Sub(at).Round(time.Millisecond))
		leader = next
		rejoin(t, srv, promoted)
		waitHealthyReplicas(t, s, 2, 60*time.Second)
	}
	for _, r := range reps {
		r.stop()
	}
	failovers := sw.snapshot()
	terms, excused := led.check(t, func(a, b work) string {
		return replicationExcuse(a, b, kills, failovers)
	})
	t.Logf("%d masters killed, %d failovers, %d terms, %d overlaps excused by the replication window", len(kills), len(failovers), terms, len(excused))
	for _, e := range excused {
		t.Log(e)
	}
}

// replicationExcuse explains an overlap of an earlier term a and a later term b by asynchronous
// replication: a began within replicationWindow of a master being killed or of a failover (its
// acquisition may not have reached the promoted replica), and b began after that event.
func replicationExcuse(a, b work, events ...[]time.Time) string {
	for _, evs := range events {
		for _, ev := range evs {
			d := ev.Sub(a.start)
			if d > -replicationWindow && d < replicationWindow && b.start.After(ev) {
				return fmt.Sprintf("the earlier term began %v before a master was killed or replaced", d)
			}
		}
	}
	return ""
}
