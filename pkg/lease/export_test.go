package lease

import "context"

// NotReplicatedError lets the tests read the counts of an unacknowledged write.
type NotReplicatedError = notReplicatedError

// LastToken returns the last fencing token handed out for this lease, 0 if none is recorded.
func (l *Lease) LastToken(ctx context.Context) (int64, error) {
	return l.counter(ctx, l.keys.Token, "last token")
}
