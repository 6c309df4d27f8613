package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/cmd/elector/internal/kube"
	"github.com/elector/elector/pkg/election"
)

// Flag names of the Kubernetes integration (run and sidecar).
const (
	flagLeaderLabel = "leader-label"
	flagEvents      = "events"
	flagMirrorLease = "mirror-lease"
)

// The downward-API variables the Kubernetes integration reads (the chart sets them).
const (
	envPodName      = "POD_NAME"
	envPodNamespace = "POD_NAMESPACE"
	envPodUID       = "POD_UID"
	envNodeName     = "NODE_NAME"
)

// kubeCallTimeout bounds each call to the API server.
const kubeCallTimeout = 5 * time.Second

// kubeOptions are --leader-label and --events.
type kubeOptions struct {
	leaderLabel string
	events      bool
	mirrorLease string

	namespace, pod, uid, node string // from the downward API, filled by complete
	cluster                   kube.Config
}

// addFlags registers the Kubernetes flags on fs.
func (o *kubeOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.leaderLabel, flagLeaderLabel, "", "label `key` (e.g. elector.io/leader) set to \"true\" on this pod while it leads and removed before the lease is released; empty: off. Needs $POD_NAME, $POD_NAMESPACE and RBAC patch on pods")
	fs.BoolVar(&o.events, flagEvents, false, "write Kubernetes Events on this pod when it becomes leader and stops leading (deduplicated and rate-limited). Needs $POD_NAME, $POD_NAMESPACE and RBAC create, patch on events")
	fs.StringVar(&o.mirrorLease, flagMirrorLease, "", "`name` of an existing coordination.k8s.io Lease in $POD_NAMESPACE that the leader keeps showing as its holder, for kubectl get lease only (never read by the election); empty: off. Needs RBAC get, patch on that Lease")
}

// off reports whether no Kubernetes feature is on.
func (o *kubeOptions) off() bool {
	return o.leaderLabel == "" && !o.events && o.mirrorLease == ""
}

// dnsSubdomainRE is a Kubernetes object name (RFC 1123 subdomain).
var dnsSubdomainRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)

// labelKeyRE is a qualified label key: an optional DNS-subdomain prefix and a name.
var labelKeyRE = regexp.MustCompile(`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$`)

// complete checks the flags and reads the pod's identity and the API server's address.
func (o *kubeOptions) complete(c *cli) error {
	if o.off() {
		return nil
	}
	flag := "--" + flagEvents
	if o.mirrorLease != "" {
		flag = "--" + flagMirrorLease
		if !dnsSubdomainRE.MatchString(o.mirrorLease) || len(o.mirrorLease) > 253 {
			return fmt.Errorf("--%s: %q is not a Lease name: want a DNS subdomain (lower-case letters, digits, '-', '.')", flagMirrorLease, o.mirrorLease)
		}
	}
	if o.leaderLabel != "" {
		flag = "--" + flagLeaderLabel
		if prefix, _, _ := strings.Cut(o.leaderLabel, "/"); !labelKeyRE.MatchString(o.leaderLabel) || len(prefix) > 253 {
			return fmt.Errorf("--%s: %q is not a label key: want [prefix/]name, a name of at most 63 letters, digits, '-', '_', '.'", flagLeaderLabel, o.leaderLabel)
		}
	}
	o.pod, o.namespace = c.getenv(envPodName), c.getenv(envPodNamespace)
	o.uid, o.node = c.getenv(envPodUID), c.getenv(envNodeName)
	if o.pod == "" || o.namespace == "" {
		return fmt.Errorf("%s: $%s and $%s must name this pod (set them from the downward API: fieldRef metadata.name and metadata.namespace)", flag, envPodName, envPodNamespace)
	}
	cfg, err := kube.InCluster(c.getenv)
	if err != nil {
		return fmt.Errorf("%s: %w", flag, err)
	}
	o.cluster = cfg
	return nil
}

// labelRemoveTimeout bounds how long a step-down waits for the label's removal, which
// delays the release: the retry period, and at most half of what is left of the lease
// after a renew deadline passed, so that a removal that hangs ends before another replica
// could acquire the expired lease.
func labelRemoveTimeout(lo *leaseOptions) time.Duration {
	return max(min(lo.retryPeriod, killGraceBound(lo)/2), time.Millisecond)
}

// kubeHooks make leadership visible in Kubernetes: the leader label and the Events. A nil
// *kubeHooks (both features off) does nothing.
type kubeHooks struct {
	labeler       *kube.Labeler
	recorder      *kube.Recorder
	mirror        *kube.Mirror
	identity      string
	leaseName     string
	removeTimeout time.Duration
	failures      *kube.Failures
	errors        *prometheus.CounterVec // elector_kubernetes_errors_total
	cancel        context.CancelFunc
	wg            sync.WaitGroup

	mu   sync.Mutex
	term context.Context // the ctx of the term OnStartedLeading received, nil between terms
}

