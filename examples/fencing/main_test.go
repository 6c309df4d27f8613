package main

import (
	"context"
	"strings"
	"testing"

	"github.com/elector/elector/internal/testing/redistest"
)

func TestFencingExample(t *testing.T) {
	srv := redistest.Start(t)
	var out strings.Builder
	if err := run(context.Background(), []string{"--redis-addr", srv.Addr(), "--lease", "100ms"}, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"refused: fencing token", "steps down", `the store holds "written by pod-b"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
