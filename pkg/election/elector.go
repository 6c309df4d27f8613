// Package election runs a leader election on a Redis lease (package lease): of all the
// replicas that run an Elector with the same lease name, exactly one leads at a time and runs
// OnStartedLeading.
//
// Its shape is client-go's tools/leaderelection — a Config validated up front, callbacks,
// a health check, the leader_election_master_status metric — with three changes that
// make it faster and safer on Redis:
//
//   - Followers do not poll. A follower learns from each acquire attempt, and from the
//     lease's pub/sub channel, exactly when the lease expires, and tries again then; a release
//     wakes it at once. Graceful handover takes about one round trip and a crash failover
//     happens as the lease expires.
//   - The leader's ctx is cancelled when RenewDeadline has passed since the send time of the
//     last successful renew, by a timer that does not wait for a hanging Redis call, so it is
//     always at least LeaseDuration - RenewDeadline before any other replica can acquire.
//   - Every term carries a fencing token (Token, and package fence) for resources that must
//     reject a leader that was paused past its lease.
//
// Run ends by itself only when waiting cannot help: an error wrapping ErrGaveUp after Redis
// refused it in a way only a change of configuration cures (a password, an ACL, a renamed
// command, a Cluster-mode mismatch), or after Config.StartTimeout without a reply; a term in
// progress steps down first as any lost term does. An Elector made without Callbacks cannot
// Run but can Observe the lease: its holders, terms and tokens, without campaigning.
//
// Logging is contextual, as in client-go: Run and Observe log through the logr.Logger of their
// ctx (klog.FromContext), so pass one with klog.NewContext(ctx, logger) — any logr
// implementation, log/slog's through logr.FromSlogHandler — and every line carries the lease
// and identity; without one they use klog's global logger. OnStartedLeading's ctx carries the
// same logger. Warnings are logged at error level with a nil error (klog has no warning
// level). Messages name the fields of Config, not the elector command's flags.
//
// The package owns when to call the lease (campaign, renew, step down, release), the
// callbacks and the goroutines that run them, the metrics and the HTTP handlers of an
// election. It must not build Redis keys or run scripts itself (package lease does, through the
// store seam), and it parses no flags: the CLI turns its flags into a Config.
package election

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/precisetimer"
	"github.com/elector/elector/internal/redisfail"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/lease"
)

// ErrLeadershipLost is returned by Run when this replica lost its leadership and
// Config.Recampaign is off. The error wraps it with the reason.
var ErrLeadershipLost = errors.New("leadership lost")

// ErrGaveUp is wrapped by the error Run returns when it stops by itself because waiting cannot
// help: Redis refused a call in a way only a change of configuration cures — the credentials
// (WRONGPASS, NOAUTH), an ACL (NOPERM), a command it does not know (renamed or disabled), a
// Cluster client against a server without cluster support or a plain client redirected by a
// Cluster node (MOVED, ASK) — or Config.StartTimeout passed without a reply from Redis. The
// error also wraps its cause (errors.As finds the go-redis error; context.DeadlineExceeded for
// StartTimeout) and says which setting to fix. A refused renew ends the term first, as a lost
// term ends (OnStartedLeading's ctx cancelled, then OnStoppedLeading, then the release with
// ReleaseOnCancel); with Config.Recampaign off the error then wraps ErrLeadershipLost too. To
// keep retrying (an administrator may yet fix the ACL), call Run again after a pause.
var ErrGaveUp = errors.New("gave up")

// Reasons for stepping down, as logged and as passed on in errors.
const (
	reasonLost     = "lease lost"              // renew replied that the term is over
	reasonDeadline = "renew deadline exceeded" // no successful renew within RenewDeadline
	reasonStopped  = "stopped"                 // Run's ctx was cancelled
	reasonResigned = "resigned"                // Resign, or a resign request on the lease
	reasonGaveUp   = "gave up"                 // a renew failed in a way retrying cannot cure
)

// maxJitter bounds the random delay added to a follower's wake-up, so that replicas that
// learned the same expiry do not all hit Redis in the same microsecond. It is small because
// every takeover after an expiry waits for it: half a millisecond spreads the attempts of a
// few dozen followers over Redis's time for their scripts (about 20 µs each), and a follower
// that hears the winner's acquired event before its own wake-up sends none.
const maxJitter = 500 * time.Microsecond

