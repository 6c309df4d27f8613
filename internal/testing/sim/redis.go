// Package sim is the world of the deterministic simulator (docs/MODEL.md, "Deterministic
// simulator"): a simulated Redis that runs the project's own Lua scripts, and a simulated
// network between it and many replicas in one process, where every delay, loss, cut, restart
// and user action is drawn from one seed.
//
// Redis here is an in-memory server with Redis's semantics for exactly the commands the
// scripts of pkg/lease and pkg/election call (GET SET DEL PEXPIRE PTTL TIME PUBLISH ZADD
// ZRANGE ZREM ZREMRANGEBYSCORE), keys that expire on the server's clock, and an embedded Lua
// 5.1 interpreter (gopher-lua) with a redis.call shim. A differential test (redis_test.go)
// runs random operation sequences against it and a real redis-server and requires identical
// replies.
//
// The package is for tests only: nothing in a production binary imports it.
package sim

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Error is an error reply, such as "WRONGTYPE Operation against a key holding the wrong kind
// of value" or a script's redis.error_reply.
type Error string

func (e Error) Error() string { return string(e) }

// Status is a status reply, such as "OK".
type Status string

// A reply is one of: nil (the null bulk string), int64, string, Status, Error, []any.

// entry is one key: a string or a sorted set, with its expiry in server milliseconds (0: none).
type entry struct {
	str      string
	zset     map[string]float64 // nil for a string
	expireAt int64
}

func (e *entry) clone() *entry {
	c := *e
	if e.zset != nil {
		c.zset = make(map[string]float64, len(e.zset))
		for k, v := range e.zset {
			c.zset[k] = v
		}
	}
	return &c
}

// Redis is a simulated Redis server. It is not safe for concurrent use: the world calls it
// from the simulator's driver goroutine only (the differential test from one goroutine).
type Redis struct {
	now     func() time.Time
	frozen  int64 // the command's time snapshot in ms (Redis freezes it for a script)
	data    map[string]*entry
	lua     *luaEngine
	publish func(channel, message string) int64
}

// NewRedis returns an empty server whose clock is now. publish delivers a PUBLISH to the
// subscribers of channel and returns their number; nil counts none.
func NewRedis(now func() time.Time, publish func(channel, message string) int64) *Redis {
	if publish == nil {
		publish = func(string, string) int64 { return 0 }
	}
	r := &Redis{now: now, data: map[string]*entry{}, publish: publish}
	r.lua = newLuaEngine(r)
	return r
}

// Snapshot is a copy of a server's data, with absolute expiries (as an RDB file keeps them).
type Snapshot struct{ data map[string]*entry }

// Snapshot copies the data.
func (r *Redis) Snapshot() *Snapshot {
	s := &Snapshot{data: make(map[string]*entry, len(r.data))}
	for k, e := range r.data {
		s.data[k] = e.clone()
	}
	return s
}

// Restore replaces the data with a copy of s; nil empties the server (a restart without
// persistence).
func (r *Redis) Restore(s *Snapshot) {
	r.data = map[string]*entry{}
	if s == nil {
		return
	}
	for k, e := range s.data {
		r.data[k] = e.clone()
	}
}

// Get returns the string value of key and whether it exists (for the simulator's checks;
// it is not a command and changes nothing but lazily expired keys).
func (r *Redis) Get(key string) (string, bool) {
	r.frozen = r.now().UnixMilli()
	e := r.lookup(key)
	if e == nil || e.zset != nil {
		return "", false
	}
	return e.str, true
}

// Do runs one command outside a script and returns its reply.
func (r *Redis) Do(args ...string) any {
	r.frozen = r.now().UnixMilli()
	return r.command(args)
}

// Eval runs a script as EVAL does: keys become KEYS, args ARGV.
func (r *Redis) Eval(script string, keys, args []string) any {
	r.frozen = r.now().UnixMilli()
	return r.lua.eval(script, keys, args)
}

func (r *Redis) lookup(key string) *entry {
	e, ok := r.data[key]
	if !ok {
		return nil
	}
	if e.expireAt != 0 && r.frozen > e.expireAt {
		delete(r.data, key)
		return nil
	}
	return e
}

const (
	errWrongType = Error("WRONGTYPE Operation against a key holding the wrong kind of value")
	errNotInt    = Error("ERR value is not an integer or out of range")
	errSyntax    = Error("ERR syntax error")
	errNotFloat  = Error("ERR value is not a valid float")
	errMinMax    = Error("ERR min or max is not a float")
)

