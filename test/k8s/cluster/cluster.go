// Package cluster brings up a real one-node Kubernetes on this machine from binaries built
// by hack/k8s-e2e.sh: etcd (Debian's etcd-server), kube-apiserver, kube-controller-manager,
// kube-scheduler, containerd (its own socket, root and CNI config), kubelet and kube-proxy,
// with a CNI bridge in a pod CIDR of its own. Pods get routes to the pod subnet and the
// service range only: no default route off the machine, no masquerade. Stop tears down
// everything Start made, by PID: processes, containers and their shims, mounts, network
// namespaces, the bridge, the iptables rules and chains added, and the sysctls the kubelet
// and kube-proxy change.
package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Options configure the cluster.
type Options struct {
	// BinDir holds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
	// kube-proxy and kubectl.
	BinDir string
	// WorkDir is where the cluster keeps its state; it is removed by Stop.
	WorkDir string
	// Bridge is the name of the CNI bridge.
	Bridge string
	// PodCIDR and ServiceCIDR are /24s of the harness's own.
	PodCIDR, ServiceCIDR string
	// SandboxImage is the pause image, imported by the caller before pods start.
	SandboxImage string
	// Logf reports progress.
	Logf func(format string, args ...any)
}

// Cluster is a running cluster.
type Cluster struct {
	opts       Options
	pki        *pki
	procs      []*proc
	Kubeconfig string
	// BridgeIP is the node's address on the pod network (the gateway of the pods): the API
	// server, the kubelet and anything the host serves to pods listen here.
	BridgeIP        net.IP
	APIServer       string
	ContainerdSock  string
	NodeName        string
	sysctls         map[string]string
	iptablesBefore  map[string]string
	netnsBefore     map[string]bool
	createdBridge   bool
	kubeProxyConfig string
}

type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
}

// FreePort returns a TCP port free on addr.
func FreePort(addr string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Logf != nil {
		c.opts.Logf(format, args...)
	}
}

func (c *Cluster) path(p ...string) string {
	return filepath.Join(append([]string{c.opts.WorkDir}, p...)...)
}

// Start brings the cluster up and waits for the node to be Ready. On error the caller must
// still call Stop.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	c := &Cluster{opts: opts, NodeName: "elector-e2e"}
	if err := c.start(ctx); err != nil {
		return c, err
	}
	return c, nil
}

var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
	"net/ipv4/conf/all/route_localnet", "net/bridge/bridge-nf-call-iptables",
	"net/bridge/bridge-nf-call-ip6tables", "net/netfilter/nf_conntrack_max",
}

