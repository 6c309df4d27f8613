// Command clientgo-elector is the peer the e2e compares elector with: client-go's
// LeaderElector on a coordination.k8s.io Lease, in a pod, as a Kubernetes user writes it
// (in-cluster config, identity = pod name, ReleaseOnCancel on SIGTERM). It serves /healthz,
// /readyz (200 only while leading, for the same gated readiness as the chart's) and /leader.
package main

import (
	"context"
	"encoding/json"
	"flag"
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
)

func main() {
	name := flag.String("lease-name", "clientgo", "Lease name")
	ns := flag.String("namespace", os.Getenv("POD_NAMESPACE"), "Lease namespace")
	duration := flag.Duration("lease-duration", 4*time.Second, "LeaseDuration")
	deadline := flag.Duration("renew-deadline", 3*time.Second, "RenewDeadline")
	retry := flag.Duration("retry-period", time.Second, "RetryPeriod")
	addr := flag.String("http-addr", ":8080", "HTTP address")
	flag.Parse()
	identity := os.Getenv("POD_NAME")

	cfg, err := rest.InClusterConfig()
	if err != nil {
		klog.ErrorS(err, "in-cluster config")
		os.Exit(1)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
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
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: *name, Namespace: *ns},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
	}
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
				klog.InfoS("started leading", "identity", identity)
				<-ctx.Done()
			},
			OnStoppedLeading: func() {
				leading.Store(false)
				klog.InfoS("stopped leading", "identity", identity)
			},
		},
	})
}
