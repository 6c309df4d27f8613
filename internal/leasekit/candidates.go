package leasekit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
)

// The candidate registry (docs/PROTOCOL.md, "Candidates"): every replica that campaigns for or
// leads a lease keeps an entry in the string key P:{NAME}:candidates with candidate.lua, every
// CandidatePeriod(LeaseDuration); an entry expires CandidateTTL(LeaseDuration) after its last
// heartbeat (a crashed replica), and is removed when the replica stops (Withdraw). The
// registry is advisory: no trust rule reads it. Resign checks its target against it.

// MaxVersionLen bounds a candidate's version.
const MaxVersionLen = 128

// Candidate is one live entry of the registry.
type Candidate struct {
	Identity string `json:"identity"`
	Instance string `json:"instance"`
	// Version is what the replica says it runs (free text: the app's or the binary's).
	Version string `json:"version,omitempty"`
	// Priority is the replica's priority (higher is preferred; 0 by default).
	Priority int64 `json:"priority"`
	// LastSeen is the server time of its last heartbeat; Expires its entry's end.
	LastSeen time.Time `json:"lastSeen"`
	Expires  time.Time `json:"expires"`
}

// Candidates is the registry as read at Now (the server's time).
type Candidates struct {
	Now  time.Time
	List []Candidate // sorted by identity, then instance
}

// Has reports whether identity has a live entry.
func (c Candidates) Has(identity string) bool {
	return slices.ContainsFunc(c.List, func(x Candidate) bool { return x.Identity == identity })
}

// Identities returns the distinct identities, sorted.
func (c Candidates) Identities() []string {
	ids := []string{}
	for _, x := range c.List {
		if len(ids) == 0 || ids[len(ids)-1] != x.Identity {
			ids = append(ids, x.Identity)
		}
	}
	return ids
}

// forceKey is the context key of WithForce.
type forceKey struct{}

// WithForce marks ctx so that a resign goes ahead whatever the registry says (election's
// ForceResign; POST /resign?force=1).
func WithForce(ctx context.Context) context.Context { return context.WithValue(ctx, forceKey{}, true) }

// Forced reports whether ctx carries WithForce.
func Forced(ctx context.Context) bool { b, _ := ctx.Value(forceKey{}).(bool); return b }

// SetCandidateVersion sets the version that an *election.Elector advertises (the command's
// --candidate-version), before its Run; package election sets it when imported. The version
// must pass ValidateVersion.
var SetCandidateVersion func(elector any, version string)

// CandidatePeriod is the heartbeat period of a replica with lease duration ld: a third of it,
// so that an entry (CandidateTTL = ld) survives two lost heartbeats.
func CandidatePeriod(ld time.Duration) time.Duration {
	return max(ld/3, time.Millisecond).Truncate(time.Millisecond)
}

// CandidateTTL is how long an entry lasts after its last heartbeat: one lease duration, the
// time after which a crashed holder's lease has expired too.
func CandidateTTL(ld time.Duration) time.Duration {
	return max(ld, time.Millisecond).Truncate(time.Millisecond)
}

// ValidateVersion checks a candidate's version: at most MaxVersionLen bytes, no control
// characters (an entry is a line of tab-separated fields).
func ValidateVersion(v string) error {
	if len(v) > MaxVersionLen {
		return fmt.Errorf("is %d bytes long, at most %d are allowed", len(v), MaxVersionLen)
	}
	for _, c := range v {
		if unicode.IsControl(c) {
			return fmt.Errorf("must not contain control characters (found %q)", c)
		}
	}
	return nil
}

// CandidateArgs are the ARGV of candidate.lua for owner ("<instance>:<identity>").
func CandidateArgs(owner string, ttl time.Duration, priority int64, version string, leave bool) []any {
	mode := ""
	if leave {
		mode = "leave"
	}
	return []any{owner, ttl.Milliseconds(), strconv.FormatInt(priority, 10), version, mode}
}

// Advertise runs candidate.lua for this lease's instance and identity: a heartbeat that keeps
// it in the registry for ttl, or with leave its removal. It returns the registry after the
// call (without this replica after a leave).
func (l *Lease) Advertise(ctx context.Context, ttl time.Duration, priority int64, version string, leave bool) (Candidates, error) {
	owner := l.Instance() + ":" + l.Identity()
	reply, err := seam.Candidate(ctx, l.Lease, CandidateArgs(owner, ttl, priority, version, leave)...)
	if err != nil {
		return Candidates{}, fmt.Errorf("advertise candidate of lease %q: %w", l.Name(), err)
	}
	c, err := ParseCandidateReply(reply)
	if err != nil {
		return Candidates{}, fmt.Errorf("advertise candidate of lease %q: %w", l.Name(), err)
	}
	return c, nil
}

// ReadCandidates reads the registry without a script and without TIME, so that the observer
// ACL user may (+get +pttl +multi +exec): GET and PTTL in one transaction; the server's time
// is the key's header "written + key ttl" minus its PTTL. The entries whose expiry is after it
// are live.
func (l *Lease) ReadCandidates(ctx context.Context) (Candidates, error) {
	key := l.Keys().Candidates
	var get *redis.StringCmd
	var pttl *redis.DurationCmd
	_, err := seam.Client(l.Lease).TxPipelined(ctx, func(p redis.Pipeliner) error {
		get = p.Get(ctx, key)
		pttl = p.PTTL(ctx, key)
		return nil
	})
	if errors.Is(err, redis.Nil) {
		return Candidates{Now: time.Now(), List: []Candidate{}}, nil
	}
	if err != nil {
		return Candidates{}, fmt.Errorf("read the candidates of lease %q: %w", l.Name(), err)
	}
	return ParseCandidateKey(get.Val(), pttl.Val().Milliseconds()), nil
}

