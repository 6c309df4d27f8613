package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinelReadyTimeout bounds how long the replicas may take to sync and the sentinels to discover
// the replicas and each other (sentinels announce themselves every 2s).
const sentinelReadyTimeout = 60 * time.Second

// Sentinel is a monitored Redis master with replicas and the redis-sentinel processes watching it.
type Sentinel struct {
	// Master is the master the sentinels were configured with. After a failover it may be a
	// replica or stopped; CurrentMaster tells which server leads now.
	Master *Server
	// Replicas were started with --replicaof Master.
	Replicas []*Server
	// Sentinels are the redis-sentinel processes.
	Sentinels []*Server
	// MasterName is the name the sentinels monitor the master under.
	MasterName string
	// SentinelPassword is the sentinels' requirepass (WithSentinelPassword); empty: none.
	SentinelPassword string
}

// SentinelOption changes the monitoring settings of StartSentinel.
type SentinelOption func(*sentinelConfig)

type sentinelConfig struct {
	quorum          int
	downAfter       time.Duration
	failoverTimeout time.Duration
	password        string
	replicaEnv      map[int][]string
	replicaArgs     map[int][]string
}

// WithReplicaArgs adds command-line arguments to replica i (0-based), for example
// "--replica-priority", "0" so that Sentinel never promotes it.
func WithReplicaArgs(i int, args ...string) SentinelOption {
	return func(c *sentinelConfig) {
		if c.replicaArgs == nil {
			c.replicaArgs = map[int][]string{}
		}
		c.replicaArgs[i] = append(c.replicaArgs[i], args...)
	}
}

// WithReplicaEnv adds env ("NAME=value" entries) to the environment of replica i (0-based), for
// example LD_PRELOAD and FAKETIME to run it with a clock that is ahead of the master's.
func WithReplicaEnv(i int, env ...string) SentinelOption {
	return func(c *sentinelConfig) {
		if c.replicaEnv == nil {
			c.replicaEnv = map[int][]string{}
		}
		c.replicaEnv[i] = append(c.replicaEnv[i], env...)
	}
}

// WithQuorum sets how many sentinels must agree that the master is down (default 2, or 1 with a
// single sentinel). A failover additionally needs the votes of a majority of the sentinels.
func WithQuorum(n int) SentinelOption {
	return func(c *sentinelConfig) { c.quorum = n }
}

// WithDownAfter sets down-after-milliseconds (default 1s): how long the master must not answer
// before a sentinel considers it down.
func WithDownAfter(d time.Duration) SentinelOption {
	return func(c *sentinelConfig) { c.downAfter = d }
}

// WithSentinelPassword makes the sentinels require password (requirepass, and sentinel-pass
// for their connections to each other). The data nodes stay without one.
func WithSentinelPassword(password string) SentinelOption {
	return func(c *sentinelConfig) { c.password = password }
}

// WithFailoverTimeout sets failover-timeout (default 5s).
func WithFailoverTimeout(d time.Duration) SentinelOption {
	return func(c *sentinelConfig) { c.failoverTimeout = d }
}