// Elector campaigns for one lease and runs the callbacks of Config. Create it with New and
// start it with Run; its methods are safe for concurrent use.
type Elector struct {
	cfg   Config
	lease *leasekit.Lease
	store store       // the lease, as campaign, lead and watch use it
	clock clock.Clock // every time and timer of the algorithm

	running atomic.Bool
	// subscriptions counts the subscriptions to the lease's events that Redis confirmed, so
	// that tests can wait for a follower's new subscription after one dropped: go-redis
	// re-subscribes a dropped PubSub by itself before the elector closes it, so counting
	// subscribers in Redis cannot tell the follower's new one from that leftover.
	subscriptions atomic.Int64

	mu       sync.Mutex
	leader   string       // last observed leader identity, "" when none is known
	core     leaseCore    // what this replica knows of the lease's terms and holder (term.go)
	term     lease.Record // this replica's term while it leads
	ctl      *termControl // how Resign reaches the current term's lead loop
	leading  bool
	lastRenw time.Time           // send time of the last successful acquire or renew of the current term
	cands    leasekit.Candidates // the candidate registry as the last heartbeat found it (candidates.go)
	// candVersion is the version this replica advertises there (leasekit.SetCandidateVersion).
	candVersion string
	termStart   time.Time  // when the current term started, by the local clock (prefer.go)
	pref        preference // preferred leadership (prefer.go)
	// prefHandovers counts the handovers by preference that this Elector made (the simulator's
	// storm check).
	prefHandovers atomic.Int64

	notify *notifier
	errs   errorLog
	evict  evictionState                       // Redis's eviction policy, as checkEviction found it (eviction.go)
	rand   func(n time.Duration) time.Duration // the jitter's source in the simulator; nil: math/rand
	twin   twinWatch                           // another process with this identity (term.go)
	// startBy is when Run gives up without a reply from Redis (Config.StartTimeout); zero once
	// one came, or without a bound. Run's goroutine only.
	startBy time.Time
}

// New validates cfg, filling in defaults, and returns an Elector. Errors name the field and
// the rule. An Elector without Callbacks may Observe the lease but not Run.
func New(cfg Config) (*Elector, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	l, err := leasekit.NewWith(cfg.Client, cfg.LeaseName, lease.Options{
		Prefix:     cfg.KeyPrefix,
		Identity:   cfg.Identity,
		ReplicaAck: cfg.ReplicaAck,
	}, leasekit.Ext{AnnounceRenewals: true, ResignRequests: true})
	if err != nil {
		return nil, fmt.Errorf("new elector %q: %w", cfg.LeaseName, err)
	}
	warnContextTimeout(&cfg)
	e := &Elector{cfg: cfg, lease: l, store: redisStore{l}, clock: clock.RealClock{}, candVersion: buildVersion()}
	if cfg.Metrics != nil {
		cfg.Metrics.add(e)
	}
	return e, nil
}

