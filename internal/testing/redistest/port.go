package redistest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// handedOut holds the ports FreeAddr returned in this process, so that none is returned
// twice: ports are a process-wide resource, shared by every test of the binary.
var handedOut sync.Map

// FreeAddr returns "127.0.0.1:PORT" with a port that was free a moment ago, for a process the
// test starts next with that address on its command line. The port is drawn outside the
// kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range) and never twice: whatever
// binds ":0" meanwhile (a fault proxy, a Redis started by this package, a client's outgoing
// connection) gets a port from that range, so it cannot take the port handed out and not yet
// bound. A port taken with ":0" and closed, as a quick picker does, can be given again at once
// to the next ":0" in the process: a sidecar then failed "address already in use" in CI.
func FreeAddr(t testing.TB) string {
	t.Helper()
	lo, hi, err := quietPorts()
	if err != nil {
		t.Fatalf("free loopback port: %v", err)
	}
	for range 1000 {
		port := lo + rand.IntN(hi-lo+1)
		if _, dup := handedOut.LoadOrStore(port, true); dup {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		_ = l.Close()
		return addr
	}
	t.Fatalf("no free loopback port found in %d-%d", lo, hi)
	return ""
}

// quietPorts returns the larger block of ports outside the ephemeral range: below it (from
// 10000 at the lowest, clear of well-known services) or above it. Without the /proc file
// (not Linux) it assumes Linux's default range, 32768-60999.
func quietPorts() (lo, hi int, err error) {
	eLo, eHi := 32768, 60999
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		f := strings.Fields(string(b))
		if len(f) != 2 {
			return 0, 0, fmt.Errorf("ip_local_port_range %q: want two ports", b)
		}
		if eLo, err = strconv.Atoi(f[0]); err == nil {
			eHi, err = strconv.Atoi(f[1])
		}
		if err != nil {
			return 0, 0, fmt.Errorf("ip_local_port_range %q: %w", b, err)
		}
	}
	below, above := eLo-10000, 65535-eHi
	switch {
	case below >= above && below >= 1000:
		return 10000, eLo - 1, nil
	case above >= 1000:
		return eHi + 1, 65535, nil
	}
	return 0, 0, fmt.Errorf("the ephemeral port range %d-%d leaves fewer than 1000 ports outside it", eLo, eHi)
}
