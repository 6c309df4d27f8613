package clientgo

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
)

// leaseStore is an in-memory Lease object with a resourceVersion; memLease is one replica's
// resourcelock.LeaseLock on it, with the LeaseLock's semantics: Update sends the object its
// last Get, Create or Update returned, and the store refuses it (Conflict) when the
// resourceVersion moved on; Create fails (AlreadyExists) when the object exists.
type leaseStore struct {
	mu      sync.Mutex
	version int // 0: absent
	raw     []byte
}

type memLease struct {
	store    *leaseStore
	identity string
	seen     int // the resourceVersion of the last Get, Create or Update; 0 before any
}

var leaseGR = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

func (m *memLease) Get(context.Context) (*rl.LeaderElectionRecord, []byte, error) {
	m.store.mu.Lock()
	defer m.store.mu.Unlock()
	if m.store.version == 0 {
		return nil, nil, apierrors.NewNotFound(leaseGR, "lease")
	}
	var rec rl.LeaderElectionRecord
	if err := json.Unmarshal(m.store.raw, &rec); err != nil {
		return nil, nil, err
	}
	m.seen = m.store.version
	return &rec, m.store.raw, nil
}

func (m *memLease) Create(_ context.Context, ler rl.LeaderElectionRecord) error {
	m.store.mu.Lock()
	defer m.store.mu.Unlock()
	if m.store.version != 0 {
		return apierrors.NewAlreadyExists(leaseGR, "lease")
	}
	m.store.raw, _ = json.Marshal(ler)
	m.store.version++
	m.seen = m.store.version
	return nil
}

func (m *memLease) Update(_ context.Context, ler rl.LeaderElectionRecord) error {
	m.store.mu.Lock()
	defer m.store.mu.Unlock()
	if m.seen == 0 {
		return fmt.Errorf("lease not initialized, call get or create first")
	}
	if m.seen != m.store.version {
		return apierrors.NewConflict(leaseGR, "lease", fmt.Errorf("resourceVersion %d is not %d", m.seen, m.store.version))
	}
	m.store.raw, _ = json.Marshal(ler)
	m.store.version++
	m.seen = m.store.version
	return nil
}

func (m *memLease) RecordEvent(string) {}
func (m *memLease) Describe() string   { return "memory/lease" }
func (m *memLease) Identity() string   { return m.identity }

func (s *leaseStore) lease(id string) *memLease { return &memLease{store: s, identity: id} }

func (s *leaseStore) holder() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var r rl.LeaderElectionRecord
	_ = json.Unmarshal(s.raw, &r)
	return r.HolderIdentity
}

// hooked calls before once, just before the first Get or Update of its lock: the test's way
// to run another replica's step in the middle of a write to two locks.
type hooked struct {
	rl.Interface
	before func()
}

func (h *hooked) fire() {
	if f := h.before; f != nil {
		h.before = nil
		f()
	}
}

func (h *hooked) Get(ctx context.Context) (*rl.LeaderElectionRecord, []byte, error) {
	h.fire()
	return h.Interface.Get(ctx)
}

func (h *hooked) Update(ctx context.Context, ler rl.LeaderElectionRecord) error {
	h.fire()
	return h.Interface.Update(ctx, ler)
}

