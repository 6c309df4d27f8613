package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// TestACLPerLease: with README.md's per-lease ACL, team A's user runs its own lease and can
// neither resign, delete, take nor subscribe to team B's, whose leader keeps its term; A's
// observer reads A's lease only and lists no key names. On 000558e the README's rule covered
// every lease of the prefix, and A's `elector resign --lease-name teamB` moved B's leader.
func TestACLPerLease(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	installFunctions(t, srv)
	for _, team := range []string{"teamA", "teamB"} {
		for user, rules := range map[string][]string{
			"elector-" + team:  readmeACL(t, "elector", team),
			"observer-" + team: readmeACL(t, "elector-observer", team),
		} {
			args := []any{"ACL", "SETUSER", user, "on", ">pw"}
			for _, r := range rules {
				args = append(args, r)
			}
			if err := admin.Do(ctx, args...).Err(); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
		}
	}
	dir := t.TempDir()
	env := []string{"REDIS_PASSWORD=pw"}
	a := startSidecar(t, srv.Addr(), "teamA", "a", dir, env, "--redis-username", "elector-teamA")
	b := startSidecar(t, srv.Addr(), "teamB", "b", dir, env, "--redis-username", "elector-teamB")
	waitFor(t, 10*time.Second, "a and b to lead their leases", func() bool { return a.ready() && b.ready() })
	bLeader, _ := b.leader(t)

	// As team A's user: the CLI's resign of B, and the commands a stolen credential would try.
	code, _, stderr := runElector(t, 30*time.Second, env, "resign", "--redis-addr", srv.Addr(),
		"--redis-username", "elector-teamA", "--lease-name", "teamB", "--timeout", "5s")
	if code == 0 || !strings.Contains(strings.ToUpper(stderr), "NOPERM") {
		t.Errorf("team A's resign of teamB: exit %d, stderr %q; want a NOPERM refusal", code, stderr)
	}
	asA := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "elector-teamA", Password: "pw", DisableIdentity: true})
	defer asA.Close()
	if err := asA.Del(ctx, "elector:{teamB}:lease").Err(); !noperm(err) {
		t.Errorf("team A's DEL of teamB's lease key: %v; want NOPERM", err)
	}
	lb, err := lease.New(asA, "teamB", lease.Options{Identity: "mallory"})
	if err != nil {
		t.Fatal(err)
	}
	if won, _, err := lb.Acquire(ctx, time.Minute); won || !noperm(err) {
		t.Errorf("team A's acquire of teamB: won %v, %v; want NOPERM", won, err)
	}
	sub := asA.Subscribe(ctx, "elector:{teamB}:events")
	if _, err := sub.Receive(ctx); !noperm(err) {
		t.Errorf("team A's SUBSCRIBE to teamB's events: %v; want NOPERM", err)
	}
	sub.Close()
	// A's observer: its own lease, not B's, and no key names through SCAN.
	obsEnv := []string{"REDIS_PASSWORD=pw"}
	obs := []string{"status", "--redis-addr", srv.Addr(), "--redis-username", "observer-teamA"}
	if code, out, stderr := runElector(t, 10*time.Second, obsEnv, append(obs, "--lease-name", "teamA")...); code != 0 || !strings.Contains(out, "a") {
		t.Errorf("team A's observer on teamA: exit %d, %q, %s", code, out, stderr)
	}
	if code, _, stderr := runElector(t, 10*time.Second, obsEnv, append(obs, "--lease-name", "teamB")...); code == 0 || !strings.Contains(strings.ToUpper(stderr), "NOPERM") {
		t.Errorf("team A's observer on teamB: exit %d, stderr %q; want NOPERM", code, stderr)
	}
	asObs := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "observer-teamA", Password: "pw", DisableIdentity: true})
	defer asObs.Close()
	if err := asObs.Scan(ctx, 0, "*", 100).Err(); !noperm(err) {
		t.Errorf("team A's observer SCAN: %v; want NOPERM (SCAN would list every key name)", err)
	}

	// B still leads with the same term, and nothing of A's own lease was refused.
	if now, _ := b.leader(t); !b.ready() || now.Token != bLeader.Token {
		t.Errorf("b after team A's attempts: leader %+v (ready %v), was %+v", now, b.ready(), bLeader)
	}
	if !a.ready() {
		t.Error("a no longer leads teamA")
	}
}

// noperm reports whether err is Redis's ACL refusal.
func noperm(err error) bool {
	return err != nil && strings.Contains(strings.ToUpper(err.Error()), "NOPERM")
}

