package lease

import (
	"context"
	"time"
)

// Terms returns how many terms began on this lease (the transitions of `kubectl get lease`),
// 0 when none is recorded. The count starts when the first acquire of this protocol version
// ran, and is lost with Redis's data like the token key.
func (l *Lease) Terms(ctx context.Context) (int64, error) {
	return l.counter(ctx, l.keys.Terms, "terms")
}

// minClockToken is the smallest token read as a time: 2001-09-09 in microseconds since 1970.
// A token handed out from Redis's clock is a time far above it; a counter continued by
// "previous + 1" (only when the clock went backwards) or a record written by hand is below.
const minClockToken = 1_000_000_000_000_000

// AcquiredAt returns the time a term began, read from its fencing token: the token is
// max(previous + 1, Redis's TIME in microseconds) when the term began, so it is that time —
// unless Redis's clock was behind the previous token (a failover to a server whose clock is
// behind), when it is the previous term's time plus 1µs: earlier than the true time, never
// later. ok is false for a token that is no time (below 2001, e.g. a record set by hand).
func (r Record) AcquiredAt() (t time.Time, ok bool) {
	if r.Token < minClockToken {
		return time.Time{}, false
	}
	return time.UnixMicro(r.Token).UTC(), true
}
