// Package lease implements one named Redis lease with fencing tokens: the primitive that
// elector's leader election is built on.
//
// A Lease acquires, renews and releases one key, each in a single round trip running a Lua
// script from this package (EVALSHA, and EVAL on NOSCRIPT, as go-redis's Script does). Every
// acquisition begins a term with a fencing token larger than any token handed out before for
// the same name, even after Redis lost its data. Releases and acquisitions are announced on a
// pub/sub channel, so that observers learn of a change without polling.
//
// A Lease keeps no state between calls that matters to the protocol (it keeps the boxed form
// of its script arguments, args.go, to save allocations) and is safe for concurrent use. It
// knows nothing of timers or callbacks: package election decides when to call it. The keys,
// the record format and the scripts are specified in docs/PROTOCOL.md.
//
// The package owns the key layout (KeysFor: the only place that builds PREFIX:{NAME}:… names),
// the record format, the Lua scripts and their replies, and the pub/sub events. It must not
// decide when to acquire, renew or give up, or call user code: package election does.
package lease

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leaseerr"
	"github.com/elector/elector/internal/luaerr"
	"github.com/elector/elector/internal/rediserr"
)

// DefaultPrefix is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "elector"

// ErrTokenRange is wrapped by the error of an acquisition refused because the next fencing
// token would exceed 2^53-1, the largest integer a Redis script counts exactly (its numbers are
// doubles). Handing out a larger one could repeat a token. Microseconds since 1970 reach the
// limit in the year 2255; before that only a token key set by hand gets there.
var ErrTokenRange = leaseerr.TokenRange

// NoExpiry is the TTL reported for a lease key that exists without an expiry (set by hand).
const NoExpiry = time.Duration(-1)

var (
	//go:embed scripts/acquire.lua
	acquireSource string
	//go:embed scripts/renew.lua
	renewSource string
	//go:embed scripts/release.lua
	releaseSource string
)

// The scripts are immutable values (source and SHA1); sharing them is not shared state.
var (
	acquireScript = newScript(acquireSource)
	renewScript   = newScript(renewSource)
	releaseScript = newScript(releaseSource)
)

// Options configure a Lease. The zero value is usable for an observer that never acquires.
type Options struct {
	// Prefix starts every key of the lease; DefaultPrefix when empty.
	Prefix string
	// Identity names this replica in the record, for example the pod name. Required to Acquire.
	Identity string
	// Instance is the random id that tells this process's terms apart from those of any other
	// process with the same Identity. Leave it empty to have New generate one; set it only to
	// resume the terms of a process that is known to be gone, or in tests.
	Instance string
	// AnnounceRenewals makes every successful Renew publish a "renewed" event. Followers that
	// receive it know when the lease will expire and need not poll until then: one command per
	// renewal in total, however many followers listen. package election turns it on.
	AnnounceRenewals bool
	// ResignRequests makes Acquire, Renew and Release take part in the resign protocol
	// (RequestResign): Acquire respects a reservation, Renew reports a request that asks its
	// term to step down (ErrResignRequested), Release turns that request into a reservation.
	// package election turns it on; a Batch renews without looking at requests.
	ResignRequests bool
	// ReplicaAck, with Replicas > 0, makes every Acquire and Renew wait for replicas of the
	// Redis master to acknowledge the write (WAIT); see ReplicaAck.
	ReplicaAck ReplicaAck
}

// Lease is one named lease in Redis. Create it with New.
type Lease struct {
	client   redis.UniversalClient
	name     string
	identity string
	instance string
	owner    string // "<instance>:<identity>": the record after its version and token
	keys     Keys
	aclKeys  string // the ACL key pattern of the keys under the prefix (aclKeyPattern)
	announce bool
	resign   bool       // Options.ResignRequests
	ack      ReplicaAck // Options.ReplicaAck

	// The keys of each script call, boxed (args.go): acquire takes the lease, token and terms
	// keys, renew and release the lease key; with Options.ResignRequests both end with the
	// resign key. Never changed after New.
	acquireKeys, termKeys []any
	boxes                 argBoxes
}

