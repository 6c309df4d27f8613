package leasekit

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/pkg/lease"
)

// The resign protocol (docs/PROTOCOL.md, "Resign"): a request key P:{NAME}:resign asks the
// current term to step down; the holder's release turns it into a reservation that, for a
// hold-off, lets only the named target (or anyone but the resigning identity) acquire.

// DefaultResignHoldOff is the hold-off of a resign request that names none.
const DefaultResignHoldOff = 15 * time.Second

// ErrResignRequested is wrapped by the error of a renewal that succeeded while a resign
// request asks the renewed term to step down (only for a Lease with Ext.ResignRequests).
// The lease was extended: the holder has its full lease to stop its work, then releases.
var ErrResignRequested = errors.New("the term is asked to resign")

// ErrTargetIsHolder is wrapped by the error of RequestResign when the target named is the
// identity that holds the lease already.
var ErrTargetIsHolder = errors.New("resign target is the current holder")

// ErrOtherTerm is wrapped by the error of RequestResign when ResignRequest.Term was given and
// another term (or none) holds the lease: nothing was written.
var ErrOtherTerm = errors.New("the lease is not held by the given term")

// ResignRequest is what RequestResign writes.
type ResignRequest struct {
	// Target is the only identity that may acquire during the hold-off; "" lets anyone but
	// the resigning identity acquire.
	Target string
	// HoldOff is how long, after the holder released, the reservation lasts; then anyone may
	// acquire again. At least 1ms, a whole number of milliseconds; DefaultResignHoldOff when 0.
	HoldOff time.Duration
	// Timeout is how long the request waits for the holder to pick it up (at its next
	// renewal) before it expires; the holder's renewals extend it while it winds down. At
	// least 1ms, a whole number of milliseconds.
	Timeout time.Duration
	// Term, when not zero, makes the request only if this term holds the lease (a holder that
	// resigns itself, or a caller that read the holder first); otherwise the current holder,
	// whoever it is, is asked. Give it: a Redis client retries a command whose reply was lost,
	// and without Term a retry that runs after the holder changed asks the next term too.
	Term lease.Record
}

// Reservation is the hold-off after a resignation, during which a free lease may be acquired
// only by some replicas.
type Reservation struct {
	// Resigned is the record of the term that resigned.
	Resigned lease.Record
	// Target is the only identity that may acquire, "" for anyone but Resigned.Identity.
	Target string
	// TTL is the remaining hold-off (lease.NoExpiry if the key has no expiry).
	TTL time.Duration
}

