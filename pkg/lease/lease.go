// Package lease is one named Redis lease with fencing tokens: a lock that a holder acquires
// for a TTL, renews while it works, and releases, in one round trip each (a Lua script run
// atomically by Redis: a function of elector's Redis function library with FCALL where it is
// loaded, else EVALSHA and EVAL on NOSCRIPT). It is the primitive that package election builds leader
// election on, for programs that want the lock without the election.
//
// Every acquisition begins a term with a fencing token larger than any token handed out
// before for the same name, even after Redis lost its data: hand it to the resources the
// holder writes (package fence), so that they refuse a holder whose term has ended. Renew and
// Release are owner-checked: they act only on the term given (its token and the process's
// random instance id), never on another holder's or a later term. Acquisitions and releases
// are announced on the lease's pub/sub channel, which package election's followers listen to.
//
// A Lease keeps no state between calls that matters to the protocol and is safe for
// concurrent use; it decides nothing about when to acquire, renew or give up. The keys, the
// record format and the scripts (scripts/*.lua) are specified in docs/PROTOCOL.md. What only
// package election and the elector command use (events, resign requests, batches, done marks,
// listing) is built on this package in internal/leasekit, through the seam in seam.go.
package lease

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/internal/luaerr"
	"github.com/elector/elector/internal/rediserr"
)

// DefaultPrefix ("elector") is the key prefix used when Options.Prefix is empty.
const DefaultPrefix = "elector"

// ErrTokenRange is matched (errors.Is) by the error of an acquisition refused because the next
// fencing token would exceed 2^53-1, the largest integer a Redis script counts exactly: handing
// out a larger one could repeat a token. Only a token key set by hand gets there before the
// year 2255.
var ErrTokenRange = errors.New("fencing token counter beyond 2^53-1")

// NoExpiry (-1ns) is the TTL reported for a lease key that exists without an expiry (set by
// hand).
const NoExpiry = time.Duration(-1)

// The scripts of docs/PROTOCOL.md. Resign, done and renew_many are run for internal/leasekit
// (seam.go).
var (
	//go:embed scripts/acquire.lua
	acquireSource string
	//go:embed scripts/renew.lua
	renewSource string
	//go:embed scripts/release.lua
	releaseSource string
	//go:embed scripts/resign.lua
	resignSource string
	//go:embed scripts/done.lua
	doneSource string
	//go:embed scripts/candidate.lua
	candidateSource string
	//go:embed scripts/renew_many.lua
	renewManySource string
)

// The scripts are immutable values (source, SHA1, function name); sharing them is not shared
// state. Their functions may run above maxmemory (allow-oom), as their EVAL forms renew and
// release there (docs/PROTOCOL.md).
var (
	acquireScript = lualib.Register("acquire", acquireSource, true)
	renewScript   = lualib.Register("renew", renewSource, true)
	releaseScript = lualib.Register("release", releaseSource, true)
	resignScript  = lualib.Register("resign", resignSource, true)
	doneScript    = lualib.Register("done", doneSource, true)
	// candidate.lua writes only the advisory registry: a replica need not advertise itself
	// above maxmemory, so its FCALL is refused there (like fence's) rather than grow memory.
	candidateScript = lualib.Register("candidate", candidateSource, false)
	renewManyScript = lualib.Register("renew_many", renewManySource, true)
)

// Options configure a Lease. The zero value is usable for an observer that never acquires.
type Options struct {
	// Prefix starts every key of the lease; DefaultPrefix when empty.
	Prefix string
	// Identity names this process in the record, for example the pod name. Required to Acquire.
	Identity string
	// ReplicaAck, with Replicas > 0, makes every Acquire and Renew wait for replicas of the
	// Redis master to acknowledge the write (WAIT); see ReplicaAck.
	ReplicaAck ReplicaAck
}

// Lease is one named lease in Redis. Create it with New; it is safe for concurrent use and
// keeps no state between calls but its configuration.
type Lease struct {
	client   redis.UniversalClient
	name     string
	identity string
	instance string
	owner    string // "<instance>:<identity>": the record after its version and token
	prefix   string // Options.Prefix, or DefaultPrefix
	keys     leasewire.Keys
	aclKeys  string        // the ACL key pattern of the keys under the prefix (leasewire.ACLKeyPattern)
	announce bool          // every successful Renew publishes a "renewed" event (seam.go)
	resign   bool          // Acquire, Renew and Release take part in the resign protocol (seam.go)
	ack      ReplicaAck    // Options.ReplicaAck
	scripts  *lualib.State // the client's scripts mode and what its calls learned of its Redis (lualib.For)

	// The keys of each script call, boxed (boxKeys): acquire takes the lease, token and terms
	// keys, renew and release the lease key; with resign both end with the resign key. Never
	// changed after New.
	acquireKeys, termKeys []any
	boxes                 argBoxes
}

