// Package proposal is a measurement prototype, not an API: the hot paths of pkg/lease
// (Acquire, Renew, Release) rewritten the way docs/PERFORMANCE.md recommends, so that the
// benchmark can show what the change buys before it is made in pkg/lease. It runs pkg/lease's
// own scripts, read from the repository, and speaks the same protocol: records, keys,
// replies and events are those of docs/PROTOCOL.md.
//
// The changes, each one measured by the benchmarks of package bench:
//
//  1. Commands are built once: the constant arguments of each script call ("evalsha", the
//     SHA, the key count, the keys, the owner, the channel) are boxed into interface values
//     when the Lease is made, and a call copies them into one fresh []any. go-redis's
//     EvalSha boxes every argument again on every call (one allocation each).
//  2. The encoded record of the term that Acquire returned is kept with its boxed form, so
//     that Renew and Release of that term format and box nothing (Record.String allocates
//     twice per call today).
//  3. A record is parsed without formatting its token back to check for leading zeros
//     (ParseRecord allocates a string for that today).
//  4. The TTL argument is boxed once per distinct TTL, not once per call.
package proposal

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/lease"
)

// Scripts are the sources of pkg/lease's scripts.
type Scripts struct {
	Acquire, Renew, Release string
}

// LoadScripts reads pkg/lease/scripts/*.lua below the repository root.
func LoadScripts(root string) (Scripts, error) {
	var s Scripts
	for _, f := range []struct {
		name string
		dst  *string
	}{{"acquire.lua", &s.Acquire}, {"renew.lua", &s.Renew}, {"release.lua", &s.Release}} {
		b, err := os.ReadFile(filepath.Join(root, "pkg", "lease", "scripts", f.name))
		if err != nil {
			return s, fmt.Errorf("read lease script: %w", err)
		}
		*f.dst = string(b)
	}
	return s, nil
}

type script struct {
	src, sha any // boxed once
}

func newScript(src string) script {
	h := sha1.Sum([]byte(src))
	return script{src: src, sha: hex.EncodeToString(h[:])}
}

// Lease is one lease, like lease.Lease with AnnounceRenewals.
type Lease struct {
	client                   redis.UniversalClient
	name                     string
	acquire, renew, release  script
	key, tokenKey, owner, ch any // boxed once
	ttl                      atomic.Pointer[boxedInt]
	mu                       sync.Mutex // guards term; storing a struct under a mutex allocates nothing
	term                     boxedTerm
	evalsha, eval, one, two  any
}

type boxedInt struct {
	v   int64
	box any
}

type boxedTerm struct {
	rec lease.Record
	box any // the encoded record
}

// New returns the lease called name (default prefix) for identity, with a fresh instance id.
func New(client redis.UniversalClient, name, identity string, s Scripts) (*Lease, error) {
	instance, err := lease.NewInstanceID()
	if err != nil {
		return nil, err
	}
	base := lease.DefaultPrefix + ":{" + name + "}:"
	owner := instance + ":" + identity
	return &Lease{
		client: client, name: name,
		acquire: newScript(s.Acquire), renew: newScript(s.Renew), release: newScript(s.Release),
		key: base + "lease", tokenKey: base + "token", owner: owner, ch: base + "events",
		evalsha: "evalsha", eval: "eval", one: 1, two: 2,
	}, nil
}

func (l *Lease) ttlArg(ttl time.Duration) (any, error) {
	if ttl < time.Millisecond || ttl%time.Millisecond != 0 {
		return nil, fmt.Errorf("ttl %v is not a whole number of milliseconds of at least 1ms", ttl)
	}
	ms := ttl.Milliseconds()
	if b := l.ttl.Load(); b != nil && b.v == ms {
		return b.box, nil
	}
	b := &boxedInt{v: ms, box: ms}
	l.ttl.Store(b)
	return b.box, nil
}

func (l *Lease) termArg(term lease.Record) any {
	l.mu.Lock()
	t := l.term
	l.mu.Unlock()
	if t.box != nil && t.rec == term {
		return t.box
	}
	return term.String()
}

