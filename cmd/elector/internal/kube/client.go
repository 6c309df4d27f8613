// Package kube is elector's small in-cluster Kubernetes client: the three calls the CLI
// needs to make leadership visible in Kubernetes (a JSON merge patch of its own pod's
// labels, and the creation and patch of core/v1 Events), on net/http with the pod's
// service-account token and CA. It is not client-go: no informers, no caches, no watch.
// The token file is read again for every request, so a rotated projected token is used as
// soon as the kubelet writes it.
package kube

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
)

// The standard in-cluster paths and variables.
const (
	DefaultTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	DefaultCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
	EnvServiceHost   = "KUBERNETES_SERVICE_HOST"
	EnvServicePort   = "KUBERNETES_SERVICE_PORT"
)

// Config says where the API server is and how to authenticate to it.
type Config struct {
	// Server is the API server's base URL, https://host:port.
	Server string
	// TokenFile holds the bearer token; read for every request.
	TokenFile string
	// CAFile holds the PEM CA bundle that verifies the API server.
	CAFile string
}

// InCluster returns the Config of a pod: KUBERNETES_SERVICE_HOST and _PORT and the
// service-account files at their standard paths.
func InCluster(getenv func(string) string) (Config, error) {
	host, port := getenv(EnvServiceHost), getenv(EnvServicePort)
	if host == "" || port == "" {
		return Config{}, fmt.Errorf("not in a Kubernetes pod: $%s or $%s is empty", EnvServiceHost, EnvServicePort)
	}
	return Config{
		Server:    "https://" + net.JoinHostPort(host, port),
		TokenFile: DefaultTokenFile,
		CAFile:    DefaultCAFile,
	}, nil
}

// Client makes the calls. It is safe for concurrent use.
type Client struct {
	server    *url.URL
	tokenFile string
	http      *http.Client
}

// New returns a Client for cfg; it reads the CA bundle now and the token at each request.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.Server)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("kubernetes API server %q: not a URL", cfg.Server)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil // in-cluster traffic goes to the API server directly
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("read the Kubernetes CA bundle: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("read the Kubernetes CA bundle %s: no PEM certificate in it", cfg.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	return &Client{server: u, tokenFile: cfg.TokenFile, http: &http.Client{Transport: tr}}, nil
}

// APIError is a response of the API server other than 2xx.
type APIError struct {
	Verb     string // patch, create
	Resource string // pods, events
	Code     int    // HTTP status
	Reason   string // the Status's reason (Forbidden, NotFound, Conflict…), if any
	Message  string // the Status's message, or the body
}

func (e *APIError) Error() string {
	s := fmt.Sprintf("%s %s: HTTP %d", e.Verb, e.Resource, e.Code)
	if e.Reason != "" {
		s += " " + e.Reason
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	if e.Code == http.StatusForbidden {
		s += fmt.Sprintf(" (the service account needs the RBAC verb %q on %q)", e.Verb, e.Resource)
	}
	return s
}

// TokenError is a service-account token that could not be read: no request was sent.
type TokenError struct {
	File string // the token file
	Err  error  // the read error
}

// Error says that the token could not be read, and why.
func (e *TokenError) Error() string { return "read the service-account token: " + e.Err.Error() }

// Unwrap returns the read error.
func (e *TokenError) Unwrap() error { return e.Err }

// IsStatus reports whether err is an APIError with HTTP status code.
func IsStatus(err error, code int) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == code
}

// Retryable reports whether a failed call is worth retrying: transport errors, 429, 5xx,
// and 409 conflicts. 401/403/404/422 need a change elsewhere, yet a token may be rotated or
// RBAC added later, so callers retry those too, with a longer backoff.
func Retryable(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return true
	}
	return ae.Code == http.StatusTooManyRequests || ae.Code == http.StatusConflict || ae.Code >= 500
}

// do sends one request with the current token and decodes a non-2xx answer into an
// APIError.
func (c *Client) do(ctx context.Context, method, path, contentType string, body any, verb, resource string) error {
	return c.send(ctx, method, path, contentType, body, verb, resource, nil)
}

