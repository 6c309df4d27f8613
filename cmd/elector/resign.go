package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// Flag names of elector resign, and of the /resign endpoint of run and sidecar.
const (
	flagTo             = "to"
	flagHoldOff        = "hold-off"
	flagResignEndpoint = "resign-endpoint"
)

// Defaults of elector resign.
const (
	defaultHoldOff       = lease.DefaultResignHoldOff
	defaultResignTimeout = 30 * time.Second
)

// resignOptions are the flags of elector resign.
type resignOptions struct {
	to      string
	holdOff time.Duration
	timeout time.Duration
	output  string
}

func (o *resignOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.to, flagTo, "", "`identity` of the replica that must take over; empty: any replica but the current holder")
	fs.DurationVar(&o.holdOff, flagHoldOff, defaultHoldOff, "after the release, only --to (or anyone but the old holder) may acquire for this `duration`; then anyone may")
	fs.DurationVar(&o.timeout, flagTimeout, defaultResignTimeout, "give up (exit 1) if no new term began within this `duration`")
	fs.StringVarP(&o.output, flagOutput, "o", "text", "output `format` of the new holder: text, json or yaml")
}

// validate checks the flags; every error names the flag.
func (o *resignOptions) validate() error {
	if o.to != "" {
		if err := lease.ValidateIdentity(o.to); err != nil {
			return fmt.Errorf("--%s: identity %q %v", flagTo, o.to, err)
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{flagHoldOff, o.holdOff}, {flagTimeout, o.timeout}} {
		if d.v < time.Millisecond || d.v%time.Millisecond != 0 {
			return fmt.Errorf("--%s: must be a positive whole number of milliseconds such as 15s or 500ms, got %v", d.flag, d.v)
		}
	}
	return validateOutput(o.output)
}

// resignCmd is `elector resign`: ask the holder to step down and wait for the next term.
func (c *cli) resignCmd(ctx context.Context, args []string) int {
	cmd, _ := findCommand("resign")
	const who = "elector resign"
	fs := newFlagSet(cmd)
	var ro resignOptions
	ro.addFlags(fs.group("Resign flags"))
	var co commonOptions
	co.addObserverFlags(fs)
	fs.addKlogFlags()
	if code, done := c.parseArgs(fs, args); done {
		return code
	}
	var err error
	if fs.all.NArg() > 0 {
		err = errOnlyFlags(fs, "resign")
	}
	if err == nil {
		err = ro.validate()
	}
	if err == nil {
		err = co.complete(c)
	}
	if err != nil {
		return c.usageError(who, err)
	}
	client, err := co.newClient()
	if err != nil {
		return c.runtimeError(who, err)
	}
	defer func() { _ = client.Close() }()
	l, err := lease.New(client, co.lease.name, lease.Options{Prefix: co.lease.prefix})
	if err != nil {
		return c.usageError(who, err)
	}
	ctx, cancel := context.WithTimeout(ctx, ro.timeout)
	defer cancel()
	next, code, err := resign(ctx, &co, &ro, l)
	if err != nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", who, err)
		return code
	}
	if err := writeStatus(c.stdout, ro.output, next); err != nil {
		return c.runtimeError(who, fmt.Errorf("write the new holder: %w", err))
	}
	return exitOK
}