func redisLock(t *testing.T, rc *redis.Client, id string) *Lock {
	t.Helper()
	l, err := New(newClient(t, rc), "migrate", id, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func held(id string) rl.LeaderElectionRecord {
	now := time.Now()
	return rl.LeaderElectionRecord{HolderIdentity: id, LeaseDurationSeconds: 4, AcquireTime: metav1.NewTime(now), RenewTime: metav1.NewTime(now)}
}

// released writes a released record (what ReleaseOnCancel leaves) to the Lease and to Redis.
func released(t *testing.T, ctx context.Context, store *leaseStore, rc *redis.Client) {
	t.Helper()
	for _, l := range []rl.Interface{store.lease("old"), redisLock(t, rc, "old")} {
		if err := l.Create(ctx, held("old")); err != nil {
			t.Fatal(err)
		}
		if err := l.Update(ctx, rl.LeaderElectionRecord{LeaseDurationSeconds: 1}); err != nil {
			t.Fatal(err)
		}
	}
}

// The fourth version of a MultiLock migration, MultiLock{Redis, Lease}, beside the third,
// MultiLock{Lease, Redis}: two replicas take a released record at once, each wins its
// primary lock, then each overwrites its secondary after a fresh Get. Both Updates succeed:
// client-go makes both leaders. The same steps with DualLocks: neither leads (both retry).
func TestMultiLockSwappedPrimariesBothLead(t *testing.T) {
	ctx := context.Background()
	rc := startRedis(t)
	for _, kind := range []string{"MultiLock", "DualLock"} {
		t.Run(kind, func(t *testing.T) {
			_ = rc.FlushAll(ctx)
			store := &leaseStore{}
			released(t, ctx, store, rc)
			mk := func(id string, leaseFirst bool, second *hooked) rl.Interface {
				first := rl.Interface(store.lease(id))
				other := rl.Interface(redisLock(t, rc, id))
				if !leaseFirst {
					first, other = other, first
				}
				second.Interface = other
				if kind == "MultiLock" {
					return &rl.MultiLock{Primary: first, Secondary: second}
				}
				d, err := NewDualLock(first, second)
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			xs, ys := &hooked{}, &hooked{}
			x, y := mk("x", true, xs), mk("y", false, ys)
			for _, l := range []rl.Interface{x, y} {
				if rec, _, err := l.Get(ctx); err != nil || rec.HolderIdentity != "" {
					t.Fatalf("Get: %+v, %v; want the released record", rec, err)
				}
			}
			var yErr error
			xs.before = func() { yErr = y.Update(ctx, held("y")) } // between x's two writes
			xErr := x.Update(ctx, held("x"))
			t.Logf("%s: x: %v; y: %v; Lease holder %q", kind, xErr, yErr, store.holder())
			both := xErr == nil && yErr == nil
			if kind == "MultiLock" && !both {
				t.Errorf("MultiLock: expected both Updates to succeed (the known race), got x: %v, y: %v", xErr, yErr)
			}
			if kind == "DualLock" && (xErr == nil || yErr == nil) {
				t.Errorf("DualLock: at most one may lead, and here neither should: x: %v, y: %v", xErr, yErr)
			}
		})
	}
}

// A MultiLock replica starting beside an old-version replica that creates the Lease: the
// MultiLock's Create ignores AlreadyExists on its primary and creates its secondary, so both
// lead. A DualLock's Create fails.
func TestMultiLockCreateIgnoresAlreadyExists(t *testing.T) {
	ctx := context.Background()
	rc := startRedis(t)
	for _, kind := range []string{"MultiLock", "DualLock"} {
		t.Run(kind, func(t *testing.T) {
			_ = rc.FlushAll(ctx)
			store := &leaseStore{}
			var x rl.Interface = &rl.MultiLock{Primary: store.lease("new"), Secondary: redisLock(t, rc, "new")}
			if kind == "DualLock" {
				d, err := NewDualLock(store.lease("new"), redisLock(t, rc, "new"))
				if err != nil {
					t.Fatal(err)
				}
				x = d
			}
			if _, _, err := x.Get(ctx); !apierrors.IsNotFound(err) {
				t.Fatalf("Get of nothing: %v, want NotFound", err)
			}
			if err := store.lease("old").Create(ctx, held("old")); err != nil { // the old version leads
				t.Fatal(err)
			}
			err := x.Create(ctx, held("new"))
			if kind == "MultiLock" && err != nil {
				t.Errorf("MultiLock: expected Create to succeed (the known flaw), got %v", err)
			}
			if kind == "DualLock" && !apierrors.IsAlreadyExists(err) {
				t.Errorf("DualLock: Create beside a held Lease: %v, want AlreadyExists", err)
			}
		})
	}
}

// While an old-version replica holds the Lease and the Redis record is absent (the start of a
// migration), both MultiLock and DualLock report the old holder, not NotFound: a new-version
// replica waits.
func TestMigrationLockSeesOldLeader(t *testing.T) {
	ctx := context.Background()
	rc := startRedis(t)
	store := &leaseStore{}
	if err := store.lease("old").Create(ctx, held("old")); err != nil {
		t.Fatal(err)
	}
	d, err := NewDualLock(store.lease("new"), redisLock(t, rc, "new"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range []rl.Interface{&rl.MultiLock{Primary: store.lease("new"), Secondary: redisLock(t, rc, "new")}, d} {
		rec, _, err := l.Get(ctx)
		if err != nil || rec.HolderIdentity != "old" {
			t.Errorf("%T.Get: %+v, %v; want holder old", l, rec, err)
		}
	}
	// Redis holding another holder than the Lease (a half-done write): the holder is unknown.
	if err := redisLock(t, rc, "w").Create(ctx, held("w")); err != nil {
		t.Fatal(err)
	}
	if rec, _, err := d.Get(ctx); err != nil || rec.HolderIdentity != TwoHolders {
		t.Errorf("DualLock.Get with two holders: %+v, %v; want %q", rec, err, TwoHolders)
	}
}

// fleet runs client-go LeaderElectors on any locks and records every overlap: a replica that
// starts leading while another's OnStartedLeading context is still live.
type fleet struct {
	t          *testing.T
	mu         sync.Mutex
	leading    map[string]context.Context
	violations []string
	started    chan string
	tm         timing
}

type replica struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}
}

func (f *fleet) run(id string, lock rl.Interface) *replica {
	f.t.Helper()
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: f.tm.lease, RenewDeadline: f.tm.renew, RetryPeriod: f.tm.retry,
		ReleaseOnCancel: true, Name: "migrate",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				f.mu.Lock()
				for other, octx := range f.leading {
					if octx.Err() == nil {
						f.violations = append(f.violations, fmt.Sprintf("%s started leading while %s led", id, other))
					}
				}
				f.leading[id] = ctx
				f.mu.Unlock()
				f.started <- id
			},
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &replica{id: id, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); le.Run(ctx) }()
	f.t.Cleanup(func() { r.stop() })
	return r
}

func (r *replica) stop() { r.cancel(); <-r.done }

func (f *fleet) next(within time.Duration) string {
	f.t.Helper()
	select {
	case id := <-f.started:
		return id
	case <-time.After(within):
		f.t.Fatalf("no replica led within %v", within)
		return ""
	}
}

// A migration rolled replica by replica with client-go's LeaderElector: Lease only, then
// DualLock{Lease, Redis}, then Redis only, then back, each replica replaced while the fleet
// runs (the leader each time it is the next to go), with two versions side by side: no two
// leaders at any moment, and a leader again after every replacement.
func TestDualLockRollingMigration(t *testing.T) {
	rc := startRedis(t)
	store := &leaseStore{}
	f := &fleet{t: t, leading: map[string]context.Context{}, started: make(chan string, 64),
		tm: timing{lease: 2 * time.Second, renew: 1500 * time.Millisecond, retry: 100 * time.Millisecond}}
	n := 0
	newLock := func(stage, id string) rl.Interface {
		switch stage {
		case "lease":
			return store.lease(id)
		case "redis":
			return redisLock(t, rc, id)
		}
		d, err := NewDualLock(store.lease(id), redisLock(t, rc, id))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	var fleetNow []*replica
	for range 3 {
		n++
		id := fmt.Sprintf("lease-%d", n)
		fleetNow = append(fleetNow, f.run(id, newLock("lease", id)))
	}
	leader := f.next(30 * time.Second)
	for _, stage := range []string{"dual", "redis", "dual", "lease"} {
		for range len(fleetNow) {
			n++
			id := fmt.Sprintf("%s-%d", stage, n)
			fleetNow = append(fleetNow, f.run(id, newLock(stage, id))) // surge one
			old := fleetNow[0]
			fleetNow = fleetNow[1:]
			old.stop()
			if old.id == leader {
				leader = f.next(10 * f.tm.lease)
				t.Logf("%s -> %s", old.id, leader)
			}
		}
	}
	// The last fleet has a leader: stop it once more and see another take over.
	for _, r := range fleetNow {
		if r.id == leader {
			r.stop()
			next := f.next(10 * f.tm.lease)
			t.Logf("%s -> %s", leader, next)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.violations {
		t.Error(v)
	}
}

// With Redis unreachable, a DualLock replica neither acquires nor keeps leading: the leader
// steps down within its renew deadline, and an old-version replica on the Lease alone takes
// over once the Lease has expired, never while the DualLock replica led.
func TestDualLockRedisUnreachable(t *testing.T) {
	rc := startRedis(t)
	store := &leaseStore{}
	f := &fleet{t: t, leading: map[string]context.Context{}, started: make(chan string, 8),
		tm: timing{lease: 4 * time.Second, renew: 1500 * time.Millisecond, retry: 100 * time.Millisecond}}
	cut := newClient(t, rc)
	lock, err := New(cut, "migrate", "dual", Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDualLock(store.lease("dual"), lock)
	if err != nil {
		t.Fatal(err)
	}
	f.run("dual", d)
	if id := f.next(10 * time.Second); id != "dual" {
		t.Fatalf("%s leads", id)
	}
	if err := cut.Close(); err != nil { // every command of the DualLock's Redis client fails now
		t.Fatal(err)
	}
	cutAt := time.Now()
	f.run("lease", store.lease("lease"))
	if id := f.next(10 * f.tm.lease); id != "lease" {
		t.Fatalf("%s leads", id)
	}
	t.Logf("the Lease-only replica led %v after Redis was cut", time.Since(cutAt))
	if _, _, err := d.Get(context.Background()); err == nil || apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "closed") {
		t.Errorf("DualLock.Get with Redis cut: %v, want the client's error", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, v := range f.violations {
		t.Error(v)
	}
}
