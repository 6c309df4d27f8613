package proposal

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/elector/elector/internal/redistest"
	"github.com/elector/elector/pkg/lease"
)

// The prototype must speak pkg/lease's protocol exactly: a term it acquires is seen by
// pkg/lease, and it survives a flushed script cache.
func TestInteroperatesWithPkgLease(t *testing.T) {
	ctx := context.Background()
	c := redistest.Start(t).Client(t)
	scripts, err := LoadScripts("../../..")
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(c, "job", "pod-p", scripts)
	if err != nil {
		t.Fatal(err)
	}
	other, err := lease.New(c, "job", lease.Options{Identity: "pod-l"})
	if err != nil {
		t.Fatal(err)
	}
	ok, st, err := p.Acquire(ctx, 10*time.Second)
	if err != nil || !ok {
		t.Fatalf("Acquire = %v, %v", ok, err)
	}
	got, err := other.Get(ctx)
	if err != nil || got.Record != st.Record || got.Record.Identity != "pod-p" {
		t.Fatalf("pkg/lease sees %+v, %v; want %+v", got, err, st.Record)
	}
	if ok, st2, err := other.Acquire(ctx, 10*time.Second); err != nil || ok || st2.Record != st.Record {
		t.Fatalf("pkg/lease Acquire of a held lease = %v, %+v, %v", ok, st2, err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if ok, err := p.Renew(ctx, st.Record, 5*time.Second); err != nil || !ok {
		t.Fatalf("Renew after SCRIPT FLUSH = %v, %v", ok, err)
	}
	if ok, err := p.Renew(ctx, lease.Record{Token: 1, Instance: "x", Identity: "y"}, 5*time.Second); err != nil || ok {
		t.Fatalf("Renew of another term = %v, %v; want false", ok, err)
	}
	if ok, err := p.Release(ctx, st.Record); err != nil || !ok {
		t.Fatalf("Release = %v, %v", ok, err)
	}
	ok, st3, err := other.Acquire(ctx, 10*time.Second)
	if err != nil || !ok || st3.Record.Token <= st.Record.Token {
		t.Fatalf("pkg/lease Acquire after the release = %v, %+v, %v; want a larger token than %d", ok, st3, err, st.Record.Token)
	}
}

func TestParseRecordMatchesPkgLease(t *testing.T) {
	for _, s := range []string{
		"v1:1764441600123456:9f86d081884c7d65:billing-7d9f8-x2x4q", "v1:1:a:", "v1:12:a:b:c",
		"v1:012:a:b", "v1:+12:a:b", "v1:-1:a:b", "v1:0:a:b", "v1:12::b", "v1:12", "v2:1:a:b", "",
		"v1:99999999999999999999:a:b", "v1:1a:a:b",
	} {
		want, werr := lease.ParseRecord(s)
		got, gerr := parseRecord(s)
		if (werr == nil) != (gerr == nil) || got != want {
			t.Errorf("parseRecord(%q) = %+v, %v; lease.ParseRecord = %+v, %v", s, got, gerr, want, werr)
		}
		if gerr != nil && !errors.Is(gerr, lease.ErrBadRecord) {
			t.Errorf("parseRecord(%q) error %v does not wrap ErrBadRecord", s, gerr)
		}
	}
}
