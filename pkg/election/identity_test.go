package election_test

import (
	"context"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/ciskip"
	"github.com/elector/elector/pkg/election"
)

// TestIdentityDefault: an empty Identity is $POD_NAME, else the host name, in Config and
// GroupConfig alike (as in the elector command), instead of an error that leaves the README's
// snippets with a nil Elector or Group.
func TestIdentityDefault(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer client.Close()
	host, err := os.Hostname()
	if err != nil {
		ciskip.Skip(t, "no host name: %v", err)
	}
	cb := election.Callbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}}
	gcb := election.GroupCallbacks{OnStartedLeading: func(context.Context, string) {}, OnStoppedLeading: func(string) {}}
	for _, tc := range []struct{ pod, want string }{{"pod-7", "pod-7"}, {"", host}} {
		t.Setenv("POD_NAME", tc.pod)
		e, err := election.New(election.Config{Client: client, LeaseName: "job", Callbacks: cb})
		if err != nil || election.ConfigOf(e).Identity != tc.want {
			t.Errorf("POD_NAME=%q: New: %v, identity %q; want %q", tc.pod, err, identityOf(e), tc.want)
		}
		g, err := election.NewGroup(election.GroupConfig{Client: client, Group: "g", Leases: []string{"a"}, Callbacks: gcb})
		if err != nil || g == nil {
			t.Errorf("POD_NAME=%q: NewGroup without Identity: %v", tc.pod, err)
		}
	}
}

func identityOf(e *election.Elector) string {
	if e == nil {
		return "(no elector)"
	}
	return election.ConfigOf(e).Identity
}
