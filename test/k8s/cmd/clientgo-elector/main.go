// Command clientgo-elector is the peer the e2e compares elector with: client-go's
// LeaderElector, in a pod, as a Kubernetes user writes it (identity = pod name,
// ReleaseOnCancel on SIGTERM). With --lock=lease (the default) it elects on a
// coordination.k8s.io Lease through the in-cluster config; with --lock=redis on elector's
// Redis lock, adapters/clientgo, as that package's example does. It serves /healthz, /readyz
// (200 only while leading, for the same gated readiness as the chart's) and /leader.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"

	"github.com/elector/elector/adapters/clientgo"
	"github.com/elector/elector/internal/redisclient"
)

func main() {
	name := flag.String("lease-name", "clientgo", "Lease name (the lock's name with --lock=redis)")
	ns := flag.String("namespace", os.Getenv("POD_NAMESPACE"), "Lease namespace")
	lockKind := flag.String("lock", "lease", "where to elect: lease (a coordination.k8s.io Lease) or redis (adapters/clientgo)")
	redisAddr := flag.String("redis-addr", "", "Redis host:port, required with --lock=redis")
	duration := flag.Duration("lease-duration", 4*time.Second, "LeaseDuration")
	deadline := flag.Duration("renew-deadline", 3*time.Second, "RenewDeadline")
	retry := flag.Duration("retry-period", time.Second, "RetryPeriod")
	addr := flag.String("http-addr", ":8080", "HTTP address")
	flag.Parse()
	identity := os.Getenv("POD_NAME")

	lock, err := newLock(*lockKind, *name, *ns, *redisAddr, identity)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clientgo-elector:", err)
		os.Exit(2)
	}
	var leading atomic.Bool
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !leading.Load() {
			http.Error(w, "not the leader", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/leader", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"identity": identity, "isLeader": leading.Load()})
	})
	go func() { klog.ErrorS(http.ListenAndServe(*addr, mux), "http") }()

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   *duration,
		RenewDeadline:   *deadline,
		RetryPeriod:     *retry,
		ReleaseOnCancel: true,
		Name:            *name,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				leading.Store(true)
				klog.InfoS("started leading", "identity", identity, "lock", lock.Describe())
				<-ctx.Done()
			},
			OnStoppedLeading: func() {
				leading.Store(false)
				klog.InfoS("stopped leading", "identity", identity)
			},
		},
	})
}

// newLock builds the resource lock that --lock names.
func newLock(kind, name, ns, redisAddr, identity string) (resourcelock.Interface, error) {
	switch kind {
	case "lease":
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("--lock=lease: in-cluster config: %w", err)
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return nil, fmt.Errorf("--lock=lease: kubernetes client: %w", err)
		}
		return &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: name, Namespace: ns},
			Client:     client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		}, nil
	case "redis":
		if redisAddr == "" {
			return nil, fmt.Errorf("--redis-addr is required with --lock=redis")
		}
		client, err := redisclient.New(redisclient.Config{Addrs: []string{redisAddr}, Mode: redisclient.ModeStandalone, ClientName: identity})
		if err != nil {
			return nil, fmt.Errorf("--lock=redis: %w", err)
		}
		return clientgo.New(client, name, identity, clientgo.Options{})
	default:
		return nil, fmt.Errorf("--lock=%q: allowed: lease, redis", kind)
	}
}
