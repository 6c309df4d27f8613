package reliability

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// partitionUser is the ACL user of the electors. The partition switches the default user off on
// the master and drops its connections: the sentinels and the replicas, which use the default
// user, lose the master, while an elector authenticated as partitionUser keeps it, like a client on
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
	heldOverlap  time.Duration // both sides led the lease that A led before the partition
	freshOverlap time.Duration // both led the lease that A campaigned for after the partition
	heldTaken    time.Duration // partition until B led each lease
	freshTaken   time.Duration
}

// What replica acknowledgement (election.Config.ReplicaAck) changes when the master is cut off
// from the sentinels and its replicas but not from the leader, the classic way asynchronous
// replication loses writes. In each round elector A, on the master's side, leads lease "held"
// from before the cut and campaigns for lease "fresh" from just after it; once Sentinel has
// promoted a replica, elector B, on the majority side, campaigns for both. Without
// acknowledgement A keeps renewing on the cut-off master, so both lead "held" once it expires on
// the promoted replica, and A's acquisition of "fresh" is simply lost; the tokens still order the
// terms, so a fenced resource refuses A once B has written. With acknowledgement (1 of 2
// replicas) A's renewals fail from the cut on, so A steps down RenewDeadline after its last
// acknowledged renewal, before the promoted copy expires, and A never starts "fresh". The figures
// are logged; ELECTOR_LONG=1 runs 20 rounds per mode.
func TestPartitionedMaster(t *testing.T) {
	tm := timing{lease: 3 * time.Second, renew: 2 * time.Second, retry: 500 * time.Millisecond}
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
			for round := range rounds(1, 20) {
				r := partitionOnce(t, s, tm, mode.ack, round)
				results = append(results, r)
				if mode.ack.Replicas > 0 && (r.heldOverlap > 0 || r.freshOverlap > 0) {
					t.Errorf("round %d: with replica acknowledgement both sides led at once: %+v", round+1, r)
				}
			}
			summarize(t, mode.name, results)
		})
	}
}

// partitionOnce runs one round on the current master and returns what it observed.
func partitionOnce(t *testing.T, s *redistest.Sentinel, tm timing, ack lease.ReplicaAck, round int) partitionRound {
	t.Helper()
	master := waitHealthyReplicas(t, s, 2, 60*time.Second)
	led := &ledger{}
	withAck := func(c *election.Config) { c.ReplicaAck = ack }
	held, fresh := fmt.Sprintf("held-%d", round), fmt.Sprintf("fresh-%d", round)

	aClient := asUser(t, master, tm)
	aHeld := startElector(t, aClient, held, "A", tm, led, withAck)
	waitLeader(t, []*replica{aHeld}, time.Time{}, 10*time.Second)
	time.Sleep(2 * tm.retry) // a few renewals before the cut

	partition(t, aClient)
	cut := time.Now()
	aFresh := startElector(t, aClient, fresh, "A", tm, led, withAck)
	promoted, at := waitNewMaster(t, s, master, 60*time.Second)
	bClient := newClient(t, redisclient.Config{
		Mode: redisclient.ModeSentinel, Addrs: s.SentinelAddrs(), SentinelMaster: s.MasterName,
		Username: partitionUser, Password: partitionPassword,
	}, tm)
	bHeld := startElector(t, bClient, held, "B", tm, led, withAck)
	bFresh := startElector(t, bClient, fresh, "B", tm, led, withAck)
	// B takes "held" when it expires on the promoted replica, at most LeaseDuration after the
	// cut or right after the failover. A failover can take 10s longer than usual: when the
	// sentinels split their votes they retry after twice failover-timeout.
	end := cut.Add(2*tm.lease + time.Second)
	if later := at.Add(tm.lease + time.Second); later.After(end) {
		end = later
	}
	time.Sleep(time.Until(end))
	for _, r := range []*replica{aHeld, aFresh, bHeld, bFresh} {
		r.stop()
	}

	r := partitionRound{failover: at.Sub(cut)}
	for _, w := range led.snapshot() {
		if w.who != "B" {
			continue
		}
		if w.lease == held && r.heldTaken == 0 {
			r.heldTaken = w.start.Sub(cut)
		}
		if w.lease == fresh && r.freshTaken == 0 {
			r.freshTaken = w.start.Sub(cut)
		}
	}
	led.check(t, func(a, b work) string {
		if a.who != "A" || b.who != "B" || !b.start.After(at) {
			return ""
		}
		overlap := minTime(a.end, b.end).Sub(b.start)
		if a.lease == held {
			r.heldOverlap += overlap
		} else {
			r.freshOverlap += overlap
		}
		return "A on the cut-off master"
	})
	if r.heldTaken == 0 || r.freshTaken == 0 {
		t.Errorf("round %d: the majority side did not lead both leases within the round; terms:\n%s", round+1, led)
	}
	t.Logf("round %d: failover after %v; B led the leases after %v (led by A before the cut) and %v (campaigned for after it); both led them for %v and %v",
		round+1, r.failover.Round(time.Millisecond), r.heldTaken.Round(time.Millisecond), r.freshTaken.Round(time.Millisecond),
		r.heldOverlap.Round(time.Millisecond), r.freshOverlap.Round(time.Millisecond))

	heal(t, aClient, promoted)
	return r
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// summarize logs the figures of one mode.
func summarize(t *testing.T, mode string, rs []partitionRound) {
	var heldHit, freshHit int
	var failovers, heldTaken, freshTaken []time.Duration
	for _, r := range rs {
		if r.heldOverlap > 0 {
			heldHit++
		}
		if r.freshOverlap > 0 {
			freshHit++
		}
		failovers = append(failovers, r.failover)
		heldTaken = append(heldTaken, r.heldTaken)
		freshTaken = append(freshTaken, r.freshTaken)
	}
	t.Logf("%s: %d rounds; both sides led at once: %d/%d for the lease led before the cut, %d/%d for the lease campaigned for after it; "+
		"failover p50 %v; the majority side leads after p50 %v / %v",
		mode, len(rs), heldHit, len(rs), freshHit, len(rs), percentile(failovers, 0.5).Round(time.Millisecond),
		percentile(heldTaken, 0.5).Round(time.Millisecond), percentile(freshTaken, 0.5).Round(time.Millisecond))
}
