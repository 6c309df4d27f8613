package reliability

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/redistest"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// holder keeps one lease the way package election does, with or without replica
// acknowledgement: it tries to acquire every RetryPeriod; once it holds the lease it counts its
// term from the send time of the winning acquire, renews every RetryPeriod, and stops trusting the
// term when a renew says the term is over or RenewDeadline has passed since the send time of the
// last successful renew. With replica acknowledgement, an acquire or renew that the replicas did
// not acknowledge counts as failed, which is what the patch proposed for package election does
// (see docs/RELIABILITY.md). The believed terms are recorded in a ledger.
type holder struct {
	who string
	l   *lease.Lease
	ack lease.ReplicaAck
	tm  timing
	led *ledger

	mu       sync.Mutex
	acquires []time.Duration // latency of successful acquisitions
	renews   []time.Duration // latency of successful renewals
}

// run holds the lease until ctx is cancelled.
func (h *holder) run(ctx context.Context) {
	for ctx.Err() == nil {
		sent := time.Now()
		cctx, cancel := context.WithTimeout(ctx, h.tm.retry)
		ok, st, err := h.l.AcquireReplicated(cctx, h.tm.lease, h.ack)
		cancel()
		if err != nil || !ok {
			sleepUntil(ctx, sent.Add(h.tm.retry))
			continue
		}
		h.note(&h.acquires, time.Since(sent))
		end := h.led.begin(h.l.Name(), h.who, st.Record.Token, time.Now())
		end(h.lead(ctx, st.Record, sent))
	}
}

// lead renews term until it must stop trusting it, and returns when it stopped.
func (h *holder) lead(ctx context.Context, term lease.Record, lastOK time.Time) time.Time {
	sent := lastOK
	for {
		deadline := lastOK.Add(h.tm.renew)
		sleepUntil(ctx, minTime(sent.Add(h.tm.retry), deadline))
		now := time.Now()
		switch {
		case ctx.Err() != nil:
			return now
		case !now.Before(deadline):
			return deadline
		}
		sent = now
		cctx, cancel := context.WithDeadline(ctx, minTime(sent.Add(h.tm.retry), deadline))
		ok, err := h.l.RenewReplicated(cctx, term, h.tm.lease, h.ack)
		cancel()
		switch {
		case err == nil && !ok:
			return minTime(time.Now(), deadline)
		case err == nil:
			h.note(&h.renews, time.Since(sent))
			lastOK = sent
		}
	}
}

func (h *holder) note(to *[]time.Duration, d time.Duration) {
	h.mu.Lock()
	*to = append(*to, d)
	h.mu.Unlock()
}

func sleepUntil(ctx context.Context, t time.Time) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// partitionUser is the ACL user of the holders. The partition switches the default user off on
// the master and drops its connections: the sentinels and the replicas, which use the default
// user, lose the master, while a holder authenticated as partitionUser keeps it, like a client on
// the master's side of a network partition.
const partitionUser, partitionPassword = "elector", "elector-pw"

// prepare creates partitionUser on a data server and removes the diskless-sync delay, so that a
// rejoining replica is in sync within a second.
func prepare(t testing.TB, srv *redistest.Server) {
	t.Helper()
	c := redis.NewClient(srv.Options())
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "ACL", "SETUSER", partitionUser, "on", ">"+partitionPassword, "~*", "&*", "+@all").Err(); err != nil {
		t.Fatalf("ACL SETUSER on %s: %v", srv.Addr(), err)
	}
	if err := c.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		t.Fatalf("CONFIG SET on %s: %v", srv.Addr(), err)
	}
}

// asUser returns a client of srv authenticated as partitionUser.
func asUser(t testing.TB, addr string, tm timing) redis.UniversalClient {
	t.Helper()
	return newClient(t, redisclient.Config{
		Mode: redisclient.ModeStandalone, Addrs: []string{addr},
		Username: partitionUser, Password: partitionPassword,
	}, tm)
}

