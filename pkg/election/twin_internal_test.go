package election

import (
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"

	"github.com/elector/elector/internal/lease"
)

// A dead record of this identity, found again just after the expiry first seen (Redis
// counts TTLs in whole milliseconds: the follower can come back a fraction of one early), is
// no twin; one found after that expiry with a later one was renewed: a twin. (CI once warned
// about the dead one.)
func TestTwinWatchRenewedOnly(t *testing.T) {
	var out strings.Builder
	logger := funcr.New(func(prefix, args string) { out.WriteString(args + "\n") }, funcr.Options{})
	rec := lease.Record{Identity: "host-1", Instance: "deadbeef", Token: 5}
	t0 := time.Unix(1000, 0)

	var w twinWatch
	w.saw(logger, "host-1", "mine", rec, 800*time.Millisecond, false, t0)
	w.saw(logger, "host-1", "mine", rec, time.Millisecond, false, t0.Add(800*time.Millisecond+500*time.Microsecond))
	if out.Len() != 0 {
		t.Fatalf("warned about a record that ran out unrenewed: %s", out.String())
	}
	w.saw(logger, "host-1", "mine", rec, 700*time.Millisecond, false, t0.Add(900*time.Millisecond))
	if !strings.Contains(out.String(), "another process campaigns under this replica's identity") {
		t.Fatalf("no warning about a record renewed past its first expiry: %q", out.String())
	}
}
