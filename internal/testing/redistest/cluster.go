package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterReadyTimeout bounds how long a new cluster may take to report cluster_state:ok everywhere.
const clusterReadyTimeout = 30 * time.Second

// Cluster is a Redis Cluster of master nodes started by a test. Nodes can be stopped, restarted
// (they keep their nodes.conf and so rejoin with their slots, without data) and paused individually.
type Cluster struct {
	// Nodes are the masters, in the order given to redis-cli --cluster create.
	Nodes []*Server
}

// ClusterOption changes how StartCluster configures the nodes.
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	nodeTimeout time.Duration
}

// WithNodeTimeout sets cluster-node-timeout (default 5s): how long a node may be unreachable
// before the others consider it failed.
func WithNodeTimeout(d time.Duration) ClusterOption {
	return func(c *clusterConfig) { c.nodeTimeout = d }
}

// StartCluster starts masters (at least 3) cluster-enabled redis-servers on free ports whose
// cluster bus ports (port+10000) are free too, joins them with
// `redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes`, and waits until every node
// reports cluster_state:ok, knows all nodes and sees all 16384 slots covered.
func StartCluster(t testing.TB, masters int, opts ...ClusterOption) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("StartCluster: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	cfg := clusterConfig{nodeTimeout: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	bin := ServerPath(t)
	cli := cliPath(t)
	args := []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(cfg.nodeTimeout.Milliseconds(), 10),
	}

	c := &Cluster{Nodes: make([]*Server, masters)}
	for i := range c.Nodes {
		c.Nodes[i] = newRedisServer(t, bin, args, true)
	}
	startAll(t, c.Nodes)

	ctx, cancel := context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	create := append([]string{"--cluster", "create"}, c.Addrs()...)
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(create, " "), err, out)
	}
	if err := c.waitReady(ctx); err != nil {
		t.Fatalf("cluster %v not ready after %v: %v\nredis-cli output:\n%s", c.Addrs(), clusterReadyTimeout, err, out)
	}
	logStarted(t, "cluster", bin, c.Nodes[0].Addr())
	return c
}

// waitReady polls CLUSTER INFO on every node until all agree the cluster is complete.
func (c *Cluster) waitReady(ctx context.Context) error {
	want := map[string]string{
		"cluster_state":          "ok",
		"cluster_slots_assigned": "16384",
		"cluster_slots_ok":       "16384",
		"cluster_known_nodes":    strconv.Itoa(len(c.Nodes)),
	}
	return poll(ctx, func() error {
		for _, n := range c.Nodes {
			if err := clusterInfoMatches(ctx, n, want); err != nil {
				return fmt.Errorf("node %s: %w", n.Addr(), err)
			}
		}
		return nil
	})
}

func clusterInfoMatches(ctx context.Context, n *Server, want map[string]string) error {
	client := redis.NewClient(n.Options())
	defer client.Close()
	info, err := client.ClusterInfo(ctx).Result()
	if err != nil {
		return fmt.Errorf("CLUSTER INFO: %w", err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			got[k] = v
		}
	}
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("%s is %q, want %q", k, got[k], v)
		}
	}
	return nil
}

// Addrs returns the "127.0.0.1:PORT" addresses of all nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Client returns a new go-redis cluster client seeded with all node addresses, with context
// deadlines honoured (ContextTimeoutEnabled) like a Server's Client; it is closed at t.Cleanup.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	t.Helper()
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	return client
}
