package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/redisfail"
	"github.com/elector/elector/pkg/lease"
)

const (
	flagOutput = "output"
	flagAll    = "all"
	flagWatch  = "watch"
)

// leaseStatus is the output of elector status; its JSON form is documented in docs/CLI.md.
type leaseStatus struct {
	// Lease is the lease name.
	Lease string `json:"lease"`
	// Key is the Redis key of the lease.
	Key string `json:"key"`
	// Holder is the identity of the holder, "" when nobody holds the lease.
	Holder string `json:"holder"`
	// Instance is the holder's instance id, "" when nobody holds the lease.
	Instance string `json:"instance"`
	// Token is the fencing token of the holder's term, 0 when nobody holds the lease.
	Token int64 `json:"token"`
	// TTLMs is the remaining time of the lease in milliseconds: 0 when nobody holds it, -1
	// when the key has no expiry.
	TTLMs int64 `json:"ttlMs"`
	// AcquiredAt is when the holder's term began (read from its token), absent when nobody
	// holds the lease or the token is no time.
	AcquiredAt *time.Time `json:"acquiredAt,omitempty"`
	// Transitions is how many terms began on the lease (single-lease status only).
	Transitions *int64 `json:"transitions,omitempty"`
	// Reserved is set when nobody holds the lease because it is reserved after a
	// resignation (single-lease status only).
	Reserved *reservedStatus `json:"reserved,omitempty"`
	// Done is the done mark of elector run --once-per, when one holds (single-lease status only).
	Done *doneStatus `json:"done,omitempty"`
	// Schedule is the state of elector run --schedule on the lease, when it has one
	// (single-lease status only).
	Schedule *scheduleStatus `json:"schedule,omitempty"`
	// Candidates are the live entries of the lease's candidate registry, the replicas that
	// campaign or lead (single-lease status only; absent when none advertises itself).
	Candidates []candidateStatus `json:"candidates,omitempty"`
}

// reservedStatus is the reservation that follows a resignation (elector resign).
type reservedStatus struct {
	// Resigned is the identity that resigned.
	Resigned string `json:"resigned"`
	// Target is the only identity that may take the lease, "" for anyone but Resigned.
	Target string `json:"target"`
	// TTLMs is how long the reservation lasts, in milliseconds.
	TTLMs int64 `json:"ttlMs"`
}

// watchEvent is one line of elector status --watch.
type watchEvent struct {
	// Time is when the event arrived.
	Time time.Time `json:"time"`
	// Event is "held" or "free" (the state when the watch began), "acquired", "released" or
	// "expired" (the lease's time ran out without a renewal).
	Event string `json:"event"`
	leaseStatus
}

// statusLong is the paragraph of elector status's help; docs/CLI.md#elector-status has the
// fields of its output.
const statusLong = `Print the holder of the lease, its fencing token, remaining time, when its term began and
how many terms the lease had; with --watch (-w), then a line per change (acquired, released,
expired) until SIGINT or SIGTERM. Exit 0 when the lease is held, 3 when it has no holder,
1 when Redis cannot be read (the message names the address, the cause and its fix).`

// statusFlags are the flags of elector status.
type statusFlags struct {
	output     string
	all, watch bool
	co         commonOptions
}

// newStatusCmd returns `elector status`.
func (c *cli) newStatusCmd() *cobra.Command {
	var sf statusFlags
	cmd := c.newCommand("status [flags] [-o text|json|yaml] [--watch]", "print the holder, fencing token and remaining time of a lease", statusLong,
		func(ctx context.Context, cmd *cobra.Command, args []string) int {
			return c.status(ctx, cmd, args, &sf)
		})
	addGroup(cmd, "Status flags", func(fs *pflag.FlagSet) {
		fs.StringVarP(&sf.output, flagOutput, "o", "text", "output `format`: text, json or yaml")
		fs.BoolVar(&sf.all, flagAll, false, "list every held lease under --key-prefix (for election.Group) instead of one --lease-name")
		fs.BoolVarP(&sf.watch, flagWatch, "w", false, "after the status, print a line per change (acquired, released, expired) as it happens, until interrupted")
	})
	sf.co.addObserverFlags(cmd)
	addKlogFlags(cmd)
	return cmd
}

