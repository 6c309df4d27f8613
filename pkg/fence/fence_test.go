package fence_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/fence"
)

func TestFenceRejectsStaleTokens(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	f, err := fence.New(c, "{orders}:fence")
	if err != nil {
		t.Fatal(err)
	}
	if seen, err := f.Seen(ctx); err != nil || seen != 0 {
		t.Fatalf("Seen on a new fence = %d, %v", seen, err)
	}
	if err := f.Set(ctx, 10, "{orders}:state", "from-10"); err != nil {
		t.Fatalf("first write: %v", err)
	}
	// The same token again is fine: a leader writes many times in one term.
	if err := f.Set(ctx, 10, "{orders}:state", "again-10"); err != nil {
		t.Fatalf("same token: %v", err)
	}
	if err := f.Set(ctx, 12, "{orders}:state", "from-12"); err != nil {
		t.Fatalf("newer token: %v", err)
	}
	err = f.Set(ctx, 11, "{orders}:state", "stale-11")
	var stale *fence.StaleTokenError
	if !errors.As(err, &stale) || stale.Token != 11 || stale.Seen != 12 || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale write: err = %v, want StaleTokenError{11, 12}", err)
	}
	if got := c.Get(ctx, "{orders}:state").Val(); got != "from-12" {
		t.Fatalf("state = %q after a rejected write, want from-12", got)
	}
	if seen, _ := f.Seen(ctx); seen != 12 {
		t.Fatalf("Seen = %d, want 12", seen)
	}
	// Any command: the reply comes back.
	reply, err := f.Do(ctx, 12, []string{"{orders}:log"}, "RPUSH", "{orders}:log", "a", "b")
	if err != nil || reply != int64(2) {
		t.Fatalf("fenced RPUSH = %v, %v; want 2", reply, err)
	}
	if _, err := f.Do(ctx, 3, []string{"{orders}:log"}, "RPUSH", "{orders}:log", "c"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("stale RPUSH: err = %v", err)
	}
	if n := c.LLen(ctx, "{orders}:log").Val(); n != 2 {
		t.Fatalf("log has %d entries, want 2", n)
	}
}

func TestFenceBadInput(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	if _, err := fence.New(nil, "k"); err == nil {
		t.Error("New(nil) succeeded")
	}
	if _, err := fence.New(c, ""); err == nil {
		t.Error("New with an empty key succeeded")
	}
	f, _ := fence.New(c, "fence")
	if _, err := f.Do(ctx, 1, nil); err == nil {
		t.Error("Do without a command succeeded")
	}
	c.Set(ctx, "fence", "junk", 0)
	if err := f.Set(ctx, 5, "k", "v"); err == nil || !strings.Contains(err.Error(), "does not hold an integer") {
		t.Errorf("corrupt fence key: err = %v", err)
	}
	c.Set(ctx, "fence", "1", 0)
	c.HSet(ctx, "h", "f", "v")
	if err := f.Set(ctx, 5, "h", "v"); err != nil {
		t.Errorf("SET over a hash should replace it: %v", err)
	}
	if _, err := f.Do(ctx, 6, []string{"h"}, "LPUSH", "h", "x"); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Errorf("failing write: err = %v", err)
	}
	if seen, _ := f.Seen(ctx); seen != 5 {
		t.Errorf("a failed write moved the fence to %d, want 5", seen)
	}
}

// Tokens are compared exactly, also past 2^53 where two tokens can be the same double: a
// token one below the largest seen is stale.
func TestFenceComparesLargeTokensExactly(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	f, err := fence.New(c, "{big}:fence")
	if err != nil {
		t.Fatal(err)
	}
	const big = int64(1)<<53 + 1 // 9007199254740993: as a double, 2^53
	if err := f.Set(ctx, big, "{big}:state", "new"); err != nil {
		t.Fatalf("write with %d: %v", big, err)
	}
	for _, stale := range []int64{big - 1, big - 2, 1<<53 - 1} {
		err := f.Set(ctx, stale, "{big}:state", "stale")
		var se *fence.StaleTokenError
		if !errors.As(err, &se) || se.Seen != big {
			t.Fatalf("write with %d after %d: err = %v, want StaleTokenError", stale, big, err)
		}
	}
	if got := c.Get(ctx, "{big}:state").Val(); got != "new" {
		t.Fatalf("state = %q, want new", got)
	}
	// Larger tokens, of any length up to int64, pass.
	for _, newer := range []int64{big, big + 1, 1 << 62, 1<<63 - 1} {
		if err := f.Set(ctx, newer, "{big}:state", "newer"); err != nil {
			t.Fatalf("write with %d: %v", newer, err)
		}
	}
	if seen, _ := f.Seen(ctx); seen != 1<<63-1 {
		t.Fatalf("Seen = %d", seen)
	}
	// A token with fewer digits is smaller whatever its leading digit.
	c.Set(ctx, "{big}:fence", "10", 0)
	if err := f.Set(ctx, 9, "{big}:state", "x"); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("9 after 10: err = %v, want stale", err)
	}
}
