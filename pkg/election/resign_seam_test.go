package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/lease"
)

func (s *fakeStore) resign(ctx context.Context, term lease.Record, _ string, _, _ time.Duration) error {
	return s.do(ctx, "resign", term).err
}

func (s *fakeStore) advertise(context.Context, time.Duration, int64, string, bool) (leasekit.Candidates, error) {
	return leasekit.Candidates{}, errNoRegistry
}

// slowWork makes OnStartedLeading wait, after its ctx was cancelled, until the test closes
// unblock; log records the order of what happened.
type slowWork struct {
	unblock chan struct{}
	mu      sync.Mutex
	log     []string
}

func (w *slowWork) note(s string) {
	w.mu.Lock()
	w.log = append(w.log, s)
	w.mu.Unlock()
}

func (w *slowWork) events() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.log...)
}

func withSlowWork(w *slowWork, recampaign bool) func(*Config) {
	return func(c *Config) {
		c.Recampaign = recampaign
		orig := c.Callbacks.OnStartedLeading
		c.Callbacks.OnStartedLeading = func(ctx context.Context) {
			orig(ctx) // reports the start, returns once ctx is cancelled
			w.note("cancelled")
			<-w.unblock
			w.note("work returned")
		}
	}
}

var resignAsked = fmt.Errorf("renew lease %q: %w", "seam", leasekit.ErrResignRequested)

// A renewal that reports a resign request (reply 2) ends the term like a cancel with
// ReleaseOnCancel: the work's ctx is cancelled at once, the lease is renewed while the work
// winds down, the replica stops calling itself leader only after the work returned, and the
// owner-checked release comes last. Then it campaigns again and waits out the reservation.
func TestSeamResignRequestStepDownOrder(t *testing.T) {
	w := &slowWork{unblock: make(chan struct{})}
	h := startHarness(t, withSlowWork(w, true))
	_, s := h.lead(7)
	h.arm() // deadline
	h.arm() // tick
	h.clk.Step(seamRetry)
	r := h.next("renew")
	r.answer(reply{ok: true, err: resignAsked})
	h.arm() // deadline, moved by the successful renewal
	h.arm() // tick
	select {
	case <-s.ctx.Done():
	case <-time.After(within):
		t.Fatal("work ctx not cancelled after a renewal reported a resign request")
	}
	if cause := context.Cause(s.ctx); !errors.Is(cause, ErrResigned) {
		t.Fatalf("context.Cause of the work ctx = %v, want ErrResigned", cause)
	}
	if !h.e.IsLeader() {
		t.Fatal("stopped calling itself leader while the work still runs")
	}
	// Still renewing while the work winds down.
	h.clk.Step(seamRetry)
	r = h.next("renew")
	if r.term != mine(7) {
		t.Fatalf("renewed %v", r.term)
	}
	r.answer(reply{ok: true, err: resignAsked})
	h.arm()
	h.arm()
	close(w.unblock)
	h.waitStop() // before the release: docs/DESIGN.md, "Step-down order"
	rel := h.next("release")
	if rel.term != mine(7) || h.e.IsLeader() {
		t.Fatalf("release of %v with IsLeader %v; want term 7, not leader", rel.term, h.e.IsLeader())
	}
	if got := w.events(); len(got) != 2 || got[1] != "work returned" {
		t.Fatalf("release sent before the work returned: %v", got)
	}
	rel.answer(reply{ok: true})
	// Campaigning again, the server refuses it during the hold-off: it sleeps until then.
	a := h.next("acquire")
	a.answer(reply{res: &leasekit.Reservation{Resigned: mine(7), TTL: 250 * time.Millisecond}})
	for i := 0; ; i++ {
		d := h.arm().Sub(h.clk.Now())
		if d >= 250*time.Millisecond && d <= 250*time.Millisecond+maxJitter {
			break
		}
		if i == 3 || d != time.Hour {
			t.Fatalf("follower sleeps %v after a reservation of 250ms", d)
		}
	}
	h.noStart()
}

