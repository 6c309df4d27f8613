package sim

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// luaEngine runs scripts in one Lua state, with Redis's conversions between Lua values and
// replies (https://redis.io/docs/latest/develop/interact/programmability/lua-api/).
type luaEngine struct {
	r        *Redis
	L        *lua.LState
	compiled map[string]*lua.LFunction // by source
	sha      string                    // of the script running, for error messages
}

func newLuaEngine(r *Redis) *luaEngine {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	e := &luaEngine{r: r, L: L, compiled: map[string]*lua.LFunction{}}
	mod := L.NewTable()
	L.SetField(mod, "call", L.NewFunction(func(L *lua.LState) int { return e.call(L, true) }))
	L.SetField(mod, "pcall", L.NewFunction(func(L *lua.LState) int { return e.call(L, false) }))
	L.SetField(mod, "error_reply", L.NewFunction(func(L *lua.LState) int {
		t := L.NewTable()
		L.SetField(t, "err", lua.LString(L.CheckString(1)))
		L.Push(t)
		return 1
	}))
	L.SetField(mod, "status_reply", L.NewFunction(func(L *lua.LState) int {
		t := L.NewTable()
		L.SetField(t, "ok", lua.LString(L.CheckString(1)))
		L.Push(t)
		return 1
	}))
	L.SetField(mod, "replicate_commands", L.NewFunction(func(L *lua.LState) int {
		L.Push(lua.LTrue)
		return 1
	}))
	L.SetGlobal("redis", mod)
	return e
}

// eval runs script with KEYS and ARGV and converts what it returns into a reply.
func (e *luaEngine) eval(script string, keys, args []string) any {
	L := e.L
	fn, ok := e.compiled[script]
	if !ok {
		var err error
		fn, err = L.Load(strings.NewReader(script), "@user_script")
		if err != nil {
			return Error(fmt.Sprintf("ERR Error compiling script (new function): user_script:%v", err))
		}
		e.compiled[script] = fn
	}
	sum := sha1.Sum([]byte(script))
	e.sha = hex.EncodeToString(sum[:])
	L.SetGlobal("KEYS", stringTable(L, keys))
	L.SetGlobal("ARGV", stringTable(L, args))
	L.SetTop(0)
	L.Push(fn)
	if err := L.PCall(0, 1, nil); err != nil {
		return e.scriptError(err)
	}
	ret := L.Get(-1)
	L.SetTop(0)
	return toReply(ret)
}

// scriptError turns an error raised in a script into its error reply: the error of a
// redis.call keeps its reply's text (and code); any other is an ERR.
func (e *luaEngine) scriptError(err error) any {
	msg := err.Error()
	if api, ok := err.(*lua.ApiError); ok {
		if t, ok := api.Object.(*lua.LTable); ok {
			if s, ok := t.RawGetString("err").(lua.LString); ok {
				line, _ := t.RawGetString("line").(lua.LNumber)
				return Error(fmt.Sprintf("%s script: %s, on @user_script:%d.", string(s), e.sha, int(line)))
			}
		}
		msg = api.Object.String()
	}
	return Error(fmt.Sprintf("ERR user_script: %s script: %s", msg, e.sha))
}

func stringTable(L *lua.LState, items []string) *lua.LTable {
	t := L.CreateTable(len(items), 0)
	for _, s := range items {
		t.Append(lua.LString(s))
	}
	return t
}

// call is redis.call (raise) and redis.pcall (return the error as {err=...}).
func (e *luaEngine) call(L *lua.LState, raise bool) int {
	n := L.GetTop()
	if n == 0 {
		L.RaiseError("Please specify at least one argument for this redis lib call")
	}
	args := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		switch v := L.Get(i).(type) {
		case lua.LString:
			args = append(args, string(v))
		case lua.LNumber:
			args = append(args, strconv.FormatFloat(float64(v), 'g', 17, 64))
		default:
			L.RaiseError("Lua redis lib command arguments must be strings or integers")
		}
	}
	reply := e.r.command(args)
	if msg, isErr := reply.(Error); isErr {
		t := L.NewTable()
		L.SetField(t, "err", lua.LString(string(msg)))
		if raise {
			L.SetField(t, "line", lua.LNumber(callerLine(L)))
			L.Error(t, 1)
		}
		L.Push(t)
		return 1
	}
	L.Push(toLua(L, reply))
	return 1
}

// toLua converts a reply into a Lua value: integers to numbers, the null bulk string to false,
// arrays to tables, a status to {ok=...}.
func toLua(L *lua.LState, reply any) lua.LValue {
	switch v := reply.(type) {
	case nil:
		return lua.LFalse
	case int64:
		return lua.LNumber(v)
	case string:
		return lua.LString(v)
	case Status:
		t := L.NewTable()
		L.SetField(t, "ok", lua.LString(string(v)))
		return t
	case []any:
		t := L.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(toLua(L, item))
		}
		return t
	}
	panic(fmt.Sprintf("sim: no Lua value for reply %T", reply))
}

// toReply converts what a script returns into a reply: numbers are truncated to integers,
// true is 1, false and nil are the null bulk string, a table is an array up to its first nil,
// or an error or status reply ({err=...}, {ok=...}).
func toReply(v lua.LValue) any {
	switch v := v.(type) {
	case lua.LNumber:
		f := math.Trunc(float64(v))
		if math.IsNaN(f) || f >= math.MaxInt64 || f <= math.MinInt64 {
			return int64(math.MinInt64) // Redis's cast of an out-of-range double
		}
		return int64(f)
	case lua.LString:
		return string(v)
	case lua.LBool:
		if v {
			return int64(1)
		}
		return nil
	case *lua.LTable:
		if s, ok := v.RawGetString("err").(lua.LString); ok {
			return Error(string(s))
		}
		if s, ok := v.RawGetString("ok").(lua.LString); ok {
			return Status(string(s))
		}
		var out []any
		for i := 1; ; i++ {
			item := v.RawGetInt(i)
			if item == lua.LNil {
				break
			}
			out = append(out, toReply(item))
		}
		if out == nil {
			out = []any{}
		}
		return out
	}
	return nil
}

// callerLine is the line of the script that called redis.call, for the error reply.
func callerLine(L *lua.LState) int {
	dbg, ok := L.GetStack(1)
	if !ok {
		return 0
	}
	if _, err := L.GetInfo("l", dbg, lua.LNil); err != nil {
		return 0
	}
	return dbg.CurrentLine
}
