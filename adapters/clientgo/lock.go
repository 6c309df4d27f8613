// Package clientgo lets client-go's leader election, and everything built on it such as
// controller-runtime's manager, elect on Redis instead of on a Kubernetes Lease object.
//
// A Lock implements resourcelock.Interface from k8s.io/client-go/tools/leaderelection/resourcelock.
// It stores client-go's LeaderElectionRecord, as JSON, in one Redis key and reproduces the API
// server's optimistic concurrency: Create succeeds only when the key is absent, and Update only
// when the key still holds exactly the bytes this Lock last read or wrote (a compare-and-set in
// one Lua script). client-go keeps deciding everything else itself — when a lease has expired,
// when to renew, when to step down — exactly as it does with a Lease object, so its timing and
// its guarantees are unchanged; the API server merely no longer sees the lease writes.
//
// Every term (a write that names a new holder) also receives a fencing token by the rule of
// elector's protocol, max(previous + 1, server time in microseconds), available from
// Lock.Token for resources that must refuse a leader that was paused past its lease (package
// github.com/elector/elector/pkg/fence).
//
// The keys are PREFIX:{NAME}:clientgo (the record) and PREFIX:{NAME}:clientgo-token (the last
// token). Neither expires: like a Lease object, the record outlives a release (keeping
// LeaderTransitions) and a crashed leader, until a candidate takes it over. They are not the keys of elector's own lease (PREFIX:{NAME}:lease): a client-go
// election and an elector election with the same name are two independent elections.
package clientgo

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/rediserr"
	"github.com/elector/elector/pkg/lease"
)

//go:embed scripts/write.lua
var writeSource string

// writeScript is an immutable value (source and SHA1); sharing it is not shared state.
var writeScript = redis.NewScript(writeSource)

// groupResource names the resource in the Kubernetes API errors that client-go inspects
// (IsNotFound, IsConflict): it is in no API group; the group says where the lease lives.
var groupResource = schema.GroupResource{Group: "elector", Resource: "leases"}

// Options configure a Lock. The zero value is usable.
type Options struct {
	// Prefix starts the Redis keys; lease.DefaultPrefix ("elector") when empty.
	Prefix string
	// EventRecorder, when set, receives client-go's leader election events ("became leader",
	// "stopped leading") on EventObject, like a Lease lock's events. They are always logged
	// with klog at verbosity 2.
	EventRecorder resourcelock.EventRecorder
	// EventObject is the Kubernetes object the events are recorded on, for example this
	// replica's Pod. Required when EventRecorder is set.
	EventObject runtime.Object
}

// Lock is a client-go resource lock stored in Redis. Create it with New. Its methods are safe
// for concurrent use; as with client-go's own locks, one Lock serves one LeaderElector.
type Lock struct {
	client   redis.UniversalClient
	name     string
	identity string
	keys     []string // record key, token key
	recorder resourcelock.EventRecorder
	object   runtime.Object

	mu      sync.Mutex
	last    []byte                            // the value last read or written; nil before either
	lastRec resourcelock.LeaderElectionRecord // last, decoded
	token   int64                             // fencing token of the term of the last write, 0 when none
	holder  bool                              // the last write named this Lock's identity as holder
}

var _ resourcelock.Interface = (*Lock)(nil)

// New returns the lock called name for the replica identity, stored through client (a
// standalone, Sentinel failover or Cluster client: both keys share the hash tag {name}).
// identity must be unique among the candidates, as client-go requires; the pod name is the
// usual choice.
func New(client redis.UniversalClient, name, identity string, opts Options) (*Lock, error) {
	if client == nil {
		return nil, errors.New("new client-go redis lock: redis client is nil")
	}
	if err := leasewire.ValidateName(name); err != nil {
		return nil, fmt.Errorf("new client-go redis lock: name %q %w", name, err)
	}
	prefix := opts.Prefix
	if prefix == "" {
		prefix = lease.DefaultPrefix
	}
	if err := leasewire.ValidateName(prefix); err != nil {
		return nil, fmt.Errorf("new client-go redis lock %q: key prefix %q %w", name, prefix, err)
	}
	if err := leasewire.ValidateIdentity(identity); err != nil {
		return nil, fmt.Errorf("new client-go redis lock %q: identity %q %w", name, identity, err)
	}
	if opts.EventRecorder != nil && opts.EventObject == nil {
		return nil, fmt.Errorf("new client-go redis lock %q: Options.EventRecorder is set but Options.EventObject is nil", name)
	}
	keys := leasewire.KeysFor(prefix, name)
	return &Lock{
		client:   client,
		name:     name,
		identity: identity,
		keys:     []string{keys.Other("clientgo"), keys.Other("clientgo-token")},
		recorder: opts.EventRecorder,
		object:   opts.EventObject,
	}, nil
}

