// Package k8s is the Kubernetes e2e of elector (make k8s-e2e, hack/k8s-e2e.sh): a real
// one-node cluster built from source, the chart installed with helm, failed over and rolled,
// and client-go's LeaderElector measured beside it on the same cluster.
package k8s

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/elector/elector/test/k8s/cluster"
)

// Images built by the harness, imported into the cluster's containerd.
const (
	electorImage  = "localhost/elector:e2e"
	pauseImage    = "localhost/elector-e2e/pause:1"
	workerImage   = "localhost/elector-e2e/worker:e2e"
	clientgoImage = "localhost/elector-e2e/clientgo:1"
	crImage       = "localhost/elector-e2e/controller-runtime:1" // examples/controller-runtime
	// busybox stands in for the examples' busybox:1.37: Debian's static busybox as /bin/sh,
	// which runs its applets (date, sleep, cat…) without links to them.
	busyboxImage = "localhost/elector-e2e/busybox:e2e"
)

// The short timings of every scenario: the same for elector and for client-go.
const (
	leaseDuration = 4 * time.Second
	renewDeadline = 3 * time.Second
	retryPeriod   = time.Second
)

// env is the running cluster the tests share.
type env struct {
	c         *cluster.Cluster
	cs        kubernetes.Interface
	cfg       *rest.Config // the administrator's, for clients that impersonate another user
	redis     *redis.Client
	redisAddr string
	helm      string
	repo      string
	bin       string // the binaries prepare built: elector, worker…
	k8sVer    string
	helmVer   string

	mu      sync.Mutex
	figures map[string]any
}

var e *env

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s e2e: %s\n", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// sideBySide lets t run beside the other tests marked so, once the rest have run (two at a
// time: go test's -parallel). It marks the tests that mostly wait (schedule slots, pod starts,
// lease expiries) and whose checks load cannot bend (no two workers at once, every slot done
// or recorded missed, one labelled pod), each in releases, lease names and namespaces of its
// own. The tests that count leadership moves or time a handover stay alone.
func sideBySide(t *testing.T) { t.Parallel() }

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	bin, helm, repo := os.Getenv("E2E_K8S_BIN"), os.Getenv("E2E_HELM"), os.Getenv("E2E_REPO")
	if bin == "" || helm == "" || repo == "" || os.Geteuid() != 0 {
		msg := "the Kubernetes e2e needs root and E2E_K8S_BIN, E2E_HELM, E2E_REPO (run it with make k8s-e2e)"
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "FAIL:", msg)
			return 1
		}
		fmt.Fprintln(os.Stderr, "skip:", msg)
		return 0
	}
	work, err := os.MkdirTemp("/var/lib", "elector-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e = &env{helm: helm, repo: repo, k8sVer: os.Getenv("E2E_K8S_VERSION"), helmVer: os.Getenv("E2E_HELM_VERSION"), figures: map[string]any{}}
	start := time.Now()
	c, err := cluster.Start(ctx, cluster.Options{
		BinDir: bin, WorkDir: work, Bridge: "elk8s0",
		PodCIDR: "10.207.0.0/24", ServiceCIDR: "10.207.16.0/24",
		SandboxImage: pauseImage, Logf: logf,
	})
	e.c = c
	// Teardown runs whatever happens below, and before the go test timeout can kill us.
	var once sync.Once
	teardown := func() {
		once.Do(func() {
			tctx, tcancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer tcancel()
			if err := c.Stop(tctx); err != nil {
				logf("teardown incomplete: %v", err)
			} else {
				logf("teardown complete")
			}
		})
	}
	defer teardown()
	if watchdog := deadline(); watchdog > 0 {
		timer := time.AfterFunc(watchdog, func() {
			logf("watchdog: the go test timeout is near, tearing down")
			teardown()
			os.Exit(1)
		})
		defer timer.Stop()
	}
	if err != nil {
		logf("cluster: %v", err)
		return 1
	}
	if err := e.prepare(ctx, work); err != nil {
		logf("prepare: %v", err)
		return 1
	}
	e.figure("cluster_up_seconds", time.Since(start).Seconds())
	logf("cluster up in %.1fs", time.Since(start).Seconds())
	code := m.Run()
	e.writeFigures()
	return code
}

// deadline is how long before the -test.timeout the watchdog tears down.
func deadline() time.Duration {
	f := flagValue("test.timeout")
	d, err := time.ParseDuration(f)
	if err != nil || d <= 0 {
		return 0
	}
	return d - 90*time.Second
}

func flagValue(name string) string {
	for i, a := range os.Args {
		for _, p := range []string{"-" + name + "=", "--" + name + "="} {
			if strings.HasPrefix(a, p) {
				return strings.TrimPrefix(a, p)
			}
		}
		if (a == "-"+name || a == "--"+name) && i+1 < len(os.Args) {
			return os.Args[i+1]
		}
	}
	return ""
}