// ParseCandidateKey decodes the registry key's value as read with a PTTL of pttlMs (negative:
// none; then its write time stands for the server's time).
func ParseCandidateKey(value string, pttlMs int64) Candidates {
	lines := strings.Split(value, "\n")
	h := strings.Split(lines[0], "\t")
	if len(h) != 3 || h[0] != leasewire.Version {
		return Candidates{Now: time.Now(), List: []Candidate{}}
	}
	written, err1 := strconv.ParseInt(h[1], 10, 64)
	keyTTL, err2 := strconv.ParseInt(h[2], 10, 64)
	if err1 != nil || err2 != nil {
		return Candidates{Now: time.Now(), List: []Candidate{}}
	}
	now := written
	if pttlMs >= 0 {
		now = written + keyTTL - pttlMs
	}
	return ParseCandidates(now, lines[1:])
}

// ParseCandidateReply decodes candidate.lua's reply {now, entry, ...}.
func ParseCandidateReply(reply []any) (Candidates, error) {
	if len(reply) == 0 {
		return Candidates{}, fmt.Errorf("unexpected reply %v", reply)
	}
	s, _ := reply[0].(string)
	now, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return Candidates{}, fmt.Errorf("unexpected time %v in the reply", reply[0])
	}
	lines := make([]string, 0, len(reply)-1)
	for _, v := range reply[1:] {
		line, _ := v.(string)
		lines = append(lines, line)
	}
	return ParseCandidates(now, lines), nil
}

// ParseCandidates returns the live entries among lines at server time now (ms); an entry
// that does not parse is skipped (the next heartbeat drops it). An entry is
// "<instance>:<identity>\t<expiry ms>\t<last seen ms>\t<priority>\t<version>".
func ParseCandidates(now int64, lines []string) Candidates {
	c := Candidates{Now: time.UnixMilli(now), List: []Candidate{}}
	for _, line := range lines {
		f := strings.SplitN(line, "\t", 5)
		if len(f) != 5 {
			continue
		}
		instance, identity, ok := strings.Cut(f[0], ":")
		exp, err1 := strconv.ParseInt(f[1], 10, 64)
		seen, err2 := strconv.ParseInt(f[2], 10, 64)
		prio, err3 := strconv.ParseInt(f[3], 10, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil || exp <= now {
			continue
		}
		c.List = append(c.List, Candidate{Identity: identity, Instance: instance, Version: f[4], Priority: prio,
			LastSeen: time.UnixMilli(seen), Expires: time.UnixMilli(exp)})
	}
	slices.SortFunc(c.List, func(a, b Candidate) int {
		if n := strings.Compare(a.Identity, b.Identity); n != 0 {
			return n
		}
		return strings.Compare(a.Instance, b.Instance)
	})
	return c
}

// ErrNotCandidate is wrapped by CheckSuccessor's error when the target of a resign is no live
// candidate; ErrNoSuccessor when no candidate but the holder is live.
var (
	ErrNotCandidate = errors.New("not a live candidate")
	ErrNoSuccessor  = errors.New("no other live candidate")
)

// CheckSuccessor checks a resign of holder's term (to target, "" for anyone) against the
// registry, before anything is written: target must be a live candidate other than holder,
// and without a target some live candidate other than holder must exist. The errors name the
// live candidates, and for a near miss the one meant.
func CheckSuccessor(c Candidates, holder, target string) error {
	var others []string
	for _, id := range c.Identities() {
		if id != holder {
			others = append(others, id)
		}
	}
	live := "none"
	if len(others) > 0 {
		live = strings.Join(others, ", ")
	}
	switch {
	case target != "" && target == holder:
		return nil // the resign script refuses it: the holder is the target
	case target != "" && !c.Has(target):
		hint := ""
		if near := nearest(target, others); near != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", near)
		}
		return fmt.Errorf("%w: %q%s; the live candidates but the holder %q: %s", ErrNotCandidate, target, hint, holder, live)
	case target == "" && len(others) == 0:
		return fmt.Errorf("%w than the holder %q: nobody could take over, and nobody would lead during the hold-off", ErrNoSuccessor, holder)
	}
	return nil
}

// nearest returns the name of names closest to s when it is a near miss (an edit distance of
// at most a third of its length, and at least 1, or 2 for longer names), else "".
func nearest(s string, names []string) string {
	best, bestD := "", -1
	for _, n := range names {
		d := editDistance(s, n)
		if bestD < 0 || d < bestD {
			best, bestD = n, d
		}
	}
	if bestD < 0 || bestD > max(1, min(len([]rune(s))/3, 2)) {
		return ""
	}
	return best
}

func editDistance(a, b string) int {
	x, y := []rune(a), []rune(b)
	prev := make([]int, len(y)+1)
	cur := make([]int, len(y)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(x); i++ {
		cur[0] = i
		for j := 1; j <= len(y); j++ {
			cost := 1
			if x[i-1] == y[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(y)]
}