// startKube starts the label's and the Events' goroutines; nil when both are off. The
// label's first patch removes a label a crashed predecessor container left on this pod.
func startKube(o *kubeOptions, lo *leaseOptions) (*kubeHooks, error) {
	if o.off() {
		return nil, nil
	}
	client, err := kube.New(o.cluster)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubeHooks{identity: lo.identity, leaseName: lo.name, removeTimeout: labelRemoveTimeout(lo), cancel: cancel,
		errors: newKubeErrors()}
	k.failures = kube.NewFailures(o.namespace, o.cluster.Server, func(op, reason string) {
		k.errors.WithLabelValues(op, reason).Inc()
	})
	if o.leaderLabel != "" {
		k.labeler = kube.NewLabeler(client, o.namespace, o.pod, o.leaderLabel, kubeCallTimeout)
		k.labeler.ReportTo(k.failures)
		k.wg.Go(func() { k.labeler.Run(ctx) })
		klog.InfoS("Leader label on", "pod", o.namespace+"/"+o.pod, "label", o.leaderLabel, "removalTimeout", k.removeTimeout)
	}
	if o.events {
		ref := kube.ObjectReference{APIVersion: "v1", Kind: "Pod", Namespace: o.namespace, Name: o.pod, UID: o.uid}
		k.recorder = kube.NewRecorder(client, ref, "elector", kubeCallTimeout)
		k.recorder.SetHost(o.node)
		k.recorder.ReportTo(k.failures)
		k.wg.Go(func() { k.recorder.Run(ctx) })
	}
	if o.mirrorLease != "" {
		k.mirror = kube.NewMirror(client, o.namespace, o.mirrorLease, lo.identity, lo.leaseDuration, kubeCallTimeout)
		k.mirror.ReportTo(k.failures)
		k.wg.Go(func() { k.mirror.Run(ctx) })
	}
	return k, nil
}

// newKubeErrors returns the counter of failed Kubernetes API calls.
func newKubeErrors() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "elector_kubernetes_errors_total",
		Help: "Failed Kubernetes API calls of the leader label, the Events and the mirror Lease, by op (label, event, lease) and reason (forbidden, unauthorized, not_found, conflict, timeout, unreachable, server, other). They never delay a renewal, a step-down or a release.",
	}, []string{"op", "reason"})
}

// collectors returns the metrics of the Kubernetes integration; none when it is off.
func (k *kubeHooks) collectors() []prometheus.Collector {
	if k == nil {
		return nil
	}
	return []prometheus.Collector{k.errors}
}

// failure returns the Kubernetes API failure being retried, nil while the calls succeed or
// the integration is off: /leader's "kubernetesError".
func (k *kubeHooks) failure() *kube.Failure {
	if k == nil {
		return nil
	}
	return k.failures.Current()
}

// close stops the goroutines; Events still queued get up to releaseTimeout.
func (k *kubeHooks) close() {
	if k == nil {
		return
	}
	k.cancel()
	if k.recorder != nil {
		select {
		case <-k.recorder.Done():
		case <-time.After(releaseTimeout):
		}
	}
}

// wrap returns cb with the label and the Events hooked in: the label is added when a term
// starts and removed in OnStoppedLeading, which the elector runs before it releases the
// lease, so the removal is sent (and waited for, at most removeTimeout) before a successor
// can acquire the lease.
func (k *kubeHooks) wrap(cb election.Callbacks) election.Callbacks {
	if k == nil {
		return cb
	}
	started, stopped := cb.OnStartedLeading, cb.OnStoppedLeading
	cb.OnStartedLeading = func(ctx context.Context) {
		k.started(ctx)
		started(ctx)
	}
	cb.OnStoppedLeading = func() {
		k.stopped()
		stopped()
	}
	return cb
}

// started marks the pod as the leader, unless the term already ended: OnStoppedLeading may
// run before this goroutine does, and must not be followed by an addition.
func (k *kubeHooks) started(ctx context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if ctx.Err() != nil {
		return
	}
	k.term = ctx
	if k.labeler != nil {
		k.labeler.Set(true)
	}
	if k.mirror != nil {
		k.mirror.Set(true)
	}
	// The term's context ends at the trust deadline even when the elector's loop that runs
	// OnStoppedLeading is held up (a blocked log write): the label and the mirror follow
	// the context, so that they never outlive the term; stopped() still waits for the
	// removal before the release.
	context.AfterFunc(ctx, func() { k.ended(ctx) })
	if k.recorder != nil {
		k.recorder.Eventf(kube.TypeNormal, "BecameLeader", "%s became leader of lease %q with fencing token %d",
			k.identity, k.leaseName, election.TokenFrom(ctx))
	}
}

// ended removes the label and the mirror's holder once the term's context is done, unless
// another term started since.
func (k *kubeHooks) ended(term context.Context) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.term != term {
		return
	}
	if k.labeler != nil {
		k.labeler.Set(false)
	}
	if k.mirror != nil {
		k.mirror.Set(false)
	}
}

// stopped removes the label and waits for the removal, at most removeTimeout; then the
// elector goes on to release the lease.
func (k *kubeHooks) stopped() {
	k.mu.Lock()
	term := k.term
	k.term = nil
	var gen uint64
	if k.labeler != nil {
		gen = k.labeler.Set(false)
	}
	if k.mirror != nil {
		k.mirror.Set(false) // informational: not waited for
	}
	k.mu.Unlock()
	if term != nil && k.recorder != nil {
		reason, typ := stopReason(context.Cause(term))
		k.recorder.Eventf(typ, "StoppedLeading", "%s stopped leading lease %q (fencing token %d): %s",
			k.identity, k.leaseName, election.TokenFrom(term), reason)
	}
	if k.labeler == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), k.removeTimeout)
	defer cancel()
	if err := k.labeler.Wait(ctx, gen); err != nil {
		klog.ErrorS(err, "The leader label could not be removed in time; releasing the lease anyway, the removal is retried in the background",
			"timeout", k.removeTimeout)
	}
}

// stopReason names why a term ended, with the reasons of the elector's "Stopped leading" log
// line (resigned, lease lost, renew deadline exceeded, stopped), and the Event type: Warning
// when leadership was lost.
func stopReason(cause error) (reason, typ string) {
	switch {
	case errors.Is(cause, election.ErrResigned):
		return "resigned", kube.TypeNormal
	case errors.Is(cause, election.ErrLeadershipLost):
		r := strings.TrimPrefix(cause.Error(), election.ErrLeadershipLost.Error()+": ")
		return r, kube.TypeWarning
	}
	return "stopped", kube.TypeNormal
}
