// Package lualib runs elector's Lua scripts (pkg/lease/scripts/*.lua, pkg/fence/fence.lua,
// pkg/election/scripts/members.lua, pkg/schedule/scripts/*.lua) as the functions of one Redis
// function library (FCALL; Redis 7.0 and later, Valkey) or as scripts (EVALSHA, and EVAL when Redis answers NOSCRIPT).
// With the library loaded (FUNCTION LOAD, by an administrator or `elector install-functions`),
// elector's Redis user needs +fcall, not +eval, which would let it run any Lua.
//
// The .lua files are the only source: each package embeds its own and registers it here
// (Register); the library wraps each body, unchanged, in redis.register_function. The library
// and its functions are named after Version, a hash of the library's text, so that two elector
// versions side by side during a rolling upgrade never call each other's functions. Version is
// a constant because no single package links every script (a program may link pkg/fence
// alone); TestVersion checks it against the scripts.
//
// How a script is called is a Mode: Auto (FCALL, and EVALSHA/EVAL where the library is not
// loaded, not allowed, or FCALL unknown), Functions (FCALL only) or Eval (EVALSHA/EVAL only).
// What Auto learns is remembered per client (State), so that a Redis without the library
// costs one extra round trip per client and RecheckAfter, not one per call.
package lualib

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Mode says how scripts are called: Auto, Functions or Eval.
type Mode string

const (
	// Auto calls FCALL, and EVALSHA/EVAL where Redis does not know the library's function (not
	// loaded, Redis 6) or refuses FCALL; an EVALSHA/EVAL that Redis refuses is tried as FCALL.
	Auto Mode = "auto"
	// Functions calls FCALL only: the library must be loaded on every primary.
	Functions Mode = "functions"
	// Eval calls EVALSHA, and EVAL on NOSCRIPT, only: elector before the function library.
	Eval Mode = "eval"
)

// Modes lists the modes, for help texts.
const Modes = "auto, functions or eval"

// ParseMode returns the mode called s; "" is "" (the client's default: Auto unless set with
// SetDefaultMode).
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case "", Auto, Functions, Eval:
		return m, nil
	}
	return "", fmt.Errorf("unknown scripts mode %q; allowed: %s", s, Modes)
}

// The scripts of the library, in the order of its text.
var names = []string{"acquire", "renew", "release", "resign", "done", "fence", "members",
	"schedule_claim", "schedule_finish", "schedule_skip", "schedule_read", "candidate", "renew_many"}

// Script is one of elector's Lua scripts. It is an immutable value once registered; sharing
// it is not shared state.
type Script struct {
	name     string // one of names
	src      string // the .lua file, as embedded
	allowOOM bool   // the function's flags: allow-oom (else none)

	// Boxed once: the function name, the SHA1 and the source, the first argument of FCALL,
	// EVALSHA and EVAL.
	fn, sha, srcBox any
}

var (
	regMu      sync.Mutex
	registered = map[string]*Script{}
)

// Register adds the script called name (one of the library's: acquire, renew, release,
// resign, done, fence, members, schedule_claim, ...) with its source, as its package embeds
// it, and returns it.
// allowOOM declares the function allow-oom: Redis runs it even above maxmemory (see
// docs/PROTOCOL.md); without it, Redis refuses the whole FCALL there. It panics when name is
// not the library's or is registered twice: a programming error, found at init.
func Register(name, src string, allowOOM bool) *Script {
	regMu.Lock()
	defer regMu.Unlock()
	known := false
	for _, n := range names {
		known = known || n == name
	}
	if !known || registered[name] != nil {
		panic(fmt.Sprintf("lualib: Register(%q): not a script of the library, or registered twice", name))
	}
	sum := sha1.Sum([]byte(src))
	s := &Script{name: name, src: src, allowOOM: allowOOM,
		fn: FunctionName(name), sha: hex.EncodeToString(sum[:]), srcBox: src}
	registered[name] = s
	return s
}

// Name returns the script's name, e.g. "acquire".
func (s *Script) Name() string { return s.name }

// Source returns the script's Lua source.
func (s *Script) Source() string { return s.src }

// LibraryName returns the name of the library: elector_<Version>.
func LibraryName() string { return "elector_" + Version }

