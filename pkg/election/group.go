package election

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/utils/clock"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/pkg/lease"
)

//go:embed scripts/members.lua
var membersSource string

// membersScript is run as a function of elector's Redis function library (FCALL) or with
// EVALSHA/EVAL, as the client's mode says (internal/leasewire/lualib); allow-oom, as the
// lease's scripts.
var membersScript = lualib.Register("members", membersSource, true)

// GroupCallbacks are called as the Group's leadership of each lease changes.
type GroupCallbacks struct {
	// OnStartedLeading runs on a goroutine of its own when this replica begins a term
	// of lease name; TokenFrom(ctx) is the term's fencing token, as for an Elector's callback.
	// ctx is cancelled when the term can no longer be trusted, when the lease is shed to
	// another replica or removed, or when Run's ctx is cancelled; the lease is kept (renewed)
	// until it returns, then released. It may also return at once, leaving the term to run
	// until ctx is cancelled (no goroutine waits for a term then: the form for very many
	// leases); the lease is then released right after the cancel, so work handed to other
	// goroutines must stop at it and write with the fencing token. Required.
	OnStartedLeading func(ctx context.Context, name string)
	// OnStoppedLeading is called when a term of lease name is over: always after that term's
	// OnStartedLeading returned (and, for a term given up on purpose, after its release),
	// and before any later term of the lease begins. It may take its time: no other lease
	// waits for it. Required.
	OnStoppedLeading func(name string)
	// A panic in either callback is recovered and logged, and treated as a return.
}

// GroupConfig configures a Group. Timing fields and their defaults are those of Config, but
// for the renewals: a Group renews its held leases every RenewDeadline − 2 × RetryPeriod,
// rounded down to a whole number of RetryPeriods (at least one), 6s at the default timing,
// each batch bounded by RetryPeriod; its membership heartbeat goes every RetryPeriod.
type GroupConfig struct {
	// Client is the Redis client shared by all leases. Required.
	Client redis.UniversalClient
	// Group names the set of replicas that share the leases: its membership (the number of
	// live replicas, from which each one's fair share follows) is kept under this name.
	// Required; also labels metrics and logs.
	Group string
	// KeyPrefix starts every Redis key; lease.DefaultPrefix when empty.
	KeyPrefix string
	// Identity names this replica, e.g. the pod name. Empty: $POD_NAME (set it from the
	// Kubernetes downward API, metadata.name), else the host name.
	Identity string
	// Leases are the lease names to campaign for; Add and Remove change them at run time.
	Leases []string
	// MaxLeases caps the leases this replica holds at once; 0 means no cap.
	MaxLeases int

	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration

	// Callbacks are called per lease.
	Callbacks GroupCallbacks
	// Metrics, when set, receive the group's figures (see NewMetrics).
	Metrics *Metrics
}

// Group campaigns for many leases over one Redis client, with batched round trips: a renewal
// of every held lease costs a few calls (one per 256 leases and Redis node), not one round
// trip per lease, and an attempt on a lease another replica holds is a read, tried once per
// 4 × LeaseDuration by a replica that holds about its share, or less often so that it reads
// at most 1,000 leases a second (docs/DESIGN.md, "Parking").
// The replicas of a group spread the leases evenly: each counts the live replicas R through a
// membership key and aims at ceil(K/R) of the K leases, shedding (releasing) what it holds
// beyond that so that a replica that joins gets its share at once; leases of a replica that
// died are taken over as they expire. Every lease keeps the safety rules of Elector: a term
// steps down before its lease can expire, and carries a fencing token.
//
// One goroutine (Run's loop) owns the state of every lease; it never waits for Redis or for
// a callback. Held, Check and Members read a view it keeps up to date (groupView).
//
// A Group does not take part in the resign protocol (Elector.Resign, `elector resign`): it
// renews in batches without looking at requests, and its releases reserve nothing, so a
// request for one of its leases expires unanswered. Its leases move by shedding: Remove a
// lease, or stop the replica, to move it off this one.
type Group struct {
	cfg      GroupConfig
	clock    clock.Clock
	instance string
	member   string
	members  string // membership key
	pattern  string // events of all leases under the prefix

	mu      sync.Mutex
	names   map[string]struct{} // leases campaigned for, as Add and Remove left them
	pending []groupChange       // Add/Remove not yet applied by Run
	running bool
	wake    chan struct{}

	view *groupView
	// leases is the machine's table (groupMachine.leases), kept across Runs: a release that
	// failed at the end of one Run may still run during the next. Used by one Run at a time.
	leases map[string]*groupLease
	maxLag atomic.Int64 // the latest the loop woke up after it planned to, in ns (tests)
	seam   groupRedis   // the simulator's Redis (tests); nil: redisGroup over cfg.Client

	// rand is the jitter's source in the simulator (Elector.rand's counterpart); nil: math/rand.
	rand func(n time.Duration) time.Duration
}

type groupChange struct {
	name string
	add  bool
}

// groupView is what the loop shows Held, Check and Members: the held terms and the member
// count. Only the loop writes it, one entry per change (a copy of thousands of leases per
// change would cost O(K) each time a term starts or ends); readers copy under the lock.
type groupView struct {
	mu   sync.RWMutex
	held map[string]heldTerm
	live int
}

type heldTerm struct {
	token  int64
	lastOK time.Time
}

func newGroupView() *groupView { return &groupView{held: map[string]heldTerm{}, live: 1} }

