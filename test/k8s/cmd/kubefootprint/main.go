// Command kubefootprint measures what the Kubernetes integration costs a sidecar in memory
// (issue 29's dependency choice): the resident set of an idle leader of `elector sidecar`
// with the integration off and with --leader-label, --events and --mirror-lease on, beside
// client-go's LeaderElector (clientgo-elector) on the Redis lock and on a Lease.
//
// Every process runs in its own mount namespace (`unshare -m`, so root) with a tmpfs on /run
// holding a service-account token and CA at the standard in-cluster paths, and
// KUBERNETES_SERVICE_HOST/PORT naming a fake API server served by this program over TLS:
// it answers pod patches, Event creates and patches, and keeps Leases in memory (GET,
// POST, PUT, merge PATCH with resourceVersion), enough for elector's client and client-go's
// LeaseLock. Redis is a redis-server it starts on a free port. After -idle it reads VmHWM,
// VmRSS and RssAnon of each process from /proc/PID/status and prints a Markdown table.
//
//	kubefootprint -elector bin/elector -clientgo /tmp/clientgo-elector [-idle 60s]
package main

import (
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes/scheme"
)

// nsScript mounts a tmpfs on /run (private to the process's mount namespace) with the
// service-account files at their standard path, then execs the measured binary.
const nsScript = `mount -t tmpfs tmpfs /run && d=/run/secrets/kubernetes.io/serviceaccount && mkdir -p $d && cp "$SA_DIR/token" "$SA_DIR/ca.crt" $d/ && exec "$@"`

func main() {
	elector := flag.String("elector", "", "elector binary (hack/build.sh)")
	clientgo := flag.String("clientgo", "", "clientgo-elector binary (test/k8s/cmd/clientgo-elector)")
	idle := flag.Duration("idle", time.Minute, "how long the leaders idle before the reading")
	flag.Parse()
	if *elector == "" || *clientgo == "" {
		fmt.Fprintln(os.Stderr, "kubefootprint: -elector and -clientgo are required")
		os.Exit(2)
	}
	if err := run(*elector, *clientgo, *idle); err != nil {
		fmt.Fprintln(os.Stderr, "kubefootprint:", err)
		os.Exit(1)
	}
}

// config is one measured process.
type config struct {
	name      string
	bin       string
	args      []string
	identity  string
	mustLead  bool
	port      int
	cmd       *exec.Cmd
	logPath   string
	apiClient bool // it calls the API server: count its calls
}

