package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/leasewire/lualib"
)

// The seam: what internal/leasekit, which builds the election's and the CLI's extras on this
// package (events, resign requests, batches, done marks, listing), needs beyond the API. Its
// methods are exported so that leasekit's interface can name them, on an unexported type that
// only leasewire.Lease hands out; no program outside this module can reach them.
func init() { leasewire.Lease = internals{} }

type internals struct{}

// New is New with an instance id to resume (if not empty), renewals announced, and the resign
// protocol taken part in.
func (internals) New(client redis.UniversalClient, name string, opts Options, instance string, announce, resign bool) (*Lease, error) {
	return newLease(client, name, opts, instance, announce, resign)
}

// ParseRecord decodes a lease value; its errors wrap leasewire.ErrBadRecord.
func (internals) ParseRecord(s string) (Record, error) { return parseRecord(s) }

// Client returns the client l was created with.
func (internals) Client(l *Lease) redis.UniversalClient { return l.client }

// Name returns the lease name.
func (internals) Name(l *Lease) string { return l.name }

// Identity returns the identity l acquires with.
func (internals) Identity(l *Lease) string { return l.identity }

// Instance returns the instance id l acquires with.
func (internals) Instance(l *Lease) string { return l.instance }

// Prefix returns the key prefix of l, DefaultPrefix for an empty Options.Prefix.
func (internals) Prefix(l *Lease) string { return l.prefix }

// Keys returns the names of l's Redis keys and pub/sub channel.
func (internals) Keys(l *Lease) leasewire.Keys { return l.keys }

// Acquire is Lease.Acquire that also returns the acquire script's refusal during a
// reservation, {2, record, pttl, target}, undecoded.
func (internals) Acquire(ctx context.Context, l *Lease, ttl time.Duration) (bool, Status, []any, error) {
	return l.acquire(ctx, ttl)
}

// Renew is Lease.Renew that also reports a resign request for the renewed term.
func (internals) Renew(ctx context.Context, l *Lease, term Record, ttl time.Duration) (ok, resign bool, err error) {
	return l.renew(ctx, term, ttl)
}

// ReadWithTTL reads key and its remaining time atomically in one round trip (no script); ok
// is false when the key does not exist.
func (internals) ReadWithTTL(ctx context.Context, l *Lease, key string) (v string, ttl time.Duration, ok bool, err error) {
	return l.getWithTTL(ctx, key)
}

// Counter reads the integer at key, a counter of l named what in errors, 0 when absent.
func (internals) Counter(ctx context.Context, l *Lease, key, what string) (int64, error) {
	return l.counter(ctx, key, what)
}

// Resign runs scripts/resign.lua on l's lease and resign keys with args; its error is
// explained (lualib.Script.Explain).
func (internals) Resign(ctx context.Context, l *Lease, args ...any) ([]any, error) {
	reply, err := l.run(ctx, l.client, resignScript, boxKeys(l.keys.Lease, l.keys.Resign), args...).Slice()
	return reply, resignScript.Explain(err)
}

// Done runs scripts/done.lua on l's lease and done keys with args; its error is explained.
func (internals) Done(ctx context.Context, l *Lease, args ...any) (int64, error) {
	n, err := l.run(ctx, l.client, doneScript, boxKeys(l.keys.Lease, l.keys.Done), args...).Int64()
	return n, doneScript.Explain(err)
}

// PTTL converts a PTTL reply in milliseconds (NoExpiry when negative).
func (internals) PTTL(ms int64) time.Duration { return pttlDuration(ms) }

// DurationTTL converts go-redis's parsed PTTL, which keeps -1 and -2 as raw nanoseconds.
func (internals) DurationTTL(d time.Duration) time.Duration { return durationTTL(d) }

// BatchAcquire returns the call of l.Acquire(ttl) prepared for a pipeline and the decoder of
// its reply, which returns a refusal during a reservation undecoded as Acquire does; err is
// what Acquire would refuse before sending.
func (internals) BatchAcquire(l *Lease, ttl time.Duration) (op *lualib.Op, result func(*redis.Cmd) (bool, Status, []any, error), err error) {
	ms, err := leasewire.TTLMillis(ttl)
	switch {
	case err != nil:
		return nil, nil, fmt.Errorf("acquire lease %q: %w", l.name, err)
	case l.identity == "":
		return nil, nil, fmt.Errorf("acquire lease %q: no identity set in lease.Options", l.name)
	}
	op = acquireScript.Prepare(l.scripts, "", l.acquireKeys, l.acquireArgs(ms)...)
	result = func(cmd *redis.Cmd) (bool, Status, []any, error) {
		reply, err := cmd.Slice()
		if err != nil {
			return false, Status{}, nil, acquireError(l.name, err)
		}
		return l.parseAcquire(reply)
	}
	return op, result, nil
}

