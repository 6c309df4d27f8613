package election

import (
	"fmt"
	"slices"
	"testing"
)

// simMutants are the Elector bugs of issue 24's list that the simulator must catch; the Group's
// (1, 2, 3) need a Group driver; 7 and 9 need directed workloads (random seeds did not
// reach them in 5 × 400 seeds), and so does 10 (a failed attempt forgets the known expiry,
// a polling follower that subscribes again keeps its poll): TestSimScenarioMutants. Random
// seeds label every overlap after data loss as the documented exception, which 10 needs.
var simMutants = []simMutant{
	{4, "a late acquire reply starts a term"},
	{5, "a term won while Run was cancelled is left held"},
	{6, "an acquire resumes a record whose release failed"},
	{8, "the renew deadline counts from the reply, not the send time"},
}

// simMutant is one mutation switch and what it re-introduces.
type simMutant struct {
	n    int
	name string
}

// TestSimMutants switches each mutant on (go test -tags elector_mutants) and runs seeds from
// several starting points until one fails: the simulator must catch every mutant; the
// starts it caught it from and the median number of seeds it took are the figures of
// docs/MODEL.md.
func TestSimMutants(t *testing.T) {
	huntMutants(t, "mutant", simMutants, 600, func(seed uint64) []string { return runSeed(t, seed, 0).violations })
}

// huntMutants switches each of mutants on in turn and runs seeds (by run, which returns a
// seed's violations) from five starting points, up to SIM_MUTANT_SEEDS (default limit) from
// each, until one fails; a mutant no start caught fails t. SIM_MUTANT=n hunts mutant n only.
func huntMutants(t *testing.T, kind string, mutants []simMutant, limit uint64, run func(seed uint64) []string) {
	if !setMutant(0) {
		t.Skip("build with -tags elector_mutants to run the mutants")
	}
	defer setMutant(0)
	starts := []uint64{1, 1001, 2001, 3001, 4001}
	limit = simEnv("SIM_MUTANT_SEEDS", limit)
	only := simEnv("SIM_MUTANT", 0) // one mutant only
	for _, m := range mutants {
		if only != 0 && uint64(m.n) != only {
			continue
		}
		setMutant(m.n)
		var found []int
		var first string
		for _, start := range starts {
			for i := uint64(0); i < limit; i++ {
				if v := run(start + i); len(v) > 0 {
					found = append(found, int(i)+1)
					if first == "" {
						first = fmt.Sprintf("seed %d: %s", start+i, v[0])
					}
					break
				}
			}
		}
		if len(found) == 0 {
			t.Errorf("%s %d (%s): not caught within %d seeds from any of %v", kind, m.n, m.name, limit, starts)
			continue
		}
		slices.Sort(found)
		t.Logf("%s %d (%s): caught from %d/%d starts, seeds to detection %v, median %d; %s",
			kind, m.n, m.name, len(found), len(starts), found, found[len(found)/2], first)
	}
}
