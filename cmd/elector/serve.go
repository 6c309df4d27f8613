package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/kube"
	"github.com/elector/elector/internal/lease"
	"github.com/elector/elector/internal/readonly"
	"github.com/elector/elector/internal/version"
	"github.com/elector/elector/pkg/election"
	publease "github.com/elector/elector/pkg/lease"
)

// Flag names of the endpoints of run and sidecar.
const (
	flagHTTPAddr   = "http-addr"
	flagStatusFile = "status-file"
)

// HTTP server limits: the endpoints answer small GET requests from probes and Prometheus.
const (
	readHeaderTimeout = 5 * time.Second
	readTimeout       = 10 * time.Second
	writeTimeout      = 10 * time.Second
	idleTimeout       = 60 * time.Second
	maxHeaderBytes    = 16 << 10
	// shutdownTimeout bounds how long requests in progress may delay the exit.
	shutdownTimeout = 500 * time.Millisecond
	// releaseTimeout bounds the last-resort release after Run returned without releasing.
	releaseTimeout = 2 * time.Second
)

// serveOptions are --http-addr and --status-file.
type serveOptions struct {
	httpAddr       string
	statusFile     string
	resignEndpoint string // who may POST /resign: loopback, any, off
}

// addFlags registers --http-addr (with its default) and --status-file on fs.
func (o *serveOptions) addFlags(fs *pflag.FlagSet, defaultAddr string) {
	what := "`address` ([host]:port) to serve /leader, /healthz, /readyz, /metrics and POST /resign on"
	if defaultAddr == "" {
		what += "; empty: no HTTP server"
	}
	fs.StringVar(&o.httpAddr, flagHTTPAddr, defaultAddr, what)
	fs.StringVar(&o.statusFile, flagStatusFile, "", "`file` to rewrite atomically with \"leader\" or \"follower\" on every change, for exec probes")
	fs.StringVar(&o.resignEndpoint, flagResignEndpoint, resignLoopback, "`who` may POST /resign: loopback (kubectl exec, port-forward), any, or off")
}

// validate checks the flags without side effects.
func (o *serveOptions) validate() error {
	if o.httpAddr != "" {
		if err := validateListenAddr(flagHTTPAddr, o.httpAddr); err != nil {
			return err
		}
	}
	if err := validateResignEndpoint(o.resignEndpoint); err != nil {
		return err
	}
	if o.statusFile != "" {
		dir := filepath.Dir(o.statusFile)
		st, err := os.Stat(dir)
		switch {
		case err != nil:
			return fmt.Errorf("--%s: directory %q of the status file cannot be used: %v", flagStatusFile, dir, err)
		case !st.IsDir():
			return fmt.Errorf("--%s: %q is not a directory", flagStatusFile, dir)
		}
		if st, err := os.Stat(o.statusFile); err == nil && st.IsDir() {
			return fmt.Errorf("--%s: %q is a directory; want a file path", flagStatusFile, o.statusFile)
		}
	}
	return nil
}

// statusFile keeps a file that says "leader" or "follower". Every update reads the elector's
// state at the moment of writing, under a lock, so that updates racing from the callbacks
// always leave the latest truth in the file.
type statusFile struct {
	path     string
	isLeader func() bool

	mu   sync.Mutex
	last string
}

// sync rewrites the file if the state changed; errors are logged. A nil *statusFile does nothing.
func (s *statusFile) sync() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	state := "follower"
	if s.isLeader() {
		state = "leader"
	}
	if state == s.last {
		return
	}
	if err := writeFileAtomic(s.path, []byte(state+"\n"), 0o644); err != nil {
		klog.ErrorS(err, "Cannot update the status file", "path", s.path, "state", state)
		return
	}
	s.last = state
}

