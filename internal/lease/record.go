package lease

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/elector/elector/internal/leaseerr"
)

// recordVersion is the first field of every record this package writes.
const recordVersion = "v1"

// maxIdentityLen is the longest identity, in bytes, that a record may carry. It is room for a
// Kubernetes pod name (at most 253 bytes) with a suffix.
const maxIdentityLen = 256

// maxNameLen is the longest lease name, in bytes.
const maxNameLen = 200

// ErrBadRecord is wrapped by errors about a lease value that is not a record of this protocol.
var ErrBadRecord = leaseerr.BadRecord

// Record is the value of the lease key. It identifies one term: the fencing token handed out
// when the term began, the random instance id of the process that holds it, and the identity
// (for example the pod name) that process was configured with. Two processes configured with
// the same identity have different instance ids, so they never pass each other's owner check.
//
// Its encoding, "v1:<token>:<instance>:<identity>", is described in docs/PROTOCOL.md.
type Record struct {
	// Token is the fencing token of the term: larger than the token of every earlier term.
	Token int64
	// Instance is the random id of the holding process, generated once per process start.
	Instance string
	// Identity is the holder's configured identity.
	Identity string
}

// String returns the encoded record, exactly as it is stored in Redis.
func (r Record) String() string {
	return recordVersion + ":" + strconv.FormatInt(r.Token, 10) + ":" + r.Instance + ":" + r.Identity
}

// IsZero reports whether r is the zero Record, as the Status of an unheld lease carries.
func (r Record) IsZero() bool { return r == Record{} }

// ParseRecord decodes a lease value. The identity is the last field and may itself contain
// colons; the token is a positive decimal integer and the instance id is not empty.
func ParseRecord(s string) (Record, error) {
	version, rest, ok := strings.Cut(s, ":")
	if !ok || version != recordVersion {
		return Record{}, fmt.Errorf("parse record %q: %w: want version %q", s, ErrBadRecord, recordVersion)
	}
	tok, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return Record{}, fmt.Errorf("parse record %q: %w: missing token", s, ErrBadRecord)
	}
	token, err := strconv.ParseInt(tok, 10, 64)
	if err != nil || token <= 0 || !canonicalDigits(tok) {
		return Record{}, fmt.Errorf("parse record %q: %w: token %q is not a positive integer", s, ErrBadRecord, tok)
	}
	instance, identity, ok := strings.Cut(rest, ":")
	if !ok || instance == "" {
		return Record{}, fmt.Errorf("parse record %q: %w: missing instance id", s, ErrBadRecord)
	}
	return Record{Token: token, Instance: instance, Identity: identity}, nil
}

// canonicalDigits reports whether s is written the way String writes a positive token:
// digits only, no sign, no leading zero. (Cheaper than formatting the token back.)
func canonicalDigits(s string) bool {
	if s == "" || s[0] < '1' || s[0] > '9' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// ValidateName checks a lease name (or a key prefix): not empty, at most 200 bytes, and
// no braces (they would break the Cluster hash tag), whitespace or control characters.
func ValidateName(name string) error {
	if name == "" {
		return errors.New("must not be empty")
	}
	if len(name) > maxNameLen {
		return fmt.Errorf("is %d bytes long, at most %d are allowed", len(name), maxNameLen)
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
	if len(identity) > maxIdentityLen {
		return fmt.Errorf("is %d bytes long, at most %d are allowed", len(identity), maxIdentityLen)
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

// validateInstance checks an instance id: 1 to 64 bytes of letters, digits, '-' or '_'.
func validateInstance(id string) error {
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
