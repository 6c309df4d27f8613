package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// The operations a Failure names: the op label of elector_kubernetes_errors_total.
const (
	OpLabel = "label" // the pod label patch
	OpEvent = "event" // the creation or patch of an Event
	OpLease = "lease" // the read or patch of the mirror Lease
)

// The reasons a failed call is classified by: the reason label of
// elector_kubernetes_errors_total.
const (
	ReasonForbidden    = "forbidden"    // 403: RBAC does not allow the call
	ReasonUnauthorized = "unauthorized" // 401: the token is refused, or there is none to read
	ReasonNotFound     = "not_found"    // 404: the pod, the Lease or the namespace is missing
	ReasonConflict     = "conflict"     // 409: the object changed between read and write
	ReasonTimeout      = "timeout"      // no answer within the call timeout
	ReasonUnreachable  = "unreachable"  // no connection (refused, reset, DNS, TLS)
	ReasonServer       = "server"       // 429 or 5xx: the API server is overloaded or failing
	ReasonOther        = "other"        // anything else (a 4xx such as 422, an unreadable token)
)

// Reason classifies err, an error of a Client call.
func Reason(err error) string {
	var ae *APIError
	if errors.As(err, &ae) {
		switch {
		case ae.Code == http.StatusForbidden:
			return ReasonForbidden
		case ae.Code == http.StatusUnauthorized:
			return ReasonUnauthorized
		case ae.Code == http.StatusNotFound:
			return ReasonNotFound
		case ae.Code == http.StatusConflict:
			return ReasonConflict
		case ae.Code == http.StatusGatewayTimeout:
			return ReasonTimeout
		case ae.Code == http.StatusTooManyRequests || ae.Code >= 500:
			return ReasonServer
		}
		return ReasonOther
	}
	// Before net.Error: a *fs.PathError has a Timeout method too.
	var te *TokenError
	if errors.As(err, &te) {
		return ReasonUnauthorized
	}
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return ReasonTimeout
	case errors.As(err, &ne):
		return ReasonUnreachable // *url.Error of the transport: refused, reset, DNS, TLS
	}
	return ReasonOther
}

// Failure describes the failing Kubernetes API call: what /leader serves as
// "kubernetesError".
type Failure struct {
	// Op is the feature whose call fails: label, event or lease.
	Op string `json:"op"`
	// Reason classifies the error (Reason).
	Reason string `json:"reason"`
	// Error is the error text.
	Error string `json:"error"`
	// Fix says what to change, or what the cause is.
	Fix string `json:"fix,omitempty"`
	// Since is when this kind of failure began.
	Since time.Time `json:"since"`
	// Count is the number of failed calls since then.
	Count int `json:"count"`

	last time.Time // the latest failed call
}

// Failures keeps the current failure of each op, logs each kind of failure once at error
// level (the retries at -v=2) and the recovery once, and counts every failed call. Its
// methods are safe for concurrent use; none blocks on the API server.
type Failures struct {
	namespace, server string
	count             func(op, reason string) // nil: not counted
	now               func() time.Time
	logger            klog.Logger

	mu      sync.Mutex
	current map[string]*Failure // by op
}

// NewFailures returns the Failures of the calls in namespace to server; count, if not nil,
// is called for every failed call (the metric).
func NewFailures(namespace, server string, count func(op, reason string)) *Failures {
	return &Failures{namespace: namespace, server: server, count: count, now: time.Now, logger: klog.Background(), current: map[string]*Failure{}}
}

// Failed records a failed call of op. A call cancelled by the shutdown is no failure of the
// API server and is ignored.
func (f *Failures) Failed(op string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	reason := Reason(err)
	if f.count != nil {
		f.count(op, reason)
	}
	now := f.now()
	f.mu.Lock()
	prev := f.current[op]
	cur := &Failure{Op: op, Reason: reason, Error: err.Error(), Fix: f.fix(err, reason), Since: now, Count: 1, last: now}
	same := prev != nil && prev.Reason == reason
	if same {
		cur.Since, cur.Count = prev.Since, prev.Count+1
	}
	f.current[op] = cur
	f.mu.Unlock()
	if same {
		f.logger.V(2).Info("Kubernetes API call failed again", "op", op, "reason", reason, "err", err, "failures", cur.Count)
		return
	}
	f.logger.Error(err, "Kubernetes API call failed; retrying with backoff (leadership is not affected)",
		"op", op, "reason", reason, "fix", cur.Fix)
}

// Succeeded records a successful call of op; the first after failures is logged.
func (f *Failures) Succeeded(op string) {
	f.mu.Lock()
	prev := f.current[op]
	delete(f.current, op)
	f.mu.Unlock()
	if prev != nil {
		f.logger.Info("Kubernetes API calls succeed again", "op", op, "since", prev.Since, "failures", prev.Count)
	}
}

// Current returns a copy of the failure of the op that failed last, nil while no op fails.
func (f *Failures) Current() *Failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	var latest *Failure
	for _, c := range f.current {
		if latest == nil || c.last.After(latest.last) {
			latest = c
		}
	}
	if latest == nil {
		return nil
	}
	c := *latest
	return &c
}

// fix says what to change for err, or what causes it.
func (f *Failures) fix(err error, reason string) string {
	var ae *APIError
	errors.As(err, &ae)
	switch reason {
	case ReasonForbidden:
		return fmt.Sprintf("grant the ServiceAccount %s on %s in namespace %s: see charts/elector values rbac.create", ae.Verb, ae.Resource, f.namespace)
	case ReasonUnauthorized:
		var te *TokenError
		if errors.As(err, &te) {
			return fmt.Sprintf("no readable service-account token at %s: mount one (serviceAccount.automountToken in the chart, automountServiceAccountToken in the pod)", te.File)
		}
		return "the API server refuses the service-account token: mount one (automountServiceAccountToken) and check that the ServiceAccount exists"
	case ReasonNotFound:
		switch ae.Resource {
		case "pods":
			return fmt.Sprintf("no such pod in namespace %s: $POD_NAME and $POD_NAMESPACE must name this pod (downward API)", f.namespace)
		case "leases":
			return fmt.Sprintf("create the Lease of --mirror-lease in namespace %s (the chart renders it with mirrorLease.enabled)", f.namespace)
		}
		return fmt.Sprintf("%s not found in namespace %s", ae.Resource, f.namespace)
	case ReasonConflict:
		return fmt.Sprintf("another writer changed the %s between the read and the write; retried", ae.Resource)
	case ReasonTimeout:
		return fmt.Sprintf("the API server %s did not answer in time; retried", f.server)
	case ReasonUnreachable:
		return fmt.Sprintf("cannot connect to the API server %s: check NetworkPolicies (egress to it) and $KUBERNETES_SERVICE_HOST", f.server)
	case ReasonServer:
		return "the API server is overloaded or failing; retried"
	}
	return ""
}
