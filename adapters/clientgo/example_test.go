package clientgo_test

import (
	"context"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/elector/elector/adapters/clientgo"
)

// client-go's own LeaderElector, electing on Redis.
func ExampleNew() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
	lock, err := clientgo.New(client, "my-controller", os.Getenv("POD_NAME"), clientgo.Options{})
	if err != nil {
		klog.Fatal(err)
	}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		ReleaseOnCancel: true,
		Name:            "my-controller",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				klog.InfoS("Leading", "token", lock.Token())
				<-ctx.Done()
			},
			OnStoppedLeading: func() { klog.InfoS("Stopped leading") },
		},
	})
}

// A controller-runtime manager electing on Redis.
func ExampleNew_controllerRuntime() {
	client := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
	lock, err := clientgo.New(client, "my-operator", os.Getenv("POD_NAME"), clientgo.Options{})
	if err != nil {
		klog.Fatal(err)
	}
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		LeaderElection:                      true,
		LeaderElectionID:                    "my-operator",
		LeaderElectionResourceLockInterface: lock,
		LeaderElectionReleaseOnCancel:       true,
	})
	if err != nil {
		klog.Fatal(err)
	}
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		klog.Fatal(err)
	}
}
