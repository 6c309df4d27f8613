package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/testing/faultproxy"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/internal/testing/wakeprobe"
	"github.com/elector/elector/pkg/lease"
)

// statusJSON is the output of `elector status -o json`.
type statusJSON struct {
	Lease    string `json:"lease"`
	Key      string `json:"key"`
	Holder   string `json:"holder"`
	Instance string `json:"instance"`
	Token    int64  `json:"token"`
	TTLMs    int64  `json:"ttlMs"`
}

func TestStatus(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	l, err := leasekit.New(client, "held", lease.Options{Identity: "holder-1"})
	if err != nil {
		t.Fatal(err)
	}
	ok, st, err := l.Acquire(ctx, 30*time.Second)
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}

	t.Run("held-text", func(t *testing.T) {
		code, out, stderr := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", "held")
		if code != 0 {
			t.Fatalf("exit code %d, want 0; stderr: %s", code, stderr)
		}
		for _, want := range []string{"lease:", "held", "holder:", "holder-1", "token:", strconv.FormatInt(st.Record.Token, 10), "ttl:", "elector:{held}:lease"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
	})
	t.Run("held-json", func(t *testing.T) {
		code, out, stderr := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", "held", "-o", "json")
		if code != 0 {
			t.Fatalf("exit code %d, want 0; stderr: %s", code, stderr)
		}
		var got statusJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if got.Lease != "held" || got.Holder != "holder-1" || got.Token != st.Record.Token || got.Instance != l.Instance() ||
			got.TTLMs <= 0 || got.TTLMs > 30000 || got.Key != "elector:{held}:lease" {
			t.Errorf("status %+v, want holder-1 with token %d and a TTL up to 30s", got, st.Record.Token)
		}
	})
	t.Run("no-holder", func(t *testing.T) {
		code, out, _ := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", "free")
		if code != 3 || !strings.Contains(out, "(none)") {
			t.Errorf("exit code %d (want 3), output:\n%s", code, out)
		}
		code, out, _ = runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", "free", "--output=json")
		var got statusJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil || code != 3 || got.Holder != "" || got.Token != 0 || got.TTLMs != 0 || got.Lease != "free" {
			t.Errorf("exit code %d (want 3), output %s (%v)", code, out, err)
		}
	})
	t.Run("environment", func(t *testing.T) {
		env := []string{"ELECTOR_REDIS_ADDR=" + srv.Addr(), "ELECTOR_LEASE_NAME=held", "ELECTOR_OUTPUT=json"}
		code, out, stderr := runElector(t, 10*time.Second, env, "status")
		var got statusJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 || got.Holder != "holder-1" {
			t.Errorf("settings from the environment: exit code %d, output %s, stderr %s", code, out, stderr)
		}
		// A flag wins over its variable.
		code, out, _ = runElector(t, 10*time.Second, env, "status", "--lease-name", "free")
		if err := json.Unmarshal([]byte(out), &got); err != nil || code != 3 || got.Lease != "free" {
			t.Errorf("--lease-name=free over ELECTOR_LEASE_NAME=held: exit code %d, output %s", code, out)
		}
	})
	t.Run("no-expiry", func(t *testing.T) {
		if err := client.Set(ctx, "elector:{forever}:lease", "v1:7:abc:by-hand", 0).Err(); err != nil {
			t.Fatal(err)
		}
		code, out, _ := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", "forever", "-o", "json")
		var got statusJSON
		if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 || got.TTLMs != -1 || got.Token != 7 || got.Holder != "by-hand" {
			t.Errorf("exit code %d, output %s", code, out)
		}
	})
	t.Run("not-a-record", func(t *testing.T) {
		if err := client.Set(ctx, "elector:{garbage}:lease", "hello", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", "garbage")
		if code != 1 || !strings.Contains(stderr, "not an elector lease record") {
			t.Errorf("exit code %d (want 1), stderr: %s", code, stderr)
		}
	})
}

// TestStatusRedisDown checks that status fails fast with exit code 1 and names the address.
func TestStatusRedisDown(t *testing.T) {
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop()
	probe := wakeprobe.Start(t)
	start := time.Now()
	code, _, stderr := runElector(t, 20*time.Second, nil, "status", "--redis-addr", addr, "--lease-name", "x")
	if code != 1 {
		t.Errorf("exit code %d, want 1", code)
	}
	// It fails fast (the 5s read timeout at most), not at the test's 20s.
	assertPrompt(t, probe, "status with Redis down", time.Since(start), 20*time.Second)
	if !strings.Contains(oneLine(t, stderr), addr) {
		t.Errorf("the error does not name %s: %s", addr, stderr)
	}
}

// TestStatusAll lists the leases of a prefix, as election.Group users need.
func TestStatusAll(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()

	code, out, _ := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--all", "-o", "json")
	if code != 3 || strings.TrimSpace(out) != "[]" {
		t.Fatalf("--all with no lease: exit %d, output %q; want 3 and []", code, out)
	}
	tokens := map[string]int64{}
	for i, name := range []string{"tenant-b", "tenant-a", "tenant-c"} {
		l, err := leasekit.New(client, name, lease.Options{Identity: "pod-" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		_, st, err := l.Acquire(ctx, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		tokens[name] = st.Record.Token
	}
	code, out, stderr := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--all", "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d; stderr: %s", code, stderr)
	}
	var got []statusJSON
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not a JSON list: %v\n%s", err, out)
	}
	if len(got) != 3 || got[0].Lease != "tenant-a" || got[2].Lease != "tenant-c" {
		t.Fatalf("got %+v, want tenant-a, tenant-b, tenant-c in order", got)
	}
	for _, s := range got {
		if s.Token != tokens[s.Lease] || s.TTLMs <= 0 || s.Holder == "" {
			t.Errorf("%+v: want token %d and a holder with time left", s, tokens[s.Lease])
		}
	}
	code, out, _ = runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--all")
	if code != 0 || !strings.Contains(out, "LEASE") || !strings.Contains(out, "tenant-b") {
		t.Fatalf("text: exit %d\n%s", code, out)
	}
	code, _, stderr = runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--all", "--lease-name", "x")
	if code != 2 || !strings.Contains(stderr, "--all") {
		t.Fatalf("--all with --lease-name: exit %d, stderr %q; want 2 naming --all", code, stderr)
	}
}

// TestStatusTermsAndAcquireTime: status shows how many terms the lease had (counted by the
// acquire script) and when the current one began (from its token), in every format.
func TestStatusTermsAndAcquireTime(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	var term lease.Record
	before := time.Now()
	for i := 0; i < 3; i++ {
		l, err := leasekit.New(client, "counted", lease.Options{Identity: "pod-" + strconv.Itoa(i)})
		if err != nil {
			t.Fatal(err)
		}
		ok, st, err := l.Acquire(ctx, time.Minute)
		if err != nil || !ok {
			t.Fatalf("acquire %d: %v %v", i, ok, err)
		}
		term = st.Record
		if i < 2 {
			if _, err := l.Release(ctx, term); err != nil {
				t.Fatal(err)
			}
		}
	}
	code, out, stderr := runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", "counted", "-o", "json")
	var got struct {
		statusJSON
		AcquiredAt  time.Time `json:"acquiredAt"`
		Transitions int64     `json:"transitions"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil || code != 0 {
		t.Fatalf("exit %d, %v: %s %s", code, err, out, stderr)
	}
	// The token is Redis's clock in µs; the test runs on the same machine as Redis.
	if got.Transitions != 3 || got.Holder != "pod-2" || !got.AcquiredAt.Equal(time.UnixMicro(term.Token)) ||
		got.AcquiredAt.Before(before.Add(-time.Second)) || got.AcquiredAt.After(time.Now().Add(time.Second)) {
		t.Errorf("status %+v, want 3 transitions and the acquire time of token %d (about now)", got, term.Token)
	}
	code, out, _ = runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", "counted")
	if code != 0 || !strings.Contains(out, "transitions:") || !strings.Contains(out, "acquired:") || !strings.Contains(out, got.AcquiredAt.Format(time.RFC3339Nano)) {
		t.Errorf("text: exit %d\n%s", code, out)
	}
	code, out, _ = runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--lease-name", "counted", "-o", "yaml")
	if code != 0 || !strings.Contains(out, "holder: pod-2\n") || !strings.Contains(out, "transitions: 3\n") || !strings.Contains(out, "ttlMs: ") {
		t.Errorf("yaml: exit %d\n%s", code, out)
	}
	code, out, _ = runElector(t, 10*time.Second, nil, "status", "--redis-addr", srv.Addr(), "--all", "-o", "yaml")
	if code != 0 || !strings.HasPrefix(out, "- lease: ") || !strings.Contains(out, "acquiredAt: ") {
		t.Errorf("--all yaml: exit %d\n%s", code, out)
	}
}

// TestStatusWatch: status --watch prints the state and then one line per change — acquired,
// released, expired — from the events channel, without polling Redis in between.
func TestStatusWatch(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	w := startElector(t, "status --watch", nil, "status", "--redis-addr", srv.Addr(), "--lease-name", "watched", "-w", "-o", "json")
	type line struct {
		statusJSON
		Event string    `json:"event"`
		Time  time.Time `json:"time"`
	}
	lines := func() []line {
		var out []line
		for _, s := range strings.Split(strings.TrimSpace(w.stdout.String()), "\n") {
			var l line
			if s != "" && json.Unmarshal([]byte(s), &l) == nil {
				out = append(out, l)
			}
		}
		return out
	}
	waitLines := func(n int, what string) []line {
		t.Helper()
		waitFor(t, 10*time.Second, what, func() bool { return len(lines()) >= n })
		return lines()
	}
	if got := waitLines(1, "the first line"); got[0].Event != "free" {
		t.Fatalf("first line %+v, want free", got[0])
	}
	a, err := leasekit.NewWith(client, "watched", lease.Options{Identity: "a"}, leasekit.Ext{AnnounceRenewals: true})
	if err != nil {
		t.Fatal(err)
	}
	_, st, err := a.Acquire(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := waitLines(2, "acquired"); got[1].Event != "acquired" || got[1].Holder != "a" || got[1].Token != st.Record.Token {
		t.Fatalf("line %+v, want acquired by a with token %d", got[1], st.Record.Token)
	}
	// Renewals are no change, and nothing is read while the lease is held: no polling.
	stats := func() int64 {
		info, err := client.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, l := range strings.Split(info, "\n") {
			// status reads with MULTI GET PTTL EXEC; the scripts' own GETs count as GETs.
			for _, cmd := range []string{"cmdstat_multi:"} {
				if strings.HasPrefix(l, cmd) {
					v, _, _ := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(l, cmd), "calls="), ",")
					c, _ := strconv.ParseInt(v, 10, 64)
					n += c
				}
			}
		}
		return n
	}
	reads := stats()
	for i := 0; i < 5; i++ {
		if ok, err := a.Renew(ctx, st.Record, time.Minute); err != nil || !ok {
			t.Fatalf("renew: %v %v", ok, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if n := stats() - reads; n != 0 {
		t.Errorf("%d reads of the lease while it was held and renewed: the watch polls", n)
	}
	if _, err := a.Release(ctx, st.Record); err != nil {
		t.Fatal(err)
	}
	if got := waitLines(3, "released"); got[2].Event != "released" || got[2].Holder != "a" || got[2].Token != st.Record.Token {
		t.Fatalf("line %+v, want released, of a's term", got[2])
	}
	// A lease nobody renews expires without an announcement: the watch notices at its expiry.
	b, err := leasekit.New(client, "watched", lease.Options{Identity: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Acquire(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	got := waitLines(5, "acquired by b, then expired")
	if got[3].Event != "acquired" || got[3].Holder != "b" || got[4].Event != "expired" || got[4].Holder != "b" || got[4].Token != got[3].Token {
		t.Fatalf("lines %+v, want acquired by b, then expired, of b's term", got[3:])
	}
	if len(got) != 5 {
		t.Errorf("%d lines, want 5 (a line per change, none for renewals): %s", len(got), w.stdout.String())
	}
	w.signal(syscall.SIGTERM)
	if code := w.wait(5 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM; stderr %s", code, w.stderr.String())
	}
}

// TestStatusWatchCrashReportsExpired: a holder that crashed (stops renewing, never releases)
// and a successor that acquires the moment the lease runs out — before the watch's own read at
// the expiry — print "expired" for the crashed term, then "acquired" (issue 28 item 3: only the
// acquire printed). With -o yaml the lines are a YAML stream, one document each.
func TestStatusWatchCrashReportsExpired(t *testing.T) {
	for _, format := range []string{"json", "yaml"} {
		t.Run(format, func(t *testing.T) {
			srv := redistest.Start(t)
			client := srv.Client(t)
			ctx := context.Background()
			a, err := leasekit.New(client, "crashed", lease.Options{Identity: "a"})
			if err != nil {
				t.Fatal(err)
			}
			_, sta, err := a.Acquire(ctx, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			w := startElector(t, "status --watch", nil, "status", "--redis-addr", srv.Addr(), "--lease-name", "crashed", "-w", "-o", format)
			type line struct {
				Event  string `json:"event"`
				Holder string `json:"holder"`
				Token  int64  `json:"token"`
			}
			lines := func() []line {
				var out []line
				if format == "json" {
					for _, s := range strings.Split(strings.TrimSpace(w.stdout.String()), "\n") {
						var l line
						if s != "" && json.Unmarshal([]byte(s), &l) == nil {
							out = append(out, l)
						}
					}
					return out
				}
				docs := strings.Split(w.stdout.String(), "---\n")
				for i, d := range docs {
					if i == 0 || !strings.HasSuffix(d, "\n") {
						continue // before the first separator, or a document still being written
					}
					var l line
					if err := yaml.Unmarshal([]byte(d), &l); err != nil {
						t.Fatalf("document %d is not YAML: %v\n%s", i, err, d)
					}
					out = append(out, l)
				}
				return out
			}
			waitFor(t, 10*time.Second, "the first line", func() bool { return len(lines()) >= 1 })
			// a "crashes": it never renews. b acquires the moment the key is gone.
			b, err := leasekit.New(client, "crashed", lease.Options{Identity: "b"})
			if err != nil {
				t.Fatal(err)
			}
			var stb lease.Status
			waitFor(t, 10*time.Second, "b acquires after a's lease expired", func() bool {
				won, st, err := b.Acquire(ctx, time.Minute)
				stb = st
				return err == nil && won
			})
			waitFor(t, 10*time.Second, "three lines", func() bool { return len(lines()) >= 3 })
			got := lines()
			want := []line{{"held", "a", sta.Record.Token}, {"expired", "a", sta.Record.Token}, {"acquired", "b", stb.Record.Token}}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("lines %+v, want %+v\n%s", got, want, w.stdout.String())
				}
			}
		})
	}
}

// TestStatusWatchFailedReadAfterDrop: after the subscription of status --watch broke, its
// first read of the lease fails (WRONGTYPE, counted by the server) and a new term begins
// without an event (a raw SET): the watch retries the read and prints the new holder instead
// of exiting on the failed read or waiting for an event that never comes.
func TestStatusWatchFailedReadAfterDrop(t *testing.T) {
	srv := redistest.Start(t)
	proxy := faultproxy.Start(t, srv.Addr())
	client := srv.Client(t)
	const name = "watch-failed-read"
	holdLease(t, client, name, "v1:100:aaaa:old-holder")
	w := startElector(t, "status --watch", nil, "status", "--redis-addr", proxy.Addr(), "--lease-name", name, "-w", "-o", "json")
	waitFor(t, 10*time.Second, "the first line", func() bool { return strings.Contains(w.stdout.String(), `"event":"held"`) })
	failReadsAfterCut(t, client, proxy, name)
	if err := client.Set(t.Context(), leaseKey(name), "v1:200:bbbb:new-holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, "the new holder", func() bool {
		return strings.Contains(w.stdout.String(), `"holder":"new-holder"`) || !w.running()
	})
	if !w.running() || !strings.Contains(w.stdout.String(), `"event":"acquired"`) {
		t.Fatalf("status --watch after a failed read: running %v, stdout %q, stderr:\n%s", w.running(), w.stdout.String(), w.stderr.String())
	}
	w.signal(syscall.SIGTERM)
	if code := w.wait(5 * time.Second); code != 0 {
		t.Errorf("exit %d after SIGTERM; stderr %s", code, w.stderr.String())
	}
}