// partition cuts the master at addr off from the sentinels and replicas (see partitionUser).
func partition(t testing.TB, admin redis.UniversalClient) {
	t.Helper()
	ctx := context.Background()
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "off").Err(); err != nil {
		t.Fatalf("partition: %v", err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", "default").Err(); err != nil {
		t.Fatalf("partition: %v", err)
	}
}

// heal ends the partition of the old master and makes it a replica of master.
func heal(t testing.TB, admin redis.UniversalClient, master string) {
	t.Helper()
	ctx := context.Background()
	host, port, _ := net.SplitHostPort(master)
	if err := admin.Do(ctx, "ACL", "SETUSER", "default", "on").Err(); err != nil {
		t.Fatalf("heal: %v", err)
	}
	if err := admin.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatalf("heal: REPLICAOF %s: %v", master, err)
	}
}

// partitionRound is what one round of TestPartitionedMaster observed.
type partitionRound struct {
	failover     time.Duration // partition until the sentinels named a new master
	renewOverlap time.Duration // both holders trusted the lease that was held before the partition
	acqOverlap   time.Duration // both trusted the lease acquired on the cut-off master
	majorityRenewLease,
	majorityAcqLease time.Duration // partition until the majority side held each lease
}

// What replica acknowledgement changes when the master is cut off from the sentinels and its
// replicas but not from the current holder, the classic way asynchronous replication loses
// writes. In each round holder A, on the master's side, holds lease "held" from before the cut
// and acquires lease "fresh" just after it; once Sentinel has promoted a replica, holder B, on the
// majority side, campaigns for both. Without acknowledgement A keeps renewing on the cut-off master
// and both trust "held" once it expires on the promoted replica, and A's acquisition of "fresh" is
// simply lost; the tokens still order the terms, so a fenced resource rejects A once B has written.
// With acknowledgement (1 of 2 replicas) A's renewals fail from the cut on, so A stops trusting
// "held" RenewDeadline after its last acknowledged renewal, before the promoted copy expires, and
// A never starts "fresh". The figures are logged; ELECTOR_LONG=1 runs 20 rounds per mode.
func TestPartitionedMaster(t *testing.T) {
	tm := timing{lease: 3 * time.Second, renew: 2 * time.Second, retry: 500 * time.Millisecond}
	if err := election.ValidateTiming(tm.lease, tm.renew, tm.retry); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []struct {
		name string
		ack  lease.ReplicaAck
	}{
		{"no-ack", lease.ReplicaAck{}},
		{"ack-1-of-2", lease.ReplicaAck{Replicas: 1, Timeout: 250 * time.Millisecond}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			s := redistest.StartSentinel(t, "elector", 2, 3)
			for _, srv := range append([]*redistest.Server{s.Master}, s.Replicas...) {
				prepare(t, srv)
			}
			var results []partitionRound
			var latA, latR []time.Duration
			for round := range rounds(1, 20) {
				r, acq, ren := partitionOnce(t, s, tm, mode.ack, round)
				results = append(results, r)
				latA, latR = append(latA, acq...), append(latR, ren...)
				if mode.ack.Replicas > 0 && (r.renewOverlap > 0 || r.acqOverlap > 0) {
					t.Errorf("round %d: with replica acknowledgement two holders trusted a lease at once: %+v", round+1, r)
				}
			}
			summarize(t, mode.name, results, latA, latR)
		})
	}
}

