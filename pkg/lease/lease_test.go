package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

func newLease(t testing.TB, c redis.UniversalClient, name, identity string) *leasekit.Lease {
	t.Helper()
	l, err := leasekit.New(c, name, lease.Options{Identity: identity})
	if err != nil {
		t.Fatalf("lease.New: %v", err)
	}
	return l
}

func mustAcquire(t testing.TB, l *leasekit.Lease, ttl time.Duration) lease.Record {
	t.Helper()
	ok, st, err := l.Acquire(context.Background(), ttl)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	if !ok {
		t.Fatalf("Acquire: lease held by %+v, want it acquired", st.Record)
	}
	return st.Record
}

func TestAcquireRenewRelease(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	a := newLease(t, c, "job", "pod-a")
	b := newLease(t, c, "job", "pod-b")

	term := mustAcquire(t, a, 10*time.Second)
	if term.Identity != "pod-a" || term.Instance != a.Instance() || term.Token <= 0 {
		t.Fatalf("record = %+v, want identity pod-a, instance %s, a positive token", term, a.Instance())
	}
	if got := c.Get(ctx, "elector:{job}:lease").Val(); got != term.String() {
		t.Fatalf("lease key holds %q, want %q", got, term.String())
	}
	if got, err := a.LastToken(ctx); err != nil || got != term.Token {
		t.Fatalf("LastToken = %d, %v; want %d", got, err, term.Token)
	}

	ok, st, err := b.Acquire(ctx, 10*time.Second)
	if err != nil || ok {
		t.Fatalf("second Acquire = %v, %v; want false, nil", ok, err)
	}
	if st.Record != term || st.TTL <= 9*time.Second || st.TTL > 10*time.Second {
		t.Fatalf("second Acquire status = %+v, want holder %+v with ttl in (9s, 10s]", st, term)
	}

	got, err := b.Get(ctx)
	if err != nil || !got.Held || got.Record != term {
		t.Fatalf("Get = %+v, %v; want held by %+v", got, err, term)
	}

	if ok, err := a.Renew(ctx, term, 20*time.Second); err != nil || !ok {
		t.Fatalf("Renew = %v, %v; want true", ok, err)
	}
	if pttl := c.PTTL(ctx, a.Keys().Lease).Val(); pttl <= 19*time.Second {
		t.Fatalf("PTTL after renew = %v, want > 19s", pttl)
	}
	if ok, err := a.Release(ctx, term); err != nil || !ok {
		t.Fatalf("Release = %v, %v; want true", ok, err)
	}
	if n := c.Exists(ctx, a.Keys().Lease).Val(); n != 0 {
		t.Fatalf("lease key still exists after release")
	}
	if got, err := b.Get(ctx); err != nil || got.Held {
		t.Fatalf("Get after release = %+v, %v; want not held", got, err)
	}
	next := mustAcquire(t, b, time.Second)
	if next.Token <= term.Token {
		t.Fatalf("next token %d is not above %d", next.Token, term.Token)
	}
}

func TestAcquireIsIdempotentForTheSameInstance(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	a := newLease(t, c, "job", "pod-a")
	term := mustAcquire(t, a, 2*time.Second)

	ok, st, err := a.Acquire(ctx, 30*time.Second)
	if err != nil || !ok || st.Record != term {
		t.Fatalf("re-Acquire = %v, %+v, %v; want the same term %+v", ok, st, err, term)
	}
	if pttl := c.PTTL(ctx, a.Keys().Lease).Val(); pttl <= 29*time.Second {
		t.Fatalf("re-Acquire did not extend the lease: PTTL %v", pttl)
	}
	if last, _ := a.LastToken(ctx); last != term.Token {
		t.Fatalf("re-Acquire handed out token %d; want none beyond %d", last, term.Token)
	}
}

