// Package reliability holds elector's reliability and security tests: elections through
// Sentinel failovers and network partitions (with and without replica acknowledgement),
// Redis Cluster resharding under live leases, TLS and ACL set-ups, and bad input. The tests
// start real redis-server, redis-sentinel and Cluster processes on loopback
// (internal/redistest); they skip without redis-server, or fail when CI or
// ELECTOR_REQUIRE_REDIS is set.
//
// The default run takes about 90 seconds. ELECTOR_LONG=1 runs the long variants: more
// failovers, and the 20-round measurement of what replica acknowledgement changes whose
// figures are in docs/RELIABILITY.md.
package reliability