// partitionOnce runs one round on the current master and returns what it observed, with the
// latencies of A's successful acquisitions and renewals.
func partitionOnce(t *testing.T, s *redistest.Sentinel, tm timing, ack lease.ReplicaAck, round int) (partitionRound, []time.Duration, []time.Duration) {
	t.Helper()
	master := waitHealthyReplicas(t, s, 2, 60*time.Second)
	led := &ledger{}
	aClient := asUser(t, master, tm)
	newHolder := func(c redis.UniversalClient, who, name string) *holder {
		l, err := lease.New(c, fmt.Sprintf("%s-%d", name, round), lease.Options{Identity: who, AnnounceRenewals: true})
		if err != nil {
			t.Fatal(err)
		}
		return &holder{who: who, l: l, ack: ack, tm: tm, led: led}
	}
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(context.Background())
	defer func() { cancel(); wg.Wait() }()
	run := func(h *holder) {
		wg.Add(1)
		go func() { defer wg.Done(); h.run(ctx) }()
	}

	aHeld := newHolder(aClient, "A", "held")
	run(aHeld)
	deadline := time.Now().Add(10 * time.Second)
	for len(led.snapshot()) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("A did not acquire the lease within 10s")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(2 * tm.retry) // a few acknowledged renewals before the cut

	partition(t, aClient)
	cut := time.Now()
	aFresh := newHolder(aClient, "A", "fresh")
	run(aFresh)
	promoted, at := waitNewMaster(t, s, master, 60*time.Second)
	bClient := newClient(t, redisclient.Config{
		Mode: redisclient.ModeSentinel, Addrs: s.SentinelAddrs(), SentinelMaster: s.MasterName,
		Username: partitionUser, Password: partitionPassword,
	}, tm)
	bHeld, bFresh := newHolder(bClient, "B", "held"), newHolder(bClient, "B", "fresh")
	run(bHeld)
	run(bFresh)
	sleepUntil(ctx, cut.Add(2*tm.lease+time.Second))
	cancel()
	wg.Wait()

	r := partitionRound{failover: at.Sub(cut)}
	for _, w := range led.snapshot() {
		if w.who == "B" {
			d := w.start.Sub(cut)
			if strings.HasPrefix(w.lease, "held") && r.majorityRenewLease == 0 {
				r.majorityRenewLease = d
			}
			if strings.HasPrefix(w.lease, "fresh") && r.majorityAcqLease == 0 {
				r.majorityAcqLease = d
			}
		}
	}
	terms, _ := led.check(t, func(a, b work) string {
		if a.who != "A" || b.who != "B" || !b.start.After(at) {
			return ""
		}
		overlap := minTime(a.end, b.end).Sub(b.start)
		if strings.HasPrefix(a.lease, "held") {
			r.renewOverlap += overlap
		} else {
			r.acqOverlap += overlap
		}
		return "A on the cut-off master"
	})
	if terms == 0 || r.majorityRenewLease == 0 || r.majorityAcqLease == 0 {
		t.Errorf("round %d: the majority side did not take both leases within the round; terms:\n%s", round+1, led)
	}
	t.Logf("round %d: failover after %v; B held the leases after %v (held before the cut) and %v (acquired after the cut); both trusted them for %v and %v",
		round+1, r.failover.Round(time.Millisecond), r.majorityRenewLease.Round(time.Millisecond), r.majorityAcqLease.Round(time.Millisecond),
		r.renewOverlap.Round(time.Millisecond), r.acqOverlap.Round(time.Millisecond))

	heal(t, aClient, promoted)
	return r, append(aHeld.acquires, aHeld.renews...), append(bHeld.acquires, bFresh.acquires...)
}

// summarize logs the figures of one mode.
func summarize(t *testing.T, mode string, rs []partitionRound, lat, latB []time.Duration) {
	var renewHit, acqHit int
	var failovers, renewTake, acqTake []time.Duration
	for _, r := range rs {
		if r.renewOverlap > 0 {
			renewHit++
		}
		if r.acqOverlap > 0 {
			acqHit++
		}
		failovers = append(failovers, r.failover)
		renewTake = append(renewTake, r.majorityRenewLease)
		acqTake = append(acqTake, r.majorityAcqLease)
	}
	t.Logf("%s: %d rounds; two holders at once: %d/%d for the lease held before the cut, %d/%d for the lease acquired after it; "+
		"failover p50 %v; majority side leads after p50 %v / %v; holder call latency p50 %v p99 %v; B's acquisitions p50 %v",
		mode, len(rs), renewHit, len(rs), acqHit, len(rs), percentile(failovers, 0.5).Round(time.Millisecond),
		percentile(renewTake, 0.5).Round(time.Millisecond), percentile(acqTake, 0.5).Round(time.Millisecond),
		percentile(lat, 0.5).Round(time.Microsecond), percentile(lat, 0.99).Round(time.Microsecond), percentile(latB, 0.5).Round(time.Microsecond))
}
