package lualib_test

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/internal/testing/redistest"
)

// scriptCase is one call of a script: the state before (setup), the keys and arguments, in a
// key space named by the hash tag p ("{e}" for EVAL, "{f}" for FCALL).
type scriptCase struct {
	name   string
	script string
	setup  func(ctx context.Context, c *redis.Client, p string)
	keys   []string // with P for the hash tag
	args   []string // with P for the hash tag
}

const (
	owner = "inst1:pod-a"
	rec   = "v1:9000000000000001:inst1:pod-a"
	other = "v1:77:inst2:pod-b"
	high  = "9000000000000000" // a token key this high makes acquire's token deterministic
)

func set(pairs ...string) func(context.Context, *redis.Client, string) {
	return func(ctx context.Context, c *redis.Client, p string) {
		for i := 0; i+1 < len(pairs); i += 2 {
			c.Set(ctx, strings.ReplaceAll(pairs[i], "P", p), strings.ReplaceAll(pairs[i+1], "P", p), 0)
		}
	}
}

var (
	acquireKeys  = []string{"P:lease", "P:token", "P:terms"}
	acquire4Keys = []string{"P:lease", "P:token", "P:terms", "P:resign"}
	acquireArgs  = []string{owner, "5000", "P:events"}
)

var scriptCases = []scriptCase{
	{"acquire free", "acquire", set("P:token", high), acquireKeys, acquireArgs},
	{"acquire free, no terms key", "acquire", set("P:token", high), acquireKeys[:2], acquireArgs},
	{"acquire held by the caller", "acquire", set("P:lease", rec), acquireKeys, acquireArgs},
	{"acquire held by another", "acquire", set("P:lease", other), acquireKeys, acquireArgs},
	{"acquire, token not an integer", "acquire", set("P:token", "x"), acquireKeys, acquireArgs},
	{"acquire, token range exhausted", "acquire", set("P:token", "9007199254740991"), acquireKeys, acquireArgs},
	{"acquire, lease key of another type", "acquire", func(ctx context.Context, c *redis.Client, p string) {
		c.RPush(ctx, p+":lease", "x")
	}, acquireKeys, acquireArgs},
	{"acquire reserved for another", "acquire", set("P:token", high, "P:resign", "v1\nreserved\n3000\n"+other+"\npod-c"), acquire4Keys, acquireArgs},
	{"acquire reserved for the caller", "acquire", set("P:token", high, "P:resign", "v1\nreserved\n3000\n"+other+"\npod-a"), acquire4Keys, acquireArgs},
	{"acquire reserved, the resigned identity", "acquire", set("P:token", high, "P:resign", "v1\nreserved\n3000\nv1:5:i:pod-a\n"), acquire4Keys, acquireArgs},
	{"renew", "renew", set("P:lease", rec), []string{"P:lease"}, []string{rec, "6000"}},
	{"renew, announced", "renew", set("P:lease", rec), []string{"P:lease"}, []string{rec, "6000", "P:events"}},
	{"renew, another term", "renew", set("P:lease", other), []string{"P:lease"}, []string{rec, "6000"}},
	{"renew, gone", "renew", nil, []string{"P:lease"}, []string{rec, "6000"}},
	{"renew, asked to resign", "renew", set("P:lease", rec, "P:resign", "v1\nrequest\n3000\n"+rec+"\n"), []string{"P:lease", "P:resign"}, []string{rec, "6000", "P:events"}},
	{"release", "release", set("P:lease", rec), []string{"P:lease"}, []string{rec, "P:events"}},
	{"release, another term", "release", set("P:lease", other), []string{"P:lease"}, []string{rec, "P:events"}},
	{"release into a reservation", "release", set("P:lease", rec, "P:resign", "v1\nrequest\n3000\n"+rec+"\npod-b"), []string{"P:lease", "P:resign"}, []string{rec, "P:events"}},
	{"resign, nobody holds", "resign", nil, []string{"P:lease", "P:resign"}, []string{"3000", "", "10000", "P:events"}},
	{"resign", "resign", set("P:lease", rec), []string{"P:lease", "P:resign"}, []string{"3000", "pod-b", "10000", "P:events"}},
	{"resign, another term", "resign", set("P:lease", other), []string{"P:lease", "P:resign"}, []string{"3000", "", "10000", "P:events", rec}},
	{"resign to the holder", "resign", set("P:lease", rec), []string{"P:lease", "P:resign"}, []string{"3000", "pod-a", "10000", "P:events"}},
	{"resign, not a record", "resign", set("P:lease", "junk"), []string{"P:lease", "P:resign"}, []string{"3000", "", "10000", "P:events"}},
	{"done", "done", set("P:lease", rec), []string{"P:lease", "P:done"}, []string{rec, "1700000000000", "0", "60000"}},
	{"done, another term", "done", set("P:lease", other), []string{"P:lease", "P:done"}, []string{rec, "1700000000000", "0", "60000"}},
	{"fence, first write", "fence", nil, []string{"P:fence", "P:state"}, []string{"10", "SET", "P:state", "v"}},
	{"fence, newer token", "fence", set("P:fence", "9"), []string{"P:fence", "P:state"}, []string{"10", "RPUSH", "P:state", "a", "b"}},
	{"fence, stale token", "fence", set("P:fence", "11"), []string{"P:fence", "P:state"}, []string{"10", "SET", "P:state", "v"}},
	{"fence, token not an integer", "fence", nil, []string{"P:fence", "P:state"}, []string{"x", "SET", "P:state", "v"}},
	{"fence, fence key not an integer", "fence", set("P:fence", "y"), []string{"P:fence", "P:state"}, []string{"10", "SET", "P:state", "v"}},
	{"renew_many: own, another term, gone, another type, own", "renew_many", func(ctx context.Context, c *redis.Client, p string) {
		set("P:a", rec, "P:b", other, "P:e", rec)(ctx, c, p)
		c.RPush(ctx, p+":d", "x")
	}, []string{"P:a", "P:b", "P:c", "P:d", "P:e"}, []string{"6000", rec, rec, rec, rec, rec}},
	{"renew_many, a record short", "renew_many", set("P:a", rec), []string{"P:a", "P:b"}, []string{"6000", rec}},
	{"members, join", "members", nil, []string{"P:members"}, []string{owner, "5000"}},
	{"members, leave", "members", func(ctx context.Context, c *redis.Client, p string) {
		c.ZAdd(ctx, p+":members", redis.Z{Score: 1e15, Member: owner}, redis.Z{Score: 1e15, Member: "i:b"})
	}, []string{"P:members"}, []string{owner, "5000", "leave"}},
}

