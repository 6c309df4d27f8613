package helm

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The tests in this file run the real elector binary with the arguments the
// chart renders, so that the chart and the CLI cannot drift apart: a flag the
// CLI does not know, a value it rejects or a file it cannot read fails here.
// The standalone scenarios campaign against real redis-server processes; the
// TLS and Sentinel ones, which would need that infrastructure, check that the
// process accepts its arguments and serves its endpoints.

const redisPassword = "s3cret-for-tests"

// requireRedis returns the path of redis-server, skipping the test without it
// unless CI or ELECTOR_REQUIRE_REDIS is set.
func requireRedis(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" || os.Getenv("ELECTOR_REQUIRE_REDIS") != "" {
			t.Fatalf("redis-server not on PATH (required because CI or ELECTOR_REQUIRE_REDIS is set): %v", err)
		}
		t.Skip("redis-server not on PATH: skipping the tests that run the elector binary (install redis-server, or set ELECTOR_REQUIRE_REDIS=1 to make this a failure)")
	}
	return p
}

// builtElector is the elector binary, built once for all tests of the
// package into a directory that TestMain removes.
var builtElector struct {
	once      sync.Once
	dir, path string
	err       error
}

// buildElector builds ./cmd/elector of the main module with hack/build.sh,
// the build of the image, once per test run.
func buildElector(t *testing.T) string {
	t.Helper()
	b := &builtElector
	b.once.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			b.err = err
			return
		}
		if b.dir, err = os.MkdirTemp("", "elector-helm-test-"); err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(b.dir, "elector")
		cmd := exec.Command("bash", filepath.Join(root, "hack", "build.sh"), b.path)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("hack/build.sh: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if builtElector.dir != "" {
		_ = os.RemoveAll(builtElector.dir)
	}
	os.Exit(code)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRedis starts a redis-server on a free loopback port, with the default
// user's password and an ACL user "elector" when auth is set, and stops it at
// the end of the test.
func startRedis(t *testing.T, server string, auth bool) string {
	t.Helper()
	port := freePort(t)
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", t.TempDir()}
	if auth {
		args = append(args, "--requirepass", redisPassword, "--user", "elector", "on", ">"+redisPassword, "~*", "&*", "+@all")
	}
	cmd := exec.Command(server, args...)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		reply, err := redisDo(addr, auth, "PING")
		if err == nil && reply == "PONG" {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer PING: %v %q\n%s", addr, err, reply, logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisDo sends one command in RESP and returns a simple reply: a status, an
// integer, or a bulk string. It is enough for PING and EXISTS.
func redisDo(addr string, auth bool, args ...string) (string, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(conn)
	send := func(args ...string) (string, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := io.WriteString(conn, b.String()); err != nil {
			return "", err
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "-"):
			return "", errors.New(line[1:])
		case strings.HasPrefix(line, "$-1"):
			return "", nil
		case strings.HasPrefix(line, "$"):
			body, err := r.ReadString('\n')
			return strings.TrimRight(body, "\r\n"), err
		default:
			return line[1:], nil
		}
	}
	if auth {
		if _, err := send("AUTH", redisPassword); err != nil {
			return "", fmt.Errorf("AUTH: %w", err)
		}
	}
	return send(args...)
}

// leaderInfo is the JSON of GET /leader.
type leaderInfo struct {
	Name     string `json:"name"`
	Identity string `json:"identity"`
	IsLeader bool   `json:"isLeader"`
}

// replica is one elector process started with a pod's arguments.
type replica struct {
	name     string
	cmd      *exec.Cmd
	httpBase string
	status   string // the status file (sidecar mode)
	child    string // what the wrapped command wrote (run mode)
	logs     *syncBuffer
	done     chan error
}

// syncBuffer collects a process's output; the test may read it while the
// process still writes.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// podEnv is the environment a container of the pod would get: the
// downward-API POD_NAME and the literal env values of the container, on top
// of a clean environment (no ELECTOR_* or REDIS_PASSWORD of the test run).
func podEnv(c *corev1.Container, podName string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "ELECTOR_") || strings.HasPrefix(kv, "REDIS_PASSWORD=") || strings.HasPrefix(kv, "POD_NAME=") {
			continue
		}
		env = append(env, kv)
	}
	for _, e := range c.Env {
		switch {
		case e.Name == "POD_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env = append(env, "POD_NAME="+podName)
		case e.ValueFrom == nil:
			env = append(env, e.Name+"="+e.Value)
		}
	}
	return env
}

