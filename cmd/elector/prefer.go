package main

import (
	"math"
	"strconv"
	"strings"

	"github.com/elector/elector/cmd/elector/internal/version"
	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/pkg/election"
)

// candidacy is what a replica advertises in the candidate registry (--candidate-version,
// --candidate-priority) and how its priority is set (--prefer).
type candidacy struct {
	version  string
	priority int64
	prefer   string // "", preferNewest or preferOldest: the priority is versionPriority's
}

// The --prefer policies.
const (
	preferNewest = "newest"
	preferOldest = "oldest"
)

// apply sets what e advertises: the version (elector's own unless --candidate-version is set);
// the priority is Config.Priority, set from c.priority.
func (c candidacy) apply(e *election.Elector) {
	v := c.version
	if v == "" {
		v = "elector " + version.Get().Version
	}
	leasekit.SetCandidateVersion(e, v)
}

// Version ranks: the first three numbers of a semantic version, each saturated at versionCap,
// then 1 for a release and 0 for a prerelease (which comes before its release), in an int64.
const (
	versionBits = 20
	versionCap  = 1<<versionBits - 1
)

// versionPriority is the priority --prefer policy gives a replica of version v: increasing
// with the version for newest, decreasing for oldest, and the lowest of all for a version that
// does not parse, which never wins. Versions compare as semantic versions by the last word of
// v: an optional "v", up to three dot-separated numbers (missing ones are 0; more are
// ignored), an optional -prerelease (all prereleases of one release tie), an ignored +build;
// "app v1.4.2" is 1.4.2.
func versionPriority(policy, v string) int64 {
	r, ok := versionRank(v)
	switch {
	case !ok:
		return math.MinInt64
	case policy == preferOldest:
		return -r
	}
	return r
}

// versionRank is v's rank (see versionPriority); ok is false when v does not parse.
func versionRank(v string) (rank int64, ok bool) {
	f := strings.Fields(v)
	if len(f) == 0 {
		return 0, false
	}
	s := strings.TrimPrefix(strings.TrimPrefix(f[len(f)-1], "v"), "V")
	s, _, _ = strings.Cut(s, "+")
	core, pre, hasPre := strings.Cut(s, "-")
	if hasPre && pre == "" {
		return 0, false
	}
	nums := strings.Split(core, ".")
	for i := 0; i < 3; i++ {
		var n uint64
		if i < len(nums) {
			var err error
			if n, err = strconv.ParseUint(nums[i], 10, 64); err != nil || nums[i][0] == '+' {
				return 0, false
			}
		}
		rank = rank<<versionBits | int64(min(n, versionCap))
	}
	for _, x := range nums[min(3, len(nums)):] {
		if _, err := strconv.ParseUint(x, 10, 64); err != nil {
			return 0, false
		}
	}
	rank <<= 1
	if !hasPre {
		rank |= 1
	}
	return rank, true
}
