package election

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/lease"
)

//go:embed scripts/members.lua
var membersSource string

var membersScript = redis.NewScript(membersSource)

// GroupCallbacks are called as the Group's leadership of each lease changes.
type GroupCallbacks struct {
	// OnStartedLeading runs in its own goroutine when this replica begins a term of lease
	// name, with the term's fencing token. ctx is cancelled when the term can no longer be
	// trusted, when the lease is shed to another replica or removed, or when Run's ctx is
	// cancelled; the lease is kept (renewed) until it returns, then released. Required.
	OnStartedLeading func(ctx context.Context, name string, token int64)
	// OnStoppedLeading is called when a term of lease name is over. Required.
	OnStoppedLeading func(name string)
}

// GroupConfig configures a Group. Timing fields and their defaults are those of Config.
type GroupConfig struct {
	// Client is the Redis client shared by all leases. Required.
	Client redis.UniversalClient
	// Group names the set of replicas that share the leases: its membership (the number of
	// live replicas, from which each one's fair share follows) is kept under this name.
	// Required; also labels metrics and logs.
	Group string
	// KeyPrefix starts every Redis key; lease.DefaultPrefix when empty.
	KeyPrefix string
	// Identity names this replica, e.g. the pod name. Empty: DefaultIdentity ($POD_NAME, else
	// the host name).
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

// Group campaigns for many leases over one Redis client, with batched round trips: each
// retry period costs a few pipelines (one per Redis node), not one round trip per lease.
// The replicas of a group spread the leases evenly: each counts the live replicas R through a
// membership key and aims at ceil(K/R) of the K leases, shedding (releasing) what it holds
// beyond that so that a replica that joins gets its share at once; leases of a replica that
// died are taken over as they expire. Every lease keeps the safety rules of Elector: a term
// steps down before its lease can expire, and carries a fencing token.
type Group struct {
	cfg     GroupConfig
	member  string
	members string // membership key
	pattern string // events of all leases under the prefix

	mu       sync.Mutex
	leases   map[string]*groupLease
	held     map[*groupLease]struct{} // leases in stateLeading or stateStopping
	draining int                      // leases in stateDraining
	active   int                      // leases not removed
	pending  []groupChange            // Add/Remove not yet applied by Run
	wake     chan struct{}
	returned []*groupLease // OnStartedLeading calls that returned
	running  bool
	live     int // live replicas seen by the last heartbeat
}

type groupChange struct {
	name string
	add  bool
}

// groupLease is the state of one lease. Its fields are owned by Run's goroutine, except
// state, term and lastOK, which are also read under Group.mu by Held and Check.
type groupLease struct {
	name   string
	l      *lease.Lease
	state  leaseState
	term   lease.Record
	lastOK time.Time // send time of the last successful acquire or renew

	cancel   context.CancelFunc
	release  bool // release when OnStartedLeading returned (graceful stop)
	removed  bool
	next     time.Time // when to try to acquire, while idle
	eager    bool      // next was set by a release event: try only below the fair share
	heapIdx  int       // index in the try queue, -1 when not queued
	inflight bool      // in a batch under way
}

type leaseState int

const (
	stateIdle     leaseState = iota // not ours; tried at next
	stateLeading                    // ours, OnStartedLeading running
	stateStopping                   // ours, OnStartedLeading asked to stop; renewed until it returns
	stateDraining                   // lost; waiting for OnStartedLeading to return
)

// NewGroup validates cfg, filling in defaults, and returns a Group.
func NewGroup(cfg GroupConfig) (*Group, error) {
	if cfg.Client == nil {
		return nil, errors.New("group config: Client must be set")
	}
	if err := lease.ValidateName(cfg.Group); err != nil {
		return nil, fmt.Errorf("group config: Group %q %w", cfg.Group, err)
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = lease.DefaultPrefix
	}
	if err := lease.ValidateName(cfg.KeyPrefix); err != nil {
		return nil, fmt.Errorf("group config: KeyPrefix %q %w", cfg.KeyPrefix, err)
	}
	id, err := identityOrDefault(cfg.Identity)
	if err != nil {
		return nil, fmt.Errorf("group config: %w", err)
	}
	cfg.Identity = id
	if err := lease.ValidateIdentity(cfg.Identity); err != nil {
		return nil, fmt.Errorf("group config: Identity %q %w", cfg.Identity, err)
	}
	if cfg.MaxLeases < 0 {
		return nil, fmt.Errorf("group config: MaxLeases must not be negative, got %d", cfg.MaxLeases)
	}
	for _, d := range []struct {
		field string
		v     *time.Duration
		def   time.Duration
	}{
		{"LeaseDuration", &cfg.LeaseDuration, DefaultLeaseDuration},
		{"RenewDeadline", &cfg.RenewDeadline, DefaultRenewDeadline},
		{"RetryPeriod", &cfg.RetryPeriod, DefaultRetryPeriod},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return nil, fmt.Errorf("group config: %s must be positive, got %v", d.field, *d.v)
		}
	}
	if err := ValidateTiming(cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod); err != nil {
		return nil, fmt.Errorf("group config: %w", err)
	}
	if cfg.Callbacks.OnStartedLeading == nil || cfg.Callbacks.OnStoppedLeading == nil {
		return nil, errors.New("group config: Callbacks.OnStartedLeading and Callbacks.OnStoppedLeading must be set")
	}
	instance, err := lease.NewInstanceID()
	if err != nil {
		return nil, fmt.Errorf("group config: %w", err)
	}
	g := &Group{
		cfg:     cfg,
		member:  instance + ":" + cfg.Identity,
		members: cfg.KeyPrefix + ":{" + cfg.Group + "}:members",
		pattern: cfg.KeyPrefix + ":{*}:events",
		leases:  map[string]*groupLease{},
		held:    map[*groupLease]struct{}{},
		wake:    make(chan struct{}, 1),
		live:    1,
	}
	if err := g.Add(cfg.Leases...); err != nil {
		return nil, err
	}
	if cfg.Metrics != nil {
		cfg.Metrics.addGroup(g)
	}
	return g, nil
}

