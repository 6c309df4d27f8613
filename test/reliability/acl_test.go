package reliability

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/fence"
	"github.com/elector/elector/pkg/lease"
	_ "github.com/elector/elector/pkg/schedule" // its scripts are in the function library Install loads
)

// electorACL is everything an elector (packages lease and election, default key prefix) needs:
// the scripts (FCALL of the function library, which the elector tries first; EVALSHA, and EVAL
// when Redis answers NOSCRIPT, where the library is not loaded) and the commands they call (GET,
// SET, PEXPIRE, PTTL, DEL, TIME, PUBLISH: Redis checks those against the caller's ACL too), Get
// (MULTI GET PTTL EXEC), the events subscription (SUBSCRIBE, and PING, which go-redis sends on a
// subscription that has been idle for 3 seconds), on the keys and channel of the prefix.
// Without +fcall it works as well, but Redis refuses each client's first FCALL (an ACL LOG
// entry). docs/RELIABILITY.md quotes it; TestACLLineIsDocumented keeps the two equal.
const electorACL = "resetkeys resetchannels ~elector:* &elector:* -@all " +
	"+fcall +evalsha +eval +get +set +pexpire +pttl +del +time +publish +multi +exec +subscribe +ping"

// functionsACL is electorACL for a Redis where the function library is loaded (`elector
// install-functions`): FCALL and no script of the user's own. It cannot run EVAL, EVALSHA or
// SCRIPT, so it cannot run arbitrary Lua (a looping script would make every client of a shared
// Redis wait); the functions it may call are the library's, which only an administrator loads.
const functionsACL = "resetkeys resetchannels ~elector:* &elector:* -@all " +
	"+fcall +get +set +pexpire +pttl +del +time +publish +multi +exec +subscribe +ping"

// functionsGroupACL is functionsACL for election.Group: groupACL's additions but SCRIPT LOAD.
const functionsGroupACL = functionsACL + " &elector:{*}:events +psubscribe +zadd +zrem +zremrangebyscore +zrange"

// groupACL is what election.Group needs besides electorACL: its membership script (a sorted set
// under the prefix), one pattern subscription to the events of every lease (Redis matches a
// PSUBSCRIBE pattern literally against the user's channel patterns, so it is listed as is), and
// SCRIPT LOAD, with which leasekit.Batch reloads the scripts after NOSCRIPT.
const groupACL = electorACL + " &elector:{*}:events +psubscribe +zadd +zrem +zremrangebyscore +zrange +script|load"

// clusterACL is electorACL for Redis Cluster: go-redis's cluster client reads the slot map with
// CLUSTER SLOTS and the key positions of commands with COMMAND.
const clusterACL = electorACL + " +cluster|slots +command"

// observerACL is what `elector status`-like observers need: Get, Terms and events, with
// read-only access to the keys.
const observerACL = "resetkeys resetchannels %R~elector:* &elector:* -@all +get +pttl +multi +exec +subscribe +ping"