// status is `elector status` once cobra parsed its flags.
func (c *cli) status(ctx context.Context, cmd *cobra.Command, args []string, sf *statusFlags) int {
	const who = "elector status"
	co, output, all, watch := &sf.co, sf.output, sf.all, sf.watch
	err := statusFlagsError(cmd, args, output, all, watch, co.lease.name)
	if err == nil {
		co.lease.nameOptional = all
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
	if all {
		return c.statusAll(ctx, who, co, client, output)
	}
	l, err := leasekit.New(client, co.lease.name, lease.Options{Prefix: co.lease.prefix})
	if err != nil {
		return c.usageError(who, err)
	}
	if watch {
		return c.statusWatch(ctx, who, co, client, l, output)
	}
	out, err := readStatus(ctx, co, l)
	if err == nil {
		out.Schedule, err = readScheduleStatus(ctx, co, client, output)
	}
	if err != nil {
		return c.runtimeError(who, err)
	}
	if err := writeStatus(c.stdout, output, out); err != nil {
		return c.runtimeError(who, fmt.Errorf("write the status: %w", err))
	}
	if out.Holder == "" {
		return exitNoLeader
	}
	return exitOK
}

// statusFlagsError checks the combination of status's flags; each error names a flag.
func statusFlagsError(cmd *cobra.Command, args []string, output string, all, watch bool, leaseName string) error {
	outputErr := validateOutput(output)
	switch {
	case len(args) > 0:
		return errOnlyFlags(cmd, args)
	case outputErr != nil:
		return outputErr
	case all && leaseName != "":
		return fmt.Errorf("--%s lists every lease under --%s: do not give --%s with it", flagAll, flagKeyPrefix, flagLeaseName)
	case all && watch:
		return fmt.Errorf("--%s watches one --%s: do not give --%s with it", flagWatch, flagLeaseName, flagAll)
	}
	return nil
}

// readStatus reads the lease, its count of terms, reservation and done mark.
func readStatus(ctx context.Context, co *commonOptions, l *leasekit.Lease) (leaseStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, co.lease.callTimeout())
	defer cancel()
	st, err := l.Get(ctx)
	if err != nil {
		return leaseStatus{}, readError(fmt.Sprintf("cannot read lease %q", co.lease.name), co, err)
	}
	out := newLeaseStatus(co.lease.name, l.Keys().Lease, st)
	if err := addTermsAndReservation(ctx, co, l, &out); err != nil {
		return leaseStatus{}, err
	}
	if out.Done, err = readDone(ctx, l); err != nil {
		return leaseStatus{}, readError(fmt.Sprintf("cannot read lease %q", co.lease.name), co, err)
	}
	if out.Candidates, err = readCandidates(ctx, co, l, out.Holder, out.Instance); err != nil {
		return leaseStatus{}, err
	}
	return out, nil
}

// addTermsAndReservation adds to s what a single-lease status shows besides the holder: the
// count of terms and, when nobody holds the lease, its reservation after a resignation.
func addTermsAndReservation(ctx context.Context, co *commonOptions, l *leasekit.Lease, s *leaseStatus) error {
	terms, err := l.Terms(ctx)
	if err != nil {
		return readError(fmt.Sprintf("cannot read lease %q", co.lease.name), co, err)
	}
	s.Transitions = &terms
	if s.Holder != "" {
		return nil
	}
	r, err := l.GetReservation(ctx)
	if err != nil {
		return readError(fmt.Sprintf("cannot read lease %q", co.lease.name), co, err)
	}
	if r != nil {
		s.Reserved = &reservedStatus{Resigned: r.Resigned.Identity, Target: r.Target, TTLMs: r.TTL.Milliseconds()}
	}
	return nil
}

// redisNames are the flags and variables the fixes of Redis errors name (redisfail.Hint), in
// the command's messages and, through Run's ctx (redisfail.WithNames), in the library's log
// lines and /leader: the library's own name Config's fields.
var redisNames = redisfail.Names{
	Addr:           "--" + redisclient.FlagAddr,
	Credentials:    "--" + redisclient.FlagUsername + ", " + redisclient.PasswordEnv + " or --" + redisclient.FlagPasswordFile,
	SentinelMaster: "--" + redisclient.FlagSentinelMaster,
	Sentinels:      "--" + redisclient.FlagAddr + "; " + redisclient.SentinelPasswordEnv + " or --" + redisclient.FlagSentinelPasswordFile,
	Mode:           "--" + redisclient.FlagMode,
	KeyPrefix:      "--" + flagKeyPrefix,
	Identity:       "--" + flagIdentity + ", $POD_NAME",
}