// writeFileAtomic replaces path with data: it writes a temporary file in the same directory
// and renames it over path, so that a reader sees the old or the new content, never a mix.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // fails harmlessly after the rename
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Chmod(mode); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// newRegistry returns a private Prometheus registry with the Go and process collectors, the
// build info, the elector metrics and extra (the Kubernetes integration's).
func newRegistry(extra ...prometheus.Collector) (*prometheus.Registry, *election.Metrics, error) {
	reg := prometheus.NewRegistry()
	info := version.Get()
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "elector_build_info",
		Help: "Always 1; the labels describe the elector binary.",
	}, []string{"version", "commit", "goversion"})
	build.WithLabelValues(info.Version, info.Commit, info.GoVersion).Set(1)
	for _, c := range []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		build,
	} {
		if err := reg.Register(c); err != nil {
			return nil, nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	for _, c := range extra {
		if err := reg.Register(c); err != nil {
			return nil, nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	m, err := election.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	return reg, m, nil
}

// readyHandler answers 200 while e leads, else 503.
func readyHandler(e *election.Elector) http.Handler {
	return readonly.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if !e.IsLeader() {
			http.Error(w, "not the leader", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("leader\n"))
	}))
}

// healthzTolerance is how long past its renew deadline a replica may still believe it leads
// before /healthz fails: until the lease may have expired, when another replica may lead.
func healthzTolerance(lo leaseOptions) time.Duration {
	return lo.leaseDuration - lo.renewDeadline
}

// leaderHandler is the elector's /leader with "kubernetesError" added to its JSON object
// while kubeErr returns a failure.
func leaderHandler(inner http.Handler, kubeErr func() *kube.Failure) http.Handler {
	if kubeErr == nil {
		return inner
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := kubeErr()
		if f == nil {
			inner.ServeHTTP(w, r)
			return
		}
		b := &bufferedResponse{header: w.Header(), code: http.StatusOK}
		inner.ServeHTTP(b, r)
		body := b.body.Bytes()
		if obj := bytes.TrimRight(body, "\n"); b.code == http.StatusOK && bytes.HasSuffix(obj, []byte("}")) {
			if raw, err := json.Marshal(f); err == nil {
				obj = obj[:len(obj)-1]
				if len(bytes.TrimSpace(obj)) > 1 {
					obj = append(obj, ',')
				}
				body = append(append(append(obj, `"kubernetesError":`...), raw...), "}\n"...)
			}
		}
		w.WriteHeader(b.code)
		_, _ = w.Write(body)
	})
}

// bufferedResponse keeps a response to change it before it is sent.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header         { return b.header }
func (b *bufferedResponse) WriteHeader(code int)        { b.code = code }
func (b *bufferedResponse) Write(p []byte) (int, error) { return b.body.Write(p) }

// httpServer serves the endpoints of one elector.
type httpServer struct {
	srv *http.Server
	ln  net.Listener
}

// listenHTTP binds addr and prepares the endpoints; serve starts answering.
func listenHTTP(addr string, e *election.Elector, reg *prometheus.Registry, tolerance time.Duration, resignPolicy string, followers followerCount, kubeErr func() *kube.Failure) (*httpServer, error) {
	mux := http.NewServeMux()
	mux.Handle("/resign", resignHandler(e, resignPolicy, followers))
	mux.Handle("/leader", leaderHandler(e.LeaderHandler(), kubeErr))
	mux.Handle("/healthz", e.HealthzAdaptor(tolerance))
	mux.Handle("/readyz", readyHandler(e))
	mux.Handle("/metrics", readonly.Handler(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on --%s=%s: %w", flagHTTPAddr, addr, err)
	}
	return &httpServer{
		ln: ln,
		srv: &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: readHeaderTimeout,
			ReadTimeout:       readTimeout,
			WriteTimeout:      writeTimeout,
			IdleTimeout:       idleTimeout,
			MaxHeaderBytes:    maxHeaderBytes,
		},
	}, nil
}

// serve answers requests until shutdown; it returns nil after shutdown.
func (h *httpServer) serve() error {
	if err := h.srv.Serve(h.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve HTTP on %s: %w", h.ln.Addr(), err)
	}
	return nil
}

