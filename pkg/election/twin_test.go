package election_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
)

// Two processes under one identity (two `elector run` on one host without --identity): the
// follower warns that another process campaigns as itself (issue 28 item 6). A record of the
// same identity that nobody renews — a crashed predecessor of a restarted container — is no
// twin: no warning while it runs out.
func TestTwinIdentityWarned(t *testing.T) {
	srv := redistest.Start(t)
	cfg := func() election.Config {
		return election.Config{
			Client: srv.Client(t), LeaseName: "twin", Identity: "host-1",
			LeaseDuration: time.Second, RenewDeadline: 600 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
			Callbacks: election.Callbacks{OnStartedLeading: func(ctx context.Context) { <-ctx.Done() }, OnStoppedLeading: func() {}},
		}
	}
	start := func(t *testing.T) (func() []string, context.CancelFunc, chan struct{}) {
		e, err := election.New(cfg())
		if err != nil {
			t.Fatal(err)
		}
		logger, lines := captureLog()
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
		done := make(chan struct{})
		go func() { defer close(done); _ = e.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		return lines, cancel, done
	}
	admin := srv.Client(t)
	record := func() string { return admin.Get(context.Background(), "elector:{twin}:lease").Val() }
	warned := func(lines []string) bool {
		for _, l := range lines {
			if strings.Contains(l, "another process campaigns under this replica's identity") {
				return true
			}
		}
		return false
	}

	t.Run("live twin", func(t *testing.T) {
		a, _, _ := start(t)
		waitFor(t, "a leads", func() bool { return strings.HasSuffix(record(), ":host-1") })
		b, _, _ := start(t)
		waitFor(t, "the warning of one of the two", func() bool { return warned(a()) || warned(b()) })
	})

	t.Run("crashed predecessor", func(t *testing.T) {
		// A record of this identity, by another instance, that nobody renews.
		if err := admin.Set(context.Background(), "elector:{twin}:lease", "v1:5:deadbeef:host-1", 800*time.Millisecond).Err(); err != nil {
			t.Fatal(err)
		}
		b, _, _ := start(t)
		waitFor(t, "b leads after the old record ran out", func() bool { return strings.HasSuffix(record(), ":host-1") && !strings.Contains(record(), "deadbeef") })
		if warned(b()) {
			t.Fatalf("warned about a record nobody renewed:\n%s", strings.Join(b(), "\n"))
		}
	})
}
