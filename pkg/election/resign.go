package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/elector/elector/pkg/lease"
)

// ErrNotLeader is returned by Resign and ResignTo when this replica does not lead.
var ErrNotLeader = errors.New("not the leader")

// ErrResigned is wrapped by the error Run returns after this replica resigned (Resign, or a
// request of `elector resign`) while Config.Recampaign is off: the term ended as asked, and
// Run does not campaign again. With Recampaign, Run campaigns again at once; Redis keeps the
// lease from it for the hold-off.
var ErrResigned = errors.New("resigned")

// termControl is how Resign reaches the lead loop of the current term.
type termControl struct {
	wake chan struct{} // a send asks the loop to resign
	over chan struct{} // closed once the term ended and its release (if any) was sent
}

func newTermControl() *termControl {
	return &termControl{wake: make(chan struct{}, 1), over: make(chan struct{})}
}

// Resign ends this replica's term so that another replica leads: it writes a resign request
// for the term in Redis, cancels OnStartedLeading's ctx at once and, once OnStartedLeading
// returned (the lease is renewed meanwhile, as after a cancel of Run's ctx), stops calling
// itself leader and releases the lease (whatever Config.ReleaseOnCancel says). The release
// makes the request a reservation: for Config.ResignHoldOff no replica with this one's
// identity may acquire the lease, so another replica takes over in about one round trip,
// with the next fencing token. This replica then campaigns again (see ErrResigned for
// Recampaign off).
//
// Resign returns nil once the term ended and the release was sent, or ctx.Err() if ctx ended
// first; the step-down completes anyway. It returns an error wrapping ErrNotLeader when this
// replica does not lead, and the Redis error when the request could not be written (then
// nothing changed: the term goes on).
func (e *Elector) Resign(ctx context.Context) error { return e.ResignTo(ctx, "") }

// ResignTo is Resign with a successor: during the hold-off only the replica with identity
// may acquire the lease. If it does not (it is absent, or it is an older elector that does
// not know the protocol), nobody leads until the hold-off ends; then anyone may. identity
// must not be this replica's own.
func (e *Elector) ResignTo(ctx context.Context, identity string) error {
	if identity != "" {
		if err := lease.ValidateIdentity(identity); err != nil {
			return fmt.Errorf("resign lease %q: target identity %q %w", e.cfg.Name, identity, err)
		}
		if identity == e.cfg.Identity {
			return fmt.Errorf("resign lease %q: %w: %q is this replica", e.cfg.Name, lease.ErrTargetIsHolder, identity)
		}
	}
	e.mu.Lock()
	leading, term, ctl := e.leading, e.term, e.ctl
	e.mu.Unlock()
	if !leading {
		return fmt.Errorf("resign lease %q: %w", e.cfg.Name, ErrNotLeader)
	}
	rctx, cancel := context.WithTimeout(ctx, e.callTimeout())
	err := e.store.resign(rctx, term, identity, e.cfg.ResignHoldOff, e.cfg.LeaseDuration)
	cancel()
	switch {
	case errors.Is(err, lease.ErrOtherTerm):
		return fmt.Errorf("resign lease %q: %w: %w", e.cfg.Name, ErrNotLeader, err)
	case err != nil:
		return fmt.Errorf("resign lease %q: %w", e.cfg.Name, err)
	}
	select {
	case ctl.wake <- struct{}{}:
	default: // asked already
	}
	select {
	case <-ctl.over:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resign begins the step-down of a resignation: the work is told to stop; the loop keeps
// renewing and releases once it returned.
func (l *leadership) resign(why string) {
	if l.resigning {
		return
	}
	l.resigning = true
	l.cancelWork(ErrResigned)
	l.logger.Info("Resigning: the work is told to stop (OnStartedLeading's ctx; for elector run: CMD); the lease is released once it stopped", "token", l.term.Token, "why", why)
}

func (s redisStore) resign(ctx context.Context, term lease.Record, target string, holdOff, timeout time.Duration) error {
	_, err := s.l.RequestResign(ctx, lease.ResignRequest{Target: target, HoldOff: holdOff, Timeout: timeout, Term: term})
	return err
}
