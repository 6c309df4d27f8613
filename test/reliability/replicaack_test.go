package reliability

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// startWithReplicas starts a master and n replicas of it. With linkDelay > 0 every replica
// reaches the master through a fault proxy that delays each direction by linkDelay, like a
// replica in another zone. It waits until the replicas are online.
func startWithReplicas(t *testing.T, n int, linkDelay time.Duration) *redistest.Server {
	t.Helper()
	master := redistest.Start(t, "--repl-diskless-sync-delay", "0")
	for range n {
		port := master.Port()
		if linkDelay > 0 {
			p := faultproxy.Start(t, master.Addr())
			p.SetLatency(linkDelay)
			_, ps, _ := strings.Cut(p.Addr(), ":")
			port, _ = strconv.Atoi(ps)
		}
		redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(port))
	}
	c := master.Client(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Count(info, ",state=online,") == n {
			return master
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d replicas of %s not online after 30s: %v\n%s", n, master.Addr(), err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// What replica acknowledgement costs: the latency of acquisitions and renewals with and without
// WAIT 1, with replicas on loopback and behind a 1ms one-way link. An acknowledged write cannot
// take less than the replica's round trip, which the test checks; the figures are logged (run
// without -race for the numbers in docs/RELIABILITY.md).
func TestReplicaAckLatency(t *testing.T) {
	const linkDelay = time.Millisecond
	calls := rounds(200, 2000)
	for _, setup := range []struct {
		name  string
		delay time.Duration
	}{{"loopback", 0}, {"replica-link-1ms", linkDelay}} {
		t.Run(setup.name, func(t *testing.T) {
			master := startWithReplicas(t, 2, setup.delay)
			c := redis.NewClient(master.Options())
			t.Cleanup(func() { _ = c.Close() })
			for _, mode := range []struct {
				name string
				ack  lease.ReplicaAck
			}{
				{"no-ack", lease.ReplicaAck{}},
				{"ack-1", lease.ReplicaAck{Replicas: 1, Timeout: time.Second}},
				{"ack-2", lease.ReplicaAck{Replicas: 2, Timeout: time.Second}},
			} {
				acq, ren := measureLatency(t, c, mode.ack, calls)
				t.Logf("%s %s: acquire p50 %v p99 %v; renew p50 %v p99 %v (%d calls each)", setup.name, mode.name,
					percentile(acq, 0.5).Round(time.Microsecond), percentile(acq, 0.99).Round(time.Microsecond),
					percentile(ren, 0.5).Round(time.Microsecond), percentile(ren, 0.99).Round(time.Microsecond), calls)
				if mode.ack.Replicas > 0 && setup.delay > 0 {
					for what, ds := range map[string][]time.Duration{"acquire": acq, "renew": ren} {
						if p := percentile(ds, 0); p < 2*setup.delay {
							t.Errorf("%s %s: fastest acknowledged %s took %v, less than the replica round trip %v: WAIT did not wait for the replica",
								setup.name, mode.name, what, p, 2*setup.delay)
						}
					}
				}
			}
		})
	}
}

// measureLatency times n acquisitions (each followed by a release) and n renewals.
func measureLatency(t *testing.T, c redis.UniversalClient, ack lease.ReplicaAck, n int) (acquire, renew []time.Duration) {
	t.Helper()
	ctx := context.Background()
	l, err := lease.New(c, "latency", lease.Options{Identity: "pod-a", ReplicaAck: ack})
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		start := time.Now()
		ok, st, err := l.Acquire(ctx, 10*time.Second)
		acquire = append(acquire, time.Since(start))
		if err != nil || !ok {
			t.Fatalf("Acquire(%+v) = %v, %v", ack, ok, err)
		}
		if ok, err := l.Release(ctx, st.Record); err != nil || !ok {
			t.Fatalf("Release = %v, %v", ok, err)
		}
	}
	ok, st, err := l.Acquire(ctx, 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	for range n {
		start := time.Now()
		ok, err := l.Renew(ctx, st.Record, 10*time.Second)
		renew = append(renew, time.Since(start))
		if err != nil || !ok {
			t.Fatalf("Renew(%+v) = %v, %v", ack, ok, err)
		}
	}
	if _, err := l.Release(ctx, st.Record); err != nil {
		t.Fatal(err)
	}
	return acquire, renew
}