func TestSameIdentityOtherProcessIsNotOwner(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	a := newLease(t, c, "job", "pod-a")
	twin := newLease(t, c, "job", "pod-a") // same identity, another instance id
	if a.Instance() == twin.Instance() {
		t.Fatalf("two leases got the same instance id %q", a.Instance())
	}
	term := mustAcquire(t, a, 10*time.Second)
	if ok, _, err := twin.Acquire(ctx, 10*time.Second); err != nil || ok {
		t.Fatalf("twin Acquire = %v, %v; want false", ok, err)
	}
	forged := term
	forged.Instance = twin.Instance()
	if ok, err := twin.Renew(ctx, forged, 10*time.Second); err != nil || ok {
		t.Fatalf("twin Renew = %v, %v; want false", ok, err)
	}
	if ok, err := twin.Release(ctx, forged); err != nil || ok {
		t.Fatalf("twin Release = %v, %v; want false", ok, err)
	}
	if st, _ := a.Get(ctx); st.Record != term {
		t.Fatalf("lease changed to %+v", st.Record)
	}
}

func TestRenewByNonOwnerOrAfterExpiryFails(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	a := newLease(t, c, "job", "pod-a")
	b := newLease(t, c, "job", "pod-b")

	// Non-owner: b presents a record of its own with a's token.
	term := mustAcquire(t, a, 5*time.Second)
	before := c.PTTL(ctx, a.Keys().Lease).Val()
	stale := lease.Record{Token: term.Token, Instance: b.Instance(), Identity: "pod-b"}
	if ok, err := b.Renew(ctx, stale, time.Minute); err != nil || ok {
		t.Fatalf("non-owner Renew = %v, %v; want false, nil", ok, err)
	}
	if after := c.PTTL(ctx, a.Keys().Lease).Val(); after > before {
		t.Fatalf("non-owner Renew extended the TTL from %v to %v", before, after)
	}
	// A record of an older term of the same owner is not the owner either.
	old := term
	old.Token--
	if ok, err := a.Renew(ctx, old, time.Minute); err != nil || ok {
		t.Fatalf("Renew with an older term = %v, %v; want false", ok, err)
	}

	// After expiry: the key is gone, renew must not resurrect it.
	short := newLease(t, c, "short", "pod-a")
	sterm := mustAcquire(t, short, 50*time.Millisecond)
	waitGone(t, c, short.Keys().Lease)
	if ok, err := short.Renew(ctx, sterm, time.Minute); err != nil || ok {
		t.Fatalf("Renew after expiry = %v, %v; want false", ok, err)
	}
	if n := c.Exists(ctx, short.Keys().Lease).Val(); n != 0 {
		t.Fatalf("Renew after expiry recreated the key")
	}
	// After expiry and a new term: the old term's renew fails and leaves the new TTL alone.
	other := newLease(t, c, "short", "pod-b")
	oterm := mustAcquire(t, other, 3*time.Second)
	if ok, err := short.Renew(ctx, sterm, time.Minute); err != nil || ok {
		t.Fatalf("Renew of an expired term over a new one = %v, %v; want false", ok, err)
	}
	if pttl := c.PTTL(ctx, short.Keys().Lease).Val(); pttl > 3*time.Second {
		t.Fatalf("stale Renew extended the new term's TTL to %v", pttl)
	}
	if oterm.Token <= sterm.Token {
		t.Fatalf("token after expiry %d is not above %d", oterm.Token, sterm.Token)
	}
}

