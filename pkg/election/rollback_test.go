package election_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// Timing of the rollback tests: the review's. The old record must still be live in the
// snapshot when Redis comes back, which takes a release, a new term and a restart.
const (
	rbLease = 4 * time.Second
	rbRenew = 2 * time.Second
	rbRetry = 400 * time.Millisecond
)

// snapshot is an RDB file of srv taken by SAVE, to restart srv from later.
func snapshot(t *testing.T, srv *redistest.Server, admin *redis.Client) []byte {
	t.Helper()
	if err := admin.Save(context.Background()).Err(); err != nil {
		t.Fatalf("SAVE: %v", err)
	}
	rdb, err := os.ReadFile(filepath.Join(srv.Dir(), "dump.rdb"))
	if err != nil {
		t.Fatal(err)
	}
	return rdb
}

// rollBack restarts srv from rdb (an older snapshot): the writes since are lost, the keys of
// the snapshot that have not expired by now come back. It checks that key holds want again.
func rollBack(t *testing.T, srv *redistest.Server, admin *redis.Client, rdb []byte, key, want string) {
	t.Helper()
	srv.Stop()
	if err := os.WriteFile(filepath.Join(srv.Dir(), "dump.rdb"), rdb, 0o600); err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	if got := admin.Get(context.Background(), key).Val(); got != want {
		t.Fatalf("after the rollback the key holds %q, want the snapshot's %q (expired meanwhile? machine too slow)", got, want)
	}
}

// Issue 23 item 4: Redis restarted from an older snapshot brings back a record this Elector
// had released; its acquire resumes it (acquire.lua renews a record its owner holds). A leads
// R1, the snapshot is taken, A's Run is cancelled (R1 released) and run again (R2, a larger
// token), then Redis rolls back: A's renew of R2 finds R1, the term is lost, and A campaigns
// at once. A must not start a term with R1's token, smaller than R2's it has led with: no
// term's token is ever below or equal to one this replica has seen (other than a resume of
// its own newest term).
func TestRollbackNeverStartsAnOlderToken(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	client := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = client.Close() })
	ts := &terms{}
	e, err := election.New(election.Config{
		Client: client, LeaseName: "rollback", Identity: "pod-a",
		LeaseDuration: rbLease, RenewDeadline: rbRenew, RetryPeriod: rbRetry,
		ReleaseOnCancel: true, Recampaign: true,
		Callbacks: election.Callbacks{OnStartedLeading: ts.work("pod-a"), OnStoppedLeading: func() {}},
	})
	if err != nil {
		t.Fatal(err)
	}
	a := &replica{name: "pod-a", e: e}
	t.Cleanup(a.stop)
	key := election.LeaseOf(e).Keys().Lease

	a.start()
	waitUntil(t, 10*time.Second, "A's first term", func() bool { return ts.started("pod-a") == 1 })
	r1 := admin.Get(context.Background(), key).Val()
	rdb := snapshot(t, srv, admin)
	a.stop() // R1 released
	a.start()
	waitUntil(t, 10*time.Second, "A's second term", func() bool { return ts.started("pod-a") == 2 })
	rollBack(t, srv, admin, rdb, key, r1)
	// A's renew finds R1: the term is lost and A campaigns again, first on R1 (refused), then,
	// once R1 expired, on a new record.
	waitUntil(t, 3*rbLease, "A's term after the rollback", func() bool { return ts.started("pod-a") >= 3 })
	a.stop()
	checkTokensGrow(t, ts, "pod-a")
}

// checkTokensGrow fails when a term of who started with a token not above every earlier one.
func checkTokensGrow(t *testing.T, ts *terms, who string) {
	t.Helper()
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var top int64
	for _, tm := range ts.all {
		if tm.who != who {
			continue
		}
		if tm.token <= top {
			t.Fatalf("%s started a term with token %d, not above %d it had led with before; terms:\n%s", who, tm.token, top, termsString(ts.all))
		}
		top = tm.token
	}
}

func termsString(all []*term) string {
	var b strings.Builder
	for _, tm := range all {
		fmt.Fprintf(&b, "  %s token=%d %s .. %s\n", tm.who, tm.token, tm.start.Format("15:04:05.000"), tm.end.Format("15:04:05.000"))
	}
	return b.String()
}

// The same rollback for a Group: a lost lease is tried again at once, and the acquire
// resumes the record released at the end of the previous Run.
func TestGroupRollbackNeverStartsAnOlderToken(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	client := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = client.Close() })
	ts := &terms{}
	work := ts.work("pod-a")
	g, err := election.NewGroup(election.GroupConfig{
		Client: client, Group: "rollback", Identity: "pod-a", Leases: []string{"x"},
		LeaseDuration: rbLease, RenewDeadline: rbRenew, RetryPeriod: rbRetry,
		Callbacks: election.GroupCallbacks{
			OnStartedLeading: func(ctx context.Context, _ string) { work(ctx) },
			OnStoppedLeading: func(string) {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var cancel context.CancelFunc
	var done chan error
	run := func() {
		var ctx context.Context
		ctx, cancel = context.WithCancel(context.Background())
		done = make(chan error, 1)
		go func() { done <- g.Run(ctx) }()
	}
	stop := func() {
		if done != nil {
			cancel()
			<-done
			done = nil
		}
	}
	t.Cleanup(stop)
	key := leasewire.KeysFor(lease.DefaultPrefix, "x").Lease

	run()
	waitUntil(t, 10*time.Second, "the first term", func() bool { return ts.started("pod-a") == 1 })
	r1 := admin.Get(context.Background(), key).Val()
	rdb := snapshot(t, srv, admin)
	stop() // R1 released
	run()
	waitUntil(t, 10*time.Second, "the second term", func() bool { return ts.started("pod-a") == 2 })
	rollBack(t, srv, admin, rdb, key, r1)
	waitUntil(t, 3*rbLease, "a term after the rollback", func() bool { return ts.started("pod-a") >= 3 })
	stop()
	checkTokensGrow(t, ts, "pod-a")
}
