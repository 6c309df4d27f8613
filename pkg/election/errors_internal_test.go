package election

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/redisfail"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// TestErrorLogRepeatsWithFix: a failure that persists is logged again at error level every
// errorRepeat with its fix (not only once, then silence), attempts between are V(4), the
// failure is kept for /leader and elector_redis_up follows it.
func TestErrorLogRepeatsWithFix(t *testing.T) {
	var lines []string
	logger := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{Verbosity: 0})
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	l := &errorLog{}
	refused := refusedBy(t)["script"]
	errorLines := func() (n int) {
		for _, s := range lines {
			if strings.Contains(s, `"error"`) {
				n++
				if !strings.Contains(s, "+set") {
					t.Errorf("error line without the fix: %s", s)
				}
			}
		}
		return n
	}
	l.failed(logger, m, "job", "acquire", refused, now)
	for i := 0; i < 10; i++ { // 9.9 s of retries: not repeated
		now = now.Add(990 * time.Millisecond)
		l.failed(logger, m, "job", "acquire", refused, now)
	}
	if n := errorLines(); n != 1 {
		t.Fatalf("%d error lines within %v, want 1:\n%s", n, errorRepeat, strings.Join(lines, "\n"))
	}
	now = now.Add(errorRepeat)
	l.failed(logger, m, "job", "acquire", refused, now)
	if n := errorLines(); n != 2 {
		t.Fatalf("%d error lines after %v, want 2 (repeated):\n%s", n, errorRepeat, strings.Join(lines, "\n"))
	}
	f := l.failure()
	if f == nil || f.Reason != "noperm" || f.Count != 12 || f.Op != "acquire" || !strings.Contains(f.Fix, "+set") || !f.Since.Equal(time.Unix(1000, 0)) {
		t.Errorf("failure %+v, want noperm ×12 since the first, with the fix", f)
	}
	if v := gathered(t, reg, "elector_redis_up", "name", "job"); v != 0 {
		t.Errorf("elector_redis_up %v while failing, want 0", v)
	}
	if v := gathered(t, reg, "elector_redis_errors_total", "reason", "noperm"); v != 12 {
		t.Errorf("elector_redis_errors_total{reason=noperm} %v, want 12", v)
	}
	l.succeeded(logr.Discard())
	if l.failure() != nil || gathered(t, reg, "elector_redis_up", "name", "job") != 1 {
		t.Errorf("after a success: failure %+v, elector_redis_up %v; want nil, 1", l.failure(), gathered(t, reg, "elector_redis_up", "name", "job"))
	}
}

// refusedBy returns the errors of real Redis 7 servers for each misconfiguration: an ACL
// that refuses a command (outside and inside a script) or the lease's keys, a wrong password,
// a missing password, a read-only replica.
func refusedBy(t *testing.T) map[string]error {
	t.Helper()
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := srv.Client(t)
	for _, rule := range [][]any{
		{"ACL", "SETUSER", "observer", "on", ">pw", "resetkeys", "resetchannels", "%R~elector:*", "-@all", "+get", "+pttl", "+multi", "+exec"},
		{"ACL", "SETUSER", "noset", "on", ">pw", "resetkeys", "resetchannels", "~elector:*", "&elector:*", "-@all", "+evalsha", "+eval", "+get", "+time", "+publish"},
	} {
		if err := admin.Do(ctx, rule...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	as := func(user, password string) *redis.Client {
		opts := srv.Options()
		opts.Username, opts.Password, opts.MaxRetries = user, password, -1
		c := redis.NewClient(opts)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	errs := map[string]error{}
	errs["scan"] = as("observer", "pw").Scan(ctx, 0, "*", 10).Err()
	other, err := leasekit.New(as("observer", "pw"), "x", lease.Options{Prefix: "other"})
	if err != nil {
		t.Fatal(err)
	}
	_, errs["keys"] = other.Get(ctx)
	l, err := leasekit.New(as("noset", "pw"), "x", lease.Options{Identity: "a"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, errs["script"] = l.Acquire(ctx, time.Second)
	_, errs["subscribe"] = other.Subscribe(ctx)
	errs["wrongpass"] = as("observer", "wrong").Ping(ctx).Err()
	locked := redistest.Start(t, "--requirepass", "pw")
	opts := locked.Options()
	opts.Password = ""
	nopass := redis.NewClient(opts)
	t.Cleanup(func() { _ = nopass.Close() })
	errs["noauth"] = nopass.Ping(ctx).Err()
	// Another kind of server at the address: an HTTP one on loopback.
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	notRedis := redis.NewClient(&redis.Options{Addr: strings.TrimPrefix(web.URL, "http://"), MaxRetries: -1, Protocol: 2})
	t.Cleanup(func() { _ = notRedis.Close() })
	errs["http"] = notRedis.Ping(ctx).Err()
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(srv.Port()))
	errs["readonly"] = replica.Client(t).Set(ctx, "k", "v", 0).Err()
	for k, err := range errs {
		if err == nil {
			t.Fatalf("%s: Redis did not refuse", k)
		}
	}
	return errs
}

// TestHintNamesTheFix: each misconfiguration has its own reason and a fix that names the
// ACL permission to add or the setting to check, as a field of Config (never a flag).
func TestHintNamesTheFix(t *testing.T) {
	errs := refusedBy(t)
	for _, tc := range []struct {
		name, reason, want string
	}{
		{"scan", "noperm", "+scan"},
		{"keys", "noperm", "~other:*"},
		{"script", "noperm", "+set"},
		{"wrongpass", "auth", "Password of Config.Client"},
		{"noauth", "auth", "Username and Password"},
		{"readonly", "readonly", "master"},
		{"subscribe", "noperm", "+subscribe"},
		{"http", "protocol", "address of Config.Client"},
	} {
		err := errs[tc.name]
		if r := redisfail.Reason(err); r != tc.reason {
			t.Errorf("%s: redisfail.Reason(%q) = %q, want %q", tc.name, err, r, tc.reason)
		}
		if h := redisfail.Hint(err, redisfail.Library); !strings.Contains(h, tc.want) || strings.Contains(h, "--") {
			t.Errorf("%s: redisfail.Hint(%q) = %q, want it to name %q", tc.name, err, h, tc.want)
		}
	}
	if !strings.Contains(errs["keys"].Error(), "GET other:{x}:lease") {
		t.Errorf("EXECABORT of lease.Get does not name the refused command and key: %v", errs["keys"])
	}
}

// gathered returns the value of the series of family name that has label=value, -1 if none.
func gathered(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					if c := m.GetCounter(); c != nil {
						return c.GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}