// FunctionName returns the library's function for the script called name:
// elector_<Version>_<name>.
func FunctionName(name string) string { return functionName(Version, name) }

func functionName(version, name string) string { return "elector_" + version + "_" + name }

// render returns the library text for version from scripts (in the order of names).
func render(version string, scripts []*Script) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!lua name=elector_%s\n", version)
	b.WriteString("-- elector's Lua scripts as Redis functions: each callback is a .lua file of elector, unchanged.\n")
	b.WriteString("-- Load it with `elector install-functions` or FUNCTION LOAD; its name carries a hash of this text.\n")
	for _, s := range scripts {
		flags := ""
		if s.allowOOM {
			flags = ", flags={'allow-oom'}"
		}
		fmt.Fprintf(&b, "redis.register_function{function_name='%s'%s, callback=function(KEYS, ARGV)\n",
			functionName(version, s.name), flags)
		b.WriteString(s.src)
		if !strings.HasSuffix(s.src, "\n") {
			b.WriteString("\n")
		}
		b.WriteString("end}\n")
	}
	return b.String()
}

// contentVersion is the hash of the library's text with an empty version: 8 hex digits.
func contentVersion(scripts []*Script) string {
	sum := sha256.Sum256([]byte(render("", scripts)))
	return hex.EncodeToString(sum[:])[:8]
}

// all returns the registered scripts in the order of names, and the names not registered.
func all() (scripts []*Script, missing []string) {
	regMu.Lock()
	defer regMu.Unlock()
	for _, n := range names {
		if s := registered[n]; s != nil {
			scripts = append(scripts, s)
		} else {
			missing = append(missing, n)
		}
	}
	return scripts, missing
}

// Library returns the library's name and text, for FUNCTION LOAD. It fails when the program
// does not link every package with a script (pkg/lease, pkg/fence, pkg/election,
// pkg/schedule), or when the scripts are not those Version was computed from (a build from a
// modified tree whose Version was not updated: TestVersion fails there).
func Library() (name, text string, err error) {
	scripts, missing := all()
	if len(missing) > 0 {
		return "", "", fmt.Errorf("the function library needs every script of elector; this program lacks %s (link pkg/lease, pkg/fence, pkg/election and pkg/schedule)",
			strings.Join(missing, ", "))
	}
	if v := contentVersion(scripts); v != Version {
		return "", "", fmt.Errorf("the scripts are not those of the library version %s (their hash is %s): internal/leasewire/lualib.Version must be updated (go test ./internal/leasewire/lualib)", Version, v)
	}
	return LibraryName(), render(Version, scripts), nil
}

// Processor runs one command: a client, a pipeline or a connection.
type Processor interface {
	Process(ctx context.Context, cmd redis.Cmder) error
}

// form is one way of sending a script: a command name.
type form uint8

const (
	fcall form = 1 << iota
	evalsha
	eval
)

// command returns the command that runs s in form f with keys (boxed key names) and args.
func (s *Script) command(ctx context.Context, f form, keys []any, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	switch f {
	case fcall:
		a = append(a, "fcall", s.fn, len(keys))
	case evalsha:
		a = append(a, "evalsha", s.sha, len(keys))
	default:
		a = append(a, "eval", s.srcBox, len(keys))
	}
	a = append(a, keys...)
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3) // the Cluster slot is the first key's
	}
	return cmd
}

// Call is one call of a script: the commands it sends one after the other (FCALL, EVALSHA,
// EVAL) as Redis's replies ask, and what it learns for its client's State. The zero value is
// not usable: start one with Script.Start. A Call is not safe for concurrent use.
type Call struct {
	s       *Script
	st      *State
	mode    Mode
	form    form
	tried   form  // the forms sent, as bits
	refusal error // Redis's refusal of EVALSHA or EVAL, if any: the call's error rather than FCALL's (Err)
}

// Start begins a call of s through the client whose State is st, in mode ("": the client's
// default).
func (s *Script) Start(st *State, mode Mode) Call {
	m := st.mode(mode)
	c := Call{s: s, st: st, mode: m, form: fcall}
	if m == Eval || (m == Auto && st.preferEval()) {
		c.form = evalsha
	}
	return c
}

