package gocron

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	gocronv2 "github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/pkg/lease"
)

// Defaults of LockerOptions.
const (
	// DefaultTTL is the lease time of a job lock: a replica that dies while it runs a job
	// blocks the job's next runs elsewhere for at most this long.
	DefaultTTL = 15 * time.Second
	// DefaultMinHold is how long a job lock is kept at least, counted from when it was
	// taken, even when the run ended sooner.
	DefaultMinHold = 500 * time.Millisecond
)

// unlockTimeout bounds Unlock's Redis call. Unlock runs on the job's ctx, which is already
// cancelled when the scheduler shuts down; the lock is released all the same.
const unlockTimeout = 5 * time.Second

// ErrLocked is wrapped by the error that Locker.Lock returns when another run holds the job's
// lock, so that gocron skips this run.
var ErrLocked = errors.New("job is locked")

// ErrLockLost is wrapped by the error that Lock.Unlock returns when the lock had been lost
// before the run ended (Redis lost it, or renewals failed for longer than the TTL): another
// run may have started meanwhile.
var ErrLockLost = errors.New("job lock was lost before the run ended")

// LockerOptions configure a Locker.
type LockerOptions struct {
	// Prefix starts the Redis keys of the job leases; lease.DefaultPrefix when empty.
	Prefix string
	// Identity names this replica in the lock records, e.g. the pod name. Required.
	Identity string
	// TTL is the lease time of a job lock, renewed every TTL/3 while the run lasts, so a run
	// may take longer; if this replica dies, the lock expires after TTL. DefaultTTL when 0.
	TTL time.Duration
	// MinHold keeps a lock, after a run that ended sooner, until MinHold after it was taken,
	// so that the other schedulers, whose timers fire a little later for the same scheduled
	// run (clock skew, timer latency), find it taken instead of running it again. It must be
	// shorter than the shortest interval between a job's runs: a lock still held at the next
	// run time makes every scheduler skip that run. DefaultMinHold when 0; a negative value
	// releases at once.
	MinHold time.Duration
}

// Locker is a gocron Locker on elector leases: one lease per job, named after the job, with a
// fencing token for every run. Its methods are safe for concurrent use.
//
// The lease of the job called NAME has the keys of docs/PROTOCOL.md, PREFIX:{NAME}:lease and
// PREFIX:{NAME}:token, so `elector status` shows who runs a job. A job name that is not a valid
// lease name (gocron's default names are function names; names may contain spaces) is
// replaced by "sha256-" and the first 32 hex digits of its SHA-256.
type Locker struct {
	client  redis.UniversalClient
	opts    LockerOptions
	mu      sync.Mutex
	holding map[string]*Lock // key: job name
}

var _ gocronv2.Locker = (*Locker)(nil)

// NewLocker returns a Locker that takes job locks through client (standalone, Sentinel
// failover or Cluster).
func NewLocker(client redis.UniversalClient, opts LockerOptions) (*Locker, error) {
	if client == nil {
		return nil, errors.New("new gocron locker: redis client is nil")
	}
	if opts.Prefix != "" {
		if err := leasewire.ValidateName(opts.Prefix); err != nil {
			return nil, fmt.Errorf("new gocron locker: Prefix %q %w", opts.Prefix, err)
		}
	}
	if err := leasewire.ValidateIdentity(opts.Identity); err != nil {
		return nil, fmt.Errorf("new gocron locker: Identity %q %w", opts.Identity, err)
	}
	if opts.TTL == 0 {
		opts.TTL = DefaultTTL
	}
	if opts.TTL < 3*time.Millisecond || opts.TTL%time.Millisecond != 0 {
		return nil, fmt.Errorf("new gocron locker: TTL %v must be a whole number of milliseconds, at least 3ms", opts.TTL)
	}
	if opts.MinHold == 0 {
		opts.MinHold = DefaultMinHold
	}
	return &Locker{client: client, opts: opts, holding: map[string]*Lock{}}, nil
}

