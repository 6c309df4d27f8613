package reliability

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/testing/redistest"
	timingrules "github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/fence"
	"github.com/elector/elector/pkg/lease"
)

// The longest lease name and identity the library accepts, as leasewire.ValidateName and
// leasewire.ValidateIdentity document them.
const maxNameLen, maxIdentityLen = 200, 256

// checkErr fails unless err is a one-line error (a value with a newline must not split a log
// line) that mentions every one of want.
func checkErr(t *testing.T, what string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted, want an error mentioning %q", what, want)
		return
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("%s: error %q does not mention %q", what, msg, w)
		}
	}
	if strings.ContainsAny(msg, "\r\n") {
		t.Errorf("%s: error %q spans several lines", what, msg)
	}
}

// The library's bad-input table: every wrong argument of the public API is refused up front with
// an error that names the argument and, quoted, the value; the boundaries are accepted.
func TestBadInput(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // validation happens before any dial
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	long := func(n int) string { return strings.Repeat("x", n) }

	// Lease names and prefixes.
	for _, tc := range []struct{ name, want string }{
		{"", "must not be empty"},
		{"a{b", "hash tag"},
		{"a}b", "hash tag"},
		{"{job}", "hash tag"},
		{"a b", "whitespace"},
		{"a\tb", "whitespace"},
		{"a\nb", "whitespace"},
		{"a\u00a0b", "whitespace"}, // no-break space
		{"a\x00b", "control"},
		{"\xff", "UTF-8"},
		{long(maxNameLen + 1), "at most 200"},
	} {
		_, err := leasekit.New(client, tc.name, lease.Options{})
		checkErr(t, "lease.New name "+tc.name, err, "name", tc.want)
		_, err = leasekit.New(client, "job", lease.Options{Prefix: tc.name})
		if tc.name != "" { // an empty prefix means the default
			checkErr(t, "lease.New prefix "+tc.name, err, "key prefix", tc.want)
		}
		_, err = election.New(electionConfig(client, func(c *election.Config) { c.LeaseName = tc.name }))
		checkErr(t, "election.New LeaseName "+tc.name, err, "LeaseName", tc.want)
	}
	if _, err := leasekit.New(client, long(maxNameLen), lease.Options{Prefix: long(maxNameLen)}); err != nil {
		t.Errorf("a name and prefix of exactly %d bytes: %v", maxNameLen, err)
	}

	// Identities.
	for _, tc := range []struct{ identity, want string }{
		{"pod\nb", "control characters"},
		{"pod\rb", "control characters"},
		{"pod\x1b[31mred", "control characters"},
		{"pod\u0085", "control characters"}, // NEL
		{"\xffpod", "UTF-8"},
		{long(maxIdentityLen + 1), "at most 256"},
	} {
		_, err := leasekit.New(client, "job", lease.Options{Identity: tc.identity})
		checkErr(t, "lease.New identity", err, "identity", tc.want)
		_, err = election.New(electionConfig(client, func(c *election.Config) { c.Identity = tc.identity }))
		checkErr(t, "election.New Identity", err, "Identity", tc.want)
	}
	// An empty Identity takes $POD_NAME, else the host name.
	if e, err := election.New(electionConfig(client, func(c *election.Config) { c.Identity = "" })); err != nil {
		t.Errorf("election.New without Identity: %v, want the default identity", err)
	} else if want := defaultIdentity(); e.Status().Identity != want {
		t.Errorf("election.New without Identity: identity %q, want the default %q", e.Status().Identity, want)
	}
	for _, ok := range []string{long(maxIdentityLen), "ns/pod:with:colons and spaces", "ünïcode-pod"} {
		if _, err := election.New(electionConfig(client, func(c *election.Config) { c.Identity = ok })); err != nil {
			t.Errorf("identity %q refused: %v", ok, err)
		}
	}

	// Nil clients.
	_, err := leasekit.New(nil, "job", lease.Options{})
	checkErr(t, "lease.New nil client", err, "client is nil")
	_, err = election.New(electionConfig(nil, nil))
	checkErr(t, "election.New nil Client", err, "Client")
	_, err = fence.New(nil, "{job}:fence")
	checkErr(t, "fence.New nil client", err, "client is nil")
	_, err = fence.New(client, "")
	checkErr(t, "fence.New empty key", err, "key")

	// Durations: lease calls refuse any ttl that is not a positive whole number of milliseconds.
	l, err := leasekit.New(client, "job", lease.Options{Identity: "pod-a"})
	if err != nil {
		t.Fatal(err)
	}
	term := lease.Record{Token: 1, Instance: l.Instance(), Identity: "pod-a"}
	for _, ttl := range []time.Duration{0, -time.Second, time.Microsecond, 1500 * time.Microsecond} {
		_, _, err := l.Acquire(ctx, ttl)
		checkErr(t, "Acquire ttl "+ttl.String(), err, `"job"`, "ttl", ttl.String())
		_, err = l.Renew(ctx, term, ttl)
		checkErr(t, "Renew ttl "+ttl.String(), err, `"job"`, "ttl", ttl.String())
	}
	// timing.Validate (the check the CLI applies to its flags, as timing.Check) refuses zero and negative values; Config
	// fills zero values with the defaults (documented) and refuses negative ones by field.
	for _, d := range [][3]time.Duration{{0, 10 * time.Second, 2 * time.Second}, {15 * time.Second, 0, 2 * time.Second},
		{15 * time.Second, 10 * time.Second, 0}, {-time.Second, 10 * time.Second, 2 * time.Second}} {
		checkErr(t, "timing.Validate", timingrules.Validate(d[0], d[1], d[2]), "must be positive")
	}
	for field, set := range map[string]func(*election.Config){
		"LeaseDuration": func(c *election.Config) { c.LeaseDuration = -time.Second },
		"RenewDeadline": func(c *election.Config) { c.RenewDeadline = -time.Second },
		"RetryPeriod":   func(c *election.Config) { c.RetryPeriod = -time.Nanosecond },
	} {
		_, err := election.New(electionConfig(client, set))
		checkErr(t, "election.New negative "+field, err, field, "must be positive")
	}
	// Zero durations take the defaults (pkg/election's TestConfigValidation checks which).
	if _, err := election.New(electionConfig(client, func(c *election.Config) { c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 0, 0, 0 })); err != nil {
		t.Fatalf("zero durations (the defaults): %v", err)
	}
	for _, tc := range []struct {
		lease, renew, retry time.Duration
		want                string
	}{
		{10 * time.Second, 10 * time.Second, time.Second, "Config.RenewDeadline (10s) must be shorter"},
		{10 * time.Second, 9950 * time.Millisecond, time.Second, "clock-drift"},
		{15 * time.Second, 10 * time.Second, 9 * time.Second, "1.2 × Config.RetryPeriod"},
		{15*time.Second + time.Microsecond, 10 * time.Second, 2 * time.Second, "whole number of milliseconds"},
	} {
		_, err := election.New(electionConfig(client, func(c *election.Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = tc.lease, tc.renew, tc.retry
		}))
		checkErr(t, "election.New timing", err, tc.want)
	}

	// Callbacks: an Elector without them may Observe; Run needs OnStartedLeading.
	observer, err := election.New(electionConfig(client, func(c *election.Config) { c.Callbacks = election.Callbacks{} }))
	if err != nil {
		t.Fatalf("election.New without callbacks (an observer): %v", err)
	}
	checkErr(t, "Run without OnStartedLeading", observer.Run(context.Background()), "Config.Callbacks.OnStartedLeading")

	// The Redis client builder.
	for _, tc := range []struct {
		cfg  redisclient.Config
		want string
	}{
		{redisclient.Config{Mode: redisclient.ModeStandalone}, "--redis-addr"},
		{redisclient.Config{Mode: redisclient.ModeStandalone, Addrs: []string{"redis://h:6379"}}, "URL"},
		{redisclient.Config{Mode: redisclient.ModeStandalone, Addrs: []string{"h:0"}}, "port"},
		{redisclient.Config{Mode: redisclient.ModeStandalone, Addrs: []string{"a:1", "b:2"}}, "exactly one"},
		{redisclient.Config{Mode: "master-replica", Addrs: []string{"h:1"}}, "--redis-mode"},
		{redisclient.Config{Mode: redisclient.ModeSentinel, Addrs: []string{"h:1"}}, "--sentinel-master"},
		{redisclient.Config{Mode: redisclient.ModeCluster, Addrs: []string{"h:1"}, DB: 1}, "--redis-db"},
		{redisclient.Config{Mode: redisclient.ModeStandalone, Addrs: []string{"h:1"}, TLSCAFile: "/ca.pem"}, "requires --redis-tls"},
	} {
		_, err := redisclient.New(tc.cfg)
		var ue *redisclient.UsageError
		if !errors.As(err, &ue) {
			t.Errorf("redisclient.New(%v) = %v, want a *UsageError", tc.cfg, err)
		}
		checkErr(t, "redisclient.New", err, tc.want)
	}
}