// prepare builds the binaries and images, starts Redis and the node.
func (e *env) prepare(ctx context.Context, work string) error {
	binDir := filepath.Join(work, "bin")
	e.bin = binDir
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return err
	}
	t0 := time.Now()
	// The elector binary exactly as the release: hack/build.sh.
	if out, err := exec.CommandContext(ctx, filepath.Join(e.repo, "hack", "build.sh"), filepath.Join(binDir, "elector")).CombinedOutput(); err != nil {
		return fmt.Errorf("hack/build.sh: %w: %s", err, out)
	}
	for _, p := range []string{"pause", "worker", "clientgo-elector"} {
		// With -trimpath and CGO off, as the test binary (hack/k8s-e2e.sh): the build cache is
		// shared.
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(binDir, p), "./cmd/"+p)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w: %s", p, err, out)
		}
	}
	// The flags hack/k8s-e2e.sh vets and tests hack/image with, so that it is not compiled again.
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(binDir, "image"), ".")
	cmd.Dir = filepath.Join(e.repo, "hack", "image")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build hack/image: %w: %s", err, out)
	}
	// examples/controller-runtime from its own module, with the flags of make adapters-test,
	// whose compiled controller-runtime it reuses.
	cmd = exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(binDir, "controller-runtime"), ".")
	cmd.Dir = filepath.Join(e.repo, "examples", "controller-runtime")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build examples/controller-runtime: %w: %s", err, out)
	}
	if _, err := os.Stat("/bin/busybox"); err != nil {
		return fmt.Errorf("the examples' busybox image is made of /bin/busybox (Debian's busybox-static, which hack/k8s-e2e.sh installs): %w", err)
	}
	images := []struct {
		tag  string
		args []string
	}{
		// The elector image with hack/image's defaults: the Dockerfile's config.
		{electorImage, []string{"-binary", filepath.Join(binDir, "elector")}},
		{pauseImage, []string{"-binary", filepath.Join(binDir, "pause"), "-path", "/pause", "-user", "65535:65535", "-ca", ""}},
		{workerImage, []string{"-binary", filepath.Join(binDir, "worker"), "-path", "/worker"}},
		{clientgoImage, []string{"-binary", filepath.Join(binDir, "clientgo-elector"), "-path", "/clientgo-elector"}},
		{crImage, []string{"-binary", filepath.Join(binDir, "controller-runtime"), "-path", "/controller-runtime"}},
		{busyboxImage, []string{"-binary", "/bin/busybox", "-path", "/bin/sh", "-ca", ""}},
	}
	for _, im := range images {
		tar := filepath.Join(work, strings.NewReplacer("/", "_", ":", "_").Replace(im.tag)+".tar")
		args := append(im.args, "-tag", im.tag, "-o", tar)
		if out, err := exec.CommandContext(ctx, filepath.Join(binDir, "image"), args...).CombinedOutput(); err != nil {
			return fmt.Errorf("image %s: %w: %s", im.tag, err, out)
		}
		if _, err := e.c.Ctr(ctx, "images", "import", tar); err != nil {
			return fmt.Errorf("import %s: %w", im.tag, err)
		}
	}
	e.figure("images_build_seconds", time.Since(t0).Seconds())
	logf("binaries and images in %.1fs", time.Since(t0).Seconds())

	// Redis on the host, bound to the bridge's address only: the pods reach it directly.
	port, err := cluster.FreePort(e.c.BridgeIP.String())
	if err != nil {
		return err
	}
	e.redisAddr = net.JoinHostPort(e.c.BridgeIP.String(), strconv.Itoa(port))
	if err := e.c.Spawn("redis", "redis-server", "--bind", e.c.BridgeIP.String(), "--port", strconv.Itoa(port),
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--dir", work); err != nil {
		return err
	}
	e.redis = redis.NewClient(&redis.Options{Addr: e.redisAddr})
	if err := waitUntil(ctx, 10*time.Second, func() error { return e.redis.Ping(ctx).Err() }); err != nil {
		return fmt.Errorf("redis: %w", err)
	}

	if err := e.c.StartNode(ctx); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", e.c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 100, 200
	e.cfg = cfg
	e.cs, err = kubernetes.NewForConfig(cfg)
	return err
}

func waitUntil(ctx context.Context, limit time.Duration, f func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (e *env) figure(name string, v any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if f, ok := v.(float64); ok {
		v = float64(int64(f*1000)) / 1000
	}
	e.figures[name] = v
	logf("figure %s = %v", name, v)
}

// writeFigures writes the measured figures to E2E_RESULTS (for docs/KUBERNETES.md).
func (e *env) writeFigures() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.figures["kubernetes"], e.figures["helm"] = e.k8sVer, e.helmVer
	b, _ := json.MarshalIndent(e.figures, "", "  ")
	if p := os.Getenv("E2E_RESULTS"); p != "" {
		_ = os.WriteFile(p, b, 0o644)
	}
	fmt.Fprintf(os.Stderr, "figures:\n%s\n", b)
}