func (c *Cluster) start(ctx context.Context) error {
	o := c.opts
	_, podNet, err := net.ParseCIDR(o.PodCIDR)
	if err != nil {
		return fmt.Errorf("pod CIDR %q: %w", o.PodCIDR, err)
	}
	_, svcNet, err := net.ParseCIDR(o.ServiceCIDR)
	if err != nil {
		return fmt.Errorf("service CIDR %q: %w", o.ServiceCIDR, err)
	}
	if err := checkFreeRanges(podNet, svcNet); err != nil {
		return err
	}
	c.BridgeIP = nthIP(podNet, 1)
	svcIP := nthIP(svcNet, 1)

	// What we may change, recorded first so that Stop restores it.
	c.sysctls = map[string]string{}
	for _, s := range kubeletSysctls {
		if b, err := os.ReadFile("/proc/sys/" + s); err == nil {
			c.sysctls[s] = strings.TrimSpace(string(b))
		}
	}
	c.iptablesBefore = map[string]string{}
	for _, t := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(t).Output()
		if err == nil {
			c.iptablesBefore[t] = string(out)
		}
	}
	c.netnsBefore = listNetns()

	for _, d := range []string{"pki", "logs", "etcd", "containerd/root", "containerd/state", "cni/net.d", "cni/ipam", "kubelet", "manifests"} {
		if err := os.MkdirAll(c.path(d), 0o755); err != nil {
			return err
		}
	}

	// The bridge first: the API server and the kubelet listen on its address. Its MAC address
	// is set (locally administered, from the bridge's IP): a bridge whose address was not set
	// takes the lowest MAC of its ports, so it changed whenever a pod's veth came or went, and
	// the pods' ARP entries for the gateway pointed at a MAC nobody had until they were
	// probed again: a pod lost the host (Redis, the API server) for seconds, seen as a leader
	// that could not renew right after another pod was deleted.
	ip4 := c.BridgeIP.To4()
	mac := fmt.Sprintf("02:e2:%02x:%02x:%02x:%02x", ip4[0], ip4[1], ip4[2], ip4[3])
	if err := run("ip", "link", "add", o.Bridge, "address", mac, "type", "bridge"); err != nil {
		return fmt.Errorf("create bridge %s: %w", o.Bridge, err)
	}
	c.createdBridge = true
	ones, _ := podNet.Mask.Size()
	if err := run("ip", "addr", "add", fmt.Sprintf("%s/%d", c.BridgeIP, ones), "dev", o.Bridge); err != nil {
		return err
	}
	if err := run("ip", "link", "set", o.Bridge, "up"); err != nil {
		return err
	}

	// Certificates.
	if c.pki, err = newPKI(c.path("pki")); err != nil {
		return err
	}
	if err := c.pki.issue("apiserver", "kube-apiserver", nil, true,
		[]net.IP{c.BridgeIP, svcIP, net.ParseIP("127.0.0.1")},
		[]string{"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "localhost"}); err != nil {
		return err
	}
	if err := c.pki.issue("admin", "admin", []string{"system:masters"}, false, nil, nil); err != nil {
		return err
	}
	if err := c.pki.issue("kubelet-client", "kube-apiserver-kubelet-client", []string{"system:masters"}, false, nil, nil); err != nil {
		return err
	}
	if err := c.pki.serviceAccountKey(); err != nil {
		return err
	}

	// etcd.
	etcdClient, err := FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	etcdPeer, err := FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	if err := c.spawn("etcd", "etcd", "--name=e2e", "--data-dir="+c.path("etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL, "--quota-backend-bytes=2147483648"); err != nil {
		return err
	}

	// kube-apiserver.
	apiPort, err := FreePort(c.BridgeIP.String())
	if err != nil {
		return err
	}
	c.APIServer = fmt.Sprintf("https://%s", net.JoinHostPort(c.BridgeIP.String(), strconv.Itoa(apiPort)))
	c.Kubeconfig = c.path("admin.kubeconfig")
	if err := c.pki.kubeconfig(c.Kubeconfig, c.APIServer, "admin"); err != nil {
		return err
	}
	p := c.pki.path
	if err := c.spawn("kube-apiserver", c.bin("kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address="+c.BridgeIP.String(), "--advertise-address="+c.BridgeIP.String(),
		"--secure-port="+strconv.Itoa(apiPort),
		"--tls-cert-file="+p("apiserver.crt"), "--tls-private-key-file="+p("apiserver.key"),
		"--client-ca-file="+p("ca.crt"),
		"--kubelet-client-certificate="+p("kubelet-client.crt"), "--kubelet-client-key="+p("kubelet-client.key"),
		"--service-cluster-ip-range="+o.ServiceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+p("sa.pub"), "--service-account-signing-key-file="+p("sa.key"),
		"--authorization-mode=RBAC", "--allow-privileged=false", "--profiling=false",
		// The node name does not resolve: reach the kubelet (exec, logs) at its address.
		"--kubelet-preferred-address-types=InternalIP",
		"--cert-dir="+c.path("pki", "apiserver-generated")); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "the API server", 60*time.Second, func() error {
		_, err := c.Kubectl(ctx, "get", "--raw=/readyz")
		return err
	}); err != nil {
		return err
	}

	cmPort, err := FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	if err := c.spawn("kube-controller-manager", c.bin("kube-controller-manager"),
		"--kubeconfig="+c.Kubeconfig, "--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(cmPort),
		"--service-account-private-key-file="+p("sa.key"), "--root-ca-file="+p("ca.crt"),
		"--use-service-account-credentials=false", "--service-cluster-ip-range="+o.ServiceCIDR,
		"--cert-dir="+c.path("pki", "cm-generated")); err != nil {
		return err
	}
	schedPort, err := FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	if err := c.spawn("kube-scheduler", c.bin("kube-scheduler"),
		"--kubeconfig="+c.Kubeconfig, "--authentication-kubeconfig="+c.Kubeconfig, "--authorization-kubeconfig="+c.Kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort),
		"--cert-dir="+c.path("pki", "sched-generated")); err != nil {
		return err
	}

	// containerd, with a CNI config of its own.
	c.ContainerdSock = c.path("containerd", "containerd.sock")
	cni := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "elector-e2e",
		"plugins": []any{map[string]any{
			"type": "bridge", "bridge": o.Bridge, "isGateway": true, "isDefaultGateway": false,
			"ipMasq": false, "hairpinMode": true,
			"ipam": map[string]any{
				"type":    "host-local",
				"dataDir": c.path("cni", "ipam"),
				"ranges":  [][]map[string]string{{{"subnet": o.PodCIDR, "gateway": c.BridgeIP.String()}}},
				// Only the service range: no default route, so nothing leaves the machine.
				"routes": []map[string]string{{"dst": o.ServiceCIDR}},
			},
		}},
	}
	cniJSON, _ := json.MarshalIndent(cni, "", "  ")
	if err := os.WriteFile(c.path("cni", "net.d", "10-elector-e2e.conflist"), cniJSON, 0o644); err != nil {
		return err
	}
	containerdCfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %q
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
[plugins."io.containerd.internal.v1.opt"]
  path = %q