// BatchRenew returns the renewal of the held term t, prepared for a pipeline in the scripts mode
// scripts (lualib.For of the pipeline's client), and the decoder of its reply, which returns
// what Lease.Renew would: the renew script with the lease key alone (no announcement, no resign
// request). err is what Renew would refuse before sending.
func (internals) BatchRenew(scripts *lualib.State, t leasewire.HeldTerm, ttl time.Duration) (op *lualib.Op, result func(*redis.Cmd) (bool, error), err error) {
	ms, err := leasewire.TTLMillis(ttl)
	if err != nil {
		return nil, nil, fmt.Errorf("renew lease %q: %w", t.Name, err)
	}
	op = renewScript.Prepare(scripts, "", []any{leasewire.LeaseKey(t.Prefix, t.Name)}, t.Record, ms)
	return op, termResult(t.Name, "renew", renewScript), nil
}

// BatchRenewMany is BatchRenew for every held term of terms at once: one call of
// scripts/renew_many.lua, each term renewed to ttl as BatchRenew's call would renew it. The
// decoder returns, for terms[i], ok[i] and errs[i] as BatchRenew's decoder would; an error of
// the call is every term's; errs is nil when no term has one. Every key of the call must be on
// the server that runs it: one standalone or Sentinel server, or terms that share a Redis
// Cluster slot (leasewire.LeaseSlot). err is what BatchRenew would refuse before sending.
func (internals) BatchRenewMany(scripts *lualib.State, terms []leasewire.HeldTerm, ttl time.Duration) (op *lualib.Op, result func(*redis.Cmd) ([]bool, []error), err error) {
	ms, err := leasewire.TTLMillis(ttl)
	if err != nil {
		return nil, nil, fmt.Errorf("renew %d leases: %w", len(terms), err)
	}
	keys := make([]any, len(terms))
	args := make([]any, 1, 1+len(terms))
	args[0] = ms
	for i, t := range terms {
		keys[i] = leasewire.LeaseKey(t.Prefix, t.Name)
		args = append(args, t.Record)
	}
	return renewManyScript.Prepare(scripts, "", keys, args...), func(cmd *redis.Cmd) ([]bool, []error) {
		return renewManyResult(terms, cmd)
	}, nil
}

// renewManyResult decodes the reply of a renew_many call that carried terms.
func renewManyResult(terms []leasewire.HeldTerm, cmd *redis.Cmd) (ok []bool, errs []error) {
	ok = make([]bool, len(terms))
	fail := func(err error) []error {
		errs := make([]error, len(terms))
		for i, t := range terms {
			errs[i] = fmt.Errorf("renew lease %q: %w", t.Name, err)
		}
		return errs
	}
	reply, err := cmd.Slice()
	switch {
	case err != nil:
		return ok, fail(renewManyScript.Explain(err))
	case len(reply) != len(terms):
		return ok, fail(fmt.Errorf("unexpected reply of %d elements to a renewal of %d leases", len(reply), len(terms)))
	}
	for i, v := range reply {
		switch v := v.(type) {
		case int64:
			ok[i] = v == 1
		case error:
			if errs == nil {
				errs = make([]error, len(terms))
			}
			errs[i] = fmt.Errorf("renew lease %q: %w", terms[i].Name, renewManyScript.Explain(v))
		default:
			if errs == nil {
				errs = make([]error, len(terms))
			}
			errs[i] = fmt.Errorf("renew lease %q: unexpected reply %v", terms[i].Name, v)
		}
	}
	return ok, errs
}

// BatchRelease is BatchRenew for the release of t, which Lease.Release would send without a
// resign key: the record deleted if it is still t's, and "released" announced.
func (internals) BatchRelease(scripts *lualib.State, t leasewire.HeldTerm) (op *lualib.Op, result func(*redis.Cmd) (bool, error)) {
	op = releaseScript.Prepare(scripts, "", []any{leasewire.LeaseKey(t.Prefix, t.Name)}, t.Record, leasewire.EventsChannel(t.Prefix, t.Name))
	return op, termResult(t.Name, "release", releaseScript)
}

// termResult decodes the reply of a renewal or release sent in a batch.
func termResult(name, verb string, s *lualib.Script) func(*redis.Cmd) (bool, error) {
	return func(cmd *redis.Cmd) (bool, error) {
		n, err := cmd.Int64()
		if err != nil {
			return n == 1, fmt.Errorf("%s lease %q: %w", verb, name, s.Explain(err))
		}
		return n == 1, nil
	}
}

// LoadBatchScripts loads the acquire, renew, renew_many and release scripts into Redis
// through client (SCRIPT LOAD; every master of a Cluster), so that a batch's EVALSHA finds
// them.
func (internals) LoadBatchScripts(ctx context.Context, client redis.UniversalClient) error {
	for _, s := range []*lualib.Script{acquireScript, renewScript, renewManyScript, releaseScript} {
		if err := client.ScriptLoad(ctx, s.Source()).Err(); err != nil {
			return err
		}
	}
	return nil
}

// Candidate runs scripts/candidate.lua on l's candidates key with args; its error is
// explained.
func (internals) Candidate(ctx context.Context, l *Lease, args ...any) ([]any, error) {
	reply, err := l.run(ctx, l.client, candidateScript, boxKeys(l.keys.Candidates), args...).Slice()
	return reply, candidateScript.Explain(err)
}