// functionsRules returns README.md's per-lease rules of user for lease name, for a Redis with
// the function library loaded: +fcall instead of +evalsha +eval.
func functionsRules(t *testing.T, user, name string) []string {
	rules := slices.DeleteFunc(readmeACL(t, user, name), func(r string) bool { return r == "+evalsha" || r == "+eval" })
	if !slices.Contains(rules, "+fcall") {
		rules = append(rules, "+fcall")
	}
	return rules
}

// TestACLFunctionsInstalled: `elector install-functions` loads the library as the default user,
// and again without error; --print prints it for redis-cli -x FUNCTION LOAD. Then README's
// elector user with +fcall instead of +evalsha +eval runs sidecars in --redis-scripts
// functions and resigns, with nothing refused, and may not EVAL. A user without
// +function|load is told what to grant; an argument is a usage error.
func TestACLFunctionsInstalled(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	code, out, stderr := runElector(t, 30*time.Second, nil, "install-functions", "--redis-addr", srv.Addr())
	if code != 0 || !strings.Contains(out, " loaded") {
		t.Fatalf("install-functions: exit %d, %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = runElector(t, 30*time.Second, nil, "install-functions", "--redis-addr", srv.Addr())
	if code != 0 || !strings.Contains(out, "already loaded") {
		t.Errorf("install-functions again: exit %d, %q, stderr %q; want 0, already loaded", code, out, stderr)
	}
	code, text, stderr := runElector(t, 30*time.Second, nil, "install-functions", "--print")
	if code != 0 || !strings.HasPrefix(text, "#!lua name=elector_") {
		t.Fatalf("install-functions --print: exit %d, %.60q, stderr %q", code, text, stderr)
	}
	other := redistest.Start(t).Client(t)
	if name, err := other.FunctionLoad(ctx, text).Result(); err != nil || !strings.HasPrefix(text, "#!lua name="+name+"\n") {
		t.Errorf("FUNCTION LOAD of the printed library = %q, %v", name, err)
	}
	if code, _, stderr := runElector(t, 30*time.Second, nil, "install-functions", "now"); code != 2 {
		t.Errorf("install-functions now: exit %d, stderr %q; want the usage error 2", code, stderr)
	}

	const name = "fn"
	args := []any{"ACL", "SETUSER", "elector", "on", ">pw-elector"}
	for _, r := range functionsRules(t, "elector", name) {
		args = append(args, r)
	}
	if err := admin.Do(ctx, args...).Err(); err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	if err := admin.Do(ctx, "ACL", "SETUSER", "noload", "on", ">pw", "+@all", "-function|load").Err(); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = runElector(t, 30*time.Second, []string{"REDIS_PASSWORD=pw"}, "install-functions", "--redis-addr", srv.Addr(), "--redis-username", "noload")
	if code != 1 || !strings.Contains(stderr, "+function|load") {
		t.Errorf("install-functions without +function|load: exit %d, stderr %q; want 1 naming +function|load", code, stderr)
	}
	admin.Do(ctx, "ACL", "LOG", "RESET")

	env := []string{"REDIS_PASSWORD=pw-elector"}
	dir := t.TempDir()
	var cars []*sidecar
	for _, id := range []string{"f0", "f1"} {
		cars = append(cars, startSidecar(t, srv.Addr(), name, id, dir, env, "--redis-username", "elector", "--redis-scripts", "functions"))
	}
	old, tok := waitLeader(t, cars)
	code, out, stderr = runElector(t, 40*time.Second, env, "resign", "--redis-addr", srv.Addr(),
		"--redis-username", "elector", "--redis-scripts", "functions", "--lease-name", name, "-o", "json")
	var next resignJSON
	if code != 0 || json.Unmarshal([]byte(out), &next) != nil || next.Holder == old.id || next.Token <= tok {
		t.Fatalf("resign as the functions user: exit %d, %q; stderr:\n%s", code, out, stderr)
	}
	asUser := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "elector", Password: "pw-elector", DisableIdentity: true})
	defer asUser.Close()
	if err := asUser.Eval(ctx, "return 1", nil).Err(); !noperm(err) {
		t.Errorf("EVAL as the functions user: %v; want NOPERM", err)
	}
	if entries, err := admin.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(entries) != 1 {
		t.Errorf("ACL LOG = %v, %v; want the one refusal provoked (EVAL)", entries, err)
	}
}