// setUser creates (or redefines) an ACL user with password "pw" and the given rules.
func setUser(t *testing.T, admin *redis.Client, name string, rules ...string) {
	t.Helper()
	args := []any{"ACL", "SETUSER", name, "reset", "on", ">pw"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := admin.Do(context.Background(), args...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s %v: %v", name, rules, err)
	}
}

// userClient returns a client built by internal/redisclient that authenticates as user.
func userClient(t *testing.T, srv *redistest.Server, user string, tm timing) redis.UniversalClient {
	t.Helper()
	return newClient(t, redisclient.Config{Mode: redisclient.ModeStandalone, Addrs: []string{srv.Addr()},
		Username: user, Password: "pw"}, tm)
}

// aclLog returns the ACL LOG entries, newest first.
func aclLog(t *testing.T, admin *redis.Client) []*redis.ACLLogEntry {
	t.Helper()
	log, err := admin.ACLLog(context.Background(), 100).Result()
	if err != nil {
		t.Fatalf("ACL LOG: %v", err)
	}
	return log
}

// denials returns the ACL LOG entries of user, newest first.
func denials(t *testing.T, admin *redis.Client, user string) []*redis.ACLLogEntry {
	t.Helper()
	var out []*redis.ACLLogEntry
	for _, e := range aclLog(t, admin) {
		if e.Username == user {
			out = append(out, e)
		}
	}
	return out
}

// onlyRefusals fails the test when ACL LOG holds an entry that expected does not allow: the
// documented users' entries must be absent (the log of an elector user is empty on every server
// of the matrix), only the refusals a test provokes on purpose may be there.
func onlyRefusals(t *testing.T, admin *redis.Client, expected func(*redis.ACLLogEntry) bool) {
	t.Helper()
	var bad []*redis.ACLLogEntry
	for _, e := range aclLog(t, admin) {
		if !expected(e) {
			bad = append(bad, e)
		}
	}
	if len(bad) > 0 {
		t.Errorf("ACL LOG holds refusals nobody provoked: %s (users %v)", describe(bad), users(bad))
	}
}

func users(es []*redis.ACLLogEntry) []string {
	var out []string
	for _, e := range es {
		if !slices.Contains(out, e.Username) {
			out = append(out, e.Username)
		}
	}
	return out
}

func describe(es []*redis.ACLLogEntry) string {
	var b []string
	for _, e := range es {
		b = append(b, fmt.Sprintf("%s %s %s (x%d)", e.Reason, e.Context, e.Object, e.Count))
	}
	return strings.Join(b, "; ")
}

// The user of electorACL, and nothing else, runs a full election: three electors, two graceful
// handovers, an observer, and an idle subscription that go-redis pings. Redis refuses nothing
// (ACL LOG stays empty for the user); the observer user may read but not acquire.
func TestACLMinimalElectorUser(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	setUser(t, admin, "elector", strings.Fields(electorACL)...)
	setUser(t, admin, "observer", strings.Fields(observerACL)...)
	tm := timing{lease: 2 * time.Second, renew: 1400 * time.Millisecond, retry: 200 * time.Millisecond}

	// An idle subscription: no events on this lease, so go-redis pings it after 3s.
	idle, err := leasekit.New(userClient(t, srv, "elector", tm), "idle", lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := idle.Subscribe(ctx)
	if err != nil {
		t.Fatalf("Subscribe as the elector user: %v", err)
	}
	defer sub.Close()
	idleSince := time.Now()

	led := &ledger{}
	var reps []*replica
	for i := range 3 {
		reps = append(reps, startElector(t, userClient(t, srv, "elector", tm), "job", fmt.Sprintf("pod-%d", i), tm, led))
	}
	leader := waitLeader(t, reps, time.Time{}, 30*time.Second)
	for range 2 {
		leader.stop()
		var others []*replica
		for _, r := range reps {
			if r != leader {
				others = append(others, r)
			}
		}
		next := waitLeader(t, others, time.Now(), 10*time.Second)
		leader.start()
		leader = next
	}
	if terms, _ := led.check(t, nil); terms < 3 {
		t.Errorf("%d terms, want at least 3 (two handovers)", terms)
	}

	observer, err := leasekit.New(userClient(t, srv, "observer", tm), "job", lease.Options{Identity: "observer"})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := observer.Get(ctx); err != nil || !st.Held || st.Record.Identity != leader.name {
		t.Errorf("Get as the observer = %+v, %v; want held by %s", st, err, leader.name)
	}
	if terms, err := observer.Terms(ctx); err != nil || terms < 3 {
		t.Errorf("Terms as the observer = %d, %v; want at least 3", terms, err)
	}
	osub, err := observer.Subscribe(ctx)
	if err != nil {
		t.Errorf("Subscribe as the observer: %v", err)
	} else {
		osub.Close()
	}
	if _, _, err := observer.Acquire(ctx, time.Second); err == nil || !strings.Contains(err.Error(), "evalsha") ||
		!strings.Contains(err.Error(), "elector install-functions") {
		t.Errorf("Acquire as the observer: err = %v, want a refusal naming evalsha, and what to load or grant", err)
	}

	time.Sleep(time.Until(idleSince.Add(4 * time.Second)))
	for _, r := range reps {
		r.stop()
	}
	if d := denials(t, admin, "elector"); len(d) > 0 {
		t.Errorf("Redis refused commands of the elector user: %s", describe(d))
	}
	// Nothing else either: the observer's acquire (FCALL, then EVALSHA) is the one refusal provoked.
	onlyRefusals(t, admin, func(e *redis.ACLLogEntry) bool {
		return e.Username == "observer" && (e.Object == "evalsha" || e.Object == "fcall")
	})
}

// The user of groupACL runs an election.Group: two replicas share six leases (starting after
// SCRIPT FLUSH, so that leasekit.Batch reloads the scripts), one stops, the other takes its leases
// over. Redis refuses nothing; without the literal channel pattern PSUBSCRIBE is refused.
func TestACLGroupUser(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	setUser(t, admin, "group", strings.Fields(groupACL)...)
	setUser(t, admin, "group-nopattern", without(groupACL, "&elector:{*}:events")...)
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	tm := timing{lease: 2 * time.Second, renew: 1400 * time.Millisecond, retry: 200 * time.Millisecond}
	names := []string{"shard-0", "shard-1", "shard-2", "shard-3", "shard-4", "shard-5"}
	led := &ledger{}
	start := func(user, who string) (*election.Group, func()) {
		return startACLGroup(t, ctx, srv, user, who, names, tm, led)
	}
	waitHeld := func(want int, gs ...*election.Group) { t.Helper(); waitGroupsHold(t, want, led, gs...) }
	a, stopA := start("group", "pod-a")
	b, _ := start("group", "pod-b")
	waitHeld(len(names), a, b)
	stopA()
	waitHeld(len(names), b)
	led.check(t, nil)
	if d := denials(t, admin, "group"); len(d) > 0 {
		t.Errorf("Redis refused commands of the group user: %s", describe(d))
	}
	onlyRefusals(t, admin, func(*redis.ACLLogEntry) bool { return false })

	c, stopC := start("group-nopattern", "pod-c")
	deadline := time.Now().Add(5 * time.Second)
	for !slices.ContainsFunc(denials(t, admin, "group-nopattern"), func(e *redis.ACLLogEntry) bool { return e.Reason == "channel" }) {
		if time.Now().After(deadline) {
			t.Fatalf("PSUBSCRIBE %q was not refused without the literal channel pattern; ACL LOG: %s",
				"elector:{*}:events", describe(denials(t, admin, "group-nopattern")))
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = c
	stopC()
}

// permissionCase is one permission of electorACL and the lease call that needs it.
type permissionCase struct {
	rule   string // the rule removed from electorACL
	object string // what ACL LOG names
	lua    bool   // refused inside a script: Redis 7.0 names the script line, not the command
	call   func(ctx context.Context, l, other *leasekit.Lease, admin *redis.Client) error
}

var permissionCases = []permissionCase{
	{"+evalsha", "evalsha", false, acquire},
	{"+eval", "eval", false, func(ctx context.Context, l, _ *leasekit.Lease, admin *redis.Client) error {
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			return err
		}
		return acquire(ctx, l, nil, admin)
	}},
	{"+get", "get", true, acquire},
	{"+set", "set", true, acquire},
	{"+time", "time", true, acquire},
	{"+publish", "publish", true, acquire},
	{"+pttl", "pttl", true, func(ctx context.Context, l, other *leasekit.Lease, admin *redis.Client) error {
		if err := acquire(ctx, other, nil, admin); err != nil {
			return fmt.Errorf("setup: %w", err)
		}
		_, _, err := l.Acquire(ctx, time.Minute) // held: the script reports the holder's PTTL
		return err
	}},
	{"+pexpire", "pexpire", true, func(ctx context.Context, l, other *leasekit.Lease, admin *redis.Client) error {
		term, err := acquireAsAdmin(ctx, l, admin)
		if err != nil {
			return err
		}
		_, err = l.Renew(ctx, term, time.Minute)
		return err
	}},
	{"+del", "del", true, func(ctx context.Context, l, other *leasekit.Lease, admin *redis.Client) error {
		term, err := acquireAsAdmin(ctx, l, admin)
		if err != nil {
			return err
		}
		_, err = l.Release(ctx, term)
		return err
	}},
	{"+multi", "multi", false, get},
	{"+exec", "exec", false, get},
	{"+subscribe", "subscribe", false, func(ctx context.Context, l, _ *leasekit.Lease, _ *redis.Client) error {
		sub, err := l.Subscribe(ctx)
		if err == nil {
			sub.Close()
		}
		return err
	}},
}

func acquire(ctx context.Context, l, _ *leasekit.Lease, _ *redis.Client) error {
	ok, st, err := l.Acquire(ctx, time.Minute)
	if err == nil && !ok {
		return fmt.Errorf("lease held by %v", st.Record)
	}
	return err
}

func get(ctx context.Context, l, _ *leasekit.Lease, _ *redis.Client) error {
	_, err := l.Get(ctx)
	return err
}

// acquireAsAdmin writes a term of l's instance with the admin client, as if l had acquired it
// before its permissions shrank, and returns the record.
func acquireAsAdmin(ctx context.Context, l *leasekit.Lease, admin *redis.Client) (lease.Record, error) {
	term := lease.Record{Token: time.Now().UnixMicro(), Instance: l.Instance(), Identity: l.Identity()}
	return term, admin.Set(ctx, l.Keys().Lease, term.String(), time.Minute).Err()
}

// A user lacking any one permission of electorACL gets an error from the lease call that needs
// it, naming the command: Redis names commands refused at the top level; for commands refused
// inside a script it names only the script line, and package lease adds the command found on
// that line. ACL LOG agrees. The key and channel patterns are needed as well, and PING is
// refused on an idle subscription when it is missing.
func TestACLEachPermissionIsNeeded(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	tm := timing{lease: 2 * time.Second, renew: 1400 * time.Millisecond, retry: 200 * time.Millisecond}
	setUser(t, admin, "full", strings.Fields(electorACL)...)

	// Without +ping an idle subscription is refused its health check (a denial every 3s).
	setUser(t, admin, "noping", without(electorACL, "+ping")...)
	np, err := leasekit.New(userClient(t, srv, "noping", tm), "idle", lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sub, err := np.Subscribe(ctx)
	if err != nil {
		t.Fatalf("Subscribe without +ping: %v", err)
	}
	defer sub.Close()
	idleSince := time.Now()

	for i, pc := range permissionCases {
		user := fmt.Sprintf("no-%s", strings.TrimPrefix(pc.rule, "+"))
		setUser(t, admin, user, without(electorACL, pc.rule)...)
		name := fmt.Sprintf("perm-%d", i)
		l, err := leasekit.New(userClient(t, srv, user, tm), name, lease.Options{Identity: "pod-a"})
		if err != nil {
			t.Fatal(err)
		}
		other, err := leasekit.New(userClient(t, srv, "full", tm), name, lease.Options{Identity: "pod-b"})
		if err != nil {
			t.Fatal(err)
		}
		err = pc.call(ctx, l, other, admin)
		if err == nil {
			t.Errorf("without %s: the call succeeded", pc.rule)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, fmt.Sprintf("%q", name)) {
			t.Errorf("without %s: error %q does not name the lease", pc.rule, msg)
		}
		if pc.lua {
			// Redis 7.0 names only the script line; package lease adds the command it runs.
			// Redis 7.2 and Valkey 8 name the command themselves ("... to run the 'get'
			// command script: SHA, on @user_script:17.").
			if !strings.Contains(msg, "@user_script:") ||
				(!strings.Contains(msg, "grant "+pc.rule) && !strings.Contains(msg, "'"+pc.object+"' command")) {
				t.Errorf("without %s: error %q names neither the command nor what to grant", pc.rule, msg)
			}
		} else if !strings.Contains(msg, "'"+pc.object+"'") {
			t.Errorf("without %s: error %q does not name the command %s", pc.rule, msg, pc.object)
		}
		if d := denials(t, admin, user); len(d) == 0 || d[0].Object != pc.object {
			t.Errorf("without %s: ACL LOG says %q, want a denial of %s", pc.rule, describe(d), pc.object)
		}
		t.Logf("without %-9s %s", pc.rule+":", msg)
	}

	// Keys and channel outside the patterns: another prefix.
	l, err := leasekit.New(userClient(t, srv, "full", tm), "job", lease.Options{Identity: "pod-a", Prefix: "other"})
	if err != nil {
		t.Fatal(err)
	}
	// Redis 7.0: "no permissions to access one of the keys/channels used as arguments";
	// Redis 7.2 and Valkey 8: "No permissions to access a key/channel".
	if _, _, err := l.Acquire(ctx, time.Second); err == nil || !permissionError(err, "key") {
		t.Errorf("Acquire under another prefix: err = %v, want a key permission error", err)
	} else {
		t.Logf("another key prefix: %v", err)
	}
	if _, err := l.Subscribe(ctx); err == nil || !permissionError(err, "channel") {
		t.Errorf("Subscribe under another prefix: err = %v, want a channel permission error", err)
	} else {
		t.Logf("another channel prefix: %v", err)
	}

	time.Sleep(time.Until(idleSince.Add(4 * time.Second)))
	if d := denials(t, admin, "noping"); !slices.ContainsFunc(d, func(e *redis.ACLLogEntry) bool { return e.Object == "ping" }) {
		t.Errorf("without +ping an idle subscription was not refused its PING; ACL LOG: %s", describe(d))
	}
	// The refusal is an answer: the connection works, and the subscription goes on.
	holder, err := leasekit.New(userClient(t, srv, "full", tm), "idle", lease.Options{Identity: "pod-a"})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _, err := holder.Acquire(ctx, time.Minute); err != nil || !ok {
		t.Fatalf("Acquire of the idle lease = %v, %v", ok, err)
	}
	select {
	case ev, open := <-sub.Events():
		if !open || ev.Kind != leasekit.Acquired {
			t.Errorf("without +ping, after a refused PING the subscription gave %v (open %v); want the acquired event", ev, open)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("without +ping, after a refused PING the subscription delivered nothing")
	}
	// The full user was refused only the keys and channel of the other prefix.
	onlyRefusals(t, admin, func(e *redis.ACLLogEntry) bool {
		return strings.HasPrefix(e.Username, "no") || (e.Username == "full" && (e.Reason == "key" || e.Reason == "channel"))
	})
}

// permissionError reports whether err is Redis's refusal of a key or channel ("key",
// "channel") outside the user's patterns, in the words of any server of the matrix.
func permissionError(err error, what string) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "noperm") && strings.Contains(msg, "no permissions to access") && strings.Contains(msg, what)
}

// without returns the rules of acl without rule.
func without(acl, rule string) []string {
	return slices.DeleteFunc(strings.Fields(acl), func(r string) bool { return r == rule })
}

// docs/RELIABILITY.md quotes electorACL and observerACL exactly.
func TestACLLineIsDocumented(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "RELIABILITY.md"))
	if errors.Is(err, os.ErrNotExist) {
		t.Fatal("docs/RELIABILITY.md is missing")
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"ACL SETUSER elector on >PASSWORD " + electorACL,
		"ACL SETUSER elector on >PASSWORD " + clusterACL,
		"ACL SETUSER elector-observer on >PASSWORD " + observerACL,
		"ACL SETUSER elector-group on >PASSWORD " + groupACL,
		"ACL SETUSER elector on >PASSWORD " + functionsACL,
		"ACL SETUSER elector-group on >PASSWORD " + functionsGroupACL,
	} {
		if !strings.Contains(string(doc), line) {
			t.Errorf("docs/RELIABILITY.md does not contain the tested line\n%s", line)
		}
	}
}

// The elector user in Cluster and Sentinel set-ups, created on every data node (ACL users are not
// replicated): through a Sentinel failover client electorACL is enough; the cluster client also
// reads the slot map (clusterACL). Without it the cluster client cannot route anything.
func TestACLElectorUserOtherModes(t *testing.T) {
	tm := timing{lease: 2 * time.Second, renew: 1400 * time.Millisecond, retry: 200 * time.Millisecond}
	run := func(t *testing.T, servers []*redistest.Server, cfg redisclient.Config, rules string) {
		for _, srv := range servers {
			setUser(t, srv.Client(t), "elector", strings.Fields(rules)...)
		}
		cfg.Username, cfg.Password = "elector", "pw"
		led := &ledger{}
		var reps []*replica
		for i := range 2 {
			reps = append(reps, startElector(t, newClient(t, cfg, tm), "job", fmt.Sprintf("pod-%d", i), tm, led))
		}
		leader := waitLeader(t, reps, time.Time{}, 30*time.Second)
		leader.stop()
		for _, r := range reps {
			if r != leader {
				waitLeader(t, []*replica{r}, time.Now(), 10*time.Second)
			}
		}
		for _, r := range reps {
			r.stop()
		}
		led.check(t, nil)
		for _, srv := range servers {
			if d := denials(t, srv.Client(t), "elector"); len(d) > 0 {
				t.Errorf("%s refused commands of the elector user: %s", srv.Addr(), describe(d))
			}
			// The cluster case's user without +cluster|slots is refused on purpose.
			onlyRefusals(t, srv.Client(t), func(e *redis.ACLLogEntry) bool { return e.Username == "noslots" })
		}
	}
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.StartCluster(t, 3)
		admin := cl.Nodes[0].Client(t)
		setUser(t, admin, "noslots", strings.Fields(electorACL)...)
		noslots := newClient(t, redisclient.Config{Mode: redisclient.ModeCluster, Addrs: cl.Addrs()[:1], Username: "noslots", Password: "pw"}, tm)
		if err := acquire(context.Background(), mustLease(t, noslots, "probe"), nil, nil); err == nil {
			t.Errorf("a cluster client without +cluster|slots acquired a lease")
		} else {
			t.Logf("cluster client without +cluster|slots: %v", err)
		}
		run(t, cl.Nodes, redisclient.Config{Mode: redisclient.ModeCluster, Addrs: cl.Addrs()}, clusterACL)
	})
	t.Run("sentinel", func(t *testing.T) {
		s := redistest.StartSentinel(t, "elector", 1, 3)
		run(t, append([]*redistest.Server{s.Master}, s.Replicas...),
			redisclient.Config{Mode: redisclient.ModeSentinel, Addrs: s.SentinelAddrs(), SentinelMaster: s.MasterName}, electorACL)
	})
}