// StartSentinel starts a master, replicas replicas of it and sentinels sentinel processes that
// monitor it as masterName (quorum 2, down-after-milliseconds 1000, failover-timeout 5000 unless
// changed by opts), and waits until the replicas are in sync and every sentinel sees all replicas
// and all other sentinels. Sentinels run as the sentinel program of the server (see
// package serverbin: ELECTOR_REDIS_SENTINEL, redis-sentinel or valkey-sentinel), otherwise as the
// server with --sentinel; the test skips or fails like ServerPath when none is installed.
func StartSentinel(t testing.TB, masterName string, replicas, sentinels int, opts ...SentinelOption) *Sentinel {
	t.Helper()
	if replicas < 0 || sentinels < 1 {
		t.Fatalf("StartSentinel: need replicas >= 0 and sentinels >= 1, got %d and %d", replicas, sentinels)
	}
	cfg := sentinelConfig{quorum: min(2, sentinels), downAfter: time.Second, failoverTimeout: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.quorum < 1 || cfg.quorum > sentinels {
		t.Fatalf("StartSentinel: quorum %d must be between 1 and the number of sentinels (%d)", cfg.quorum, sentinels)
	}
	for i := range cfg.replicaEnv {
		if i < 0 || i >= replicas {
			t.Fatalf("StartSentinel: WithReplicaEnv(%d) names no replica (there are %d)", i, replicas)
		}
	}
	for i := range cfg.replicaArgs {
		if i < 0 || i >= replicas {
			t.Fatalf("StartSentinel: WithReplicaArgs(%d) names no replica (there are %d)", i, replicas)
		}
	}
	bin := ServerPath(t)
	sentinelBin, sentinelArgs := sentinelPath(t)

	s := &Sentinel{Master: startEnv(t, nil, nil), MasterName: masterName, SentinelPassword: cfg.password}
	masterPort := strconv.Itoa(s.Master.Port())
	for i := range replicas {
		r := newRedisServer(t, bin, append([]string{"--replicaof", "127.0.0.1", masterPort}, cfg.replicaArgs[i]...), false)
		r.env = cfg.replicaEnv[i]
		s.Replicas = append(s.Replicas, r)
	}
	startAll(t, s.Replicas)

	ctx, cancel := context.WithTimeout(context.Background(), sentinelReadyTimeout)
	defer cancel()
	if err := waitReplicasOnline(ctx, s.Master, replicas); err != nil {
		t.Fatalf("replicas of %s not in sync after %v: %v", s.Master.Addr(), sentinelReadyTimeout, err)
	}

	monitor := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]s %[3]d\n"+
		"sentinel down-after-milliseconds %[1]s %[4]d\n"+
		"sentinel failover-timeout %[1]s %[5]d\n"+
		"sentinel parallel-syncs %[1]s 1\n",
		masterName, masterPort, cfg.quorum, cfg.downAfter.Milliseconds(), cfg.failoverTimeout.Milliseconds())
	if cfg.password != "" {
		monitor += fmt.Sprintf("requirepass %[1]q\nsentinel sentinel-pass %[1]q\n", cfg.password)
	}
	for range sentinels {
		sn := newSentinelServer(t, sentinelBin, sentinelArgs, monitor)
		sn.password = cfg.password // for Options: the clients of this package authenticate
		s.Sentinels = append(s.Sentinels, sn)
	}
	startAll(t, s.Sentinels)

	if err := s.waitDiscovered(ctx, replicas); err != nil {
		t.Fatalf("sentinels %v not ready after %v: %v", s.SentinelAddrs(), sentinelReadyTimeout, err)
	}
	logStarted(t, "sentinel", bin, s.Master.Addr())
	return s
}

// newSentinelServer prepares a sentinel process with its own (writable, since Sentinel rewrites
// it) config file.
func newSentinelServer(t testing.TB, bin string, modeArgs []string, monitor string) *Server {
	t.Helper()
	s := newServer(t, "redis-sentinel", bin)
	conf := filepath.Join(s.dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(monitor), 0o644); err != nil {
		t.Fatalf("write %s: %v", conf, err)
	}
	s.args = func(port int) []string {
		args := append([]string{conf}, modeArgs...)
		return append(args,
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--dir", s.dir,
			"--daemonize", "no",
		)
	}
	return s
}

// startAll starts the prepared servers in parallel.
func startAll(t testing.TB, servers []*Server) {
	t.Helper()
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.startFreshErr()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("start %s: %v", servers[0].name, err)
	}
}

// waitReplicasOnline waits until master reports n connected replicas in state online.
func waitReplicasOnline(ctx context.Context, master *Server, n int) error {
	client := redis.NewClient(master.Options())
	defer client.Close()
	return poll(ctx, func() error {
		info, err := client.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("INFO replication: %w", err)
		}
		online := strings.Count(info, ",state=online,")
		if online != n {
			return fmt.Errorf("%d of %d replicas online:\n%s", online, n, info)
		}
		return nil
	})
}