func arity(name string) Error {
	return Error(fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(name)))
}

// fixedArity returns the number of arguments of a command that takes a fixed number.
func fixedArity(name string) (int, bool) {
	switch name {
	case "GET", "PTTL":
		return 1, true
	case "PEXPIRE", "PUBLISH":
		return 2, true
	case "TIME":
		return 0, true
	case "ZREMRANGEBYSCORE", "ZRANGE":
		return 3, true
	}
	return 0, false
}

// command runs args, a command and its arguments.
func (r *Redis) command(args []string) any {
	if len(args) == 0 {
		return Error("ERR empty command")
	}
	name := strings.ToUpper(args[0])
	a := args[1:]
	if n, ok := fixedArity(name); ok && len(a) != n {
		return arity(name)
	}
	switch name {
	case "GET":
		return r.get(a[0])
	case "SET":
		return r.set(a)
	case "DEL":
		return r.del(a)
	case "PEXPIRE":
		return r.pexpire(a[0], a[1])
	case "PTTL":
		return r.pttl(a[0])
	case "TIME":
		now := r.now().UnixMicro()
		return []any{strconv.FormatInt(now/1e6, 10), strconv.FormatInt(now%1e6, 10)}
	case "PUBLISH":
		return r.publish(a[0], a[1])
	case "ZADD":
		return r.zadd(a)
	case "ZRANGE":
		return r.zrange(a[0], a[1], a[2])
	case "ZREM":
		return r.zrem(a)
	case "ZREMRANGEBYSCORE":
		return r.zremrangebyscore(a[0], a[1], a[2])
	}
	return Error(fmt.Sprintf("ERR unknown command '%s'", args[0]))
}

func (r *Redis) get(key string) any {
	e := r.lookup(key)
	switch {
	case e == nil:
		return nil
	case e.zset != nil:
		return errWrongType
	}
	return e.str
}

// set is SET key value [NX|XX] [PX ms|EX s|KEEPTTL].
func (r *Redis) set(a []string) any {
	if len(a) < 2 {
		return arity("set")
	}
	key, value := a[0], a[1]
	var nx, xx, keep bool
	var expire int64 = -1
	for i := 2; i < len(a); i++ {
		switch opt := strings.ToUpper(a[i]); {
		case opt == "NX" && !xx:
			nx = true
		case opt == "XX" && !nx:
			xx = true
		case opt == "KEEPTTL" && expire < 0:
			keep = true
		case (opt == "PX" || opt == "EX") && !keep && expire < 0 && i+1 < len(a):
			i++
			n, err := strconv.ParseInt(a[i], 10, 64)
			if err != nil {
				return errNotInt
			}
			if n <= 0 {
				return Error("ERR invalid expire time in 'set' command")
			}
			if opt == "EX" {
				n *= 1000
			}
			expire = n
		default:
			return errSyntax
		}
	}
	old := r.lookup(key)
	if (nx && old != nil) || (xx && old == nil) {
		return nil
	}
	e := &entry{str: value}
	switch {
	case expire > 0:
		e.expireAt = r.frozen + expire
	case keep && old != nil:
		e.expireAt = old.expireAt
	}
	r.data[key] = e
	return Status("OK")
}

func (r *Redis) del(keys []string) any {
	if len(keys) == 0 {
		return arity("del")
	}
	var n int64
	for _, k := range keys {
		if r.lookup(k) != nil {
			delete(r.data, k)
			n++
		}
	}
	return n
}

func (r *Redis) pexpire(key, ms string) any {
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return errNotInt
	}
	e := r.lookup(key)
	if e == nil {
		return int64(0)
	}
	if n <= 0 { // an expiry in the past deletes the key at once
		delete(r.data, key)
		return int64(1)
	}
	e.expireAt = r.frozen + n
	return int64(1)
}

func (r *Redis) pttl(key string) any {
	e := r.lookup(key)
	switch {
	case e == nil:
		return int64(-2)
	case e.expireAt == 0:
		return int64(-1)
	}
	return max(e.expireAt-r.frozen, 0)
}