// LeaseName returns the name of the lease that locks the job called key.
func LeaseName(key string) string {
	if leasewire.ValidateName(key) == nil {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256-" + hex.EncodeToString(sum[:16])
}

// Lock takes the lock of the job called key for one run. When another run holds it, anywhere,
// this process included, it returns an error wrapping ErrLocked at once, and gocron skips the
// run. While the lock is held it is renewed every TTL/3.
func (l *Locker) Lock(ctx context.Context, key string) (gocronv2.Lock, error) {
	ls, err := leasekit.New(l.client, LeaseName(key), lease.Options{Prefix: l.opts.Prefix, Identity: l.opts.Identity})
	if err != nil { // a fresh instance id per run: two runs in one process exclude each other
		return nil, fmt.Errorf("lock job %q: %w", key, err)
	}
	taken := time.Now()
	ok, st, err := ls.Acquire(ctx, l.opts.TTL)
	if err != nil {
		return nil, fmt.Errorf("lock job %q: %w", key, err)
	}
	if !ok {
		return nil, fmt.Errorf("lock job %q: %w by %q (token %d)", key, ErrLocked, st.Record.Identity, st.Record.Token)
	}
	lk := &Lock{locker: l, key: key, lease: ls, term: st.Record, taken: taken,
		stop: make(chan struct{}), done: make(chan struct{})}
	go lk.renew(klog.FromContext(ctx).WithValues("job", key, "lease", ls.Name(), "token", st.Record.Token))
	l.mu.Lock()
	l.holding[key] = lk
	l.mu.Unlock()
	return lk, nil
}

// Token returns the fencing token of the run of the job called key that this Locker holds the
// lock for, and false when it holds none. A job reads it to fence its writes:
//
//	token, ok := locker.Token("billing")
func (l *Locker) Token(key string) (int64, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lk, ok := l.holding[key]
	if !ok {
		return 0, false
	}
	return lk.term.Token, true
}

// Lock is one held job lock, returned by Locker.Lock. gocron calls Unlock when the run ends.
type Lock struct {
	locker *Locker
	key    string
	lease  *leasekit.Lease
	term   lease.Record
	taken  time.Time // send time of the acquire

	stop chan struct{} // closed by Unlock: stop renewing
	done chan struct{} // closed when renewing stopped
	lost bool          // a renewal found the lease gone; written before done is closed
	once sync.Once
	err  error
}

var _ gocronv2.Lock = (*Lock)(nil)

// Token returns the fencing token of this run: larger than the token of every earlier run of
// the job, on any replica.
func (lk *Lock) Token() int64 { return lk.term.Token }

// renew extends the lease every TTL/3 until Unlock, or until the lease is found gone.
func (lk *Lock) renew(logger klog.Logger) {
	defer close(lk.done)
	ttl := lk.locker.opts.TTL
	tick := time.NewTicker(ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-lk.stop:
			return
		case <-tick.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), ttl/3)
		ok, err := lk.lease.Renew(ctx, lk.term, ttl)
		cancel()
		switch {
		case err != nil:
			logger.Error(err, "Failed to renew a job lock; retrying")
		case !ok:
			logger.Info("Job lock was lost while the job ran")
			lk.lost = true
			return
		}
	}
}

// Unlock ends the run's hold on the lock: at once when MinHold has passed since the lock was
// taken, else it lets the lock expire then. It returns an error wrapping ErrLockLost when the
// lock had been lost during the run. Calling it again returns the same result.
func (lk *Lock) Unlock(ctx context.Context) error {
	lk.once.Do(func() { lk.err = lk.unlock(ctx) })
	return lk.err
}

func (lk *Lock) unlock(ctx context.Context) error {
	close(lk.stop)
	<-lk.done
	l := lk.locker
	l.mu.Lock()
	if l.holding[lk.key] == lk {
		delete(l.holding, lk.key)
	}
	l.mu.Unlock()
	if lk.lost {
		return fmt.Errorf("unlock job %q (token %d): %w", lk.key, lk.term.Token, ErrLockLost)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	var ok bool
	var err error
	if rest := (l.opts.MinHold - time.Since(lk.taken)).Truncate(time.Millisecond); rest > 0 {
		ok, err = lk.lease.Renew(ctx, lk.term, rest) // the lease now ends when the hold does
	} else {
		ok, err = lk.lease.Release(ctx, lk.term)
	}
	if err != nil {
		return fmt.Errorf("unlock job %q (token %d): %w", lk.key, lk.term.Token, err)
	}
	if !ok {
		return fmt.Errorf("unlock job %q (token %d): %w", lk.key, lk.term.Token, ErrLockLost)
	}
	return nil
}