// Key returns the Redis key that holds the LeaderElectionRecord.
func (l *Lock) Key() string { return l.keys[0] }

// TokenKey returns the Redis key that holds the last fencing token handed out.
func (l *Lock) TokenKey() string { return l.keys[1] }

// Identity returns the identity this lock writes as holder.
func (l *Lock) Identity() string { return l.identity }

// Describe names the lock in client-go's logs: "redis/" followed by the record key.
func (l *Lock) Describe() string { return "redis/" + l.keys[0] }

// Token returns the fencing token of the term that this Lock's last successful Create or
// Update belongs to, when that write named this Lock's identity as the holder; otherwise 0.
// Read it in OnStartedLeading: client-go calls it only after a successful write. Each new
// holder gets a larger token than every earlier term (renewals keep the token), even across a
// loss of Redis data. A replica that restarts with the same identity while its old record is
// still valid continues that term, and its token, as client-go itself sees it.
func (l *Lock) Token() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.holder {
		return 0
	}
	return l.token
}

// Get reads the record. It returns a NotFound API error (apierrors.IsNotFound) when the key
// is absent, which makes client-go Create it; the raw bytes are the stored JSON.
func (l *Lock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	raw, err := l.client.Get(ctx, l.keys[0]).Bytes()
	if rediserr.IsNil(err) { // not a Sentinel lookup that failed, which wraps redis.Nil too
		return nil, nil, apierrors.NewNotFound(groupResource, l.name)
	}
	if rediserr.IsUnknownMaster(err) {
		return nil, nil, fmt.Errorf("get client-go lock %q: no Sentinel knows a master by the configured name (check FailoverOptions.MasterName): %w", l.name, err)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get client-go lock %q: %w", l.name, err)
	}
	rec, err := decode(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("get client-go lock %q: %s does not hold a LeaderElectionRecord: %w", l.name, l.keys[0], err)
	}
	l.mu.Lock()
	l.last, l.lastRec = raw, rec
	l.mu.Unlock()
	return &rec, raw, nil
}

// Create writes ler if the key is absent. It returns an AlreadyExists API error when it is not.
func (l *Lock) Create(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	if err := l.checkHolder(ler, resourcelock.LeaderElectionRecord{}, false); err != nil {
		return fmt.Errorf("create client-go lock %q: %w", l.name, err)
	}
	ok, err := l.write(ctx, nil, ler, ler.HolderIdentity != "")
	if err != nil {
		return fmt.Errorf("create client-go lock %q: %w", l.name, err)
	}
	if !ok {
		return apierrors.NewAlreadyExists(groupResource, l.name)
	}
	return nil
}

// Update replaces the record with ler if the key still holds the value this Lock last read or
// wrote. It returns a Conflict API error (apierrors.IsConflict) when another write came in
// between, or the key expired, and an error before any Get or Create. A Lock writes only
// records that name its own identity as holder, or, to release, an empty holder over a record
// that named its own identity: a stale release cannot wipe out another replica's term.
func (l *Lock) Update(ctx context.Context, ler resourcelock.LeaderElectionRecord) error {
	l.mu.Lock()
	last, lastRec := l.last, l.lastRec
	l.mu.Unlock()
	if last == nil {
		return fmt.Errorf("update client-go lock %q: lock not initialized, call Get or Create first", l.name)
	}
	if err := l.checkHolder(ler, lastRec, true); err != nil {
		return fmt.Errorf("update client-go lock %q: %w", l.name, err)
	}
	newTerm := ler.HolderIdentity != "" && ler.HolderIdentity != lastRec.HolderIdentity
	ok, err := l.write(ctx, last, ler, newTerm)
	if err != nil {
		return fmt.Errorf("update client-go lock %q: %w", l.name, err)
	}
	if !ok {
		return apierrors.NewConflict(groupResource, l.name,
			errors.New("the record changed since it was last read"))
	}
	return nil
}

