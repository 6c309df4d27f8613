package redistest

import (
	"net"
	"strconv"
	"testing"
)

// TestFreeAddr checks that FreeAddr hands out loopback ports outside the ephemeral range,
// bindable when returned, never the same twice, and not the port a ":0" listener opened
// right after it gets.
func TestFreeAddr(t *testing.T) {
	lo, hi, err := quietPorts()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 200 {
		addr := FreeAddr(t)
		host, p, err := net.SplitHostPort(addr)
		if err != nil || host != "127.0.0.1" {
			t.Fatalf("FreeAddr = %q: want 127.0.0.1:PORT (%v)", addr, err)
		}
		port, _ := strconv.Atoi(p)
		if port < lo || port > hi {
			t.Fatalf("FreeAddr = %q: port outside %d-%d, the block outside the ephemeral range", addr, lo, hi)
		}
		if seen[addr] {
			t.Fatalf("FreeAddr returned %q twice", addr)
		}
		seen[addr] = true
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		got := l.Addr().String()
		_ = l.Close()
		if got == addr {
			t.Fatalf("a :0 listener after FreeAddr got its port %s", addr)
		}
		l, err = net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("the port FreeAddr returned cannot be bound: %v", err)
		}
		_ = l.Close()
	}
}
