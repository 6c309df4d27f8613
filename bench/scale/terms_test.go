package scale

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// recordSize, and the kinds of records: see bench/cmd/scalereplica.
const (
	recordSize  = 13
	kindStart   = 'S'
	kindEnd     = 'E'
	kindStopped = 'N'
)

// interval is one term of one lease in one replica: from OnStartedLeading entered to the
// term's ctx cancelled (the work stopped), in Unix ns.
type interval struct {
	lease      uint32
	replica    int
	start, end int64
	open       bool // no end was recorded: it ends when the process was reaped
}

// readTerms reads a replica's term records. Terms left open (the replica was killed) end at
// exitAt, when the process was reaped: none of its work can run after that.
func readTerms(path string, replica int, exitAt time.Time) ([]interval, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read terms of replica %d: %w", replica, err)
	}
	b = b[:len(b)/recordSize*recordSize] // a write cut short by SIGKILL
	open := map[uint32]int64{}
	var out []interval
	for off := 0; off < len(b); off += recordSize {
		kind := b[off]
		idx := binary.LittleEndian.Uint32(b[off+1:])
		ns := int64(binary.LittleEndian.Uint64(b[off+5:]))
		switch kind {
		case kindStart:
			if _, dup := open[idx]; dup {
				return nil, fmt.Errorf("replica %d: lease %d started twice without an end", replica, idx)
			}
			open[idx] = ns
		case kindEnd:
			start, ok := open[idx]
			if !ok {
				return nil, fmt.Errorf("replica %d: lease %d ended without a start", replica, idx)
			}
			delete(open, idx)
			out = append(out, interval{lease: idx, replica: replica, start: start, end: ns})
		case kindStopped:
		default:
			return nil, fmt.Errorf("replica %d: record at byte %d has kind %q", replica, off, kind)
		}
	}
	for idx, start := range open {
		out = append(out, interval{lease: idx, replica: replica, start: start, end: exitAt.UnixNano(), open: true})
	}
	return out, nil
}

// overlaps are the double holds found: terms of one lease in two processes whose intervals
// overlap by more than zero.
type overlaps struct {
	count int
	worst time.Duration
	first string // the worst case, described
}

// findOverlaps sorts all terms by lease and start and compares each with the latest-ending
// earlier term of the same lease (a term overlaps some earlier one iff it overlaps that one).
func findOverlaps(all []interval) overlaps {
	slices.SortFunc(all, func(a, b interval) int {
		if a.lease != b.lease {
			return int(int64(a.lease) - int64(b.lease))
		}
		return int(min(max(a.start-b.start, -1), 1))
	})
	var o overlaps
	var prev interval
	for i, x := range all {
		if i == 0 || x.lease != prev.lease {
			prev = x
			continue
		}
		if x.start < prev.end && x.replica != prev.replica {
			d := time.Duration(min(prev.end, x.end) - x.start)
			o.count++
			if d > o.worst {
				o.worst = d
				o.first = fmt.Sprintf("lease tenant-%07d: replica %d [%d, %d%s] and replica %d [%d, %d%s] overlap by %v",
					x.lease, prev.replica, prev.start, prev.end, openMark(prev), x.replica, x.start, x.end, openMark(x), d)
			}
		}
		if x.end > prev.end {
			prev = x
		}
	}
	return o
}

func openMark(x interval) string {
	if x.open {
		return " (open: killed)"
	}
	return ""
}

// reheld returns, for the terms of the killed replica still open at the kill, how long after
// the kill each lease's next term (by another replica) started: the median and the longest,
// and how many were never held again.
func reheld(all []interval, victim int, killed int64) (median, longest time.Duration, never, share int) {
	lost := map[uint32]int64{} // lease -> first start by another replica after the kill (0: none)
	for _, x := range all {
		if x.replica == victim && x.open {
			lost[x.lease] = 0
		}
	}
	for _, x := range all {
		if x.replica == victim || x.start < killed {
			continue
		}
		if first, ok := lost[x.lease]; ok && (first == 0 || x.start < first) {
			lost[x.lease] = x.start
		}
	}
	var ds []time.Duration
	for _, first := range lost {
		if first == 0 {
			never++
			continue
		}
		ds = append(ds, time.Duration(first-killed))
	}
	slices.Sort(ds)
	if len(ds) > 0 {
		median, longest = ds[len(ds)/2], ds[len(ds)-1]
	}
	return median, longest, never, len(lost)
}

// TestOverlapChecker: the double-hold check finds an overlap of two replicas' terms of one
// lease (also against an earlier, longer term than the one just before it), and none between
// one replica's own terms, other leases' terms, or terms that only touch.
func TestOverlapChecker(t *testing.T) {
	all := []interval{
		{lease: 1, replica: 0, start: 0, end: 100},
		{lease: 1, replica: 1, start: 100, end: 200}, // touches: no overlap
		{lease: 2, replica: 0, start: 0, end: 1000},
		{lease: 2, replica: 0, start: 10, end: 20}, // its own replica
		{lease: 2, replica: 1, start: 500, end: 600, open: true},
		{lease: 3, replica: 1, start: 0, end: 50},
	}
	o := findOverlaps(all)
	if o.count != 1 || o.worst != 100*time.Nanosecond || !strings.Contains(o.first, "tenant-0000002") {
		t.Fatalf("findOverlaps = %+v, want one overlap of lease 2 by 100ns", o)
	}
	if o := findOverlaps(all[:2]); o.count != 0 {
		t.Fatalf("terms that only touch: %+v, want none", o)
	}
}
