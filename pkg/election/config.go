package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/lease"
)

// Callbacks are the functions an Elector calls as leadership changes. Each one is never run
// concurrently with itself.
type Callbacks struct {
	// OnStartedLeading runs in its own goroutine when this replica begins a term. Its ctx is
	// cancelled the moment leadership can no longer be trusted (a renew said the lease is
	// gone, the renew deadline passed) or the ctx given to Run is cancelled. It must return
	// promptly after that: Run waits for it, and with ReleaseOnCancel the lease is released
	// (and renewed meanwhile) only once it returned. TokenFrom(ctx) is the term's token;
	// context.Cause(ctx) tells why the term ends: an error wrapping ErrLeadershipLost (with the
	// reason; also ErrGaveUp when Redis refused a renew in a way retrying cannot cure),
	// ErrResigned (Resign, or `elector resign`), or the cause of Run's ctx. Required by Run; an
	// Elector made only to Observe needs no callbacks.
	//
	// With Recampaign, a replica that stepped down because RenewDeadline passed, while Redis
	// still held its term (the renewals were slow, not lost), resumes that same term when it
	// campaigns again: OnStartedLeading runs again with the same fencing token. Nobody else
	// led in between, so a fenced resource has nothing to refuse.
	OnStartedLeading func(ctx context.Context)
	// OnStoppedLeading is called once a term is over, after IsLeader, Status and the metrics
	// say this replica does not lead, and before the lease is released: at once when
	// leadership was lost, or after OnStartedLeading returned when Run's ctx was cancelled or
	// the replica resigned. So whatever it does (mark a status file "follower", flush) is done
	// before a successor can start. The release waits for it: keep it short; a slow one
	// delays the handover (at most until the lease expires: it is no longer renewed), never
	// the step-down, and a panic still releases. Optional.
	OnStoppedLeading func()
	// OnNewLeader is called with the identity of each new leader observed, this replica's
	// included, in order, from one goroutine. Optional.
	OnNewLeader func(identity string)
}

// Config configures an Elector. Zero durations take the defaults; everything else that is
// wrong is reported by New with the name of the field and the rule, as in
// "Config.RenewDeadline (default 10s) must be shorter than Config.LeaseDuration (5s) ...; set
// Config.RenewDeadline too".
type Config struct {
	// Client is the Redis client (standalone, Sentinel failover or Cluster). Required. Its
	// per-call timeouts should be well below RenewDeadline (the elector also bounds each call
	// with a context, which go-redis honours on the socket only when ContextTimeoutEnabled is
	// set: New logs a warning when it is off). Safety does not depend on it: a term never
	// starts from an acquire reply that came at or after its send time + RenewDeadline.
	Client redis.UniversalClient
	// LeaseName names the lease that the replicas compete for. Required.
	LeaseName string
	// KeyPrefix starts the Redis keys of the lease; lease.DefaultPrefix when empty.
	KeyPrefix string
	// Identity names this replica, e.g. the pod name. Empty: $POD_NAME (set it from the
	// Kubernetes downward API, metadata.name), else the host name.
	Identity string

	// LeaseDuration is how long a lease lasts without renewal: followers wait this long
	// after a leader stopped renewing (crash) before taking over. 15s when zero.
	LeaseDuration time.Duration
	// RenewDeadline is how long a leader keeps leading without a successful renew; then it
	// steps down, at least LeaseDuration - RenewDeadline before any other replica can acquire.
	// 10s when zero.
	RenewDeadline time.Duration
	// RetryPeriod is the interval between a leader's renewals, and between attempts while
	// Redis fails or the lease channel is unavailable. 2s when zero. (The defaults are
	// client-go's.)
	RetryPeriod time.Duration

	// Callbacks are called as leadership changes.
	Callbacks Callbacks
	// ReleaseOnCancel releases the lease when Run's ctx is cancelled, after OnStartedLeading
	// returned, so that a follower takes over in about one round trip instead of at expiry.
	//
	// The rule: a term whose work ran is released on cancel only with ReleaseOnCancel (without
	// it the lease is left to expire, as in client-go, for work that may outlive its ctx). A
	// term won that never started its work is always released, with or without it: one won
	// by an acquire in flight when Run's ctx was cancelled, and one whose acquire reply came
	// at or after send time + RenewDeadline (too late to trust, so not started). No work can
	// overlap then, and followers need not wait LeaseDuration. A term that ended by itself (a
	// renew said it is over, or the renew deadline passed) is not released.
	ReleaseOnCancel bool
	// Recampaign keeps Run campaigning after leadership was lost, so that the replica can
	// lead again without a restart. By default Run returns ErrLeadershipLost (client-go's
	// semantics).
	Recampaign bool
	// ResignHoldOff is how long, after Elector.Resign released the lease, Redis keeps the
	// other replicas (or all but the one ResignTo names) from acquiring it, so that this
	// replica does not take it back at once. LeaseDuration when zero; a whole number of
	// milliseconds otherwise.
	ResignHoldOff time.Duration

	// ReplicaAck, when ReplicaAck.Replicas > 0, makes every acquire and renew wait (Redis
	// WAIT) until that many replicas acknowledged it. An acquisition that is not acknowledged
	// in ReplicaAck.Timeout does not start a term (the next attempt resumes and waits again);
	// an unacknowledged renewal counts as failed. It closes the window in which a master cut
	// off from its replicas keeps a leader working while Sentinel promotes a replica (see
	// docs/RELIABILITY.md). Ask for fewer replicas than exist, so that one failure does not
	// stop the election; keep Timeout well below RetryPeriod.
	ReplicaAck lease.ReplicaAck

	// StartTimeout, when positive, bounds the wait for Redis: Run returns an error wrapping
	// ErrGaveUp and context.DeadlineExceeded if no acquire got a reply from Redis within
	// StartTimeout of Run's start (Redis unreachable, a wrong address). Once one did, it no
	// longer applies. Zero: Run waits for Redis as long as its ctx lasts.
	StartTimeout time.Duration

	// Priority is this replica's rank among the lease's candidates, advertised in the
	// candidate registry. A leader hands its term over (by ResignTo) to a live candidate of a
	// strictly higher priority once that candidate has been live, without a gap, for
	// 2 × LeaseDuration and the term has lasted 2 × LeaseDuration; at a graceful stop (with
	// ReleaseOnCancel) it reserves the release for the live candidate of the highest priority
	// above its own. Replicas of one priority (the default, 0) never hand over by preference.
	// Derived from the version (as `elector run --prefer newest` does), it makes a rolling
	// update move leadership once, to a replica of the new version.
	Priority int64

	// Metrics, when set, receive this elector's figures (see NewMetrics), labelled
	// name=LeaseName: electors that share one Metrics need distinct lease names (for the same
	// name under two KeyPrefixes, give each a Metrics on its own prometheus.Registerer, e.g.
	// prometheus.WrapRegistererWith a prefix label).
	Metrics *Metrics
}

