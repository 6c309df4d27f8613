package election

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/redisfail"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/lease"
)

// Deterministic tests of campaign and lead: the Elector runs against a fake store (the seam
// to Redis) and a fake clock. Every call to the store blocks until the test answers it, and
// every timer the Elector arms is reported to the test, so the test knows exactly what the
// Elector waits for before it moves the clock. Nothing sleeps; a wait of seconds only bounds
// how long a broken Elector may take to be reported.

// The timing of the issue that found the late-reply overlap.
const (
	seamLease = 300 * time.Millisecond
	seamRenew = 200 * time.Millisecond
	seamRetry = 50 * time.Millisecond
)

// within bounds how long the test waits for the Elector to do what it must.
const within = 10 * time.Second

// testClock is a fake clock that reports the target time of every timer armed on it.
type testClock struct {
	*clocktesting.FakeClock
	armed chan time.Time
}

func newTestClock() *testClock {
	return &testClock{FakeClock: clocktesting.NewFakeClock(time.Unix(1_000_000, 0)), armed: make(chan time.Time, 1024)}
}

func (c *testClock) NewTimer(d time.Duration) clock.Timer {
	t := c.FakeClock.NewTimer(d)
	c.armed <- c.Now().Add(d)
	return &testTimer{Timer: t, c: c}
}

func (c *testClock) After(d time.Duration) <-chan time.Time {
	ch := c.FakeClock.After(d)
	c.armed <- c.Now().Add(d)
	return ch
}

type testTimer struct {
	clock.Timer
	c *testClock
}

func (t *testTimer) Reset(d time.Duration) bool {
	active := t.Timer.Reset(d)
	t.c.armed <- t.c.Now().Add(d)
	return active
}

// call is one call of the Elector to the store, answered by the test.
type call struct {
	kind  string // acquire, renew, release, subscribe
	ctx   context.Context
	now   time.Time // fake time of the call
	term  lease.Record
	reply chan reply
}

type reply struct {
	ok  bool
	st  lease.Status
	res *leasekit.Reservation
	sub subscription
	err error
}

func (c *call) answer(r reply) { c.reply <- r }

type fakeStore struct {
	clk   *testClock
	calls chan *call
}

func (s *fakeStore) do(ctx context.Context, kind string, term lease.Record) reply {
	c := &call{kind: kind, ctx: ctx, now: s.clk.Now(), term: term, reply: make(chan reply, 1)}
	s.calls <- c
	return <-c.reply
}

func (s *fakeStore) acquire(ctx context.Context, _ time.Duration) (bool, lease.Status, *leasekit.Reservation, error) {
	r := s.do(ctx, "acquire", lease.Record{})
	return r.ok, r.st, r.res, r.err
}

func (s *fakeStore) renew(ctx context.Context, term lease.Record, _ time.Duration) (bool, error) {
	r := s.do(ctx, "renew", term)
	return r.ok, r.err
}

func (s *fakeStore) release(ctx context.Context, term lease.Record) (bool, error) {
	r := s.do(ctx, "release", term)
	return r.ok, r.err
}

func (s *fakeStore) subscribe(ctx context.Context) (subscription, error) {
	r := s.do(ctx, "subscribe", lease.Record{})
	if r.err != nil {
		return nil, r.err
	}
	return r.sub, nil
}

// fakeSub is a subscription whose events the test sends; closing events is a broken
// connection.
type fakeSub struct {
	events chan leasekit.Event
	once   sync.Once
}

func newFakeSub() *fakeSub { return &fakeSub{events: make(chan leasekit.Event, 16)} }

func (s *fakeSub) Events() <-chan leasekit.Event { return s.events }
func (s *fakeSub) Close() error                  { s.broken(); return nil }
func (s *fakeSub) broken()                       { s.once.Do(func() { close(s.events) }) }

type started struct {
	token int64
	ctx   context.Context
	at    time.Time
}

// harness runs one Elector on a fake store and clock.
type harness struct {
	t       *testing.T
	clk     *testClock
	st      *fakeStore
	e       *Elector
	sub     *fakeSub // the last subscription handed out
	started chan started
	stopped chan time.Time
	cancel  context.CancelFunc
	done    chan error
	pending []*call // calls received while waiting for a timer that was armed before them
}

func mine(token int64) lease.Record {
	return lease.Record{Token: token, Instance: "i-me", Identity: "me"}
}

func theirs(token int64) lease.Record {
	return lease.Record{Token: token, Instance: "i-other", Identity: "other"}
}

func held(rec lease.Record, ttl time.Duration) lease.Status {
	return lease.Status{Held: true, Record: rec, TTL: ttl}
}

