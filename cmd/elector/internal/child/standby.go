package child

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/klog/v2"
)

// Standby is a shim started ahead of the command (see Prepare): it has run this program's
// start-up already and waits, idle, for the go-ahead, so that starting the command costs
// only the command's own fork and exec. A Standby is used once, by Start or Close.
type Standby struct {
	spec Spec

	mu   sync.Mutex
	p    *Process // the waiting shim; nil once used, or when Start must start cold
	used bool     // Start or Close was called
}

// errStandbyUsed is the error of a second Start of a Standby, or of Start after Close.
var errStandbyUsed = errors.New("the prepared start was used already")

// Prepare starts a shim for spec that waits for Standby.Start and starts nothing before
// it. The shim dies without starting anything when Close is called, when this process dies
// and when it loses its control pipe. Without a shim to prepare (spec.Shim false, not
// Linux, no /proc, stdin a terminal in the foreground, whose hand-over belongs to the
// start, or the command not found) the Standby starts the command cold, as Start does,
// which also reports any error then. spec.Env is the shim's own environment, not the
// command's: that comes with Standby.Start.
func Prepare(spec Spec) *Standby {
	s := &Standby{spec: spec}
	p, err := newProcess(spec)
	if err != nil || p.pipes == nil || p.tty >= 0 {
		return s
	}
	if err := p.fork(); err != nil {
		klog.V(2).InfoS("Cannot prepare the shim ahead of the command; it starts with the command", "err", err)
		return s
	}
	s.p = p
	return s
}

// Start starts the command with the environment env (nil: this process's) as Start does,
// through the prepared shim: the shim is told to go ahead only here. If that shim has died
// meanwhile, which Start finds out before it sends the go-ahead, it starts the command
// with a new shim instead. ctx is Start's.
func (s *Standby) Start(ctx context.Context, env []string) (*Process, error) {
	spec := s.spec
	spec.Env = env
	p, used := s.take()
	switch {
	case used:
		return nil, fmt.Errorf("start %q: %w", spec.Path, errStandbyUsed)
	case p == nil:
		return Start(ctx, spec)
	}
	if err := ctx.Err(); err != nil {
		p.giveUp()
		return nil, fmt.Errorf("start %q: %w", spec.Path, err)
	}
	sent, err := p.begin(env)
	if err != nil && !sent {
		klog.InfoS("The prepared shim is gone; starting the command with a new one", "shimPid", p.pid, "err", err)
		return Start(ctx, spec)
	}
	if err != nil {
		return nil, fmt.Errorf("start %q: %w", spec.Path, err)
	}
	p.watch(ctx)
	return p, nil
}

// Close makes the prepared shim exit without starting anything; Start can no longer be
// called. It does not wait for the shim's exit.
func (s *Standby) Close() {
	if p, _ := s.take(); p != nil {
		p.giveUp()
	}
}

// Exited returns a channel closed when the prepared shim has exited, whether it was used
// or not; nil when no shim was prepared.
func (s *Standby) Exited() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return nil
	}
	return s.p.done
}

// take marks s used and returns its prepared shim, nil without one; used tells that s had
// been used before.
func (s *Standby) take() (p *Process, used bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, used = s.p, s.used
	s.p, s.used = nil, true
	return p, used
}

// giveUp ends a shim that never got the go-ahead: the end of its control pipe makes it
// exit.
func (p *Process) giveUp() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pipes.ctrl.Close()
}
