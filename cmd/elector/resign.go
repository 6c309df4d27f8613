package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// Flag names of elector resign, and of the /resign endpoint of run and sidecar.
const (
	flagTo             = "to"
	flagHoldOff        = "hold-off"
	flagResignEndpoint = "resign-endpoint"
)

// exitRefused: resign refused before anything was written (docs/CLI.md, "Exit codes").
const exitRefused = 5

// Defaults of elector resign.
const (
	defaultHoldOff       = leasekit.DefaultResignHoldOff
	defaultResignTimeout = 30 * time.Second
)

// resignOptions are the flags of elector resign.
type resignOptions struct {
	to      string
	holdOff time.Duration
	timeout time.Duration
	output  string
	force   bool
}

func (o *resignOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.to, flagTo, "", "`identity` of the replica that must take over; empty: any replica but the current holder")
	fs.DurationVar(&o.holdOff, flagHoldOff, defaultHoldOff, "after the release, only --to (or anyone but the old holder) may acquire for this `duration`; then anyone may")
	fs.DurationVar(&o.timeout, flagTimeout, defaultResignTimeout, "give up (exit 1) if no new term began within this `duration`")
	fs.StringVarP(&o.output, flagOutput, "o", "text", "output `format` of the new holder: text, json or yaml")
	fs.BoolVar(&o.force, flagForce, false, "resign even when --to is no live candidate of the lease, or no candidate but the holder is live (nobody may lead during --hold-off)")
}

