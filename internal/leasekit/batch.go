package leasekit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/pkg/lease"
)

// Batch queues acquire, renew and release operations on many leases and runs them in one
// pipeline: one round trip per Redis node (go-redis splits a Cluster pipeline by node). It is
// how one process keeps thousands of leases for the cost of a few round trips. All leases of
// a Batch must share its client; renewals and releases name a held term (leasewire.HeldTerm)
// rather than a Lease, so that a holder of many terms keeps no Lease for each. A Batch is not
// safe for concurrent use.
type Batch struct {
	client  redis.UniversalClient
	scripts *lualib.State // the client's scripts mode (lualib.For), looked up once per Batch
	ops     []*batchOp
}

// AcquireResult is the outcome of an Acquire queued in a Batch, filled in by Exec.
type AcquireResult struct {
	// Acquired, Status, Reservation: as returned by Lease.AcquireOrReservation.
	Acquired    bool
	Status      lease.Status
	Reservation *Reservation
	// Err is the error of this operation, if any.
	Err error
}

// Result is the outcome of a Renew or Release queued in a Batch, filled in by Exec.
type Result struct {
	// OK is what Lease.Renew or Lease.Release would have returned.
	OK bool
	// Err is the error of this operation, if any.
	Err error
}

// batchOp is one queued operation: its script call and the decoder of its reply into the
// caller's result, both from package lease.
type batchOp struct {
	lease  *Lease // the acquiring Lease; nil for a held term's renewal or release
	op     *lualib.Op
	finish func(*redis.Cmd) error
	cmd    *redis.Cmd
}

// NewBatch returns an empty Batch for leases created with client.
func NewBatch(client redis.UniversalClient) *Batch {
	return &Batch{client: client, scripts: lualib.For(client)}
}

// Len returns the number of queued operations.
func (b *Batch) Len() int { return len(b.ops) }

// Acquire queues l.Acquire(ttl).
func (b *Batch) Acquire(l *Lease, ttl time.Duration) *AcquireResult {
	r := &AcquireResult{}
	op, result, err := seam.BatchAcquire(l.Lease, ttl)
	if err != nil {
		r.Err = err
		return r
	}
	b.ops = append(b.ops, &batchOp{lease: l, op: op, finish: func(cmd *redis.Cmd) error {
		r.Acquired, r.Status, r.Reservation, r.Err = l.reservation(result(cmd))
		return r.Err
	}})
	return r
}

// Renew queues the renewal of the held term t, which returns what Lease.Renew would. It sends
// the lease key alone: no announcement and no resign request, whatever the lease's Ext.
func (b *Batch) Renew(t leasewire.HeldTerm, ttl time.Duration) *Result {
	r := &Result{}
	op, result, err := seam.BatchRenew(b.scripts, t, ttl)
	if err != nil {
		r.Err = err
		return r
	}
	b.ops = append(b.ops, &batchOp{op: op, finish: r.finish(result)})
	return r
}

// Release queues the release of the held term t, which returns what Lease.Release would; like
// Renew it sends no resign key.
func (b *Batch) Release(t leasewire.HeldTerm) *Result {
	r := &Result{}
	op, result := seam.BatchRelease(b.scripts, t)
	b.ops = append(b.ops, &batchOp{op: op, finish: r.finish(result)})
	return r
}

// RenewMany queues the renewal of every held term of terms in one call of renew_many.lua, each
// term renewed as Renew would renew it, and returns their results, in order, filled in by
// Exec: N owner-checked renewals that Redis runs atomically, for the cost of one script call.
// An error of the call is every term's. Every key of one call must be on one server: the
// Batch's client is a standalone or Sentinel one (OneServer), or every term's lease is in one
// Redis Cluster slot (leasewire.LeaseSlot); otherwise nothing is queued and every result is
// that error.
func (b *Batch) RenewMany(terms []leasewire.HeldTerm, ttl time.Duration) []Result {
	res := make([]Result, len(terms))
	fail := func(err error) []Result {
		for i := range res {
			res[i].Err = err
		}
		return res
	}
	if len(terms) == 0 {
		return res
	}
	if !OneServer(b.client) {
		slot := leasewire.LeaseSlot(terms[0].Name)
		for _, t := range terms[1:] {
			if leasewire.LeaseSlot(t.Name) != slot {
				return fail(fmt.Errorf("lease renew many: leases %q and %q are in different Redis Cluster slots, which one script call cannot touch; a %T renews together only the leases of one slot",
					terms[0].Name, t.Name, b.client))
			}
		}
	}
	op, result, err := seam.BatchRenewMany(b.scripts, terms, ttl)
	if err != nil {
		return fail(err)
	}
	b.ops = append(b.ops, &batchOp{op: op, finish: func(cmd *redis.Cmd) error {
		ok, errs := result(cmd)
		var first error
		for i := range res {
			res[i].OK = ok[i]
			if errs != nil {
				res[i].Err = errs[i]
				first = cmp.Or(first, errs[i])
			}
		}
		return first
	}})
	return res
}

// Term returns the held term rec of l, for Renew, Release and RenewMany.
func Term(l *Lease, rec lease.Record) leasewire.HeldTerm {
	return leasewire.HeldTerm{Prefix: seam.Prefix(l.Lease), Name: l.Name(), Record: rec.String()}
}

