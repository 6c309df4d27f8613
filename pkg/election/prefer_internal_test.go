package election

import (
	"testing"

	"github.com/elector/elector/internal/leasekit"
)

// TestBestOf: the other candidate of the highest priority among those allowed, the registry's
// order breaking ties.
func TestBestOf(t *testing.T) {
	list := []leasekit.Candidate{
		{Identity: "a", Instance: "1", Priority: -3},
		{Identity: "b", Instance: "2", Priority: 7},
		{Identity: "c", Instance: "3", Priority: 7},
		{Identity: "me", Instance: "4", Priority: 9},
		{Identity: "z", Instance: "5", Priority: 0},
	}
	all := func(leasekit.Candidate) bool { return true }
	if b, ok := bestOf(list, "me", all); !ok || b.Identity != "b" {
		t.Errorf("bestOf = %v %v, want b", b, ok)
	}
	if b, ok := bestOf(list, "me", func(c leasekit.Candidate) bool { return c.Identity != "b" }); !ok || b.Identity != "c" {
		t.Errorf("bestOf(not b) = %v %v, want c", b, ok)
	}
	if b, ok := bestOf(list[:1], "me", all); !ok || b.Identity != "a" {
		t.Errorf("bestOf(a alone) = %v %v, want a", b, ok)
	}
	if _, ok := bestOf(list[3:4], "me", all); ok {
		t.Error("bestOf found a candidate other than me in a registry of me alone")
	}
}
