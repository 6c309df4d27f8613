package clientgo

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/elector/elector/internal/testing/redistest"
)

func record(holder string, transitions int) resourcelock.LeaderElectionRecord {
	now := metav1.NewTime(time.Now())
	return resourcelock.LeaderElectionRecord{
		HolderIdentity:       holder,
		LeaseDurationSeconds: 15,
		AcquireTime:          now,
		RenewTime:            now,
		LeaderTransitions:    transitions,
	}
}

func TestLockCompareAndSet(t *testing.T) {
	ctx := context.Background()
	rc := startRedis(t)
	a, err := New(rc, "ctrl", "pod-a", Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(newClient(t, rc), "ctrl", "pod-b", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := a.Key(), "elector:{ctrl}:clientgo"; got != want {
		t.Errorf("Key() = %q, want %q", got, want)
	}
	if got, want := a.TokenKey(), "elector:{ctrl}:clientgo-token"; got != want {
		t.Errorf("TokenKey() = %q, want %q", got, want)
	}
	if got, want := a.Describe(), "redis/elector:{ctrl}:clientgo"; got != want {
		t.Errorf("Describe() = %q, want %q", got, want)
	}
	if a.Identity() != "pod-a" {
		t.Errorf("Identity() = %q", a.Identity())
	}

	// Nothing stored: Get says NotFound (client-go then creates), Update refuses to run blind.
	if _, _, err := a.Get(ctx); !apierrors.IsNotFound(err) {
		t.Fatalf("Get on an empty Redis: err = %v, want NotFound", err)
	}
	if err := a.Update(ctx, record("pod-a", 0)); err == nil || apierrors.IsConflict(err) {
		t.Fatalf("Update before Get or Create: err = %v, want a plain error", err)
	}

	// a creates; b cannot create over it.
	if err := a.Create(ctx, record("pod-a", 0)); err != nil {
		t.Fatalf("a.Create: %v", err)
	}
	tokA := a.Token()
	if tokA <= 0 {
		t.Fatalf("a.Token() = %d after creating a term, want > 0", tokA)
	}
	if err := b.Create(ctx, record("pod-b", 0)); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("b.Create over a's record: err = %v, want AlreadyExists", err)
	}
	if b.Token() != 0 {
		t.Errorf("b.Token() = %d without a term, want 0", b.Token())
	}

	// Get returns what is stored, byte for byte; the key has no expiry, like a Lease object.
	rec, raw, err := b.Get(ctx)
	if err != nil {
		t.Fatalf("b.Get: %v", err)
	}
	stored, err := rc.Get(ctx, a.Key()).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != string(stored) || rec.HolderIdentity != "pod-a" {
		t.Fatalf("b.Get = %+v, %s; Redis holds %s", rec, raw, stored)
	}
	if pttl := rc.PTTL(ctx, a.Key()).Val(); pttl != -1 {
		t.Errorf("PTTL of the record = %v, want -1 (no expiry)", pttl)
	}

	// a renews (same holder): the term and its token stay.
	if err := a.Update(ctx, record("pod-a", 0)); err != nil {
		t.Fatalf("a renews: %v", err)
	}
	if a.Token() != tokA {
		t.Errorf("token after renew = %d, want the term's %d", a.Token(), tokA)
	}

	// b read before a's renew: its write is a conflict, and changes nothing.
	before, _ := rc.Get(ctx, a.Key()).Result()
	if err := b.Update(ctx, record("pod-b", 1)); !apierrors.IsConflict(err) {
		t.Fatalf("b.Update after a stale read: err = %v, want Conflict", err)
	}
	if after, _ := rc.Get(ctx, a.Key()).Result(); after != before {
		t.Fatalf("a conflicting Update changed the record from %s to %s", before, after)
	}

	// b reads again and takes over (client-go decided the lease expired): a new term with a
	// larger token; a's next renew, from its old view, conflicts.
	if _, _, err := b.Get(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Update(ctx, record("pod-b", 1)); err != nil {
		t.Fatalf("b takes over: %v", err)
	}
	if b.Token() <= tokA {
		t.Fatalf("b's token %d is not larger than a's %d", b.Token(), tokA)
	}
	if last, err := rc.Get(ctx, b.TokenKey()).Int64(); err != nil || last != b.Token() {
		t.Errorf("token key holds %d (%v), want %d", last, err, b.Token())
	}
	if err := a.Update(ctx, record("pod-a", 0)); !apierrors.IsConflict(err) {
		t.Fatalf("a renews after losing the lease: err = %v, want Conflict", err)
	}

	// a, having read b's record, may not release it (the owner check): client-go's release
	// after a conflict re-reads and writes an empty holder.
	if _, _, err := a.Get(ctx); err != nil {
		t.Fatal(err)
	}
	rel := record("", 1)
	rel.LeaseDurationSeconds = 1
	if err := a.Update(ctx, rel); err == nil || apierrors.IsConflict(err) ||
		!strings.Contains(err.Error(), `held by "pod-b"`) {
		t.Fatalf("a releases b's record: err = %v, want the owner check's refusal", err)
	}
	if rec, _, _ := a.Get(ctx); rec.HolderIdentity != "pod-b" {
		t.Fatalf("holder after a's refused release = %q", rec.HolderIdentity)
	}
	// Nor may a lock write another identity as holder.
	if err := a.Update(ctx, record("pod-b", 1)); err == nil || !strings.Contains(err.Error(), "identity") {
		t.Fatalf("a writes pod-b as holder: err = %v, want refusal", err)
	}

	// b releases its own record: the holder is empty, the key stays (it keeps
	// LeaderTransitions for the next leader), b has no token.
	if err := b.Update(ctx, rel); err != nil {
		t.Fatalf("b releases: %v", err)
	}
	if b.Token() != 0 {
		t.Errorf("b.Token() after release = %d, want 0", b.Token())
	}
	if pttl := rc.PTTL(ctx, b.Key()).Val(); pttl != -1 {
		t.Errorf("PTTL of the released record = %v, want -1 (no expiry)", pttl)
	}

	// a takes the released lease: a new term again.
	if _, _, err := a.Get(ctx); err != nil {
		t.Fatal(err)
	}
	prev := b.tokenOfLastWrite()
	if err := a.Update(ctx, record("pod-a", 2)); err != nil {
		t.Fatalf("a takes the released lease: %v", err)
	}
	if a.Token() <= prev {
		t.Errorf("a's new token %d is not larger than b's %d", a.Token(), prev)
	}
}

// tokenOfLastWrite reads the token of the last write whatever its holder, for tests.
func (l *Lock) tokenOfLastWrite() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.token
}

func TestLockTokenSurvivesDataLoss(t *testing.T) {
	ctx := context.Background()
	rc := startRedis(t)
	a, err := New(rc, "ctrl", "pod-a", Options{Prefix: "cg"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Create(ctx, record("pod-a", 0)); err != nil {
		t.Fatal(err)
	}
	first := a.Token()
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Redis lost everything: client-go finds no record and creates one.
	if _, _, err := a.Get(ctx); !apierrors.IsNotFound(err) {
		t.Fatalf("Get after FLUSHALL: %v", err)
	}
	if err := a.Create(ctx, record("pod-a", 0)); err != nil {
		t.Fatal(err)
	}
	if a.Token() <= first {
		t.Fatalf("token after data loss = %d, want more than %d", a.Token(), first)
	}
	if !strings.HasPrefix(a.Key(), "cg:{ctrl}:") {
		t.Errorf("Key() = %q ignores the prefix", a.Key())
	}
}

func TestLockRejectsForeignValue(t *testing.T) {
	ctx := context.Background()
	rc := startRedis(t)
	a, err := New(rc, "ctrl", "pod-a", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Set(ctx, a.Key(), "v1:12:abc:someone", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Get(ctx); err == nil || apierrors.IsNotFound(err) {
		t.Fatalf("Get of a value that is no LeaderElectionRecord: err = %v", err)
	}
	if err := rc.Set(ctx, a.TokenKey(), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.Del(ctx, a.Key()).Err(); err != nil {
		t.Fatal(err)
	}
	if err := a.Create(ctx, record("pod-a", 0)); err == nil || !strings.Contains(err.Error(), "does not hold an integer") {
		t.Fatalf("Create with a corrupt token key: err = %v", err)
	}
	if n := rc.Exists(ctx, a.Key()).Val(); n != 0 {
		t.Fatalf("a failed Create wrote the record")
	}
}

func TestNewValidates(t *testing.T) {
	rc := startRedis(t)
	for _, tc := range []struct {
		name, identity string
		opts           Options
		want           string
	}{
		{"", "a", Options{}, "name"},
		{"a{b}", "a", Options{}, "hash tag"},
		{"ok", "", Options{}, "identity"},
		{"ok", "a", Options{Prefix: "p p"}, "prefix"},
		{"ok", "a", Options{EventRecorder: &events{}}, "EventObject"},
	} {
		if _, err := New(rc, tc.name, tc.identity, tc.opts); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %q, %+v): err = %v, want one mentioning %q", tc.name, tc.identity, tc.opts, err, tc.want)
		}
	}
	if _, err := New(nil, "ok", "a", Options{}); err == nil {
		t.Error("New with a nil client succeeded")
	}
}

// events records what RecordEvent sends to a resourcelock.EventRecorder.
type events struct {
	mu  sync.Mutex
	got []string
}

func (e *events) Eventf(obj runtime.Object, eventType, reason, message string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pod := obj.(*corev1.Pod)
	e.got = append(e.got, fmt.Sprintf("%s %s %s %s", pod.Name, eventType, reason, fmt.Sprintf(message, args...)))
}

func TestRecordEvent(t *testing.T) {
	rc := startRedis(t)
	rec := &events{}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-a", Namespace: "ns"}}
	a, err := New(rc, "ctrl", "pod-a", Options{EventRecorder: rec, EventObject: pod})
	if err != nil {
		t.Fatal(err)
	}
	a.RecordEvent("became leader")
	want := "pod-a Normal LeaderElection pod-a became leader"
	if len(rec.got) != 1 || rec.got[0] != want {
		t.Fatalf("events = %q, want [%q]", rec.got, want)
	}
}

// The stored value is client-go's JSON, readable by anyone with redis-cli, with its times in
// microseconds.
func TestStoredValueIsClientGoJSON(t *testing.T) {
	ctx := context.Background()
	rc := startRedis(t)
	a, err := New(rc, "ctrl", "pod-a", Options{})
	if err != nil {
		t.Fatal(err)
	}
	in := record("pod-a", 3)
	if err := a.Create(ctx, in); err != nil {
		t.Fatal(err)
	}
	var out resourcelock.LeaderElectionRecord
	if err := json.Unmarshal([]byte(rc.Get(ctx, a.Key()).Val()), &out); err != nil {
		t.Fatal(err)
	}
	if out.HolderIdentity != "pod-a" || out.LeaderTransitions != 3 || out.LeaseDurationSeconds != 15 ||
		!out.RenewTime.Equal(&metav1.Time{Time: in.RenewTime.Truncate(time.Microsecond)}) {
		t.Fatalf("stored %+v, wrote %+v", out, in)
	}
}

// TestGetUnknownSentinelMaster: with a master name no Sentinel knows, go-redis's lookup error
// wraps the Sentinels' nil replies. Get must report that failure, not NotFound, which would
// make client-go try to create a lock that is maybe held.
func TestGetUnknownSentinelMaster(t *testing.T) {
	s := redistest.StartSentinel(t, "mymaster", 0, 1)
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "wrong", SentinelAddrs: s.SentinelAddrs()})
	t.Cleanup(func() { _ = client.Close() })
	l, err := New(client, "ctrl", "pod-a", Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, _, err := l.Get(ctx); err == nil || apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "no Sentinel knows a master") {
		t.Fatalf("Get through an unknown Sentinel master: err = %v, want the lookup failure naming the master", err)
	}
}
