package main

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A silent listener (it accepts connections and never replies) is named with the address
// and the time waited, and a fix, not as a bare "context deadline exceeded" (issue 28 item 11).
func TestStatusNamesSilentListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var conns []net.Conn // read by nobody, answered never; closed with the listener
		defer func() {
			for _, c := range conns {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	c, _, stderr := testCLI(nil)
	args := []string{"status", "--lease-name", "x", "--redis-addr", ln.Addr().String()}
	code := c.main(context.Background(), args)
	out := stderr.String()
	for _, want := range []string{ln.Addr().String(), "no reply within ", "fix: check that Redis answers"} {
		if code != exitError || !strings.Contains(out, want) {
			t.Errorf("elector %q: exit %d, stderr %q; want exit %d naming %q", args, code, out, exitError, want)
		}
	}
}

// An HTTP server at --redis-addr is named as no Redis server, with the flag to fix, not as
// go-redis's "can't parse map reply" or "invalid reply" alone (issue 28 item 11).
func TestStatusNamesNonRedisServer(t *testing.T) {
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	addr := strings.TrimPrefix(web.URL, "http://")
	for _, args := range [][]string{
		{"status", "--lease-name", "x", "--redis-addr", addr},
		{"resign", "--lease-name", "x", "--redis-addr", addr, "--timeout", "5s"},
	} {
		c, _, stderr := testCLI(nil)
		code := c.main(context.Background(), args)
		out := stderr.String()
		for _, want := range []string{addr, "does not speak the Redis protocol", "--redis-addr"} {
			if code != exitError || !strings.Contains(out, want) {
				t.Errorf("elector %q: exit %d, stderr %q; want exit %d naming %q", args, code, out, exitError, want)
			}
		}
	}
}
