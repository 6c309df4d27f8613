package clientgo

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/leaderelection"
	rl "k8s.io/client-go/tools/leaderelection/resourcelock"
	krecord "k8s.io/client-go/tools/record"
)

// This file ports client-go v0.37.2's tests of its LeaderElector that run against a fake
// LeaseLock (tools/leaderelection/leaderelection_test.go: testTryAcquireOrRenew,
// TestTryCoordinatedRenew, testReleaseLease, testReleaseOnCancellation,
// TestFastPathLeaderElection) to the Redis Lock with a real redis-server. Those tests build a
// LeaderElector with unexported fields and call its unexported tryAcquireOrRenew; from outside
// the package the port runs the real LeaderElector (NewLeaderElector, Run) instead, and:
//
//   - the fake clientset's reactors become records stored in Redis before the elector starts
//     (a record of another holder is another replica's);
//   - the fake's list of actions becomes opLog, a resourcelock.Interface around the real Lock
//     that logs each call and its outcome; "the API interactions of one tryAcquireOrRenew"
//     are the calls up to the first successful write, because Run renews right after it;
//   - an observedTime in the future ("acked": the candidate saw the record just now) is the
//     candidate's own first Get; one in the past ("unacked") is reached by waiting the
//     record's lease duration, as "acquire from led object with the lease duration seconds";
//   - an error injected into a reactor (a Conflict, a cancelled renew) is made real: another
//     write to the key, or a renew that Redis applied while its caller was cancelled.

// op is one call of the Lock by client-go.
type op struct {
	verb string // get, create, update
	err  error
}

// opLog is a resourcelock.Interface that logs the calls to the Lock it wraps. The hooks, when
// set, get each call's verb and how many calls of that verb came before: before and after run
// around the call; detach makes the call go on whatever its ctx says, and then report the
// ctx's error (a write that Redis applied while its caller gave up).
type opLog struct {
	*Lock
	mu     sync.Mutex
	ops    []op
	counts map[string]int
	before func(verb string, n int)
	after  func(verb string, n int)
	detach func(verb string, n int) bool
}

var _ rl.Interface = (*opLog)(nil)

func (o *opLog) call(ctx context.Context, verb string, f func(context.Context) error) error {
	o.mu.Lock()
	if o.counts == nil {
		o.counts = map[string]int{}
	}
	n := o.counts[verb]
	o.counts[verb]++
	o.mu.Unlock()
	if o.before != nil {
		o.before(verb, n)
	}
	callCtx := ctx
	if o.detach != nil && o.detach(verb, n) {
		callCtx = context.WithoutCancel(ctx)
	}
	err := f(callCtx)
	if err == nil && callCtx != ctx {
		err = ctx.Err()
	}
	o.mu.Lock()
	o.ops = append(o.ops, op{verb: verb, err: err})
	o.mu.Unlock()
	if o.after != nil {
		o.after(verb, n)
	}
	return err
}

func (o *opLog) Get(ctx context.Context) (rec *rl.LeaderElectionRecord, raw []byte, err error) {
	err = o.call(ctx, "get", func(ctx context.Context) error {
		rec, raw, err = o.Lock.Get(ctx)
		return err
	})
	return rec, raw, err
}

func (o *opLog) Create(ctx context.Context, ler rl.LeaderElectionRecord) error {
	return o.call(ctx, "create", func(ctx context.Context) error { return o.Lock.Create(ctx, ler) })
}

func (o *opLog) Update(ctx context.Context, ler rl.LeaderElectionRecord) error {
	return o.call(ctx, "update", func(ctx context.Context) error { return o.Lock.Update(ctx, ler) })
}

// verbs returns the verbs of the calls so far.
func (o *opLog) verbs() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var v []string
	for _, x := range o.ops {
		v = append(v, x.verb)
	}
	return v
}

