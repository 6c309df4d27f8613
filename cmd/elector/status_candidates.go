package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/elector/elector/internal/leasekit"
)

// candidateStatus is one live candidate of the lease as elector status shows it: a replica
// whose elector (run, sidecar, or the library's Elector) campaigns for or leads the lease and
// advertises itself in the candidate registry (docs/PROTOCOL.md, "Candidates").
type candidateStatus struct {
	Identity string `json:"identity"`
	Instance string `json:"instance"`
	Version  string `json:"version"`
	Priority int64  `json:"priority"`
	// LastSeen is the time of its last heartbeat, by Redis's clock; LastSeenMs how long before
	// the read that was.
	LastSeen   time.Time `json:"lastSeen"`
	LastSeenMs int64     `json:"lastSeenMs"`
	// Leader is set on the candidate whose instance holds the lease.
	Leader bool `json:"leader"`
}

// readCandidates reads the live candidates of lease l, marking the one of holder's instance,
// with what the observer's Redis user may (GET and PTTL in a transaction).
func readCandidates(ctx context.Context, co *commonOptions, l *leasekit.Lease, holder, instance string) ([]candidateStatus, error) {
	c, err := l.ReadCandidates(ctx)
	if err != nil {
		return nil, readError(fmt.Sprintf("cannot read the candidates of lease %q", co.lease.name), co, err)
	}
	return candidateRows(c, holder, instance), nil
}

// candidateRows turns the registry as read into status rows, sorted by identity.
func candidateRows(c leasekit.Candidates, holder, instance string) []candidateStatus {
	var out []candidateStatus
	for _, x := range c.List {
		out = append(out, candidateStatus{Identity: x.Identity, Instance: x.Instance, Version: x.Version, Priority: x.Priority,
			LastSeen: x.LastSeen, LastSeenMs: max(c.Now.Sub(x.LastSeen).Milliseconds(), 0),
			Leader: holder != "" && x.Identity == holder && x.Instance == instance})
	}
	return out
}

// printCandidates writes the text form's candidates section: a count, then one line per
// candidate, e.g.
//
//	candidates:  2
//	  pod-a      version v1.4.2, priority 0, seen 1.2s ago, instance 3f2a9c1d (leader)
//	  pod-b      version v1.4.2, priority 0, seen 300ms ago, instance 7be01f44
func printCandidates(w io.Writer, list []candidateStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "candidates:\t%d\n", len(list))
	for _, c := range list {
		version, leader := c.Version, ""
		if version == "" {
			version = "-"
		}
		if c.Leader {
			leader = " (leader)"
		}
		fmt.Fprintf(tw, "  %s\tversion %s, priority %d, seen %v ago, instance %s%s\n",
			c.Identity, version, c.Priority, time.Duration(c.LastSeenMs)*time.Millisecond, c.Instance, leader)
	}
	return tw.Flush()
}