// shutdown stops serving, giving requests in progress a moment to finish.
func (h *httpServer) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := h.srv.Shutdown(ctx); err != nil {
		_ = h.srv.Close()
	}
	_ = h.ln.Close() // in case serve never ran
}

// replica is what run and sidecar share: the Redis client, the elector, its endpoints and
// its status file.
type replica struct {
	client  redis.UniversalClient
	elector *election.Elector
	http    *httpServer // nil without --http-addr
	status  *statusFile // nil without --status-file
}

// startReplica builds the client and the elector with cb, writes the status file as
// "follower" and binds the HTTP address. Nothing contacts Redis yet. On error everything
// built is closed again. The status file follows the callbacks of cb: it turns "follower" in
// OnStoppedLeading, which the elector runs after IsLeader turned false and before it releases
// the lease, so the file never says "leader" once a successor can lead (docs/DESIGN.md,
// "Step-down order").
func startReplica(co *commonOptions, so *serveOptions, cb election.Callbacks, exitOnLost bool, kh *kubeHooks) (*replica, error) {
	client, err := co.newClient()
	if err != nil {
		return nil, err
	}
	l := &replica{client: client}
	reg, metrics, err := newRegistry(kh.collectors()...)
	if err != nil {
		l.close()
		return nil, err
	}
	started, stopped := cb.OnStartedLeading, cb.OnStoppedLeading
	cb.OnStartedLeading = func(ctx context.Context) {
		l.status.sync()
		started(ctx)
	}
	cb.OnStoppedLeading = func() {
		l.status.sync()
		stopped()
	}
	l.elector, err = election.New(election.Config{
		Client:          client,
		LeaseName:       co.lease.name,
		KeyPrefix:       co.lease.prefix,
		Identity:        co.lease.identity,
		LeaseDuration:   co.lease.leaseDuration,
		RenewDeadline:   co.lease.renewDeadline,
		RetryPeriod:     co.lease.retryPeriod,
		Callbacks:       cb,
		ReleaseOnCancel: true,
		Recampaign:      !exitOnLost,
		Metrics:         metrics,
		ReplicaAck:      publease.ReplicaAck(co.ack),
	})
	if err != nil {
		l.close()
		return nil, err
	}
	if so.statusFile != "" {
		l.status = &statusFile{path: so.statusFile, isLeader: l.elector.IsLeader}
		if err := writeFileAtomic(so.statusFile, []byte("follower\n"), 0o644); err != nil {
			l.close()
			return nil, fmt.Errorf("--%s: %w", flagStatusFile, err)
		}
		l.status.last = "follower"
	}
	if so.httpAddr != "" {
		if l.http, err = listenHTTP(so.httpAddr, l.elector, reg, healthzTolerance(co.lease), so.resignEndpoint,
			countFollowers(client, lease.KeysFor(co.lease.prefix, co.lease.name).Events), kh.failure); err != nil {
			l.close()
			return nil, err
		}
	}
	return l, nil
}

// serveHTTP serves the endpoints in a goroutine; a failure is sent on errc.
func (l *replica) serveHTTP(errc chan<- error) {
	if l.http == nil {
		return
	}
	klog.InfoS("Serving HTTP", "addr", l.http.ln.Addr().String())
	go func() {
		if err := l.http.serve(); err != nil {
			errc <- err
		}
	}()
}

// close stops the endpoints, marks the status file "follower" and closes the client.
func (l *replica) close() {
	if l.http != nil {
		l.http.shutdown()
	}
	l.status.sync()
	if l.client != nil {
		_ = l.client.Close()
	}
}

// Values of --resign-endpoint.
const (
	resignLoopback = "loopback"
	resignAny      = "any"
	resignOff      = "off"
)

// validateResignEndpoint checks --resign-endpoint ("" is the default, loopback).
func validateResignEndpoint(v string) error {
	switch v {
	case "", resignLoopback, resignAny, resignOff:
		return nil
	}
	return fmt.Errorf("--%s: want %s, %s or %s, got %q", flagResignEndpoint, resignLoopback, resignAny, resignOff, v)
}