func startHarness(t *testing.T, mutate func(*Config)) *harness {
	t.Helper()
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}) // never dialled
	t.Cleanup(func() { _ = client.Close() })
	clk := newTestClock()
	h := &harness{t: t, clk: clk, st: &fakeStore{clk: clk, calls: make(chan *call, 64)},
		started: make(chan started, 16), stopped: make(chan time.Time, 16), done: make(chan error, 1)}
	cfg := Config{
		Client: client, LeaseName: "seam", Identity: "me",
		LeaseDuration: seamLease, RenewDeadline: seamRenew, RetryPeriod: seamRetry,
		Callbacks: Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				h.started <- started{token: TokenFrom(ctx), ctx: ctx, at: clk.Now()}
				<-ctx.Done()
			},
			OnStoppedLeading: func() { h.stopped <- clk.Now() },
		},
	}
	if mutate != nil {
		mutate(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.store, e.clock = h.st, clk
	h.e = e
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- e.Run(ctx) }()
	t.Cleanup(h.stop)
	if at := h.arm(); at.Sub(clk.Now()) != time.Hour { // campaign's idle timer
		t.Fatalf("first timer armed for %v, want campaign's idle hour", at.Sub(clk.Now()))
	}
	return h
}

// stop cancels Run and answers what is left until it returns.
func (h *harness) stop() {
	h.cancel()
	if h.done == nil {
		return
	}
	for _, c := range h.pending {
		c.answer(reply{err: errors.New("test over")})
	}
	deadline := time.After(within)
	for {
		select {
		case <-h.done:
			h.done = nil
			return
		case c := <-h.st.calls:
			c.answer(reply{err: errors.New("test over")})
		case <-h.clk.armed:
		case <-deadline:
			h.t.Errorf("Run did not return within %v of the cancel", within)
			return
		}
	}
}

// next returns the next call of kind, answering subscriptions on the way; any other call,
// a term that starts or ends, and Run returning fail the test.
func (h *harness) next(kind string) *call {
	h.t.Helper()
	deadline := time.After(within)
	for {
		if len(h.pending) > 0 {
			c := h.pending[0]
			h.pending = h.pending[1:]
			h.st.calls <- c // handled below, in order
		}
		select {
		case c := <-h.st.calls:
			if c.kind == kind {
				return c
			}
			if c.kind == "subscribe" {
				h.sub = newFakeSub()
				c.answer(reply{sub: h.sub})
				continue
			}
			c.answer(reply{err: errors.New("unexpected call")}) // so that Run can return
			h.t.Fatalf("%s call (term %v) at +%v while waiting for %s", c.kind, c.term, h.elapsed(c.now), kind)
		case s := <-h.started:
			h.t.Fatalf("OnStartedLeading (token %d) at +%v while waiting for %s", s.token, h.elapsed(s.at), kind)
		case at := <-h.stopped:
			h.t.Fatalf("OnStoppedLeading at +%v while waiting for %s", h.elapsed(at), kind)
		case err := <-h.done:
			h.t.Fatalf("Run returned %v while waiting for %s", err, kind)
		case <-deadline:
			h.t.Fatalf("no %s call within %v", kind, within)
		}
	}
}

// arm returns the target of the next timer armed, failing on any call to the store.
func (h *harness) arm() time.Time {
	h.t.Helper()
	select {
	case at := <-h.clk.armed:
		return at
	case c := <-h.st.calls:
		// The Elector may have armed a timer and then called the store before this select
		// looked: take the timer, keep the call for next.
		select {
		case at := <-h.clk.armed:
			h.pending = append(h.pending, c)
			return at
		default:
		}
		c.answer(reply{err: errors.New("unexpected call")})
		h.t.Fatalf("%s call at +%v while waiting for a timer to be armed", c.kind, h.elapsed(c.now))
	case s := <-h.started:
		h.t.Fatalf("OnStartedLeading (token %d) while waiting for a timer to be armed", s.token)
	case <-time.After(within):
		h.t.Fatalf("no timer armed within %v", within)
	}
	return time.Time{}
}

// armFor checks that the next timer armed fires after d (plus up to maxJitter with jitter).
func (h *harness) armFor(d time.Duration, withJitter bool) {
	h.t.Helper()
	got := h.arm().Sub(h.clk.Now())
	if got < d || got > d+maxJitter || (!withJitter && got != d) {
		h.t.Fatalf("timer armed for %v, want %v (jitter %v)", got, d, withJitter)
	}
}

func (h *harness) waitStart() started {
	h.t.Helper()
	select {
	case s := <-h.started:
		return s
	case c := <-h.st.calls:
		c.answer(reply{err: errors.New("unexpected call")})
		h.t.Fatalf("%s call while waiting for OnStartedLeading", c.kind)
	case <-time.After(within):
		h.t.Fatalf("OnStartedLeading did not run within %v", within)
	}
	return started{}
}

