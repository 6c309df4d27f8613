package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/lease"
)

// op is one step of a differential sequence: a script call or a plain command.
type op struct {
	script string // "" for a command
	keys   []string
	args   []string
	short  bool // it may have set a TTL of a few ms: wait for it to expire before the next op
}

func (o op) String() string {
	if o.script == "" {
		return strings.Join(o.args, " ")
	}
	return fmt.Sprintf("EVAL %s %q %q", o.script[:20], o.keys, o.args)
}

// seqGen generates random operations on one lease, its token, resign and members keys.
type seqGen struct {
	rng     *rand.Rand
	s       Scripts
	k       leasewire.Keys
	records []string // records seen in replies: renewed, released, resigned for
	tokenN  int
}

// baseToken is above any server time in microseconds, so that the token acquire hands out
// is the counter's (previous + 1) on both servers, not their clocks'.
const baseToken = 8_000_000_000_000_000

func (g *seqGen) ttl() (string, bool) {
	if g.rng.IntN(6) == 0 {
		return strconv.Itoa(1 + g.rng.IntN(3)), true
	}
	return strconv.Itoa(20_000 + g.rng.IntN(40_000)), false
}

func (g *seqGen) pick(xs ...string) string { return xs[g.rng.IntN(len(xs))] }

func (g *seqGen) record() string {
	if len(g.records) == 0 || g.rng.IntN(8) == 0 {
		return g.pick("v1:5:i-a:a", "garbage", "")
	}
	return g.records[g.rng.IntN(len(g.records))]
}

func (g *seqGen) next() []op {
	owner := g.pick("i-a:a", "i-b:b", "i-c:c", "i-a:a2")
	ttl, short := g.ttl()
	withResign := g.rng.IntN(4) != 0
	termKeys := []string{g.k.Lease}
	if withResign {
		termKeys = append(termKeys, g.k.Resign)
	}
	switch g.rng.IntN(14) {
	case 0, 1, 2:
		keys := []string{g.k.Lease, g.k.Token, g.k.Terms}
		if withResign {
			keys = append(keys, g.k.Resign)
		}
		return []op{{script: g.s.Acquire, keys: keys, args: []string{owner, ttl, g.k.Events}, short: short}}
	case 3, 4:
		if g.rng.IntN(3) == 0 { // many renewals in one call: keys repeated, of other types, none
			var keys []string
			args := []string{ttl}
			for range g.rng.IntN(4) {
				keys = append(keys, g.pick(g.k.Lease, g.k.Lease, g.k.Resign, g.k.Terms, g.k.Members))
				args = append(args, g.record())
			}
			if g.rng.IntN(8) == 0 {
				args = args[:len(args)-1] // a record short: an error, nothing renewed
			}
			return []op{{script: g.s.RenewMany, keys: keys, args: args, short: short}}
		}
		args := []string{g.record(), ttl}
		if g.rng.IntN(2) == 0 {
			args = append(args, g.k.Events)
		}
		return []op{{script: g.s.Renew, keys: termKeys, args: args, short: short}}
	case 5:
		if g.rng.IntN(2) == 0 { // the done mark of run --once-per, fenced by the record
			return []op{{script: g.s.Done, keys: []string{g.k.Lease, g.k.Done}, args: []string{g.record(), "1700000000000", "0", ttl}, short: short}}
		}
		return []op{{script: g.s.Release, keys: termKeys, args: []string{g.record(), g.k.Events}}}
	case 6:
		hold, hshort := g.ttl()
		args := []string{hold, g.pick("", "a", "b", "c"), ttl, g.k.Events}
		if g.rng.IntN(2) == 0 {
			args = append(args, g.record())
		}
		return []op{{script: g.s.Resign, keys: []string{g.k.Lease, g.k.Resign}, args: args, short: short || hshort}}
	case 7:
		if g.rng.IntN(2) == 0 { // the candidate registry: heartbeats, leaves, odd versions
			args := []string{owner, ttl, g.pick("0", "5", "-3"), g.pick("", "v1.2", "x\ty"), g.pick("", "", "leave")}
			return []op{{script: g.s.Candidate, keys: []string{g.k.Candidates}, args: args, short: short}}
		}
		args := []string{owner, ttl}
		if g.rng.IntN(4) == 0 {
			args = append(args, "leave")
		}
		return []op{{script: g.s.Members, keys: []string{g.k.Members}, args: args, short: short}}
	case 8, 9:
		if g.rng.IntN(4) == 0 { // what members returns, read directly (and from a string key)
			return []op{{args: []string{"ZRANGE", g.pick(g.k.Members, g.k.Lease, g.k.Terms), g.pick("0", "1", "-2"), g.pick("-1", "0", "5")}}}
		}
		return []op{{args: []string{g.pick("GET", "PTTL"), g.pick(g.k.Lease, g.k.Resign, g.k.Token, g.k.Terms, g.k.Members, g.k.Done, g.k.Candidates)}}}
	case 10:
		return []op{{args: []string{"DEL", g.pick(g.k.Lease, g.k.Resign, g.k.Members, g.k.Terms)}}}
	case 11: // wrong types and hand-written values
		return []op{g.pick3(
			op{args: []string{"SET", g.k.Lease, g.pick("garbage", "v1:x:y", "v1:7:i-z:z")}},
			op{args: []string{"ZADD", g.pick(g.k.Lease, g.k.Resign, g.k.Terms), "1", "m"}},
			op{args: []string{"SET", g.k.Members, "x"}},
		)}
	case 12: // the token counter, broken and exhausted, then restored
		g.tokenN++
		bad := g.pick("abc", "9007199254740991", "9007199254740990", "-5")
		keys := []string{g.k.Lease, g.k.Token, g.k.Terms, g.k.Resign}
		return []op{
			{args: []string{"DEL", g.k.Lease}},
			{args: []string{"SET", g.k.Token, bad}},
			{script: g.s.Acquire, keys: keys, args: []string{owner, ttl, g.k.Events}, short: short},
			{args: []string{"SET", g.k.Token, strconv.Itoa(baseToken + 1000*g.tokenN)}},
		}
	default: // a resign value written by hand
		v := fmt.Sprintf("v1\n%s\n%s\n%s\n%s", g.pick("request", "reserved", "bogus"), g.pick("100", "0", "x"), g.record(), g.pick("", "a", "b"))
		return []op{{args: []string{"SET", g.k.Resign, v, "PX", ttl}, short: short}}
	}
}

