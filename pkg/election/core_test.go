package election

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/lease"
)

// verdictNames are the words docs/DESIGN.md's table of acquire replies uses for the verdicts.
var verdictNames = map[verdict]string{
	verdictFailed: "failed", verdictUntrusted: "untrusted", verdictDecline: "decline",
	verdictStart: "start", verdictReserved: "reserved", verdictHeld: "held",
}

// coreCase is one row of docs/DESIGN.md's table of acquire replies, with a core in the state
// the row needs and the reply.
type coreCase struct {
	row       string // the table's first cell, up to its first " ("
	prepare   func(c *leaseCore)
	reply     acquireReply
	giveUp    bool
	listening bool
	verdict   verdict
	wait      time.Duration
}

// coreCases covers every verdict of leaseCore.reply. The core has heard of a holder whose term
// expires at now + 200ms (token 10) unless prepare says otherwise; the backoff is 50ms.
func coreCases(now time.Time) []coreCase {
	mine := lease.Record{Token: 20, Instance: "me", Identity: "a"}
	return []coreCase{
		{row: "error", reply: acquireReply{sent: now, err: errors.New("i/o timeout")}, verdict: verdictFailed, wait: 200 * time.Millisecond},
		{row: "won, a record termGuard does not trust", prepare: func(c *leaseCore) { c.guard.floor = 20; c.guard.retire(20) },
			reply: acquireReply{sent: now, won: true, rec: mine, ttl: time.Second}, verdict: verdictUntrusted, wait: time.Second + timing.DriftMargin(time.Second)},
		{row: "won, the caller gave up", reply: acquireReply{sent: now, won: true, rec: mine, ttl: time.Second}, giveUp: true, verdict: verdictDecline},
		{row: "won, at or after send time + RenewDeadline", reply: acquireReply{sent: now.Add(-coreTiming.renewDeadline), won: true, rec: mine, ttl: time.Second},
			verdict: verdictDecline, wait: 200 * time.Millisecond},
		{row: "won", reply: acquireReply{sent: now, won: true, rec: mine, ttl: time.Second}, verdict: verdictStart},
		{row: "free, reserved for a successor after a resignation", reply: acquireReply{sent: now,
			reservation: &leasekit.Reservation{Resigned: lease.Record{Token: 10}, TTL: 400 * time.Millisecond}}, listening: true, verdict: verdictReserved, wait: 400 * time.Millisecond},
		{row: "held by another", reply: acquireReply{sent: now, rec: lease.Record{Token: 11, Instance: "b"}, ttl: 5 * time.Second},
			listening: true, verdict: verdictHeld, wait: coreTiming.leaseDuration},
	}
}

var coreTiming = leaseTiming{leaseDuration: time.Second, renewDeadline: 700 * time.Millisecond, retryPeriod: 100 * time.Millisecond}

// TestCoreReply checks each verdict of leaseCore.reply, its wait and what it does to the
// known expiry.
func TestCoreReply(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range coreCases(now) {
		t.Run(tc.row, func(t *testing.T) {
			c := &leaseCore{}
			c.known.heard(10, now, 200*time.Millisecond, coreTiming.leaseDuration)
			if tc.prepare != nil {
				tc.prepare(c)
			}
			d := c.reply(coreTiming, now, tc.reply, tc.giveUp, func() time.Duration { return 50 * time.Millisecond }, tc.listening)
			if d.verdict != tc.verdict || d.wait != tc.wait {
				t.Fatalf("reply = %s, wait %v; want %s, wait %v", verdictNames[d.verdict], d.wait, verdictNames[tc.verdict], tc.wait)
			}
			_, knows := c.known.until(now)
			switch tc.verdict {
			case verdictStart, verdictReserved:
				if knows {
					t.Errorf("after %s the core still knows an expiry", verdictNames[d.verdict])
				}
			case verdictHeld:
				if left, _ := c.known.until(now); left != coreTiming.leaseDuration {
					t.Errorf("after held (TTL 5s) the known expiry is %v away, want the LeaseDuration cap %v", left, coreTiming.leaseDuration)
				}
			}
		})
	}
}