// readError describes a failed read: what, from which Redis, the error and its fix.
func readError(what string, co *commonOptions, err error) error {
	err = fmt.Errorf("%s from %s: %w", what, redisDescription(co.redis), err)
	switch fix := redisfail.Hint(err, redisNames); {
	case fix != "":
		err = fmt.Errorf("%w; fix: %s", err, fix)
	case redisfail.Reason(err) == "timeout":
		err = fmt.Errorf("%w: no reply within %v; fix: check that Redis answers at that address (a service that accepts connections but never replies, or a firewall that drops packets, looks like this)",
			err, co.lease.callTimeout())
	}
	return err
}

// newLeaseStatus converts what lease.Get or leasekit.List found.
func newLeaseStatus(name, key string, st lease.Status) leaseStatus {
	out := leaseStatus{Lease: name, Key: key}
	if st.Held {
		out.Holder, out.Instance, out.Token = st.Record.Identity, st.Record.Instance, st.Record.Token
		out.TTLMs = st.TTL.Milliseconds()
		if st.TTL == lease.NoExpiry {
			out.TTLMs = -1
		}
		if t, ok := st.Record.AcquiredAt(); ok {
			out.AcquiredAt = &t
		}
	}
	return out
}

// validateOutput checks the value of --output.
func validateOutput(format string) error {
	switch format {
	case "text", "json", "yaml":
		return nil
	}
	return fmt.Errorf("--%s: unknown format %q; allowed: text, json, yaml", flagOutput, format)
}

// writeStatus writes s in format (text, json or yaml).
func writeStatus(w io.Writer, format string, s leaseStatus) error {
	if format == "text" {
		if err := printStatus(w, s); err != nil {
			return err
		}
		if err := printCandidates(w, s.Candidates); err != nil {
			return err
		}
		return printSchedule(w, s.Schedule)
	}
	return encode(w, format, s)
}

// encode writes v as one JSON line or as a YAML document.
func encode(w io.Writer, format string, v any) error {
	if format == "json" {
		return json.NewEncoder(w).Encode(v)
	}
	b, err := orderedYAML(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// statusAll is `elector status --all`: one line (or JSON object) per held lease. It exits 3
// when no lease is held.
func (c *cli) statusAll(ctx context.Context, who string, co *commonOptions, client redis.UniversalClient, output string) int {
	ctx, cancel := context.WithTimeout(ctx, 10*co.lease.callTimeout())
	defer cancel()
	found, err := leasekit.List(ctx, client, co.lease.prefix)
	if err != nil {
		return c.runtimeError(who, readError(fmt.Sprintf("cannot list the leases under %q", co.lease.prefix), co, err))
	}
	list := make([]leaseStatus, 0, len(found))
	for _, f := range found {
		list = append(list, newLeaseStatus(f.Name, leasewire.LeaseKey(co.lease.prefix, f.Name), f.Status))
	}
	if output != "text" {
		err = encode(c.stdout, output, list)
	} else {
		err = printAll(c.stdout, list)
	}
	if err != nil {
		return c.runtimeError(who, fmt.Errorf("write the status: %w", err))
	}
	if len(list) == 0 {
		return exitNoLeader
	}
	return exitOK
}

// printAll writes the text form of elector status --all: a table, a row per lease.
func printAll(w io.Writer, list []leaseStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "LEASE\tHOLDER\tTOKEN\tTTL\tACQUIRED\n")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Lease, s.Holder, s.Token, ttlText(s.TTLMs), acquiredText(s.AcquiredAt))
	}
	return tw.Flush()
}

