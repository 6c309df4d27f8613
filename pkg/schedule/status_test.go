package schedule

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/elector/elector/pkg/election"
)

// TestLeadWritesItsSpec: a term that starts on a state without a spec (v1: written before the
// state kept it) or with another writes its own at once, not only at its next slot's claim,
// and ReadStatus (no script, no TIME) reads it and computes the next slot from it.
func TestLeadWritesItsSpec(t *testing.T) {
	f := newFixture(t, Config{Spec: "0 3 1 1 *"}) // once a year: no claim while the test runs
	if _, found, err := ReadStatus(f.ctx, f.client, "", f.name); found || err != nil {
		t.Fatalf("ReadStatus of no state: found %v, %v", found, err)
	}
	cursor := f.redisNow()
	f.client.Set(f.ctx, f.s.keys[1], fmt.Sprintf("v1\n%s\n0\nnone\n0\n\n0\n0\n0\n", ms(cursor)), 0)
	st, found, err := ReadStatus(f.ctx, f.client, "", f.name)
	if err != nil || !found || st.Spec != "" || st.Location != nil || !st.Next.IsZero() || !st.Decided.Equal(cursor) {
		t.Fatalf("ReadStatus of a v1 state: %+v %v %v: want found, no spec, no next slot", st, found, err)
	}
	e, err := election.New(election.Config{
		Client: f.client, LeaseName: f.name, Identity: "a",
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 300 * time.Millisecond,
		ReleaseOnCancel: true,
		Callbacks:       election.Callbacks{OnStartedLeading: func(ctx context.Context) { _ = f.s.Lead(ctx) }},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, time.Second)
	defer cancel()
	if err := e.Run(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v", err)
	}
	st, found, err = ReadStatus(f.ctx, f.client, "", f.name)
	want := time.Date(cursor.Year()+1, 1, 1, 3, 0, 0, 0, time.UTC)
	if cursor.Before(time.Date(cursor.Year(), 1, 1, 3, 0, 0, 0, time.UTC)) {
		want = want.AddDate(-1, 0, 0)
	}
	if err != nil || !found || st.Spec != "0 3 1 1 *" || st.Zone != "UTC" || st.Location != time.UTC ||
		!st.Decided.Equal(cursor) || !st.Next.Equal(want) || st.Current != nil || len(st.Runs) != 0 {
		t.Errorf("ReadStatus after a term: %+v %v %v: want the spec, UTC, the cursor kept, next %v", st, found, err, want)
	}
}