`, c.path("containerd", "root"), c.path("containerd", "state"), c.ContainerdSock, c.ContainerdSock+".ttrpc",
		o.SandboxImage, c.path("cni", "net.d"), c.path("containerd", "opt"))
	if err := os.WriteFile(c.path("containerd", "config.toml"), []byte(containerdCfg), 0o644); err != nil {
		return err
	}
	if err := c.spawn("containerd", "containerd", "--config="+c.path("containerd", "config.toml")); err != nil {
		return err
	}
	if err := c.waitFor(ctx, "containerd", 30*time.Second, func() error {
		_, err := c.Ctr(ctx, "version")
		return err
	}); err != nil {
		return err
	}
	return nil
}

// StartNode starts the kubelet and kube-proxy, once the sandbox image is imported, and
// waits for the node to be Ready.
func (c *Cluster) StartNode(ctx context.Context) error {
	o := c.opts
	kubeletPort, err := FreePort(c.BridgeIP.String())
	if err != nil {
		return err
	}
	healthzPort, err := FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	kubeletCfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://%s
address: %s
port: %d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: %s}
authorization: {mode: AlwaysAllow}
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%%", imagefs.available: "1%%", nodefs.inodesFree: "1%%"}
registerNode: true
serializeImagePulls: false
podCIDR: %s
podLogsDir: %s
`, c.ContainerdSock, c.BridgeIP, kubeletPort, healthzPort, c.pki.path("ca.crt"), o.PodCIDR, c.path("logs", "pods"))
	if err := os.WriteFile(c.path("kubelet", "config.yaml"), []byte(kubeletCfg), 0o644); err != nil {
		return err
	}
	if err := c.spawn("kubelet", c.bin("kubelet"),
		"--config="+c.path("kubelet", "config.yaml"), "--kubeconfig="+c.Kubeconfig,
		"--root-dir="+c.path("kubelet", "root"), "--cert-dir="+c.path("kubelet", "pki"),
		"--hostname-override="+c.NodeName, "--node-ip="+c.BridgeIP.String()); err != nil {
		return err
	}
	proxyHealthz, err := FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	proxyMetrics, err := FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	c.kubeProxyConfig = c.path("kube-proxy.yaml")
	proxyCfg := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %s}
