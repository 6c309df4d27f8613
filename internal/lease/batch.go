package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/luaerr"
)

// Batch queues acquire, renew and release operations on many leases and runs them in one
// pipeline: one round trip per Redis node (go-redis splits a Cluster pipeline by node). It is
// how one process keeps thousands of leases for the cost of a few round trips. All leases of
// a Batch must share one client. A Batch is not safe for concurrent use.
type Batch struct {
	client redis.UniversalClient
	ops    []*batchOp
}

// AcquireResult is the outcome of an Acquire queued in a Batch, filled in by Exec.
type AcquireResult struct {
	// Acquired, Status: as returned by Lease.Acquire.
	Acquired bool
	Status   Status
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

type opKind int

const (
	opAcquire opKind = iota
	opRenew
	opRelease
)

type batchOp struct {
	kind    opKind
	lease   *Lease
	script  script
	keys    []any
	args    []any
	acquire *AcquireResult
	result  *Result
	cmd     *redis.Cmd
}

// NewBatch returns an empty Batch for leases created with client.
func NewBatch(client redis.UniversalClient) *Batch { return &Batch{client: client} }

// Len returns the number of queued operations.
func (b *Batch) Len() int { return len(b.ops) }

// Acquire queues l.Acquire(ttl).
func (b *Batch) Acquire(l *Lease, ttl time.Duration) *AcquireResult {
	r := &AcquireResult{}
	ms, err := ttlMillis(ttl)
	switch {
	case err != nil:
		r.Err = fmt.Errorf("acquire lease %q: %w", l.name, err)
	case l.identity == "":
		r.Err = fmt.Errorf("acquire lease %q: no identity set in lease.Options", l.name)
	default:
		b.ops = append(b.ops, &batchOp{kind: opAcquire, lease: l, script: acquireScript, keys: l.acquireKeys, args: l.acquireArgs(ms), acquire: r})
	}
	return r
}

// Renew queues l.Renew(term, ttl).
func (b *Batch) Renew(l *Lease, term Record, ttl time.Duration) *Result {
	r := &Result{}
	ms, err := ttlMillis(ttl)
	if err != nil {
		r.Err = fmt.Errorf("renew lease %q: %w", l.name, err)
		return r
	}
	b.ops = append(b.ops, &batchOp{kind: opRenew, lease: l, script: renewScript, keys: l.termKeys[:1], args: l.renewArgs(term, ms), result: r})
	return r
}

// Release queues l.Release(term).
func (b *Batch) Release(l *Lease, term Record) *Result {
	r := &Result{}
	b.ops = append(b.ops, &batchOp{kind: opRelease, lease: l, script: releaseScript, keys: l.termKeys, args: l.releaseArgs(term), result: r})
	return r
}

// Exec runs the queued operations, fills in their results and empties the Batch. Scripts
// that Redis does not know (after a restart or failover) are loaded and their operations run
// again, once. The error is that of the first failed operation, nil if all succeeded.
func (b *Batch) Exec(ctx context.Context) error {
	ops := b.ops
	b.ops = nil
	for _, op := range ops {
		if op.lease.client != b.client {
			return fmt.Errorf("lease batch: lease %q uses another client than the batch", op.lease.name)
		}
	}
	b.run(ctx, ops)
	var retry []*batchOp
	for _, op := range ops {
		if err := op.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			retry = append(retry, op)
		}
	}
	if len(retry) > 0 {
		for _, s := range []script{acquireScript, renewScript, releaseScript} {
			if err := s.Load(ctx, b.client).Err(); err != nil {
				err = fmt.Errorf("lease batch: load scripts: %w", err)
				for _, op := range retry {
					op.cmd.SetErr(err)
				}
				retry = nil
				break
			}
		}
		b.run(ctx, retry)
	}
	var first error
	for _, op := range ops {
		if err := op.finish(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// run sends ops in one pipeline (EVALSHA: Script.Run cannot fall back to EVAL inside a
// pipeline, so Exec loads the scripts and runs again), leaving each reply in op.cmd.
func (b *Batch) run(ctx context.Context, ops []*batchOp) {
	pipe := b.client.Pipeline()
	for _, op := range ops {
		op.cmd = op.script.command(ctx, false, op.keys, op.args...)
		_ = pipe.Process(ctx, op.cmd)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
}

// finish decodes op.cmd into the caller's result and returns its error.
func (op *batchOp) finish() error {
	name := op.lease.name
	if op.kind == opAcquire {
		reply, err := op.cmd.Slice()
		if err != nil {
			op.acquire.Err = acquireError(name, err)
		} else {
			op.acquire.Acquired, op.acquire.Status, op.acquire.Err = op.lease.parseAcquire(reply)
		}
		return op.acquire.Err
	}
	n, err := op.cmd.Int64()
	if err != nil {
		verb, src := "renew", renewSource
		if op.kind == opRelease {
			verb, src = "release", releaseSource
		}
		op.result.Err = fmt.Errorf("%s lease %q: %w", verb, name, luaerr.Explain(src, err))
	}
	op.result.OK = n == 1
	return op.result.Err
}