// electionConfig returns a valid Config through client, changed by set.
func electionConfig(client redis.UniversalClient, set func(*election.Config)) election.Config {
	cfg := election.Config{
		Client: client, LeaseName: "job", Identity: "pod-a",
		Callbacks: election.Callbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
	}
	if set != nil {
		set(&cfg)
	}
	return cfg
}

// Elector.Token returns 0 when the replica does not lead, and the protocol's tokens are
// positive: a fenced write with a token of 0 or less comes from a caller that does not lead and
// must be refused, also by a fence that has not accepted any token yet.
func TestFenceRefusesNonPositiveTokens(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	for _, token := range []int64{0, -1} {
		f, err := fence.New(c, "{job}:fence")
		if err != nil {
			t.Fatal(err)
		}
		c.Del(ctx, "{job}:fence", "{job}:state")
		if err := f.Set(ctx, token, "{job}:state", "written by a non-leader"); err == nil {
			t.Errorf("fenced write with token %d on a fresh fence was accepted", token)
		}
		if n, _ := c.Exists(ctx, "{job}:state").Result(); n != 0 {
			t.Errorf("fenced write with token %d wrote the protected key", token)
		}
	}
}

// defaultIdentity is the identity election.New gives a Config without one: $POD_NAME, else the
// host name.
func defaultIdentity() string {
	if pod := os.Getenv("POD_NAME"); pod != "" {
		return pod
	}
	host, _ := os.Hostname()
	return host
}
