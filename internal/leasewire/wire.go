// Package leasewire holds the parts of the lease protocol (docs/PROTOCOL.md) that package lease
// (pkg/lease) shares with the packages of this module built on it: the key layout, the rules
// for names, identities and instance ids, the record version and the bad-record error. It also
// carries the seam through which internal/leasekit reaches a lease's internals.
//
// It sits below pkg/lease and must not import it; it knows nothing of records or terms.
package leasewire

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
	"unicode"
	"unicode/utf8"
)

// Version is the first field of every record, done mark and resign request the protocol writes.
const Version = "v1"

// MaxIdentityLen is the longest identity, in bytes: room for a Kubernetes pod name (at most
// 253 bytes) with a suffix.
const MaxIdentityLen = 256

// MaxNameLen is the longest lease name or key prefix, in bytes.
const MaxNameLen = 200

// ErrBadRecord is wrapped by errors about a lease value that is not a record of this protocol.
var ErrBadRecord = errors.New("not an elector lease record")

// Lease is package lease's seam: a value of an unexported type of package lease that
// implements internal/leasekit's view of a lease's internals. Package lease sets it when it
// is loaded; it is typed any because this package sits below both.
var Lease any

// ValidateName checks a lease name (or a key prefix): not empty, at most 200 bytes, and
// no braces (they would break the Cluster hash tag), whitespace or control characters.
func ValidateName(name string) error {
	if name == "" {
		return errors.New("must not be empty")
	}
	if len(name) > MaxNameLen {
		return fmt.Errorf("is %d bytes long, at most %d are allowed", len(name), MaxNameLen)
	}
	if !utf8.ValidString(name) {
		return errors.New("is not valid UTF-8")
	}
	for _, c := range name {
		switch {
		case c == '{' || c == '}':
			return fmt.Errorf("must not contain %q (it would break the {name} hash tag)", c)
		case unicode.IsSpace(c) || unicode.IsControl(c):
			return fmt.Errorf("must not contain whitespace or control characters (found %q)", c)
		}
	}
	return nil
}

// ValidateIdentity checks an identity: not empty, at most 256 bytes (room for a Kubernetes pod
// name with a suffix), valid UTF-8 and without control characters such as newlines (it ends up
// in logs and HTTP replies).
func ValidateIdentity(identity string) error {
	if identity == "" {
		return errors.New("must not be empty")
	}
	if len(identity) > MaxIdentityLen {
		return fmt.Errorf("is %d bytes long, at most %d are allowed", len(identity), MaxIdentityLen)
	}
	if !utf8.ValidString(identity) {
		return errors.New("is not valid UTF-8")
	}
	for _, c := range identity {
		if unicode.IsControl(c) {
			return fmt.Errorf("must not contain control characters (found %q)", c)
		}
	}
	return nil
}

// ValidateInstance checks an instance id: 1 to 64 bytes of letters, digits, '-' or '_'.
func ValidateInstance(id string) error {
	if id == "" || len(id) > 64 {
		return fmt.Errorf("must be 1 to 64 bytes long, got %d", len(id))
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("must contain only letters, digits, '-' and '_' (found %q)", c)
		}
	}
	return nil
}

// NewInstanceID returns a fresh random instance id: 16 hexadecimal digits (64 bits).
func NewInstanceID() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("generate instance id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// TTLMillis checks that ttl is a positive whole number of milliseconds and returns that number.
func TTLMillis(ttl time.Duration) (int64, error) {
	if ttl < time.Millisecond {
		return 0, fmt.Errorf("ttl %v is below the minimum of 1ms", ttl)
	}
	if ttl%time.Millisecond != 0 {
		return 0, fmt.Errorf("ttl %v is not a whole number of milliseconds", ttl)
	}
	return ttl.Milliseconds(), nil
}