func waitGone(t testing.TB, c redis.UniversalClient, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Exists(context.Background(), key).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("key %s did not expire", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestReleaseByNonOwnerKeepsLeaseAndOwnerReleaseNotifies(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	a := newLease(t, c, "job", "pod-a")
	b := newLease(t, c, "job", "pod-b")

	sub, err := b.Subscribe(ctx)
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer sub.Close()

	term := mustAcquire(t, a, 10*time.Second)
	expectEvent(t, sub, leasekit.Acquired, term)

	forged := lease.Record{Token: term.Token, Instance: b.Instance(), Identity: "pod-b"}
	if ok, err := b.Release(ctx, forged); err != nil || ok {
		t.Fatalf("non-owner Release = %v, %v; want false", ok, err)
	}
	if st, err := b.Get(ctx); err != nil || st.Record != term {
		t.Fatalf("after non-owner Release: %+v, %v; want still held by %+v", st, err, term)
	}
	select {
	case ev := <-sub.Events():
		t.Fatalf("non-owner Release published %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}

	if ok, err := a.Release(ctx, term); err != nil || !ok {
		t.Fatalf("owner Release = %v, %v; want true", ok, err)
	}
	expectEvent(t, sub, leasekit.Released, term)

	// A second release of the same term is a no-op and says so.
	if ok, err := a.Release(ctx, term); err != nil || ok {
		t.Fatalf("second Release = %v, %v; want false", ok, err)
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, open := <-sub.Events(); open {
		t.Fatalf("Events channel still open after Close")
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func expectEvent(t testing.TB, sub *leasekit.Subscription, kind leasekit.EventKind, rec lease.Record) leasekit.Event {
	t.Helper()
	select {
	case ev := <-sub.Events():
		if ev.Kind != kind || ev.Record != rec {
			t.Fatalf("event = %v %+v, want %v %+v", ev.Kind, ev.Record, kind, rec)
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatalf("no %v event within 5s", kind)
	}
	return leasekit.Event{}
}

func TestFiftyContendersExactlyOneWinsEachRound(t *testing.T) {
	const contenders, rounds = 50, 200
	c := redistest.Start(t).Client(t)
	leases := make([]*leasekit.Lease, contenders)
	for i := range leases {
		leases[i] = newLease(t, c, "race", fmt.Sprintf("pod-%d", i))
	}
	var last int64
	for round := 0; round < rounds; round++ {
		var winners atomic.Int32
		var winner atomic.Pointer[lease.Record]
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make(chan error, contenders)
		for _, l := range leases {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				ok, st, err := l.Acquire(context.Background(), 10*time.Second)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					winners.Add(1)
					winner.Store(&st.Record)
				}
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("round %d: %v", round, err)
		}
		if n := winners.Load(); n != 1 {
			t.Fatalf("round %d: %d winners, want exactly 1", round, n)
		}
		w := *winner.Load()
		if w.Token <= last {
			t.Fatalf("round %d: token %d not above previous %d", round, w.Token, last)
		}
		last = w.Token
		var owner *leasekit.Lease
		for _, l := range leases {
			if l.Instance() == w.Instance {
				owner = l
			}
		}
		if ok, err := owner.Release(context.Background(), w); err != nil || !ok {
			t.Fatalf("round %d: Release = %v, %v", round, ok, err)
		}
	}
}

func TestTokensIncreaseAcrossAcquisitionsAndDataLoss(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client(t)
	l := newLease(t, c, "tokens", "pod-a")
	var last int64
	for i := 0; i < 1000; i++ {
		term := mustAcquire(t, l, time.Second)
		if term.Token <= last {
			t.Fatalf("acquisition %d: token %d not above %d", i, term.Token, last)
		}
		last = term.Token
		if ok, err := l.Release(ctx, term); err != nil || !ok {
			t.Fatalf("Release: %v, %v", ok, err)
		}
	}
	term := mustAcquire(t, l, time.Minute)
	last = term.Token

	srv.Restart() // no persistence: the lease and the token counter are gone
	if n, err := l.LastToken(ctx); err != nil || n != 0 {
		t.Fatalf("after restart LastToken = %d, %v; want the counter lost (0)", n, err)
	}
	if ok, err := l.Renew(ctx, term, time.Minute); err != nil || ok {
		t.Fatalf("Renew after data loss = %v, %v; want false", ok, err)
	}
	after := mustAcquire(t, l, time.Minute)
	if after.Token <= last {
		t.Fatalf("token after data loss %d is not above %d", after.Token, last)
	}
}

func TestTokenCounterAheadOfTheClockStillIncreases(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	l := newLease(t, c, "ahead", "pod-a")
	const ahead = int64(1) << 52 // far beyond server time in microseconds
	c.Set(ctx, l.Keys().Token, ahead, 0)
	term := mustAcquire(t, l, time.Second)
	if term.Token != ahead+1 {
		t.Fatalf("token = %d, want %d", term.Token, ahead+1)
	}
	if got := c.Get(ctx, l.Keys().Token).Val(); got != fmt.Sprint(ahead+1) {
		t.Fatalf("token key = %q, want %d written as a plain integer", got, ahead+1)
	}
}

func TestScriptsReloadAfterScriptFlush(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	l := newLease(t, c, "flush", "pod-a")
	term := mustAcquire(t, l, time.Second)
	for _, step := range []func() (bool, error){
		func() (bool, error) { return l.Renew(ctx, term, time.Second) },
		func() (bool, error) { return l.Release(ctx, term) },
		func() (bool, error) { ok, _, err := l.Acquire(ctx, time.Second); return ok, err },
	} {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if ok, err := step(); err != nil || !ok {
			t.Fatalf("after SCRIPT FLUSH: %v, %v; want true", ok, err)
		}
	}
}

func TestUnheldAndForeignValues(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	l := newLease(t, c, "foreign", "pod-a")
	if st, err := l.Get(ctx); err != nil || st.Held || st.Record != (lease.Record{}) {
		t.Fatalf("Get on empty = %+v, %v", st, err)
	}
	c.Set(ctx, l.Keys().Lease, "someone else's lock", 0)
	if _, _, err := l.Acquire(ctx, time.Second); !errors.Is(err, leasewire.ErrBadRecord) {
		t.Fatalf("Acquire over a foreign value: err = %v, want ErrBadRecord", err)
	}
	if _, err := l.Get(ctx); !errors.Is(err, leasewire.ErrBadRecord) {
		t.Fatalf("Get of a foreign value: err = %v, want ErrBadRecord", err)
	}
	// A record without expiry (written by hand) is reported as such.
	c.Set(ctx, l.Keys().Lease, "v1:7:abc:pod-x", 0)
	_, st, err := l.Acquire(ctx, time.Second)
	if err != nil || st.TTL != lease.NoExpiry || st.Record.Identity != "pod-x" {
		t.Fatalf("Acquire over a record without expiry = %+v, %v", st, err)
	}
	if st, err := l.Get(ctx); err != nil || st.TTL != lease.NoExpiry {
		t.Fatalf("Get of a record without expiry = %+v, %v", st, err)
	}
}

func TestBadInputAndBadState(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	c := srv.Client(t)

	for _, tc := range []struct {
		name, lease string
		opts        lease.Options
		want        string
	}{
		{"empty name", "", lease.Options{}, "must not be empty"},
		{"brace in name", "a{b", lease.Options{}, "hash tag"},
		{"space in name", "a b", lease.Options{}, "whitespace"},
		{"long name", strings.Repeat("n", leasewire.MaxNameLen+1), lease.Options{}, "at most"},
		{"bad prefix", "job", lease.Options{Prefix: "a}"}, "key prefix"},
		{"newline identity", "job", lease.Options{Identity: "pod\nx"}, "control characters"},
		{"long identity", "job", lease.Options{Identity: strings.Repeat("i", leasewire.MaxIdentityLen+1)}, "at most"},
	} {
		if _, err := leasekit.New(c, tc.lease, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: New error = %v, want it to mention %q", tc.name, err, tc.want)
		}
	}
	if _, err := leasekit.NewWith(c, "job", lease.Options{Identity: "a"}, leasekit.Ext{Instance: "x:y"}); err == nil || !strings.Contains(err.Error(), "instance id") {
		t.Errorf("bad instance: NewWith error = %v, want it to mention %q", err, "instance id")
	}
	if _, err := leasekit.New(nil, "job", lease.Options{}); err == nil || !strings.Contains(err.Error(), "nil") {
		t.Errorf("nil client: err = %v", err)
	}

	l := newLease(t, c, "job", "pod-a")
	for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, 1500 * time.Microsecond} {
		if _, _, err := l.Acquire(ctx, ttl); err == nil || !strings.Contains(err.Error(), "ttl") {
			t.Errorf("Acquire ttl %v: err = %v, want a ttl error", ttl, err)
		}
		if _, err := l.Renew(ctx, lease.Record{Token: 1, Instance: "x", Identity: "y"}, ttl); err == nil || !strings.Contains(err.Error(), "ttl") {
			t.Errorf("Renew ttl %v: err = %v, want a ttl error", ttl, err)
		}
	}
	observer := newLease(t, c, "job", "")
	if _, _, err := observer.Acquire(ctx, time.Second); err == nil || !strings.Contains(err.Error(), "identity") {
		t.Errorf("Acquire without identity: err = %v", err)
	}

	// Keys of the wrong type.
	c.HSet(ctx, l.Keys().Lease, "f", "v")
	if _, _, err := l.Acquire(ctx, time.Second); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), `"job"`) {
		t.Errorf("Acquire over a hash: err = %v, want WRONGTYPE naming the lease", err)
	}
	if _, err := l.Renew(ctx, lease.Record{Token: 1, Instance: "x", Identity: "y"}, time.Second); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Renew over a hash: err = %v", err)
	}
	if _, err := l.Get(ctx); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Get of a hash: err = %v", err)
	}
	c.Del(ctx, l.Keys().Lease)
	c.LPush(ctx, l.Keys().Token, "x")
	if _, _, err := l.Acquire(ctx, time.Second); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Acquire with a list at the token key: err = %v", err)
	}
	if n := c.Exists(ctx, l.Keys().Lease).Val(); n != 0 {
		t.Errorf("failed Acquire left the lease key behind")
	}
	c.Del(ctx, l.Keys().Token)
	// The terms key too: it is read before anything is written (it used to be read after the
	// lease and token keys were written, which then stayed behind the error).
	c.LPush(ctx, l.Keys().Terms, "x")
	if _, _, err := l.Acquire(ctx, time.Second); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("Acquire with a list at the terms key: err = %v", err)
	}
	if n := c.Exists(ctx, l.Keys().Lease, l.Keys().Token).Val(); n != 0 {
		t.Errorf("failed Acquire (terms key of the wrong type) left %d of the lease and token keys behind", n)
	}
	c.Del(ctx, l.Keys().Terms)
	c.Set(ctx, l.Keys().Token, "not-a-number", 0)
	if _, _, err := l.Acquire(ctx, time.Second); err == nil || !strings.Contains(err.Error(), "does not hold an integer") {
		t.Errorf("Acquire with a non-integer token: err = %v", err)
	}
	if n := c.Exists(ctx, l.Keys().Lease).Val(); n != 0 {
		t.Errorf("failed Acquire left the lease key behind")
	}
	c.Del(ctx, l.Keys().Token)

	// A user whose ACL refuses EVALSHA gets an error naming the command.
	if err := c.Do(ctx, "ACL", "SETUSER", "noscript", "on", ">pw", "~*", "+@all", "-evalsha").Err(); err != nil {
		t.Fatal(err)
	}
	limited := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "noscript", Password: "pw", ContextTimeoutEnabled: true})
	defer limited.Close()
	ll := newLease(t, limited, "job", "pod-a")
	if _, _, err := ll.Acquire(ctx, time.Second); err == nil || !strings.Contains(strings.ToLower(err.Error()), "evalsha") {
		t.Errorf("Acquire with EVALSHA refused: err = %v, want it to name evalsha", err)
	}

	// A closed client.
	closed := redis.NewClient(srv.Options())
	closed.Close()
	cl := newLease(t, closed, "job", "pod-a")
	if _, _, err := cl.Acquire(ctx, time.Second); !errors.Is(err, redis.ErrClosed) {
		t.Errorf("Acquire on a closed client: err = %v, want redis.ErrClosed", err)
	}
	if _, err := cl.Subscribe(ctx); err == nil {
		t.Errorf("Subscribe on a closed client succeeded")
	}
}