// While a resigning leader's work winds down, the renew deadline still rules: renewals that
// fail end the term at the deadline (no release: the term may be over), whether or not the
// work returned.
func TestSeamResignDeadlineWhileWindingDown(t *testing.T) {
	w := &slowWork{unblock: make(chan struct{})}
	h := startHarness(t, withSlowWork(w, false))
	h.lead(7)
	h.arm()
	h.arm()
	h.clk.Step(seamRetry)
	r := h.next("renew")
	okSent := r.now
	r.answer(reply{ok: true, err: resignAsked})
	h.arm()
	h.arm()
	h.clk.Step(seamRetry)
	lost := h.next("renew") // never answered before the deadline
	h.clk.Step(okSent.Add(seamRenew).Sub(h.clk.Now()))
	if at := h.waitStop(); !at.Equal(okSent.Add(seamRenew)) {
		t.Fatalf("stepped down at +%v, want at the deadline +%v", at.Sub(okSent), seamRenew)
	}
	if h.e.IsLeader() {
		t.Fatal("still leader after the deadline")
	}
	lost.answer(reply{err: errors.New("lost")})
	close(w.unblock)
	if err := h.waitRun(); !errors.Is(err, ErrLeadershipLost) {
		t.Fatalf("Run = %v, want ErrLeadershipLost (deadline), and no release", err)
	}
}

// Resign writes the request for this very term, wakes the lead loop at once (no wait for
// the next tick), returns once the release was sent; with Recampaign off, Run returns
// ErrResigned. On a follower it fails with ErrNotLeader and calls nothing.
func TestSeamResignInProcess(t *testing.T) {
	h := startHarness(t, nil)
	if err := h.e.ResignTo(context.Background(), ""); !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Resign on a follower = %v, want ErrNotLeader", err)
	}
	if err := h.e.ResignTo(context.Background(), "me"); !errors.Is(err, leasekit.ErrTargetIsHolder) {
		t.Fatalf("ResignTo itself = %v, want ErrTargetIsHolder", err)
	}
	_, s := h.lead(7)
	h.arm()
	h.arm()
	errc := make(chan error, 1)
	go func() { errc <- h.e.ResignTo(context.Background(), "other") }()
	c := h.next("resign")
	if c.term != mine(7) {
		t.Fatalf("request for %v, want this term", c.term)
	}
	select {
	case err := <-errc:
		t.Fatalf("Resign returned %v before the request was written", err)
	default:
	}
	c.answer(reply{})
	h.waitStop() // no clock step: woken at once; OnStoppedLeading before the release
	rel := h.next("release")
	if s.ctx.Err() == nil || h.e.IsLeader() {
		t.Fatal("released while the work's ctx was live or still leader")
	}
	select {
	case err := <-errc:
		t.Fatalf("Resign returned %v before the release was sent", err)
	default:
	}
	rel.answer(reply{ok: true})
	if err := <-errc; err != nil {
		t.Fatalf("Resign = %v", err)
	}
	if err := h.waitRun(); !errors.Is(err, ErrResigned) {
		t.Fatalf("Run = %v, want ErrResigned", err)
	}
}

// A request that cannot be written changes nothing: the term goes on.
func TestSeamResignRequestFails(t *testing.T) {
	h := startHarness(t, nil)
	_, s := h.lead(7)
	h.arm()
	h.arm()
	errc := make(chan error, 1)
	go func() { errc <- h.e.ResignTo(context.Background(), "") }()
	h.next("resign").answer(reply{err: errors.New("connection refused")})
	if err := <-errc; err == nil || errors.Is(err, ErrNotLeader) {
		t.Fatalf("Resign = %v, want the Redis error", err)
	}
	if s.ctx.Err() != nil || !h.e.IsLeader() {
		t.Fatal("the term ended although the request failed")
	}
	go func() { errc <- h.e.ResignTo(context.Background(), "") }()
	h.next("resign").answer(reply{err: fmt.Errorf("x: %w", leasekit.ErrOtherTerm)})
	if err := <-errc; !errors.Is(err, ErrNotLeader) {
		t.Fatalf("Resign when Redis holds another term = %v, want ErrNotLeader", err)
	}
}