// TestCoreReplyNotListening: a follower that does not hear releases polls at most every
// RetryPeriod, and says so (poll), so that it re-arms to the known expiry when it listens again.
// TestCoreReplyTokenBelowSeen: a held record whose token is below one a reply showed before is
// still followed (Redis may have lost writes), and the decision says so for the log.
func TestCoreReplyTokenBelowSeen(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &leaseCore{}
	if d := c.reply(coreTiming, now, acquireReply{sent: now, rec: lease.Record{Token: 30}, ttl: time.Second}, false, nil, true); d.verdict != verdictHeld || d.below != 0 {
		t.Fatalf("first held reply: %+v", d)
	}
	d := c.reply(coreTiming, now, acquireReply{sent: now, rec: lease.Record{Token: 12}, ttl: time.Second}, false, nil, true)
	if d.verdict != verdictHeld || d.below != 30 {
		t.Fatalf("held below the floor: verdict %v below %d, want held below 30", d.verdict, d.below)
	}
	if d := c.reply(coreTiming, now, acquireReply{sent: now, rec: lease.Record{Token: 31}, ttl: time.Second}, false, nil, true); d.below != 0 {
		t.Fatalf("a newer token is not below: %+v", d)
	}
}

func TestCoreReplyNotListening(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &leaseCore{}
	d := c.reply(coreTiming, now, acquireReply{sent: now, rec: lease.Record{Token: 3}, ttl: 800 * time.Millisecond}, false, nil, false)
	if d.verdict != verdictHeld || d.wait != coreTiming.retryPeriod || !d.poll {
		t.Fatalf("reply = %+v; want held, a poll after RetryPeriod", d)
	}
	if left, _ := c.known.until(now); left != 800*time.Millisecond {
		t.Errorf("known expiry %v away, want the TTL 800ms", left)
	}
}

// TestCoreEvent: news is ordered by token; a release of the current term wakes and forgets
// the known expiry; an acquired or renewed event re-arms to its TTL, capped at LeaseDuration.
func TestCoreEvent(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &leaseCore{}
	ev := func(k leasekit.EventKind, token int64, ttl time.Duration) leasekit.Event {
		return leasekit.Event{Kind: k, Record: lease.Record{Token: token}, TTL: ttl}
	}
	for _, step := range []struct {
		ev                  leasekit.Event
		current, wake       bool
		rearm, knownExpires time.Duration // knownExpires 0: none known
	}{
		{ev(leasekit.Acquired, 10, 5*time.Second), true, false, coreTiming.leaseDuration, coreTiming.leaseDuration},
		{ev(leasekit.Renewed, 9, time.Millisecond), false, false, -1, coreTiming.leaseDuration}, // older term: stale
		{ev(leasekit.Released, 9, 0), false, false, -1, coreTiming.leaseDuration},
		{ev(leasekit.Released, 10, 0), true, true, -1, 0},
		{ev(leasekit.Renewed, 10, time.Millisecond), false, false, -1, 0}, // renewal of a released term: stale
		{ev(leasekit.ResignRequested, 11, 0), false, false, -1, 0},
		{ev(leasekit.Acquired, 11, 300*time.Millisecond), true, false, 300 * time.Millisecond, 300 * time.Millisecond},
	} {
		current, wake, rearm := c.event(coreTiming, now, step.ev)
		left, knows := c.known.until(now)
		if !knows {
			left = 0
		}
		if current != step.current || wake != step.wake || rearm != step.rearm || left != step.knownExpires {
			t.Errorf("event %v %d = current %v, wake %v, rearm %v, known in %v; want %v, %v, %v, %v",
				step.ev.Kind, step.ev.Record.Token, current, wake, rearm, left, step.current, step.wake, step.rearm, step.knownExpires)
		}
	}
}

// TestCoreTableMatchesDesign checks that docs/DESIGN.md's table of acquire replies has one row
// per case of coreCases, in the core's order, with the verdict the core gives.
func TestCoreTableMatchesDesign(t *testing.T) {
	rows := designTable(t, "| acquire reply | verdict | next attempt |")[1:]
	cases := coreCases(time.Unix(1000, 0))
	if len(rows) != len(cases) {
		t.Fatalf("the table has %d rows, the core %d cases", len(rows), len(cases))
	}
	for i, tc := range cases {
		row, _, _ := strings.Cut(rows[i][0], " (")
		if row != tc.row {
			t.Errorf("row %d is %q, the core's case %d is %q", i+1, row, i+1, tc.row)
		}
		if word, _, _ := strings.Cut(rows[i][1], ":"); word != verdictNames[tc.verdict] {
			t.Errorf("row %q says %q, the core's verdict is %q", tc.row, word, verdictNames[tc.verdict])
		}
	}
}

// designTable returns the cells of the table of docs/DESIGN.md whose first line is header:
// the header's cells, then each row's (the separator line skipped).
func designTable(t *testing.T, header string) [][]string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/DESIGN.md")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(doc), header)
	if start < 0 {
		t.Fatalf("docs/DESIGN.md has no table starting %q", header)
	}
	var rows [][]string
	for i, l := range strings.Split(string(doc)[start:], "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "|") {
			break
		}
		if i == 1 {
			continue // |---|---|
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(l), "|"), "|")
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		rows = append(rows, cells)
	}
	return rows
}