// untilFirstWrite returns the verbs of the calls up to the first successful write: those of
// the tryAcquireOrRenew calls that acquired.
func (o *opLog) untilFirstWrite() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var v []string
	for _, x := range o.ops {
		v = append(v, x.verb)
		if x.verb != "get" && x.err == nil {
			break
		}
	}
	return v
}

// elector is client-go's LeaderElector for the identity "baz" on an opLog, run in the
// background, with what its callbacks saw.
type elector struct {
	log      *opLog
	recorder *krecord.FakeRecorder
	le       *leaderelection.LeaderElector
	started  chan struct{} // closed by OnStartedLeading
	leaders  chan string   // OnNewLeader's identities
	cancel   context.CancelFunc
	done     chan struct{} // closed when Run returned
	at       time.Time     // when Run was called
}

// startElector runs a LeaderElector for identity over the lock "bar" of rc's server; cfg's
// Lock and callbacks are filled in.
func startElector(t *testing.T, rc *redis.Client, identity string, cfg leaderelection.LeaderElectionConfig, hooks func(*elector)) *elector {
	t.Helper()
	e := &elector{recorder: krecord.NewFakeRecorder(100), started: make(chan struct{}), leaders: make(chan string, 100), done: make(chan struct{})}
	lock, err := New(newClient(t, rc), "bar", identity, Options{EventRecorder: e.recorder, EventObject: &corev1.Pod{}})
	if err != nil {
		t.Fatal(err)
	}
	e.log = &opLog{Lock: lock}
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	if hooks != nil {
		hooks(e) // before Run starts: the hooks run in its goroutine
	}
	cfg.Lock = e.log
	cfg.Callbacks = leaderelection.LeaderCallbacks{
		OnStartedLeading: func(context.Context) { close(e.started) },
		OnStoppedLeading: func() {},
		OnNewLeader:      func(id string) { e.leaders <- id },
	}
	if e.le, err = leaderelection.NewLeaderElector(cfg); err != nil {
		t.Fatal(err)
	}
	e.at = time.Now()
	go func() {
		defer close(e.done)
		e.le.Run(ctx)
	}()
	t.Cleanup(func() { e.stop(t) })
	return e
}

// stop cancels Run and waits for it to return.
func (e *elector) stop(t *testing.T) {
	e.cancel()
	select {
	case <-e.done:
	case <-time.After(30 * time.Second):
		t.Errorf("LeaderElector did not return within 30s of its cancel")
	}
}

// waitLeading waits until OnStartedLeading ran and returns how long after Run that was.
func (e *elector) waitLeading(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	select {
	case <-e.started:
		return time.Since(e.at)
	case <-time.After(within):
		t.Fatalf("did not become leader within %v; calls %v", within, e.log.verbs())
		return 0
	}
}

// waitLeader waits until OnNewLeader reported a leader and returns it.
func (e *elector) waitLeader(t *testing.T) string {
	t.Helper()
	select {
	case id := <-e.leaders:
		return id
	case <-time.After(30 * time.Second):
		t.Fatal("OnNewLeader reported no leader within 30s")
		return ""
	}
}

