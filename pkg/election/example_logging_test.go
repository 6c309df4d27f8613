package election_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"github.com/redis/go-redis/v9"
	"k8s.io/klog/v2"

	"github.com/elector/elector/pkg/election"
)

// messageHandler is a slog.Handler that prints the message of each record at Info level or
// above with a few stable keys (the lease, and why a term ended), so that the output does not
// depend on tokens, times or the host.
type messageHandler struct{ attrs []slog.Attr }

func (h messageHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h messageHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return messageHandler{attrs: append(slices.Clip(h.attrs), as...)}
}

func (h messageHandler) WithGroup(string) slog.Handler { return h }

func (h messageHandler) Handle(_ context.Context, r slog.Record) error {
	line := []string{r.Message}
	add := func(a slog.Attr) bool {
		if a.Key == "lease" || a.Key == "reason" {
			line = append(line, a.Key+"="+a.Value.String())
		}
		return true
	}
	for _, a := range h.attrs {
		add(a)
	}
	r.Attrs(add)
	_, err := fmt.Fprintln(os.Stdout, strings.Join(line, " "))
	return err
}

// Run logs through the logr.Logger in its ctx (klog's contextual logging): pass any logr
// implementation with klog.NewContext, here log/slog through logr.FromSlogHandler. Every line
// of the election carries the lease and this replica's identity; without a logger in the ctx,
// Run logs through klog's global logger.
func Example_contextualLogging() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	logger := logr.FromSlogHandler(messageHandler{}) // or slog.NewJSONHandler(os.Stderr, nil)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e, err := election.New(election.Config{
		Client: client, LeaseName: "example-logging", Identity: "pod-a", ReleaseOnCancel: true,
		Callbacks: election.Callbacks{
			OnStartedLeading: func(ctx context.Context) {
				cancel() // stop at once: Run steps down and releases
				<-ctx.Done()
				klog.FromContext(ctx).Info("Work stopped") // the work logs through the same logger
			},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("Run returned", e.Run(klog.NewContext(ctx, logger)))
	// "Became leader" is logged after the work started, so the work's line may come first.

	// Unordered output:
	// Became leader lease=example-logging
	// Work stopped lease=example-logging
	// Stopped leading lease=example-logging reason=stopped
	// Run returned <nil>
}