// waitStop waits for OnStoppedLeading and returns its fake time. Renewals sent meanwhile
// are left unanswered (a lost reply).
func (h *harness) waitStop() time.Time {
	h.t.Helper()
	for {
		select {
		case at := <-h.stopped:
			return at
		case c := <-h.st.calls:
			if c.kind != "renew" {
				// OnStoppedLeading may have returned and the next call (the release) been
				// made before this select looked: both were ready and select chose the call.
				// Keep the call for next; it is out of order only if OnStoppedLeading has
				// not run yet (the store blocks the caller until the call is answered).
				select {
				case at := <-h.stopped:
					h.pending = append(h.pending, c)
					return at
				default:
				}
				c.answer(reply{err: errors.New("unexpected call")})
				h.t.Fatalf("%s call while waiting for OnStoppedLeading", c.kind)
			}
			defer c.answer(reply{err: errors.New("lost")})
		case <-h.clk.armed:
		case <-time.After(within):
			h.t.Fatalf("OnStoppedLeading not called within %v", within)
		}
	}
}

func (h *harness) waitRun() error {
	h.t.Helper()
	select {
	case err := <-h.done:
		h.done = nil
		return err
	case c := <-h.st.calls:
		c.answer(reply{err: errors.New("unexpected call")})
		h.t.Fatalf("%s call while waiting for Run to return", c.kind)
	case s := <-h.started:
		h.t.Fatalf("OnStartedLeading (token %d) while waiting for Run to return", s.token)
	case <-time.After(within):
		h.t.Fatalf("Run did not return within %v", within)
	}
	return nil
}

func (h *harness) elapsed(at time.Time) time.Duration { return at.Sub(time.Unix(1_000_000, 0)) }

// noStart fails when a term started.
func (h *harness) noStart() {
	h.t.Helper()
	select {
	case s := <-h.started:
		h.t.Fatalf("OnStartedLeading ran (token %d at +%v)", s.token, h.elapsed(s.at))
	default:
	}
}

// lead makes the Elector win at once and returns the start of its term.
func (h *harness) lead(token int64) (sent time.Time, s started) {
	h.t.Helper()
	c := h.next("acquire")
	c.answer(reply{ok: true, st: held(mine(token), seamLease)})
	s = h.waitStart()
	if s.token != token {
		h.t.Fatalf("term started with token %d, want %d", s.token, token)
	}
	return c.now, s
}

// #13.1: a winning acquire reply that comes at or after send time + RenewDeadline never
// starts a term: the lease may already have expired in Redis and another replica lead. It
// is a failed attempt: the record is released (owner-checked) and the next attempt follows
// the backoff. A reply one nanosecond earlier starts a term whose deadline is that same
// instant + 1ns.
func TestSeamLateAcquireReply(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		lead  bool
	}{
		{"1ns before the deadline", seamRenew - time.Nanosecond, true},
		{"at the deadline", seamRenew, false},
		{"after the deadline", seamRenew + 50*time.Millisecond, false},
		{"after the lease expired", seamLease + 100*time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHarness(t, nil)
			c := h.next("acquire")
			sent := c.now
			h.clk.Step(tc.delay)
			c.answer(reply{ok: true, st: held(mine(7), seamLease)})
			if tc.lead {
				s := h.waitStart()
				if d, k := h.arm(), h.arm(); !d.Equal(sent.Add(seamRenew)) || !k.Equal(sent.Add(seamRetry)) {
					t.Fatal("deadline and tick timers not counted from the send time")
				}
				h.clk.Step(sent.Add(seamRenew).Sub(h.clk.Now()))
				if at := h.waitStop(); !at.Equal(sent.Add(seamRenew)) || s.ctx.Err() == nil {
					t.Fatalf("stepped down at +%v (work ctx %v), want exactly at the deadline +%v", at.Sub(sent), s.ctx.Err(), seamRenew)
				}
				return
			}
			r := h.next("release")
			if r.term != mine(7) {
				t.Fatalf("released %v, want the late term %v", r.term, mine(7))
			}
			r.answer(reply{ok: false}) // somebody else holds it by now
			h.armFor(seamRetry, true)  // backoff from 50ms
			h.noStart()
			h.clk.Step(seamRetry + maxJitter)
			c = h.next("acquire")
			c.answer(reply{ok: true, st: held(mine(8), seamLease)}) // a new record: 7 was released
			if s := h.waitStart(); s.token != 8 {
				t.Fatalf("token %d", s.token)
			}
		})
	}
}

// A lost acquire reply (an error) is retried after the backoff; the term's deadline counts
// from the send time of the attempt that won, not the first one.
func TestSeamLostAcquireReply(t *testing.T) {
	h := startHarness(t, nil)
	c := h.next("acquire")
	h.clk.Step(150 * time.Millisecond)
	c.answer(reply{err: fmt.Errorf("acquire: %w", context.DeadlineExceeded)})
	h.armFor(seamRetry, true)
	h.clk.Step(seamRetry + maxJitter)
	c = h.next("acquire")
	sent := c.now
	c.answer(reply{ok: true, st: held(mine(3), seamLease)})
	h.waitStart()
	if d, k := h.arm(), h.arm(); !d.Equal(sent.Add(seamRenew)) || !k.Equal(sent.Add(seamRetry)) {
		t.Fatalf("deadline at +%v, tick at +%v after the winning send; want %v, %v", d.Sub(sent), k.Sub(sent), seamRenew, seamRetry)
	}
}