// resign writes the request and follows the lease, subscribed before the request is written
// so that no event is missed, until a term newer than the resigning one begins. It returns
// that term, or an error with the exit code.
func resign(ctx context.Context, co *commonOptions, ro *resignOptions, l *lease.Lease) (leaseStatus, int, error) {
	name := co.lease.name
	f, err := newLeaseFollower(ctx, co, l)
	if err != nil {
		return leaseStatus{}, exitError, readError(fmt.Sprintf("cannot subscribe to the events of lease %q", name), co, err)
	}
	defer f.close()
	// The request names the term read first: the client retries a command whose reply was
	// lost, and a retry after the holder changed must not ask the next term to resign too.
	cctx, cancel := context.WithTimeout(ctx, callTimeout(co.lease.renewDeadline))
	defer cancel()
	cur, err := l.Get(cctx)
	if err != nil {
		return leaseStatus{}, exitError, readError(fmt.Sprintf("cannot read lease %q", name), co, err)
	}
	if !cur.Held {
		return leaseStatus{}, exitNoLeader, fmt.Errorf("lease %q has no holder: nothing to resign", name)
	}
	f.armExpiry(newLeaseStatus(name, l.Keys().Lease, cur))
	_, err = l.RequestResign(cctx, lease.ResignRequest{Target: ro.to, HoldOff: ro.holdOff, Timeout: ro.timeout, Term: cur.Record})
	switch {
	case errors.Is(err, lease.ErrTargetIsHolder):
		return leaseStatus{}, exitError, fmt.Errorf("--%s %q holds lease %q already: nothing to hand over", flagTo, ro.to, name)
	case errors.Is(err, lease.ErrOtherTerm):
		// The term ended meanwhile (or a retry of a request already written found its
		// successor): wait for, or report, the next term as for a request that worked.
		klog.InfoS("The holder's term ended before the request was written", "lease", name, "holder", cur.Record.Identity, "token", cur.Record.Token)
		if now, err := l.Get(cctx); err == nil && now.Held && now.Record.Token > cur.Record.Token {
			return finishResign(ro, cur.Record, newLeaseStatus(name, l.Keys().Lease, now), time.Now(), endedBeforeRequest)
		}
	case err != nil:
		return leaseStatus{}, exitError, readError(fmt.Sprintf("cannot write the resign request of lease %q", name), co, err)
	default:
		klog.InfoS("Asked the holder to resign; it does so at its next renewal", "lease", name, "holder", cur.Record.Identity, "token", cur.Record.Token, "to", ro.to, "holdOff", ro.holdOff)
	}
	return awaitSuccessor(ctx, co, ro, l, f, cur.Record)
}

// awaitSuccessor follows the lease until a term newer than old begins: announced by an
// event, or found by a read after a resubscription or at the expiry of the term last seen.
func awaitSuccessor(ctx context.Context, co *commonOptions, ro *resignOptions, l *lease.Lease, f *leaseFollower, old lease.Record) (leaseStatus, int, error) {
	start := time.Now()
	released := false
	for {
		u, err := f.next(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return leaseStatus{}, exitError, resignTimeout(co, ro, l, old, released)
		case err != nil:
			return leaseStatus{}, exitError, fmt.Errorf("the request was written, but the lease can no longer be followed: %w", err)
		case u.isRead():
			if u.read.Holder != "" && u.read.Token > old.Token {
				return finishResign(ro, old, u.read, start, whyNotTarget(ro, released))
			}
		case u.event.Kind == lease.Released && u.event.Record == old:
			released = true
			klog.V(2).InfoS("The holder released the lease", "lease", co.lease.name, "token", old.Token, "after", time.Since(start))
		case u.event.Kind == lease.Acquired && u.event.Record.Token > old.Token:
			next := newLeaseStatus(co.lease.name, l.Keys().Lease, lease.Status{Held: true, Record: u.event.Record, TTL: u.event.TTL})
			return finishResign(ro, old, next, start, whyNotTarget(ro, released))
		}
	}
}

// finishResign checks that the new term is --to's, when one was named; why says how another
// replica could take over, for the error.
func finishResign(ro *resignOptions, old lease.Record, next leaseStatus, start time.Time, why string) (leaseStatus, int, error) {
	if ro.to != "" && next.Holder != ro.to {
		return leaseStatus{}, exitError, fmt.Errorf("%q took over (token %d), not --%s %q: %s",
			next.Holder, next.Token, flagTo, ro.to, why)
	}
	klog.InfoS("A new term began", "from", old.Identity, "to", next.Holder, "token", next.Token, "after", time.Since(start))
	next.Transitions, next.Reserved = nil, nil // what a read adds: one output, however it was found
	return next, exitOK, nil
}

// endedBeforeRequest is why another replica took over when the holder's term ended before
// the request was written.
const endedBeforeRequest = "the holder's term ended before the request was written, so nothing was reserved"

// whyNotTarget explains a successor other than --to after the request was written: the
// reservation made by the holder's release lapsed (released), or no release was heard, so
// none was made.
func whyNotTarget(ro *resignOptions, released bool) string {
	if released {
		return fmt.Sprintf("the reservation made by the holder's release lapsed after --%s %v", flagHoldOff, ro.holdOff)
	}
	return "no release of the holder's term was heard: a term that ends without one (it expires, as after a crash, a pause or a lost connection) reserves nothing"
}

