package redisclient

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest"
)

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newClient builds a client from command-line style args plus the
// REDIS_PASSWORD value env, the way the elector command does.
func newClient(t *testing.T, env string, args ...string) (redis.UniversalClient, error) {
	t.Helper()
	return newClientEnv(t, map[string]string{PasswordEnv: env}, args...)
}

// newClientEnv is newClient with any environment variables.
func newClientEnv(t *testing.T, env map[string]string, args ...string) (redis.UniversalClient, error) {
	t.Helper()
	c := parse(t, args...)
	if err := c.LoadPassword(func(k string) string { return env[k] }); err != nil {
		return nil, err
	}
	c.DialTimeout, c.ReadTimeout, c.WriteTimeout = 5*time.Second, 5*time.Second, 5*time.Second
	client, err := New(c)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = client.Close() })
	return client, nil
}

func TestStandaloneRequirePass(t *testing.T) {
	const pw = "pa55-word"
	srv := redistest.Start(t, "--requirepass", pw)
	ctx := testCtx(t)

	fromEnv, err := newClient(t, pw, "--redis-addr="+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fromEnv.(*redis.Client); !ok {
		t.Errorf("standalone client is a %T, want *redis.Client", fromEnv)
	}
	if err := fromEnv.Set(ctx, "k", "from-env", 0).Err(); err != nil {
		t.Fatalf("SET with the password from %s: %v", PasswordEnv, err)
	}

	pwFile := writeFile(t, "pw", pw+"\n")
	fromFile, err := newClient(t, "", "--redis-addr="+srv.Addr(), "--redis-password-file="+pwFile)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := fromFile.Get(ctx, "k").Result(); err != nil || got != "from-env" {
		t.Fatalf("GET with the password from the file = %q, %v", got, err)
	}

	wrong, err := newClient(t, "not-"+pw, "--redis-addr="+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	err = wrong.Ping(ctx).Err()
	if err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Fatalf("PING with a wrong password = %v, want WRONGPASS", err)
	}
	if strings.Contains(err.Error(), pw) {
		t.Errorf("error %q contains the password", err)
	}

	none, err := newClient(t, "", "--redis-addr="+srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := none.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without a password = %v, want NOAUTH", err)
	}
}

func TestStandaloneACLUserAndDB(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testCtx(t)
	admin := srv.Client(t)
	// alice may only touch keys under elector:, in any database.
	if err := admin.Do(ctx, "ACL", "SETUSER", "alice", "on", ">alice-pw", "~elector:*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}

	alice, err := newClient(t, "alice-pw", "--redis-addr="+srv.Addr(), "--redis-username=alice", "--redis-db=3")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := alice.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || got != "alice" {
		t.Fatalf("ACL WHOAMI = %q, %v; want alice", got, err)
	}
	if err := alice.Set(ctx, "elector:k", "v", 0).Err(); err != nil {
		t.Fatalf("SET as alice: %v", err)
	}
	if err := alice.Set(ctx, "other", "v", 0).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("SET outside alice's key pattern = %v, want NOPERM", err)
	}
	db3 := redis.NewClient(&redis.Options{Addr: srv.Addr(), DB: 3})
	defer db3.Close()
	if got, err := db3.Get(ctx, "elector:k").Result(); err != nil || got != "v" {
		t.Errorf("key in database 3 = %q, %v; --redis-db=3 not applied", got, err)
	}
	if n, err := admin.Exists(ctx, "elector:k").Result(); err != nil || n != 0 {
		t.Errorf("key found in database 0 (%d, %v)", n, err)
	}

	wrongUser, err := newClient(t, "alice-pw", "--redis-addr="+srv.Addr(), "--redis-username=bob")
	if err != nil {
		t.Fatal(err)
	}
	if err := wrongUser.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("PING as an unknown user = %v, want WRONGPASS", err)
	}
}

func TestClientName(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testCtx(t)
	c := parse(t, "--redis-addr="+srv.Addr())
	c.ClientName = "elector-test"
	client, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if got, err := client.Do(ctx, "CLIENT", "GETNAME").Text(); err != nil || got != "elector-test" {
		t.Errorf("CLIENT GETNAME = %q, %v", got, err)
	}
}

// The client sends no CLIENT SETINFO (go-redis does on connect unless DisableIdentity): a user
// with only +ping gets nothing refused, on Redis 7.2 and Valkey too, where the subcommand exists
// and the ACL refuses it (Redis 7.0 answers "unknown subcommand", which ACL LOG does not record).
// What is lost shows in CLIENT LIST: lib-name and lib-ver stay empty.
func TestNoClientSetinfo(t *testing.T) {
	srv := redistest.Start(t)
	ctx := testCtx(t)
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "pinger", "on", ">pw", "-@all", "+ping").Err(); err != nil {
		t.Fatal(err)
	}
	client, err := newClient(t, "pw", "--redis-addr="+srv.Addr(), "--redis-username=pinger")
	if err != nil {
		t.Fatal(err)
	}
	c := parse(t, "--redis-addr="+srv.Addr())
	c.ClientName = "elector-setinfo"
	named, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	defer named.Close()
	for _, cl := range []redis.UniversalClient{client, named} {
		if err := cl.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING: %v", err)
		}
	}
	log, err := admin.ACLLog(ctx, 100).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range log {
		t.Errorf("ACL LOG: user %s refused %s %s (%s)", e.Username, e.Context, e.Object, e.Reason)
	}
	list, err := admin.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(list), "\n") {
		if !strings.Contains(line, " name=elector-setinfo ") {
			continue
		}
		if strings.Contains(line, "lib-name=go-redis") {
			t.Errorf("CLIENT LIST shows a CLIENT SETINFO of the client: %s", line)
		}
		return
	}
	t.Errorf("no connection named elector-setinfo in CLIENT LIST:\n%s", list)
}

func TestCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	ctx := testCtx(t)
	client, err := newClient(t, "", "--redis-mode=cluster", "--redis-addr="+strings.Join(cluster.Addrs()[:2], ","))
	if err != nil {
		t.Fatal(err)
	}
	cc, ok := client.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("cluster client is a %T, want *redis.ClusterClient", client)
	}
	// Keys spread over all masters, including the one not given as a seed.
	for i := range 50 {
		if err := client.Set(ctx, fmt.Sprintf("key-%d", i), i, 0).Err(); err != nil {
			t.Fatalf("SET key-%d: %v", i, err)
		}
	}
	var masters atomic.Int32 // ForEachMaster calls fn concurrently
	err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		n, err := node.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("master %s holds no key", node.Options().Addr)
		}
		masters.Add(1)
		return nil
	})
	if err != nil || masters.Load() != 3 {
		t.Fatalf("keys over masters: %d masters, %v", masters.Load(), err)
	}
	// All keys of one lease share a hash tag and therefore a slot.
	if err := client.Eval(ctx, "redis.call('SET', KEYS[1], 'a'); return redis.call('SET', KEYS[2], 'b')",
		[]string{"elector:{job}:lease", "elector:{job}:token"}).Err(); err != nil {
		t.Fatalf("script over two keys with one hash tag: %v", err)
	}
}

func TestSentinel(t *testing.T) {
	sentinel := redistest.StartSentinel(t, "mymaster", 1, 3)
	ctx := testCtx(t)

	if _, err := newClient(t, "", "--redis-mode=sentinel", "--redis-addr="+strings.Join(sentinel.SentinelAddrs(), ",")); err == nil {
		t.Fatal("sentinel mode without --sentinel-master was accepted")
	}
	client, err := newClient(t, "", "--redis-mode=sentinel", "--sentinel-master=mymaster", "--redis-db=1",
		"--redis-addr="+strings.Join(sentinel.SentinelAddrs(), ","))
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Set(ctx, "written-through-sentinel", "v", 0).Err(); err != nil {
		t.Fatalf("SET through sentinel (writes need the master): %v", err)
	}
	master, err := sentinel.CurrentMaster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := client.Do(ctx, "ROLE").Slice(); err != nil || len(got) == 0 || got[0] != "master" {
		t.Errorf("ROLE through the sentinel client = %v, %v; want master", got, err)
	}
	direct := redis.NewClient(&redis.Options{Addr: master, DB: 1})
	defer direct.Close()
	if got, err := direct.Get(ctx, "written-through-sentinel").Result(); err != nil || got != "v" {
		t.Errorf("key on master %s database 1 = %q, %v", master, got, err)
	}
}

// Sentinels with a password of their own (the data nodes have none here): the client finds
// the master with the password from REDIS_SENTINEL_PASSWORD or --sentinel-password-file, and
// without it fails with Redis's NOAUTH.
func TestSentinelPassword(t *testing.T) {
	const pw = "sentinel-pa55"
	sentinel := redistest.StartSentinel(t, "mymaster", 0, 1, redistest.WithSentinelPassword(pw))
	ctx := testCtx(t)
	args := []string{"--redis-mode=sentinel", "--sentinel-master=mymaster", "--redis-addr=" + strings.Join(sentinel.SentinelAddrs(), ",")}

	fromEnv, err := newClientEnv(t, map[string]string{SentinelPasswordEnv: pw}, args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := fromEnv.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET through sentinels with the password from %s: %v", SentinelPasswordEnv, err)
	}
	fromFile, err := newClientEnv(t, nil, append(args, "--sentinel-password-file="+writeFile(t, "spw", pw+"\n"))...)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := fromFile.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET through sentinels with --sentinel-password-file = %q, %v", got, err)
	}
	none, err := newClientEnv(t, nil, args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := none.Ping(ctx).Err(); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
		t.Fatalf("PING without the sentinels' password = %v, want NOAUTH", err)
	}
}

func TestUnreachable(t *testing.T) {
	// A port nothing listens on: the error surfaces on first use, not in New.
	srv := redistest.Start(t)
	addr := srv.Addr()
	srv.Stop()
	c := parse(t, "--redis-addr="+addr)
	c.DialTimeout = time.Second
	c.MaxRetries = -1
	client, err := New(c)
	if err != nil {
		t.Fatalf("New does not dial, but failed: %v", err)
	}
	defer client.Close()
	if err := client.Ping(testCtx(t)).Err(); err == nil {
		t.Error("PING of a stopped server succeeded")
	}
}