// scriptRef strips what names the script in an error: its SHA1 or function, and the line.
var scriptRef = regexp.MustCompile(`script: \S+, on @user_(script|function):\d+\.?`)

// TestFunctionsReplyAsScripts: each script's function, loaded with Install, gives the reply,
// leaves the keys and publishes the messages of its EVAL form, for the same inputs, on one
// server.
func TestFunctionsReplyAsScripts(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx := context.Background()
	if _, err := lualib.Install(ctx, c); err != nil {
		t.Fatal(err)
	}
	sub := c.PSubscribe(ctx, "*")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	run := func(sc scriptCase, p string, fcall bool) (reply any, state map[string]string, published []string) {
		if sc.setup != nil {
			sc.setup(ctx, c, p)
		}
		s := lualib.Registered(sc.script)
		first := []any{"eval", s.Source()}
		if fcall {
			first = []any{"fcall", lualib.FunctionName(sc.script)}
		}
		args := append(first, len(sc.keys))
		for _, k := range sc.keys {
			args = append(args, strings.ReplaceAll(k, "P", p))
		}
		for _, a := range sc.args {
			args = append(args, strings.ReplaceAll(a, "P", p))
		}
		v, err := c.Do(ctx, args...).Result()
		if err != nil {
			reply = "error: " + scriptRef.ReplaceAllString(err.Error(), "script: X")
		} else {
			reply = v
		}
		state = dump(ctx, t, c, p)
		for {
			msg, err := sub.ReceiveTimeout(ctx, 50*time.Millisecond)
			if err != nil {
				break
			}
			if m, ok := msg.(*redis.Message); ok {
				published = append(published, m.Channel+" "+m.Payload)
			}
		}
		return normalize(reply, p), state, normalizeAll(published, p)
	}
	for i, sc := range scriptCases {
		pe, pf := fmt.Sprintf("{e%d}", i), fmt.Sprintf("{f%d}", i)
		er, es, ep := run(sc, pe, false)
		fr, fs, fp := run(sc, pf, true)
		if !reflect.DeepEqual(er, fr) {
			t.Errorf("%s: FCALL replied %#v, EVAL %#v", sc.name, fr, er)
		}
		if !reflect.DeepEqual(es, fs) {
			t.Errorf("%s: FCALL left %v, EVAL %v", sc.name, fs, es)
		}
		if !slices.Equal(ep, fp) {
			t.Errorf("%s: FCALL published %q, EVAL %q", sc.name, fp, ep)
		}
		t.Logf("%s: %v %v %q", sc.name, er, es, ep)
	}
}

