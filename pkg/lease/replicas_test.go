package lease_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/internal/testing/wakeprobe"
	"github.com/elector/elector/pkg/lease"
)

// startReplicated starts a master and one replica of it and waits until the replica is in sync.
func startReplicated(t *testing.T) (master, replica *redistest.Server) {
	t.Helper()
	master = redistest.Start(t, "--repl-diskless-sync-delay", "0")
	replica = redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	c := master.Client(t)
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := c.Info(context.Background(), "replication").Result()
		if err == nil && strings.Contains(info, ",state=online,") {
			return master, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica of %s not online after 30s: %v\n%s", master.Addr(), err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestReplicatedWritesWaitForTheReplica(t *testing.T) {
	ctx := context.Background()
	master, replica := startReplicated(t)
	c := master.Client(t)
	rc := replica.Client(t)
	ack := lease.ReplicaAck{Replicas: 1, Timeout: 5 * time.Second}

	a := ackLease(t, c, "job", "pod-a", "", ack)
	ok, st, err := a.Acquire(ctx, 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("Acquire = %v, %+v, %v; want acquired", ok, st, err)
	}
	term := st.Record
	// The acknowledgement means the replica has applied the write: no polling needed.
	if got, err := rc.Get(ctx, a.Keys().Lease).Result(); err != nil || got != term.String() {
		t.Fatalf("replica holds %q, %v right after the acknowledged acquire; want %q", got, err, term.String())
	}
	if ok, err := a.Renew(ctx, term, 30*time.Second); err != nil || !ok {
		t.Fatalf("Renew = %v, %v", ok, err)
	}
	if pttl := rc.PTTL(ctx, a.Keys().Lease).Val(); pttl <= 29*time.Second {
		t.Fatalf("replica PTTL right after the acknowledged renew = %v, want > 29s", pttl)
	}

	// More replicas than exist: the write stands on the master, the error says 1 of 2.
	_, err = ackLease(t, c, "job", "pod-a", a.Instance(), lease.ReplicaAck{Replicas: 2, Timeout: 50 * time.Millisecond}).Renew(ctx, term, 30*time.Second)
	var nr *lease.NotReplicatedError
	if !errors.As(err, &nr) || nr.Acked != 1 || nr.Wanted != 2 || !errors.Is(err, lease.ErrNotReplicated) {
		t.Fatalf("Renew asking for 2 of 1 replicas: err = %v, want a NotReplicatedError 1 of 2", err)
	}

	// A contender's failed attempt writes nothing, so it does not wait for the replicas even when
	// they cannot answer.
	replica.Pause()
	defer replica.Resume()
	b := ackLease(t, c, "job", "pod-b", "", ack)
	probe := wakeprobe.Start(t)
	start := time.Now()
	ok, st, err = b.Acquire(ctx, 10*time.Second)
	took := time.Since(start)
	if err != nil || ok || st.Record != term {
		t.Fatalf("contender Acquire = %v, %+v, %v; want held by %+v", ok, st, err, term)
	}
	// One waiting for the replicas takes ack.Timeout; the same run's control bounds the rest.
	if control := probe.Stop(); took >= wakeprobe.Limit(control, ack.Timeout) {
		t.Errorf("a contender's attempt took %v (probe lag %v, replica timeout %v): it waited for replicas although it wrote nothing", took, control, ack.Timeout)
	}
	if ok, err := b.Renew(ctx, lease.Record{Token: term.Token, Instance: b.Instance(), Identity: "pod-b"}, time.Second); err != nil || ok {
		t.Fatalf("non-owner Renew = %v, %v; want false, nil", ok, err)
	}
}

// WAIT counts the replicas that acknowledged the replication offset at the last command of its
// own connection. A WAIT sent on another, idle connection of the pool would count acknowledgements
// of an older offset and could succeed although the write is not replicated. This test leaves
// idle connections in the pool whose offsets the replica has acknowledged, stops the replica, and
// checks that the write is reported as unacknowledged: only a WAIT on the script's own connection
// does that.
func TestReplicatedWriteIsNotConfirmedWhileTheReplicaIsStopped(t *testing.T) {
	ctx := context.Background()
	master, replica := startReplicated(t)
	c := master.Client(t)
	ack := lease.ReplicaAck{Replicas: 1, Timeout: 300 * time.Millisecond}

	var idle []*redis.Conn
	for range 8 {
		conn := c.Conn()
		if err := conn.Ping(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		idle = append(idle, conn)
	}
	// A write and its WAIT on one connection: the replica has acknowledged every offset so far.
	if err := idle[0].Set(ctx, "before", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := idle[0].Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica before the test = %d, %v", n, err)
	}
	for _, conn := range idle {
		conn.Close() // back to the pool, idle, with an offset the replica acknowledged
	}

	replica.Pause()
	resumed := false
	defer func() {
		if !resumed {
			replica.Resume()
		}
	}()
	a := ackLease(t, c, "job", "pod-a", "", ack)
	start := time.Now()
	ok, st, err := a.Acquire(ctx, 10*time.Second)
	took := time.Since(start)
	var nr *lease.NotReplicatedError
	if !ok || !errors.As(err, &nr) || nr.Acked != 0 || nr.Wanted != 1 {
		t.Fatalf("Acquire with the replica stopped = %v, %+v, %v; want acquired with a NotReplicatedError 0 of 1", ok, st, err)
	}
	if took < ack.Timeout {
		t.Errorf("Acquire returned after %v, before the WAIT timeout %v", took, ack.Timeout)
	}
	for _, want := range []string{`"job"`, "token " + strconv.FormatInt(st.Record.Token, 10), "0 of 1 replicas", "300ms"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	term := st.Record
	if ok, err := a.Renew(ctx, term, 10*time.Second); !ok || !errors.Is(err, lease.ErrNotReplicated) {
		t.Fatalf("Renew with the replica stopped = %v, %v; want true with ErrNotReplicated", ok, err)
	}

	// Once the replica is back, the same call confirms the same term: no new token.
	replica.Resume()
	resumed = true
	ok, st, err = ackLease(t, c, "job", "pod-a", a.Instance(), lease.ReplicaAck{Replicas: 1, Timeout: 10 * time.Second}).Acquire(ctx, 10*time.Second)
	if err != nil || !ok || st.Record != term {
		t.Fatalf("Acquire after the replica resumed = %v, %+v, %v; want the same term %+v", ok, st.Record, err, term)
	}
}

func TestReplicatedWritesLoadTheScripts(t *testing.T) {
	ctx := context.Background()
	master, _ := startReplicated(t)
	c := master.Client(t)
	ack := lease.ReplicaAck{Replicas: 1, Timeout: 5 * time.Second}
	a := ackLease(t, c, "job", "pod-a", "", ack)
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	ok, st, err := a.Acquire(ctx, 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("Acquire after SCRIPT FLUSH = %v, %v", ok, err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.Renew(ctx, st.Record, 10*time.Second); err != nil || !ok {
		t.Fatalf("Renew after SCRIPT FLUSH = %v, %v", ok, err)
	}
}

func TestReplicaAckValidation(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	for _, tc := range []struct {
		ack  lease.ReplicaAck
		want string
	}{
		{lease.ReplicaAck{Replicas: -1, Timeout: time.Second}, "Replicas must be 0 or more"},
		{lease.ReplicaAck{Replicas: 1}, "below the minimum of 1ms"},
		{lease.ReplicaAck{Replicas: 1, Timeout: -time.Second}, "below the minimum of 1ms"},
		{lease.ReplicaAck{Replicas: 1, Timeout: 1500 * time.Microsecond}, "whole number of milliseconds"},
	} {
		_, err := leasekit.New(c, "job", lease.Options{Identity: "pod-a", ReplicaAck: tc.ack})
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), `"job"`) {
			t.Errorf("New with %+v: err = %v, want it to name the lease and mention %q", tc.ack, err, tc.want)
		}
	}
	ack := lease.ReplicaAck{Replicas: 1, Timeout: 10 * time.Millisecond}
	a := ackLease(t, c, "job", "pod-a", "", ack)
	if _, _, err := a.Acquire(ctx, 0); err == nil || !strings.Contains(err.Error(), "ttl") {
		t.Errorf("Acquire with ttl 0: err = %v", err)
	}
	if _, _, err := ackLease(t, c, "job", "", "", ack).Acquire(ctx, time.Second); err == nil || !strings.Contains(err.Error(), "identity") {
		t.Errorf("Acquire without identity: err = %v", err)
	}

	// A Ring shards by key and has no single master to WAIT on.
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true})
	defer ring.Close()
	if _, _, err := ackLease(t, ring, "job", "pod-a", "", ack).Acquire(ctx, time.Second); err == nil || !strings.Contains(err.Error(), "*redis.Ring") {
		t.Errorf("Acquire through a Ring: err = %v, want it to name the client type", err)
	}

	// No replicas asked for: exactly Acquire and Renew, on a server without replicas.
	plain := ackLease(t, c, "job", "pod-a", a.Instance(), lease.ReplicaAck{})
	ok, st, err := plain.Acquire(ctx, time.Second)
	if err != nil || !ok {
		t.Fatalf("Acquire without replicas = %v, %v", ok, err)
	}
	if ok, err := plain.Renew(ctx, st.Record, time.Second); err != nil || !ok {
		t.Fatalf("Renew without replicas = %v, %v", ok, err)
	}
	// A server without replicas cannot acknowledge anything.
	if ok, err := a.Renew(ctx, st.Record, time.Second); !ok || !errors.Is(err, lease.ErrNotReplicated) {
		t.Fatalf("Renew on a server without replicas = %v, %v; want true, ErrNotReplicated", ok, err)
	}
}

// ackLease returns the lease name for identity, with ack; instance, when set, makes it another
// handle on the terms of a Lease with that instance id.
func ackLease(t testing.TB, c redis.UniversalClient, name, identity, instance string, ack lease.ReplicaAck) *leasekit.Lease {
	t.Helper()
	l, err := leasekit.NewWith(c, name, lease.Options{Identity: identity, ReplicaAck: ack}, leasekit.Ext{Instance: instance})
	if err != nil {
		t.Fatalf("lease.New: %v", err)
	}
	return l
}

// In Cluster the script and the WAIT go to the master of the lease's slot on one connection; a
// wrong node would answer MOVED. The cluster of redistest has no replicas, so every write is
// applied and reported as acknowledged by 0 replicas.
func TestReplicatedWritesInCluster(t *testing.T) {
	ctx := context.Background()
	cluster := redistest.StartCluster(t, 3)
	c := cluster.Client(t)
	ack := lease.ReplicaAck{Replicas: 1, Timeout: 20 * time.Millisecond}
	slots := map[int64]bool{}
	for _, name := range []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta"} {
		a := ackLease(t, c, name, "pod-a", "", ack)
		ok, st, err := a.Acquire(ctx, 10*time.Second)
		var nr *lease.NotReplicatedError
		if !ok || !errors.As(err, &nr) || nr.Acked != 0 {
			t.Fatalf("%s: Acquire = %v, %v; want acquired, 0 replicas acknowledged", name, ok, err)
		}
		if ok, err := a.Renew(ctx, st.Record, 10*time.Second); !ok || !errors.Is(err, lease.ErrNotReplicated) {
			t.Fatalf("%s: Renew = %v, %v", name, ok, err)
		}
		if got, err := a.Get(ctx); err != nil || got.Record != st.Record {
			t.Fatalf("%s: Get = %+v, %v; want %+v", name, got, err, st.Record)
		}
		slots[c.ClusterKeySlot(ctx, a.Keys().Lease).Val()] = true
	}
	if len(slots) < 2 {
		t.Fatalf("all names landed in one slot; the test does not cover several nodes")
	}
}
