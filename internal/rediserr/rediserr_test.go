package rediserr

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/testing/redistest"
)

// sentinelClient builds a client of the Sentinels at addrs for master, as the elector does.
func sentinelClient(t *testing.T, addrs []string, master string) redis.UniversalClient {
	t.Helper()
	c, err := redisclient.New(redisclient.Config{Addrs: addrs, Mode: redisclient.ModeSentinel, SentinelMaster: master,
		DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestIsNilUnknownMaster: with a master name no Sentinel knows, go-redis's lookup error wraps
// the Sentinels' nil replies; IsNil must not take it for an absent key, IsUnknownMaster must
// recognise it. A real absent key through the right name stays IsNil.
func TestIsNilUnknownMaster(t *testing.T) {
	s := redistest.StartSentinel(t, "mymaster", 0, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	err := sentinelClient(t, s.SentinelAddrs(), "wrong").Get(ctx, "absent").Err()
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

	err = sentinelClient(t, s.SentinelAddrs(), "mymaster").Get(ctx, "absent").Err()
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