// dump returns every key of the hash tag p (as P): type, value (without sorted set scores,
// which are server times) and whether it expires.
func dump(ctx context.Context, t *testing.T, c *redis.Client, p string) map[string]string {
	t.Helper()
	keys, err := c.Keys(ctx, strings.NewReplacer("{", "\\{", "}", "\\}").Replace(p)+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		var v string
		switch typ := c.Type(ctx, k).Val(); typ {
		case "string":
			v = c.Get(ctx, k).Val()
		case "list":
			v = fmt.Sprint(c.LRange(ctx, k, 0, -1).Val())
		case "zset":
			v = fmt.Sprint(c.ZRange(ctx, k, 0, -1).Val())
		default:
			v = typ
		}
		if c.PTTL(ctx, k).Val() > 0 {
			v += " (expires)"
		}
		out[strings.ReplaceAll(k, p, "P")] = strings.ReplaceAll(v, p, "P")
	}
	return out
}

func normalize(v any, p string) any {
	switch v := v.(type) {
	case string:
		return strings.ReplaceAll(v, p, "P")
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = normalize(e, p)
		}
		return out
	}
	return v
}

func normalizeAll(ss []string, p string) []string {
	for i, s := range ss {
		ss[i] = strings.ReplaceAll(s, p, "P")
	}
	return ss
}

// commands records the script commands a client sends.
type commands struct {
	mu    sync.Mutex
	names []string
}

func (r *commands) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "fcall" || n == "evalsha" || n == "eval" {
			r.mu.Lock()
			r.names = append(r.names, n)
			r.mu.Unlock()
		}
		return next(ctx, cmd)
	}
}
func (r *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// take returns the commands sent since the last take.
func (r *commands) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.names
	r.names = nil
	return out
}