func run(electorBin, clientgoBin string, idle time.Duration) error {
	work, err := os.MkdirTemp("", "kubefootprint-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	redisAddr, stopRedis, err := startRedis(work)
	if err != nil {
		return err
	}
	defer stopRedis()

	api := newFakeAPI()
	api.leases["default/fp-mirror"] = map[string]any{
		"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
		"metadata": map[string]any{"name": "fp-mirror", "namespace": "default", "resourceVersion": "1"},
		"spec":     map[string]any{},
	}
	srv := httptest.NewTLSServer(api)
	defer srv.Close()
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	_, apiPort, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "https://"))

	timing := []string{"--lease-duration=4s", "--renew-deadline=3s", "--retry-period=1s"}
	kubeOn := []string{"--leader-label=elector.io/leader", "--events", "--mirror-lease=fp-mirror"}
	sidecar := func(lease, id string, extra ...string) []string {
		return append(append([]string{"sidecar", "--lease-name=" + lease, "--identity=" + id, "--redis-addr=" + redisAddr}, timing...), extra...)
	}
	cg := func(lock, lease string) []string {
		return append([]string{"--lock=" + lock, "--lease-name=" + lease, "--redis-addr=" + redisAddr, "--namespace=default"}, timing...)
	}
	configs := []*config{
		{name: "elector sidecar, integration off (leader)", bin: electorBin, args: sidecar("fp-off", "off-1"), identity: "off-1", mustLead: true},
		{name: "elector sidecar, integration off (follower)", bin: electorBin, args: sidecar("fp-off", "off-2"), identity: "off-2"},
		{name: "elector sidecar, label + Events + mirror Lease (leader)", bin: electorBin, args: sidecar("fp-on", "on-1", kubeOn...), identity: "on-1", mustLead: true, apiClient: true},
		{name: "elector sidecar, label + Events + mirror Lease (follower)", bin: electorBin, args: sidecar("fp-on", "on-2", kubeOn...), identity: "on-2", apiClient: true},
		{name: "clientgo-elector --lock=redis (leader)", bin: clientgoBin, args: cg("redis", "fp-cg-redis"), identity: "cgr-1", mustLead: true},
		{name: "clientgo-elector --lock=lease (leader)", bin: clientgoBin, args: cg("lease", "fp-cg-lease"), identity: "cgl-1", mustLead: true, apiClient: true},
	}
	for _, c := range configs {
		if c.port, err = freePort(); err != nil {
			return err
		}
		c.args = append(c.args, "--http-addr=127.0.0.1:"+strconv.Itoa(c.port))
		if err := start(c, work, caPEM, apiPort); err != nil {
			return err
		}
		defer stop(c)
		// One at a time: a follower starts after its leader leads.
		if err := waitLeader(c, 30*time.Second); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "all started; idling %v\n", idle)
	time.Sleep(idle)

	fmt.Printf("Idle %v after the start, lease 4s/3s/1s, redis-server on loopback, fake API server over TLS (%s).\n\n", idle, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Println("| process | VmHWM (MB) | VmRSS (MB) | RssAnon (MB) | API calls |")
	fmt.Println("|---|---|---|---|---|")
	for _, c := range configs {
		st, err := procStatus(c.cmd.Process.Pid)
		if err != nil {
			return fmt.Errorf("%s: %w (log %s)", c.name, err, tail(c.logPath))
		}
		calls := "-"
		if c.apiClient {
			calls = strconv.Itoa(api.calls(c.identity))
		}
		fmt.Printf("| %s | %.1f | %.1f | %.1f | %s |\n", c.name, mb(st["VmHWM"]), mb(st["VmRSS"]), mb(st["RssAnon"]), calls)
	}
	fmt.Printf("\nAPI requests by kind: %v\n", api.byKind())
	return nil
}

// start runs c in its own mount namespace with the in-cluster environment and a token of
// its own ("token-" and its identity), by which the fake API server counts its calls.
func start(c *config, work string, caPEM []byte, apiPort string) error {
	saDir := filepath.Join(work, "sa-"+c.identity)
	if err := os.MkdirAll(saDir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(saDir, "ca.crt"), caPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(saDir, "token"), []byte("token-"+c.identity), 0o600); err != nil {
		return err
	}
	c.logPath = filepath.Join(work, c.identity+".log")
	logf, err := os.Create(c.logPath)
	if err != nil {
		return err
	}
	args := append([]string{"-m", "--propagation", "private", "sh", "-c", nsScript, "sh", c.bin}, c.args...)
	c.cmd = exec.Command("unshare", args...)
	c.cmd.Env = append(os.Environ(), "SA_DIR="+saDir, "KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT="+apiPort,
		"POD_NAME="+c.identity, "POD_NAMESPACE=default", "POD_UID=uid-"+c.identity, "NODE_NAME=fp-node")
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.name, err)
	}
	return nil
}

func stop(c *config) {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-done
	}
}