func (v *groupView) set(name string, t heldTerm) {
	v.mu.Lock()
	v.held[name] = t
	v.mu.Unlock()
}

func (v *groupView) drop(name string) {
	v.mu.Lock()
	delete(v.held, name)
	v.mu.Unlock()
}

func (v *groupView) reset() {
	v.mu.Lock()
	clear(v.held)
	v.live = 1
	v.mu.Unlock()
}

func (v *groupView) setLive(n int) {
	v.mu.Lock()
	v.live = n
	v.mu.Unlock()
}

func (v *groupView) len() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return len(v.held)
}

// NewGroup validates cfg, filling in defaults, and returns a Group.
func NewGroup(cfg GroupConfig) (*Group, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	instance, err := leasewire.NewInstanceID()
	if err != nil {
		return nil, fmt.Errorf("new group %q: %w", cfg.Group, err)
	}
	g := &Group{
		cfg:      cfg,
		instance: instance,
		member:   instance + ":" + cfg.Identity,
		members:  leasewire.KeysFor(cfg.KeyPrefix, cfg.Group).Members,
		pattern:  leasewire.EventsPattern(cfg.KeyPrefix),
		names:    map[string]struct{}{},
		wake:     make(chan struct{}, 1),
		leases:   map[string]*groupLease{},
		clock:    clock.RealClock{}, // the simulator replaces it, as the Elector's
	}
	g.view = newGroupView()
	if err := g.Add(cfg.Leases...); err != nil {
		return nil, err
	}
	if cfg.Metrics != nil {
		cfg.Metrics.addGroup(g)
	}
	return g, nil
}

// validate fills in defaults and checks c. Every error names the field and the rule, as
// Config's do.
func (c *GroupConfig) validate() error {
	if c.Client == nil {
		return errors.New("GroupConfig.Client must be set")
	}
	if err := leasewire.ValidateName(c.Group); err != nil {
		return fmt.Errorf("GroupConfig.Group %q %w", c.Group, err)
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = lease.DefaultPrefix
	}
	if err := leasewire.ValidateName(c.KeyPrefix); err != nil {
		return fmt.Errorf("GroupConfig.KeyPrefix %q %w", c.KeyPrefix, err)
	}
	id, err := resolveIdentity(c.Identity, "GroupConfig.Identity")
	if err != nil {
		return err
	}
	c.Identity = id
	for i, name := range c.Leases {
		if err := leasewire.ValidateName(name); err != nil {
			return fmt.Errorf("GroupConfig.Leases[%d] %q %w", i, name, err)
		}
	}
	if c.MaxLeases < 0 {
		return fmt.Errorf("GroupConfig.MaxLeases (%d) must not be negative (0: no cap)", c.MaxLeases)
	}
	if err := applyTiming("GroupConfig", &c.LeaseDuration, &c.RenewDeadline, &c.RetryPeriod); err != nil {
		return err
	}
	if c.Callbacks.OnStartedLeading == nil {
		return errors.New("GroupConfig.Callbacks.OnStartedLeading must be set")
	}
	if c.Callbacks.OnStoppedLeading == nil {
		return errors.New("GroupConfig.Callbacks.OnStoppedLeading must be set")
	}
	return nil
}

// Add campaigns for more leases, at once if Run is running. Names already present are
// ignored. A lease that is still being released or wound down after a Remove is tried again
// only once that is over: Add never resumes a term.
func (g *Group) Add(names ...string) error {
	for _, n := range names {
		if err := leasewire.ValidateName(n); err != nil {
			return fmt.Errorf("group %q: add lease %q: name %w", g.cfg.Group, n, err)
		}
	}
	g.mu.Lock()
	for _, n := range names {
		g.names[n] = struct{}{}
		g.pending = append(g.pending, groupChange{name: n, add: true})
	}
	g.mu.Unlock()
	g.poke()
	return nil
}

// Remove stops campaigning for leases; a lease this replica holds is released after its
// OnStartedLeading returned, then OnStoppedLeading is called.
func (g *Group) Remove(names ...string) {
	g.mu.Lock()
	for _, n := range names {
		delete(g.names, n)
		g.pending = append(g.pending, groupChange{name: n})
	}
	g.mu.Unlock()
	g.poke()
}

func (g *Group) poke() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Held returns the leases this replica holds, with the fencing token of each term.
func (g *Group) Held() map[string]int64 {
	v := g.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	held := make(map[string]int64, len(v.held))
	for name, t := range v.held {
		held[name] = t.token
	}
	return held
}

// Members returns the number of live replicas of the group seen by the last heartbeat.
func (g *Group) Members() int {
	g.view.mu.RLock()
	defer g.view.mu.RUnlock()
	return g.view.live
}

// Check returns an error when a lease this replica holds has gone without a successful
// renew for longer than RenewDeadline + tolerance (the group is wedged); never for a replica
// that holds nothing.
func (g *Group) Check(tolerance time.Duration) error {
	limit := g.cfg.RenewDeadline + tolerance
	g.view.mu.RLock()
	defer g.view.mu.RUnlock()
	for name, t := range g.view.held {
		if since := g.clock.Since(t.lastOK); since > limit {
			return fmt.Errorf("group %q holds lease %q but its last successful renew was %v ago (limit %v)",
				g.cfg.Group, name, since.Round(time.Millisecond), limit)
		}
	}
	return nil
}
