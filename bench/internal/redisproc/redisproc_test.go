package redisproc

import "testing"

func TestClientCall(t *testing.T) {
	for _, tc := range []struct {
		line string
		want Call
		ok   bool
	}{
		{`+1764441600.123456 [0 127.0.0.1:5555] "EVALSHA" "abc" "1" "k"` + "\r\n",
			Call{From: "127.0.0.1:5555", Name: "evalsha", Args: `"abc" "1" "k"`}, true},
		{`+1764441600.123457 [0 lua] "get" "k"` + "\r\n", Call{}, false},
		{`+1764441600.123458 [0 unix:/tmp/redis.sock] "ping"` + "\r\n", Call{From: "unix:/tmp/redis.sock", Name: "ping"}, true},
		{"+OK\r\n", Call{}, false},
	} {
		got, ok := clientCall(tc.line)
		if got != tc.want || ok != tc.ok {
			t.Errorf("clientCall(%q) = %+v, %v; want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}
