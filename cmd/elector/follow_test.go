package main

import (
	"testing"

	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// TestChangeStatusNamesTheTerm: a watch's line for a term that ended (released, expired)
// names the term's holder, instance and token, as the line that announced it did.
func TestChangeStatusNamesTheTerm(t *testing.T) {
	rec := lease.Record{Identity: "a", Instance: "i-1", Token: 7}
	for _, kind := range []string{"acquired", "released", "expired"} {
		st := changeStatus("job", "elector:{job}:lease", election.Change{Kind: kind, Record: rec})
		if st.Holder != "a" || st.Instance != "i-1" || st.Token != 7 {
			t.Errorf("%s: holder %q instance %q token %d; want a, i-1, 7", kind, st.Holder, st.Instance, st.Token)
		}
	}
}
