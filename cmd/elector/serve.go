package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/cmd/elector/internal/kube"
	"github.com/elector/elector/cmd/elector/internal/version"
	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/readonly"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/election"
)

// Flag names of the endpoints of run and sidecar.
const (
	flagHTTPAddr        = "http-addr"
	flagStatusFile      = "status-file"
	flagResignTokenFile = "resign-token-file"
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

// serveOptions are --http-addr, --status-file and the flags of POST /resign.
type serveOptions struct {
	httpAddr        string
	statusFile      string
	resignEndpoint  string // who may POST /resign: loopback, any, off
	resignTokenFile string
	resignToken     []byte // read from resignTokenFile by validate; nil: no token asked
	// collectors are the process's own metrics (the stderr log's drops), served beside the
	// elector's on /metrics.
	collectors []prometheus.Collector
}

// addFlags registers --http-addr (with its default) and --status-file on fs.
func (o *serveOptions) addFlags(fs *pflag.FlagSet, defaultAddr string) {
	what := "`address` ([host]:port) to serve /leader, /healthz, /readyz, /metrics and POST /resign on"
	if defaultAddr == "" {
		what += "; empty: no HTTP server"
	}
	fs.StringVar(&o.httpAddr, flagHTTPAddr, defaultAddr, what)
	fs.StringVar(&o.statusFile, flagStatusFile, "", "`file` to rewrite atomically with \"leader\" (and its trust deadline, until_unix=) or \"follower\", for exec probes")
	fs.StringVar(&o.resignEndpoint, flagResignEndpoint, resignLoopback, "`who` may POST /resign: loopback (kubectl exec, port-forward), any, or off")
	fs.StringVar(&o.resignTokenFile, flagResignTokenFile, "", "`file` holding a token that POST /resign must present (Authorization: Bearer TOKEN); read at start")
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
	if o.resignTokenFile != "" {
		token, err := readResignToken(o.resignTokenFile)
		if err != nil {
			return err
		}
		o.resignToken = token
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

// statusFile keeps a file that says whether this replica leads, for exec probes. A leader's
// file says until when it may be trusted:
//
//	leader
//	until_unix=1764441669
//	until=2025-11-29T18:41:09.102001Z
//
// until is the elector's own trust deadline (the send time of its last successful renew plus
// --renew-deadline) minus the clock-drift margin of the lease, on the wall clock; until_unix is
// the same instant in whole seconds since the epoch, rounded down, for `date +%s`. A follower's
// file is the one line "follower". The file is rewritten through a temporary file and a rename
// on every change and after each renewal (poll), so that a reader that checks until can tell
// the file of a leader that died (SIGKILL, OOM, a node lost) from a live one.
//
// A write that fails falls back to removing the file (a reader takes a missing file for "not
// the leader"). When the removal fails too, the file may still say leader, until the last
// deadline it was given at most: claim keeps that instant, and withhold makes the step-down
// wait for it before the lease is released (startReplica). Every update reads the elector's
// state under mu, so that updates racing from the callbacks and the poll always leave the
// latest truth in the file.
type statusFile struct {
	path  string
	state func() election.Status
	// trust is how long after the send time of the last successful renew the file may say
	// leader: --renew-deadline minus the clock-drift margin of --lease-duration.
	trust time.Duration

	mu      sync.Mutex
	last    string    // content the file is known to hold; "" when it is absent or unknown
	known   bool      // last is known (false after a write and a removal both failed)
	claim   time.Time // the file may say leader until then (monotonic); zero: it does not
	failing bool      // the last update failed (logged once, until one succeeds)
}

// Status file content: the first line is the state, which readers that only look for
// "leader" (grep -qx leader) keep reading as before.
const (
	statusLeader   = "leader"
	statusFollower = "follower"
	untilUnixKey   = "until_unix="
	untilKey       = "until="
)

// newStatusFile returns the status file at path of the elector whose Status is state, with
// the lease timing lo.
func newStatusFile(path string, state func() election.Status, lo leaseOptions) *statusFile {
	return &statusFile{path: path, state: state, trust: lo.renewDeadline - timing.DriftMargin(lo.leaseDuration)}
}

// content returns what the file should say now, and until when (monotonic) it says leader
// (zero for a follower). A leader whose deadline has passed is written as a follower: it is
// stepping down.
func (s *statusFile) content(now time.Time) (string, time.Time) {
	st := s.state()
	if !st.IsLeader || st.LastRenew == nil {
		return statusFollower + "\n", time.Time{}
	}
	claim := st.LastRenew.Add(s.trust)
	left := claim.Sub(now) // monotonic
	if left <= 0 {
		return statusFollower + "\n", time.Time{}
	}
	until := now.Round(0).Add(left).UTC() // the wall clock that readers compare with
	return fmt.Sprintf("%s\n%s%d\n%s%s\n", statusLeader, untilUnixKey, until.Unix(), untilKey, until.Format(time.RFC3339Nano)), claim
}

// sync rewrites the file if what it should say changed. A nil *statusFile does nothing.
func (s *statusFile) sync() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	content, claim := s.content(time.Now())
	if s.known && content == s.last {
		return
	}
	err := writeFileAtomic(s.path, []byte(content), 0o644)
	if err == nil {
		s.last, s.known, s.claim = content, true, claim
		if s.failing {
			s.failing = false
			klog.InfoS("The status file can be written again", "path", s.path)
		}
		return
	}
	// The rename may have happened before the error: the file may say what was written.
	if claim.After(s.claim) {
		s.claim = claim
	}
	rmErr := os.Remove(s.path)
	if rmErr == nil || errors.Is(rmErr, fs.ErrNotExist) {
		s.last, s.known, s.claim = "", true, time.Time{}
		if !s.failing {
			s.failing = true
			klog.ErrorS(err, "Cannot update the status file; removed it instead (a missing file says: not the leader)", "path", s.path)
		}
		return
	}
	s.known = false
	if !s.failing {
		s.failing = true
		klog.ErrorS(errors.Join(err, fmt.Errorf("remove %s: %w", s.path, rmErr)),
			"Cannot update or remove the status file: it may say leader until its deadline", "path", s.path, "until", s.claim)
	}
}

// withhold returns once the file cannot say leader any more: at once when the last update
// wrote "follower" or removed the file, else when the deadline of the last "leader" it may
// hold has passed. The step-down runs it before the lease is released, so that no reader of
// the file that checks until takes this replica for the leader once a successor may lead.
// A nil *statusFile returns at once.
func (s *statusFile) withhold() {
	if s == nil {
		return
	}
	for {
		s.mu.Lock()
		claim := s.claim
		s.mu.Unlock()
		wait := time.Until(claim)
		if claim.IsZero() || wait <= 0 {
			return
		}
		klog.InfoS("The status file may still say leader: the lease is released once its deadline passed", "path", s.path, "wait", wait)
		time.Sleep(wait)
	}
}

// poll calls sync every period until stop is closed: the file's deadline follows the
// renewals, and an update that failed is tried again.
func (s *statusFile) poll(period time.Duration, stop <-chan struct{}) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s.sync()
		}
	}
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
func listenHTTP(addr string, e *election.Elector, reg *prometheus.Registry, tolerance time.Duration, resign resignPolicy, followers followerCount, kubeErr func() *kube.Failure) (*httpServer, error) {
	mux := http.NewServeMux()
	mux.Handle("/resign", resignHandler(e, resign, followers))
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

	stopPoll chan struct{} // closed by close: the status file's poll ends
	polled   chan struct{} // closed when the poll ended
}