// #13.2: Run's ctx cancelled while an acquire that wins is in flight: the call is not cut
// short, the term is released without starting its work (with or without ReleaseOnCancel:
// no work ran), and Run returns nil. An acquire that lost or failed releases nothing.
func TestSeamCancelDuringWinningAcquire(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release bool
		answer  reply
	}{
		{"won, ReleaseOnCancel", true, reply{ok: true, st: held(mine(5), seamLease)}},
		{"won, no ReleaseOnCancel", false, reply{ok: true, st: held(mine(5), seamLease)}},
		{"won late", true, reply{ok: true, st: held(mine(5), seamLease)}},
		{"lost", true, reply{st: held(theirs(4), seamLease)}},
		{"failed", true, reply{err: context.DeadlineExceeded}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHarness(t, func(c *Config) { c.ReleaseOnCancel = tc.release })
			c := h.next("acquire")
			h.cancel()
			if errors.Is(c.ctx.Err(), context.Canceled) {
				t.Fatal("the acquire in flight was cancelled with Run's ctx: its reply would be lost")
			}
			if tc.name == "won late" {
				h.clk.Step(seamRenew)
			}
			c.answer(tc.answer)
			if tc.answer.ok {
				r := h.next("release")
				if r.term != mine(5) {
					t.Fatalf("released %v, want %v", r.term, mine(5))
				}
				if errors.Is(r.ctx.Err(), context.Canceled) {
					t.Fatal("the release was sent with a cancelled ctx")
				}
				r.answer(reply{ok: true})
			}
			if err := h.waitRun(); err != nil {
				t.Fatalf("Run = %v, want nil", err)
			}
			h.noStart()
		})
	}
}

// The renew deadline, at the exact tick: a renew reply that comes 1ns before it extends the
// term; one that comes at it, or none, ends the term at the deadline; "lost" ends it at once.
func TestSeamRenewDeadlineAtTheExactTick(t *testing.T) {
	for _, tc := range []struct {
		name   string
		at     time.Duration // of the reply, from the acquire's send time
		answer *reply        // nil: never answered (a lost reply)
		reason string        // "" keeps leading
	}{
		{"ok 1ns before the deadline", seamRenew - time.Nanosecond, &reply{ok: true}, ""},
		{"ok at the deadline", seamRenew, &reply{ok: true}, reasonDeadline},
		{"no reply", seamRenew, nil, reasonDeadline},
		{"error 1ns before the deadline", seamRenew - time.Nanosecond, &reply{err: errors.New("conn reset")}, ""},
		{"term lost", 60 * time.Millisecond, &reply{ok: false}, reasonLost},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startHarness(t, nil)
			sent, s := h.lead(9)
			h.arm() // deadline
			h.arm() // tick
			h.clk.Step(seamRetry)
			r := h.next("renew")
			if r.term != mine(9) || !r.now.Equal(sent.Add(seamRetry)) {
				t.Fatalf("renew of %v at +%v, want term 9 at +%v", r.term, r.now.Sub(sent), seamRetry)
			}
			h.clk.Step(sent.Add(tc.at).Sub(h.clk.Now()))
			if tc.answer != nil {
				r.answer(*tc.answer)
			}
			if tc.reason == "" {
				if s.ctx.Err() != nil {
					t.Fatal("work cancelled before the deadline")
				}
				if tc.answer.ok {
					// Extended from the renew's send time; the overdue tick fires at once.
					if d := h.arm(); !d.Equal(r.now.Add(seamRenew)) {
						t.Fatalf("deadline moved to +%v, want +%v", d.Sub(sent), r.now.Add(seamRenew).Sub(sent))
					}
				}
				h.arm() // tick
				h.clk.Step(time.Nanosecond)
				if tc.answer.ok {
					h.next("renew").answer(reply{ok: true}) // no step-down at the old deadline
					return
				}
				if at := h.waitStop(); !at.Equal(sent.Add(seamRenew)) {
					t.Fatalf("stepped down at +%v, want at the deadline", at.Sub(sent))
				}
				return
			}
			at := h.waitStop()
			if tc.answer == nil {
				r.answer(reply{err: errors.New("lost")}) // after the step-down, which did not wait for it
			}
			if s.ctx.Err() == nil {
				t.Fatal("OnStoppedLeading called before the work's ctx was cancelled")
			}
			if cause := context.Cause(s.ctx); !errors.Is(cause, ErrLeadershipLost) || !strings.Contains(cause.Error(), tc.reason) {
				t.Fatalf("context.Cause of the work ctx = %v, want ErrLeadershipLost: %s", cause, tc.reason)
			}
			if tc.reason == reasonDeadline && !at.Equal(sent.Add(seamRenew)) {
				t.Fatalf("stepped down at +%v, want exactly +%v", at.Sub(sent), seamRenew)
			}
			err := h.waitRun()
			if !errors.Is(err, ErrLeadershipLost) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("Run = %v, want ErrLeadershipLost: %s", err, tc.reason)
			}
		})
	}
}

