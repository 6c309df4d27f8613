package lease

import "context"

// NotReplicatedError lets the tests read the counts of an unacknowledged write.
type NotReplicatedError = notReplicatedError

// The longest name and identity ValidateName and ValidateIdentity accept.
const (
	MaxNameLen     = maxNameLen
	MaxIdentityLen = maxIdentityLen
)

// LastToken returns the last fencing token handed out for this lease, 0 if none is recorded.
func (l *Lease) LastToken(ctx context.Context) (int64, error) {
	return l.counter(ctx, l.keys.Token, "last token")
}

// Admits reports whether identity may acquire the lease during the reservation: the Go
// statement of the rule acquire.lua enforces, for the tests.
func (r *Reservation) Admits(identity string) bool {
	if r.Target != "" {
		return identity == r.Target
	}
	return identity != r.Resigned.Identity
}