// localArgs rewrites the pod's arguments for a process on this machine:
// addresses to loopback ports and files to temporary ones, keeping every
// other flag as rendered. files maps the pod's paths to local ones.
func localArgs(t *testing.T, args []string, redisAddr string, httpPort int, files map[string]string, wrapped []string) []string {
	t.Helper()
	var out []string
	for i, a := range args {
		if a == "--" {
			out = append(out, "--")
			return append(out, wrapped...)
		}
		name, value, hasValue := strings.Cut(a, "=")
		switch {
		case name == "--http-addr":
			a = fmt.Sprintf("--http-addr=127.0.0.1:%d", httpPort)
		case name == "--redis-addr":
			a = "--redis-addr=" + redisAddr
		case hasValue && strings.HasPrefix(value, "/"):
			local, ok := files[value]
			if !ok {
				t.Fatalf("argument %d %q names a file of the pod this test does not provide", i, a)
			}
			a = name + "=" + local
		}
		out = append(out, a)
	}
	return out
}

func (r *replica) get(path string) (int, []byte, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(r.httpBase + path)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

func (r *replica) leader() (leaderInfo, error) {
	code, body, err := r.get("/leader")
	if err != nil {
		return leaderInfo{}, err
	}
	if code != http.StatusOK {
		return leaderInfo{}, fmt.Errorf("GET /leader: %d %s", code, body)
	}
	var li leaderInfo
	if err := json.Unmarshal(body, &li); err != nil {
		return leaderInfo{}, fmt.Errorf("GET /leader: %w: %s", err, body)
	}
	return li, nil
}

// exitStatus reports whether the process has exited, and how.
func (r *replica) exitStatus() (exited bool, err error) {
	select {
	case err := <-r.done:
		r.done <- err // keep it for the next caller
		return true, err
	default:
		return false, nil
	}
}

func (r *replica) exited() bool {
	exited, _ := r.exitStatus()
	return exited
}

// stop sends SIGTERM, as the kubelet does, and waits for the exit.
func (r *replica) stop(t *testing.T, within time.Duration) error {
	t.Helper()
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-r.done:
		r.done <- err
		return err
	case <-time.After(within):
		_ = r.cmd.Process.Kill()
		t.Fatalf("%s did not exit within %v of SIGTERM\n%s", r.name, within, r.logs)
		return nil
	}
}