// A renew reply handled at or after the deadline ends the term even when the loop took it
// before the deadline timer (both ready at once on a loaded machine): the select alone would
// pick either.
func TestSeamRenewReplyAfterTheDeadlineTimer(t *testing.T) {
	for _, tc := range []struct {
		name   string
		at     time.Duration
		r      renewal
		reason string
		over   bool
	}{
		{"ok 1ns before", seamRenew - time.Nanosecond, renewal{ok: true}, "", false},
		{"ok at the deadline", seamRenew, renewal{ok: true}, reasonDeadline, true},
		{"ok after the deadline", seamRenew + time.Second, renewal{ok: true}, reasonDeadline, true},
		{"lost at the deadline", seamRenew, renewal{ok: false}, reasonDeadline, true},
		{"lost before", seamRenew / 2, renewal{ok: false}, reasonLost, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newTestClock()
			t0 := clk.Now()
			e := &Elector{cfg: Config{LeaseDuration: seamLease, RenewDeadline: seamRenew, RetryPeriod: seamRetry}, clock: clk}
			l := &leadership{e: e, lastOK: t0, guard: startTrustGuard(clk, e.timing(), t0, func() {}), tick: clk.NewTimer(seamRetry),
				cancelCall: func() {}, inflight: true, retry: backoff{min: seamRetry, max: seamRetry}}
			defer l.guard.stop()
			clk.Step(tc.at)
			tc.r.sent = t0.Add(seamRetry)
			reason, over := l.renewed(tc.r)
			if reason != tc.reason || over != tc.over {
				t.Fatalf("renewed = %q, %v; want %q, %v", reason, over, tc.reason, tc.over)
			}
		})
	}
}

// onEvent orders news by token: stale events (of a term older than one already heard of)
// neither wake a follower nor move its wake-up; a release of the current term wakes it; a
// renewal moves the wake-up to its TTL, capped at LeaseDuration.
func TestSeamOnEvent(t *testing.T) {
	ev := func(kind leasekit.EventKind, rec lease.Record, ttl time.Duration) leasekit.Event {
		return leasekit.Event{Kind: kind, Record: rec, TTL: ttl}
	}
	for _, tc := range []struct {
		name     string
		seen     lease.Record
		released bool // seen was released
		ev       leasekit.Event
		wake     bool
		rearm    time.Duration
	}{
		{"release of the current term", theirs(10), false, ev(leasekit.Released, theirs(10), 0), true, -1},
		{"release of an older term", theirs(10), false, ev(leasekit.Released, theirs(9), 0), false, -1},
		{"release heard twice", theirs(10), true, ev(leasekit.Released, theirs(10), 0), false, -1},
		{"renewal of the current term", theirs(10), false, ev(leasekit.Renewed, theirs(10), 250*time.Millisecond), false, 250 * time.Millisecond},
		{"renewal of an older term", theirs(10), false, ev(leasekit.Renewed, theirs(9), time.Millisecond), false, -1},
		{"renewal of a released term", theirs(10), true, ev(leasekit.Renewed, theirs(10), time.Millisecond), false, -1},
		{"newer term acquired", theirs(10), true, ev(leasekit.Acquired, theirs(11), seamLease), false, seamLease},
		{"renewal longer than the lease", theirs(10), false, ev(leasekit.Renewed, theirs(10), time.Hour), false, seamLease},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Elector{cfg: Config{LeaseDuration: seamLease, Identity: "me"}, clock: clocktesting.NewFakeClock(time.Unix(0, 0))}
			e.observe(tc.seen, tc.released)
			wake, rearm := e.onEvent(tc.ev)
			if wake != tc.wake || rearm != tc.rearm {
				t.Fatalf("onEvent(%v %v) = %v, %v; want %v, %v", tc.ev.Kind, tc.ev.Record.Token, wake, rearm, tc.wake, tc.rearm)
			}
		})
	}
}

// The same rules in a running follower: a stale release is ignored (the renewal sent after
// it is the next thing the follower acts on), a current release wakes it at once.
func TestSeamFollowerIgnoresStaleEvents(t *testing.T) {
	h := startHarness(t, nil)
	c := h.next("acquire")
	c.answer(reply{st: held(theirs(10), seamLease)})
	h.armFor(seamLease, true)
	h.sub.events <- leasekit.Event{Kind: leasekit.Released, Record: theirs(9)}
	h.sub.events <- leasekit.Event{Kind: leasekit.Renewed, Record: theirs(9), TTL: time.Millisecond}
	h.sub.events <- leasekit.Event{Kind: leasekit.Renewed, Record: theirs(10), TTL: 250 * time.Millisecond}
	h.armFor(250*time.Millisecond, true)
	h.sub.events <- leasekit.Event{Kind: leasekit.Released, Record: theirs(10)}
	c = h.next("acquire")
	if c.now != h.clk.Now() {
		t.Fatal("clock moved")
	}
	c.answer(reply{ok: true, st: held(mine(11), seamLease)})
	if s := h.waitStart(); s.token != 11 {
		t.Fatalf("token %d", s.token)
	}
}

