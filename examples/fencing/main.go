// Command fencing shows why a lease alone cannot protect a resource, and how a fencing
// token does: a leader is paused (a long GC, a frozen VM) past its lease, another replica
// takes over, and the paused one wakes up still believing it leads. Its write is refused,
// because it carries an older token than the one the store has already seen.
//
//	go run ./examples/fencing --redis-addr 127.0.0.1:6379
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/fence"
	"github.com/elector/elector/pkg/lease"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("fencing", flag.ContinueOnError)
	addr := fs.String("redis-addr", "127.0.0.1:6379", "Redis address")
	ttl := fs.Duration("lease", 300*time.Millisecond, "lease duration")
	if err := fs.Parse(args); err != nil {
		return err
	}
	client := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true})
	defer client.Close()

	// The protected resource: a value in Redis whose writes go through a fence.
	store, err := fence.New(client, "{example-orders}:fence")
	if err != nil {
		return err
	}
	const key = "{example-orders}:state"

	a, err := lease.New(client, "example-fencing", lease.Options{Identity: "pod-a"})
	if err != nil {
		return err
	}
	b, err := lease.New(client, "example-fencing", lease.Options{Identity: "pod-b"})
	if err != nil {
		return err
	}

	ok, st, err := a.Acquire(ctx, *ttl)
	if err != nil || !ok {
		return fmt.Errorf("pod-a could not acquire (holder %+v): %v", st.Record, err)
	}
	termA := st.Record
	tokenA := termA.Token
	fmt.Fprintf(out, "pod-a leads with token %d and writes\n", tokenA)
	if err := store.Set(ctx, tokenA, key, "written by pod-a"); err != nil {
		return err
	}

	fmt.Fprintf(out, "pod-a pauses for %v (longer than its %v lease) without renewing\n", 2**ttl, *ttl)
	time.Sleep(2 * *ttl)

	ok, st, err = b.Acquire(ctx, *ttl)
	if err != nil || !ok {
		return fmt.Errorf("pod-b could not acquire (holder %+v): %v", st.Record, err)
	}
	tokenB := st.Record.Token
	fmt.Fprintf(out, "pod-b leads with token %d and writes\n", tokenB)
	if err := store.Set(ctx, tokenB, key, "written by pod-b"); err != nil {
		return err
	}

	fmt.Fprintf(out, "pod-a wakes up, still believing it leads, and writes with token %d\n", tokenA)
	err = store.Set(ctx, tokenA, key, "stale write by pod-a")
	if !errors.Is(err, fence.ErrStale) {
		return fmt.Errorf("the stale write was not refused: %v", err)
	}
	fmt.Fprintf(out, "refused: %v\n", err)
	if renewed, _ := a.Renew(ctx, termA, *ttl); !renewed {
		fmt.Fprintln(out, "pod-a's next renew fails too: it steps down")
	}
	v, err := client.Get(ctx, key).Result()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "the store holds %q\n", v)
	return nil
}