func (g *seqGen) pick3(a, b, c op) op { return []op{a, b, c}[g.rng.IntN(3)] }

var recordRE = regexp.MustCompile(`v1:(\d+):`)

// msRE matches a server time in milliseconds (the candidate registry's), written as MS.
var msRE = regexp.MustCompile(`\b1\d{12}\b`)

// candHeaderRE matches the candidate registry's header, whose key ttl is a remaining time
// computed from two calls' clocks (an entry's expiry, this call's now): it differs between the
// servers by the time between their executions, as PTTL does, and PTTL of the key is compared
// with that tolerance.
var candHeaderRE = regexp.MustCompile(`^v1\tMS\t\d+\n`)

// normalize turns a go-redis result into the simulator's reply form, with fencing tokens taken
// from a server clock (below baseToken) written as T.
func normalize(v any, err error) any {
	var rerr redis.Error
	switch {
	case errors.Is(err, redis.Nil):
		return nil
	case errors.As(err, &rerr):
		return Error(rerr.Error())
	case err != nil:
		return fmt.Sprintf("transport error %v", err)
	}
	return normReply(v)
}

func normReply(v any) any {
	switch v := v.(type) {
	case redis.Error: // an error element of an array (renew_many's)
		return Error(v.Error())
	case Status:
		return string(v)
	case string:
		v = msRE.ReplaceAllString(v, "MS")
		v = candHeaderRE.ReplaceAllString(v, "v1\tMS\tTTL\n")
		return recordRE.ReplaceAllStringFunc(v, func(m string) string {
			n, _ := strconv.ParseInt(m[3:len(m)-1], 10, 64)
			if n > 1_000_000_000 && n < baseToken {
				return "v1:T:"
			}
			return m
		})
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = normReply(x)
		}
		return out
	}
	return v
}