// resignTimeout explains what did not happen before --timeout.
func resignTimeout(co *commonOptions, ro *resignOptions, l *lease.Lease, old lease.Record, released bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout(co.lease.renewDeadline))
	defer cancel()
	now, err := l.Get(ctx)
	stillHeld := err == nil && now.Held && now.Record == old
	switch {
	case !released && (stillHeld || err != nil):
		return fmt.Errorf("%q (token %d) did not step down within --%s %v: it does not take part in the resign protocol (a member of an election.Group, or an elector older than this one), or its work has not stopped yet (OnStartedLeading has not returned, or the command of elector run ignores its stop signal); the request expires by itself",
			old.Identity, old.Token, flagTimeout, ro.timeout)
	case ro.to != "":
		left := fmt.Sprintf("--%s %v after the release", flagHoldOff, ro.holdOff)
		if r, err := l.GetReservation(ctx); err == nil && r != nil && r.TTL >= 0 {
			left = fmt.Sprintf("in %v", r.TTL)
		}
		return fmt.Errorf("%q released the lease, but --%s %q did not take over within --%s %v: is it running, with an elector that knows the resign protocol? Nobody else may lead until the reservation lapses (%s); then any replica may",
			old.Identity, flagTo, ro.to, flagTimeout, ro.timeout, left)
	default:
		return fmt.Errorf("%q released the lease, but no other replica took over within --%s %v: is another replica campaigning? After --%s %v any replica, %q included, may lead again",
			old.Identity, flagTimeout, ro.timeout, flagHoldOff, ro.holdOff, old.Identity)
	}
}

// Values of --resign-endpoint.
const (
	resignLoopback = "loopback"
	resignAny      = "any"
	resignOff      = "off"
)

// validateResignEndpoint checks --resign-endpoint ("" is the default, loopback).
func validateResignEndpoint(v string) error {
	switch v {
	case "", resignLoopback, resignAny, resignOff:
		return nil
	}
	return fmt.Errorf("--%s: want %s, %s or %s, got %q", flagResignEndpoint, resignLoopback, resignAny, resignOff, v)
}

// resignTimeoutHTTP bounds how long POST /resign waits for the step-down: below the server's
// write timeout. A step-down that takes longer completes all the same (202).
const resignTimeoutHTTP = writeTimeout - time.Second

// resignHandler is POST /resign[?to=IDENTITY]: Elector.ResignTo, from the peers policy allows.
func resignHandler(e *election.Elector, policy string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "method not allowed: POST /resign[?to=IDENTITY]", http.StatusMethodNotAllowed)
			return
		}
		switch {
		case policy == resignOff:
			http.Error(w, "resign is disabled on this replica (--"+flagResignEndpoint+"=off)", http.StatusForbidden)
			return
		case policy != resignAny && !loopbackPeer(r.RemoteAddr):
			http.Error(w, "resign is allowed from loopback only (kubectl exec or port-forward; --"+flagResignEndpoint+"=any allows every peer)", http.StatusForbidden)
			return
		}
		to := r.URL.Query().Get("to")
		token := e.Token()
		ctx, cancel := context.WithTimeout(r.Context(), resignTimeoutHTTP)
		defer cancel()
		err := e.ResignTo(ctx, to)
		status := http.StatusOK
		switch {
		case errors.Is(err, election.ErrNotLeader):
			http.Error(w, "not the leader: "+err.Error(), http.StatusConflict)
			return
		case errors.Is(err, lease.ErrTargetIsHolder), to != "" && lease.ValidateIdentity(to) != nil:
			http.Error(w, "bad ?to: "+err.Error(), http.StatusBadRequest)
			return
		case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
			status = http.StatusAccepted // still stepping down
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		klog.InfoS("Resigned on request", "remote", r.RemoteAddr, "to", to, "token", token, "done", status == http.StatusOK)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(struct {
			Resigned bool   `json:"resigned"`
			Token    int64  `json:"token"`
			To       string `json:"to"`
		}{status == http.StatusOK, token, to})
	})
}

// loopbackPeer reports whether a request's RemoteAddr is 127.0.0.0/8 or ::1.
func loopbackPeer(remoteAddr string) bool {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