func recorded(t *testing.T, srv *redistest.Server, user string) (*redis.Client, *commands) {
	t.Helper()
	opts := srv.Options()
	if user != "" {
		opts.Username, opts.Password = user, "pw"
		opts.DisableIdentity = true
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	rec := &commands{}
	c.AddHook(rec)
	return c, rec
}

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

// done runs the done script through c in mode (one key space per call) and returns its reply.
func done(ctx context.Context, c *redis.Client, mode lualib.Mode) (int64, error) {
	s := lualib.Registered("done")
	keys := []any{"{d}:lease", "{d}:done"}
	return s.Run(ctx, lualib.For(c), c, mode, keys, "v1:1:i:a", "1", "0", "1000").Int64()
}

// TestAutoFallsBackToScripts: without the library, Auto sends FCALL once, then EVALSHA (and
// EVAL on NOSCRIPT) and keeps to EVALSHA for the client; once the library is loaded and the
// memory gone, FCALL. A user refused FCALL gets EVALSHA; a user refused EVALSHA, with the
// library loaded, FCALL; refused both, an error that says what to do. Functions fails without
// the library, saying to install it; Eval never sends FCALL.
func TestAutoFallsBackToScripts(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()

	c, rec := recorded(t, srv, "")
	lualib.ForgetMissing(lualib.For(c)) // what other tests taught the process
	if _, err := done(ctx, c, lualib.Auto); err != nil {
		t.Fatalf("Auto without the library: %v", err)
	}
	if got := rec.take(); !slices.Equal(got, []string{"fcall", "evalsha", "eval"}) {
		t.Errorf("first Auto call without the library sent %v, want fcall, evalsha, eval", got)
	}
	if _, err := done(ctx, c, ""); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); !slices.Equal(got, []string{"evalsha"}) {
		t.Errorf("second Auto call sent %v, want evalsha alone (the client remembers)", got)
	}
	_, err := done(ctx, c, lualib.Functions)
	if err == nil || !strings.Contains(lualib.Registered("done").Explain(err).Error(), "elector install-functions") {
		t.Errorf("Functions without the library: %v; want an error saying to run elector install-functions", lualib.Registered("done").Explain(err))
	}
	rec.take()

	if _, err := lualib.Install(ctx, admin); err != nil {
		t.Fatal(err)
	}
	if _, err := done(ctx, c, ""); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); !slices.Equal(got, []string{"evalsha"}) {
		t.Errorf("Auto within RecheckAfter of the miss sent %v, want evalsha", got)
	}
	lualib.ForgetMissing(lualib.For(c))
	for range 2 {
		if _, err := done(ctx, c, ""); err != nil {
			t.Fatal(err)
		}
	}
	if got := rec.take(); !slices.Equal(got, []string{"fcall", "fcall"}) {
		t.Errorf("Auto with the library sent %v, want fcall, fcall", got)
	}
	if _, err := done(ctx, c, lualib.Eval); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); !slices.Equal(got, []string{"evalsha"}) {
		t.Errorf("Eval sent %v, want evalsha", got)
	}

	// The ACL: today's user (scripts, no FCALL), a functions user, and one with neither.
	base := []string{"resetkeys", "resetchannels", "~{d}:*", "-@all", "+get", "+set"}
	setUser(t, admin, "scripts", append(base, "+evalsha", "+eval")...)
	setUser(t, admin, "functions", append(base, "+fcall")...)
	setUser(t, admin, "neither", base...)
	sc, srec := recorded(t, srv, "scripts")
	if _, err := done(ctx, sc, ""); err != nil {
		t.Errorf("Auto as a user refused FCALL: %v", err)
	}
	if _, err := done(ctx, sc, ""); err != nil {
		t.Fatal(err)
	}
	if got := srec.take(); !slices.Equal(got, []string{"fcall", "evalsha", "evalsha"}) {
		t.Errorf("Auto as a user refused FCALL sent %v, want fcall once, then evalsha", got)
	}
	fc, frec := recorded(t, srv, "functions")
	lualib.ForgetMissing(lualib.For(fc))
	if _, err := done(ctx, fc, ""); err != nil {
		t.Errorf("Auto as a functions user: %v", err)
	}
	if got := frec.take(); !slices.Equal(got, []string{"fcall"}) {
		t.Errorf("Auto as a functions user sent %v, want fcall", got)
	}
	if _, err := done(ctx, fc, lualib.Eval); err == nil {
		t.Error("Eval as a user refused EVALSHA succeeded")
	}
	nc, _ := recorded(t, srv, "neither")
	_, err = done(ctx, nc, "")
	msg := fmt.Sprint(lualib.Registered("done").Explain(err))
	if err == nil || !strings.Contains(msg, "elector install-functions") || !strings.Contains(msg, "+evalsha +eval") {
		t.Errorf("Auto as a user refused FCALL and EVALSHA: %s; want the two ways out", msg)
	}
	t.Logf("refused both: %s", msg)
}

