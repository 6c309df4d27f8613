package leasekit_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/internal/testing/redistest"
	_ "github.com/elector/elector/pkg/election" // registers members.lua: Install loads the whole library
	_ "github.com/elector/elector/pkg/fence"    // registers fence.lua
	"github.com/elector/elector/pkg/lease"
	_ "github.com/elector/elector/pkg/schedule" // registers the schedule's scripts
)

// scriptCalls records the script commands a client sends, as "fcall renew_many" (the
// function's script name), "evalsha" or "eval".
type scriptCalls struct {
	mu    sync.Mutex
	calls []string
}

func (r *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.record(cmd)
		return next(ctx, cmd)
	}
}
func (r *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			r.record(cmd)
		}
		return next(ctx, cmds)
	}
}

func (r *scriptCalls) record(cmd redis.Cmder) {
	name := cmd.Name()
	switch name {
	case "fcall":
		fn := fmt.Sprint(cmd.Args()[1])
		name += " " + strings.TrimPrefix(fn, lualib.FunctionName(""))
	case "evalsha", "eval":
	default:
		return
	}
	r.mu.Lock()
	r.calls = append(r.calls, name)
	r.mu.Unlock()
}

// take returns the commands recorded since the last take.
func (r *scriptCalls) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.calls
	r.calls = nil
	return out
}

// recordedClient returns a client of srv whose script commands are recorded, in mode.
func recordedClient(t *testing.T, srv *redistest.Server, mode lualib.Mode) (*redis.Client, *scriptCalls) {
	t.Helper()
	c := redis.NewClient(srv.Options())
	t.Cleanup(func() { _ = c.Close() })
	rec := &scriptCalls{}
	c.AddHook(rec)
	lualib.SetDefaultMode(c, mode)
	return c, rec
}