// validate checks the flags; every error names the flag.
func (o *resignOptions) validate() error {
	if o.to != "" {
		if err := leasewire.ValidateIdentity(o.to); err != nil {
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

// resignLong is the paragraph of elector resign's help; docs/CLI.md#elector-resign has the
// reservation and what each exit code says.
const resignLong = `Ask the holder of the lease to step down, for a planned switchover, and wait until a new
term begins; print the new holder as elector status does. For --hold-off only --to (or anyone
but the old holder) may acquire. Refused, before anything is written, when --to is no live
candidate of the lease (elector status lists them) or no candidate but the holder is live,
unless --force. Exit 0 when a new term began, 3 when nobody holds the lease, 5 when refused, 1
when --timeout passed. Needs the Redis user of run and sidecar, not the observer's.`

// newResignCmd returns `elector resign`: ask the holder to step down and wait for the next term.
func (c *cli) newResignCmd() *cobra.Command {
	var ro resignOptions
	var co commonOptions
	cmd := c.newCommand("resign [flags] [--to IDENTITY] [-o text|json|yaml]", "ask the holder of a lease to step down, and wait for the next leader (switchover)", resignLong,
		func(ctx context.Context, cmd *cobra.Command, args []string) int {
			return c.resign(ctx, cmd, args, &ro, &co)
		})
	addGroup(cmd, "Resign flags", ro.addFlags)
	co.addObserverFlags(cmd)
	addKlogFlags(cmd)
	return cmd
}

// resign is `elector resign` once cobra parsed its flags.
func (c *cli) resign(ctx context.Context, cmd *cobra.Command, args []string, ro *resignOptions, co *commonOptions) int {
	const who = "elector resign"
	if err := c.checkResign(cmd, args, ro, co); err != nil {
		return c.usageError(who, err)
	}
	client, err := co.newClient()
	if err != nil {
		return c.runtimeError(who, err)
	}
	defer func() { _ = client.Close() }()
	l, err := leasekit.New(client, co.lease.name, lease.Options{Prefix: co.lease.prefix})
	if err != nil {
		return c.usageError(who, err)
	}
	e, err := observeLease(co, client)
	if err != nil {
		return c.usageError(who, err)
	}
	ctx, cancel := context.WithTimeout(ctx, ro.timeout)
	defer cancel()
	r := &resigner{co: co, ro: ro, l: l, followers: countFollowers(client, l.Keys().Events), warn: c.stderr}
	next, code, err := r.run(ctx, e)
	if err != nil {
		fmt.Fprintf(c.stderr, "%s: %v\n", who, err)
		return code
	}
	if err := writeStatus(c.stdout, ro.output, next); err != nil {
		return c.runtimeError(who, fmt.Errorf("write the new holder: %w", err))
	}
	return exitOK
}

// checkResign checks the arguments and flags of elector resign; every error is a usage error.
func (c *cli) checkResign(cmd *cobra.Command, args []string, ro *resignOptions, co *commonOptions) error {
	if len(args) > 0 {
		return errOnlyFlags(cmd, args)
	}
	if err := ro.validate(); err != nil {
		return err
	}
	return co.complete(c)
}

// resigner is one elector resign: the request, then the wait for the next term.
type resigner struct {
	co        *commonOptions
	ro        *resignOptions
	l         *leasekit.Lease
	followers followerCount
	warn      io.Writer // where what will happen is said before it is done

	old      lease.Record // the term asked to resign
	released bool         // its release was heard
	why      string       // why another replica than --to could take over
}

// run follows the lease with the library's Observe, which subscribes before its first read so
// that no event is missed: the first change names the holder, to which the request is written;
// then the changes are followed until a term newer than the resigning one begins. It returns
// that term, or an error with the exit code.
func (r *resigner) run(ctx context.Context, e *election.Elector) (leaseStatus, int, error) {
	name := r.co.lease.name
	start, asked := time.Now(), false
	for change, err := range e.Observe(ctx) {
		switch {
		case err != nil && !asked:
			return leaseStatus{}, exitError, readError(fmt.Sprintf("cannot follow lease %q", name), r.co, err)
		case err != nil:
			return leaseStatus{}, exitError, fmt.Errorf("the request was written, but the lease can no longer be followed: %w", readError(fmt.Sprintf("cannot follow lease %q", name), r.co, err))
		case !asked:
			asked = true
			if code, err := r.request(ctx, change); err != nil {
				return leaseStatus{}, code, err
			}
		case change.Kind == "released" && lease.Record(change.Record) == r.old:
			r.released, r.why = true, whyNotTarget(r.ro, true)
			klog.V(2).InfoS("The holder released the lease", "lease", name, "token", r.old.Token, "after", time.Since(start))
		case change.Kind == "acquired" && change.Record.Token > r.old.Token:
			return r.finish(ctx, changeStatus(name, r.l.Keys().Lease, change), start)
		}
	}
	return leaseStatus{}, exitError, r.timeout(ctx) // ctx ended: --timeout
}

// request writes the request to the term first, the lease as Observe found it. The request
// names that term: the client retries a command whose reply was lost, and a retry after the
// holder changed must not ask the next term to resign too.
func (r *resigner) request(ctx context.Context, first election.Change) (int, error) {
	name := r.co.lease.name
	if first.Kind != "held" {
		return exitNoLeader, fmt.Errorf("lease %q has no holder: nothing to resign", name)
	}
	r.old, r.why = lease.Record(first.Record), whyNotTarget(r.ro, false)
	if code, err := r.checkSuccessor(ctx); err != nil {
		return code, err
	}
	_, err := r.l.RequestResign(ctx, leasekit.ResignRequest{Target: r.ro.to, HoldOff: r.ro.holdOff, Timeout: r.ro.timeout, Term: r.old})
	switch {
	case errors.Is(err, leasekit.ErrTargetIsHolder):
		return exitError, fmt.Errorf("--%s %q holds lease %q already: nothing to hand over", flagTo, r.ro.to, name)
	case errors.Is(err, leasekit.ErrOtherTerm):
		// The term ended meanwhile (or a retry of a request already written found its
		// successor): wait for, or report, the next term as for a request that worked; its
		// acquire is announced after the subscription, so Observe reports it.
		klog.InfoS("The holder's term ended before the request was written", "lease", name, "holder", r.old.Identity, "token", r.old.Token)
		r.why = endedBeforeRequest
	case err != nil:
		return exitError, readError(fmt.Sprintf("cannot write the resign request of lease %q", name), r.co, err)
	default:
		klog.InfoS("Asked the holder to resign; it does so at its next renewal", "lease", name, "holder", r.old.Identity, "token", r.old.Token, "to", r.ro.to, "holdOff", r.ro.holdOff)
	}
	return exitOK, nil
}

// checkSuccessor refuses a request nobody could follow, before anything is written: with the
// lease's candidate registry, --to must be a live candidate and, without --to, some candidate
// but the holder must be live (--force goes ahead with a warning). When the holder is not in
// the registry (electors that predate it) or it cannot be read, it falls back to counting the
// subscribers of the events channel, which cannot tell replicas from status --watch.
func (r *resigner) checkSuccessor(ctx context.Context) (int, error) {
	if r.ro.to != "" && r.ro.to == r.old.Identity {
		return exitOK, nil // the request is refused: ErrTargetIsHolder
	}
	c, err := r.l.ReadCandidates(ctx)
	if err != nil {
		klog.V(2).InfoS("Cannot read the candidate registry; counting the followers instead", "lease", r.co.lease.name, "err", err)
	}
	if err != nil || !c.Has(r.old.Identity) {
		return r.checkFollowers(ctx)
	}
	err = leasekit.CheckSuccessor(c, r.old.Identity, r.ro.to)
	switch {
	case err == nil:
		return exitOK, nil
	case r.ro.force:
		fmt.Fprintf(r.warn, "warning: %v; resigning anyway (--%s)\n", err, flagForce)
		return exitOK, nil
	}
	return exitRefused, fmt.Errorf("refused, nothing was written: lease %q: %v (--%s resigns anyway)", r.co.lease.name, err, flagForce)
}

// checkFollowers is checkSuccessor without the registry: every campaigning elector follows
// the lease on its events channel while it does not lead, so the subscribers of the channel,
// this command's own excepted, are the replicas that can take over (and any status --watch);
// their identities are not known.
func (r *resigner) checkFollowers(ctx context.Context) (int, error) {
	n, err := r.followers(ctx)
	if err != nil {
		klog.V(2).InfoS("Cannot count the replicas that follow the lease; resigning anyway", "lease", r.co.lease.name, "err", err)
		return exitOK, nil
	}
	n-- // this command's own subscription
	name, holder := r.co.lease.name, r.old.Identity
	switch {
	case n <= 0 && r.ro.to != "" && !r.ro.force:
		return exitRefused, fmt.Errorf("no replica but the holder %q follows lease %q (nobody else is subscribed to its events channel), so --%s %q cannot take over: nothing written. Start %q first",
			holder, name, flagTo, r.ro.to, r.ro.to)
	case n <= 0:
		fmt.Fprintf(r.warn, "warning: no replica but the holder %q follows lease %q (nobody else is subscribed to its events channel): after it steps down nobody leads until --%s %v has passed and it takes the lease again\n",
			holder, name, flagHoldOff, r.ro.holdOff)
	case r.ro.to != "":
		fmt.Fprintf(r.warn, "note: %d other process(es) follow lease %q, but the replicas do not advertise themselves in its candidate registry (electors older than this one), so whether --%s %q is one of them cannot be checked: if it is not, nobody leads until --%s %v after the release\n",
			n, name, flagTo, r.ro.to, flagHoldOff, r.ro.holdOff)
	}
	return exitOK, nil
}

// finish checks that the new term is --to's, when one was named, and adds the count of terms,
// as elector status shows it.
func (r *resigner) finish(ctx context.Context, next leaseStatus, start time.Time) (leaseStatus, int, error) {
	if r.ro.to != "" && next.Holder != r.ro.to {
		return leaseStatus{}, exitError, fmt.Errorf("%q took over (token %d), not --%s %q: %s",
			next.Holder, next.Token, flagTo, r.ro.to, r.why)
	}
	klog.InfoS("A new term began", "from", r.old.Identity, "to", next.Holder, "token", next.Token, "after", time.Since(start))
	if err := addTermsAndReservation(context.WithoutCancel(ctx), r.co, r.l, &next); err != nil {
		return leaseStatus{}, exitError, fmt.Errorf("%q took over (token %d), but %w", next.Holder, next.Token, err)
	}
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

// timeout explains what did not happen before --timeout. Its reads are bounded by the
// client's own timeouts (ctx has ended).
func (r *resigner) timeout(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	old, ro, l := r.old, r.ro, r.l
	if old.Token == 0 {
		return fmt.Errorf("cannot read lease %q within --%s %v from %s", r.co.lease.name, flagTimeout, ro.timeout, redisDescription(r.co.redis))
	}
	now, err := l.Get(ctx)
	stillHeld := err == nil && now.Held && now.Record == old
	switch {
	case !r.released && (stillHeld || err != nil):
		return fmt.Errorf("%q (token %d) did not step down within --%s %v: it does not take part in the resign protocol (a member of an election.Group, or an elector older than this one), or its work has not stopped yet (OnStartedLeading has not returned, or the command of elector run ignores its stop signal); the request expires by itself",
			old.Identity, old.Token, flagTimeout, ro.timeout)
	case ro.to != "":
		left := fmt.Sprintf("--%s %v after the release", flagHoldOff, ro.holdOff)
		if res, err := l.GetReservation(ctx); err == nil && res != nil && res.TTL >= 0 {
			left = fmt.Sprintf("in %v", res.TTL)
		}
		return fmt.Errorf("%q released the lease, but --%s %q did not take over within --%s %v: is it running, with an elector that knows the resign protocol? Nobody else may lead until the reservation lapses (%s); then any replica may",
			old.Identity, flagTo, ro.to, flagTimeout, ro.timeout, left)
	default:
		return fmt.Errorf("%q released the lease, but no other replica took over within --%s %v: is another replica campaigning? After --%s %v any replica, %q included, may lead again",
			old.Identity, flagTimeout, ro.timeout, flagHoldOff, ro.holdOff, old.Identity)
	}
}

// followerCount counts the processes subscribed to a lease's events channel.
type followerCount func(ctx context.Context) (int64, error)

// followerProbe is the message that countFollowers publishes: not an event ("<kind> <ttl_ms>
// <record>"), so every subscriber drops it.
const followerProbe = "probe"

// countFollowers counts the subscribers of channel by publishing followerProbe, which returns
// how many received it: PUBLISH is in the ACL of every user that may resign (PUBSUB NUMSUB is
// not). In a Cluster it is sent where go-redis subscribes: the master of the channel's slot
// (each node counts only its own subscribers).
func countFollowers(client redis.UniversalClient, channel string) followerCount {
	return func(ctx context.Context) (int64, error) {
		var c redis.Cmdable = client
		if cc, ok := client.(*redis.ClusterClient); ok {
			node, err := cc.MasterForKey(ctx, channel)
			if err != nil {
				return 0, fmt.Errorf("count the subscribers of %q: %w", channel, err)
			}
			c = node
		}
		n, err := c.Publish(ctx, channel, followerProbe).Result()
		if err != nil {
			return 0, fmt.Errorf("count the subscribers of %q: %w", channel, err)
		}
		return n, nil
	}
}
