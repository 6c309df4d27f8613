package main

import (
	"math"
	"strings"
	"testing"
)

// TestVersionPriority: --prefer newest and oldest order versions as semantic versions do, and a
// version that does not parse ranks below every other.
func TestVersionPriority(t *testing.T) {
	for _, tc := range []struct {
		p, a, b string
		higher  bool // a's priority is higher than b's
	}{
		{preferNewest, "v1.10.0", "v1.9.9", true},
		{preferNewest, "v1.9.9", "v1.10.0", false},
		{preferNewest, "elector v1.2.3", "v1.2.2", true},
		{preferNewest, "1.2", "1.2.0", false},
		{preferNewest, "1.2.0", "1.2", false},
		{preferNewest, "v1.2.0", "v1.2.0-rc.1", true},
		{preferNewest, "v1.2.0-rc.1", "v1.1.9", true},
		{preferNewest, "v1.2.0-rc.2", "v1.2.0-rc.10", false}, // prereleases of one release tie
		{preferNewest, "v1.2.0+build5", "v1.2.0", false},
		{preferNewest, "v2", "v1.999.999", true},
		{preferNewest, "v1.2.3.4", "v1.2.3", false}, // a fourth number is ignored
		{preferNewest, "2026.12.6", "2026.11.30", true},
		{preferNewest, "v1.0", "1.0 (build 7)", true}, // "7)" does not parse
		{preferNewest, "v0.0.0-alpha", "garbage", true},
		{preferNewest, "v1.x", "v0.1", false},
		{preferNewest, "v1.2-", "v0.1", false},
		{preferNewest, strings.Repeat("9", 30), "v0.1", false}, // overflows: does not parse
		{preferOldest, "v1.9.9", "v1.10.0", true},
		{preferOldest, "v1.10.0", "v1.9.9", false},
		{preferOldest, "v1.2.0-rc.1", "v1.2.0", true},
		{preferOldest, "garbage", "v9", false},
		{preferOldest, "v9", "garbage", true},
	} {
		pa, pb := versionPriority(tc.p, tc.a), versionPriority(tc.p, tc.b)
		if got := pa > pb; got != tc.higher {
			t.Errorf("--prefer %s: priority of %q (%d) > priority of %q (%d) is %v, want %v", tc.p, tc.a, pa, tc.b, pb, got, tc.higher)
		}
	}
	if got := versionPriority(preferNewest, "garbage"); got != math.MinInt64 {
		t.Errorf("a version that does not parse has priority %d, want the lowest", got)
	}
	// The largest numbers saturate without overflowing into the sign.
	if got := versionPriority(preferNewest, "v99999999.99999999.99999999"); got <= versionPriority(preferNewest, "v1048574.0.0") {
		t.Errorf("saturated version has priority %d", got)
	}
}
