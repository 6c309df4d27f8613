// Package leaseerr holds the sentinel errors of package lease (internal/lease) that
// internal/redisfail classifies, so that redisfail recognises them without depending on the
// whole lease implementation. internal/lease exports these same values as ErrBadRecord,
// ErrNotReplicated and ErrTokenRange (and pkg/lease ErrNotReplicated); errors.Is matches
// either name.
//
// It owns the three values and their messages only: their meaning is documented, and their
// errors are made, in internal/lease.
package leaseerr

import "errors"

var (
	// BadRecord is lease.ErrBadRecord: a lease value that is not a record of this protocol.
	BadRecord = errors.New("not an elector lease record")
	// NotReplicated is lease.ErrNotReplicated: a write fewer replicas acknowledged than asked.
	NotReplicated = errors.New("write not acknowledged by enough replicas")
	// TokenRange is lease.ErrTokenRange: the next fencing token would exceed 2^53-1.
	TokenRange = errors.New("fencing token counter beyond 2^53-1")
)