// TestRenewMany: one script call renews the leases whose record it carries (own), and no
// other: not a lease held by another process, nor one gone, nor an earlier term of our own;
// a key of another type fails that lease's renewal alone. Each result is the one a Renew
// would have had, in order; without the function library or the script cached, the call
// falls back as every script call does (EVALSHA, EVAL).
func TestRenewMany(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	c, rec := recordedClient(t, srv, lualib.Eval)

	ours := func(name string) *leasekit.Lease { return newLease(t, c, name, "pod-a") }
	own1, own2 := ours("own-1"), ours("own-2")
	foreign, gone, oldTerm, wrongType := ours("foreign"), ours("gone"), ours("old-term"), ours("wrong-type")
	rec1, rec2 := mustAcquire(t, own1, 10*time.Second), mustAcquire(t, own2, 10*time.Second)
	theirs := mustAcquire(t, newLease(t, admin, "foreign", "pod-b"), 10*time.Second)
	goneRec := mustAcquire(t, gone, 10*time.Second)
	admin.Del(ctx, gone.Keys().Lease)
	first := mustAcquire(t, oldTerm, 10*time.Second)
	if ok, err := oldTerm.Release(ctx, first); !ok || err != nil {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	current := mustAcquire(t, newLease(t, admin, "old-term", "pod-a"), 10*time.Second) // another process, same identity
	admin.RPush(ctx, wrongType.Keys().Lease, "x")
	rec.take()

	leases := []*leasekit.Lease{own1, foreign, gone, oldTerm, wrongType, own2}
	terms := []lease.Record{rec1, rec1, goneRec, first, rec2, rec2}
	res := renewMany(t, c, termsOf(leases, terms), 20*time.Second)
	if got := rec.take(); !slices.Equal(got, []string{"evalsha", "evalsha"}) {
		t.Errorf("RenewMany sent %v, want one call: evalsha, and evalsha again after NOSCRIPT and SCRIPT LOAD", got)
	}
	want := []bool{true, false, false, false, false, true}
	for i, r := range res {
		name := leases[i].Name()
		if i == 4 {
			if r.OK || r.Err == nil || !strings.Contains(r.Err.Error(), "WRONGTYPE") || !strings.Contains(r.Err.Error(), `"wrong-type"`) {
				t.Errorf("%s: %+v, want not ok and its own WRONGTYPE error naming the lease", name, r)
			}
			continue
		}
		if r.OK != want[i] || r.Err != nil {
			t.Errorf("%s: %+v, want ok %v and no error", name, r, want[i])
		}
	}
	for _, l := range []*leasekit.Lease{own1, own2} {
		if pttl := admin.PTTL(ctx, l.Keys().Lease).Val(); pttl <= 19*time.Second {
			t.Errorf("%s: PTTL %v after the renewal to 20s", l.Name(), pttl)
		}
	}
	for _, l := range []*leasekit.Lease{foreign, oldTerm} {
		if pttl := admin.PTTL(ctx, l.Keys().Lease).Val(); pttl > 10*time.Second {
			t.Errorf("%s: PTTL %v: renewed by a record it does not hold", l.Name(), pttl)
		}
	}
	if got := admin.Get(ctx, foreign.Keys().Lease).Val(); got != theirs.String() {
		t.Errorf("foreign: the lease holds %q, want %q", got, theirs)
	}
	if got := admin.Get(ctx, oldTerm.Keys().Lease).Val(); got != current.String() {
		t.Errorf("old-term: the lease holds %q, want %q", got, current)
	}
	if n := admin.Exists(ctx, gone.Keys().Lease).Val(); n != 0 {
		t.Errorf("gone: the renewal wrote the lease key back")
	}

	// Cached now: EVALSHA alone. With the library loaded, FCALL of its function.
	if res := renewMany(t, c, termsOf(leases[:1], terms[:1]), 20*time.Second); !res[0].OK || res[0].Err != nil {
		t.Errorf("second call: %+v", res[0])
	}
	if got := rec.take(); !slices.Equal(got, []string{"evalsha"}) {
		t.Errorf("second call sent %v, want evalsha", got)
	}
	if _, err := lualib.Install(ctx, admin); err != nil {
		t.Fatal(err)
	}
	fc, frec := recordedClient(t, srv, lualib.Functions)
	own := newLease(t, fc, "own-1", "pod-a")
	if res := renewMany(t, fc, []leasewire.HeldTerm{leasekit.Term(own, rec1)}, 20*time.Second); !res[0].OK || res[0].Err != nil {
		t.Errorf("FCALL: %+v, want renewed", res[0])
	}
	if got := frec.take(); !slices.Equal(got, []string{"fcall renew_many"}) {
		t.Errorf("Functions mode sent %v, want fcall renew_many", got)
	}
}

// TestRenewManyOnACluster: on a Redis Cluster one renew_many call renews the leases of one
// slot (LeaseSlot agrees with the Cluster's CLUSTER KEYSLOT), and a call of leases in two
// slots fails every result and sends nothing.
func TestRenewManyOnACluster(t *testing.T) {
	ctx := context.Background()
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	rec := &scriptCalls{}
	c.AddHook(rec)
	bySlot := map[int][]string{}
	var same []string // three leases of one slot
	for i := 0; same == nil; i++ {
		name := fmt.Sprintf("shard-%d", i)
		slot := leasewire.LeaseSlot(name)
		if i < 300 {
			if want := c.ClusterKeySlot(ctx, leasewire.LeaseKey(lease.DefaultPrefix, name)).Val(); int64(slot) != want {
				t.Fatalf("LeaseSlot(%q) = %d, CLUSTER KEYSLOT of its lease key = %d", name, slot, want)
			}
		}
		if bySlot[slot] = append(bySlot[slot], name); len(bySlot[slot]) == 3 {
			same = bySlot[slot]
		}
	}
	var held []leasewire.HeldTerm
	for _, name := range same {
		l := newLease(t, c, name, "pod-a")
		held = append(held, leasekit.Term(l, mustAcquire(t, l, 10*time.Second)))
	}
	rec.take()
	for i, r := range renewMany(t, c, held, 20*time.Second) {
		if !r.OK || r.Err != nil {
			t.Errorf("%s: %+v, want renewed", same[i], r)
		}
	}
	for _, name := range same {
		if pttl := c.PTTL(ctx, leasewire.LeaseKey(lease.DefaultPrefix, name)).Val(); pttl <= 19*time.Second {
			t.Errorf("%s: PTTL %v after the renewal to 20s", name, pttl)
		}
	}
	if got := rec.take(); len(got) == 0 || got[len(got)-1] != "evalsha" && got[len(got)-1] != "fcall renew_many" {
		t.Errorf("sent %v, want one renew_many call (after NOSCRIPT, again)", got)
	}

	other := newLease(t, c, "other", "pod-a")
	if leasewire.LeaseSlot("other") == leasewire.LeaseSlot(same[0]) {
		t.Fatal("pick another name: other shares the slot")
	}
	mixed := []leasewire.HeldTerm{held[0], leasekit.Term(other, mustAcquire(t, other, 10*time.Second))}
	rec.take()
	for i, r := range renewMany(t, c, mixed, 20*time.Second) {
		if r.OK || r.Err == nil || !strings.Contains(r.Err.Error(), "different Redis Cluster slots") {
			t.Errorf("result %d = %+v, want the error that names the slots", i, r)
		}
	}
	if got := rec.take(); len(got) > 0 {
		t.Errorf("a call of two slots' leases sent %v", got)
	}
	if leasekit.OneServer(c) || !leasekit.OneServer(redistest.Start(t).Client(t)) {
		t.Error("OneServer: want false for a cluster client, true for a standalone one")
	}
}

// renewMany renews terms in one renew_many call of a Batch of c and returns the results.
func renewMany(t testing.TB, c redis.UniversalClient, terms []leasewire.HeldTerm, ttl time.Duration) []leasekit.Result {
	t.Helper()
	b := leasekit.NewBatch(c)
	res := b.RenewMany(terms, ttl)
	_ = b.Exec(context.Background()) // errors are per result
	return res
}

// termsOf returns the held terms terms[i] of leases[i].
func termsOf(leases []*leasekit.Lease, terms []lease.Record) []leasewire.HeldTerm {
	held := make([]leasewire.HeldTerm, len(leases))
	for i, l := range leases {
		held[i] = leasekit.Term(l, terms[i])
	}
	return held
}

// BenchmarkRenewMany1000 is BenchmarkBatchRenew1000 with one renew_many call.
func BenchmarkRenewMany1000(b *testing.B) {
	c := redistest.Start(b).Client(b)
	leases := make([]*leasekit.Lease, 1000)
	terms := make([]lease.Record, len(leases))
	for i := range leases {
		leases[i] = newLease(b, c, fmt.Sprintf("shard-%d", i), "pod-a")
		terms[i] = mustAcquire(b, leases[i], time.Minute)
	}
	held := termsOf(leases, terms)
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range renewMany(b, c, held, time.Minute) {
			if !r.OK || r.Err != nil {
				b.Fatal(r)
			}
		}
	}
}

