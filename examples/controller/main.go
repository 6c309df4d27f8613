// Command controller is a controller that embeds elector: every replica serves health and
// leadership endpoints, and only the leader runs the reconcile loop.
//
//	go run ./examples/controller --redis-addr 127.0.0.1:6379 --identity pod-a --http-addr :8081
//	go run ./examples/controller --redis-addr 127.0.0.1:6379 --identity pod-b --http-addr :8082
//	curl localhost:8081/leader
//
// Stop the leader with Ctrl-C: the other replica takes over in about a millisecond.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/pkg/election"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run starts the controller and blocks until ctx is cancelled. When ready is not nil it
// receives the address the HTTP server listens on.
func run(ctx context.Context, args []string, out io.Writer, ready chan<- string) error {
	fs := flag.NewFlagSet("controller", flag.ContinueOnError)
	addr := fs.String("redis-addr", "127.0.0.1:6379", "Redis address")
	identity := fs.String("identity", os.Getenv("POD_NAME"), "this replica's identity (default $POD_NAME)")
	httpAddr := fs.String("http-addr", ":8081", "address of /leader, /healthz and /metrics")
	every := fs.Duration("reconcile-every", time.Second, "interval of the reconcile loop")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *identity == "" {
		*identity, _ = os.Hostname()
	}

	client := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true})
	defer client.Close()
	reg := prometheus.NewRegistry()
	metrics, err := election.NewMetrics(reg)
	if err != nil {
		return err
	}
	e, err := election.New(election.Config{
		Client:          client,
		LeaseName:       "example-controller",
		Identity:        *identity,
		ReleaseOnCancel: true,
		Recampaign:      true,
		Metrics:         metrics,
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) { reconcileLoop(ctx, out, *every) },
			OnStoppedLeading: func() { klog.InfoS("Stopped reconciling") },
			OnNewLeader:      func(id string) { fmt.Fprintf(out, "leader is %s\n", id) },
		},
	})
	if err != nil {
		return err
	}

	mux := http.NewServeMux()
	mux.Handle("/leader", e.LeaderHandler())
	mux.Handle("/healthz", e.HealthzAdaptor(5*time.Second))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", *httpAddr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	if ready != nil {
		ready <- ln.Addr().String()
	}
	if err := e.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// reconcileLoop is the singleton work: it runs only on the leader, until ctx is cancelled.
func reconcileLoop(ctx context.Context, out io.Writer, every time.Duration) {
	token := election.TokenFrom(ctx)
	t := time.NewTicker(every)
	defer t.Stop()
	for n := 1; ; n++ {
		fmt.Fprintf(out, "reconcile #%d (fencing token %d)\n", n, token)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