// Data loss: when the follower's subscription breaks (Redis restarted and may have lost the
// lease), it subscribes again after resubscribeDelay but does not try before the expiry it
// knows; the only timers armed are the resubscription and that expiry. A release heard on the
// new subscription still wakes it at once.
func TestSeamDataLossWakeRules(t *testing.T) {
	for _, hearRelease := range []bool{false, true} {
		t.Run(fmt.Sprintf("release heard %v", hearRelease), func(t *testing.T) {
			h := startHarness(t, nil)
			c := h.next("acquire")
			sent := c.now
			c.answer(reply{st: held(theirs(10), seamLease)})
			expiry := h.arm()
			if d := expiry.Sub(sent); d < seamLease || d > seamLease+maxJitter {
				t.Fatalf("follower sleeps %v, want the lease's TTL %v", d, seamLease)
			}
			h.sub.broken()
			h.armFor(resubscribeDelay, false)
			h.clk.Step(resubscribeDelay)
			s := h.next("subscribe")
			h.sub = newFakeSub()
			s.answer(reply{sub: h.sub})
			if hearRelease {
				h.sub.events <- leasekit.Event{Kind: leasekit.Released, Record: theirs(10)}
				c := h.next("acquire")
				c.answer(reply{st: held(theirs(11), seamLease)})
				if c.now.After(sent.Add(resubscribeDelay)) {
					t.Fatalf("tried at +%v, want at once on the release", c.now.Sub(sent))
				}
				return
			}
			h.clk.Step(expiry.Sub(h.clk.Now()) - time.Nanosecond)
			h.clk.Step(time.Nanosecond)
			c = h.next("acquire")
			c.answer(reply{st: held(theirs(11), seamLease)})
			if c.now.Before(sent.Add(seamLease)) {
				t.Fatalf("tried at +%v, before the known expiry +%v", c.now.Sub(sent), seamLease)
			}
		})
	}
}

// New warns when the client's socket reads ignore context deadlines.
func TestContextTimeoutOff(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client redis.UniversalClient
		off    bool
	}{
		{"client", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), true},
		{"client with context timeouts", redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}), false},
		{"failover client", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}}), true},
		{"failover client with context timeouts", redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), false},
		{"cluster client", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}), true},
		{"cluster client with context timeouts", redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}), false},
		{"ring", redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer tc.client.Close()
			if got := contextTimeoutOff(tc.client); got != tc.off {
				t.Fatalf("contextTimeoutOff = %v, want %v", got, tc.off)
			}
		})
	}
}

func TestReasonTokenRange(t *testing.T) {
	if r := redisfail.Reason(fmt.Errorf("acquire lease %q: %w: ERR ...", "x", lease.ErrTokenRange)); r != "token_range" {
		t.Fatalf("Reason = %q, want token_range", r)
	}
	if r := redisfail.Reason(fmt.Errorf("token 3: %w", errLateReply)); r != "timeout" {
		t.Fatalf("Reason of a late reply = %q, want timeout", r)
	}
}

