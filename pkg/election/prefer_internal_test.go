package election

import (
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasekit"
)

// TestBetter: the order of each preference, with ties broken by priority and unparsable
// versions never winning.
func TestBetter(t *testing.T) {
	for _, tc := range []struct {
		p      Preference
		va     string
		pa     int64
		vb     string
		pb     int64
		better bool
	}{
		{PreferNone, "v2", 9, "v1", 0, false},
		{PreferPriority, "", 1, "", 0, true},
		{PreferPriority, "", 0, "", 0, false},
		{PreferPriority, "v9", -1, "v1", 0, false},
		{PreferNewest, "v1.10.0", 0, "v1.9.9", 0, true},
		{PreferNewest, "elector v1.2.3", 0, "v1.2.2", 5, true},
		{PreferNewest, "1.2", 0, "1.2.0", 0, false},
		{PreferNewest, "1.2", 1, "1.2.0", 0, true},
		{PreferNewest, "v1.2.0", 0, "v1.2.0-rc.1", 0, true},
		{PreferNewest, "v1.2.0-rc.2", 0, "v1.2.0-rc.10", 0, false},
		{PreferNewest, "v1.2.0-rc.10", 0, "v1.2.0-rc.2", 0, true},
		{PreferNewest, "v1.2.0+build5", 0, "v1.2.0", 0, false},
		{PreferNewest, "1.0 (build 7)", 0, "v0.1", 0, false},
		{PreferNewest, "v0.1", 0, "1.0 (build 7)", 0, true},
		{PreferNewest, "", 9, "", 0, false},
		{PreferNewest, "v1.x", 0, "v1.0", 0, false},
		{PreferNewest, "v1.2-", 0, "v1.0", 0, false},
		{PreferNewest, strings.Repeat("9", 30), 0, "v1", 0, false}, // overflows: unparsable
		{PreferOldest, "v1.9.9", 0, "v1.10.0", 0, true},
		{PreferOldest, "v1.10.0", 0, "v1.9.9", 0, false},
		{PreferOldest, "v1.0.0", 3, "v1.0.0", 2, true},
		{PreferOldest, "garbage", 0, "v9", 0, false},
	} {
		if got := better(tc.p, tc.va, tc.pa, tc.vb, tc.pb); got != tc.better {
			t.Errorf("better(%q, %q/%d, %q/%d) = %v, want %v", tc.p, tc.va, tc.pa, tc.vb, tc.pb, got, tc.better)
		}
	}
}

// TestBestOf: the best other candidate among those allowed, the registry's order breaking ties.
func TestBestOf(t *testing.T) {
	list := []leasekit.Candidate{
		{Identity: "a", Instance: "1", Version: "v1.0.0"},
		{Identity: "b", Instance: "2", Version: "v2.0.0"},
		{Identity: "c", Instance: "3", Version: "v2.0.0"},
		{Identity: "me", Instance: "4", Version: "v9.0.0"},
		{Identity: "z", Instance: "5", Version: "v99-lie-that-does-not-parse x"},
	}
	all := func(leasekit.Candidate) bool { return true }
	if b, ok := bestOf(PreferNewest, list, "me", all); !ok || b.Identity != "b" {
		t.Errorf("bestOf(newest) = %v %v, want b", b, ok)
	}
	if b, ok := bestOf(PreferOldest, list, "me", all); !ok || b.Identity != "a" {
		t.Errorf("bestOf(oldest) = %v %v, want a", b, ok)
	}
	if b, ok := bestOf(PreferNewest, list, "me", func(c leasekit.Candidate) bool { return c.Identity != "b" }); !ok || b.Identity != "c" {
		t.Errorf("bestOf(newest, not b) = %v %v, want c", b, ok)
	}
	if _, ok := bestOf(PreferNewest, list[3:4], "me", all); ok {
		t.Error("bestOf found a candidate other than me in a registry of me alone")
	}
}

// TestCandidacyValidate: the defaults, and errors that name the field.
func TestCandidacyValidate(t *testing.T) {
	c := Candidacy{Prefer: PreferNewest}
	if err := c.validate(time.Second); err != nil || c.Settle != 2*time.Second || c.MinHold != 2*time.Second {
		t.Fatalf("validate = %v, %+v; want the defaults 2s, 2s", err, c)
	}
	for _, tc := range []struct {
		c    Candidacy
		want string
	}{
		{Candidacy{Prefer: "best"}, `Config.Candidacy.Prefer "best" must be`},
		{Candidacy{Version: "a\nb"}, "Config.Candidacy.Version must not contain control characters"},
		{Candidacy{Version: strings.Repeat("v", 129)}, "Config.Candidacy.Version is 129 bytes long"},
		{Candidacy{Settle: -time.Second}, "Config.Candidacy.Settle (-1s) must not be negative"},
		{Candidacy{MinHold: -time.Second}, "Config.Candidacy.MinHold (-1s) must not be negative"},
	} {
		err := tc.c.validate(time.Second)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("validate(%+v) = %v, want %q", tc.c, err, tc.want)
		}
	}
}