// finish returns the decoder that fills r in from the reply.
func (r *Result) finish(result func(*redis.Cmd) (bool, error)) func(*redis.Cmd) error {
	return func(cmd *redis.Cmd) error {
		r.OK, r.Err = result(cmd)
		return r.Err
	}
}

// Exec runs the queued operations, fills in their results and empties the Batch. An operation
// whose call Redis asks to send otherwise is sent again in a further pipeline (at most three
// in all): as EVALSHA where the function library is not loaded (lualib.Op.Retry), as FCALL
// where EVALSHA is refused, and as EVALSHA again after the scripts Redis did not know (after
// a restart or failover) were loaded, once. The error is that of the first failed operation,
// nil if all succeeded.
func (b *Batch) Exec(ctx context.Context) error {
	ops := b.ops
	b.ops = nil
	for _, op := range ops {
		if op.lease != nil && seam.Client(op.lease.Lease) != b.client {
			return fmt.Errorf("lease batch: lease %q uses another client than the batch", op.lease.Name())
		}
	}
	b.run(ctx, ops)
	loaded := false
	for range 2 {
		var retry []*batchOp
		noscript := false
		for _, op := range ops {
			err := op.cmd.Err()
			switch {
			case err == nil:
			case redis.HasErrorPrefix(err, "NOSCRIPT") && !loaded:
				// EVALSHA again once the scripts are loaded: one SCRIPT LOAD per script
				// rather than every source in the pipeline (EVAL).
				noscript = true
				retry = append(retry, op)
			case !redis.HasErrorPrefix(err, "NOSCRIPT") && op.op.Retry(err):
				retry = append(retry, op)
			}
		}
		if len(retry) == 0 {
			break
		}
		if noscript {
			loaded = true
			if err := seam.LoadBatchScripts(ctx, b.client); err != nil {
				err = fmt.Errorf("lease batch: load scripts: %w", err)
				var rest []*batchOp
				for _, op := range retry {
					if redis.HasErrorPrefix(op.cmd.Err(), "NOSCRIPT") {
						op.cmd.SetErr(err)
					} else {
						rest = append(rest, op)
					}
				}
				retry = rest
			}
		}
		b.run(ctx, retry)
	}
	var first error
	for _, op := range ops {
		op.op.Finish(op.cmd)
		if err := op.finish(op.cmd); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// run sends ops in one pipeline, leaving each reply in op.cmd.
func (b *Batch) run(ctx context.Context, ops []*batchOp) {
	if len(ops) == 0 {
		return
	}
	pipe := b.client.Pipeline()
	for _, op := range ops {
		op.cmd = op.op.Command(ctx)
		_ = pipe.Process(ctx, op.cmd)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
}

// OneServer reports whether client sends every command to one server: a standalone or
// Sentinel failover client (*redis.Client). Only there may one script call touch the keys of
// leases in many Redis Cluster slots (RenewMany).
func OneServer(client redis.UniversalClient) bool {
	_, ok := client.(*redis.Client)
	return ok
}

// Peek is what a read of one lease's key found (PeekMany).
type Peek struct {
	// Status is Held, with the record and its TTL, when the key held a record; not Held when
	// there was no key, or it was gone by the time its TTL was read.
	Status lease.Status
	// Err is set when the read failed or the key held something that is not a record.
	Err error
}

// PeekMany reads each of keys, lease keys (leasewire.Keys.Lease), GET then PTTL, in one
// pipeline (one per node on a Cluster), and returns what each found, in order: no script and no
// Lease, so a read-only Redis user may call it and a caller need not build one. Unlike
// Lease.Get it is not atomic: the TTL is read after the record and may be a later term's, so
// the expiry it gives is never earlier than the record's. A failed pipeline is every key's
// error.
func PeekMany(ctx context.Context, client redis.UniversalClient, keys []string) []Peek {
	res := make([]Peek, len(keys))
	if len(keys) == 0 {
		return res
	}
	gets := make([]*redis.StringCmd, len(keys))
	pttls := make([]*redis.DurationCmd, len(keys))
	pipe := client.Pipeline()
	for i, key := range keys {
		gets[i], pttls[i] = pipe.Get(ctx, key), pipe.PTTL(ctx, key)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	for i, key := range keys {
		v, getErr := gets[i].Result()
		ttl, ttlErr := pttls[i].Result()
		res[i] = ReadPeek(key, v, getErr, ttl, ttlErr)
	}
	return res
}

// ReadPeek is the Peek of a lease key from the replies to GET key (redis.Nil: no key) and then
// PTTL key (-2: no key, -1: no expiry, as go-redis's DurationCmd gives them).
func ReadPeek(key, v string, getErr error, ttl time.Duration, ttlErr error) Peek {
	switch {
	case errors.Is(getErr, redis.Nil):
		return Peek{} // free
	case getErr != nil:
		return Peek{Err: fmt.Errorf("read lease key %s: %w", key, getErr)}
	}
	rec, err := ParseRecord(v)
	switch {
	case err != nil:
		return Peek{Err: fmt.Errorf("read lease key %s: %w", key, err)}
	case ttlErr != nil:
		return Peek{Err: fmt.Errorf("read lease key %s: PTTL: %w", key, ttlErr)}
	case ttl == -2:
		return Peek{} // gone by the PTTL: free
	case ttl < 0:
		ttl = lease.NoExpiry
	}
	return Peek{Status: lease.Status{Held: true, Record: rec, TTL: ttl}}
}
