// Package outbuf is a goroutine-safe output buffer for tests that run several processes or
// replicas writing to one place while the test reads it.
package outbuf

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// Buffer collects writes from many goroutines.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// WaitFor fails t unless s is written within 20 seconds.
func (b *Buffer) WaitFor(t testing.TB, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(b.String(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within 20s:\n%s", s, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