// resignTimeoutHTTP bounds how long POST /resign waits for the step-down: below the server's
// write timeout. A step-down that takes longer completes all the same (202).
const resignTimeoutHTTP = writeTimeout - time.Second

// resignHandler is POST /resign[?to=IDENTITY]: Elector.ResignTo, from the peers policy allows.
// followers counts the replicas that could take over (checkTarget).
func resignHandler(e *election.Elector, policy string, followers followerCount) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed: POST /resign[?to=IDENTITY]", http.StatusMethodNotAllowed)
			return
		}
		switch {
		case policy == resignOff:
			http.Error(w, "resign is disabled on this replica (--"+flagResignEndpoint+"=off)", http.StatusForbidden)
			return
		case policy != resignAny && !loopbackPeer(r.RemoteAddr):
			http.Error(w, "resign is allowed from loopback only (kubectl exec or port-forward; --"+flagResignEndpoint+"=any allows every peer)", http.StatusForbidden)
			return
		}
		to := r.URL.Query().Get("to")
		warning, refuse := checkTarget(r.Context(), e, to, followers)
		if refuse {
			http.Error(w, warning, http.StatusConflict)
			return
		}
		token := e.Status().Token
		ctx, cancel := context.WithTimeout(r.Context(), resignTimeoutHTTP)
		defer cancel()
		err := e.ResignTo(ctx, to)
		status := http.StatusOK
		switch {
		case errors.Is(err, election.ErrNotLeader):
			http.Error(w, "not the leader: "+err.Error(), http.StatusConflict)
			return
		case errors.Is(err, lease.ErrTargetIsHolder), to != "" && lease.ValidateIdentity(to) != nil:
			http.Error(w, "bad ?to: "+err.Error(), http.StatusBadRequest)
			return
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			status = http.StatusAccepted // still stepping down
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		klog.InfoS("Resigned on request", "remote", r.RemoteAddr, "to", to, "token", token, "done", status == http.StatusOK, "warning", warning)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(struct {
			Resigned bool   `json:"resigned"`
			Token    int64  `json:"token"`
			To       string `json:"to"`
			Warning  string `json:"warning,omitempty"`
		}{status == http.StatusOK, token, to, warning})
	})
}

// checkTarget says, before a leader resigns, whether anyone could take over: every
// campaigning elector follows the lease on its events channel while it does not lead (the
// leader does not), so the channel's subscribers are the replicas that could (and any
// status --watch); their identities are not recorded. With none, a request ?to=IDENTITY is
// refused (the known candidates: none), and one without ?to is warned about. A follower, a bad
// ?to and a failed count are left to ResignTo.
func checkTarget(ctx context.Context, e *election.Elector, to string, followers followerCount) (warning string, refuse bool) {
	st := e.Status()
	if followers == nil || !st.IsLeader || to == st.Identity || (to != "" && lease.ValidateIdentity(to) != nil) {
		return "", false
	}
	n, err := followers(ctx)
	switch {
	case err != nil:
		klog.V(2).InfoS("Cannot count the replicas that follow the lease; resigning anyway", "lease", st.Lease, "err", err)
		return "", false
	case n == 0 && to != "":
		return fmt.Sprintf("no replica but this one (%q) follows lease %q: known candidates: none (nobody is subscribed to its events channel), so %q cannot take over; nothing was done", st.Identity, st.Lease, to), true
	case n == 0:
		return "no replica but this one follows the lease: nobody leads until this replica takes it again after the hold-off", false
	case to != "":
		return fmt.Sprintf("%d other process(es) follow the lease, but their identities are not recorded: if %q is not one of them, nobody leads until the hold-off ends", n, to), false
	}
	return "", false
}

// loopbackPeer reports whether a request's RemoteAddr is 127.0.0.0/8 or ::1.
func loopbackPeer(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
