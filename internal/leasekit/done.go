package leasekit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/pkg/lease"
)

// The done mark (docs/DESIGN.md, "Once per period"): P:{NAME}:done tells that a term's job
// succeeded and that no term is to run it again until the mark expires.

// Done is the done mark of a lease: the job run by Term succeeded (or ended with ExitCode) at
// Finished, and the mark holds for TTL more.
type Done struct {
	// Term is the record of the term whose job the mark is about.
	Term lease.Record
	// ExitCode is the job's exit code.
	ExitCode int
	// Finished is when the job finished, by the clock of the replica that ran it
	// (millisecond precision).
	Finished time.Time
	// TTL is how long the mark holds: written with MarkDone, remaining as GetDone read it
	// (lease.NoExpiry if the key has no expiry).
	TTL time.Duration
}

// MarkDone writes the done mark d in one round trip, fenced: only if the lease still holds
// d.Term's record, so that a holder whose term has ended (a paused process, a lost renewal)
// cannot mark a job done for a later term's period. d.TTL, at least 1ms and a whole number of
// milliseconds, is the mark's expiry (PX). false means another term or none holds the lease:
// nothing was written.
func (l *Lease) MarkDone(ctx context.Context, d Done) (bool, error) {
	ms, err := leasewire.TTLMillis(d.TTL)
	if err != nil {
		return false, fmt.Errorf("mark lease %q done: %w", l.Name(), err)
	}
	args := []any{d.Term.String(), d.Finished.UnixMilli(), d.ExitCode, ms}
	n, err := seam.Done(ctx, l.Lease, args...)
	if err != nil {
		return false, fmt.Errorf("mark lease %q done: %w", l.Name(), err)
	}
	return n == 1, nil
}

// GetDone returns the done mark of the lease, nil when there is none, in one round trip
// (MULTI GET PTTL EXEC, no script: a read-only Redis user may read it).
func (l *Lease) GetDone(ctx context.Context) (*Done, error) {
	v, ttl, ok, err := seam.ReadWithTTL(ctx, l.Lease, l.Keys().Done)
	if err != nil {
		return nil, fmt.Errorf("get the done mark of lease %q: %w", l.Name(), err)
	}
	if !ok {
		return nil, nil
	}
	d, err := parseDone(v)
	if err != nil {
		return nil, fmt.Errorf("get the done mark of lease %q: value of %s: %w", l.Name(), l.Keys().Done, err)
	}
	d.TTL = ttl
	return d, nil
}

// parseDone decodes "v1\n<finished ms>\n<exit code>\n<record>".
func parseDone(v string) (*Done, error) {
	f := strings.SplitN(v, "\n", 4)
	if len(f) != 4 || f[0] != leasewire.Version {
		return nil, fmt.Errorf("%q is not a done mark of this protocol", v)
	}
	ms, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("%q: finish time %q is not a number of milliseconds", v, f[1])
	}
	code, err := strconv.Atoi(f[2])
	if err != nil {
		return nil, fmt.Errorf("%q: exit code %q is not an integer", v, f[2])
	}
	rec, err := seam.ParseRecord(f[3])
	if err != nil {
		return nil, err
	}
	return &Done{Term: rec, ExitCode: code, Finished: time.UnixMilli(ms).UTC()}, nil
}