// TestPeekMany: one pipeline of plain reads answers, per lease, free (no key, or an expired
// one), held with the record and its TTL, held without expiry, or the error of a key of
// another type or a value that is not a record; no script is sent.
func TestPeekMany(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	calls := &scriptCalls{}
	c := srv.Client(t)
	admin := srv.Client(t)
	c.AddHook(calls)
	held := mustAcquire(t, newLease(t, admin, "held", "pod-b"), 10*time.Second)
	forever := newLease(t, admin, "forever", "pod-b")
	rec := mustAcquire(t, forever, 10*time.Second)
	if err := admin.Persist(ctx, forever.Keys().Lease).Err(); err != nil {
		t.Fatal(err)
	}
	expired := newLease(t, admin, "expired", "pod-b")
	mustAcquire(t, expired, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // the key's expiry passed (Redis drops it on access)
	names := []string{"free", "held", "forever", "expired", "wrongtype", "garbage"}
	leases := make([]*leasekit.Lease, len(names))
	for i, n := range names {
		leases[i] = newLease(t, c, n, "pod-a")
	}
	if err := admin.HSet(ctx, leases[4].Keys().Lease, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Set(ctx, leases[5].Keys().Lease, "not a record", 0).Err(); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(leases))
	for i, l := range leases {
		keys[i] = l.Keys().Lease
	}
	got := leasekit.PeekMany(ctx, c, keys)
	for i, n := range names {
		p := got[i]
		var ok bool
		switch n {
		case "free", "expired":
			ok = p.Err == nil && !p.Status.Held
		case "held":
			ok = p.Err == nil && p.Status.Held && p.Status.Record == held && p.Status.TTL > 0 && p.Status.TTL <= 10*time.Second
		case "forever":
			ok = p.Err == nil && p.Status.Held && p.Status.Record == rec && p.Status.TTL == lease.NoExpiry
		case "wrongtype":
			ok = p.Err != nil && strings.Contains(p.Err.Error(), "WRONGTYPE") && strings.Contains(p.Err.Error(), leases[4].Keys().Lease)
		case "garbage":
			ok = p.Err != nil && strings.Contains(p.Err.Error(), leases[5].Keys().Lease)
		}
		if !ok {
			t.Errorf("%s: %+v", n, p)
		}
	}
	if len(calls.calls) != 0 {
		t.Errorf("scripts sent: %v", calls.calls)
	}
}
