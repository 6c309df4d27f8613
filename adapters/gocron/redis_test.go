package gocron

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest"
)

// startRedis starts a redis-server for the test with the main module's harness (it skips
// without redis-server, or fails when CI or ELECTOR_REQUIRE_REDIS is set) and returns a client
// to it; both are gone at t.Cleanup.
func startRedis(t testing.TB) *redis.Client { return redistest.Start(t).Client(t) }

// newClient returns another client of the server that c talks to, closed at t.Cleanup.
func newClient(t testing.TB, c *redis.Client) *redis.Client {
	t.Helper()
	nc := redis.NewClient(c.Options())
	t.Cleanup(func() { _ = nc.Close() })
	return nc
}
