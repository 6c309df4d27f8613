package election_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/election"
)

// TestGroupConfigValidation: NewGroup names the field of every wrong value; zero durations
// (the defaults) are accepted.
func TestGroupConfigValidation(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer client.Close()
	valid := func() election.GroupConfig {
		return election.GroupConfig{
			Client: client, Group: "jobs", Identity: "pod-a", Leases: []string{"a"},
			Callbacks: election.GroupCallbacks{OnStartedLeading: func(context.Context, string) {}, OnStoppedLeading: func(string) {}},
		}
	}
	if _, err := election.NewGroup(valid()); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for _, tc := range []struct {
		set  func(*election.GroupConfig)
		want string
	}{
		{func(c *election.GroupConfig) { c.Client = nil }, "Client must be set"},
		{func(c *election.GroupConfig) { c.Group = "a{b}" }, `Group "a{b}"`},
		{func(c *election.GroupConfig) { c.KeyPrefix = "p x" }, `KeyPrefix "p x"`},
		{func(c *election.GroupConfig) { c.Identity = "a\nb" }, "Identity"},
		{func(c *election.GroupConfig) { c.MaxLeases = -1 }, "MaxLeases must not be negative"},
		{func(c *election.GroupConfig) { c.LeaseDuration = -time.Second }, "LeaseDuration must be positive"},
		{func(c *election.GroupConfig) { c.RenewDeadline = -time.Second }, "RenewDeadline must be positive"},
		{func(c *election.GroupConfig) { c.RetryPeriod = -time.Second }, "RetryPeriod must be positive"},
		{func(c *election.GroupConfig) { c.RenewDeadline = 15 * time.Second }, "renew deadline (15s) must be shorter than lease duration (15s)"},
		{func(c *election.GroupConfig) { c.Callbacks.OnStoppedLeading = nil }, "Callbacks.OnStartedLeading and Callbacks.OnStoppedLeading must be set"},
		{func(c *election.GroupConfig) { c.Leases = []string{"x y"} }, `add lease "x y"`},
	} {
		cfg := valid()
		tc.set(&cfg)
		_, err := election.NewGroup(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "group") {
			t.Errorf("NewGroup: err = %v, want one naming %q", err, tc.want)
		}
	}
}
