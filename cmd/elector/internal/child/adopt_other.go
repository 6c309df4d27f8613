//go:build unix && !linux

package child

import (
	"errors"
	"time"
)

// BecomeSubreaper would make this process a child subreaper; that exists only on Linux,
// where the shim does too.
func BecomeSubreaper() error { return errUnsupportedSubreaper }

var errUnsupportedSubreaper = errors.New("become a child subreaper: not supported on this system")

// killAdopted is never called outside Linux: there is no shim.
func killAdopted(int, time.Duration) error { return errUnsupportedSubreaper }