func mustLease(t *testing.T, c redis.UniversalClient, name string) *leasekit.Lease {
	t.Helper()
	l, err := leasekit.New(c, name, lease.Options{Identity: "pod-a"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// With the function library loaded by the default user (lualib.Install: what `elector
// install-functions` runs), a user of functionsACL, who may run FCALL and no script of its
// own, runs everything elector does: an election with handovers (acquire, renew, release), a
// resignation, a done mark, a fenced write, a client in scripts mode "functions", and an
// election.Group (its membership script) with functionsGroupACL. Redis refuses it nothing
// (ACL LOG stays empty), and refuses it EVAL, EVALSHA and SCRIPT LOAD.
func TestACLFunctionsUser(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	if _, err := lualib.Install(ctx, admin); err != nil {
		t.Fatal(err)
	}
	setUser(t, admin, "elector", strings.Fields(functionsACL)...)
	setUser(t, admin, "group", strings.Fields(functionsGroupACL)...)
	tm := timing{lease: 2 * time.Second, renew: 1400 * time.Millisecond, retry: 200 * time.Millisecond}

	// The election: three electors, two handovers, then a resignation.
	led := &ledger{}
	var reps []*replica
	for i := range 3 {
		reps = append(reps, startElector(t, userClient(t, srv, "elector", tm), "job", fmt.Sprintf("pod-%d", i), tm, led))
	}
	leader := waitLeader(t, reps, time.Time{}, 30*time.Second)
	for range 2 {
		leader.stop()
		next := waitLeader(t, slices.DeleteFunc(slices.Clone(reps), func(r *replica) bool { return r == leader }), time.Now(), 10*time.Second)
		leader.start()
		leader = next
	}
	c := userClient(t, srv, "elector", tm)
	rl, err := leasekit.New(c, "job", lease.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rl.RequestResign(ctx, leasekit.ResignRequest{HoldOff: time.Second, Timeout: 5 * time.Second}); err != nil {
		t.Fatalf("RequestResign as the functions user: %v", err)
	}
	before := leader
	deadline := time.Now().Add(10 * time.Second)
	for leader == before {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not step down after the resign request", before.name)
		}
		if l := waitLeader(t, reps, time.Time{}, 10*time.Second); l != before {
			leader = l
		}
		time.Sleep(10 * time.Millisecond)
	}
	if terms, _ := led.check(t, nil); terms < 4 {
		t.Errorf("%d terms, want at least 4 (two handovers and a resignation)", terms)
	}

	// A client in mode functions (--redis-scripts functions): acquire, done mark, fenced
	// write, release.
	fc := userClient(t, srv, "elector", tm)
	lualib.SetDefaultMode(fc, lualib.Functions)
	l, err := leasekit.New(fc, "batch", lease.Options{Identity: "pod-x"})
	if err != nil {
		t.Fatal(err)
	}
	ok, st, err := l.Acquire(ctx, 5*time.Second)
	if err != nil || !ok {
		t.Fatalf("Acquire in mode functions = %v, %v", ok, err)
	}
	if ok, err := l.MarkDone(ctx, leasekit.Done{Term: st.Record, Finished: time.Now(), TTL: time.Minute}); err != nil || !ok {
		t.Errorf("MarkDone = %v, %v", ok, err)
	}
	f, err := fence.New(fc, "elector:{batch}:fence")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Set(ctx, st.Record.Token, "elector:{batch}:state", "done"); err != nil {
		t.Errorf("fenced write: %v", err)
	}
	if ok, err := l.Release(ctx, st.Record); err != nil || !ok {
		t.Errorf("Release in mode functions = %v, %v", ok, err)
	}

	// A Group: two replicas share four leases, one stops, the other takes them over.
	names := []string{"shard-0", "shard-1", "shard-2", "shard-3"}
	gled := &ledger{}
	startGroup := func(who string) (*election.Group, func()) {
		return startACLGroup(t, ctx, srv, "group", who, names, tm, gled)
	}
	waitHeld := func(want int, gs ...*election.Group) { t.Helper(); waitGroupsHold(t, want, gled, gs...) }
	a, stopA := startGroup("pod-a")
	b, _ := startGroup("pod-b")
	waitHeld(len(names), a, b)
	stopA()
	waitHeld(len(names), b)
	gled.check(t, nil)
	for _, r := range reps {
		r.stop()
	}

	// No Lua of its own.
	for _, cmd := range [][]any{
		{"EVAL", "return 1", "0"},
		{"EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"},
		{"SCRIPT", "LOAD", "return 1"},
	} {
		if err := c.Do(ctx, cmd...).Err(); err == nil || !redis.IsPermissionError(err) {
			t.Errorf("%v as the functions user: %v, want NOPERM", cmd[0], err)
		}
	}
	for _, user := range []string{"elector", "group"} {
		if d := denials(t, admin, user); len(d) > 0 && !(user == "elector" && onlyProbes(d)) {
			t.Errorf("Redis refused commands of the %s user: %s", user, describe(d))
		}
	}
}

// onlyProbes reports whether the denials are the EVAL, EVALSHA and SCRIPT that
// TestACLFunctionsUser sends on purpose.
func onlyProbes(d []*redis.ACLLogEntry) bool {
	for _, e := range d {
		if e.Object != "eval" && e.Object != "evalsha" && e.Object != "script|load" {
			return false
		}
	}
	return true
}

// startACLGroup runs a Group of names as identity who, connected as the ACL user user, whose
// callbacks record each term in led until it ends; the returned func stops it (also at the
// test's cleanup).
func startACLGroup(t *testing.T, ctx context.Context, srv *redistest.Server, user, who string, names []string, tm timing, led *ledger) (*election.Group, func()) {
	t.Helper()
	g, err := election.NewGroup(election.GroupConfig{
		Client: userClient(t, srv, user, tm), Group: "shards", Identity: who, Leases: names,
		LeaseDuration: tm.lease, RenewDeadline: tm.renew, RetryPeriod: tm.retry,
		Callbacks: election.GroupCallbacks{
			OnStartedLeading: func(ctx context.Context, name string) {
				end := led.begin(name, who, election.TokenFrom(ctx), time.Now())
				<-ctx.Done()
				end(time.Now())
			},
			OnStoppedLeading: func(string) {},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = g.Run(gctx) }()
	stop := func() { cancel(); <-done }
	t.Cleanup(stop)
	return g, stop
}

// waitGroupsHold waits up to 20 s until the groups gs hold want leases together.
func waitGroupsHold(t *testing.T, want int, led *ledger, gs ...*election.Group) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		n := 0
		for _, g := range gs {
			n += len(g.Held())
		}
		if n == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("groups hold %d leases, want %d; terms:\n%s", n, want, led)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
