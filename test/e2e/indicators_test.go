package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
)

// indReplica is one `elector sidecar` of the indicator test, behind its own proxy to Redis so
// that its path alone can be delayed; restarted with the same identity and status file.
type indReplica struct {
	*sidecar
	proxy *faultproxy.Proxy
}

// TestIndicatorsBeforeSuccessor checks docs/DESIGN.md's "Step-down order: indicators before
// release" on the CLI: the moment a successor's status file says leader, the old leader's
// status file, /readyz, /leader and leader gauges on /metrics already say it does not lead.
// A watcher polls the successor's file in a tight loop and, on "leader", reads the old
// leader's indicators at once: whatever says leader then overlapped the successor's term.
// The delay on the old leader's path holds back its release reply, which is when a status
// file rewritten only after the release showed (issue 23, item 2).
func TestIndicatorsBeforeSuccessor(t *testing.T) {
	if testing.Short() {
		t.Skip("160 handovers with delays")
	}
	srv := redistest.Start(t)
	const handovers = 20
	for _, how := range []string{"resign", "sigterm"} {
		for _, d := range []time.Duration{0, 2 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond} {
			t.Run(fmt.Sprintf("%s/delay=%v", how, d), func(t *testing.T) {
				t.Parallel()
				lease := fmt.Sprintf("ind-%s-%d", how, d.Milliseconds())
				dir := t.TempDir()
				r := [2]*indReplica{}
				for i, id := range []string{"a", "b"} {
					r[i] = &indReplica{proxy: faultproxy.Start(t, srv.Addr())}
					r[i].start(t, lease, id, dir)
				}
				var windows []string
				for i := 0; i < handovers; i++ {
					if w := indHandover(t, r, lease, how, d); w != "" {
						windows = append(windows, w)
					}
				}
				t.Logf("%s, delay %v: %d handovers, %d windows", how, d, handovers, len(windows))
				if len(windows) > 0 {
					t.Errorf("%d of %d successors said leader while the old leader still did:\n%s",
						len(windows), handovers, strings.Join(windows, "\n"))
				}
			})
		}
	}
}

// start runs the sidecar with a call timeout (max(retry, deadline/2) = 1s) well above the
// slowest round trip of the test (2 × 200ms).
func (r *indReplica) start(t *testing.T, lease, id, dir string) {
	s := &sidecar{id: id, status: filepath.Join(dir, id+".status")}
	addr := redistest.FreeAddr(t)
	s.base = "http://" + addr
	s.proc = startElector(t, id, nil, "sidecar",
		"--redis-addr", r.proxy.Addr(), "--lease-name", lease, "--identity", id,
		"--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "500ms",
		"--http-addr", addr, "--status-file", s.status)
	r.sidecar = s
}

// indHandover waits for a leader and a follower that knows it, delays the leader's path by
// d, ends its term (POST /resign, or SIGTERM and a restart) and watches the follower take
// over. It returns a description of the window, "" when there was none.
func indHandover(t *testing.T, r [2]*indReplica, lease, how string, d time.Duration) string {
	t.Helper()
	old, next := indSettled(t, r)
	old.proxy.SetLatency(d)
	defer old.proxy.SetLatency(0)
	watched := make(chan string, 1)
	stop := make(chan struct{})
	oldCar, nextCar := old.sidecar, next.sidecar // old.sidecar is replaced after a SIGTERM
	go func() { watched <- watchTakeover(oldCar, nextCar, lease, stop) }()
	switch how {
	case "resign":
		// 202: the step-down outlasted the handler's wait (a loaded machine); it completes all
		// the same, and the watcher waits for the takeover either way.
		if code, body := httpPostWait(old.base + "/resign"); code != http.StatusOK && code != http.StatusAccepted {
			close(stop)
			t.Fatalf("POST %s/resign: %d %s", old.base, code, body)
		}
	case "sigterm":
		old.signal(syscall.SIGTERM)
		if code := old.wait(10 * time.Second); code != 0 {
			close(stop)
			t.Fatalf("%s exited with %d after SIGTERM", old.id, code)
		}
	}
	select {
	case w := <-watched:
		if how == "sigterm" {
			// Started again only once the successor leads: started at once, it races the
			// successor's wake-up for the free lease and may win it (a successor whose
			// subscription was down sleeps until the expiry it heard of), and then no
			// handover happened.
			old.start(t, lease, old.id, filepath.Dir(old.status))
		}
		return w
	case <-time.After(30 * time.Second):
		close(stop)
		t.Fatalf("%s did not take over within 30s", next.id)
		return ""
	}
}

// indSettled waits until one sidecar leads by every indicator and the other has observed it
// (it campaigns and listens for the release), and returns them.
func indSettled(t *testing.T, r [2]*indReplica) (leader, follower *indReplica) {
	t.Helper()
	waitFor(t, 15*time.Second, "one leader, observed by the other", func() bool {
		for i, s := range r {
			o := r[1-i]
			if s.statusFile() == "leader\n" && s.ready() && o.statusFile() == "follower\n" {
				if l, ok := o.leader(t); ok && l.Name == s.id && !l.IsLeader {
					leader, follower = s, o
					return true
				}
			}
		}
		return false
	})
	return leader, follower
}

// watchTakeover polls next's status file until it says leader, then reads old's indicators
// (the file first: it is the fastest) and describes those that still said leader.
func watchTakeover(old, next *sidecar, lease string, stop <-chan struct{}) string {
	for {
		select {
		case <-stop:
			return ""
		default:
		}
		if b, _ := os.ReadFile(next.status); statusState(b) == "leader\n" {
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	at := time.Now()
	var said []string
	if b, _ := os.ReadFile(old.status); statusState(b) != "follower\n" {
		said = append(said, fmt.Sprintf("status file %q", b))
	}
	if code, _ := httpGet(old.base + "/readyz"); code == http.StatusOK {
		said = append(said, "/readyz 200")
	}
	if code, body := httpGet(old.base + "/leader"); code == http.StatusOK {
		var l leaderJSON
		if err := json.Unmarshal([]byte(body), &l); err != nil || l.IsLeader || l.Token != 0 || l.Name == old.id {
			said = append(said, "/leader "+strings.TrimSpace(body))
		}
	}
	if code, body := httpGet(old.base + "/metrics"); code == http.StatusOK {
		said = append(said, leaderGauges(body, lease)...)
	}
	if len(said) == 0 {
		return ""
	}
	return fmt.Sprintf("  %s said leader at %s while %s still said leader by %v",
		next.id, at.Format("15:04:05.000000"), old.id, said)
}

// leaderGauges returns the lines of a /metrics body whose gauge of lease says "leader".
func leaderGauges(body, lease string) []string {
	var said []string
	for _, line := range strings.Split(body, "\n") {
		for _, g := range []string{"leader_election_master_status", "elector_is_leader", "elector_fencing_token", "elector_seconds_since_last_renew"} {
			prefix := g + `{name="` + lease + `"} `
			if v, ok := strings.CutPrefix(line, prefix); ok && v != "0" {
				said = append(said, line)
			}
		}
	}
	return said
}
