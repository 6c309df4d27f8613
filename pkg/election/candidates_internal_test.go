package election

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
)

// hangingAdvertise is a store whose heartbeat call hangs until unblock is closed.
type hangingAdvertise struct {
	store
	entered, unblock chan struct{}
}

func (s hangingAdvertise) advertise(ctx context.Context, _ time.Duration, _ int64, _ string, _ bool) (leasekit.Candidates, error) {
	close(s.entered)
	<-s.unblock
	return leasekit.Candidates{}, ctx.Err()
}

// TestHeartbeatOffTheMutex: the candidate registry stays off the election's path (issue 46): a
// heartbeat whose Redis call hangs does not hold e.mu, so Status (and setFollowing, which the
// trust guard's expire runs at the renew deadline) answer at once.
func TestHeartbeatOffTheMutex(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer client.Close()
	e, err := New(Config{Client: client, LeaseName: "off-the-path", Identity: "a"})
	if err != nil {
		t.Fatal(err)
	}
	s := hangingAdvertise{store: e.store, entered: make(chan struct{}), unblock: make(chan struct{})}
	e.store = s
	defer close(s.unblock)
	go func() { _, _ = e.heartbeat(context.Background(), time.Second, false) }()
	<-s.entered
	done := make(chan struct{})
	go func() {
		_ = e.Status()
		e.setFollowing()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Status and setFollowing blocked while a heartbeat's Redis call hung: the heartbeat holds e.mu across it")
	}
}
