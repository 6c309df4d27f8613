// Package leasekit is what package election and the elector command build on package lease
// (pkg/lease) beyond its API: leases that announce renewals and take part in the resign
// protocol, their events and subscriptions, resign requests and reservations, batches for
// election.Group, done marks, listing, and the decoding of records and events.
//
// It declares no type of the lease's own (Record, Status, Options and ReplicaAck are package
// lease's) and reaches the lease's internals through the seam package lease sets in
// leasewire.Lease (pkg/lease/seam.go). The key layout and the naming rules are leasewire's.
// It must not decide when to acquire, renew or give up: package election does.
package leasekit

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/pkg/lease"
)

// internals is package lease's seam (pkg/lease/seam.go documents each method).
type internals interface {
	New(client redis.UniversalClient, name string, opts lease.Options, instance string, announce, resign bool) (*lease.Lease, error)
	ParseRecord(s string) (lease.Record, error)
	Client(l *lease.Lease) redis.UniversalClient
	Name(l *lease.Lease) string
	Identity(l *lease.Lease) string
	Instance(l *lease.Lease) string
	Prefix(l *lease.Lease) string
	Keys(l *lease.Lease) leasewire.Keys
	Acquire(ctx context.Context, l *lease.Lease, ttl time.Duration) (bool, lease.Status, []any, error)
	Renew(ctx context.Context, l *lease.Lease, term lease.Record, ttl time.Duration) (ok, resign bool, err error)
	ReadWithTTL(ctx context.Context, l *lease.Lease, key string) (v string, ttl time.Duration, ok bool, err error)
	Counter(ctx context.Context, l *lease.Lease, key, what string) (int64, error)
	Resign(ctx context.Context, l *lease.Lease, args ...any) ([]any, error)
	Done(ctx context.Context, l *lease.Lease, args ...any) (int64, error)
	Candidate(ctx context.Context, l *lease.Lease, args ...any) ([]any, error)
	PTTL(ms int64) time.Duration
	DurationTTL(d time.Duration) time.Duration
	BatchAcquire(l *lease.Lease, ttl time.Duration) (*lualib.Op, func(*redis.Cmd) (bool, lease.Status, []any, error), error)
	BatchRenew(scripts *lualib.State, t leasewire.HeldTerm, ttl time.Duration) (*lualib.Op, func(*redis.Cmd) (bool, error), error)
	BatchRelease(scripts *lualib.State, t leasewire.HeldTerm) (*lualib.Op, func(*redis.Cmd) (bool, error))
	BatchRenewMany(scripts *lualib.State, terms []leasewire.HeldTerm, ttl time.Duration) (*lualib.Op, func(*redis.Cmd) ([]bool, []error), error)
	LoadBatchScripts(ctx context.Context, client redis.UniversalClient) error
}

// seam is package lease's internals; importing package lease set leasewire.Lease.
var seam = leasewire.Lease.(internals)

// Lease is a lease of package lease with the extras of this package. Create it with New or
// NewWith; like lease.Lease it is safe for concurrent use.
type Lease struct {
	*lease.Lease
}

// Ext is what only package election and the elector command set on a lease.
type Ext struct {
	// Instance, when not empty, replaces the fresh random instance id: set it only to resume
	// the terms of a process that is known to be gone (election.Group), or in tests.
	Instance string
	// AnnounceRenewals makes every successful Renew publish a "renewed" event, so that
	// followers know when the lease will expire without polling.
	AnnounceRenewals bool
	// ResignRequests makes Acquire (AcquireOrReservation), Renew and Release take part in the
	// resign protocol (RequestResign); a Batch renews without looking at requests.
	ResignRequests bool
}

// New returns the lease called name, as lease.New does.
func New(client redis.UniversalClient, name string, opts lease.Options) (*Lease, error) {
	return NewWith(client, name, opts, Ext{})
}

// NewWith returns the lease called name, as lease.New does, with ext.
func NewWith(client redis.UniversalClient, name string, opts lease.Options, ext Ext) (*Lease, error) {
	l, err := seam.New(client, name, opts, ext.Instance, ext.AnnounceRenewals, ext.ResignRequests)
	if err != nil {
		return nil, err
	}
	return &Lease{Lease: l}, nil
}

// ParseRecord decodes a lease value; its errors wrap leasewire.ErrBadRecord.
func ParseRecord(s string) (lease.Record, error) { return seam.ParseRecord(s) }

// Name returns the lease name.
func (l *Lease) Name() string { return seam.Name(l.Lease) }

// Identity returns the identity this lease acquires with.
func (l *Lease) Identity() string { return seam.Identity(l.Lease) }

// Instance returns the instance id this lease acquires with.
func (l *Lease) Instance() string { return seam.Instance(l.Lease) }

// Keys returns the names of the lease's Redis keys and pub/sub channel.
func (l *Lease) Keys() leasewire.Keys { return seam.Keys(l.Lease) }

// AcquireOrReservation is lease.Lease.Acquire that, for a lease with ResignRequests refused
// during the hold-off after a resignation, also tells for whom and how long more the free
// lease is reserved.
func (l *Lease) AcquireOrReservation(ctx context.Context, ttl time.Duration) (bool, lease.Status, *Reservation, error) {
	return l.reservation(seam.Acquire(ctx, l.Lease, ttl))
}

// reservation decodes the reservation in an acquisition's outcome, if any.
func (l *Lease) reservation(ok bool, st lease.Status, reserved []any, err error) (bool, lease.Status, *Reservation, error) {
	if reserved == nil {
		return ok, st, nil, err
	}
	r, err := l.parseReserved(reserved)
	return false, lease.Status{}, r, err
}

// Renew is lease.Lease.Renew; with ResignRequests, true and an error wrapping
// ErrResignRequested mean the term was renewed and is asked to step down.
func (l *Lease) Renew(ctx context.Context, term lease.Record, ttl time.Duration) (bool, error) {
	ok, resign, err := seam.Renew(ctx, l.Lease, term, ttl)
	if err == nil && resign {
		return true, fmt.Errorf("renew lease %q: token %d: %w", l.Name(), term.Token, ErrResignRequested)
	}
	return ok, err
}

// Terms returns how many terms began on this lease (the transitions of `kubectl get lease`),
// 0 when none is recorded. The count starts when the first acquire of this protocol version
// ran, and is lost with Redis's data like the token key.
func (l *Lease) Terms(ctx context.Context) (int64, error) {
	return seam.Counter(ctx, l.Lease, l.Keys().Terms, "terms")
}