// waitLeader waits until c's /leader answers (and, for a leader, says isLeader).
func waitLeader(c *config, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(c.port) + "/leader")
		if err == nil {
			var st struct {
				IsLeader bool `json:"isLeader"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if st.IsLeader || !c.mustLead {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s: not leading within %v: %s", c.name, within, tail(c.logPath))
}

// procStatus returns the kB fields of /proc/PID/status in bytes.
func procStatus(pid int) (map[string]int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for _, l := range strings.Split(string(raw), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if !ok || !strings.HasSuffix(v, " kB") {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, " kB")), 10, 64)
		if err == nil {
			out[k] = n << 10
		}
	}
	return out, nil
}

func mb(b int64) float64 { return float64(b) / 1e6 }

func tail(path string) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, "\n")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// startRedis starts a redis-server without persistence on a free port.
func startRedis(work string) (string, func(), error) {
	port, err := freePort()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", work)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("start redis-server: %w", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	return "", nil, fmt.Errorf("redis-server on %s did not accept connections", addr)
}

// fakeAPI answers the calls of elector's internal/kube and of client-go's LeaseLock.
type fakeAPI struct {
	mu     sync.Mutex
	leases map[string]map[string]any // namespace/name -> object
	rv     int
	kinds  map[string]int
	byPod  map[string]int // calls by identity, from the bearer token "token-IDENTITY"
}

func newFakeAPI() *fakeAPI {
	return &fakeAPI{leases: map[string]map[string]any{}, rv: 1, kinds: map[string]int{}, byPod: map[string]int{}}
}

func (f *fakeAPI) calls(pod string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.byPod[pod]
}

func (f *fakeAPI) byKind() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int{}
	for k, v := range f.kinds {
		out[k] = v
	}
	return out
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	if strings.Contains(r.Header.Get("Content-Type"), "protobuf") {
		raw = protoToJSON(raw) // client-go's typed clients send protobuf
	}
	var body map[string]any
	_ = json.Unmarshal(raw, &body)
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	// /api/v1/namespaces/NS/RES[/NAME] or /apis/coordination.k8s.io/v1/namespaces/NS/leases[/NAME]
	var ns, res, name string
	switch {
	case len(parts) >= 5 && parts[0] == "api":
		ns, res = parts[3], parts[4]
		if len(parts) > 5 {
			name = parts[5]
		}
	case len(parts) >= 6 && parts[0] == "apis":
		ns, res = parts[4], parts[5]
		if len(parts) > 6 {
			name = parts[6]
		}
	default:
		http.Error(w, `{"kind":"Status","code":404}`, http.StatusNotFound)
		return
	}
	f.kinds[r.Method+" "+res]++
	f.byPod[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer token-")]++
	switch res {
	case "pods":
		_ = json.NewEncoder(w).Encode(map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": name, "namespace": ns}})
	case "events":
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
		}
		_, _ = w.Write(raw)
	case "leases":
		f.lease(w, r, ns, name, body)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

// protoToJSON decodes a protobuf-encoded object of client-go and encodes it as JSON; nil if
// it cannot.
func protoToJSON(raw []byte) []byte {
	obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(raw, nil, nil)
	if err != nil {
		return nil
	}
	obj.GetObjectKind().SetGroupVersionKind(*gvk)
	out, err := json.Marshal(obj)
	if err != nil {
		return nil
	}
	return out
}

// lease serves GET, POST, PUT and merge PATCH of Leases; the caller holds f.mu.
func (f *fakeAPI) lease(w http.ResponseWriter, r *http.Request, ns, name string, body map[string]any) {
	if r.Method == http.MethodPost {
		md, _ := body["metadata"].(map[string]any)
		name, _ = md["name"].(string)
	}
	key := ns + "/" + name
	cur, ok := f.leases[key]
	notFound := func() {
		w.WriteHeader(http.StatusNotFound)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404,
			"details": map[string]any{"name": name, "group": "coordination.k8s.io", "kind": "leases"}})
	}
	f.rv++
	switch r.Method {
	case http.MethodGet:
		if !ok {
			notFound()
			return
		}
		_ = json.NewEncoder(w).Encode(cur)
		return
	case http.MethodPost:
		md := body["metadata"].(map[string]any)
		md["resourceVersion"] = strconv.Itoa(f.rv)
		f.leases[key] = body
		w.WriteHeader(http.StatusCreated)
	case http.MethodPut:
		if !ok {
			notFound()
			return
		}
		body["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(f.rv)
		f.leases[key] = body
	case http.MethodPatch:
		if !ok {
			notFound()
			return
		}
		spec, _ := cur["spec"].(map[string]any)
		if spec == nil {
			spec = map[string]any{}
		}
		if ps, _ := body["spec"].(map[string]any); ps != nil {
			for k, v := range ps {
				spec[k] = v
			}
		}
		cur["spec"] = spec
		cur["metadata"].(map[string]any)["resourceVersion"] = strconv.Itoa(f.rv)
		body = cur
	}
	_ = json.NewEncoder(w).Encode(body)
}