// waitDiscovered waits until every sentinel sees the master, all replicas and all other sentinels.
func (s *Sentinel) waitDiscovered(ctx context.Context, replicas int) error {
	for _, sn := range s.Sentinels {
		client := redis.NewSentinelClient(sn.Options())
		err := poll(ctx, func() error {
			master, err := client.Master(ctx, s.MasterName).Result()
			if err != nil {
				return fmt.Errorf("sentinel %s: SENTINEL MASTER: %w", sn.Addr(), err)
			}
			if master["flags"] != "master" {
				return fmt.Errorf("sentinel %s: master flags %q", sn.Addr(), master["flags"])
			}
			reps, err := client.Replicas(ctx, s.MasterName).Result()
			if err != nil {
				return fmt.Errorf("sentinel %s: SENTINEL REPLICAS: %w", sn.Addr(), err)
			}
			healthy := 0
			for _, r := range reps {
				if r["flags"] == "slave" && r["master-link-status"] == "ok" {
					healthy++
				}
			}
			if healthy != replicas {
				return fmt.Errorf("sentinel %s sees %d of %d healthy replicas: %v", sn.Addr(), healthy, replicas, reps)
			}
			peers, err := client.Sentinels(ctx, s.MasterName).Result()
			if err != nil {
				return fmt.Errorf("sentinel %s: SENTINEL SENTINELS: %w", sn.Addr(), err)
			}
			if len(peers) != len(s.Sentinels)-1 {
				return fmt.Errorf("sentinel %s sees %d of %d other sentinels", sn.Addr(), len(peers), len(s.Sentinels)-1)
			}
			return nil
		})
		_ = client.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// poll calls check every 50ms until it succeeds, returning its last error when ctx ends.
func poll(ctx context.Context, check func() error) error {
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SentinelAddrs returns the "127.0.0.1:PORT" addresses of the sentinels.
func (s *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr()
	}
	return addrs
}

// Client returns a new go-redis failover client (redis.NewFailoverClient) for MasterName through
// the sentinels, with context deadlines honoured (ContextTimeoutEnabled) like a Server's Client;
// it is closed at t.Cleanup.
func (s *Sentinel) Client(t testing.TB) *redis.Client {
	t.Helper()
	client := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            s.MasterName,
		SentinelAddrs:         s.SentinelAddrs(),
		SentinelPassword:      s.SentinelPassword,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// CurrentMaster asks the sentinels, in order, for the address of the current master
// (SENTINEL get-master-addr-by-name) and returns the first answer. Stopped or unreachable
// sentinels are skipped; the error lists why each one failed.
func (s *Sentinel) CurrentMaster(ctx context.Context) (string, error) {
	var errs []error
	for _, sn := range s.Sentinels {
		if sn.PID() == 0 {
			continue
		}
		client := redis.NewSentinelClient(sn.Options())
		addr, err := client.GetMasterAddrByName(ctx, s.MasterName).Result()
		_ = client.Close()
		if err == nil && len(addr) == 2 {
			return net.JoinHostPort(addr[0], addr[1]), nil
		}
		if err == nil {
			err = fmt.Errorf("unexpected reply %q", addr)
		}
		errs = append(errs, fmt.Errorf("sentinel %s: %w", sn.Addr(), err))
	}
	if len(errs) == 0 {
		return "", fmt.Errorf("get master %q: no sentinel is running", s.MasterName)
	}
	return "", fmt.Errorf("get master %q: %w", s.MasterName, errors.Join(errs...))
}

// ServerAt returns the master or replica listening on addr, or nil. Use it with CurrentMaster to
// find the server that was promoted by a failover.
func (s *Sentinel) ServerAt(addr string) *Server {
	for _, srv := range append([]*Server{s.Master}, s.Replicas...) {
		if srv.Addr() == addr {
			return srv
		}
	}
	return nil
}