// zsetFor returns key's sorted set, creating it when create; an error reply for a string.
func (r *Redis) zsetFor(key string, create bool) (*entry, any) {
	e := r.lookup(key)
	switch {
	case e == nil && create:
		e = &entry{zset: map[string]float64{}}
		r.data[key] = e
	case e == nil:
		return nil, nil
	case e.zset == nil:
		return nil, errWrongType
	}
	return e, nil
}

// zadd is ZADD key score member [score member ...] (no flags: the scripts use none).
func (r *Redis) zadd(a []string) any {
	if len(a) < 3 || len(a)%2 == 0 {
		if len(a) >= 3 {
			return errSyntax
		}
		return arity("zadd")
	}
	scores := make([]float64, 0, len(a)/2)
	for i := 1; i < len(a); i += 2 {
		f, ok := parseScore(a[i])
		if !ok {
			return errNotFloat
		}
		scores = append(scores, f)
	}
	e, errReply := r.zsetFor(a[0], true)
	if errReply != nil {
		return errReply
	}
	var added int64
	for i := 1; i < len(a); i += 2 {
		if _, ok := e.zset[a[i+1]]; !ok {
			added++
		}
		e.zset[a[i+1]] = scores[i/2]
	}
	return added
}

// zrange is ZRANGE key start stop, by index (no options): the members ordered by score, then
// by member, from start to stop inclusive, negative indices counting from the end.
func (r *Redis) zrange(key, start, stop string) any {
	from, err1 := strconv.ParseInt(start, 10, 64)
	to, err2 := strconv.ParseInt(stop, 10, 64)
	if err1 != nil || err2 != nil {
		return Error("ERR value is not an integer or out of range")
	}
	e, errReply := r.zsetFor(key, false)
	if e == nil {
		if errReply != nil {
			return errReply
		}
		return []any{}
	}
	members := make([]string, 0, len(e.zset))
	for m := range e.zset {
		members = append(members, m)
	}
	sort.Slice(members, func(i, j int) bool {
		si, sj := e.zset[members[i]], e.zset[members[j]]
		return si < sj || si == sj && members[i] < members[j]
	})
	n := int64(len(members))
	if from < 0 {
		from = max(n+from, 0)
	}
	if to < 0 {
		to = n + to
	}
	to = min(to, n-1)
	out := []any{}
	for i := from; i <= to; i++ {
		out = append(out, members[i])
	}
	return out
}

func (r *Redis) zrem(a []string) any {
	if len(a) < 2 {
		return arity("zrem")
	}
	e, errReply := r.zsetFor(a[0], false)
	if e == nil {
		if errReply != nil {
			return errReply
		}
		return int64(0)
	}
	var n int64
	for _, m := range a[1:] {
		if _, ok := e.zset[m]; ok {
			delete(e.zset, m)
			n++
		}
	}
	if len(e.zset) == 0 {
		delete(r.data, a[0])
	}
	return n
}

func (r *Redis) zremrangebyscore(key, lo, hi string) any {
	minF, minEx, ok1 := parseBound(lo)
	maxF, maxEx, ok2 := parseBound(hi)
	if !ok1 || !ok2 {
		return errMinMax
	}
	e, errReply := r.zsetFor(key, false)
	if e == nil {
		if errReply != nil {
			return errReply
		}
		return int64(0)
	}
	members := make([]string, 0, len(e.zset))
	for m := range e.zset {
		members = append(members, m)
	}
	sort.Strings(members)
	var n int64
	for _, m := range members {
		s := e.zset[m]
		above := s > minF || (!minEx && s == minF)
		below := s < maxF || (!maxEx && s == maxF)
		if above && below {
			delete(e.zset, m)
			n++
		}
	}
	if len(e.zset) == 0 {
		delete(r.data, key)
	}
	return n
}

// parseScore parses a score as Redis does: a float, inf, +inf or -inf; never NaN.
func parseScore(s string) (float64, bool) {
	switch strings.ToLower(s) {
	case "inf", "+inf":
		return math.Inf(1), true
	case "-inf":
		return math.Inf(-1), true
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || strings.ContainsAny(s, " \t") {
		return 0, false
	}
	return f, true
}

// parseBound parses a range bound: a score, exclusive with a leading "(".
func parseBound(s string) (f float64, exclusive, ok bool) {
	if strings.HasPrefix(s, "(") {
		exclusive, s = true, s[1:]
	}
	f, ok = parseScore(s)
	return f, exclusive, ok
}
