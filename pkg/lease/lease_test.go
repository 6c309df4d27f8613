package lease_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	impl "github.com/elector/elector/internal/lease"
	"github.com/elector/elector/pkg/lease"
)

func client(t *testing.T) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestFacadeIsTheImplementation checks that a public Lease writes and reads the records of the
// implementation, field for field: what the public Record says is what Redis stores, and what
// package election's leases (internal/lease) parse from it.
func TestFacadeIsTheImplementation(t *testing.T) {
	ctx := context.Background()
	c := client(t)
	l, err := lease.New(c, "facade", lease.Options{Prefix: "pub", Identity: "pod:a"})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	ok, st, err := l.Acquire(ctx, 10*time.Second)
	after := time.Now()
	if err != nil || !ok || !st.Held || st.TTL <= 0 || st.TTL > 10*time.Second {
		t.Fatalf("Acquire = %v, %+v, %v; want acquired for at most 10s", ok, st, err)
	}
	term := st.Record
	if term.IsZero() || term.Identity != "pod:a" || term.Instance == "" || term.Token <= 0 {
		t.Fatalf("term = %+v; want identity pod:a, an instance and a token", term)
	}
	raw, err := c.Get(ctx, impl.KeysFor("pub", "facade").Lease).Result()
	if err != nil || raw != term.String() {
		t.Fatalf("Redis holds %q, %v; want the record's String %q", raw, err, term.String())
	}
	parsed, err := impl.ParseRecord(raw)
	if err != nil || lease.Record(parsed) != term {
		t.Fatalf("the implementation parses %q as %+v, %v; want %+v", raw, parsed, err, term)
	}
	// The token is Redis's clock in microseconds; both clocks are this machine's.
	if at, ok := term.AcquiredAt(); !ok || at.Before(before.Add(-time.Second)) || at.After(after.Add(time.Second)) {
		t.Fatalf("AcquiredAt = %v, %v; want between %v and %v", at, ok, before, after)
	}
	got, err := l.Get(ctx)
	if err != nil || !got.Held || got.Record != term {
		t.Fatalf("Get = %+v, %v; want held by %+v", got, err, term)
	}

	other, err := lease.New(c, "facade", lease.Options{Prefix: "pub", Identity: "pod:a"})
	if err != nil {
		t.Fatal(err)
	}
	// Same identity, another instance: the owner check tells them apart.
	if ok, err := other.Renew(ctx, lease.Record{Token: term.Token, Instance: "someone-else", Identity: "pod:a"}, time.Second); ok || err != nil {
		t.Fatalf("Renew of a record with another instance = %v, %v; want false", ok, err)
	}
	if ok, st, err := other.Acquire(ctx, time.Second); ok || err != nil || st.Record != term {
		t.Fatalf("second Acquire = %v, %+v, %v; want refused, held by %+v", ok, st, err, term)
	}
	if ok, err := l.Renew(ctx, term, 20*time.Second); !ok || err != nil {
		t.Fatalf("Renew = %v, %v; want true", ok, err)
	}
	if ok, err := l.Release(ctx, term); !ok || err != nil {
		t.Fatalf("Release = %v, %v; want true", ok, err)
	}
	if ok, err := l.Release(ctx, term); ok || err != nil {
		t.Fatalf("second Release = %v, %v; want false (the term is over)", ok, err)
	}
	ok, st, err = other.Acquire(ctx, time.Second)
	if err != nil || !ok || st.Record.Token <= term.Token {
		t.Fatalf("Acquire after the release = %v, %+v, %v; want a term with a token above %d", ok, st, err, term.Token)
	}
	if got, err := l.Get(ctx); err != nil || got.Record != st.Record {
		t.Fatalf("Get = %+v, %v; want held by %+v", got, err, st.Record)
	}
}

// TestFacadeReplicaAck checks that Options.ReplicaAck reaches the writes: with no replica to
// acknowledge, the master grants the term and Acquire says it is not replicated.
func TestFacadeReplicaAck(t *testing.T) {
	ctx := context.Background()
	l, err := lease.New(client(t), "facade-ack", lease.Options{Identity: "pod-a", ReplicaAck: lease.ReplicaAck{Replicas: 1, Timeout: 10 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ok, st, err := l.Acquire(ctx, 10*time.Second)
	if !ok || !errors.Is(err, lease.ErrNotReplicated) {
		t.Fatalf("Acquire without replicas = %v, %+v, %v; want acquired and ErrNotReplicated", ok, st, err)
	}
	if _, err := l.Release(ctx, st.Record); err != nil {
		t.Fatal(err)
	}
}

// TestFacadeNewErrors checks that New reports bad input by name, as the implementation does.
func TestFacadeNewErrors(t *testing.T) {
	c := client(t)
	for _, tc := range []struct {
		name string
		opts lease.Options
		want string
	}{
		{"", lease.Options{}, "name"},
		{"a{b", lease.Options{}, "name"},
		{"job", lease.Options{ReplicaAck: lease.ReplicaAck{Replicas: 1}}, "Timeout"},
	} {
		if _, err := lease.New(c, tc.name, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %+v) = %v; want an error naming %s", tc.name, tc.opts, err, tc.want)
		}
	}
	if _, err := lease.New(nil, "job", lease.Options{}); err == nil {
		t.Error("New with a nil client succeeded")
	}
}

// BenchmarkAcquireRelease is internal/lease's benchmark of the same name through the facade:
// the two report the same allocations per cycle (the facade converts values, it allocates
// nothing of its own).
func BenchmarkAcquireRelease(b *testing.B) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	b.Cleanup(func() { _ = c.Close() })
	l, err := lease.New(c, "bench", lease.Options{Identity: "pod-a"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		ok, st, err := l.Acquire(ctx, 10*time.Second)
		if err != nil || !ok {
			b.Fatalf("Acquire = %v, %v", ok, err)
		}
		if ok, err := l.Release(ctx, st.Record); err != nil || !ok {
			b.Fatalf("Release = %v, %v", ok, err)
		}
	}
}