// New returns the lease called name, stored through client. The client may be a standalone,
// Sentinel failover or Cluster client: all keys of one lease share the hash tag {name}.
func New(client redis.UniversalClient, name string, opts Options) (*Lease, error) {
	if client == nil {
		return nil, errors.New("new lease: redis client is nil")
	}
	if err := ValidateName(name); err != nil {
		return nil, fmt.Errorf("new lease: name %q %w", name, err)
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := ValidateName(prefix); err != nil {
		return nil, fmt.Errorf("new lease %q: key prefix %q %w", name, prefix, err)
	}
	if opts.Identity != "" {
		if err := ValidateIdentity(opts.Identity); err != nil {
			return nil, fmt.Errorf("new lease %q: identity %q %w", name, opts.Identity, err)
		}
	}
	instance := opts.Instance
	if instance == "" {
		var err error
		if instance, err = NewInstanceID(); err != nil {
			return nil, fmt.Errorf("new lease %q: %w", name, err)
		}
	} else if err := validateInstance(instance); err != nil {
		return nil, fmt.Errorf("new lease %q: instance id %q %w", name, instance, err)
	}
	if err := opts.ReplicaAck.validate(); err != nil {
		return nil, fmt.Errorf("new lease %q: %w", name, err)
	}
	keys := KeysFor(prefix, name)
	l := &Lease{
		client:   client,
		name:     name,
		identity: opts.Identity,
		instance: instance,
		owner:    instance + ":" + opts.Identity,
		keys:     keys,
		aclKeys:  aclKeyPattern(prefix),
		announce: opts.AnnounceRenewals,
		resign:   opts.ResignRequests,
		ack:      opts.ReplicaAck,
	}
	l.acquireKeys, l.termKeys = boxKeys(keys.Lease, keys.Token, keys.Terms), boxKeys(keys.Lease)
	if l.resign {
		l.acquireKeys = boxKeys(keys.Lease, keys.Token, keys.Terms, keys.Resign)
		l.termKeys = boxKeys(keys.Lease, keys.Resign)
	}
	l.boxes.owner, l.boxes.channel = l.owner, keys.Events
	return l, nil
}

// NewInstanceID returns a fresh random instance id: 16 hexadecimal digits (64 bits).
func NewInstanceID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate instance id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// Name returns the lease name.
func (l *Lease) Name() string { return l.name }

// Identity returns the identity this lease acquires with.
func (l *Lease) Identity() string { return l.identity }

// Instance returns the instance id this lease acquires with.
func (l *Lease) Instance() string { return l.instance }

// Keys returns the names of the lease's Redis keys and pub/sub channel.
func (l *Lease) Keys() Keys { return l.keys }

// Status is what one round trip learned about the lease.
type Status struct {
	// Held reports whether somebody holds the lease.
	Held bool
	// Record is the holder's record when Held.
	Record Record
	// TTL is the holder's remaining time when Held (NoExpiry if the key has no expiry).
	TTL time.Duration
	// Reservation, set only by an Acquire refused during the hold-off after a resignation
	// (Options.ResignRequests), tells for whom and how long more the free lease is reserved.
	Reservation *Reservation
}

// Acquire takes the lease for ttl if nobody holds it, beginning a new term with the next
// fencing token. If this Lease's instance already holds it, the current term is kept and
// extended to ttl, so a retry after a lost reply is harmless.
//
// acquired reports whether the lease is now ours. Either way the Status tells who holds the
// lease and for how long, so that a follower knows when to try again.
//
// With Options.ReplicaAck asking for replicas, a write of the lease is followed by WAIT on the
// same connection. When the master granted the lease but fewer than ReplicaAck.Replicas
// replicas acknowledged it in ReplicaAck.Timeout, Acquire returns acquired == true, the Status
// of the new term, and an error matching ErrNotReplicated.
// The term exists on the master but may not survive a failover: do not start the work yet.
// Calling Acquire again is safe, since acquiring a lease this instance already holds keeps the
// term and extends it, and it waits for the replicas again; a caller that gives up should
// Release the term.
//
// With replicas asked for, the client must be a *redis.Client (standalone or Sentinel
// failover client) or a *redis.ClusterClient, which is asked for the master of the lease's
// slot. In Cluster, while that slot is being migrated, the call fails with Redis's MOVED or
// ASK error and must be retried; the cluster client's slot map is refreshed in the background.
func (l *Lease) Acquire(ctx context.Context, ttl time.Duration) (acquired bool, st Status, err error) {
	if l.identity == "" {
		return false, Status{}, fmt.Errorf("acquire lease %q: no identity set in lease.Options", l.name)
	}
	ms, err := ttlMillis(ttl)
	if err != nil {
		return false, Status{}, fmt.Errorf("acquire lease %q: %w", l.name, err)
	}
	if l.ack.Replicas > 0 {
		return l.acquireReplicated(ctx, ms, l.ack)
	}
	reply, err := acquireScript.run(ctx, l.client, l.acquireKeys, l.acquireArgs(ms)...).Slice()
	if err != nil {
		return false, Status{}, acquireError(l.name, err)
	}
	return l.parseAcquire(reply)
}

// acquireError wraps an error of the acquire script with the lease name, and with
// ErrTokenRange when the script refused a token beyond 2^53-1.
func acquireError(name string, err error) error {
	if redis.HasErrorPrefix(err, "fencing token range exhausted") {
		return fmt.Errorf("acquire lease %q: %w: %w", name, ErrTokenRange, err)
	}
	return fmt.Errorf("acquire lease %q: %w", name, luaerr.Explain(acquireSource, err))
}

// acquireArgs, renewArgs and releaseArgs are the ARGV of the scripts, for one call or a
// Batch, with l.acquireKeys (acquire) or l.termKeys (renew, release). A Batch renews with the
// lease key alone, l.termKeys[:1]: its renewals do not look at resign requests.
func (l *Lease) acquireArgs(ms int64) []any {
	return []any{l.boxes.owner, l.ttlArg(ms), l.boxes.channel}
}

func (l *Lease) renewArgs(term Record, ms int64) []any {
	if l.announce {
		return []any{l.termArg(term), l.ttlArg(ms), l.boxes.channel}
	}
	return []any{l.termArg(term), l.ttlArg(ms)}
}

func (l *Lease) releaseArgs(term Record) []any { return []any{l.termArg(term), l.boxes.channel} }

// parseAcquire decodes the reply of the acquire script.
func (l *Lease) parseAcquire(reply []any) (bool, Status, error) {
	if st, ok, err := l.parseReserved(reply); ok {
		return false, st, err
	}
	if len(reply) != 3 {
		return false, Status{}, fmt.Errorf("acquire lease %q: unexpected reply %v", l.name, reply)
	}
	ok, _ := reply[0].(int64)
	value, _ := reply[1].(string)
	pttl, _ := reply[2].(int64)
	rec, err := ParseRecord(value)
	if err != nil {
		return false, Status{}, fmt.Errorf("acquire lease %q: value of %s: %w", l.name, l.keys.Lease, err)
	}
	if ok == 1 {
		l.rememberTerm(rec, reply[1])
	}
	return ok == 1, Status{Held: true, Record: rec, TTL: pttlDuration(pttl)}, nil
}

// Renew extends the term to ttl from now if the lease still holds its record. false means the
// lease expired or another term holds it: the caller must stop acting as the holder at once;
// retrying cannot bring the term back. With Options.AnnounceRenewals it publishes a Renewed
// event in the same round trip. With Options.ResignRequests, true and an error wrapping
// ErrResignRequested mean the term was renewed and is asked to step down.
//
// With Options.ReplicaAck asking for replicas, a renewal is followed by WAIT on the same
// connection, with the client requirements of Acquire. When the master renewed the term but
// fewer than ReplicaAck.Replicas replicas acknowledged it in ReplicaAck.Timeout, Renew returns
// true and an error matching ErrNotReplicated: count the renewal as failed (a promoted replica
// may still hold the previous expiry) and retry it, as package election does with any renew
// error until its RenewDeadline.
func (l *Lease) Renew(ctx context.Context, term Record, ttl time.Duration) (bool, error) {
	ms, err := ttlMillis(ttl)
	if err != nil {
		return false, fmt.Errorf("renew lease %q: %w", l.name, err)
	}
	if l.ack.Replicas > 0 {
		return l.renewReplicated(ctx, term, ms, l.ack)
	}
	n, err := renewScript.run(ctx, l.client, l.termKeys, l.renewArgs(term, ms)...).Int64()
	if err != nil {
		return false, fmt.Errorf("renew lease %q: %w", l.name, luaerr.Explain(renewSource, err))
	}
	return l.renewOutcome(n, term)
}

// Release deletes the lease if it still holds the term's record and announces the release, so
// that followers take over at once. false means the term had already ended; nothing changed.
func (l *Lease) Release(ctx context.Context, term Record) (bool, error) {
	n, err := releaseScript.run(ctx, l.client, l.termKeys, l.releaseArgs(term)...).Int64()
	if err != nil {
		return false, fmt.Errorf("release lease %q: %w", l.name, luaerr.Explain(releaseSource, err))
	}
	return n == 1, nil
}

// Get returns who holds the lease and for how long, read atomically in one round trip
// (MULTI GET PTTL EXEC: it needs no script, so a read-only Redis user can observe).
func (l *Lease) Get(ctx context.Context) (Status, error) {
	v, ttl, ok, err := l.getWithTTL(ctx, l.keys.Lease)
	if err != nil {
		return Status{}, fmt.Errorf("get lease %q: %w", l.name, err)
	}
	if !ok {
		return Status{}, nil
	}
	rec, err := ParseRecord(v)
	if err != nil {
		return Status{}, fmt.Errorf("get lease %q: value of %s: %w", l.name, l.keys.Lease, err)
	}
	return Status{Held: true, Record: rec, TTL: ttl}, nil
}

// getWithTTL reads key and its remaining time atomically in one round trip (MULTI GET PTTL
// EXEC: no script, so a read-only Redis user may). ok is false when the key does not exist.
func (l *Lease) getWithTTL(ctx context.Context, key string) (v string, ttl time.Duration, ok bool, err error) {
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err = l.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		return nil
	})
	if rediserr.IsNil(err) {
		return "", 0, false, nil
	}
	if err != nil {
		return "", 0, false, luaerr.ExplainTx(err, l.aclKeys, get, pttl)
	}
	return get.Val(), durationTTL(pttl.Val()), true, nil
}

