package leasekit_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

func newResignLease(t testing.TB, c redis.UniversalClient, identity string) *leasekit.Lease {
	t.Helper()
	l, err := leasekit.NewWith(c, "job", lease.Options{Identity: identity}, leasekit.Ext{ResignRequests: true})
	if err != nil {
		t.Fatalf("lease.New: %v", err)
	}
	return l
}

// resignFixture is a lease "job" held by pod-a, with leases for pod-b and pod-c, all taking
// part in the resign protocol, and an observer that writes requests.
type resignFixture struct {
	c       *redis.Client
	a, b, x *leasekit.Lease
	obs     *leasekit.Lease
	term    lease.Record
}

func newResignFixture(t *testing.T) *resignFixture {
	t.Helper()
	c := redistest.Start(t).Client(t)
	f := &resignFixture{c: c, a: newResignLease(t, c, "pod-a"), b: newResignLease(t, c, "pod-b"), x: newResignLease(t, c, "pod c")}
	obs, err := leasekit.New(c, "job", lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f.obs = obs
	f.term = mustAcquire(t, f.a, 10*time.Second)
	return f
}

func (f *resignFixture) request(t *testing.T, target string, hold time.Duration) {
	t.Helper()
	st, err := f.obs.RequestResign(context.Background(), leasekit.ResignRequest{Target: target, HoldOff: hold, Timeout: 5 * time.Second})
	if err != nil || !st.Held || st.Record != f.term {
		t.Fatalf("RequestResign = %+v, %v; want the request written for %v", st, err, f.term)
	}
}

// A request names the current record, publishes a resign event, and the holder's renewal
// reports it (reply 2) while still extending the lease and the request.
func TestResignRequestAndRenew(t *testing.T) {
	ctx := context.Background()
	f := newResignFixture(t)
	sub, err := f.obs.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	if ok, err := f.a.Renew(ctx, f.term, 10*time.Second); err != nil || !ok {
		t.Fatalf("Renew without a request = %v, %v; want true, nil", ok, err)
	}
	f.request(t, "", 3*time.Second)
	select {
	case ev := <-sub.Events():
		if ev.Kind != leasekit.ResignRequested || ev.Record != f.term || ev.TTL != 3*time.Second {
			t.Fatalf("event %+v, want resign of %v with hold-off 3s", ev, f.term)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no resign event")
	}
	v := f.c.Get(ctx, f.a.Keys().Resign).Val()
	if want := "v1\nrequest\n3000\n" + f.term.String() + "\n"; v != want {
		t.Fatalf("resign key holds %q, want %q", v, want)
	}
	if pttl := f.c.PTTL(ctx, f.a.Keys().Resign).Val(); pttl > 5*time.Second || pttl < 4*time.Second {
		t.Fatalf("request PTTL %v, want the timeout 5s", pttl)
	}
	ok, err := f.a.Renew(ctx, f.term, 20*time.Second)
	if !ok || !errors.Is(err, leasekit.ErrResignRequested) {
		t.Fatalf("Renew with a request = %v, %v; want true, ErrResignRequested", ok, err)
	}
	if pttl := f.c.PTTL(ctx, f.a.Keys().Lease).Val(); pttl <= 19*time.Second {
		t.Fatalf("lease PTTL after a renewal with a request %v, want > 19s", pttl)
	}
	if pttl := f.c.PTTL(ctx, f.a.Keys().Resign).Val(); pttl <= 19*time.Second {
		t.Fatalf("request PTTL after the renewal %v, want extended to the lease's 20s", pttl)
	}
	// The same renewal through a lease without the option, like a Group member's Batch: it
	// does not see the request.
	old, err := leasekit.NewWith(f.c, "job", lease.Options{Identity: "pod-a"}, leasekit.Ext{Instance: f.a.Instance()})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := old.Renew(ctx, f.term, 20*time.Second); !ok || err != nil {
		t.Fatalf("Renew of a lease without ResignRequests = %v, %v; want true, nil (it ignores requests)", ok, err)
	}
	b := leasekit.NewBatch(f.c)
	r := b.Renew(leasekit.Term(f.a, f.term), 20*time.Second)
	if err := b.Exec(ctx); err != nil || !r.OK {
		t.Fatalf("Batch renew with a request = %+v, %v; want OK (a Batch ignores requests)", r, err)
	}
}

// A request for another record is ignored by the renewal; no holder writes nothing; a target
// that holds the lease is refused; a request bound to a term that no longer holds is refused.
func TestResignRequestRefusals(t *testing.T) {
	ctx := context.Background()
	f := newResignFixture(t)
	_, err := f.obs.RequestResign(ctx, leasekit.ResignRequest{Target: "pod-a", Timeout: time.Second})
	if !errors.Is(err, leasekit.ErrTargetIsHolder) {
		t.Fatalf("request to the holder itself: %v, want ErrTargetIsHolder", err)
	}
	if n := f.c.Exists(ctx, f.a.Keys().Resign).Val(); n != 0 {
		t.Fatal("a refused request was written")
	}
	other := lease.Record{Token: f.term.Token - 1, Instance: "0123", Identity: "pod-a"}
	st, err := f.obs.RequestResign(ctx, leasekit.ResignRequest{Timeout: time.Second, Term: other})
	if !errors.Is(err, leasekit.ErrOtherTerm) || st.Record != f.term {
		t.Fatalf("request bound to another term: %+v, %v; want ErrOtherTerm naming %v", st, err, f.term)
	}
	// A request naming an older record (left by a term that expired) does not concern this term.
	f.c.Set(ctx, f.a.Keys().Resign, "v1\nrequest\n1000\n"+other.String()+"\n", 10*time.Second)
	if ok, err := f.a.Renew(ctx, f.term, 10*time.Second); !ok || err != nil {
		t.Fatalf("Renew with a request for another record = %v, %v; want true, nil", ok, err)
	}
	if ok, err := f.a.Release(ctx, f.term); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if v := f.c.Get(ctx, f.a.Keys().Resign).Val(); !strings.HasPrefix(v, "v1\nrequest\n") {
		t.Fatalf("release turned another term's request into %q", v)
	}
	// It is no reservation either: anyone acquires.
	if ok, st, err := f.a.Acquire(ctx, time.Second); !ok || err != nil {
		t.Fatalf("Acquire with a stale request = %v, %+v, %v; want acquired", ok, st, err)
	}
	f.c.Del(ctx, f.a.Keys().Lease)
	st, err = f.obs.RequestResign(ctx, leasekit.ResignRequest{Timeout: time.Second})
	if err != nil || st.Held {
		t.Fatalf("request with no holder = %+v, %v; want not held, nil", st, err)
	}
	if _, err := f.obs.RequestResign(ctx, leasekit.ResignRequest{Timeout: time.Second, Term: f.term}); !errors.Is(err, leasekit.ErrOtherTerm) {
		t.Fatalf("request bound to a term, with no holder: %v, want ErrOtherTerm", err)
	}
	for _, req := range []leasekit.ResignRequest{
		{Timeout: 0}, {Timeout: time.Second, HoldOff: -time.Second}, {Timeout: time.Second, HoldOff: 1500 * time.Microsecond},
		{Timeout: time.Second, Target: "bad\nname"},
	} {
		if _, err := f.obs.RequestResign(ctx, req); err == nil {
			t.Errorf("RequestResign(%+v) succeeded, want an error", req)
		}
	}
}

// Release turns the request into a reservation for the hold-off. Without a target it keeps
// out the resigning identity only (any instance of it); the first other acquire deletes it.
func TestResignReservationAnyone(t *testing.T) {
	ctx := context.Background()
	f := newResignFixture(t)
	f.request(t, "", 4*time.Second)
	if ok, err := f.a.Release(ctx, f.term); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if pttl := f.c.PTTL(ctx, f.a.Keys().Resign).Val(); pttl > 4*time.Second || pttl < 3*time.Second {
		t.Fatalf("reservation PTTL %v, want the hold-off 4s", pttl)
	}
	r, err := f.obs.GetReservation(ctx)
	if err != nil || r == nil || r.Resigned != f.term || r.Target != "" || r.Admits("pod-a") || !r.Admits("pod-b") {
		t.Fatalf("GetReservation = %+v, %v", r, err)
	}
	restarted := newResignLease(t, f.c, "pod-a") // a new instance of the resigning identity
	for _, l := range []*leasekit.Lease{f.a, restarted} {
		ok, st, res, err := l.AcquireOrReservation(ctx, 10*time.Second)
		if ok || err != nil || st.Held || res == nil {
			t.Fatalf("Acquire by the resigning identity = %v, %+v, %v; want refused with a reservation", ok, st, err)
		}
		if rv := res; rv.Resigned != f.term || rv.Target != "" || rv.TTL > 4*time.Second || rv.TTL < 3*time.Second {
			t.Fatalf("reservation %+v, want %v for anyone with the hold-off's PTTL", rv, f.term)
		}
	}
	term := mustAcquire(t, f.x, 10*time.Second) // "pod c": an identity with a space
	if term.Token <= f.term.Token {
		t.Fatalf("token %d after %d", term.Token, f.term.Token)
	}
	if n := f.c.Exists(ctx, f.a.Keys().Resign).Val(); n != 0 {
		t.Fatal("the reservation outlived the acquire it let through")
	}
}

// With a target, only the target acquires; it deletes the reservation.
func TestResignReservationTarget(t *testing.T) {
	ctx := context.Background()
	f := newResignFixture(t)
	f.request(t, "pod c", 4*time.Second)
	if ok, err := f.a.Release(ctx, f.term); !ok || err != nil {
		t.Fatal(ok, err)
	}
	for _, l := range []*leasekit.Lease{f.a, f.b} {
		ok, st, res, err := l.AcquireOrReservation(ctx, 10*time.Second)
		if ok || err != nil || res == nil || res.Target != "pod c" || res.TTL < 3*time.Second {
			t.Fatalf("Acquire by %s = %v, %+v, %v; want refused, reserved for pod c", l.Identity(), ok, st, err)
		}
	}
	// A lease without the option (an older elector, a Group member) does not see it.
	old := newLease(t, f.c, "job", "pod-b")
	b := leasekit.NewBatch(f.c)
	r := b.Acquire(f.b, 10*time.Second)
	if err := b.Exec(ctx); err != nil || r.Acquired || r.Reservation == nil {
		t.Fatalf("Batch acquire by pod-b = %+v, %v; want refused with the reservation", r, err)
	}
	term := mustAcquire(t, f.x, 10*time.Second)
	if n := f.c.Exists(ctx, f.a.Keys().Resign).Val(); n != 0 {
		t.Fatal("the target's acquire left the reservation")
	}
	if ok, err := f.x.Release(ctx, term); !ok || err != nil {
		t.Fatal(ok, err)
	}
	mustAcquire(t, old, time.Second)
}

// A reservation lapses after the hold-off: then anyone acquires, the resigning one included.
func TestResignReservationLapses(t *testing.T) {
	ctx := context.Background()
	f := newResignFixture(t)
	f.request(t, "absent", 300*time.Millisecond)
	if ok, err := f.a.Release(ctx, f.term); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if ok, st, res, _ := f.a.AcquireOrReservation(ctx, time.Second); ok || res == nil {
		t.Fatalf("acquired during the hold-off: %+v", st)
	}
	deadline := time.Now().Add(10 * time.Second)
	for f.c.Exists(ctx, f.a.Keys().Resign).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("reservation did not expire")
		}
		time.Sleep(20 * time.Millisecond)
	}
	mustAcquire(t, f.a, time.Second)
}

// The resign event parses, and its word is "resign" (a parser that does not know it drops
// the message: see Subscription).
func TestParseResignEvent(t *testing.T) {
	ev, err := leasekit.ParseEvent("resign 15000 v1:17:abc:pod a")
	want := lease.Record{Token: 17, Instance: "abc", Identity: "pod a"}
	if err != nil || ev.Kind != leasekit.ResignRequested || ev.TTL != 15*time.Second || ev.Record != want {
		t.Fatalf("ParseEvent = %+v, %v", ev, err)
	}
	if ev.Kind.String() != "resign" {
		t.Fatalf("String() = %q", ev.Kind.String())
	}
}