// statusPollPeriod is how often the status file is brought up to date with the renewals:
// half the retry period, so that its deadline lags the elector's by about one renewal.
func statusPollPeriod(lo leaseOptions) time.Duration {
	return max(lo.retryPeriod/2, 10*time.Millisecond)
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
	reg, metrics, err := newRegistry(append(kh.collectors(), so.collectors...)...)
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
		l.status.withhold() // the release follows: not while the file may say leader
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
		ReplicaAck:      co.ack,
		Priority:        co.cand.priority,
	})
	if err != nil {
		l.close()
		return nil, err
	}
	co.cand.apply(l.elector)
	if so.statusFile != "" {
		l.status = newStatusFile(so.statusFile, l.elector.Status, co.lease)
		if err := writeFileAtomic(so.statusFile, []byte(statusFollower+"\n"), 0o644); err != nil {
			l.close()
			return nil, fmt.Errorf("--%s: %w", flagStatusFile, err)
		}
		l.status.last, l.status.known = statusFollower+"\n", true
		l.stopPoll = make(chan struct{})
		l.polled = make(chan struct{})
		go func() {
			defer close(l.polled)
			l.status.poll(statusPollPeriod(co.lease), l.stopPoll)
		}()
	}
	if so.httpAddr != "" {
		if l.http, err = listenHTTP(so.httpAddr, l.elector, reg, healthzTolerance(co.lease), resignPolicy{endpoint: so.resignEndpoint, token: so.resignToken},
			countFollowers(client, leasewire.KeysFor(co.lease.prefix, co.lease.name).Events), kh.failure); err != nil {
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
	if l.stopPoll != nil {
		close(l.stopPoll)
		<-l.polled
		l.stopPoll = nil
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

// resignPolicy is who may POST /resign: --resign-endpoint and the token of
// --resign-token-file (nil: none asked).
type resignPolicy struct {
	endpoint string
	token    []byte
}

// resignHeader is the header every POST /resign must carry, with the value "1": a web page
// cannot add it to a cross-site request without a CORS preflight, which the elector never
// answers, so a browser on the node cannot be made to resign the leader.
const resignHeader = "X-Elector-Resign"

// Bounds of the token of --resign-token-file.
const (
	minResignToken = 16
	maxResignToken = 4096
)

// readResignToken reads the token of --resign-token-file: one line of at least
// minResignToken visible ASCII characters, trailing white space (a newline) ignored.
func readResignToken(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--%s: cannot read the token: %w", flagResignTokenFile, err)
	}
	token := bytes.TrimRight(b, " \t\r\n")
	if len(token) < minResignToken || len(token) > maxResignToken {
		return nil, fmt.Errorf("--%s: %s holds %d characters; want one token of %d to %d visible ASCII characters (for example: head -c 32 /dev/urandom | base64)",
			flagResignTokenFile, path, len(token), minResignToken, maxResignToken)
	}
	for _, c := range token {
		if c <= ' ' || c > '~' {
			return nil, fmt.Errorf("--%s: %s holds a character that is not visible ASCII (%q); want one token of %d to %d visible ASCII characters, no spaces",
				flagResignTokenFile, path, c, minResignToken, maxResignToken)
		}
	}
	return token, nil
}

// refuseResign says why a POST /resign is refused before the elector is asked, with the
// status code; "" lets it through. In this order: --resign-endpoint (off, loopback), a
// request a browser sent (any Origin; a Sec-Fetch-Site other than none; a content type a
// page may send cross-site without a preflight), the missing X-Elector-Resign header, and a
// missing or wrong token.
func refuseResign(r *http.Request, p resignPolicy) (code int, why string) {
	switch {
	case p.endpoint == resignOff:
		return http.StatusForbidden, "resign is disabled on this replica (--" + flagResignEndpoint + "=off)"
	case p.endpoint != resignAny && !loopbackPeer(r.RemoteAddr):
		return http.StatusForbidden, "resign is allowed from loopback only (kubectl exec or port-forward; --" + flagResignEndpoint + "=any allows every peer)"
	case r.Header.Get("Origin") != "":
		// The elector serves no page, so no browser origin is its own: a same-origin
		// request can only come from a page on a host name rebound to this address.
		return http.StatusForbidden, "resign refused: a browser sent it (Origin " + strconvQuote(r.Header.Get("Origin")) + "); the elector serves no page, and no web page may resign the leader"
	case r.Header.Get("Sec-Fetch-Site") != "" && r.Header.Get("Sec-Fetch-Site") != "none":
		return http.StatusForbidden, "resign refused: a browser sent it (Sec-Fetch-Site " + strconvQuote(r.Header.Get("Sec-Fetch-Site")) + "); no web page may resign the leader"
	case simpleContentType(r.Header.Get("Content-Type")):
		return http.StatusUnsupportedMediaType, "resign refused: Content-Type " + strconvQuote(r.Header.Get("Content-Type")) + " is one a web page may send cross-site; send no body"
	case r.Header.Get(resignHeader) != "1":
		return http.StatusForbidden, "resign refused: the header " + resignHeader + ": 1 is missing (curl -X POST -H '" + resignHeader + ": 1' localhost:PORT/resign)"
	case p.token != nil && !tokenMatches(r.Header.Get("Authorization"), p.token):
		return http.StatusUnauthorized, "resign refused: missing or wrong token (Authorization: Bearer TOKEN, the token of --" + flagResignTokenFile + ")"
	}
	return 0, ""
}

// simpleContentType reports whether the media type of a Content-Type header is one that
// CORS lets a page send cross-site without a preflight.
func simpleContentType(v string) bool {
	if v == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(v)
	if err != nil {
		mt = strings.ToLower(strings.TrimSpace(strings.Split(v, ";")[0]))
	}
	switch mt {
	case "text/plain", "application/x-www-form-urlencoded", "multipart/form-data":
		return true
	}
	return false
}

// tokenMatches compares the bearer token of an Authorization header with token in constant
// time (of the token's length too: both are hashed first).
func tokenMatches(authorization string, token []byte) bool {
	scheme, got, ok := strings.Cut(authorization, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256(token)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}

// strconvQuote quotes a header value for an error message, at most 100 bytes of it.
func strconvQuote(v string) string {
	if len(v) > 100 {
		v = v[:100] + "..."
	}
	return strconv.Quote(v)
}

// resignHandler is POST /resign[?to=IDENTITY]: Elector.ResignTo, for a request that policy
// lets through (refuseResign). followers counts the replicas that could take over
// (checkTarget).
func resignHandler(e *election.Elector, policy resignPolicy, followers followerCount) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed: POST /resign[?to=IDENTITY] with the header "+resignHeader+": 1", http.StatusMethodNotAllowed)
			return
		}
		if code, why := refuseResign(r, policy); code != 0 {
			if code == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="elector resign"`)
			}
			klog.InfoS("Refused a resign request", "remote", r.RemoteAddr, "code", code, "why", why)
			http.Error(w, why, code)
			return
		}
		to, force := r.URL.Query().Get("to"), r.URL.Query().Get("force") == "1"
		warning, refuse := checkTarget(r.Context(), e, to, followers)
		if refuse && !force {
			http.Error(w, warning+" (force=1 resigns anyway)", http.StatusConflict)
			return
		}
		token := e.Status().Token
		ctx, cancel := context.WithTimeout(r.Context(), resignTimeoutHTTP)
		defer cancel()
		if force {
			ctx = leasekit.WithForce(ctx) // no candidate check: nobody may lead during the hold-off
		}
		err := e.ResignTo(ctx, to)
		status := http.StatusOK
		switch {
		case errors.Is(err, election.ErrNotLeader):
			http.Error(w, "not the leader: "+err.Error(), http.StatusConflict)
			return
		case errors.Is(err, leasekit.ErrNotCandidate), errors.Is(err, leasekit.ErrNoSuccessor):
			klog.InfoS("Refused a resign request: nobody could take over", "remote", r.RemoteAddr, "to", to, "why", err)
			http.Error(w, err.Error()+" (force=1 resigns anyway)", http.StatusConflict)
			return
		case errors.Is(err, leasekit.ErrTargetIsHolder), to != "" && leasewire.ValidateIdentity(to) != nil:
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
	if followers == nil || !st.IsLeader || to == st.Identity || (to != "" && leasewire.ValidateIdentity(to) != nil) {
		return "", false
	}
	if len(st.Candidates) > 0 {
		return "", false // the candidate registry is in use: ResignTo checks the target against it
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