// Run campaigns for the lease and, while this replica leads, runs OnStartedLeading. It
// returns nil when ctx is cancelled (after OnStartedLeading returned and, with
// ReleaseOnCancel, the lease was released), an error wrapping ErrGaveUp when Redis refused it
// in a way retrying cannot cure or Config.StartTimeout passed, or, when Config.Recampaign is
// off, an error wrapping ErrLeadershipLost when leadership was lost or ErrResigned after a
// resignation. Run requires Config.Callbacks.OnStartedLeading.
// When Run returns, every goroutine it started has ended. A panic of OnStoppedLeading goes on
// through Run at once, after the release (if any) was sent, without waiting for a renew in
// flight or for OnStartedLeading: a process that recovers it may still see them end later.
// An Elector runs once at a time.
//
// A cancel while an acquire is in flight waits for its reply (at most max(RetryPeriod,
// RenewDeadline/2)): a term won in that moment is released, without starting
// OnStartedLeading.
func (e *Elector) Run(ctx context.Context) error {
	if err := e.cfg.checkCallbacks(); err != nil {
		return fmt.Errorf("run elector %q: %w", e.cfg.LeaseName, err)
	}
	if !e.running.CompareAndSwap(false, true) {
		return fmt.Errorf("run elector %q: already running", e.cfg.LeaseName)
	}
	defer e.running.Store(false)
	logger := klog.FromContext(ctx).WithValues("lease", e.cfg.LeaseName, "identity", e.cfg.Identity)
	ctx = klog.NewContext(ctx, logger)
	e.errs.names, e.errs.fatal = redisfail.NamesFrom(ctx), e.fatal
	e.startBy = time.Time{}
	if e.cfg.StartTimeout > 0 {
		e.startBy = e.clock.Now().Add(e.cfg.StartTimeout)
	}
	defer e.checkEviction(ctx)() // once per Run, off the campaign's path (eviction.go)

	e.notify = startNotifier(e.cfg.Callbacks.OnNewLeader)
	defer e.notify.stop()
	defer e.startAdvertising(ctx)() // the candidate registry, off the election's path (candidates.go)
	w := &watch{clock: e.clock, every: e.cfg.RetryPeriod, subscribe: e.subscribe}
	defer w.wait()

	for {
		term, sent, ok, err := e.campaign(ctx, w)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		// A leader needs no events; a follower subscribes again before its first attempt.
		w.close()
		reason, started, fatal := e.lead(ctx, term, sent)
		if fatal != nil {
			return e.gaveUp("renew", fatal, true)
		}
		if !started && ctx.Err() == nil {
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		if !e.cfg.Recampaign && reason == reasonResigned {
			return fmt.Errorf("run elector %q: %w", e.cfg.LeaseName, ErrResigned)
		}
		if !e.cfg.Recampaign {
			return fmt.Errorf("run elector %q: %w: %s", e.cfg.LeaseName, ErrLeadershipLost, reason)
		}
	}
}

// fatal reports whether err is one that retrying cannot cure, for this Elector's client
// (internal/redisfail.Fatal): Run gives up on it.
func (e *Elector) fatal(err error) bool {
	_, cluster := e.cfg.Client.(*redis.ClusterClient)
	return redisfail.Fatal(err, cluster)
}

// gaveUp is Run's error after op failed with err, which retrying cannot cure; termLost says a
// term ended because of it.
func (e *Elector) gaveUp(op string, err error, termLost bool) error {
	out := fmt.Errorf("run elector %q: %w: Redis refused the %s (%s; retrying cannot help): %w",
		e.cfg.LeaseName, ErrGaveUp, op, redisfail.Reason(err), err)
	if fix := redisfail.Hint(err, e.errs.names); fix != "" {
		out = fmt.Errorf("%w; fix: %s", out, fix)
	}
	if termLost && !e.cfg.Recampaign {
		out = fmt.Errorf("%w; the term ended: %w", out, ErrLeadershipLost)
	}
	return out
}

// startTimedOut is Run's error when Config.StartTimeout passed without a reply from Redis;
// last is the error of the last attempt.
func (e *Elector) startTimedOut(last error) error {
	out := fmt.Errorf("run elector %q: %w: no reply from Redis within Config.StartTimeout (%v): %w",
		e.cfg.LeaseName, ErrGaveUp, e.cfg.StartTimeout, context.DeadlineExceeded)
	if last != nil {
		out = fmt.Errorf("%w; last error: %w", out, last)
		if fix := redisfail.Hint(last, e.errs.names); fix != "" {
			out = fmt.Errorf("%w; fix: %s", out, fix)
		}
	}
	return out
}

func jitter() time.Duration { return rand.N(maxJitter) }

// jitter draws a follower's wake-up jitter from e.rand, the simulator's seeded source, if set.
func (e *Elector) jitter() time.Duration {
	if e.rand != nil {
		return e.rand(maxJitter)
	}
	return jitter()
}

// newWakeTimer returns the timer of a follower's wake-ups, armed for an hour (campaign stops it
// at once). On the real clock it is a precisetimer: a takeover begins with the follower's
// wake-up at the expiry it learnt, which a runtime timer in an idle process makes up to a
// millisecond late.
func (e *Elector) newWakeTimer() clock.Timer {
	if _, real := e.clock.(clock.RealClock); real {
		return precisetimer.New(time.Hour)
	}
	return e.clock.NewTimer(time.Hour)
}

type tokenKey struct{}

// TokenFrom returns the fencing token of the term whose OnStartedLeading received ctx (or a
// context derived from it), and 0 for any other context. It saves the callback, which is
// written before the Elector exists, from reaching back for Elector.Token.
func TokenFrom(ctx context.Context) int64 {
	t, _ := ctx.Value(tokenKey{}).(int64)
	return t
}

// release gives the term up so that a follower takes over in about one round trip.
func (e *Elector) release(ctx context.Context, logger klog.Logger, term lease.Record) {
	rctx, cancel := context.WithTimeout(ctx, e.callTimeout())
	defer cancel()
	e.noteRelease(term)
	released, err := e.store.release(rctx, term)
	switch {
	case err != nil:
		logger.Error(err, "Failed to release the lease; followers take over when it expires", "token", term.Token)
		e.cfg.Metrics.redisError(e.cfg.LeaseName, "release", err)
	case !released:
		logger.Info("Lease was already gone at release", "token", term.Token)
	default:
		logger.V(2).Info("Released the lease", "token", term.Token)
	}
}

// noteRelease records that a release of term was sent, whatever its outcome (termGuard): one
// that failed may still run and delete the key later, and one that succeeded brings the
// record back only after Redis lost writes; no term starts on that record again.
func (e *Elector) noteRelease(term lease.Record) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.core.guard.retire(term.Token)
}

