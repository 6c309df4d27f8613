package clientgo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// TwoHolders is the holder a DualLock reports while its two locks name different holders (or
// one of them is released and the other is not): a holder that is no candidate, so that
// client-go waits until the record has not changed for a lease duration before it takes over.
const TwoHolders = "elector/two-holders"

// DualLock is a client-go resource lock made of two locks, both of which a replica must hold
// to lead: the lock of a migration from one lock to another, such as from a Kubernetes Lease
// to a Redis Lock and back, without a moment with two leaders.
//
// Run a fleet in three versions, each rolled out completely before the next: the old lock
// alone, then NewDualLock(old, new), then the new lock alone. Every two versions that run side
// by side share a lock, and a DualLock acquires, renews and releases each of its two locks
// only by the optimistic concurrency of that lock, compared with the state its last Get read
// (a Lease's resourceVersion, a Lock's stored bytes): a replica that leads on either lock alone
// keeps a DualLock replica from leading, and of two DualLock replicas racing for a free
// record, at most one gets both writes through.
//
// client-go's deprecated resourcelock.MultiLock is not such a lock: it ignores AlreadyExists
// when it creates its primary lock, and it updates its secondary lock after a fresh Get,
// unconditionally; two MultiLocks with their primary and secondary swapped (the fourth
// version a MultiLock migration needs) can both lead (dual_test.go shows both).
//
// While a DualLock runs, both locks must be reachable: when either cannot be read or written,
// no DualLock replica acquires or renews, and the leader steps down at its renew deadline, as
// when its only lock is unreachable.
type DualLock struct {
	locks [2]resourcelock.Interface

	mu     sync.Mutex
	absent [2]bool // the last Get found this lock absent: the next acquiring Update creates it
}

var _ resourcelock.Interface = (*DualLock)(nil)

// NewDualLock returns the lock that holds first and second together. Both must have the
// identity of this replica; first is written before second.
func NewDualLock(first, second resourcelock.Interface) (*DualLock, error) {
	if first == nil || second == nil {
		return nil, errors.New("new dual lock: both locks are required")
	}
	if first.Identity() != second.Identity() {
		return nil, fmt.Errorf("new dual lock: the locks have different identities, %q and %q", first.Identity(), second.Identity())
	}
	return &DualLock{locks: [2]resourcelock.Interface{first, second}}, nil
}

// Get reads both records. It returns NotFound only when both are absent. When one is absent,
// the record is the other's. When both exist and name the same holder, the record is the
// first's with the longer lease duration of the two; when they name different holders, the
// holder is TwoHolders. The raw record joins both raw records, so that a write to either one
// shows client-go a change.
func (d *DualLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	var recs [2]*resourcelock.LeaderElectionRecord
	var raws [2][]byte
	var absent [2]bool
	for i, l := range d.locks {
		rec, raw, err := l.Get(ctx)
		switch {
		case apierrors.IsNotFound(err):
			absent[i] = true
			raws[i] = []byte("absent")
		case err != nil:
			return nil, nil, fmt.Errorf("dual lock: %s: %w", l.Describe(), err)
		default:
			recs[i], raws[i] = rec, raw
		}
	}
	d.mu.Lock()
	d.absent = absent
	d.mu.Unlock()
	raw := bytes.Join([][]byte{raws[0], raws[1]}, []byte("\n"))
	switch {
	case absent[0] && absent[1]:
		return nil, nil, apierrors.NewNotFound(groupResource, d.Describe())
	case absent[0]:
		rec := *recs[1]
		return &rec, raw, nil
	case absent[1]:
		rec := *recs[0]
		return &rec, raw, nil
	}
	rec := *recs[0]
	rec.LeaseDurationSeconds = max(recs[0].LeaseDurationSeconds, recs[1].LeaseDurationSeconds)
	if recs[0].HolderIdentity != recs[1].HolderIdentity {
		rec.HolderIdentity = TwoHolders
	}
	return &rec, raw, nil
}

// Create creates both records; it fails when either exists (AlreadyExists).
func (d *DualLock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	for i, l := range d.locks {
		if err := l.Create(ctx, ler); err != nil {
			return fmt.Errorf("dual lock: create %s: %w", l.Describe(), err)
		}
		d.setPresent(i)
	}
	return nil
}

// Update writes ler to both locks, the first first, each by its own optimistic concurrency:
// it fails (and the caller does not lead) when either record changed since the last Get or
// write. A record that the last Get found absent is created instead, unless ler releases.
func (d *DualLock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	d.mu.Lock()
	absent := d.absent
	d.mu.Unlock()
	for i, l := range d.locks {
		var err error
		switch {
		case absent[i] && ler.HolderIdentity == "":
			continue // nothing to release
		case absent[i]:
			err = l.Create(ctx, ler)
		default:
			err = l.Update(ctx, ler)
		}
		if err != nil {
			return fmt.Errorf("dual lock: update %s: %w", l.Describe(), err)
		}
		d.setPresent(i)
	}
	return nil
}

func (d *DualLock) setPresent(i int) {
	d.mu.Lock()
	d.absent[i] = false
	d.mu.Unlock()
}

// RecordEvent records the event on both locks.
func (d *DualLock) RecordEvent(s string) {
	d.locks[0].RecordEvent(s)
	d.locks[1].RecordEvent(s)
}

// Describe names both locks.
func (d *DualLock) Describe() string {
	return d.locks[0].Describe() + "+" + d.locks[1].Describe()
}

// Identity returns the identity of both locks.
func (d *DualLock) Identity() string { return d.locks[0].Identity() }
