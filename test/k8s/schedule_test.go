package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// scheduleJob is the command of TestScheduleMode, in the busybox image (no date +%N): it
// appends "pod slot attempt token start|end|stop uptime" to the Redis list $KEY with RPUSH sent
// through nc, at its start, after 700ms of work, or when elector run stops it (SIGTERM: a
// handover), which it must before it releases the lease. /proc/uptime (10ms) is the node's, one
// clock for every pod of this one-node cluster.
const scheduleJob = `rec() {
  read up idle < /proc/uptime
  L="$HOSTNAME $ELECTOR_SLOT $ELECTOR_ATTEMPT $ELECTOR_FENCING_TOKEN $1 $up"
  printf '*3\r\n$5\r\nRPUSH\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n*1\r\n$4\r\nQUIT\r\n' ${#KEY} "$KEY" ${#L} "$L" | nc "$REDIS_HOST" "$REDIS_PORT" >/dev/null
}
rec start
trap 'rec stop; exit 143' TERM INT
sleep 0.7 &
wait $!
rec end`

// TestScheduleMode: the chart's schedule (run mode with schedule.spec '@every 10s') on three
// replicas through a leader kill (pod deleted with grace 0, mid-run) and a rollout (kubectl
// rollout restart), checked from the runs the command recorded and from elector status -o json:
// no two runs at once, every slot from the first to the last done or recorded missed.
func TestScheduleMode(t *testing.T) {
	sideBySide(t)
	ctx := context.Background()
	const period = 10 * time.Second
	key := "e2e:{sched}:runs"
	host, port, _ := strings.Cut(e.redisAddr, ":")
	env, _ := json.Marshal([]map[string]string{{"name": "KEY", "value": key}, {"name": "REDIS_HOST", "value": host}, {"name": "REDIS_PORT", "value": port}})
	cmd, _ := json.Marshal([]string{"/bin/sh", "-c", scheduleJob})
	r := e.install(t, ctx, "sched",
		"--set", "mode=run", "--set", "replicaCount=3",
		"--set", "lease.duration=8s", "--set", "lease.renewDeadline=4s", "--set", "run.killGrace=2s",
		"--set", "app.image.repository=localhost/elector-e2e/busybox", "--set", "app.image.tag=e2e",
		"--set", "schedule.spec=@every 10s", "--set", "schedule.history=1000",
		"--set-json", "app.command="+string(cmd), "--set-json", "app.env="+string(env))
	podsReady := func() error {
		pods, err := e.cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: r.selector.String()})
		if err != nil {
			return err
		}
		ready := 0
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == "Ready" && c.Status == "True" && p.DeletionTimestamp == nil {
					ready++
				}
			}
		}
		if ready != 3 {
			return fmt.Errorf("%d of %d pods ready", ready, len(pods.Items))
		}
		return nil
	}
	records := func() []schedRecord {
		lines, err := e.redis.LRange(ctx, key, 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		var out []schedRecord
		for _, l := range lines {
			f := strings.Fields(l)
			if len(f) != 6 {
				t.Fatalf("bad record %q", l)
			}
			slot, err := time.Parse(time.RFC3339, f[1])
			if err != nil {
				t.Fatalf("record %q: %v", l, err)
			}
			att, _ := strconv.Atoi(f[2])
			up, _ := strconv.ParseFloat(f[5], 64)
			out = append(out, schedRecord{pod: f[0], slot: slot, attempt: att, token: f[3], what: f[4], up: time.Duration(up * float64(time.Second))})
		}
		return out
	}
	// Steady: three pods, two slots run.
	if err := waitUntil(ctx, 3*time.Minute, func() error {
		if err := podsReady(); err != nil {
			return err
		}
		if n := len(records()); n < 4 {
			return fmt.Errorf("%d records", n)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	midRun := func() { time.Sleep(time.Until(time.Now().Truncate(period).Add(period + 300*time.Millisecond))) }

	// The leader's pod deleted with grace 0, inside a run.
	midRun()
	leader, _, err := e.holder(ctx, r)
	if err != nil || leader == "" {
		t.Fatalf("no holder: %v", err)
	}
	killed := time.Now()
	e.kubectlDelete(t, ctx, leader, true)
	logf("schedule: deleted the leader %s with grace 0", leader)
	if err := waitUntil(ctx, 3*time.Minute, podsReady); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * period)

	// A rollout: every pod replaced, the Deployment's surge and unavailability as the chart sets them.
	rolled := time.Now()
	if _, err := e.c.Kubectl(ctx, "rollout", "restart", "deployment/"+r.deployment.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.Kubectl(ctx, "rollout", "status", "deployment/"+r.deployment.Name, "--timeout=5m"); err != nil {
		t.Fatal(err)
	}
	logf("schedule: rollout done in %v", time.Since(rolled).Round(time.Second))
	if err := waitUntil(ctx, 3*time.Minute, podsReady); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * period)
	// Read between runs: 5s after a slot, its 700ms run is over.
	time.Sleep(time.Until(time.Now().Truncate(period).Add(period + 5*time.Second)))
	last := time.Now().Truncate(period).UTC()
	recs := records()

	args := []string{"status", "--redis-addr", e.redisAddr, "--lease-name", r.leaseName, "-o", "json"}
	if r.keyPrefix != "" {
		args = append(args, "--key-prefix", r.keyPrefix)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(e.bin, "elector"), args...).Output()
	var st struct {
		Schedule struct {
			Spec string `json:"spec"`
			Runs []struct {
				Slot    time.Time `json:"slot"`
				Holder  string    `json:"holder"`
				Attempt int       `json:"attempt"`
				Result  string    `json:"result"`
			} `json:"runs"`
			Missed []struct {
				First, Last time.Time
				Count       int
				Reason      string
			} `json:"missed"`
		} `json:"schedule"`
	}
	if jerr := json.Unmarshal(out, &st); jerr != nil {
		t.Fatalf("elector status -o json: %v, %v: %s", err, jerr, out)
	}

	// Runs from the records: start and end per pod, slot and attempt; no two at once.
	type run struct {
		pod        string
		slot       time.Time
		attempt    int
		start, end time.Duration
		stopped    bool
	}
	byKey := map[string]*run{}
	var runs []*run
	for _, c := range recs {
		k := fmt.Sprintf("%s %s %d", c.pod, c.slot, c.attempt)
		switch c.what {
		case "start":
			x := &run{pod: c.pod, slot: c.slot, attempt: c.attempt, start: c.up}
			byKey[k], runs = x, append(runs, x)
		case "end", "stop":
			if x := byKey[k]; x != nil {
				x.end, x.stopped = c.up, c.what == "stop"
			}
		}
	}
	concurrent, cut, retries := 0, 0, 0
	for i, a := range runs {
		if a.end == 0 || a.stopped {
			cut++
		}
		if a.attempt > 1 {
			retries++
		}
		// A run without an end nor a stop record was SIGKILLed before its work ended: it
		// ended before its natural end, 700ms of work and a record later.
		aEnd := a.end
		if aEnd == 0 {
			aEnd = a.start + time.Second
		}
		for _, b := range runs[i+1:] {
			bEnd := b.end
			if bEnd == 0 {
				bEnd = b.start + time.Second
			}
			if a.start < bEnd && b.start < aEnd {
				concurrent++
				t.Errorf("runs at once: %s slot %s attempt %d [%v, %v] and %s slot %s attempt %d [%v, %v]",
					a.pod, a.slot.Format(time.RFC3339), a.attempt, a.start, a.end, b.pod, b.slot.Format(time.RFC3339), b.attempt, b.start, b.end)
			}
		}
	}
	// Every slot from the first run's to the last: done (Redis's history) or recorded missed.
	done := map[time.Time]int{}
	results := map[string]int{}
	for _, x := range st.Schedule.Runs {
		results[x.Result]++
		if x.Result == "done" {
			done[x.Slot.UTC()]++
		}
	}
	missed := map[time.Time]string{}
	missedN := 0
	for _, m := range st.Schedule.Missed {
		missedN += m.Count
		for s := m.First.UTC(); !s.After(m.Last.UTC()); s = s.Add(period) {
			missed[s] = m.Reason
		}
	}
	if len(runs) == 0 {
		t.Fatal("no runs recorded")
	}
	first := runs[0].slot.UTC()
	slots, doneN, undecided, twice := 0, 0, 0, 0
	for s := first; !s.After(last); s = s.Add(period) {
		slots++
		switch {
		case done[s] > 1:
			twice++
			doneN++
			t.Logf("slot %s done twice, one after the other", s.Format(time.RFC3339))
		case done[s] == 1:
			doneN++
		case missed[s] != "":
		default:
			undecided++
			t.Errorf("slot %s neither done nor recorded missed", s.Format(time.RFC3339))
		}
	}
	if st.Schedule.Spec != "@every 10s" {
		t.Errorf("elector status shows the schedule %q, want @every 10s", st.Schedule.Spec)
	}
	t.Logf("schedule mode: %d slots (%s to %s) through a leader kill at %s and a rollout at %s: %d done, %d recorded missed (%d in all ranges), %d neither, %d done twice; %d runs started (%d cut by the kill, %d later attempts), results %v; runs at once %d",
		slots, first.Format(time.RFC3339), last.Format(time.RFC3339), killed.UTC().Format("15:04:05.000"), rolled.UTC().Format("15:04:05"),
		doneN, slots-doneN-undecided, missedN, undecided, twice, len(runs), cut, retries, results, concurrent)
	e.figure("schedule_slots", slots)
	e.figure("schedule_done", doneN)
	e.figure("schedule_missed", slots-doneN-undecided)
	e.figure("schedule_concurrent", concurrent)
	e.figure("schedule_retries", retries)
}

// schedRecord is one line the command of TestScheduleMode recorded.
type schedRecord struct {
	pod, token, what string
	slot             time.Time
	attempt          int
	up               time.Duration // the node's uptime
}
