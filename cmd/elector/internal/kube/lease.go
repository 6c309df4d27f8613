package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"time"
)

// microTime is the format of a metav1.MicroTime (a Lease's acquireTime and renewTime).
const microTime = "2006-01-02T15:04:05.000000Z07:00"

// MirrorPeriod is how often the leader rewrites the mirror Lease's renewTime.
const MirrorPeriod = 10 * time.Second

// LeaseSpec is the part of a coordination.k8s.io/v1 Lease the mirror writes.
type LeaseSpec struct {
	HolderIdentity       string `json:"holderIdentity"`
	LeaseDurationSeconds int32  `json:"leaseDurationSeconds"`
	AcquireTime          string `json:"acquireTime,omitempty"`
	RenewTime            string `json:"renewTime,omitempty"`
	LeaseTransitions     int32  `json:"leaseTransitions"`
}

func leasePath(namespace, name string) string {
	return "/apis/coordination.k8s.io/v1/namespaces/" + url.PathEscape(namespace) + "/leases/" + url.PathEscape(name)
}

// GetLease reads the Lease's spec and resourceVersion.
func (c *Client) GetLease(ctx context.Context, namespace, name string) (LeaseSpec, string, error) {
	var out struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Spec LeaseSpec `json:"spec"`
	}
	raw, err := c.doGet(ctx, leasePath(namespace, name), "get", "leases")
	if err != nil {
		return LeaseSpec{}, "", err
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return LeaseSpec{}, "", fmt.Errorf("get leases: decode: %w", err)
	}
	return out.Spec, out.Metadata.ResourceVersion, nil
}

// PatchLease writes spec with a JSON merge patch that carries resourceVersion: the API
// server refuses it (409) if the Lease changed since it was read.
func (c *Client) PatchLease(ctx context.Context, namespace, name, resourceVersion string, spec LeaseSpec) error {
	patch := map[string]any{"metadata": map[string]any{"resourceVersion": resourceVersion}, "spec": spec}
	return c.do(ctx, http.MethodPatch, leasePath(namespace, name), mergePatch, patch, "patch", "leases")
}

// Mirror copies this replica's leadership into a Lease, for `kubectl get lease` only: the
// leader writes holderIdentity, acquireTime and leaseTransitions when its term starts and
// renewTime every MirrorPeriod; a step-down clears holderIdentity. Nothing reads it back.
type Mirror struct {
	c               *Client
	namespace, name string
	identity        string
	durationSeconds int32
	callTimeout     time.Duration
	leading         bool
	fails           *Failures
	state           chan bool // the latest wanted state: leading or not
}

// NewMirror returns a Mirror of identity's leadership in the Lease namespace/name.
func NewMirror(c *Client, namespace, name, identity string, leaseDuration, callTimeout time.Duration) *Mirror {
	return &Mirror{
		c: c, namespace: namespace, name: name, identity: identity, callTimeout: callTimeout,
		durationSeconds: int32(math.Ceil(leaseDuration.Seconds())), state: make(chan bool, 1),
		fails: NewFailures(namespace, c.server.String(), nil),
	}
}

// ReportTo makes the Mirror report its failures to f; call it before Run.
func (m *Mirror) ReportTo(f *Failures) { m.fails = f }

// Set reports that this replica leads (or no longer does); it never blocks.
func (m *Mirror) Set(leading bool) {
	for {
		select {
		case m.state <- leading:
			return
		default:
		}
		select {
		case <-m.state: // replace a state not yet taken
		default:
		}
	}
}

// Run writes the Lease until ctx ends.
func (m *Mirror) Run(ctx context.Context) {
	tick := time.NewTicker(MirrorPeriod)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case leading := <-m.state:
			wasLeading := m.leading
			m.leading = leading
			if leading || wasLeading {
				m.write(ctx, leading)
			}
		case <-tick.C:
			if m.leading {
				m.write(ctx, true)
			}
		}
	}
}

// write reads the Lease and writes this replica as its holder, or clears the holder if
// this replica holds it; a failure is reported and retried at the next tick or change.
func (m *Mirror) write(ctx context.Context, leading bool) {
	ctx, cancel := context.WithTimeout(ctx, m.callTimeout)
	defer cancel()
	spec, rv, err := m.c.GetLease(ctx, m.namespace, m.name)
	if err == nil {
		now := time.Now().UTC().Format(microTime)
		switch {
		case leading && spec.HolderIdentity != m.identity:
			if spec.HolderIdentity != "" || spec.AcquireTime != "" {
				spec.LeaseTransitions++
			}
			spec.HolderIdentity, spec.AcquireTime, spec.RenewTime = m.identity, now, now
		case leading:
			spec.RenewTime = now
		case spec.HolderIdentity != m.identity:
			return // someone else is already shown
		default:
			spec.HolderIdentity = ""
		}
		spec.LeaseDurationSeconds = m.durationSeconds
		err = m.c.PatchLease(ctx, m.namespace, m.name, rv, spec)
	}
	if err != nil {
		m.fails.Failed(OpLease, fmt.Errorf("mirror Lease %s/%s (informational only): %w", m.namespace, m.name, err))
		return
	}
	m.fails.Succeeded(OpLease)
}