// checkHolder is the owner check: a write names this lock's identity, or releases a record
// that named it (prev, when update is set).
func (l *Lock) checkHolder(ler, prev resourcelock.LeaderElectionRecord, update bool) error {
	switch {
	case ler.HolderIdentity == l.identity:
		return nil
	case ler.HolderIdentity != "":
		return fmt.Errorf("record names holder %q, but this lock's identity is %q", ler.HolderIdentity, l.identity)
	case update && prev.HolderIdentity != l.identity && prev.HolderIdentity != "":
		return fmt.Errorf("refusing to release: the record is held by %q, not by %q", prev.HolderIdentity, l.identity)
	}
	return nil
}

// write runs the compare-and-set script: expected nil means the key must be absent.
func (l *Lock) write(ctx context.Context, expected []byte, ler resourcelock.LeaderElectionRecord, newTerm bool) (bool, error) {
	raw, err := encode(ler)
	if err != nil {
		return false, fmt.Errorf("encode record: %w", err)
	}
	flag := "0"
	if newTerm {
		flag = "1"
	}
	reply, err := writeScript.Run(ctx, l.client, l.keys, string(expected), raw, flag).Slice()
	if err != nil {
		return false, err
	}
	if len(reply) != 2 {
		return false, fmt.Errorf("unexpected reply %v", reply)
	}
	if ok, _ := reply[0].(int64); ok != 1 {
		return false, nil
	}
	s, _ := reply[1].(string)
	token, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return false, fmt.Errorf("unexpected token %v in reply", reply[1])
	}
	l.mu.Lock()
	l.last, l.lastRec, l.token = raw, ler, token
	l.holder = ler.HolderIdentity == l.identity
	l.mu.Unlock()
	return true, nil
}

// RecordEvent logs a leader election event ("became leader", "stopped leading") and, with
// Options.EventRecorder, records it as a Kubernetes event on Options.EventObject.
func (l *Lock) RecordEvent(s string) {
	klog.V(2).InfoS("Leader election event", "lock", l.Describe(), "identity", l.identity, "event", s)
	if l.recorder == nil {
		return
	}
	l.recorder.Eventf(l.object, corev1.EventTypeNormal, "LeaderElection", "%v %v", l.identity, s)
}

// stored is the JSON value of the record key: client-go's LeaderElectionRecord, field for field,
// with its times in microseconds (like a Lease object's) instead of seconds, so that every
// renewal changes the stored bytes. The bytes are what the compare-and-set compares, and what
// client-go compares to notice a renewal; whoever decodes the value as a LeaderElectionRecord
// reads the times, truncated to seconds.
type stored struct {
	HolderIdentity       string                                  `json:"holderIdentity"`
	LeaseDurationSeconds int                                     `json:"leaseDurationSeconds"`
	AcquireTime          metav1.MicroTime                        `json:"acquireTime"`
	RenewTime            metav1.MicroTime                        `json:"renewTime"`
	LeaderTransitions    int                                     `json:"leaderTransitions"`
	Strategy             coordinationv1.CoordinatedLeaseStrategy `json:"strategy"`
	PreferredHolder      string                                  `json:"preferredHolder"`
}

func encode(r resourcelock.LeaderElectionRecord) ([]byte, error) {
	return json.Marshal(stored{
		HolderIdentity:       r.HolderIdentity,
		LeaseDurationSeconds: r.LeaseDurationSeconds,
		AcquireTime:          metav1.NewMicroTime(r.AcquireTime.Time),
		RenewTime:            metav1.NewMicroTime(r.RenewTime.Time),
		LeaderTransitions:    r.LeaderTransitions,
		Strategy:             r.Strategy,
		PreferredHolder:      r.PreferredHolder,
	})
}

func decode(raw []byte) (resourcelock.LeaderElectionRecord, error) {
	var s stored
	if err := json.Unmarshal(raw, &s); err != nil {
		return resourcelock.LeaderElectionRecord{}, err
	}
	return resourcelock.LeaderElectionRecord{
		HolderIdentity:       s.HolderIdentity,
		LeaseDurationSeconds: s.LeaseDurationSeconds,
		AcquireTime:          metav1.NewTime(s.AcquireTime.Time),
		RenewTime:            metav1.NewTime(s.RenewTime.Time),
		LeaderTransitions:    s.LeaderTransitions,
		Strategy:             s.Strategy,
		PreferredHolder:      s.PreferredHolder,
	}, nil
}