// waitFor polls cond until it holds, failing the test after timeout, or at
// once when one of the replicas, which must keep running, has exited.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() error, replicas ...*replica) {
	t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		for _, r := range replicas {
			if exited, exitErr := r.exitStatus(); exited {
				err = fmt.Errorf("%s exited (%v) while it should run: %w", r.name, exitErr, err)
				deadline = time.Now()
			}
		}
		if time.Now().After(deadline) {
			var logs strings.Builder
			for _, r := range replicas {
				fmt.Fprintf(&logs, "--- %s (exited %v):\n%s\n", r.name, r.exited(), r.logs)
			}
			t.Fatalf("%s: still not after %v: %v\n%s", what, time.Since(start).Round(time.Millisecond), err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// podFiles makes local stand-ins for the files the pod mounts: the status
// directory, the Redis password and TLS files, the token of POST /resign.
func podFiles(t *testing.T) (files map[string]string, statusFile string) {
	t.Helper()
	dir := t.TempDir()
	statusFile = filepath.Join(dir, "status")
	files = map[string]string{"/var/run/elector/status": statusFile}
	write := func(name, content string) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		files[redisDir+"/"+name] = p
	}
	write("password", redisPassword)
	write("sentinel-password", "sentinel-"+redisPassword)
	caPEM, certPEM, keyPEM := testCertificates(t)
	write("ca.crt", caPEM)
	write("tls.crt", certPEM)
	write("tls.key", keyPEM)
	token := filepath.Join(dir, "resign-token")
	if err := os.WriteFile(token, []byte("a-token-of-the-resign-endpoint\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files["/etc/elector/resign/token"] = token
	return files, statusFile
}

// testCertificates returns a CA and a client certificate signed by it, in
// PEM, for the TLS scenario's files.
func testCertificates(t *testing.T) (caPEM, certPEM, keyPEM string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "elector test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "elector"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(typ string, b []byte) string { return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})) }
	return enc("CERTIFICATE", caDER), enc("CERTIFICATE", der), enc("EC PRIVATE KEY", keyDER)
}

// startReplica starts the process of one pod: `elector sidecar` as the sidecar
// container would, or `elector run` as the app container of run mode would,
// with the wrapped command replaced by a script that records its
// environment.
func startReplica(t *testing.T, bin string, c *corev1.Container, podName, redisAddr string) *replica {
	t.Helper()
	var wrap func(child string) []string
	if _, ok := wrappedCommand(c); ok {
		wrap = func(child string) []string {
			return []string{"sh", "-c", `echo "$ELECTOR_FENCING_TOKEN $ELECTOR_IDENTITY $ELECTOR_LEASE_NAME" > "$0"; exec sleep 600`, child}
		}
	}
	return startReplicaWith(t, bin, c, podName, redisAddr, wrap)
}

// startReplicaWith is startReplica with wrap giving the command that replaces the app's
// (nil: none, sidecar mode); its argument is a file of the replica's own (replica.child).
func startReplicaWith(t *testing.T, bin string, c *corev1.Container, podName, redisAddr string, wrap func(child string) []string) *replica {
	t.Helper()
	files, status := podFiles(t)
	r := &replica{name: podName, status: status, logs: &syncBuffer{}, done: make(chan error, 1)}
	port := freePort(t)
	r.httpBase = fmt.Sprintf("http://127.0.0.1:%d", port)
	var wrapped []string
	if wrap != nil {
		r.child = filepath.Join(t.TempDir(), "child")
		wrapped = wrap(r.child)
	}
	args := localArgs(t, c.Args, redisAddr, port, files, wrapped)
	r.cmd = exec.Command(bin, args...)
	r.cmd.Env = podEnv(c, podName)
	r.cmd.Stdout, r.cmd.Stderr = r.logs, r.logs
	if err := r.cmd.Start(); err != nil {
		t.Fatalf("start %s %q: %v", bin, args, err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		if !r.exited() {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	return r
}

// TestChartArgsRunTheCLI runs two replicas of every standalone scenario with
// the rendered arguments against a real Redis: exactly one leads, the other
// follows it, readiness follows leadership only when gated, and a SIGTERM
// hands the lease over and releases it.
func TestChartArgsRunTheCLI(t *testing.T) {
	server := requireRedis(t)
	bin := buildElector(t)
	plain := startRedis(t, server, false)
	authed := startRedis(t, server, true)

	for _, s := range scenarios {
		if s.name == "tls" || s.name == "sentinel" {
			continue // TestChartArgsTLSAndSentinel
		}
		t.Run(s.name, func(t *testing.T) {
			_, objs := mustRender(t, renderOptions{valuesFiles: s.files})
			_, spec := podSpec(t, objs)
			c := theElector(t, spec)
			exe := bin
			if s.mode == "run" {
				exe = installLike(t, bin, spec)
			}
			addr, auth := plain, false
			if s.passwordSecret != "" {
				addr, auth = authed, true
			}
			lease := mustFlag(t, c, "lease-name")
			key := fmt.Sprintf("%s:{%s}:lease", mustFlag(t, c, "key-prefix"), lease)

			a := startReplica(t, exe, c, s.name+"-pod-a", addr)
			b := startReplica(t, exe, c, s.name+"-pod-b", addr)
			replicas := []*replica{a, b}

			var leader, follower *replica
			waitFor(t, 30*time.Second, "one replica leads", func() error {
				la, errA := a.leader()
				lb, errB := b.leader()
				if errA != nil || errB != nil {
					return errors.Join(errA, errB)
				}
				switch {
				case la.IsLeader && !lb.IsLeader:
					leader, follower = a, b
				case lb.IsLeader && !la.IsLeader:
					leader, follower = b, a
				default:
					return fmt.Errorf("isLeader: %s %v, %s %v", a.name, la.IsLeader, b.name, lb.IsLeader)
				}
				if la.Name != leader.name || lb.Name != leader.name {
					return fmt.Errorf("leader names %q and %q, want %q", la.Name, lb.Name, leader.name)
				}
				if la.Identity != a.name || lb.Identity != b.name {
					return fmt.Errorf("identities %q and %q, want the POD_NAMEs %q and %q", la.Identity, lb.Identity, a.name, b.name)
				}
				return nil
			}, replicas...)

			checkRoles(t, s, leader, follower, lease)
			if n, err := redisDo(addr, auth, "EXISTS", key); err != nil || n != "1" {
				t.Errorf("EXISTS %s = %q, %v; want the lease held", key, n, err)
			}

			// A rollout or drain: SIGTERM to the leader. It releases the
			// lease, so the follower takes over long before the lease expires.
			start := time.Now()
			err := leader.stop(t, 30*time.Second)
			if s.mode == "sidecar" && err != nil {
				t.Errorf("sidecar exited with %v after SIGTERM, want status 0\n%s", err, leader.logs)
			}
			waitFor(t, 10*time.Second, "the follower takes over", func() error {
				li, err := follower.leader()
				if err != nil {
					return err
				}
				if !li.IsLeader {
					return fmt.Errorf("%s: isLeader false, leader %q", follower.name, li.Name)
				}
				return nil
			}, follower)
			t.Logf("%s: handover %v after SIGTERM to the leader", s.name, time.Since(start).Round(time.Millisecond))
			checkRoles(t, s, follower, nil, lease)

			if err := follower.stop(t, 30*time.Second); s.mode == "sidecar" && err != nil {
				t.Errorf("sidecar exited with %v after SIGTERM, want status 0\n%s", err, follower.logs)
			}
			if n, err := redisDo(addr, auth, "EXISTS", key); err != nil || n != "0" {
				t.Errorf("EXISTS %s = %q, %v after both replicas stopped; want the lease released", key, n, err)
			}
		})
	}
}

// checkRoles checks what a neighbouring container or a Service sees of the
// leader and of the follower (which may be nil).
func checkRoles(t *testing.T, s scenario, leader, follower *replica, lease string) {
	t.Helper()
	for _, r := range []*replica{leader, follower} {
		if r == nil {
			continue
		}
		isLeader := r == leader
		code, _, err := r.get("/healthz")
		if err != nil || code != http.StatusOK {
			t.Errorf("%s: /healthz %d, %v; liveness must not depend on leadership", r.name, code, err)
		}
		readiness := "/healthz"
		if s.gated {
			readiness = "/readyz"
		}
		code, _, err = r.get(readiness)
		wantReady := isLeader || !s.gated
		if err != nil || (code == http.StatusOK) != wantReady {
			t.Errorf("%s (leader %v): readiness probe %s answered %d, %v; want ready %v", r.name, isLeader, readiness, code, err, wantReady)
		}
		code, body, err := r.get("/metrics")
		if err != nil || code != http.StatusOK || len(body) == 0 {
			t.Errorf("%s: /metrics %d, %v", r.name, code, err)
		}
		if isLeader {
			checkMonitoredMetrics(t, r.name, string(body), lease)
		}
		switch s.mode {
		case "sidecar":
			want := "follower"
			if isLeader {
				want = "leader"
			}
			waitFor(t, 10*time.Second, r.name+": status file says "+want, func() error {
				b, err := os.ReadFile(r.status)
				if err != nil {
					return err
				}
				if got, _, _ := strings.Cut(string(b), "\n"); got != want { // a leader's deadline follows
					return fmt.Errorf("status file %q", got)
				}
				return nil
			}, r)
		case "run":
			if !isLeader {
				if _, err := os.Stat(r.child); err == nil {
					t.Errorf("%s: the wrapped command ran on a follower", r.name)
				}
				continue
			}
			waitFor(t, 10*time.Second, r.name+": the wrapped command runs on the leader", func() error {
				b, err := os.ReadFile(r.child)
				if err != nil {
					return err
				}
				f := strings.Fields(string(b))
				if len(f) != 3 || f[0] == "" || f[1] != r.name || f[2] != lease {
					return fmt.Errorf("child environment %q, want a token, %s and %s", b, r.name, lease)
				}
				if _, err := strconv.ParseUint(f[0], 10, 64); err != nil {
					return fmt.Errorf("fencing token %q: %w", f[0], err)
				}
				return nil
			}, r)
		}
	}
}

// alwaysExported are the metric families a replica exports from its start;
// the others appear with their first observation (a renew, a Redis error).
var alwaysExported = []string{"leader_election_master_status", "elector_is_leader", "elector_leadership_transitions_total", "elector_fencing_token"}

// checkMonitoredMetrics checks that the metrics the PrometheusRule and the
// dashboard query are what a leader exports, with the lease as the name
// label their selectors match; a family that appears only with its first
// observation must at least be one pkg/election declares.
func checkMonitoredMetrics(t *testing.T, replica, body, lease string) {
	t.Helper()
	source := readFile(t, filepath.Join(repoRoot, "pkg", "election", "metrics.go"))
	for _, m := range monitoredMetrics(t) {
		if !strings.Contains(body, "# TYPE "+m+" ") {
			if slices.Contains(alwaysExported, m) || !strings.Contains(source, `"`+m+`"`) {
				t.Errorf("%s: /metrics lacks %s, which the PrometheusRule or the dashboard queries, and pkg/election does not declare it", replica, m)
			}
			continue
		}
		found := false
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, m) && strings.Contains(line, `name="`+lease+`"`) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s: /metrics has no %s{name=%q}, which the PrometheusRule and the dashboard select", replica, m, lease)
		}
	}
}

// installLike runs the install init container's arguments (`elector
// install PATH`) into a temporary directory and returns the installed copy,
// which the app container of run mode executes.
func installLike(t *testing.T, bin string, spec *corev1.PodSpec) string {
	t.Helper()
	install := findContainer(t, spec.InitContainers, installInitName)
	if len(install.Args) != 2 || install.Args[1] != electorBinary {
		t.Fatalf("install args %q, want [install %s]", install.Args, electorBinary)
	}
	dst := filepath.Join(t.TempDir(), "elector-bin", "elector")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil { // the emptyDir
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // an init container may run again after a restart
		out, err := exec.Command(bin, install.Args[0], dst).CombinedOutput()
		if err != nil {
			t.Fatalf("elector %s %s: %v\n%s", install.Args[0], dst, err, out)
		}
	}
	fi, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Errorf("installed binary mode %v, want 0755", fi.Mode().Perm())
	}
	if out, err := exec.Command(dst, "version").CombinedOutput(); err != nil {
		t.Fatalf("installed binary does not run: %v\n%s", err, out)
	}
	return dst
}

// TestChartArgsTLSAndSentinel starts the elector with the TLS and Sentinel
// scenarios' arguments, their files in place and nothing listening at the
// Redis address: the CLI must accept every flag and file and serve its
// endpoints while it keeps trying to reach Redis.
func TestChartArgsTLSAndSentinel(t *testing.T) {
	requireRedis(t)
	bin := buildElector(t)
	for _, name := range []string{"tls", "sentinel"} {
		t.Run(name, func(t *testing.T) {
			s := scenarioNamed(t, name)
			_, objs := mustRender(t, renderOptions{valuesFiles: s.files})
			_, spec := podSpec(t, objs)
			c := theElector(t, spec)
			exe := bin
			if s.mode == "run" {
				exe = installLike(t, bin, spec)
			}
			// A port nobody listens on: connections are refused at once.
			nowhere := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			if s.name == "sentinel" {
				nowhere += "," + nowhere
			}
			r := startReplica(t, exe, c, s.name+"-pod-a", nowhere)
			waitFor(t, 30*time.Second, "the elector serves /leader", func() error {
				code, _, err := r.get("/healthz")
				if err != nil {
					return err
				}
				if code == 0 {
					return errors.New("no answer")
				}
				_, _, err = r.get("/leader")
				return err
			}, r)
			time.Sleep(2 * time.Second) // it must keep running without Redis
			if exited, err := r.exitStatus(); exited {
				t.Fatalf("exited without Redis: %v\n%s", err, r.logs)
			}
			if li, err := r.leader(); err == nil && li.IsLeader {
				t.Errorf("/leader %+v: leads without Redis", li)
			}
			_ = r.stop(t, 30*time.Second)
		})
	}
}
