// Command controller-runtime is a controller-runtime manager whose leader election runs on
// elector's Redis lock, through adapters/clientgo, instead of on a Kubernetes Lease: one
// trivial reconciler, which stamps each ConfigMap labelled example.elector.io/watch=true with
// the replica that reconciled it, runs on one replica at a time. docs/CONTROLLERS.md explains
// it, and the migration of a running fleet from a Lease to Redis and back (--lock).
//
// Flags (POD_NAME and POD_NAMESPACE from the downward API):
//
//	--lock=redis        elect on Redis (adapters/clientgo)
//	--lock=lease        elect on a coordination.k8s.io Lease, controller-runtime's own lock
//	--lock=lease+redis  hold both (clientgo.DualLock): the middle version of a migration
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/elector/elector/adapters/clientgo"
)

// The ConfigMaps the reconciler watches, and the annotations it writes.
const (
	watchLabel   = "example.elector.io/watch"
	reconciledBy = "example.elector.io/reconciled-by"
	reconciledAt = "example.elector.io/reconciled-at"
)

// config is what the flags set.
type config struct {
	name, namespace, lock, redisAddr string
	identity                         string // unique per process: pod name and a UUID
	leaseDuration, renewDeadline     time.Duration
	retryPeriod                      time.Duration
	journalKey, probeAddr            string
}

func main() {
	var c config
	flag.StringVar(&c.name, "name", "elector-example", "leader election ID: the Lease's name, and the Redis lock's")
	flag.StringVar(&c.namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the ConfigMaps and of the Lease")
	flag.StringVar(&c.lock, "lock", "redis", "where to elect: redis, lease, or lease+redis (both, during a migration)")
	flag.StringVar(&c.redisAddr, "redis-addr", "", "Redis host:port (--lock=redis or lease+redis, and --journal-key)")
	flag.DurationVar(&c.leaseDuration, "lease-duration", 15*time.Second, "LeaseDuration")
	flag.DurationVar(&c.renewDeadline, "renew-deadline", 10*time.Second, "RenewDeadline")
	flag.DurationVar(&c.retryPeriod, "retry-period", 2*time.Second, "RetryPeriod")
	flag.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (0: none)")
	flag.StringVar(&c.journalKey, "journal-key", "", "for the e2e: append each start and stop of leading to this Redis list")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if err := run(ctrl.SetupSignalHandler(), ctrl.GetConfigOrDie(), c); err != nil {
		ctrl.Log.Error(err, "manager failed")
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg *rest.Config, c config) error {
	pod, _ := os.Hostname()
	if p := os.Getenv("POD_NAME"); p != "" {
		pod = p
	}
	c.identity = pod + "_" + string(uuid.NewUUID()) // controller-runtime's own form
	var rc *redis.Client
	if c.redisAddr != "" {
		rc = redis.NewClient(&redis.Options{Addr: c.redisAddr, ContextTimeoutEnabled: true})
		defer rc.Close()
	}
	mgr, err := newManager(cfg, c, rc)
	if err != nil {
		return err
	}
	if err := addReconciler(mgr, pod); err != nil {
		return err
	}
	if c.journalKey != "" {
		if err := addJournal(ctx, mgr, rc, c.journalKey, pod); err != nil {
			return err
		}
	}
	return mgr.Start(ctx)
}

// newManager returns the manager, electing as --lock says. rc is the Redis client (nil
// without --redis-addr).
func newManager(cfg *rest.Config, c config, rc *redis.Client) (manager.Manager, error) {
	opts := ctrl.Options{
		LeaderElection:                true,
		LeaderElectionID:              c.name,
		LeaderElectionNamespace:       c.namespace,
		LeaderElectionReleaseOnCancel: true, // a stopping leader hands over at once
		LeaseDuration:                 &c.leaseDuration,
		RenewDeadline:                 &c.renewDeadline,
		RetryPeriod:                   &c.retryPeriod,
		Metrics:                       metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:        c.probeAddr,
		// The reconciler's only objects: the labelled ConfigMaps of one namespace (a Role, not a
		// ClusterRole, grants what it needs).
		Cache: cache.Options{
			DefaultNamespaces:    map[string]cache.Config{c.namespace: {}},
			DefaultLabelSelector: labels.SelectorFromSet(labels.Set{watchLabel: "true"}),
		},
	}
	switch c.lock {
	case "lease":
		opts.LeaderElectionResourceLock = resourcelock.LeasesResourceLock
	case "redis", "lease+redis":
		if rc == nil {
			return nil, fmt.Errorf("--lock=%s needs --redis-addr", c.lock)
		}
		lock, err := clientgo.New(rc, c.name, c.identity, clientgo.Options{})
		if err != nil {
			return nil, err
		}
		opts.LeaderElectionResourceLockInterface = lock
		if c.lock == "lease+redis" {
			lease, err := leaseLock(cfg, c)
			if err != nil {
				return nil, err
			}
			if opts.LeaderElectionResourceLockInterface, err = clientgo.NewDualLock(lease, lock); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fmt.Errorf("--lock=%q: allowed: redis, lease, lease+redis", c.lock)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return nil, err
	}
	if err := mgr.AddHealthzCheck("ping", func(*http.Request) error { return nil }); err != nil {
		return nil, err
	}
	return mgr, mgr.AddReadyzCheck("ping", func(*http.Request) error { return nil })
}

// leaseLock is the Lease that --lock=lease elects on, as controller-runtime builds it
// (sigs.k8s.io/controller-runtime/pkg/leaderelection): the same object, namespace/name.
func leaseLock(cfg *rest.Config, c config) (resourcelock.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = max(c.renewDeadline/2, time.Second)
	cs, err := coordinationv1client.NewForConfig(rest.AddUserAgent(cfg, "leader-election"))
	if err != nil {
		return nil, err
	}
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: c.namespace, Name: c.name},
		Client:     cs,
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.identity},
	}, nil
}

// reconciler stamps each watched ConfigMap with the replica that reconciled it last.
type reconciler struct {
	client.Client
	pod string
}

func addReconciler(mgr manager.Manager, pod string) error {
	return ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).
		Complete(&reconciler{Client: mgr.GetClient(), pod: pod})
}

func (r *reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cm.Annotations[reconciledBy] == r.pod {
		return ctrl.Result{}, nil
	}
	patch := client.MergeFrom(cm.DeepCopy())
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[reconciledBy] = r.pod
	cm.Annotations[reconciledAt] = time.Now().UTC().Format(time.RFC3339Nano)
	return ctrl.Result{}, r.Patch(ctx, &cm, patch)
}

// entry is one line of the journal.
type entry struct {
	Pod   string `json:"pod"`
	Event string `json:"event"` // start, stop (of leading), cancel (the signal)
	At    int64  `json:"at"`    // Unix microseconds
}

// addJournal appends to the Redis list key when this replica starts and stops leading (a
// runnable under leader election: the manager starts it after acquiring and stops it before
// releasing) and when it is told to stop: the e2e's record of who led when. Redis orders the
// entries of all replicas.
func addJournal(ctx context.Context, mgr manager.Manager, rc *redis.Client, key, pod string) error {
	if rc == nil {
		return errors.New("--journal-key needs --redis-addr")
	}
	write := func(event string) {
		b, _ := json.Marshal(entry{Pod: pod, Event: event, At: time.Now().UnixMicro()})
		wctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := rc.RPush(wctx, key, b).Err(); err != nil {
			ctrl.Log.Error(err, "journal", "event", event)
		}
	}
	go func() { <-ctx.Done(); write("cancel") }()
	return mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		write("start")
		<-ctx.Done()
		write("stop")
		return nil
	}))
}