// sameReply compares normalized replies; remaining times may differ by the time between the
// two executions.
func sameReply(a, b any) bool {
	if x, ok := a.(int64); ok {
		y, ok := b.(int64)
		return ok && (x == y || (x >= 1000 && y >= 1000 && max(x-y, y-x) <= 250))
	}
	xs, ok1 := a.([]any)
	ys, ok2 := b.([]any)
	if ok1 && ok2 {
		if len(xs) != len(ys) {
			return false
		}
		for i := range xs {
			if !sameReply(xs[i], ys[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

func (g *seqGen) learn(reply any) {
	switch v := reply.(type) {
	case string:
		if strings.HasPrefix(v, "v1:") && !strings.ContainsRune(v, '\n') {
			g.records = append(g.records, v)
		}
	case []any:
		for _, x := range v {
			g.learn(x)
		}
	}
}

// TestDifferentialAgainstRedis runs random operation sequences of the project's scripts and of
// the commands they use against the simulated Redis and a real redis-server, and requires
// identical replies.
func TestDifferentialAgainstRedis(t *testing.T) {
	srv := redistest.Start(t)
	client := srv.Client(t)
	ctx := context.Background()
	scripts, err := LoadScripts()
	if err != nil {
		t.Fatal(err)
	}
	seqs, steps := 12, 150
	if testing.Short() {
		seqs = 3
	}
	var compared int
	for seed := range uint64(seqs) {
		for try := 1; ; try++ {
			n, stalled, err := diffSequence(ctx, client, scripts, seed, steps)
			compared += n
			if err == nil {
				break
			}
			// Keys of a few milliseconds make a reply depend on when each server ran the
			// call: a stall of the machine between the two can expire a key in one only.
			// Such a sequence is run again; a mismatch without a stall is a real difference.
			if stalled <= stallBudget || try == 3 {
				t.Fatalf("%v (the longest call of the sequence took %v)", err, stalled)
			}
			t.Logf("seed %d: %v\nthe machine stalled (a call took %v, above %v): running the sequence again", seed, firstLine(err), stalled, stallBudget)
		}
	}
	t.Logf("%d replies compared, all identical", compared)
}

// stallBudget is the longest a call pair (redis-server, then the simulator) may take for a
// mismatch to count as a real difference: on loopback one takes some 100µs.
const stallBudget = 2 * time.Millisecond

// diffSequence runs the sequence of seed against both servers and returns the replies compared,
// the longest call pair and the first mismatch. The simulator's clock is the time each call
// pair began, a moment before redis-server ran the call, so the two clocks differ by at most
// the call's duration.
func diffSequence(ctx context.Context, client *redis.Client, scripts Scripts, seed uint64, steps int) (compared int, stalled time.Duration, err error) {
	if err := client.FlushAll(ctx).Err(); err != nil {
		return 0, 0, err
	}
	var at time.Time
	sim := NewRedis(func() time.Time { return at }, nil)
	g := &seqGen{rng: rand.New(rand.NewPCG(seed, 24)), s: scripts, k: leasewire.KeysFor(lease.DefaultPrefix, fmt.Sprintf("diff%d", seed))}
	prologue := op{args: []string{"SET", g.k.Token, strconv.Itoa(baseToken)}}
	var history []string
	for step := 0; step < steps; step++ {
		ops := g.next()
		if step == 0 {
			ops = append([]op{prologue}, ops...)
		}
		for _, o := range ops {
			at = time.Now()
			real, simReply := runBoth(ctx, client, sim, o)
			stalled = max(stalled, time.Since(at))
			history = append(history, fmt.Sprintf("%v -> %#v", o, simReply))
			if !sameReply(real, simReply) {
				return compared, stalled, fmt.Errorf("seed %d step %d: %v\nredis-server: %#v\nsimulator:    %#v\nhistory:\n%s", seed, step, o, real, simReply, strings.Join(history, "\n"))
			}
			compared++
			g.learn(real)
			if o.short {
				time.Sleep(10 * time.Millisecond) // both servers see the few-ms keys expire
			}
		}
	}
	return compared, stalled, nil
}

// firstLine is the first line of err's message.
func firstLine(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

func runBoth(ctx context.Context, client *redis.Client, sim *Redis, o op) (real, simReply any) {
	if o.script == "" {
		args := make([]any, len(o.args))
		for i, a := range o.args {
			args[i] = a
		}
		real = normalize(client.Do(ctx, args...).Result())
		return real, normReply(sim.Do(o.args...))
	}
	args := make([]any, len(o.args))
	for i, a := range o.args {
		args[i] = a
	}
	real = normalize(client.Eval(ctx, o.script, o.keys, args...).Result())
	return real, normReply(sim.Eval(o.script, o.keys, o.args))
}

// TestTokenFromServerClock checks the path the differential test normalizes: with no counter,
// the token is the server time in microseconds.
func TestTokenFromServerClock(t *testing.T) {
	scripts, err := LoadScripts()
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_700_000_000, 123_456_000)
	r := NewRedis(func() time.Time { return at }, nil)
	k := leasewire.KeysFor(lease.DefaultPrefix, "clock")
	got := r.Eval(scripts.Acquire, []string{k.Lease, k.Token, k.Terms}, []string{"i:a", "1000", k.Events})
	want := []any{int64(1), "v1:1700000000123456:i:a", int64(1000)}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("acquire = %#v, want %#v", got, want)
	}
	at = at.Add(1001 * time.Millisecond)
	if v, ok := r.Get(k.Lease); ok {
		t.Fatalf("lease key still holds %q after its PX", v)
	}
}

// TestScriptTypoFails checks that a broken script is an error reply, not a silent success.
func TestScriptTypoFails(t *testing.T) {
	r := NewRedis(time.Now, nil)
	for _, src := range []string{"return redis.call('GTE', KEYS[1])", "retrun 1", "return redis.call('GET')"} {
		if _, ok := r.Eval(src, []string{"k"}, nil).(Error); !ok {
			t.Errorf("script %q did not fail", src)
		}
	}
}
