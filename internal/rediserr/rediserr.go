// Package rediserr classifies the errors of go-redis calls where go-redis itself does not: it
// tells a nil reply (no key) from a Sentinel lookup that failed with nil replies (no such
// master). It has no dependency but go-redis, so that the library packages can use it.
//
// It owns those predicates only: the reasons and fixes shown to users are internal/redisfail's.
package rediserr

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// sentinelLookupFailed starts go-redis's error when no Sentinel gave the address of the
// master (v9: "redis: all sentinels specified in configuration are unreachable: ..."). The
// causes are joined into it, and a Sentinel that answered but does not know the master name
// contributes redis.Nil — its nil reply to SENTINEL GET-MASTER-ADDR-BY-NAME.
const sentinelLookupFailed = "all sentinels specified in configuration are unreachable"

// IsNil reports whether err is a command's nil reply (redis.Nil: the key is absent), and not
// a failure that merely wraps redis.Nil. The one such failure known is go-redis's Sentinel
// master lookup: when no Sentinel knows the master name, its error wraps the Sentinels' nil
// replies, and errors.Is(err, redis.Nil) would take "no master" for "no key". Every read that
// treats redis.Nil as "absent" must use IsNil instead.
func IsNil(err error) bool {
	return errors.Is(err, redis.Nil) && !IsUnknownMaster(err)
}

// IsUnknownMaster reports whether err is go-redis's Sentinel master lookup failing because at
// least one Sentinel answered that it knows no master by the configured name (the other
// Sentinels, if any, did not answer).
func IsUnknownMaster(err error) bool {
	return err != nil && errors.Is(err, redis.Nil) && strings.Contains(err.Error(), sentinelLookupFailed)
}

// IsSentinelLookup reports whether err is go-redis's failure to learn the master's address
// from any Sentinel, whatever the cause (unknown master name, Sentinels down or refusing).
func IsSentinelLookup(err error) bool {
	return err != nil && strings.Contains(err.Error(), sentinelLookupFailed)
}
