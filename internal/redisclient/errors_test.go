package redisclient

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/redistest"
)

// TestIsNilUnknownMaster: with a master name no Sentinel knows, go-redis's lookup error wraps
// the Sentinels' nil replies; IsNil must not take it for an absent key, IsUnknownMaster must
// recognise it. A real absent key through the right name stays IsNil.
func TestIsNilUnknownMaster(t *testing.T) {
	s := redistest.StartSentinel(t, "mymaster", 0, 1)
	addrs := strings.Join(s.SentinelAddrs(), ",")
	ctx := testCtx(t)

	wrong, err := newClient(t, "", "--redis-mode=sentinel", "--sentinel-master=wrong", "--redis-addr="+addrs)
	if err != nil {
		t.Fatal(err)
	}
	err = wrong.Get(ctx, "absent").Err()
	if err == nil {
		t.Fatal("GET through an unknown master succeeded")
	}
	if !errors.Is(err, redis.Nil) {
		t.Logf("go-redis no longer wraps redis.Nil in the lookup error (%v): IsNil is still right", err)
	}
	if IsNil(err) || !IsUnknownMaster(err) || !IsSentinelLookup(err) {
		t.Errorf("lookup error %q: IsNil %v (want false), IsUnknownMaster %v, IsSentinelLookup %v (want true)",
			err, IsNil(err), IsUnknownMaster(err), IsSentinelLookup(err))
	}

	right, err := newClient(t, "", "--redis-mode=sentinel", "--sentinel-master=mymaster", "--redis-addr="+addrs)
	if err != nil {
		t.Fatal(err)
	}
	err = right.Get(ctx, "absent").Err()
	if !IsNil(err) || IsUnknownMaster(err) {
		t.Errorf("absent key: IsNil(%v) = %v, IsUnknownMaster = %v; want true, false", err, IsNil(err), IsUnknownMaster(err))
	}
	if wrapped := fmt.Errorf("get: %w", err); !IsNil(wrapped) {
		t.Errorf("a wrapped nil reply is not IsNil")
	}
	if IsNil(nil) || IsUnknownMaster(nil) || IsSentinelLookup(nil) {
		t.Error("nil error classified")
	}
}
