package gocron_test

import (
	"context"
	"os"

	"github.com/go-co-op/gocron/v2"
	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	electorgocron "github.com/elector/elector/adapters/gocron"
	"github.com/elector/elector/pkg/election"
)

// Only the leader's scheduler runs jobs.
func ExampleNewElector() {
	ctx := context.Background()
	client := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
	el, err := electorgocron.NewElector(ctx, election.Config{
		Client:          client,
		LeaseName:       "billing-scheduler",
		Identity:        os.Getenv("POD_NAME"),
		ReleaseOnCancel: true,
	})
	if err != nil {
		klog.Fatal(err)
	}
	defer el.Close()
	s, err := gocron.NewScheduler(gocron.WithDistributedElector(el))
	if err != nil {
		klog.Fatal(err)
	}
	defer s.Shutdown()
	_, err = s.NewJob(gocron.CronJob("*/5 * * * *", false), gocron.NewTask(func() {
		klog.InfoS("Sending invoices", "token", el.Token())
	}), gocron.WithName("invoices"))
	if err != nil {
		klog.Fatal(err)
	}
	s.Start()
	<-ctx.Done()
}

// Each run locks its job; runs spread over the replicas.
func ExampleNewLocker() {
	client := redis.NewClient(&redis.Options{Addr: "redis:6379", ContextTimeoutEnabled: true})
	locker, err := electorgocron.NewLocker(client, electorgocron.LockerOptions{Identity: os.Getenv("POD_NAME")})
	if err != nil {
		klog.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		klog.Fatal(err)
	}
	_, err = s.NewJob(gocron.CronJob("*/5 * * * *", false), gocron.NewTask(func() {
		token, _ := locker.Token("invoices") // the fencing token of this run
		klog.InfoS("Sending invoices", "token", token)
	}), gocron.WithName("invoices"))
	if err != nil {
		klog.Fatal(err)
	}
	s.Start()
}