mode: iptables
clusterCIDR: %s
hostnameOverride: %s
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
nodePortAddresses: ["%s/32"]
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
iptables: {localhostNodePorts: false, masqueradeAll: false}
`, c.Kubeconfig, o.PodCIDR, c.NodeName, proxyHealthz, proxyMetrics, c.BridgeIP)
	if err := os.WriteFile(c.kubeProxyConfig, []byte(proxyCfg), 0o644); err != nil {
		return err
	}
	if err := c.spawn("kube-proxy", c.bin("kube-proxy"), "--config="+c.kubeProxyConfig); err != nil {
		return err
	}
	return c.waitFor(ctx, "the node to be Ready", 90*time.Second, func() error {
		out, err := c.Kubectl(ctx, "get", "node", c.NodeName, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
		if err != nil {
			return err
		}
		if strings.TrimSpace(out) != "True" {
			return fmt.Errorf("node Ready=%q", out)
		}
		// The default service account exists before pods can be created.
		_, err = c.Kubectl(ctx, "get", "serviceaccount", "default")
		return err
	})
}

func (c *Cluster) bin(name string) string { return filepath.Join(c.opts.BinDir, name) }

// spawn starts a long-running process in its own process group, logging to logs/NAME.log.
func (c *Cluster) spawn(name, bin string, args ...string) error {
	logf, err := os.Create(c.path("logs", name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	c.procs = append(c.procs, p)
	// A backstop for hack/k8s-e2e.sh if this process dies without Stop.
	f, err := os.OpenFile(c.path("pids"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err == nil {
		fmt.Fprintf(f, "%d %s\n", cmd.Process.Pid, name)
		f.Close()
	}
	c.logf("started %s (pid %d)", name, cmd.Process.Pid)
	return nil
}

// Spawn starts a helper process (such as a Redis server) that Stop stops with the cluster.
func (c *Cluster) Spawn(name, bin string, args ...string) error { return c.spawn(name, bin, args...) }

// Exited reports which started processes have exited (they all should run until Stop).
func (c *Cluster) Exited() []string {
	var out []string
	for _, p := range c.procs {
		select {
		case <-p.done:
			out = append(out, p.name)
		default:
		}
	}
	return out
}

// LogTail returns the last lines of a process's log.
func (c *Cluster) LogTail(name string, n int) string {
	b, _ := os.ReadFile(c.path("logs", name+".log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (c *Cluster) waitFor(ctx context.Context, what string, limit time.Duration, f func() error) error {
	deadline := time.Now().Add(limit)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return nil
		}
		if ex := c.Exited(); len(ex) > 0 {
			return fmt.Errorf("waiting for %s: %s exited: %s", what, ex[0], c.LogTail(ex[0], 20))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("waiting for %s for %v: %w", what, limit, err)
}

// Kubectl runs the kubectl built with the cluster against it.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	return output(ctx, c.bin("kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
}

// KubectlCmd is the kubectl command with args against the cluster, not started: for the
// commands that run in the background (port-forward).
func (c *Cluster) KubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, c.bin("kubectl"), append([]string{"--kubeconfig=" + c.Kubeconfig}, args...)...)
}

// Ctr runs containerd's ctr against the cluster's containerd, in the k8s.io namespace.
func (c *Cluster) Ctr(ctx context.Context, args ...string) (string, error) {
	return output(ctx, "ctr", append([]string{"--address", c.ContainerdSock, "-n", "k8s.io"}, args...)...)
}

func output(ctx context.Context, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func run(bin string, args ...string) error {
	_, err := output(context.Background(), bin, args...)
	return err
}

func nthIP(n *net.IPNet, i byte) net.IP {
	ip := make(net.IP, len(n.IP.To4()))
	copy(ip, n.IP.To4())
	ip[3] += i
	return ip
}

// checkFreeRanges refuses ranges that overlap a route of this machine.
func checkFreeRanges(nets ...*net.IPNet) error {
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return fmt.Errorf("ip route: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == "default" || f[0] == "broadcast" || f[0] == "local" || f[0] == "unreachable" {
			continue
		}
		_, rn, err := net.ParseCIDR(f[0])
		if err != nil {
			continue
		}
		for _, n := range nets {
			if rn.Contains(n.IP) || n.Contains(rn.IP) {
				return fmt.Errorf("range %s overlaps route %q of this machine (another cluster left running?)", n, line)
			}
		}
	}
	return nil
}

func listNetns() map[string]bool {
	m := map[string]bool{}
	entries, _ := os.ReadDir("/var/run/netns")
	for _, e := range entries {
		m[e.Name()] = true
	}
	return m
}

// Stop tears down everything Start and StartNode made; it returns what it could not undo.
func (c *Cluster) Stop(ctx context.Context) error {
	var errs []error
	note := func(err error) {
		if err != nil {
			errs = append(errs, err)
			c.logf("teardown: %v", err)
		}
	}
	stop := func(name string) {
		for _, p := range c.procs {
			if p.name == name {
				note(stopProc(p))
			}
		}
	}
	// Let the kubelet stop the pods (their sandboxes, CNI teardown) while everything runs.
	if c.ContainerdSock != "" && c.running("kubelet") && c.running("kube-apiserver") {
		dctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		_, _ = c.Kubectl(dctx, "delete", "deployments,statefulsets,jobs,pods", "--all", "--all-namespaces", "--grace-period=1", "--wait=false")
		_ = c.waitFor(dctx, "the pods to stop", 45*time.Second, func() error {
			out, err := c.Ctr(dctx, "tasks", "ls", "-q")
			if err != nil {
				return nil // containerd is gone: nothing more to wait for
			}
			if n := len(strings.Fields(out)); n > 0 {
				return fmt.Errorf("%d tasks still run", n)
			}
			return nil
		})
		cancel()
	}
	stop("kubelet")
	stop("kube-proxy")
	if c.kubeProxyConfig != "" {
		_, err := output(ctx, c.bin("kube-proxy"), "--cleanup", "--config="+c.kubeProxyConfig)
		if err != nil {
			c.logf("kube-proxy --cleanup: %v", err)
		}
	}
	// Whatever the kubelet did not stop: kill the tasks, then their shims, by PID.
	if c.ContainerdSock != "" && c.running("containerd") {
		if out, err := c.Ctr(ctx, "tasks", "ls", "-q"); err == nil {
			for _, id := range strings.Fields(out) {
				_, _ = c.Ctr(ctx, "tasks", "kill", "-s", "SIGKILL", id)
			}
			time.Sleep(500 * time.Millisecond)
			for _, id := range strings.Fields(out) {
				_, _ = c.Ctr(ctx, "tasks", "delete", "-f", id)
			}
		}
	}
	for _, name := range []string{"kube-scheduler", "kube-controller-manager", "kube-apiserver", "etcd", "containerd"} {
		stop(name)
	}
	for _, p := range c.procs { // the helpers (Redis)
		note(stopProc(p))
	}
	if c.ContainerdSock != "" {
		note(killShims(c.ContainerdSock))
	}
	note(c.unmountUnder(c.opts.WorkDir))
	for name := range listNetns() {
		if !c.netnsBefore[name] && strings.HasPrefix(name, "cni-") {
			p := filepath.Join("/var/run/netns", name)
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			note(os.Remove(p))
		}
	}
	if c.createdBridge {
		// The host ends of the pods' veths, if any survived their namespaces.
		if out, err := exec.Command("ip", "-o", "link", "show", "master", c.opts.Bridge).Output(); err == nil {
			for _, line := range strings.Split(string(out), "\n") {
				f := strings.Fields(line)
				if len(f) > 1 {
					_ = run("ip", "link", "del", strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0])
				}
			}
		}
		note(run("ip", "link", "del", c.opts.Bridge))
	}
	note(c.restoreIptables())
	for s, v := range c.sysctls {
		if cur, err := os.ReadFile("/proc/sys/" + s); err == nil && strings.TrimSpace(string(cur)) != v {
			note(os.WriteFile("/proc/sys/"+s, []byte(v), 0o644))
			c.logf("restored %s=%s (was %s)", s, v, strings.TrimSpace(string(cur)))
		}
	}
	note(c.removeCgroups())
	if len(errs) == 0 && c.opts.WorkDir != "" && os.Getenv("E2E_KEEP") == "" {
		note(os.RemoveAll(c.opts.WorkDir))
	}
	return errors.Join(errs...)
}

func (c *Cluster) running(name string) bool {
	for _, p := range c.procs {
		if p.name == name {
			select {
			case <-p.done:
				return false
			default:
				return true
			}
		}
	}
	return false
}

func stopProc(p *proc) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(15 * time.Second):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("%s (pid %d) did not exit", p.name, p.cmd.Process.Pid)
	}
}

// killShims kills the containerd shims (and so their containers) started for our socket:
// found by PID from /proc, by the -address argument only our containerd passes them.
func killShims(sock string) error {
	var errs []error
	for _, pid := range pidsWithArg(sock) {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("kill shim %d: %w", pid, err))
		}
	}
	return errors.Join(errs...)
}

func pidsWithArg(arg string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range strings.Split(string(b), "\x00") {
			if a == arg {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// unmountUnder detaches every mount below dir, deepest first.
func (c *Cluster) unmountUnder(dir string) error {
	if dir == "" {
		return nil
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var mounts []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 {
			mp := unescapeMount(fields[4])
			if mp == dir || strings.HasPrefix(mp, dir+"/") {
				mounts = append(mounts, mp)
			}
		}
	}
	sort.Slice(mounts, func(i, j int) bool { return len(mounts[i]) > len(mounts[j]) })
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// restoreIptables deletes the rules and chains added since Start (kube-proxy's are gone after
// --cleanup; the kubelet's canary chains are not).
func (c *Cluster) restoreIptables() error {
	var errs []error
	for save, before := range c.iptablesBefore {
		bin := strings.TrimSuffix(save, "-save")
		out, err := exec.Command(save).Output()
		if err != nil {
			continue
		}
		had := map[string]bool{}
		table := ""
		for _, l := range strings.Split(before, "\n") {
			if strings.HasPrefix(l, "*") {
				table = l[1:]
			}
			had[table+" "+l] = true
		}
		var rules [][]string
		chains := map[string][]string{}
		table = ""
		for _, l := range strings.Split(string(out), "\n") {
			switch {
			case strings.HasPrefix(l, "*"):
				table = l[1:]
			case strings.HasPrefix(l, ":") && !hasChain(before, table, strings.Fields(l)[0][1:]):
				chains[table] = append(chains[table], strings.Fields(l)[0][1:])
			case strings.HasPrefix(l, "-A ") && !had[table+" "+l]:
				rules = append(rules, append([]string{"-t", table, "-D"}, splitRule(l[3:])...))
			}
		}
		for _, r := range rules {
			if err := run(bin, r...); err != nil {
				errs = append(errs, err)
			}
		}
		for t, cs := range chains {
			for _, ch := range cs {
				_ = run(bin, "-t", t, "-F", ch)
			}
			for _, ch := range cs {
				if err := run(bin, "-t", t, "-X", ch); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	return errors.Join(errs...)
}

func hasChain(save, table, chain string) bool {
	t := ""
	for _, l := range strings.Split(save, "\n") {
		if strings.HasPrefix(l, "*") {
			t = l[1:]
		}
		if t == table && strings.HasPrefix(l, ":"+chain+" ") {
			return true
		}
	}
	return false
}

// splitRule splits an iptables-save rule into arguments, honouring double quotes.
func splitRule(s string) []string {
	var out []string
	var cur strings.Builder
	inq, any := false, false
	for i := 0; i < len(s); i++ {
		ch := s[i]
		switch {
		case ch == '\\' && inq && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case ch == '"':
			inq, any = !inq, true
		case ch == ' ' && !inq:
			if cur.Len() > 0 || any {
				out = append(out, cur.String())
				cur.Reset()
				any = false
			}
		default:
			cur.WriteByte(ch)
		}
	}
	if cur.Len() > 0 || any {
		out = append(out, cur.String())
	}
	return out
}

// removeCgroups removes the kubelet's kubepods cgroups (empty once every container is gone).
func (c *Cluster) removeCgroups() error {
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
	if u, err := os.Stat("/sys/fs/cgroup/kubepods"); err == nil && u.IsDir() {
		roots = append(roots, "/sys/fs/cgroup/kubepods")
	}
	var errs []error
	for _, root := range roots {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}