// RequestResign asks the current holder of the lease to step down, in one round trip: it
// writes the request for the holder's record (so that no later term is asked) and publishes a
// ResignRequested event. Holders that take part in the protocol (package election's Elector)
// pick the request up at their next renewal, stop their work, release the lease, and the
// release makes the request a reservation for req.HoldOff.
//
// It returns the Status of the lease as found: Held false when nobody holds it (nothing is
// written). The request is refused (ErrTargetIsHolder) when req.Target holds the lease, and,
// with req.Term, when another term or none holds it (ErrOtherTerm).
func (l *Lease) RequestResign(ctx context.Context, req ResignRequest) (lease.Status, error) {
	if req.HoldOff == 0 {
		req.HoldOff = DefaultResignHoldOff
	}
	hold, err := leasewire.TTLMillis(req.HoldOff)
	if err != nil {
		return lease.Status{}, fmt.Errorf("request resign of lease %q: hold-off: %w", l.Name(), err)
	}
	ttl, err := leasewire.TTLMillis(req.Timeout)
	if err != nil {
		return lease.Status{}, fmt.Errorf("request resign of lease %q: timeout: %w", l.Name(), err)
	}
	if req.Target != "" {
		if err := leasewire.ValidateIdentity(req.Target); err != nil {
			return lease.Status{}, fmt.Errorf("request resign of lease %q: target %q %w", l.Name(), req.Target, err)
		}
	}
	args := []any{hold, req.Target, ttl, l.Keys().Events}
	if req.Term != (lease.Record{}) {
		args = append(args, req.Term.String())
	}
	reply, err := seam.Resign(ctx, l.Lease, args...)
	if err != nil {
		if redis.HasErrorPrefix(err, "resign target is the holder") {
			return lease.Status{}, fmt.Errorf("request resign of lease %q: %w: %q", l.Name(), ErrTargetIsHolder, req.Target)
		}
		return lease.Status{}, fmt.Errorf("request resign of lease %q: %w", l.Name(), err)
	}
	if len(reply) != 2 {
		return lease.Status{}, fmt.Errorf("request resign of lease %q: unexpected reply %v", l.Name(), reply)
	}
	n, _ := reply[0].(int64)
	value, _ := reply[1].(string)
	if n == 0 {
		if req.Term != (lease.Record{}) {
			return lease.Status{}, fmt.Errorf("request resign of lease %q: token %d: %w (nobody holds it)", l.Name(), req.Term.Token, ErrOtherTerm)
		}
		return lease.Status{}, nil
	}
	rec, err := seam.ParseRecord(value)
	if err != nil {
		return lease.Status{}, fmt.Errorf("request resign of lease %q: value of %s: %w", l.Name(), l.Keys().Lease, err)
	}
	st := lease.Status{Held: true, Record: rec}
	if n < 0 {
		return st, fmt.Errorf("request resign of lease %q: token %d: %w (token %d holds it)", l.Name(), req.Term.Token, ErrOtherTerm, rec.Token)
	}
	return st, nil
}

// GetReservation returns the reservation of the lease, nil when there is none (also while a
// request still waits for its holder), in one round trip (MULTI GET PTTL EXEC, no script).
func (l *Lease) GetReservation(ctx context.Context) (*Reservation, error) {
	v, ttl, ok, err := seam.ReadWithTTL(ctx, l.Lease, l.Keys().Resign)
	if err != nil {
		return nil, fmt.Errorf("get reservation of lease %q: %w", l.Name(), err)
	}
	if !ok {
		return nil, nil
	}
	phase, rec, target, err := parseResignValue(v)
	if err != nil {
		return nil, fmt.Errorf("get reservation of lease %q: value of %s: %w", l.Name(), l.Keys().Resign, err)
	}
	if phase != "reserved" {
		return nil, nil
	}
	return &Reservation{Resigned: rec, Target: target, TTL: ttl}, nil
}

// parseResignValue decodes "v1\n<phase>\n<hold_ms>\n<record>\n<target>".
func parseResignValue(v string) (phase string, rec lease.Record, target string, err error) {
	f := strings.SplitN(v, "\n", 5)
	if len(f) != 5 || f[0] != leasewire.Version {
		return "", lease.Record{}, "", fmt.Errorf("%q is not a resign request of this protocol", v)
	}
	if _, err := strconv.ParseUint(f[2], 10, 63); err != nil {
		return "", lease.Record{}, "", fmt.Errorf("%q: hold-off %q is not a number of milliseconds", v, f[2])
	}
	if rec, err = seam.ParseRecord(f[3]); err != nil {
		return "", lease.Record{}, "", err
	}
	return f[1], rec, f[4], nil
}

// parseReserved decodes the acquire script's refusal during a reservation,
// {2, record, pttl, target} (AcquireOrReservation).
func (l *Lease) parseReserved(reply []any) (*Reservation, error) {
	value, _ := reply[1].(string)
	pttl, _ := reply[2].(int64)
	target, _ := reply[3].(string)
	rec, err := seam.ParseRecord(value)
	if err != nil {
		return nil, fmt.Errorf("acquire lease %q: reservation in %s: %w", l.Name(), l.Keys().Resign, err)
	}
	return &Reservation{Resigned: rec, Target: target, TTL: seam.PTTL(pttl)}, nil
}