// timing is the lease's timing, as the core reads it.
func (e *Elector) timing() leaseTiming {
	return leaseTiming{leaseDuration: e.cfg.LeaseDuration, renewDeadline: e.cfg.RenewDeadline, retryPeriod: e.cfg.RetryPeriod}
}

// callTimeout bounds one Redis call: max(RetryPeriod, RenewDeadline/2), so that a round trip
// slower than RetryPeriod still succeeds while a leader keeps at least two renew attempts
// before its deadline (a renew is also never allowed past the deadline).
func (e *Elector) callTimeout() time.Duration {
	return timing.CallTimeout(e.cfg.RenewDeadline, e.cfg.RetryPeriod)
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// setLeading records the start of a term.
func (e *Elector) setLeading(term lease.Record, sent time.Time, ctl *termControl) {
	e.mu.Lock()
	e.leading, e.term, e.lastRenw, e.ctl, e.termStart = true, term, sent, ctl, e.clock.Now()
	e.mu.Unlock()
	e.observe(term, false)
	e.cfg.Metrics.setLeading(e.cfg.LeaseName, true, term.Token)
}

// renewed records a successful renew sent at sent.
func (e *Elector) renewed(sent time.Time) {
	e.mu.Lock()
	e.lastRenw = sent
	e.mu.Unlock()
}

// setFollowing records the end of a term.
func (e *Elector) setFollowing() {
	e.mu.Lock()
	e.leading = false
	if e.leader == e.cfg.Identity {
		e.leader = ""
	}
	e.mu.Unlock()
	e.cfg.Metrics.setLeading(e.cfg.LeaseName, false, 0)
}

// observe records news of a term: that rec holds the lease, or that it was released. News
// is ordered by token, so that an event that waited in a buffer cannot undo what a newer
// reply said; it reports whether the news was current.
func (e *Elector) observe(rec lease.Record, released bool) bool {
	e.mu.Lock()
	if !e.core.guard.news(rec.Token, released) {
		e.mu.Unlock()
		return false
	}
	identity := rec.Identity
	if released {
		identity = ""
	}
	e.noteLeaderLocked(identity)
	return true
}

// noteLeaderLocked records the leader identity of current news ("" after a release), with
// e.mu held, which it unlocks; a new leader is passed to OnNewLeader.
func (e *Elector) noteLeaderLocked(identity string) {
	changed := identity != e.leader
	e.leader = identity
	e.mu.Unlock()
	if changed && identity != "" {
		e.notify.push(identity)
	}
}

// IsLeader reports whether this replica leads now: between the start of a term and the
// cancellation of OnStartedLeading's ctx (or, after Run's ctx was cancelled, the release).
func (e *Elector) IsLeader() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leading
}