// TestAutoUsesFunctionsAfterEvalRefused: a new client starts from what the process learned
// (another client found the library missing: EVALSHA), and when Redis refuses it EVALSHA, it
// tries FCALL and keeps to it.
func TestAutoUsesFunctionsAfterEvalRefused(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	setUser(t, admin, "functions", "resetkeys", "resetchannels", "~{d}:*", "-@all", "+get", "+set", "+fcall")
	c, rec := recorded(t, srv, "")
	lualib.ForgetMissing(lualib.For(c))
	if _, err := done(ctx, c, ""); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); !slices.Equal(got, []string{"fcall", "evalsha", "eval"}) {
		t.Errorf("sent %v, want fcall, evalsha, eval", got)
	}
	if _, err := lualib.Install(ctx, admin); err != nil {
		t.Fatal(err)
	}
	fc, frec := recorded(t, srv, "functions")
	for range 2 {
		if _, err := done(ctx, fc, ""); err != nil {
			t.Fatalf("Auto with the library loaded: %v", err)
		}
	}
	if got := frec.take(); !slices.Equal(got, []string{"evalsha", "fcall", "fcall"}) {
		t.Errorf("sent %v, want evalsha (refused), then fcall", got)
	}
}

// TestInstallIsIdempotent: a second Install succeeds and says the library was there; a library
// of the same name with other code is an error; a user without +function|load is told so.
func TestInstallIsIdempotent(t *testing.T) {
	srv := redistest.Start(t)
	admin := srv.Client(t)
	ctx := context.Background()
	first, err := lualib.Install(ctx, admin)
	if err != nil || len(first) != 1 || first[0].Already {
		t.Fatalf("first Install = %+v, %v", first, err)
	}
	second, err := lualib.Install(ctx, admin)
	if err != nil || len(second) != 1 || !second[0].Already {
		t.Fatalf("second Install = %+v, %v; want success, already loaded", second, err)
	}
	_, text, _ := lualib.Library()
	n := strings.Count(text, "redis.register_function")
	libs, err := admin.FunctionList(ctx, redis.FunctionListQuery{}).Result()
	if err != nil || len(libs) != 1 || libs[0].Name != lualib.LibraryName() || len(libs[0].Functions) != n {
		t.Errorf("FUNCTION LIST = %+v, %v; want the library with its %d functions", libs, err, n)
	}

	setUser(t, admin, "noload", "+@all", "-function|load")
	opts := srv.Options()
	opts.Username, opts.Password = "noload", "pw"
	noload := redis.NewClient(opts)
	defer noload.Close()
	if _, err := admin.FunctionDelete(ctx, lualib.LibraryName()).Result(); err != nil {
		t.Fatal(err)
	}
	if _, err := lualib.Install(ctx, noload); err == nil || !strings.Contains(err.Error(), "+function|load") {
		t.Errorf("Install without +function|load: %v; want it to name +function|load", err)
	}

	// Another library under this version's name.
	fake := "#!lua name=" + lualib.LibraryName() + "\nredis.register_function('elector_fake', function() return 1 end)\n"
	if err := admin.FunctionLoad(ctx, fake).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := lualib.Install(ctx, admin); err == nil || !strings.Contains(err.Error(), "FUNCTION DELETE") {
		t.Errorf("Install over other code of the same name: %v; want an error saying to delete it", err)
	}
}

// TestInstallOnEveryPrimary: in a Cluster, Install loads the library on every primary, and the
// functions serve keys of every slot through the cluster client.
func TestInstallOnEveryPrimary(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	c := cl.Client(t)
	ctx := context.Background()
	loaded, err := lualib.Install(ctx, c)
	if err != nil || len(loaded) != 3 {
		t.Fatalf("Install = %+v, %v; want 3 primaries", loaded, err)
	}
	again, err := lualib.Install(ctx, c)
	if err != nil || len(again) != 3 || !again[0].Already {
		t.Fatalf("second Install = %+v, %v", again, err)
	}
	s := lualib.Registered("done")
	for i := range 20 {
		keys := []any{fmt.Sprintf("{n%d}:lease", i), fmt.Sprintf("{n%d}:done", i)}
		if _, err := s.Run(ctx, lualib.For(c), c, lualib.Functions, keys, "v1:1:i:a", "1", "0", "1000").Int64(); err != nil {
			t.Fatalf("FCALL in slot of {n%d}: %v", i, err)
		}
	}
}