// send is do that also returns the body of a 2xx answer in *out when out is not nil; a nil
// body sends none.
func (c *Client) send(ctx context.Context, method, path, contentType string, body any, verb, resource string, out *[]byte) error {
	var payload io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: encode: %w", verb, resource, err)
		}
		payload = bytes.NewReader(raw)
	}
	u := *c.server
	u.Path = path
	req, err := http.NewRequestWithContext(ctx, method, u.String(), payload)
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, resource, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "elector")
	if c.tokenFile != "" {
		tok, err := os.ReadFile(c.tokenFile)
		if err != nil {
			return fmt.Errorf("%s %s: %w", verb, resource, &TokenError{File: c.tokenFile, Err: err})
		}
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", verb, resource, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		if out != nil {
			*out = raw
		}
		return nil
	}
	ae := &APIError{Verb: verb, Resource: resource, Code: resp.StatusCode}
	var st struct{ Reason, Message string }
	if json.Unmarshal(raw, &st) == nil && (st.Reason != "" || st.Message != "") {
		ae.Reason, ae.Message = st.Reason, st.Message
	} else {
		ae.Message = strings.TrimSpace(string(raw))
	}
	return ae
}

// doGet sends a GET and returns the body of a 2xx answer.
func (c *Client) doGet(ctx context.Context, path, verb, resource string) ([]byte, error) {
	var body []byte
	err := c.send(ctx, http.MethodGet, path, "", nil, verb, resource, &body)
	return body, err
}

// mergePatch is the content type of a JSON merge patch (RFC 7386).
const mergePatch = "application/merge-patch+json"

// SetPodLabel sets the label key of the pod to value with a JSON merge patch; a nil value
// removes the label (removing an absent label succeeds).
func (c *Client) SetPodLabel(ctx context.Context, namespace, pod, key string, value *string) error {
	patch := map[string]any{"metadata": map[string]any{"labels": map[string]any{key: value}}}
	return c.do(ctx, http.MethodPatch, podPath(namespace, pod), mergePatch, patch, "patch", "pods")
}

func podPath(namespace, pod string) string {
	return "/api/v1/namespaces/" + url.PathEscape(namespace) + "/pods/" + url.PathEscape(pod)
}

// ObjectReference names the object an Event is about.
type ObjectReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	UID        string `json:"uid,omitempty"`
}

// Event is the part of a core/v1 Event elector writes.
type Event struct {
	Name               string
	Namespace          string
	InvolvedObject     ObjectReference
	Reason, Message    string
	Type               string // Normal or Warning
	Component, Host    string
	FirstTimestamp     time.Time
	LastTimestamp      time.Time
	Count              int32
	ReportingComponent string
	ReportingInstance  string
}

// CreateEvent creates ev in its namespace.
func (c *Client) CreateEvent(ctx context.Context, ev *Event) error {
	source := map[string]any{"component": ev.Component}
	if ev.Host != "" {
		source["host"] = ev.Host
	}
	body := map[string]any{
		"apiVersion":         "v1",
		"kind":               "Event",
		"metadata":           map[string]any{"name": ev.Name, "namespace": ev.Namespace},
		"involvedObject":     ev.InvolvedObject,
		"reason":             ev.Reason,
		"message":            ev.Message,
		"type":               ev.Type,
		"source":             source,
		"firstTimestamp":     ev.FirstTimestamp.UTC().Format(time.RFC3339),
		"lastTimestamp":      ev.LastTimestamp.UTC().Format(time.RFC3339),
		"count":              ev.Count,
		"reportingComponent": ev.ReportingComponent,
		"reportingInstance":  ev.ReportingInstance,
	}
	return c.do(ctx, http.MethodPost, "/api/v1/namespaces/"+url.PathEscape(ev.Namespace)+"/events", "application/json", body, "create", "events")
}

// PatchEventCount sets the count and lastTimestamp of the Event named name: a repeat of it.
func (c *Client) PatchEventCount(ctx context.Context, namespace, name string, count int32, last time.Time) error {
	patch := map[string]any{"count": count, "lastTimestamp": last.UTC().Format(time.RFC3339)}
	path := "/api/v1/namespaces/" + url.PathEscape(namespace) + "/events/" + url.PathEscape(name)
	return c.do(ctx, http.MethodPatch, path, mergePatch, patch, "patch", "events")
}
