// Package redistest starts real redis-server, Redis Cluster and Redis Sentinel processes for tests.
//
// Every process listens on a free 127.0.0.1 port, lives in its own t.TempDir(), keeps no data on
// disk (--save "" --appendonly no) and is killed at t.Cleanup. On Linux each child is also started
// with Pdeathsig=SIGKILL so that it dies with the test binary even when the binary itself is killed.
// The package builds on Unix only (it uses SIGSTOP/SIGCONT and process groups).
//
// The programs are Redis's or Valkey's: ELECTOR_REDIS_SERVER, ELECTOR_REDIS_SENTINEL and
// ELECTOR_REDIS_CLI name them, else redis-server (or valkey-server) on PATH and the programs of its
// family beside it (package serverbin); hack/compat.sh runs the suites so against each server of
// the matrix. When no server is installed, tests skip with a clear message; when the environment
// variable CI or ELECTOR_REQUIRE_REDIS is non-empty they fail instead, so that nothing skips
// silently in CI.
//
// The plain TCP port returned by Server.Addr is always enabled; extra arguments such as TLS settings
// may add listeners but must not disable it (no "--port 0").
//
// It owns the test servers' processes, ports and data directories. It must not be imported by
// non-test code.
package redistest