// docs/MODEL.md's finding 1: a release whose reply is an error may still run later. An
// acquire that then resumes the same record (the script renews a record its owner holds)
// must not start a term, for the stale release would delete the key under it and another
// replica acquire. It is taken as held (no term, no second release, next attempt when it
// expired); a reply with another record is trusted again. Both releases an acquire of the
// same Elector can follow: a late win's, and ReleaseOnCancel's at the end of a Run followed
// by another Run.
func TestSeamStaleReleaseResumeStartsNoTerm(t *testing.T) {
	for _, path := range []string{"late win", "ReleaseOnCancel, Run again"} {
		t.Run(path, func(t *testing.T) {
			h := startHarness(t, func(c *Config) { c.ReleaseOnCancel = true })
			switch path {
			case "late win":
				c := h.next("acquire")
				h.clk.Step(seamRenew)
				c.answer(reply{ok: true, st: held(mine(7), seamLease)})
				r := h.next("release")
				r.answer(reply{err: fmt.Errorf("release: %w", context.DeadlineExceeded)})
				h.armFor(50*time.Millisecond, true) // backoff from 50ms
				h.clk.Step(50*time.Millisecond + maxJitter)
			case "ReleaseOnCancel, Run again":
				h.lead(7)
				h.arm() // deadline
				h.arm() // tick
				h.cancel()
				h.waitStop() // before the release: docs/DESIGN.md, "Step-down order"
				r := h.next("release")
				r.answer(reply{err: fmt.Errorf("release: %w", context.DeadlineExceeded)})
				if err := h.waitRun(); err != nil {
					t.Fatalf("Run = %v", err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				h.cancel, h.done = cancel, make(chan error, 1)
				go func() { h.done <- h.e.Run(ctx) }()
				if at := h.arm(); at.Sub(h.clk.Now()) != time.Hour {
					t.Fatalf("first timer of the new Run armed for %v", at.Sub(h.clk.Now()))
				}
			}
			c := h.next("acquire")
			c.answer(reply{ok: true, st: held(mine(7), seamLease)}) // the resume
			// As if held by another: the next timer is the wait for its expiry, not a term's
			// deadline timer (RenewDeadline) from OnStartedLeading's start.
			wait := seamLease + timing.DriftMargin(seamLease) // its TTL, drift margin included
			if got := h.arm().Sub(h.clk.Now()); got < wait || got > wait+maxJitter {
				select {
				case s := <-h.started:
					t.Fatalf("OnStartedLeading ran (token %d) on a resumed record whose release failed", s.token)
				case <-time.After(within):
				}
				t.Fatalf("timer armed for %v, want the record's TTL and drift margin %v", got, wait)
			}
			h.noStart()
			if h.e.IsLeader() {
				t.Fatal("IsLeader on a resumed record whose release failed")
			}
			h.clk.Step(wait + maxJitter)
			c = h.next("acquire")
			c.answer(reply{ok: true, st: held(mine(9), seamLease)})
			if s := h.waitStart(); s.token != 9 {
				t.Fatalf("term started with token %d, want the new record's 9", s.token)
			}
		})
	}
}

// Release refuses while Run runs (a release behind Run's back would let a follower in while
// OnStartedLeading may still work) and releases, owner-checked, once Run returned.
func TestSeamReleaseOnlyAfterRun(t *testing.T) {
	h := startHarness(t, nil)
	h.lead(7)
	type result struct {
		ok  bool
		err error
	}
	during := make(chan result, 1)
	go func() {
		ok, err := h.e.Release(context.Background(), 7)
		during <- result{ok, err}
	}()
	select {
	case r := <-during:
		if r.ok || r.err == nil || !strings.Contains(r.err.Error(), "Run is running") {
			t.Fatalf("Release while Run leads = %v, %v; want refused", r.ok, r.err)
		}
	case c := <-h.st.calls:
		c.answer(reply{ok: true})
		t.Fatalf("Release while Run leads sent a %s of %v", c.kind, c.term)
	case <-time.After(within):
		t.Fatal("Release while Run leads did not return")
	}
	term, ok, err := h.releaseAfterRun(7, reply{ok: true})
	if term.Token != 7 || term.Identity != "me" || term.Instance != h.e.lease.Instance() {
		t.Fatalf("released %v, want this replica's term 7", term)
	}
	if !ok || err != nil {
		t.Fatalf("Release after Run returned = %v, %v; want released", ok, err)
	}
}

// releaseAfterRun stops Run, calls Release(token), answers its store call with answer, and
// returns the record released with Release's result.
func (h *harness) releaseAfterRun(token int64, answer reply) (lease.Record, bool, error) {
	h.t.Helper()
	h.stop()
	select {
	case <-h.stopped:
	default:
	}
	type result struct {
		ok  bool
		err error
	}
	res := make(chan result, 1)
	go func() {
		ok, err := h.e.Release(context.Background(), token)
		res <- result{ok, err}
	}()
	c := h.next("release")
	c.answer(answer)
	r := <-res
	return c.term, r.ok, r.err
}

// A Release after Run returned whose outcome is unknown (an error: it may still run in Redis)
// poisons the record like the elector's own failed releases: a later Run must not resume it,
// or the late release could delete the key during the resumed term.
func TestSeamFailedReleaseIsNotResumed(t *testing.T) {
	h := startHarness(t, nil)
	h.lead(7)
	term, _, err := h.releaseAfterRun(7, reply{err: errors.New("i/o timeout")})
	if err == nil {
		t.Fatal("Release with a failed call returned no error")
	}
	h.e.mu.Lock()
	trusted := h.e.core.guard.reply(term, true)
	h.e.mu.Unlock()
	if trusted {
		t.Fatalf("after a failed Release, an acquire resuming %v would start a term", term)
	}
}

// errRestart is what a call gets while Redis restarts: its connection broke.
var errRestart = errors.New("EOF")

// The flake of TestRedisDataLossEndsTheTerm, step by step: a follower knows the holder's
// expiry; its subscription breaks and subscribing again fails, so its next attempt (at that
// expiry: the holder renewed meanwhile) finds the lease held while it does not listen, and it
// polls (RetryPeriod). It then subscribes again in its sleep, and Redis restarts without its
// data. It must sleep until the expiry it knows: the old leader learns only at its next
// renew that its term is over. Before the fix it kept its poll timer, the poll met the
// restart (an error), it retried at the backoff, won the emptied Redis and began while the
// old leader worked.
func TestSeamResubscribedFollowerSleepsUntilTheKnownExpiry(t *testing.T) {
	h := startHarness(t, nil)
	c := h.next("acquire")
	c.answer(reply{st: held(theirs(10), 120*time.Millisecond)})
	expiry := h.arm()
	h.sub.broken()
	h.armFor(resubscribeDelay, false)
	h.clk.Step(resubscribeDelay)
	h.next("subscribe").answer(reply{err: errRestart})
	h.armFor(seamRetry, false) // subscribe again every RetryPeriod
	h.clk.Step(seamRetry)
	h.next("subscribe").answer(reply{err: errRestart})
	resub := h.arm()
	h.clk.Step(expiry.Sub(h.clk.Now())) // the expiry, before the next subscription
	c = h.next("acquire")               // not subscribed
	c.answer(reply{st: held(theirs(10), seamLease)})
	known := c.now.Add(seamLease)
	poll := h.arm()
	if d := poll.Sub(c.now); d > seamRetry+maxJitter || !resub.Before(poll) {
		t.Fatalf("follower that does not listen sleeps %v (subscribe again at +%v), want a poll after RetryPeriod %v, after the subscription", d, h.elapsed(resub), seamRetry)
	}
	h.clk.Step(resub.Sub(h.clk.Now()))
	s := h.next("subscribe")
	h.sub = newFakeSub()
	s.answer(reply{sub: h.sub})
	h.sub.broken() // Redis restarts without its data
	if at := h.arm(); at.Sub(h.clk.Now()) == resubscribeDelay {
		t.Fatalf("subscribed again at +%v, the follower kept its poll at +%v: at a Redis restart it polls, meets the error and retries at the backoff, before the expiry it knows (+%v)",
			h.elapsed(h.clk.Now()), h.elapsed(poll), h.elapsed(known))
	} else if at.Before(known) || at.After(known.Add(maxJitter)) {
		t.Fatalf("subscribed again, the follower sleeps until +%v, want the known expiry +%v", h.elapsed(at), h.elapsed(known))
	}
	h.armFor(resubscribeDelay, false)
	h.clk.Step(resubscribeDelay)
	s = h.next("subscribe")
	h.sub = newFakeSub()
	s.answer(reply{sub: h.sub})
	h.clk.Step(known.Sub(h.clk.Now()) + maxJitter)
	c = h.next("acquire")
	c.answer(reply{ok: true, st: held(mine(11), seamLease)}) // the emptied Redis
	if st := h.waitStart(); st.at.Before(known) {
		t.Fatalf("began at +%v, before the known expiry +%v", h.elapsed(st.at), h.elapsed(known))
	}
}

// After a failed attempt the next one waits for the backoff and, if later, the expiry of the
// holder last heard of: the failure may be a restart that lost the lease while its holder
// works on. A polling follower (subscriptions refused) whose poll meets the restart sleeps
// until that expiry; one that heard the term released retries at the backoff.
func TestSeamErrorKeepsTheKnownExpiry(t *testing.T) {
	for _, heardRelease := range []bool{false, true} {
		t.Run(fmt.Sprintf("release heard %v", heardRelease), func(t *testing.T) {
			h := startHarness(t, nil)
			c := h.next("acquire") // subscribed
			var known time.Time    // of the holder, as the last reply showed it
			if heardRelease {
				c.answer(reply{st: held(theirs(10), seamLease)})
				h.armFor(seamLease, true)
				h.sub.events <- leasekit.Event{Kind: leasekit.Released, Record: theirs(10)}
			} else {
				h.sub.broken()
				c.answer(reply{st: held(theirs(10), 120*time.Millisecond)})
				expiry := h.arm()
				h.armFor(resubscribeDelay, false)
				for _, d := range []time.Duration{resubscribeDelay, seamRetry} { // subscriptions fail
					h.clk.Step(d)
					h.next("subscribe").answer(reply{err: errRestart})
					h.armFor(seamRetry, false)
				}
				h.clk.Step(expiry.Sub(h.clk.Now()))
				c = h.next("acquire")
				c.answer(reply{st: held(theirs(10), seamLease)}) // renewed meanwhile
				known = c.now.Add(seamLease)
				poll := h.arm()
				h.clk.Step(150*time.Millisecond - h.elapsed(h.clk.Now()))
				h.next("subscribe").answer(reply{err: errRestart})
				h.armFor(seamRetry, false)
				h.clk.Step(poll.Sub(h.clk.Now())) // a poll: the follower does not listen
			}
			c = h.next("acquire")
			c.answer(reply{err: errRestart})
			at := h.arm()
			if at.Before(known) || at.Before(c.now.Add(50*time.Millisecond)) {
				t.Fatalf("after the error the follower tries again at +%v, want the backoff and not before the known expiry +%v", h.elapsed(at), h.elapsed(known))
			}
			if heardRelease && at.After(c.now.Add(50*time.Millisecond+maxJitter)) {
				t.Fatalf("after a release heard, the follower tries again at +%v, want the backoff (50ms)", h.elapsed(at))
			}
		})
	}
}