// validate fills in defaults and checks c. Every error names the field and the rule, in
// client-go's style; a value that was defaulted says so.
func (c *Config) validate() error {
	if c.Client == nil {
		return errors.New("Config.Client must be set")
	}
	if err := leasewire.ValidateName(c.LeaseName); err != nil {
		return fmt.Errorf("Config.LeaseName %q %w", c.LeaseName, err)
	}
	if c.KeyPrefix != "" {
		if err := leasewire.ValidateName(c.KeyPrefix); err != nil {
			return fmt.Errorf("Config.KeyPrefix %q %w", c.KeyPrefix, err)
		}
	}
	id, err := resolveIdentity(c.Identity, "Config.Identity")
	if err != nil {
		return err
	}
	c.Identity = id
	if err := applyTiming("Config", &c.LeaseDuration, &c.RenewDeadline, &c.RetryPeriod); err != nil {
		return err
	}
	holdOff := fmt.Sprintf("Config.ResignHoldOff (%v)", c.ResignHoldOff)
	if c.ResignHoldOff == 0 {
		c.ResignHoldOff = c.LeaseDuration
		holdOff = fmt.Sprintf("Config.ResignHoldOff (default: Config.LeaseDuration, %v)", c.ResignHoldOff)
	}
	if c.ResignHoldOff < time.Millisecond || c.ResignHoldOff%time.Millisecond != 0 {
		return fmt.Errorf("%s must be a whole number of milliseconds, at least 1ms", holdOff)
	}
	// lease.New would refuse these too; named here as the fields of Config. The wait must fit
	// in one call, which RetryPeriod bounds.
	switch a := c.ReplicaAck; {
	case a.Replicas < 0:
		return fmt.Errorf("Config.ReplicaAck.Replicas (%d) must be 0 (off) or more", a.Replicas)
	case a.Replicas == 0:
	case a.Timeout < time.Millisecond || a.Timeout%time.Millisecond != 0:
		return fmt.Errorf("Config.ReplicaAck.Timeout (%v) must be a whole number of milliseconds, at least 1ms, when Config.ReplicaAck.Replicas is set", a.Timeout)
	case a.Timeout >= c.RetryPeriod:
		return fmt.Errorf("Config.ReplicaAck.Timeout (%v) must be shorter than Config.RetryPeriod (%v), which bounds each call", a.Timeout, c.RetryPeriod)
	}
	if c.StartTimeout < 0 {
		return fmt.Errorf("Config.StartTimeout (%v) must not be negative (0: no bound)", c.StartTimeout)
	}
	return nil
}

// checkCallbacks is what Run needs of Config beyond New: a callback to run the work.
func (c *Config) checkCallbacks() error {
	if c.Callbacks.OnStartedLeading == nil {
		return errors.New("Config.Callbacks.OnStartedLeading must be set to Run (an Elector without it may only Observe)")
	}
	return nil
}

// applyTiming fills in the default durations of an Elector's or a Group's config and checks
// them together (timing.Check), naming the fields as what.LeaseDuration and so on, and which
// took their defaults.
func applyTiming(what string, leaseDuration, renewDeadline, retryPeriod *time.Duration) error {
	n := timing.Names{LeaseDuration: what + ".LeaseDuration", RenewDeadline: what + ".RenewDeadline", RetryPeriod: what + ".RetryPeriod"}
	for _, d := range []struct {
		field     string
		v         *time.Duration
		def       time.Duration
		defaulted *bool
	}{
		{n.LeaseDuration, leaseDuration, timing.DefaultLeaseDuration, &n.LeaseDefaulted},
		{n.RenewDeadline, renewDeadline, timing.DefaultRenewDeadline, &n.RenewDefaulted},
		{n.RetryPeriod, retryPeriod, timing.DefaultRetryPeriod, &n.RetryDefaulted},
	} {
		if *d.v < 0 {
			return fmt.Errorf("%s (%v) must be positive (0 takes the default, %v)", d.field, *d.v, d.def)
		}
		if *d.v == 0 {
			*d.v, *d.defaulted = d.def, true
		}
	}
	return timing.Check(*leaseDuration, *renewDeadline, *retryPeriod, n)
}