func TestClusterScripts(t *testing.T) {
	ctx := context.Background()
	cluster := redistest.StartCluster(t, 3)
	c := cluster.Client(t)
	names := []string{"alpha", "beta", "gamma", "delta", "epsilon", "zeta"}
	slots := map[int64]bool{}
	for _, name := range names {
		a := newLease(t, c, name, "pod-a")
		b := newLease(t, c, name, "pod-b")
		sub, err := b.Subscribe(ctx)
		if err != nil {
			t.Fatalf("%s: Subscribe: %v", name, err)
		}
		term := mustAcquire(t, a, 5*time.Second)
		expectEvent(t, sub, leasekit.Acquired, term)
		if ok, _, err := b.Acquire(ctx, 5*time.Second); err != nil || ok {
			t.Fatalf("%s: contender Acquire = %v, %v", name, ok, err)
		}
		if ok, err := a.Renew(ctx, term, 5*time.Second); err != nil || !ok {
			t.Fatalf("%s: Renew = %v, %v", name, ok, err)
		}
		if st, err := b.Get(ctx); err != nil || st.Record != term {
			t.Fatalf("%s: Get = %+v, %v", name, st, err)
		}
		if ok, err := a.Release(ctx, term); err != nil || !ok {
			t.Fatalf("%s: Release = %v, %v", name, ok, err)
		}
		expectEvent(t, sub, leasekit.Released, term)
		next := mustAcquire(t, b, 5*time.Second)
		if next.Token <= term.Token {
			t.Fatalf("%s: token %d not above %d", name, next.Token, term.Token)
		}
		sub.Close()
		s1 := c.ClusterKeySlot(ctx, a.Keys().Lease).Val()
		if s2 := c.ClusterKeySlot(ctx, a.Keys().Token).Val(); s1 != s2 {
			t.Fatalf("%s: lease key slot %d != token key slot %d", name, s1, s2)
		}
		slots[s1] = true
	}
	if len(slots) < 2 {
		t.Fatalf("all names landed in one slot; the test does not cover several nodes")
	}
}