// Release releases the term with token that this Elector began, if Redis still holds it, and
// announces the release, so that a follower takes over at once. It is for a process that
// exits after Run returned: when the renew deadline passed (Redis slow or unreachable), Run
// steps down without releasing, and the lease would otherwise outlive the process until it
// expires. The release is owner-checked: it never touches another replica's term or a later
// one. false means the term had already ended; nothing changed. While Run runs it refuses:
// a release then would let a follower in while OnStartedLeading may still work (cancel Run's
// ctx with ReleaseOnCancel, or Resign, instead); Run cannot start until Release returned.
// Whatever its outcome, no later Run of this Elector starts a term on that record again (an
// error may mean the release still runs later); it waits for a new record instead.
func (e *Elector) Release(ctx context.Context, token int64) (bool, error) {
	if !e.running.CompareAndSwap(false, true) {
		return false, fmt.Errorf("release lease %q, token %d: Run is running; cancel its ctx (with ReleaseOnCancel) or call Resign", e.cfg.LeaseName, token)
	}
	defer e.running.Store(false)
	term := lease.Record{Token: token, Instance: e.lease.Instance(), Identity: e.cfg.Identity}
	e.noteRelease(term) // a later Run never resumes the term, whatever the outcome
	released, err := e.store.release(ctx, term)
	if err != nil {
		return false, fmt.Errorf("release lease %q, token %d: %w", e.cfg.LeaseName, token, err)
	}
	return released, nil
}

// Status is a snapshot of an Elector, as the /leader endpoint serves it.
type Status struct {
	// Name is the identity of the current leader, "" when none is known. The name (and JSON
	// field) is that of the classic Kubernetes leader-elector sidecar.
	Name string `json:"name"`
	// Identity is this replica's identity.
	Identity string `json:"identity"`
	// IsLeader reports whether this replica leads.
	IsLeader bool `json:"isLeader"`
	// Lease is the lease name.
	Lease string `json:"lease"`
	// Token is the fencing token of this replica's term, 0 when it does not lead.
	Token int64 `json:"token"`
	// LastRenew is the send time of the last successful renew of this replica's term.
	LastRenew *time.Time `json:"lastRenew,omitempty"`
	// Candidates are the identities of the lease's live candidates, sorted, this replica's
	// included: the replicas whose Elector (or elector run, sidecar) runs for the lease, as
	// this replica's last heartbeat in the candidate registry found them (at most a third of
	// LeaseDuration old while Run runs; none before its first heartbeat or after Run
	// returned). Advisory: a replica that crashed stays listed until its entry expires,
	// LeaseDuration after its last heartbeat. ResignTo's target must be one of them.
	Candidates []string `json:"candidates,omitempty"`
}

// Status returns a consistent snapshot of the elector's state.
func (e *Elector) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := Status{Name: e.leader, Identity: e.cfg.Identity, IsLeader: e.leading, Lease: e.cfg.LeaseName, Candidates: e.cands.Identities()}
	if e.leading {
		s.Token = e.term.Token
		t := e.lastRenw
		s.LastRenew = &t
	}
	return s
}

// sinceRenew returns how long ago the last successful renew of the current term was sent,
// and false when this replica does not lead.
func (e *Elector) sinceRenew() (time.Duration, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.leading {
		return 0, false
	}
	return e.clock.Since(e.lastRenw), true
}

// backoff doubles a wait from min to max.
type backoff struct {
	min, max, cur time.Duration
}

// newBackoff is the backoff of the calls to a lease after a failure: from 50ms to ceiling
// (RetryPeriod).
func newBackoff(ceiling time.Duration) backoff {
	return backoff{min: 50 * time.Millisecond, max: ceiling}
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else {
		b.cur = min(2*b.cur, b.max)
	}
	return b.cur
}

func (b *backoff) reset() { b.cur = 0 }

// store is what an Elector needs of its lease: the seam between the election algorithm
// (campaign, lead, watch) and Redis. redisStore is the real one; tests drive the algorithm
// through a fake, with a fake clock, to replay exact interleavings (late and lost replies,
// stale events, a deadline at the exact tick).
type store interface {
	// acquire is leasekit.Lease.AcquireOrReservation.
	acquire(ctx context.Context, ttl time.Duration) (bool, lease.Status, *leasekit.Reservation, error)
	// renew is leasekit.Lease.Renew.
	renew(ctx context.Context, term lease.Record, ttl time.Duration) (bool, error)
	// release is leasekit.Lease.Release.
	release(ctx context.Context, term lease.Record) (bool, error)
	// subscribe is leasekit.Lease.Subscribe.
	subscribe(ctx context.Context) (subscription, error)
	// resign is leasekit.Lease.RequestResign for this replica's own term.
	resign(ctx context.Context, term lease.Record, target string, holdOff, timeout time.Duration) error
	// advertise is leasekit.Lease.Advertise: a heartbeat in the candidate registry, or leave.
	advertise(ctx context.Context, ttl time.Duration, priority int64, version string, leave bool) (leasekit.Candidates, error)
}

