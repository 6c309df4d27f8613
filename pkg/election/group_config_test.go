package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/election"
)

// TestGroupConfigValidation: NewGroup names the field and the rule of every wrong value, one
// case per rule, as New does; zero durations (the defaults) are accepted.
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
		want string // the whole error
	}{
		{func(c *election.GroupConfig) { c.Client = nil }, "GroupConfig.Client must be set"},
		{func(c *election.GroupConfig) { c.Group = "a{b}" }, `GroupConfig.Group "a{b}" must not contain '{' (it would break the {name} hash tag)`},
		{func(c *election.GroupConfig) { c.KeyPrefix = "p x" }, `GroupConfig.KeyPrefix "p x" must not contain whitespace or control characters (found ' ')`},
		{func(c *election.GroupConfig) { c.Identity = "a\nb" }, `GroupConfig.Identity "a\nb" must not contain control characters (found '\n')`},
		{func(c *election.GroupConfig) { c.Leases = []string{"a", "x y"} }, `GroupConfig.Leases[1] "x y" must not contain whitespace or control characters (found ' ')`},
		{func(c *election.GroupConfig) { c.MaxLeases = -1 }, "GroupConfig.MaxLeases (-1) must not be negative (0: no cap)"},
		{func(c *election.GroupConfig) { c.LeaseDuration = -time.Second }, "GroupConfig.LeaseDuration (-1s) must be positive (0 takes the default, 15s)"},
		{func(c *election.GroupConfig) { c.RenewDeadline = -time.Second }, "GroupConfig.RenewDeadline (-1s) must be positive (0 takes the default, 10s)"},
		{func(c *election.GroupConfig) { c.RetryPeriod = -time.Second }, "GroupConfig.RetryPeriod (-1s) must be positive (0 takes the default, 2s)"},
		{func(c *election.GroupConfig) { c.LeaseDuration = 1500 * time.Microsecond },
			"GroupConfig.LeaseDuration (1.5ms) must be a whole number of milliseconds"},
		{func(c *election.GroupConfig) { c.RenewDeadline = 15 * time.Second },
			"GroupConfig.RenewDeadline (15s) must be shorter than GroupConfig.LeaseDuration (default 15s) minus the clock-drift margin (152ms), i.e. below 14.848s; set GroupConfig.LeaseDuration too"},
		{func(c *election.GroupConfig) { c.RenewDeadline = 2 * time.Second },
			"GroupConfig.RenewDeadline (2s) must be greater than 1.2 × GroupConfig.RetryPeriod (default 2s), i.e. GroupConfig.RetryPeriod below 1.667s; set GroupConfig.RetryPeriod too"},
		{func(c *election.GroupConfig) { c.Callbacks.OnStartedLeading = nil }, "GroupConfig.Callbacks.OnStartedLeading must be set"},
		{func(c *election.GroupConfig) { c.Callbacks.OnStoppedLeading = nil }, "GroupConfig.Callbacks.OnStoppedLeading must be set"},
	} {
		cfg := valid()
		tc.set(&cfg)
		if _, err := election.NewGroup(cfg); err == nil || err.Error() != tc.want {
			t.Errorf("NewGroup: err = %v\n\twant %s", err, tc.want)
		}
	}
}
