package leasewire

import "strings"

// Keys names the Redis keys and the pub/sub channel of one lease, as docs/PROTOCOL.md lays
// them out: PREFIX:{NAME}:lease and so on. All of them carry the hash tag {NAME}, so they
// live in one Redis Cluster slot. KeysFor (and LeaseKey and EventsChannel, for one of them) is
// the only place that builds these names: every other package (the lease, the election, the
// CLI, the adapters) asks it.
type Keys struct {
	// Lease holds the holder's record, with a PX expiry.
	Lease string
	// Token holds the last fencing token handed out.
	Token string
	// Terms counts the terms begun.
	Terms string
	// Events is the pub/sub channel of the acquired, renewed and released announcements.
	Events string
	// Resign holds a request that the current term step down, then the reservation after its
	// release (RequestResign).
	Resign string
	// Members is the membership set of the election.Group called NAME (a Group's name and its
	// leases' names share one namespace under a prefix).
	Members string
	// Done holds the done mark of the lease's job (MarkDone), with a PX expiry.
	Done string
	// Schedule holds the state of the lease's schedule (pkg/schedule): the cursor and the last
	// claimed run.
	Schedule string
	// Runs keeps the schedule's last runs and missed ranges, newest first (pkg/schedule).
	Runs string
	// Candidates is the candidate registry: a string listing the replicas that campaign for or lead
	// the lease, each with its expiry, version and priority (candidate.lua).
	Candidates string

	base string // PREFIX:{NAME}:
}

// KeysFor returns the keys of the lease called name under prefix, which the caller has
// already defaulted (lease.DefaultPrefix for an empty option). It does not validate them:
// lease.New does, with ValidateName.
func KeysFor(prefix, name string) Keys {
	// One allocation for all the names: each is a substring of one buffer (base, then base
	// and each suffix in turn), not eleven strings of their own. An election.Group keeps the
	// keys of every lease it is acquiring or holding; the names are the same either way.
	base := len(prefix) + len(":{") + len(name) + len("}:")
	n := base
	for _, s := range keySuffixes {
		n += base + len(s)
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(prefix)
	b.WriteString(":{")
	b.WriteString(name)
	b.WriteString("}:")
	var names [len(keySuffixes)][2]int
	for i, s := range keySuffixes {
		names[i][0] = b.Len()
		b.WriteString(prefix)
		b.WriteString(":{")
		b.WriteString(name)
		b.WriteString("}:")
		b.WriteString(s)
		names[i][1] = b.Len()
	}
	all := b.String()
	key := func(i int) string { return all[names[i][0]:names[i][1]] }
	return Keys{
		Lease:      key(0),
		Token:      key(1),
		Terms:      key(2),
		Events:     key(3),
		Resign:     key(4),
		Members:    key(5),
		Done:       key(6),
		Schedule:   key(7),
		Runs:       key(8),
		Candidates: key(9),
		base:       all[:base],
	}
}

// LeaseKey returns Keys.Lease of the lease called name under prefix, and EventsChannel its
// Keys.Events, without building the other names: for a caller that needs only that one (the
// renewals and releases of a HeldTerm, the reads of many leases).
func LeaseKey(prefix, name string) string { return prefix + ":{" + name + "}:" + keySuffixes[0] }

// EventsChannel returns Keys.Events of the lease called name under prefix (LeaseKey).
func EventsChannel(prefix, name string) string { return prefix + ":{" + name + "}:" + keySuffixes[3] }

// HeldTerm names a term of a lease that this process holds, as its renewal and its release
// send it without the lease's lease.Lease (about a kilobyte): an election.Group holds tens of
// thousands of terms and keeps only their records. Prefix is the lease's key prefix, already
// defaulted, and Record the term's record as Redis stores it (lease.Record.String).
type HeldTerm struct {
	Prefix, Name, Record string
}

// keySuffixes are the suffixes of Keys's names after PREFIX:{NAME}:, in the order of its fields.
var keySuffixes = [...]string{"lease", "token", "terms", "events", "resign", "members", "done", "schedule", "runs", "candidates"}

// Other returns PREFIX:{NAME}:suffix: a key of the caller's own in the lease's Cluster slot,
// which a script may touch together with the lease (a fence, an adapter's record).
func (k Keys) Other(suffix string) string { return k.base + suffix }

// EventsPattern returns the PSUBSCRIBE pattern that matches the events channel of every lease
// under prefix, and only those: PREFIX:{*}:events, with the glob characters of the prefix
// (* ? [ ] \) escaped by a backslash, as LeaseKeyPattern does for SCAN. Unescaped, the prefix
// "jobs?" would also match the channels of the prefix "jobs1", and a Group would take another
// prefix's events for its own leases'. Redis compares a PSUBSCRIBE pattern with an
// ACL channel rule literally, so the rule to grant is &EventsPattern(prefix) exactly as
// returned; for a prefix without glob characters it is &PREFIX:{*}:events.
func EventsPattern(prefix string) string { return globEscape(prefix) + ":{*}:events" }

// LeaseOfChannel returns NAME when channel is PREFIX:{NAME}:events, the events channel of a
// lease under prefix, and false for any other channel: the reader of an EventsPattern
// subscription drops what is not its own prefix's.
func LeaseOfChannel(prefix, channel string) (string, bool) {
	name, ok := strings.CutPrefix(channel, prefix+":{")
	if !ok {
		return "", false
	}
	name, ok = strings.CutSuffix(name, "}:events")
	if !ok || name == "" || strings.ContainsAny(name, "{}") {
		return "", false
	}
	return name, true
}

// LeaseKeyPattern returns the SCAN MATCH pattern of the lease keys under prefix, with the
// prefix's glob characters escaped.
func LeaseKeyPattern(prefix string) string { return globEscape(prefix) + ":{*}:lease" }

// NameOfLeaseKey returns the lease name of a key that LeaseKeyPattern(prefix) matched.
func NameOfLeaseKey(prefix, key string) string {
	return strings.TrimSuffix(strings.TrimPrefix(key, prefix+":{"), "}:lease")
}

// ACLKeyPattern returns the ACL key pattern that covers every key of every lease under prefix:
// ~PREFIX:*, with the prefix's glob characters escaped (Redis matches ACL key patterns as SCAN
// matches, so "~jobs?:*" would also allow the keys of the prefix "jobs1"). The errors of a
// refused key advise it (luaerr.ExplainTx).
func ACLKeyPattern(prefix string) string { return "~" + globEscape(prefix) + ":*" }

// globEscape quotes the characters SCAN's MATCH treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`*?[]\`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}