// New returns the lease called name, stored through client: a standalone, Sentinel failover
// or Cluster client (all keys of one lease share the hash tag {name}). It checks name, the
// options and the client, and makes a fresh instance id; it does not talk to Redis.
func New(client redis.UniversalClient, name string, opts Options) (*Lease, error) {
	return newLease(client, name, opts, "", false, false)
}

// newLease is New with what only internal/leasekit sets (seam.go): instance, when not empty,
// replaces the fresh instance id (to resume the terms of a process known to be gone, or in
// tests); announce makes every successful Renew publish a "renewed" event; resign makes
// Acquire, Renew and Release take part in the resign protocol.
func newLease(client redis.UniversalClient, name string, opts Options, instance string, announce, resign bool) (*Lease, error) {
	if client == nil {
		return nil, errors.New("new lease: redis client is nil")
	}
	if err := leasewire.ValidateName(name); err != nil {
		return nil, fmt.Errorf("new lease: name %q %w", name, err)
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := leasewire.ValidateName(prefix); err != nil {
		return nil, fmt.Errorf("new lease %q: key prefix %q %w", name, prefix, err)
	}
	if opts.Identity != "" {
		if err := leasewire.ValidateIdentity(opts.Identity); err != nil {
			return nil, fmt.Errorf("new lease %q: identity %q %w", name, opts.Identity, err)
		}
	}
	if instance == "" {
		var err error
		if instance, err = leasewire.NewInstanceID(); err != nil {
			return nil, fmt.Errorf("new lease %q: %w", name, err)
		}
	} else if err := leasewire.ValidateInstance(instance); err != nil {
		return nil, fmt.Errorf("new lease %q: instance id %q %w", name, instance, err)
	}
	if err := opts.ReplicaAck.validate(); err != nil {
		return nil, fmt.Errorf("new lease %q: %w", name, err)
	}
	keys := leasewire.KeysFor(prefix, name)
	l := &Lease{
		client:   client,
		name:     name,
		identity: opts.Identity,
		instance: instance,
		owner:    instance + ":" + opts.Identity,
		prefix:   prefix,
		keys:     keys,
		aclKeys:  leasewire.ACLKeyPattern(prefix),
		announce: announce,
		resign:   resign,
		ack:      opts.ReplicaAck,
		scripts:  lualib.For(client),
	}
	l.acquireKeys, l.termKeys = boxKeys(keys.Lease, keys.Token, keys.Terms), boxKeys(keys.Lease)
	if l.resign {
		l.acquireKeys = boxKeys(keys.Lease, keys.Token, keys.Terms, keys.Resign)
		l.termKeys = boxKeys(keys.Lease, keys.Resign)
	}
	l.boxes.owner, l.boxes.channel = l.owner, keys.Events
	return l, nil
}

// Status is what a read or an acquisition found: who holds the lease and for how long.
type Status struct {
	// Held reports whether somebody holds the lease.
	Held bool
	// Record is the holder's record when Held.
	Record Record
	// TTL is the holder's remaining time when Held (NoExpiry if the key has no expiry).
	TTL time.Duration
}

// Acquire takes the lease for ttl if nobody holds it, beginning a new term with the next
// fencing token. If this Lease already holds it, the current term is kept and extended to ttl,
// so a retry after a lost reply is harmless. acquired reports whether the lease is now ours;
// either way the Status tells who holds it and for how long, so that a caller that lost knows
// when to try again.
//
// With ReplicaAck, an acquisition that the master granted but too few replicas acknowledged
// returns acquired == true, the new term's Status and an error matching ErrNotReplicated: do
// not rely on the term yet; Acquire again (it keeps the term and waits again) or Release it.
// With replicas asked for, the client must be a *redis.Client (standalone or Sentinel failover
// client) or a *redis.ClusterClient, which is asked for the master of the lease's slot. In
// Cluster, while that slot is being migrated, the call fails with Redis's MOVED or ASK error
// and must be retried; the cluster client's slot map is refreshed in the background.
func (l *Lease) Acquire(ctx context.Context, ttl time.Duration) (acquired bool, st Status, err error) {
	acquired, st, _, err = l.acquire(ctx, ttl)
	return acquired, st, err
}

// acquire is Acquire that also returns the acquire script's refusal during a reservation
// after a resignation, {2, record, pttl, target}, as Redis sent it: only a lease with resign
// gets one, and internal/leasekit, which owns the resign protocol, decodes it.
func (l *Lease) acquire(ctx context.Context, ttl time.Duration) (acquired bool, st Status, reserved []any, err error) {
	if l.identity == "" {
		return false, Status{}, nil, fmt.Errorf("acquire lease %q: no identity set in lease.Options", l.name)
	}
	ms, err := leasewire.TTLMillis(ttl)
	if err != nil {
		return false, Status{}, nil, fmt.Errorf("acquire lease %q: %w", l.name, err)
	}
	if l.ack.Replicas > 0 {
		return l.acquireReplicated(ctx, ms, l.ack)
	}
	reply, err := l.run(ctx, l.client, acquireScript, l.acquireKeys, l.acquireArgs(ms)...).Slice()
	if err != nil {
		return false, Status{}, nil, acquireError(l.name, err)
	}
	return l.parseAcquire(reply)
}

// acquireError wraps an error of the acquire script with the lease name, and with
// ErrTokenRange when the script refused a token beyond 2^53-1.
func acquireError(name string, err error) error {
	if redis.HasErrorPrefix(err, "fencing token range exhausted") {
		return fmt.Errorf("acquire lease %q: %w: %w", name, ErrTokenRange, err)
	}
	return fmt.Errorf("acquire lease %q: %w", name, acquireScript.Explain(err))
}

// acquireArgs, renewArgs and releaseArgs are the ARGV of the scripts, with l.acquireKeys
// (acquire, also in a Batch) or l.termKeys (renew, release).
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

// A script call is sent as the command FCALL function numkeys keys... args... (or EVALSHA sha,
// or EVAL source: internal/leasewire/lualib), built in one slice from values boxed once (issue
// 27 item 2): go-redis's Script.Run copies its keys and arguments into a new []any and boxes
// every key and the SHA1 on every call, 5 allocations for an acquire, 3 for a release, against
// the 1 of the slice built by lualib.
//
// Concurrency: each call builds its own slice, and go-redis keeps that slice (in the Cmd) until
// the reply is read, so no two calls share one. What is shared between the calls of a Lease,
// possibly concurrent (a renewal beside a release), is only the boxes below, each written once
// before it is published and never changed after: immutable values, read by every call; and
// the client's lualib.State, which is safe for concurrent use.

// run runs s with keys and args through p (l's client or one of its connections), in the
// client's scripts mode: FCALL, EVALSHA, or EVAL after NOSCRIPT (lualib.Script.Run).
func (l *Lease) run(ctx context.Context, p lualib.Processor, s *lualib.Script, keys []any, args ...any) *redis.Cmd {
	return s.Run(ctx, l.scripts, p, "", keys, args...)
}

// boxKeys returns the key names boxed, for the script calls.
func boxKeys(keys ...string) []any {
	boxed := make([]any, len(keys))
	for i, k := range keys {
		boxed[i] = k
	}
	return boxed
}

// argBoxes keeps the script arguments of a Lease boxed once: boxing a string, or an int64
// above 255, allocates; a Lease sends the same owner, channel and TTL on every call, and the
// same record on every renewal and the release of a term. Nothing here is protocol state: a
// miss costs one allocation, no more.
type argBoxes struct {
	owner, channel any
	ttl            atomic.Pointer[boxedTTL]

	// The record of the last term acquired, boxed as Redis returned it. A mutex, not an
	// atomic pointer, so that remembering it allocates nothing.
	termMu  sync.Mutex
	termRec Record
	termBox any
}

// boxedTTL is a TTL in milliseconds with its box.
type boxedTTL struct {
	ms  int64
	box any
}

// ttlArg returns ms boxed, reusing the box of the last TTL sent when it is the same.
func (l *Lease) ttlArg(ms int64) any {
	if b := l.boxes.ttl.Load(); b != nil && b.ms == ms {
		return b.box
	}
	b := &boxedTTL{ms: ms, box: ms}
	l.boxes.ttl.Store(b)
	return b.box
}

// rememberTerm keeps the boxed record of a term just acquired.
func (l *Lease) rememberTerm(rec Record, box any) {
	l.boxes.termMu.Lock()
	l.boxes.termRec, l.boxes.termBox = rec, box
	l.boxes.termMu.Unlock()
}

// termArg returns term's record as a script argument.
func (l *Lease) termArg(term Record) any {
	l.boxes.termMu.Lock()
	rec, box := l.boxes.termRec, l.boxes.termBox
	l.boxes.termMu.Unlock()
	if box != nil && rec == term {
		return box
	}
	return term.String()
}

// parseAcquire decodes the reply of the acquire script; a refusal during a reservation is
// returned undecoded (acquire).
func (l *Lease) parseAcquire(reply []any) (bool, Status, []any, error) {
	if len(reply) == 4 {
		if n, _ := reply[0].(int64); n == 2 {
			return false, Status{}, reply, nil
		}
	}
	if len(reply) != 3 {
		return false, Status{}, nil, fmt.Errorf("acquire lease %q: unexpected reply %v", l.name, reply)
	}
	ok, _ := reply[0].(int64)
	value, _ := reply[1].(string)
	pttl, _ := reply[2].(int64)
	rec, err := parseRecord(value)
	if err != nil {
		return false, Status{}, nil, fmt.Errorf("acquire lease %q: value of %s: %w", l.name, l.keys.Lease, err)
	}
	if ok == 1 {
		l.rememberTerm(rec, reply[1])
	}
	return ok == 1, Status{Held: true, Record: rec, TTL: pttlDuration(pttl)}, nil, nil
}

// Renew extends the term to ttl from now if the lease still holds its record. false means the
// lease expired or another term holds it: stop acting as the holder at once; retrying cannot
// bring the term back. With ReplicaAck (and the client requirements of Acquire), true and an
// error matching ErrNotReplicated mean the master renewed the term but too few replicas
// acknowledged it: count the renewal as failed (a promoted replica may still hold the previous
// expiry) and retry it, as package election does with any renew error until its RenewDeadline.
func (l *Lease) Renew(ctx context.Context, term Record, ttl time.Duration) (bool, error) {
	ok, _, err := l.renew(ctx, term, ttl)
	return ok, err
}

// renew is Renew that also reports, for a lease with resign, that a resign request asks the
// renewed term to step down (the renew script's reply 2); the term was renewed all the same.
// With announce it publishes a Renewed event in the same round trip.
func (l *Lease) renew(ctx context.Context, term Record, ttl time.Duration) (ok, resign bool, err error) {
	ms, err := leasewire.TTLMillis(ttl)
	if err != nil {
		return false, false, fmt.Errorf("renew lease %q: %w", l.name, err)
	}
	if l.ack.Replicas > 0 {
		return l.renewReplicated(ctx, term, ms, l.ack)
	}
	n, err := l.run(ctx, l.client, renewScript, l.termKeys, l.renewArgs(term, ms)...).Int64()
	if err != nil {
		return false, false, fmt.Errorf("renew lease %q: %w", l.name, renewScript.Explain(err))
	}
	return n == 1 || n == 2, n == 2, nil
}

// Release deletes the lease if it still holds the term's record and announces the release, so
// that a waiting process can take over at once. false means the term had already ended;
// nothing changed.
func (l *Lease) Release(ctx context.Context, term Record) (bool, error) {
	n, err := l.run(ctx, l.client, releaseScript, l.termKeys, l.releaseArgs(term)...).Int64()
	if err != nil {
		return false, fmt.Errorf("release lease %q: %w", l.name, releaseScript.Explain(err))
	}
	return n == 1, nil
}

// Get returns who holds the lease and for how long, read atomically in one round trip (no
// script: a read-only Redis user can call it).
func (l *Lease) Get(ctx context.Context) (Status, error) {
	v, ttl, ok, err := l.getWithTTL(ctx, l.keys.Lease)
	if err != nil {
		return Status{}, fmt.Errorf("get lease %q: %w", l.name, err)
	}
	if !ok {
		return Status{}, nil
	}
	rec, err := parseRecord(v)
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
