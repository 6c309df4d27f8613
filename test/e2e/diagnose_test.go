package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// slowTiming overrides the test timing of leaseArgs (the last value of a flag wins) where a
// test waits for the reason of a failure: calls get 3s, so that a loaded machine cannot turn
// every attempt into a timeout.
var slowTiming = []string{"--lease-duration", "10s", "--renew-deadline", "6s", "--retry-period", "500ms"}

// redisErrorJSON is "redisError" of GET /leader.
type redisErrorJSON struct {
	Op     string `json:"op"`
	Reason string `json:"reason"`
	Error  string `json:"error"`
	Fix    string `json:"fix"`
	Count  int    `json:"count"`
}

// redisError returns the redisError of /leader, nil when absent.
func (s *sidecar) redisError(t *testing.T) *redisErrorJSON {
	t.Helper()
	code, body := httpGet(s.base + "/leader")
	if code != http.StatusOK {
		return nil
	}
	var l struct {
		RedisError *redisErrorJSON `json:"redisError"`
	}
	if err := json.Unmarshal([]byte(body), &l); err != nil {
		t.Errorf("GET /leader: %v: %s", err, body)
	}
	return l.RedisError
}

// metric returns the lines of /metrics that start with prefix.
func (s *sidecar) metric(prefix string) []string {
	_, body := httpGet(s.base + "/metrics")
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// createREADMEUsers creates the Redis ACL users of README.md's "Redis requirements" lines
// (user elector with password pw-elector, elector-observer with pw-viewer), exactly as
// written there, for the lease name (README's NAME).
func createREADMEUsers(t *testing.T, ctx context.Context, srv *redistest.Server, name string) {
	t.Helper()
	installFunctions(t, srv)
	client := srv.Client(t)
	for user, password := range map[string]string{"elector": "pw-elector", "elector-observer": "pw-viewer"} {
		args := []any{"ACL", "SETUSER", user, "on", ">" + password}
		for _, rule := range readmeACL(t, user, name) {
			args = append(args, rule)
		}
		if err := client.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
}

// installFunctions loads elector's function library into srv as README.md says, with
// `elector install-functions` as the default user, which README's users need.
func installFunctions(t *testing.T, srv *redistest.Server) {
	t.Helper()
	if code, out, stderr := runElector(t, 30*time.Second, nil, "install-functions", "--redis-addr", srv.Addr()); code != 0 {
		t.Fatalf("elector install-functions: exit %d, %q, stderr %q", code, out, stderr)
	}
}

// readmeACL returns the rules of README.md's ACL line for user, with NAME replaced by name.
func readmeACL(t *testing.T, user, name string) []string {
	t.Helper()
	readme, err := os.ReadFile("../../README.md") // go test runs in the package directory
	if err != nil {
		t.Fatal(err)
	}
	prefix := "ACL SETUSER " + user + " on >PASSWORD "
	for _, l := range strings.Split(string(readme), "\n") {
		if strings.HasPrefix(l, prefix) {
			return strings.Fields(strings.ReplaceAll(strings.TrimPrefix(l, prefix), "{NAME}", "{"+name+"}"))
		}
	}
	t.Fatalf("README.md has no line %q", prefix+"...")
	return nil
}

// TestUnknownSentinelMaster: with a lease held, status through a master name no Sentinel
// knows must fail (exit 1) and name the master, not print "no holder" (go-redis reports the
// unknown master with the nil reply that otherwise means "no key"); a sidecar logs the same
// cause, says so in /leader and keeps retrying.
func TestUnknownSentinelMaster(t *testing.T) {
	s := redistest.StartSentinel(t, "mymaster", 0, 1)
	addrs := strings.Join(s.SentinelAddrs(), ",")
	ctx := context.Background()
	l, err := leasekit.New(s.Client(t), "sx", lease.Options{Identity: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := l.Acquire(ctx, time.Minute); err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	wrong := []string{"--redis-mode", "sentinel", "--sentinel-master", "wrong", "--redis-addr", addrs}
	for _, args := range [][]string{
		{"--lease-name", "sx"},
		{"--lease-name", "sx", "-o", "json"},
		{"--all"},
	} {
		code, out, stderr := runElector(t, 20*time.Second, nil, append(append([]string{"status"}, wrong...), args...)...)
		line := oneLine(t, stderr)
		if code != 1 || !strings.Contains(line, `master "wrong"`) || !strings.Contains(line, "no Sentinel knows a master by this name") {
			t.Errorf("status %v through an unknown master: exit %d (want 1), stdout %q, stderr %q", args, code, out, line)
		}
	}
	code, out, stderr := runElector(t, 20*time.Second, nil, "status", "--redis-mode", "sentinel", "--sentinel-master", "mymaster", "--redis-addr", addrs, "--lease-name", "sx")
	if code != 0 || !strings.Contains(out, "holder") {
		t.Errorf("status through the right master: exit %d, %s %s", code, out, stderr)
	}

	// Calls of 3s (--renew-deadline/2): a loaded machine must not turn the lookup into a timeout.
	car := startSidecar(t, addrs, "sx", "a", t.TempDir(), nil, append(slowTiming, "--redis-mode", "sentinel", "--sentinel-master", "wrong")...)
	waitFor(t, 30*time.Second, "the sidecar to report the unknown master", func() bool {
		e := car.redisError(t)
		return e != nil && e.Reason == "unknown_master" && strings.Contains(e.Fix, "--sentinel-master")
	})
	if !strings.Contains(car.stderr.String(), `reason="unknown_master"`) || strings.Contains(car.stderr.String(), "unreachable: redis: nil\" reason=\"server\"") {
		t.Errorf("the sidecar's log does not name the unknown master:\n%s", car.stderr.String())
	}
	time.Sleep(3 * time.Second) // several retry periods
	if !car.running() {
		t.Fatalf("the sidecar gave up: %s", car.stderr.String())
	}
	if e := car.redisError(t); e == nil || e.Count < 2 {
		t.Errorf("the sidecar does not keep retrying: %+v", e)
	}
	car.signal(syscall.SIGTERM)
	if code := car.wait(5 * time.Second); code != 0 {
		t.Errorf("sidecar exit code %d", code)
	}
}

// TestMisconfigurationIsLoud: a wrong password and a missing ACL permission are permanent.
// The sidecar must say which (reason label, /leader, elector_redis_up 0, a fix in the log)
// while liveness stays 200.
func TestMisconfigurationIsLoud(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	if err := srv.Client(t).Do(ctx, "ACL", "SETUSER", "noscript", "on", ">pw", "resetkeys", "resetchannels", "~elector:*", "&elector:*", "-@all", "+get", "+set", "+subscribe", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, password, reason, fix string
	}{
		{"wrong-password", "wrong", "auth", "REDIS_PASSWORD"},
		{"noperm", "pw", "noperm", "+evalsha"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			car := startSidecar(t, srv.Addr(), tc.name, "a", t.TempDir(), []string{"REDIS_PASSWORD=" + tc.password}, append(slowTiming, "--redis-username", "noscript")...)
			waitFor(t, 30*time.Second, "/leader to carry the "+tc.reason+" error", func() bool {
				e := car.redisError(t)
				return e != nil && e.Reason == tc.reason && strings.Contains(e.Fix, tc.fix)
			})
			if up := car.metric("elector_redis_up{"); len(up) != 1 || !strings.HasSuffix(up[0], " 0") {
				t.Errorf("elector_redis_up: %q, want 0", up)
			}
			errs := car.metric(`elector_redis_errors_total{`)
			if len(errs) == 0 || !strings.Contains(strings.Join(errs, "\n"), `reason="`+tc.reason+`"`) {
				t.Errorf("elector_redis_errors_total has no reason %q: %q", tc.reason, errs)
			}
			if code, _ := httpGet(car.base + "/healthz"); code != http.StatusOK {
				t.Errorf("/healthz %d, want 200: liveness does not depend on Redis", code)
			}
			if log := car.stderr.String(); !strings.Contains(log, "fix=") || !strings.Contains(log, tc.fix) {
				t.Errorf("the log has no fix naming %q:\n%s", tc.fix, log)
			}
		})
	}
}

// TestStatusACLEveryForm runs every form of status as README.md's observer user: one lease,
// a key prefix outside its ACL (the error must name the refused command and key, not only
// EXECABORT), --watch, and --all, which its user may not (SCAN lists every key name of the
// database) until an administrator grants +scan.
func TestStatusACLEveryForm(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	createREADMEUsers(t, ctx, srv, "obs")
	client := srv.Client(t)
	l, err := leasekit.New(client, "obs", lease.Options{Identity: "holder"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Acquire(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	env := []string{"REDIS_PASSWORD=pw-viewer"}
	as := []string{"--redis-addr", srv.Addr(), "--redis-username", "elector-observer"}
	code, out, stderr := runElector(t, 10*time.Second, env, append(append([]string{"status"}, as...), "--all")...)
	if code == 0 || !strings.Contains(strings.ToLower(stderr), "scan") {
		t.Errorf("status --all as elector-observer without +scan: exit %d, stdout %q, stderr %s; want a refusal naming SCAN", code, out, stderr)
	}
	if err := client.Do(ctx, "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	if err := client.Do(ctx, "ACL", "SETUSER", "elector-observer", "+scan").Err(); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--lease-name", "obs"}, {"--all"}, {"--lease-name", "obs", "-o", "yaml"}} {
		code, out, stderr := runElector(t, 10*time.Second, env, append(append([]string{"status"}, as...), args...)...)
		if code != 0 || !strings.Contains(out, "holder") {
			t.Errorf("status %v as elector-observer: exit %d, stdout %q, stderr %s", args, code, out, stderr)
		}
	}
	w := startElector(t, "status --watch", env, append(append([]string{"status"}, as...), "--lease-name", "obs", "--watch")...)
	waitFor(t, 5*time.Second, "the watch to print the holder", func() bool { return strings.Contains(w.stdout.String(), "held") })
	w.signal(syscall.SIGINT)
	if code := w.wait(5 * time.Second); code != 0 {
		t.Errorf("status --watch exit %d after SIGINT; stderr %s", code, w.stderr.String())
	}
	if entries, err := client.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(entries) != 0 {
		t.Errorf("Redis refused commands of the observer user: %v %v", entries, err)
	}

	code, _, stderr = runElector(t, 10*time.Second, env, append(append([]string{"status"}, as...), "--lease-name", "obs", "--key-prefix", "other")...)
	line := oneLine(t, stderr)
	if code != 1 || !strings.Contains(line, "GET other:{obs}:lease") || !strings.Contains(line, "~other:*") {
		t.Errorf("status outside the ACL's keys: exit %d (want 1), stderr %q: want the refused command, key and pattern", code, line)
	}
}
