// Package demoredis runs the embedded Redis-compatible server of `elector
// demo`, so that the election can be shown without installing Redis.
//
// The server is miniredis (github.com/alicebob/miniredis/v2). By default
// miniredis never expires keys on its own: TTLs move only when its clock is
// advanced by hand. A lease that never expires would make the demo lie about
// failover, so Start turns on miniredis' ClockTTL mode without a fixed time:
// TTLs then run against the wall clock, exactly like in Redis, and TIME
// reports the wall clock. Expired keys are removed lazily, on the next command
// that touches the database, which no client can tell apart from Redis'
// active expiry (keyspace notifications aside, which elector does not use).
//
// miniredis is not Redis, and the demo is not a proof of the Lua scripts:
// those are tested against real redis-server. One difference matters for
// script authors: miniredis (gopher-lua) turns an integral number into a
// string with all its digits, real Redis' Lua 5.1 uses "%.14g". So
// tostring(1700000000123456) and 'x' .. 1700000000123456 give
// "1700000000123456" in miniredis but "1.7000000001235e+15" in Redis. Scripts
// must format large numbers with string.format('%.0f', n) (or pass them as
// redis.call arguments, which both convert exactly); the tests of this
// package check that these portable forms agree.
//
// It owns the embedded server's lifecycle and its compatibility checks. It must not know of
// the demo's keys or schedule (package demo) or of the election.
package demoredis

import (
	"context"
	"fmt"
	"sync"

	"github.com/alicebob/miniredis/v2"
)

// Server is a running embedded Redis-compatible server.
type Server struct {
	mr        *miniredis.Miniredis
	addr      string
	closeOnce sync.Once

	mu        sync.Mutex
	stopAfter func() bool // unregisters the close-on-ctx-done callback
}

// Start starts the server listening on addr (for example "127.0.0.1:0" for a
// free loopback port) and returns once it accepts connections. The server
// has no password: keep it on a loopback address. It is closed when ctx is
// done or Close is called, whichever comes first.
func Start(ctx context.Context, addr string) (*Server, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start embedded redis on %s: %w", addr, err)
	}
	mr := miniredis.NewMiniRedis()
	// Real-time expiry and a real TIME: see the package comment.
	mr.ClockTTL(true)
	if err := mr.StartAddr(addr); err != nil {
		return nil, fmt.Errorf("start embedded redis on %s: %w", addr, err)
	}
	s := &Server{mr: mr, addr: mr.Addr()}
	s.mu.Lock()
	s.stopAfter = context.AfterFunc(ctx, s.Close)
	s.mu.Unlock()
	return s, nil
}

// Addr returns the host:port the server listens on, with the actual port
// when Start was given port 0.
func (s *Server) Addr() string { return s.addr }

// Close stops the server and drops all connections and data. It is safe to
// call more than once and concurrently.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		stop := s.stopAfter
		s.mu.Unlock()
		if stop != nil {
			stop()
		}
		s.mr.Close()
	})
}