// storedRecord returns the record in Redis.
func storedRecord(t *testing.T, rc *redis.Client, l *Lock) rl.LeaderElectionRecord {
	t.Helper()
	raw, err := rc.Get(context.Background(), l.Key()).Bytes()
	if err != nil {
		t.Fatalf("GET %s: %v", l.Key(), err)
	}
	rec, err := decode(raw)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// seed stores rec as the record of the lock "bar", as another replica (or an earlier run)
// left it.
func seed(t *testing.T, rc *redis.Client, rec *rl.LeaderElectionRecord) {
	t.Helper()
	if rec == nil {
		return
	}
	raw, err := encode(*rec)
	if err != nil {
		t.Fatal(err)
	}
	keys := lockKeys(t, rc)
	if err := rc.Set(context.Background(), keys.Key(), raw, 0).Err(); err != nil {
		t.Fatal(err)
	}
}

func lockKeys(t *testing.T, rc *redis.Client) *Lock {
	t.Helper()
	l, err := New(rc, "bar", "seed", Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var acquireTiming = leaderelection.LeaderElectionConfig{
	LeaseDuration: 10 * time.Second, RenewDeadline: 5 * time.Second, RetryPeriod: time.Second,
}

// TestTryAcquireOrRenew ports testTryAcquireOrRenew: what one candidate does with each stored
// record, the calls it makes to acquire, and the LeaderTransitions it writes.
func TestTryAcquireOrRenew(t *testing.T) {
	t.Parallel() // each test has its own redis-server; they mostly wait
	tests := []struct {
		name             string
		stored           *rl.LeaderElectionRecord
		waitAtLeast      time.Duration // the record's lease duration, from the first Get
		wantCalls        []string      // up to the acquiring write
		expectSuccess    bool
		transitionLeader bool
		outHolder        string
	}{
		{name: "acquire from no object", wantCalls: []string{"get", "create"},
			expectSuccess: true, outHolder: "baz"},
		{name: "acquire from unled object", stored: &rl.LeaderElectionRecord{},
			wantCalls: []string{"get", "update"}, expectSuccess: true, transitionLeader: true, outHolder: "baz"},
		{name: "acquire from led object with the lease duration seconds",
			stored:      &rl.LeaderElectionRecord{HolderIdentity: "bing", LeaseDurationSeconds: 3},
			waitAtLeast: 3 * time.Second, expectSuccess: true, transitionLeader: true, outHolder: "baz"},
		{name: "don't acquire from led, acked object",
			stored:        &rl.LeaderElectionRecord{HolderIdentity: "bing", LeaseDurationSeconds: 10},
			expectSuccess: false, outHolder: "bing"},
		{name: "renew already acquired object",
			stored:    &rl.LeaderElectionRecord{HolderIdentity: "baz", LeaseDurationSeconds: 10},
			wantCalls: []string{"get", "update"}, expectSuccess: true, outHolder: "baz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := startRedis(t)
			seed(t, rc, tt.stored)
			e := startElector(t, rc, "baz", acquireTiming, nil)
			if !tt.expectSuccess {
				if leader := e.waitLeader(t); leader != tt.outHolder {
					t.Errorf("OnNewLeader reported %q, want %q", leader, tt.outHolder)
				}
				// Two retry periods of a held record: gets only, no leadership.
				time.Sleep(2 * acquireTiming.RetryPeriod)
				select {
				case <-e.started:
					t.Fatal("became leader of a record held by another replica within its lease")
				default:
				}
				if calls := e.log.verbs(); slices.ContainsFunc(calls, func(v string) bool { return v != "get" }) {
					t.Errorf("calls %v, want gets only", calls)
				}
				if got := storedRecord(t, rc, e.log.Lock); got.HolderIdentity != tt.outHolder {
					t.Errorf("stored holder %q, want %q", got.HolderIdentity, tt.outHolder)
				}
				return
			}
			took := e.waitLeading(t, 30*time.Second)
			for leader := e.waitLeader(t); leader != tt.outHolder; leader = e.waitLeader(t) {
				// an earlier holder, reported while the candidate waited
			}
			if took < tt.waitAtLeast {
				t.Errorf("became leader %v after its start, before the stored lease (%v) can have expired", took, tt.waitAtLeast)
			}
			calls := e.log.untilFirstWrite()
			if tt.wantCalls != nil && !slices.Equal(calls, tt.wantCalls) {
				t.Errorf("calls to acquire %v, want %v", calls, tt.wantCalls)
			}
			if tt.wantCalls == nil && (len(calls) < 2 || calls[len(calls)-1] != "update") {
				t.Errorf("calls to acquire %v, want gets then an update", calls)
			}
			got := storedRecord(t, rc, e.log.Lock)
			want := 0
			if tt.transitionLeader {
				want = 1
			}
			if got.HolderIdentity != tt.outHolder || got.LeaderTransitions != want {
				t.Errorf("stored record: holder %q, transitions %d; want %q, %d", got.HolderIdentity, got.LeaderTransitions, tt.outHolder, want)
			}
			if (tt.stored == nil || tt.transitionLeader) && e.log.Token() == 0 {
				t.Error("a new term without a fencing token")
			}
		})
	}
}

// TestTryCoordinatedRenew ports TestTryCoordinatedRenew: with Coordinated (the coordinated
// leader election: a coordinator names the holder), a candidate renews a record that names it
// and never takes one that names another replica.
func TestTryCoordinatedRenew(t *testing.T) {
	t.Parallel() // each test has its own redis-server; they mostly wait
	cfg := acquireTiming
	cfg.Coordinated = true
	t.Run("don't acquire from led, acked object", func(t *testing.T) {
		t.Parallel()
		rc := startRedis(t)
		seed(t, rc, &rl.LeaderElectionRecord{HolderIdentity: "bing", LeaseDurationSeconds: 10})
		e := startElector(t, rc, "baz", cfg, nil)
		if leader := e.waitLeader(t); leader != "bing" {
			t.Errorf("OnNewLeader reported %q, want bing", leader)
		}
		time.Sleep(2 * cfg.RetryPeriod)
		select {
		case <-e.started:
			t.Fatal("became leader of a record that names another replica")
		default:
		}
		if calls := e.log.verbs(); slices.ContainsFunc(calls, func(v string) bool { return v != "get" }) {
			t.Errorf("calls %v, want gets only", calls)
		}
	})
	t.Run("renew already acquired object", func(t *testing.T) {
		t.Parallel()
		rc := startRedis(t)
		seed(t, rc, &rl.LeaderElectionRecord{HolderIdentity: "baz", LeaseDurationSeconds: 10})
		e := startElector(t, rc, "baz", cfg, nil)
		e.waitLeading(t, 30*time.Second)
		if calls := e.log.untilFirstWrite(); !slices.Equal(calls, []string{"get", "update"}) {
			t.Errorf("calls to acquire %v, want [get update]", calls)
		}
		if got := storedRecord(t, rc, e.log.Lock); got.HolderIdentity != "baz" || got.LeaderTransitions != 0 {
			t.Errorf("stored record: holder %q, transitions %d; want baz, 0", got.HolderIdentity, got.LeaderTransitions)
		}
	})
}

// TestReleaseLease ports testReleaseLease ("release acquired lock from no object") with
// ReleaseOnCancel: the release keeps LeaderTransitions, empties the holder, reports the empty
// leader, and records "became leader" then "stopped leading".
func TestReleaseLease(t *testing.T) {
	t.Parallel() // each test has its own redis-server; they mostly wait
	rc := startRedis(t)
	cfg := acquireTiming
	cfg.ReleaseOnCancel = true
	e := startElector(t, rc, "baz", cfg, nil)
	e.waitLeading(t, 30*time.Second)
	if leader := e.waitLeader(t); leader != "baz" {
		t.Fatalf("OnNewLeader reported %q, want baz", leader)
	}
	e.stop(t)
	got := storedRecord(t, rc, e.log.Lock)
	if got.HolderIdentity != "" || got.LeaderTransitions != 0 || got.LeaseDurationSeconds != 1 {
		t.Errorf("released record: holder %q, transitions %d, duration %ds; want \"\", 0, 1s", got.HolderIdentity, got.LeaderTransitions, got.LeaseDurationSeconds)
	}
	if calls := e.log.verbs(); calls[len(calls)-2] != "get" || calls[len(calls)-1] != "update" {
		t.Errorf("calls %v: the release is not a get then an update", calls)
	}
	if e.le.IsLeader() || e.le.GetLeader() != "" {
		t.Errorf("after the release: IsLeader %v, leader %q", e.le.IsLeader(), e.le.GetLeader())
	}
	checkEvents(t, e.recorder, "Normal LeaderElection baz became leader", "Normal LeaderElection baz stopped leading")
}

func checkEvents(t *testing.T, r *krecord.FakeRecorder, want ...string) {
	t.Helper()
	var got []string
	for len(r.Events) > 0 {
		got = append(got, <-r.Events)
	}
	if !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}

// TestReleaseOnCancellation ports testReleaseOnCancellation ("release acquired lock on
// cancellation of update", with TestReleaseRetriesOnConflict's race): the leader's ctx is
// cancelled while a renew is in flight; Redis applies the renew but its caller sees the
// cancellation (as the API server completes an update whose client gave up). The release
// still happens: it reads the record again and writes the empty holder.
func TestReleaseOnCancellation(t *testing.T) {
	t.Parallel() // each test has its own redis-server; they mostly wait
	rc := startRedis(t)
	cfg := leaderelection.LeaderElectionConfig{
		LeaseDuration: 15 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: time.Second,
		ReleaseOnCancel: true,
	}
	renewCalled, renewResume := make(chan struct{}), make(chan struct{})
	e := startElector(t, rc, "baz", cfg, func(e *elector) {
		o := e.log
		second := func(verb string, n int) bool { return verb == "update" && n == 1 }
		o.before = func(verb string, n int) {
			if second(verb, n) { // the second renew: hold it until Run's ctx is cancelled
				close(renewCalled)
				<-renewResume
			}
		}
		o.detach = second
	})
	e.waitLeading(t, 30*time.Second)
	select {
	case <-renewCalled:
	case <-time.After(30 * time.Second):
		t.Fatal("the elector did not renew")
	}
	e.cancel()
	close(renewResume) // the renew goes on with a cancelled ctx
	e.stop(t)
	got := storedRecord(t, rc, e.log.Lock)
	if got.HolderIdentity != "" || got.LeaderTransitions != 0 {
		t.Errorf("record after the cancel: holder %q, transitions %d; want released", got.HolderIdentity, got.LeaderTransitions)
	}
	checkEvents(t, e.recorder, "Normal LeaderElection baz became leader", "Normal LeaderElection baz stopped leading")
	e.log.mu.Lock()
	defer e.log.mu.Unlock()
	last := e.log.ops[len(e.log.ops)-1]
	if last.verb != "update" || last.err != nil {
		t.Errorf("the last call %s failed: %v; calls %v", last.verb, last.err, e.log.ops)
	}
	if !slices.ContainsFunc(e.log.ops, func(x op) bool { return x.verb == "update" && errors.Is(x.err, context.Canceled) }) {
		t.Errorf("no renew returned the cancellation: calls %v", e.log.ops)
	}
}

// TestFastPathLeaderElection ports TestFastPathLeaderElection: a leader renews with an update
// alone (the fast path); when that update conflicts — here, another write changed the record
// — it falls back to a get and an update (the slow path) and keeps leading.
func TestFastPathLeaderElection(t *testing.T) {
	t.Parallel() // each test has its own redis-server; they mostly wait
	cfg := leaderelection.LeaderElectionConfig{LeaseDuration: 15 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: time.Second}
	tests := []struct {
		name      string
		conflict  int // the update (from 0) before which the record is changed, -1 for none
		cancelAt  int // the update (from 0) after which Run's ctx is cancelled
		wantCalls []string
	}{
		{"Exercise fast path after lock acquired", -1, 1, []string{"get", "create", "update", "update"}},
		{"Fallback to slow path after fast path fails", 1, 3, []string{"get", "create", "update", "update", "get", "update", "update"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rc := startRedis(t)
			e := startElector(t, rc, "baz", cfg, func(e *elector) {
				o := e.log
				o.before = func(verb string, n int) {
					if verb == "update" && n == tt.conflict { // the same holder, renewed by a write that is not this Lock's
						rec := storedRecord(t, rc, o.Lock)
						rec.RenewTime = metav1.NewTime(rec.RenewTime.Add(time.Millisecond))
						seed(t, rc, &rec)
					}
				}
				o.after = func(verb string, n int) {
					if verb == "update" && n == tt.cancelAt {
						e.cancel()
					}
				}
			})
			<-e.done
			if calls := e.log.verbs(); !slices.Equal(calls, tt.wantCalls) {
				t.Errorf("calls %v, want %v", calls, tt.wantCalls)
			}
			if tt.conflict >= 0 {
				e.log.mu.Lock()
				err := e.log.ops[3].err
				e.log.mu.Unlock()
				if !apierrors.IsConflict(err) {
					t.Errorf("the fast-path update after another write: err %v, want a Conflict", err)
				}
			}
		})
	}
}

// A released record persists, as a Lease object does: LeaderTransitions counts on across a
// release followed by a long idle (longer than the released record's lease duration, 1s, and
// than any expiry derived from it), and the next leader takes over by an update.
func TestReleasedRecordKeepsLeaderTransitions(t *testing.T) {
	t.Parallel() // each test has its own redis-server; they mostly wait
	rc := startRedis(t)
	cfg := acquireTiming
	cfg.ReleaseOnCancel = true
	a := startElector(t, rc, "baz", cfg, nil)
	a.waitLeading(t, 30*time.Second)
	a.stop(t)
	if got := storedRecord(t, rc, a.log.Lock); got.HolderIdentity != "" || got.LeaderTransitions != 0 {
		t.Fatalf("released record: holder %q, transitions %d", got.HolderIdentity, got.LeaderTransitions)
	}
	time.Sleep(3 * time.Second) // idle
	b := startElector(t, rc, "bing", cfg, nil)
	b.waitLeading(t, 30*time.Second)
	if calls := b.log.untilFirstWrite(); !slices.Equal(calls, []string{"get", "update"}) {
		t.Errorf("calls to take over the released record %v, want [get update]", calls)
	}
	if got := storedRecord(t, rc, b.log.Lock); got.HolderIdentity != "bing" || got.LeaderTransitions != 1 {
		t.Errorf("record after the takeover: holder %q, transitions %d; want bing, 1", got.HolderIdentity, got.LeaderTransitions)
	}
}

// A candidate that first sees a crashed leader's record late still waits a whole lease
// duration of its own observation before it takes over, as on a Lease object: the record does
// not vanish under it (which would let it Create at once).
func TestLateObserverWaitsLeaseDuration(t *testing.T) {
	t.Parallel() // each test has its own redis-server; they mostly wait
	rc := startRedis(t)
	cfg := leaderelection.LeaderElectionConfig{LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: 300 * time.Millisecond}
	a := startElector(t, rc, "bing", cfg, nil)
	a.waitLeading(t, 30*time.Second)
	a.stop(t) // a crash: no ReleaseOnCancel, the record stays held
	time.Sleep(3 * time.Second)
	b := startElector(t, rc, "baz", cfg, nil)
	took := b.waitLeading(t, 30*time.Second)
	t.Logf("took over %v after it first looked (lease duration %v)", took, cfg.LeaseDuration)
	if took < cfg.LeaseDuration {
		t.Errorf("took over %v after it first looked, before a lease duration (%v) of its own observation; calls %v", took, cfg.LeaseDuration, b.log.verbs())
	}
	if calls := b.log.verbs(); slices.Contains(calls, "create") {
		t.Errorf("took over by a create (the record had vanished): calls %v", calls)
	}
	if got := storedRecord(t, rc, b.log.Lock); got.HolderIdentity != "baz" || got.LeaderTransitions != 1 {
		t.Errorf("record after the takeover: holder %q, transitions %d; want baz, 1", got.HolderIdentity, got.LeaderTransitions)
	}
}