func ttlText(ms int64) string {
	if ms < 0 {
		return "none"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

func acquiredText(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(time.RFC3339Nano)
}

// printStatus writes the text form of elector status.
func printStatus(w io.Writer, s leaseStatus) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "lease:\t%s\n", s.Lease)
	fmt.Fprintf(tw, "key:\t%s\n", s.Key)
	if s.Transitions != nil {
		fmt.Fprintf(tw, "transitions:\t%d\n", *s.Transitions)
	}
	if d := s.Done; d != nil {
		fmt.Fprintf(tw, "done:\tby %s (token %d, exit code %d) at %s; ttl %s (elector run --once-per does not rerun it meanwhile)\n", d.Holder, d.Token, d.ExitCode, d.Finished.Format(time.RFC3339Nano), ttlText(d.TTLMs))
	}
	if s.Holder == "" {
		fmt.Fprintf(tw, "holder:\t(none)\n")
		if r := s.Reserved; r != nil {
			who := r.Target
			if who == "" {
				who = "anyone but " + r.Resigned
			}
			fmt.Fprintf(tw, "reserved:\tfor %s, %v more (%s resigned)\n", who, time.Duration(r.TTLMs)*time.Millisecond, r.Resigned)
		}
		return tw.Flush()
	}
	fmt.Fprintf(tw, "holder:\t%s\n", s.Holder)
	fmt.Fprintf(tw, "instance:\t%s\n", s.Instance)
	fmt.Fprintf(tw, "token:\t%d\n", s.Token)
	if s.AcquiredAt != nil {
		fmt.Fprintf(tw, "acquired:\t%s (%v ago)\n", acquiredText(s.AcquiredAt), time.Since(*s.AcquiredAt).Round(time.Millisecond))
	}
	if s.TTLMs < 0 {
		fmt.Fprintf(tw, "ttl:\tnone (the key has no expiry)\n")
	} else {
		fmt.Fprintf(tw, "ttl:\t%v\n", time.Duration(s.TTLMs)*time.Millisecond)
	}
	return tw.Flush()
}

// statusWatch is `elector status --watch`: the state, then a line per change, as the
// library's Elector.Observe reports them (renewals print nothing). SIGINT or SIGTERM ends it
// with 0.
func (c *cli) statusWatch(ctx context.Context, who string, co *commonOptions, client redis.UniversalClient, l *leasekit.Lease, output string) int {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	w := &statusWatcher{c: c, output: output}
	if output == "text" {
		w.text, w.holderWidth = true, 20
		if err := w.row("TIME", "EVENT", "HOLDER", "TOKEN", "TTL", "ACQUIRED"); err != nil {
			return c.runtimeError(who, err)
		}
	}
	e, err := observeLease(co, client)
	if err != nil {
		return c.usageError(who, err)
	}
	first := true
	for change, err := range e.Observe(ctx) {
		if err != nil {
			return c.runtimeError(who, readError(fmt.Sprintf("cannot watch lease %q", co.lease.name), co, err))
		}
		if change.Kind == "renewed" { // no change of holder
			continue
		}
		s := changeStatus(co.lease.name, l.Keys().Lease, change)
		if first { // the state when the watch began: as elector status prints it
			first = false
			if err := addTermsAndReservation(ctx, co, l, &s); err != nil {
				return c.runtimeError(who, err)
			}
		}
		if err := w.print(change.Kind, s); err != nil {
			return c.runtimeError(who, err)
		}
	}
	return exitOK // ctx ended: interrupted
}

// statusWatcher prints the lines of status --watch.
type statusWatcher struct {
	c      *cli
	output string
	text   bool // a table: one row per line, in fixed columns
	// holderWidth is the HOLDER column's width: rows are printed one at a time as changes
	// come, so the columns cannot be sized on all rows; it grows for a longer holder.
	holderWidth int
}

// print writes one line: the event kind and s.
func (w *statusWatcher) print(kind string, s leaseStatus) error {
	now := time.Now()
	if !w.text {
		if w.output == "yaml" { // a YAML stream: one document per line of the watch
			if _, err := io.WriteString(w.c.stdout, "---\n"); err != nil {
				return fmt.Errorf("write the status: %w", err)
			}
		}
		return encode(w.c.stdout, w.output, watchEvent{Time: now, Event: kind, leaseStatus: s})
	}
	holder := s.Holder
	if holder == "" {
		holder = "-"
	}
	return w.row(now.Format("15:04:05.000"), kind, holder, strconv.FormatInt(s.Token, 10), ttlText(s.TTLMs), acquiredText(s.AcquiredAt))
}

// row writes one row of the text table in fixed columns, so that every row stands under the
// header however long after it comes.
func (w *statusWatcher) row(at, kind, holder, token, ttl, acquired string) error {
	w.holderWidth = max(w.holderWidth, len(holder))
	if _, err := fmt.Fprintf(w.c.stdout, "%-12s  %-8s  %-*s  %-16s  %-10s  %s\n", at, kind, w.holderWidth, holder, token, ttl, acquired); err != nil {
		return fmt.Errorf("write the status: %w", err)
	}
	return nil
}
