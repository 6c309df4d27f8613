package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/pkg/lease"
)

const (
	flagOutput = "output"
	flagAll    = "all"
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
}

// statusCmd is `elector status`.
func (c *cli) statusCmd(ctx context.Context, args []string) int {
	cmd, _ := findCommand("status")
	const who = "elector status"
	fs := newFlagSet(cmd)
	var output string
	var all bool
	fs.group("Status flags").StringVarP(&output, flagOutput, "o", "text", "output `format`: text or json")
	fs.group("Status flags").BoolVar(&all, flagAll, false, "list every held lease under --key-prefix (for election.Group) instead of one --lease-name")
	var co commonOptions
	co.addFlags(fs)
	fs.addKlogFlags()
	if code, done := c.parseArgs(fs, args); done {
		return code
	}
	var err error
	switch {
	case fs.all.NArg() > 0:
		err = fmt.Errorf("unexpected argument %q: elector status takes only flags", fs.all.Arg(0))
	case output != "text" && output != "json":
		err = fmt.Errorf("--%s: unknown format %q; allowed: text, json", flagOutput, output)
	case all && co.lease.name != "":
		err = fmt.Errorf("--%s lists every lease under --%s: do not give --%s with it", flagAll, flagKeyPrefix, flagLeaseName)
	}
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
		return c.statusAll(ctx, who, &co, client, output)
	}
	l, err := lease.New(client, co.lease.name, lease.Options{Prefix: co.lease.prefix})
	if err != nil {
		return c.usageError(who, err)
	}
	ctx, cancel := context.WithTimeout(ctx, callTimeout(co.lease.renewDeadline))
	defer cancel()
	st, err := l.Get(ctx)
	if err != nil {
		return c.runtimeError(who, fmt.Errorf("cannot read lease %q from %s: %w", co.lease.name, redisDescription(co.redis), err))
	}
	out := newLeaseStatus(co.lease.name, l.Key(), st)
	if output == "json" {
		err = json.NewEncoder(c.stdout).Encode(out)
	} else {
		err = printStatus(c.stdout, out, st.Held)
	}
	if err != nil {
		return c.runtimeError(who, fmt.Errorf("write the status: %w", err))
	}
	if !st.Held {
		return exitNoLeader
	}
	return exitOK
}

// newLeaseStatus converts what lease.Get or lease.List found.
func newLeaseStatus(name, key string, st lease.Status) leaseStatus {
	out := leaseStatus{Lease: name, Key: key}
	if st.Held {
		out.Holder, out.Instance, out.Token = st.Record.Identity, st.Record.Instance, st.Record.Token
		out.TTLMs = st.TTL.Milliseconds()
		if st.TTL == lease.NoExpiry {
			out.TTLMs = -1
		}
	}
	return out
}

// statusAll is `elector status --all`: one line (or JSON object) per held lease. It exits 3
// when no lease is held.
func (c *cli) statusAll(ctx context.Context, who string, co *commonOptions, client redis.UniversalClient, output string) int {
	ctx, cancel := context.WithTimeout(ctx, 10*callTimeout(co.lease.renewDeadline))
	defer cancel()
	found, err := lease.List(ctx, client, co.lease.prefix)
	if err != nil {
		return c.runtimeError(who, fmt.Errorf("cannot list the leases under %q from %s: %w", co.lease.prefix, redisDescription(co.redis), err))
	}
	list := make([]leaseStatus, 0, len(found))
	for _, f := range found {
		list = append(list, newLeaseStatus(f.Name, co.lease.prefix+":{"+f.Name+"}:lease", f.Status))
	}
	if output == "json" {
		err = json.NewEncoder(c.stdout).Encode(list)
	} else {
		tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "LEASE\tHOLDER\tTOKEN\tTTL\n")
		for _, s := range list {
			ttl := (time.Duration(s.TTLMs) * time.Millisecond).String()
			if s.TTLMs < 0 {
				ttl = "none"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", s.Lease, s.Holder, s.Token, ttl)
		}
		err = tw.Flush()
	}
	if err != nil {
		return c.runtimeError(who, fmt.Errorf("write the status: %w", err))
	}
	if len(list) == 0 {
		return exitNoLeader
	}
	return exitOK
}

// printStatus writes the text form of elector status.
func printStatus(w io.Writer, s leaseStatus, held bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "lease:\t%s\n", s.Lease)
	fmt.Fprintf(tw, "key:\t%s\n", s.Key)
	if !held {
		fmt.Fprintf(tw, "holder:\t(none)\n")
		return tw.Flush()
	}
	fmt.Fprintf(tw, "holder:\t%s\n", s.Holder)
	fmt.Fprintf(tw, "instance:\t%s\n", s.Instance)
	fmt.Fprintf(tw, "token:\t%d\n", s.Token)
	if s.TTLMs < 0 {
		fmt.Fprintf(tw, "ttl:\tnone (the key has no expiry)\n")
	} else {
		fmt.Fprintf(tw, "ttl:\t%v\n", time.Duration(s.TTLMs)*time.Millisecond)
	}
	return tw.Flush()
}