func TestRenewAnnouncesOnlyWhenAsked(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	quiet := newLease(t, c, "job", "pod-a")
	loud, err := leasekit.NewWith(c, "job", lease.Options{Identity: "pod-b"}, leasekit.Ext{AnnounceRenewals: true})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := quiet.Subscribe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	term := mustAcquire(t, quiet, 3*time.Second)
	if ev := expectEvent(t, sub, leasekit.Acquired, term); ev.TTL != 3*time.Second {
		t.Fatalf("acquired event TTL = %v, want 3s", ev.TTL)
	}
	if ok, err := quiet.Renew(ctx, term, 4*time.Second); err != nil || !ok {
		t.Fatalf("Renew = %v, %v", ok, err)
	}
	if ok, err := quiet.Release(ctx, term); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	// The renew of a lease without AnnounceRenewals published nothing: next comes the release.
	expectEvent(t, sub, leasekit.Released, term)

	term = mustAcquire(t, loud, 3*time.Second)
	expectEvent(t, sub, leasekit.Acquired, term)
	if ok, err := loud.Renew(ctx, term, 4*time.Second); err != nil || !ok {
		t.Fatalf("Renew = %v, %v", ok, err)
	}
	if ev := expectEvent(t, sub, leasekit.Renewed, term); ev.TTL != 4*time.Second {
		t.Fatalf("renewed event TTL = %v, want 4s", ev.TTL)
	}
	// A failed renew announces nothing.
	stale := term
	stale.Token--
	if ok, err := loud.Renew(ctx, stale, 4*time.Second); err != nil || ok {
		t.Fatalf("stale Renew = %v, %v", ok, err)
	}
	select {
	case ev := <-sub.Events():
		t.Fatalf("failed renew published %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}
}

// Lua numbers are doubles: past 2^53 - 1 the next token may round to the same or a smaller
// number (with the counter at 2^53 + 1 two acquisitions both got 2^53). Acquire refuses
// instead, with an error that says why, and writes nothing.
func TestTokenBeyondExactRangeIsRefused(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	l := newLease(t, c, "range", "pod-a")
	const maxExact = int64(1)<<53 - 1
	for _, counter := range []int64{maxExact, maxExact + 1, maxExact + 2, 1 << 60} {
		c.Set(ctx, l.Keys().Token, counter, 0)
		ok, st, err := l.Acquire(ctx, time.Second)
		if !errors.Is(err, lease.ErrTokenRange) || !strings.Contains(err.Error(), "2^53-1") || !strings.Contains(err.Error(), `"range"`) {
			t.Fatalf("counter %d: Acquire = %v, %+v, %v; want ErrTokenRange naming the lease and the limit", counter, ok, st, err)
		}
		if n := c.Exists(ctx, l.Keys().Lease).Val(); n != 0 {
			t.Fatalf("counter %d: a refused Acquire left the lease key behind", counter)
		}
		if got := c.Get(ctx, l.Keys().Token).Val(); got != fmt.Sprint(counter) {
			t.Fatalf("counter %d: token key changed to %q", counter, got)
		}
	}
	// The last exact integer is still handed out, exactly.
	c.Set(ctx, l.Keys().Token, maxExact-1, 0)
	if term := mustAcquire(t, l, time.Second); term.Token != maxExact {
		t.Fatalf("token = %d, want %d", term.Token, maxExact)
	}
	// Batches refuse the same way.
	l2 := newLease(t, c, "range2", "pod-a")
	c.Set(ctx, l2.Keys().Token, maxExact+2, 0)
	b := leasekit.NewBatch(c)
	r := b.Acquire(l2, time.Second)
	_ = b.Exec(ctx)
	if !errors.Is(r.Err, lease.ErrTokenRange) {
		t.Fatalf("batched Acquire: err = %v, want ErrTokenRange", r.Err)
	}
}
