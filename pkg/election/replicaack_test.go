package election_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// With ReplicaAck, a term starts only once a replica acknowledged the acquisition: without a
// replica nobody leads, with one the election works as usual.
func TestReplicaAckGatesLeadership(t *testing.T) {
	// Slower than the package's test timing: a replica's acknowledgement under -race beside
	// busy loops can take longer than the 20ms a faster timing would allow for the WAIT, and
	// each renewal gets several WAITs (RenewDeadline / RetryPeriod) before the term ends.
	const (
		leaseDuration = 2 * time.Second
		renewDeadline = 1500 * time.Millisecond
		retryPeriod   = 400 * time.Millisecond
		ackTimeout    = 300 * time.Millisecond
	)
	master := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: master.Addr(), ContextTimeoutEnabled: true})
	defer client.Close()
	started := make(chan int64, 10)
	e, err := election.New(election.Config{
		Client: client, LeaseName: "acked", Identity: "pod-a",
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		ReplicaAck: lease.ReplicaAck{Replicas: 1, Timeout: ackTimeout},
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) { started <- election.TokenFrom(ctx); <-ctx.Done() },
			OnStoppedLeading: func() {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	defer func() { cancel(); <-done }()

	select {
	case tok := <-started:
		t.Fatalf("led (token %d) although no replica acknowledged the acquisition", tok)
	case <-time.After(2 * leaseDuration):
	}
	// The acquisition stands on the master (it is retried, same term), but nobody works.
	if st, err := election.LeaseOf(e).Get(ctx); err != nil || !st.Held || e.IsLeader() {
		t.Fatalf("lease %+v, %v, leader %v: want held in Redis but not trusted", st, err, e.IsLeader())
	}

	redistest.Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(master.Port()))
	select {
	case tok := <-started:
		if tok <= 0 {
			t.Fatalf("token %d", tok)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("no term within 20s of a replica joining")
	}
	time.Sleep(3 * retryPeriod) // renewals are acknowledged too: the term holds
	if !e.IsLeader() {
		t.Fatal("lost the term with an acknowledging replica")
	}
}

func TestReplicaAckValidation(t *testing.T) {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer client.Close()
	for _, ack := range []lease.ReplicaAck{{Replicas: -1}, {Replicas: 1}, {Replicas: 1, Timeout: 1500 * time.Microsecond}, {Replicas: 1, Timeout: 3 * time.Second}} {
		_, err := election.New(election.Config{
			Client: client, LeaseName: "x", Identity: "a", ReplicaAck: ack,
			Callbacks: election.Callbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
		})
		if err == nil || !contains(err.Error(), "ReplicaAck") {
			t.Errorf("ReplicaAck %+v: err = %v, want one naming ReplicaAck", ack, err)
		}
	}
}