// Command returns the command to send now, with keys (the key names, boxed) and args.
func (c *Call) Command(ctx context.Context, keys []any, args ...any) *redis.Cmd {
	c.tried |= c.form
	return c.s.command(ctx, c.form, keys, args)
}

// Retry reports whether the call goes on after the command returned err, with another form
// (Command returns it): an EVAL after NOSCRIPT; in Auto, an EVALSHA after an FCALL that Redis
// does not know or refuses, an FCALL after an EVALSHA or EVAL that Redis refuses. What it
// learns is remembered in the client's State. false: err is the call's error.
func (c *Call) Retry(err error) bool {
	next := form(0)
	switch {
	case err == nil:
	case c.form == fcall && c.mode == Auto:
		switch {
		case functionMissing(err):
			c.st.libraryMissing()
			next = evalsha
		case refused(err, "fcall"):
			c.st.fcallRefused.Store(true)
			next = evalsha
		}
	case c.form == evalsha && redis.HasErrorPrefix(err, "NOSCRIPT"):
		next = eval
	case c.form != fcall && c.mode == Auto && (refused(err, "evalsha") || refused(err, "eval")):
		c.st.preferFunctions()
		c.refusal = err
		next = fcall
	}
	if next == 0 || c.tried&next != 0 {
		return false
	}
	c.form = next
	return true
}

// Err returns the error of the call whose last command returned err: err, or, when that says
// the function is missing or FCALL refused after Redis refused EVALSHA or EVAL, the refusal
// (whose Explain says both what to load and what to grant).
func (c *Call) Err(err error) error {
	if err != nil && c.refusal != nil && (functionMissing(err) || refused(err, "fcall")) {
		return c.refusal
	}
	return err
}

// Run runs s with keys and args through p (the client of st, one of its connections or
// pipelines), in mode, sending as many commands as the replies ask (Call). The error of the
// returned command is Redis's; Explain it.
func (s *Script) Run(ctx context.Context, st *State, p Processor, mode Mode, keys []any, args ...any) *redis.Cmd {
	c := s.Start(st, mode)
	for {
		cmd := c.Command(ctx, keys, args...)
		_ = p.Process(ctx, cmd) // the error is cmd.Err()
		if err := cmd.Err(); !c.Retry(err) {
			if final := c.Err(err); final != err {
				cmd.SetErr(final)
			}
			return cmd
		}
	}
}

// functionMissing reports whether err says that Redis does not know the function: the library
// is not loaded (on this node), or Redis has no functions (Redis 6: unknown command).
func functionMissing(err error) bool {
	msg := strings.ToLower(err.Error())
	return strings.Contains(msg, "function not found") || strings.Contains(msg, "unknown command")
}

// refused reports whether err is Redis's ACL refusal of the command cmd (lower case) itself,
// not of a key or channel.
func refused(err error, cmd string) bool {
	return redis.IsPermissionError(err) && strings.Contains(strings.ToLower(err.Error()), "'"+cmd+"'")
}

// Op is a call of a script prepared for a pipeline, which cannot wait for one reply before
// sending the next command: send Command, and after the pipeline ran, Retry says whether to
// send Command again in another pipeline.
type Op struct {
	call       Call
	keys, args []any
}

// Prepare returns the call of s with keys (boxed) and args through the client of st, in mode.
func (s *Script) Prepare(st *State, mode Mode, keys []any, args ...any) *Op {
	return &Op{call: s.Start(st, mode), keys: keys, args: args}
}

// Command returns the command to send now.
func (o *Op) Command(ctx context.Context) *redis.Cmd { return o.call.Command(ctx, o.keys, o.args...) }

// Retry is Call.Retry: whether to send Command again after the command returned err.
func (o *Op) Retry(err error) bool { return o.call.Retry(err) }

// Finish gives cmd, the last command sent, the error of the call (Call.Err).
func (o *Op) Finish(cmd *redis.Cmd) {
	if err := cmd.Err(); err != nil {
		if final := o.call.Err(err); final != err {
			cmd.SetErr(final)
		}
	}
}

// Script returns the script called.
func (o *Op) Script() *Script { return o.call.s }
