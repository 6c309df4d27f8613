package lease

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReplicaAck asks that a write of the lease count only once replicas of the Redis master have
// acknowledged it, with the WAIT command.
//
// Redis replicates asynchronously: a master may confirm an acquisition or a renewal and die (or
// be cut off by a partition) before any replica received it, and the replica that Sentinel or
// Cluster promotes then knows nothing of the term. With ReplicaAck the holder learns of that
// before it relies on the write, so that the promoted replica's copy of the lease never expires
// before the holder's own reckoning says it does. See docs/RELIABILITY.md for what it changes
// and what it costs.
//
// WAIT counts the replicas that acknowledged every write made so far on the connection it is
// sent on, so it must follow the script on the same connection: Acquire and Renew with a
// ReplicaAck (Options.ReplicaAck) hold one connection (go-redis Client.Conn) for both. A WAIT sent through a
// connection pool may run on another connection and count nothing useful.
type ReplicaAck struct {
	// Replicas is how many replicas must acknowledge the write. 0 asks for none.
	Replicas int
	// Timeout bounds how long Redis waits for the acknowledgements: at least 1ms and a whole
	// number of milliseconds (WAIT with 0 would block forever). Keep it well below the
	// deadline of the call's context, and below RenewDeadline minus the expected round trip
	// when the lease is renewed by package election.
	Timeout time.Duration
}

// validate checks a: Replicas not negative, and a Timeout WAIT accepts when replicas are asked for.
func (a ReplicaAck) validate() error {
	switch {
	case a.Replicas < 0:
		return fmt.Errorf("ReplicaAck.Replicas must be 0 or more, got %d", a.Replicas)
	case a.Replicas == 0:
		return nil
	case a.Timeout < time.Millisecond:
		return fmt.Errorf("ReplicaAck.Timeout %v is below the minimum of 1ms (WAIT 0 would block forever)", a.Timeout)
	case a.Timeout%time.Millisecond != 0:
		return fmt.Errorf("ReplicaAck.Timeout %v is not a whole number of milliseconds", a.Timeout)
	}
	return nil
}

// ErrNotReplicated is matched (errors.Is) by the error of a write that the master applied but
// that fewer replicas than asked acknowledged within the timeout; its message says how many of
// how many, within what time. The write stands on the master; it may be lost if the master
// fails now.
var ErrNotReplicated = errors.New("write not acknowledged by enough replicas")

// notReplicatedError is the error of a write fewer replicas acknowledged than asked
// (ErrNotReplicated).
type notReplicatedError struct {
	// Acked is how many replicas acknowledged the write.
	Acked int
	// Wanted is ReplicaAck.Replicas.
	Wanted int
	// Timeout is ReplicaAck.Timeout.
	Timeout time.Duration
}

// Error says how many replicas acknowledged the write, of how many wanted, within what time.
func (e *notReplicatedError) Error() string {
	return fmt.Sprintf("%d of %d replicas acknowledged the write within %v", e.Acked, e.Wanted, e.Timeout)
}

// Is makes errors.Is(err, ErrNotReplicated) true for a *notReplicatedError.
func (e *notReplicatedError) Is(target error) bool { return target == ErrNotReplicated }

// acquireReplicated is Acquire with ack.Replicas > 0: the script, then WAIT on the same
// connection when the script wrote.
func (l *Lease) acquireReplicated(ctx context.Context, ms int64, ack ReplicaAck) (acquired bool, st Status, reserved []any, err error) {
	conn, err := l.masterConn(ctx)
	if err != nil {
		return false, Status{}, nil, fmt.Errorf("acquire lease %q: %w", l.name, err)
	}
	defer conn.Close()
	reply, err := l.run(ctx, conn, acquireScript, l.acquireKeys, l.acquireArgs(ms)...).Slice()
	if err != nil {
		l.noteRedirect(ctx, err)
		return false, Status{}, nil, acquireError(l.name, err)
	}
	acquired, st, reserved, err = l.parseAcquire(reply)
	if err != nil || !acquired {
		return acquired, st, reserved, err
	}
	if err := waitReplicas(ctx, conn, ack); err != nil {
		return true, st, nil, fmt.Errorf("acquire lease %q: token %d: %w", l.name, st.Record.Token, err)
	}
	return true, st, nil, nil
}

// renewReplicated is Renew with ack.Replicas > 0: the script, then WAIT on the same
// connection when the term was renewed.
func (l *Lease) renewReplicated(ctx context.Context, term Record, ms int64, ack ReplicaAck) (ok, resign bool, err error) {
	conn, err := l.masterConn(ctx)
	if err != nil {
		return false, false, fmt.Errorf("renew lease %q: %w", l.name, err)
	}
	defer conn.Close()
	n, err := l.run(ctx, conn, renewScript, l.termKeys, l.renewArgs(term, ms)...).Int64()
	if err != nil {
		l.noteRedirect(ctx, err)
		return false, false, fmt.Errorf("renew lease %q: %w", l.name, renewScript.Explain(err))
	}
	if n != 1 && n != 2 {
		return false, false, nil
	}
	if err := waitReplicas(ctx, conn, ack); err != nil {
		return true, false, fmt.Errorf("renew lease %q: token %d: %w", l.name, term.Token, err)
	}
	return true, n == 2, nil
}

// masterConn returns one dedicated connection to the master that serves the lease's keys. The
// caller closes it, which returns it to the client's pool.
func (l *Lease) masterConn(ctx context.Context) (*redis.Conn, error) {
	switch c := l.client.(type) {
	case *redis.Client:
		return c.Conn(), nil
	case *redis.ClusterClient:
		node, err := c.MasterForKey(ctx, l.keys.Lease)
		if err != nil {
			return nil, fmt.Errorf("find the cluster master of %s: %w", l.keys.Lease, err)
		}
		return node.Conn(), nil
	default:
		return nil, fmt.Errorf("replica acknowledgement needs a *redis.Client (standalone or Sentinel) or a *redis.ClusterClient, not %T", l.client)
	}
}

// noteRedirect asks a cluster client to refresh its slot map when a node answered MOVED or ASK
// to a call made on a connection of its own, which the cluster client does not see.
func (l *Lease) noteRedirect(ctx context.Context, err error) {
	c, ok := l.client.(*redis.ClusterClient)
	if ok && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK")) {
		c.ReloadState(ctx)
	}
}

// waitReplicas sends WAIT on conn, after a write on it, and checks the count.
func waitReplicas(ctx context.Context, conn *redis.Conn, ack ReplicaAck) error {
	n, err := conn.Wait(ctx, ack.Replicas, ack.Timeout).Result()
	if err != nil {
		return fmt.Errorf("wait for %d replicas: %w", ack.Replicas, err)
	}
	if int(n) < ack.Replicas {
		return &notReplicatedError{Acked: int(n), Wanted: ack.Replicas, Timeout: ack.Timeout}
	}
	return nil
}
