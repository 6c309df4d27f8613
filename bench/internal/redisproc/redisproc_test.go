package redisproc

import "testing"

func TestClientCommand(t *testing.T) {
	for _, tc := range []struct {
		line, name string
		ok         bool
	}{
		{`+1764441600.123456 [0 127.0.0.1:5555] "EVALSHA" "abc" "1" "k"` + "\r\n", "evalsha", true},
		{`+1764441600.123457 [0 lua] "get" "k"` + "\r\n", "", false},
		{`+1764441600.123458 [0 unix:/tmp/redis.sock] "ping"` + "\r\n", "ping", true},
		{"+OK\r\n", "", false},
	} {
		name, ok := clientCommand(tc.line)
		if name != tc.name || ok != tc.ok {
			t.Errorf("clientCommand(%q) = %q, %v; want %q, %v", tc.line, name, ok, tc.name, tc.ok)
		}
	}
}