// subscription is what a follower uses of a *leasekit.Subscription.
type subscription interface {
	Events() <-chan leasekit.Event
	Close() error
}

// redisStore is the store of a lease in Redis.
type redisStore struct{ l *leasekit.Lease }

func (s redisStore) acquire(ctx context.Context, ttl time.Duration) (bool, lease.Status, *leasekit.Reservation, error) {
	return s.l.AcquireOrReservation(ctx, ttl)
}

func (s redisStore) renew(ctx context.Context, term lease.Record, ttl time.Duration) (bool, error) {
	return s.l.Renew(ctx, term, ttl)
}

func (s redisStore) release(ctx context.Context, term lease.Record) (bool, error) {
	return s.l.Release(ctx, term)
}

func (s redisStore) subscribe(ctx context.Context) (subscription, error) {
	sub, err := s.l.Subscribe(ctx)
	if err != nil {
		return nil, err // not a typed nil in an interface
	}
	return sub, nil
}

func (s redisStore) resign(ctx context.Context, term lease.Record, target string, holdOff, timeout time.Duration) error {
	_, err := s.l.RequestResign(ctx, leasekit.ResignRequest{Target: target, HoldOff: holdOff, Timeout: timeout, Term: term})
	return err
}

// contextTimeoutOff reports whether client is a go-redis client whose socket reads ignore
// context deadlines (ContextTimeoutEnabled off, go-redis's default): a reply can then arrive
// long after the elector stopped waiting for it. The elector stays safe (a reply that comes
// at or after send time + RenewDeadline never starts a term), but calls hang for the client's
// ReadTimeout instead of the elector's bound.
func contextTimeoutOff(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client: // also redis.NewFailoverClient's
		return !c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient: // also redis.NewFailoverClusterClient's
		return !c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return !c.Options().ContextTimeoutEnabled
	}
	return false
}

// warnContextTimeout logs, once per New, that the client does not bound calls by their context.
func warnContextTimeout(cfg *Config) {
	if contextTimeoutOff(cfg.Client) {
		klog.InfoS("Warning: the Redis client has ContextTimeoutEnabled off, so a call to Redis is bounded by the client's read and write timeouts, not by the elector's deadline; set ContextTimeoutEnabled in its options",
			"lease", cfg.LeaseName)
	}
}

// notifier calls OnNewLeader with each new leader identity, in order, from one goroutine, so
// that a slow callback delays neither the election nor itself runs concurrently.
type notifier struct {
	fn      func(string)
	mu      sync.Mutex
	queue   []string
	wake    chan struct{}
	stopped chan struct{}
	done    chan struct{}
}

func startNotifier(fn func(string)) *notifier {
	n := &notifier{fn: fn, wake: make(chan struct{}, 1), stopped: make(chan struct{}), done: make(chan struct{})}
	if fn == nil {
		close(n.done)
		return n
	}
	go n.loop()
	return n
}

// push queues identity for OnNewLeader.
func (n *notifier) push(identity string) {
	if n == nil || n.fn == nil {
		return
	}
	n.mu.Lock()
	n.queue = append(n.queue, identity)
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// stop delivers what is queued and waits for the goroutine to end.
func (n *notifier) stop() {
	if n.fn != nil {
		close(n.stopped)
	}
	<-n.done
}

func (n *notifier) loop() {
	defer close(n.done)
	for {
		n.mu.Lock()
		queue := n.queue
		n.queue = nil
		n.mu.Unlock()
		for _, id := range queue {
			n.fn(id)
		}
		if len(queue) > 0 {
			continue
		}
		select {
		case <-n.wake:
		case <-n.stopped:
			n.mu.Lock()
			rest := n.queue
			n.mu.Unlock()
			if len(rest) == 0 {
				return
			}
		}
	}
}