// Add campaigns for more leases, at once if Run is running. Names already present are ignored.
func (g *Group) Add(names ...string) error {
	for _, n := range names {
		if err := lease.ValidateName(n); err != nil {
			return fmt.Errorf("group %q: add lease %q: name %w", g.cfg.Group, n, err)
		}
	}
	g.mu.Lock()
	for _, n := range names {
		g.pending = append(g.pending, groupChange{name: n, add: true})
	}
	g.mu.Unlock()
	g.poke()
	return nil
}

// Remove stops campaigning for leases; a lease this replica holds is released after its
// OnStartedLeading returned.
func (g *Group) Remove(names ...string) {
	g.mu.Lock()
	for _, n := range names {
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
	g.mu.Lock()
	defer g.mu.Unlock()
	held := make(map[string]int64, len(g.held))
	for gl := range g.held {
		held[gl.name] = gl.term.Token
	}
	return held
}

// Names returns the leases the group campaigns for, sorted.
func (g *Group) Names() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	names := make([]string, 0, len(g.leases))
	for n, gl := range g.leases {
		if !gl.removed {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// Members returns the number of live replicas of the group seen by the last heartbeat.
func (g *Group) Members() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.live
}

// Check returns an error when a lease this replica holds has gone without a successful
// renew for longer than RenewDeadline + tolerance (the group is wedged); never for a replica
// that holds nothing.
func (g *Group) Check(tolerance time.Duration) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	limit := g.cfg.RenewDeadline + tolerance
	for gl := range g.held {
		if time.Since(gl.lastOK) > limit {
			return fmt.Errorf("group %q holds lease %q but its last successful renew was %v ago (limit %v)",
				g.cfg.Group, gl.name, time.Since(gl.lastOK).Round(time.Millisecond), limit)
		}
	}
	return nil
}

// setState moves gl to state s, keeping the held set. Called with g.mu held.
func (g *Group) setState(gl *groupLease, s leaseState) {
	if gl.state == stateDraining {
		g.draining--
	}
	if s == stateDraining {
		g.draining++
	}
	gl.state = s
	if s == stateLeading || s == stateStopping {
		g.held[gl] = struct{}{}
	} else {
		delete(g.held, gl)
	}
}

// activeLocked returns the number of leases campaigned for. Called with g.mu held.
func (g *Group) activeLocked() int { return g.active }

// share is the number of leases this replica aims to hold: ceil(K/R), capped by MaxLeases.
func (g *Group) share(k, live int) int {
	s := int(math.Ceil(float64(k) / float64(max(live, 1))))
	if g.cfg.MaxLeases > 0 {
		s = min(s, g.cfg.MaxLeases)
	}
	return s
}
