package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/redistest"
)

// scheduleJob is the CMD of TestRunScheduleThreeReplicas: under an exclusive flock (a second
// run at once cannot take it and logs "overlap"), it logs its start (slot, attempt, token,
// ns), runs 700ms and logs its end.
const scheduleJob = `S=$(date +%s%N)
flock -n -E 99 "$LOCK_FILE" sh -c 'echo "start $ELECTOR_SLOT $ELECTOR_ATTEMPT $ELECTOR_FENCING_TOKEN $0" >> "$LOG_FILE"; sleep 0.7; echo "end $ELECTOR_SLOT $ELECTOR_ATTEMPT $ELECTOR_FENCING_TOKEN $(date +%s%N)" >> "$LOG_FILE"' "$S"
[ $? = 99 ] && echo "overlap $ELECTOR_SLOT $ELECTOR_ATTEMPT $ELECTOR_FENCING_TOKEN $S" >> "$LOG_FILE"
exit 0`

// TestRunScheduleThreeReplicas runs `elector run --schedule '@every 2s'` on three replicas,
// kills the leader with SIGKILL several times and stops others with SIGTERM (graceful
// handovers), and checks in the CMD's own log and in Redis's history: no two runs at once, no
// run before its slot, every slot from the first to the last done, recorded missed, or with its
// last attempt recorded lost or failed.
// It reports the counts and the delay from slot to CMD's start beside /bin/true's exec floor.
func TestRunScheduleThreeReplicas(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	dir := t.TempDir()
	logFile, lockFile := filepath.Join(dir, "job.log"), filepath.Join(dir, "job.lock")
	const name = "sched"
	env := []string{"LOG_FILE=" + logFile, "LOCK_FILE=" + lockFile}
	replicas := map[string]*proc{}
	start := func(id string) {
		args := append([]string{"run"}, leaseArgs(srv.Addr(), name, id)...)
		args = append(args, "--schedule", "@every 2s", "--schedule-history", "1000", "--", "sh", "-c", scheduleJob)
		replicas[id] = startElector(t, id, env, args...)
	}
	for _, id := range []string{"r0", "r1", "r2"} {
		start(id)
	}
	holder := func() string { return holderOf(leaseValue(t, client, name)) }
	waitFor(t, 10*time.Second, "a leader", func() bool { return holder() != "" })
	began := time.Now()
	kills, terms := 0, 0
	for round := 0; round < 8; round++ {
		// Land inside a run: slots are at even seconds, CMD runs 700ms.
		now := time.Now()
		next := now.Truncate(2 * time.Second).Add(2*time.Second + 300*time.Millisecond)
		time.Sleep(time.Until(next) + time.Duration(round%3)*time.Second)
		id := holder()
		p := replicas[id]
		if p == nil {
			time.Sleep(time.Second)
			continue
		}
		if round%2 == 0 {
			p.kill() // SIGKILL of the elector: CMD dies with it; the lease expires
			kills++
		} else {
			p.signal(syscall.SIGTERM) // graceful: CMD stopped, lease released
			if code := p.wait(10 * time.Second); code != 0 && code != 143 {
				t.Errorf("%s exited %d after SIGTERM", id, code)
			}
			terms++
		}
		start(id)
	}
	// Stop between runs (a slot's run takes 700ms), so that every slot that came is decided.
	time.Sleep(time.Until(time.Now().Truncate(2 * time.Second).Add(4*time.Second + 1200*time.Millisecond)))
	elapsed := time.Since(began)
	for _, p := range replicas {
		p.signal(syscall.SIGTERM)
	}
	for id, p := range replicas {
		if code := p.wait(10 * time.Second); code != 0 && code != 143 {
			t.Errorf("%s exited %d after SIGTERM", id, code)
		}
	}

	// The CMD's log: no overlap, no start before its slot, runs not overlapping in time.
	data, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		slot       time.Time
		attempt    int
		token      int64
		start, end int64
	}
	var runs []*run
	overlaps := 0
	byKey := map[string]*run{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			t.Fatalf("log line %q", line)
		}
		slot, err := time.Parse(time.RFC3339, f[1])
		if err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		attempt, _ := strconv.Atoi(f[2])
		token, _ := strconv.ParseInt(f[3], 10, 64)
		ns, _ := strconv.ParseInt(f[4], 10, 64)
		key := strings.Join(f[1:4], " ")
		switch f[0] {
		case "overlap":
			overlaps++
		case "start":
			r := &run{slot: slot, attempt: attempt, token: token, start: ns}
			runs = append(runs, r)
			byKey[key] = r
		case "end":
			if r := byKey[key]; r != nil {
				r.end = ns
			}
		}
	}
	if overlaps > 0 {
		t.Errorf("%d runs found another run holding the lock: two runs at once\n%s", overlaps, data)
	}
	var delays, retried []time.Duration // attempt 1; later attempts (after a lost run)
	lostInLog := 0
	for i, r := range runs {
		if d := time.Duration(r.start - r.slot.UnixNano()); d < 0 {
			t.Errorf("a run of slot %v started %v before it", r.slot, -d)
		} else if r.attempt == 1 {
			delays = append(delays, d)
		} else {
			retried = append(retried, d)
		}
		if r.end == 0 {
			lostInLog++
		}
		if i > 0 && r.token < runs[i-1].token {
			t.Errorf("run %d (token %d) after a run of token %d", i, r.token, runs[i-1].token)
		}
		if i > 0 && runs[i-1].end != 0 && r.start < runs[i-1].end {
			t.Errorf("run of %v started before the run of %v ended", r.slot, runs[i-1].slot)
		}
	}

	// Redis's history: every slot from the first to the last is done or recorded missed.
	hist, err := client.Get(context.Background(), "elector:{"+name+"}:runs").Result()
	if err != nil {
		t.Fatal(err)
	}
	done := map[int64]bool{}
	ended := map[int64]string{} // a slot's last attempt's result (the history is newest first)
	results := map[string]int{}
	missed := 0
	type span struct{ first, last int64 }
	var missedSpans []span
	var first, last int64
	for _, line := range strings.Split(hist, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[0] == "run":
			slot, _ := strconv.ParseInt(f[1], 10, 64)
			results[f[2]]++
			if _, ok := ended[slot]; !ok {
				ended[slot] = f[2]
			}
			if f[2] == "done" {
				if done[slot] {
					t.Errorf("slot %d done twice", slot)
				}
				done[slot] = true
			}
			if first == 0 || slot < first {
				first = slot
			}
			last = max(last, slot)
		case len(f) >= 5 && f[0] == "missed":
			a, _ := strconv.ParseInt(f[1], 10, 64)
			b, _ := strconv.ParseInt(f[2], 10, 64)
			n, _ := strconv.Atoi(f[3])
			if n > 0 {
				missed += n
				missedSpans = append(missedSpans, span{a, b})
			}
		}
	}
	// A slot before the last whose last attempt was lost or failed is recorded too: a later
	// slot came before its retry, and catch-up latest (the default) ran that one instead.
	undecided, superseded := 0, 0
	for slot := first; slot <= last; slot += 2000 {
		if done[slot] {
			continue
		}
		if r := ended[slot]; slot < last && (r == "lost" || r == "failed") {
			superseded++
			continue
		}
		in := false
		for _, s := range missedSpans {
			in = in || (slot >= s.first && slot <= s.last)
		}
		if !in {
			undecided++
			t.Errorf("slot %v neither done nor recorded missed", time.UnixMilli(slot).UTC())
		}
	}

	// elector status shows the schedule the replicas ran: its spec, next slot and runs, as
	// Redis's history holds them (the replicas stopped: the lease is free, exit 3).
	code, text, stderr := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", name)
	if code != 3 || !strings.Contains(text, "\nschedule:     @every 2s (time zone UTC)\n") ||
		!regexp.MustCompile(`(?m)^next slot:    \S+Z \(`).MatchString(text) ||
		!regexp.MustCompile(`(?m)^runs:         5 of \d+ kept \(-o json lists them all\)\n  SLOT +BY +TOKEN +ATTEMPT +RESULT +EXIT +DURATION\n(  \S+Z +r[012] +\d+ +\d +\w+ +-?\d+ +\S+\n){5}`).MatchString(text) {
		t.Errorf("elector status: exit %d, want 3, the spec and the last 5 runs:\n%s%s", code, text, stderr)
	}
	code, js, stderr := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", name, "-o", "json")
	var st struct {
		Schedule struct {
			Spec string
			Runs []struct {
				Holder, Result string
			}
		}
	}
	if err := json.Unmarshal([]byte(js), &st); err != nil || code != 3 {
		t.Fatalf("elector status -o json: exit %d, %v: %s%s", code, err, js, stderr)
	}
	shown := map[string]int{}
	for _, r := range st.Schedule.Runs {
		shown[r.Result]++
	}
	if st.Schedule.Spec != "@every 2s" || !maps.Equal(shown, results) {
		t.Errorf("elector status -o json: spec %q, results %v: want @every 2s and every run of the history %v", st.Schedule.Spec, shown, results)
	}
	t.Logf("elector status:\n%s", text)

	// /bin/true's exec floor, measured now on the same machine.
	var floor []time.Duration
	for i := 0; i < 50; i++ {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			t.Fatal(err)
		}
		floor = append(floor, time.Since(t0))
	}
	slots := int((last-first)/2000) + 1
	t.Logf("%v, %d SIGKILLs, %d SIGTERMs: %d slots from the first run to the last; %d done, %d missed (%d slots recorded missed, %d with their last attempt lost or failed); runs %d started (%d cut by a kill or stop), results in Redis %v; overlaps %d, undecided %d",
		elapsed.Round(time.Second), kills, terms, slots, len(done), slots-len(done), missed, superseded, len(runs), lostInLog, results, overlaps, undecided)
	t.Logf("delay from slot to CMD's start (sh, then date), attempt 1 (%d runs): p50 %v p99 %v max %v; later attempts (%d, after a lost run: lease expiry and takeover): p50 %v max %v; /bin/true fork+exec+wait: p50 %v p99 %v",
		len(delays), pct(delays, 50), pct(delays, 99), pct(delays, 100), len(retried), pct(retried, 50), pct(retried, 100), pct(floor, 50), pct(floor, 99))
}

// pct returns the p-th percentile of ds (100: the maximum).
func pct(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := min(len(s)-1, (len(s)*p)/100)
	return fmt.Sprint(s[i].Round(10 * time.Microsecond))
}