// run sends args (args[0] "evalsha", args[1] the SHA) and falls back to EVAL on NOSCRIPT.
func (l *Lease) run(ctx context.Context, s script, args []any) *redis.Cmd {
	cmd := redis.NewCmd(ctx, args...)
	_ = l.client.Process(ctx, cmd)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") { // HasErrorPrefix allocates
		args[0], args[1] = l.eval, s.src
		cmd = redis.NewCmd(ctx, args...)
		_ = l.client.Process(ctx, cmd)
	}
	return cmd
}

// Acquire is lease.Lease.Acquire.
func (l *Lease) Acquire(ctx context.Context, ttl time.Duration) (bool, lease.Status, error) {
	ms, err := l.ttlArg(ttl)
	if err != nil {
		return false, lease.Status{}, fmt.Errorf("acquire lease %q: %w", l.name, err)
	}
	cmd := l.run(ctx, l.acquire, []any{l.evalsha, l.acquire.sha, l.two, l.key, l.tokenKey, l.owner, ms, l.ch})
	reply, err := cmd.Slice()
	if err != nil {
		return false, lease.Status{}, fmt.Errorf("acquire lease %q: %w", l.name, err)
	}
	if len(reply) != 3 {
		return false, lease.Status{}, fmt.Errorf("acquire lease %q: unexpected reply %v", l.name, reply)
	}
	ok, _ := reply[0].(int64)
	value, _ := reply[1].(string)
	pttl, _ := reply[2].(int64)
	rec, err := parseRecord(value)
	if err != nil {
		return false, lease.Status{}, fmt.Errorf("acquire lease %q: %w", l.name, err)
	}
	if ok == 1 {
		l.mu.Lock()
		l.term = boxedTerm{rec: rec, box: reply[1]}
		l.mu.Unlock()
	}
	d := time.Duration(pttl) * time.Millisecond
	if pttl < 0 {
		d = lease.NoExpiry
	}
	return ok == 1, lease.Status{Held: true, Record: rec, TTL: d}, nil
}

// Renew is lease.Lease.Renew with AnnounceRenewals.
func (l *Lease) Renew(ctx context.Context, term lease.Record, ttl time.Duration) (bool, error) {
	ms, err := l.ttlArg(ttl)
	if err != nil {
		return false, fmt.Errorf("renew lease %q: %w", l.name, err)
	}
	n, err := l.run(ctx, l.renew, []any{l.evalsha, l.renew.sha, l.one, l.key, l.termArg(term), ms, l.ch}).Int64()
	if err != nil {
		return false, fmt.Errorf("renew lease %q: %w", l.name, err)
	}
	return n == 1, nil
}

// Release is lease.Lease.Release.
func (l *Lease) Release(ctx context.Context, term lease.Record) (bool, error) {
	n, err := l.run(ctx, l.release, []any{l.evalsha, l.release.sha, l.one, l.key, l.termArg(term), l.ch}).Int64()
	if err != nil {
		return false, fmt.Errorf("release lease %q: %w", l.name, err)
	}
	return n == 1, nil
}

// parseRecord is lease.ParseRecord without the allocation: a token is accepted when it is
// all digits, has no leading zero and fits in an int64.
func parseRecord(s string) (lease.Record, error) {
	rest, ok := strings.CutPrefix(s, lease.RecordVersion+":")
	if !ok {
		return lease.Record{}, fmt.Errorf("parse record %q: %w", s, lease.ErrBadRecord)
	}
	tok, rest, ok := strings.Cut(rest, ":")
	if !ok || tok == "" || tok[0] < '1' || tok[0] > '9' {
		return lease.Record{}, fmt.Errorf("parse record %q: %w: bad token", s, lease.ErrBadRecord)
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return lease.Record{}, fmt.Errorf("parse record %q: %w: bad token", s, lease.ErrBadRecord)
		}
	}
	token, err := strconv.ParseInt(tok, 10, 64)
	if err != nil {
		return lease.Record{}, fmt.Errorf("parse record %q: %w: %w", s, lease.ErrBadRecord, err)
	}
	instance, identity, ok := strings.Cut(rest, ":")
	if !ok || instance == "" {
		return lease.Record{}, fmt.Errorf("parse record %q: %w: %w", s, lease.ErrBadRecord, errors.New("missing instance id"))
	}
	return lease.Record{Token: token, Instance: instance, Identity: identity}, nil
}