// counter reads the integer at key, a counter of the lease (what names it in errors), 0 when
// the key does not exist.
func (l *Lease) counter(ctx context.Context, key, what string) (int64, error) {
	s, err := l.client.Get(ctx, key).Result()
	if rediserr.IsNil(err) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the %s of lease %q: %w", what, l.name, err)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read the %s of lease %q: %s holds %q, not an integer", what, l.name, key, s)
	}
	return n, nil
}

// ttlMillis checks that ttl is a positive whole number of milliseconds and returns that number.
func ttlMillis(ttl time.Duration) (int64, error) {
	if ttl < time.Millisecond {
		return 0, fmt.Errorf("ttl %v is below the minimum of 1ms", ttl)
	}
	if ttl%time.Millisecond != 0 {
		return 0, fmt.Errorf("ttl %v is not a whole number of milliseconds", ttl)
	}
	return ttl.Milliseconds(), nil
}

// pttlDuration converts a PTTL reply in milliseconds.
func pttlDuration(ms int64) time.Duration {
	if ms < 0 {
		return NoExpiry
	}
	return time.Duration(ms) * time.Millisecond
}

// durationTTL converts go-redis's parsed PTTL, which keeps -1 and -2 as raw nanoseconds.
func durationTTL(d time.Duration) time.Duration {
	if d < 0 {
		return NoExpiry
	}
	return d
}
