package main

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/elector/elector/internal/identity"
	"github.com/elector/elector/internal/leasekit"
	"github.com/elector/elector/internal/leasewire"
	"github.com/elector/elector/internal/leasewire/lualib"
	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/timing"
	"github.com/elector/elector/pkg/lease"
)

// Flag names shared by run, sidecar and status.
const (
	flagLeaseName     = "lease-name"
	flagKeyPrefix     = "key-prefix"
	flagIdentity      = "identity"
	flagLeaseDuration = "lease-duration"
	flagRenewDeadline = "renew-deadline"
	flagRetryPeriod   = "retry-period"
)

// leaseOptions are the --lease-name, --key-prefix, --identity and timing flags.
type leaseOptions struct {
	name, prefix, identity                    string
	leaseDuration, renewDeadline, retryPeriod time.Duration
	identitySource                            string // where identity came from, for errors
	nameOptional                              bool   // status --all lists every lease
	observer                                  bool   // status: no identity or timing flags
}

// addFlags registers the lease flags on fs.
func (o *leaseOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.name, flagLeaseName, "", "`name` of the lease the replicas compete for (required)")
	fs.StringVar(&o.prefix, flagKeyPrefix, lease.DefaultPrefix, "`prefix` of the lease's Redis keys: PREFIX:{NAME}:lease, PREFIX:{NAME}:token")
	fs.StringVar(&o.identity, flagIdentity, "", "this replica's `name` in the lease (default $POD_NAME, else the host name)")
	fs.DurationVar(&o.leaseDuration, flagLeaseDuration, timing.DefaultLeaseDuration, "how long a lease lasts without renewal: a crashed leader is replaced after this")
	fs.DurationVar(&o.renewDeadline, flagRenewDeadline, timing.DefaultRenewDeadline, "a leader steps down when it could not renew for this long; must be shorter than --lease-duration")
	fs.DurationVar(&o.retryPeriod, flagRetryPeriod, timing.DefaultRetryPeriod, "interval between renewals, and between attempts while Redis fails; --renew-deadline must exceed 1.2 × this")
}

// addObserverFlags registers only --lease-name and --key-prefix, for commands that read a
// lease without campaigning; the timing keeps its defaults.
func (o *leaseOptions) addObserverFlags(fs *pflag.FlagSet) {
	o.observer = true
	fs.StringVar(&o.name, flagLeaseName, "", "`name` of the lease to read (required)")
	fs.StringVar(&o.prefix, flagKeyPrefix, lease.DefaultPrefix, "`prefix` of the lease's Redis keys: PREFIX:{NAME}:lease, PREFIX:{NAME}:token")
	o.leaseDuration, o.renewDeadline, o.retryPeriod = timing.DefaultLeaseDuration, timing.DefaultRenewDeadline, timing.DefaultRetryPeriod
}

// complete fills in the default identity: $POD_NAME, else the host name.
func (o *leaseOptions) complete(c *cli) error {
	o.identitySource = "--" + flagIdentity
	if o.identity != "" || o.observer {
		return nil
	}
	id, source, err := identity.Default(c.getenv, c.hostname)
	if err != nil {
		return fmt.Errorf("--%s: not set, %w; set --%s", flagIdentity, err, flagIdentity)
	}
	o.identity, o.identitySource = id, "--"+flagIdentity+" (from "+string(source)+")"
	return nil
}

// validate checks the lease flags; each error names the flag and says what is allowed.
func (o *leaseOptions) validate() error {
	if o.name == "" && !o.nameOptional {
		return fmt.Errorf("--%s is required: the name of the lease the replicas compete for", flagLeaseName)
	}
	if err := leasewire.ValidateName(o.name); err != nil && o.name != "" {
		return fmt.Errorf("--%s: %q %v", flagLeaseName, o.name, err)
	}
	if err := leasewire.ValidateName(o.prefix); err != nil {
		return fmt.Errorf("--%s: %q %v", flagKeyPrefix, o.prefix, err)
	}
	if o.observer {
		return nil
	}
	if err := leasewire.ValidateIdentity(o.identity); err != nil {
		return fmt.Errorf("%s: %q %v", o.identitySource, o.identity, err)
	}
	return validateTiming(o.leaseDuration, o.renewDeadline, o.retryPeriod)
}

// validateTiming checks the three timing flags with the library's check, its errors naming
// the flags.
func validateTiming(leaseDuration, renewDeadline, retryPeriod time.Duration) error {
	return timing.Check(leaseDuration, renewDeadline, retryPeriod,
		timing.Names{LeaseDuration: "--" + flagLeaseDuration, RenewDeadline: "--" + flagRenewDeadline, RetryPeriod: "--" + flagRetryPeriod})
}

// callTimeout is the library's per-call Redis timeout for the lease flags' timing.
func (o *leaseOptions) callTimeout() time.Duration {
	return timing.CallTimeout(o.renewDeadline, o.retryPeriod)
}

// commonOptions are the flags of run, sidecar and status: the lease and Redis.
type commonOptions struct {
	lease    leaseOptions
	redis    redisclient.Config
	ack      lease.ReplicaAck // run and sidecar only (addElectionFlags)
	cand     candidacy        // run and sidecar only (addElectionFlags): --candidate-*, --prefer
	scripts  string           // --redis-scripts
	electing bool             // addElectionFlags ran: the candidate flags are checked
}

// Flag names of the candidate registry and preferred leadership (run and sidecar).
const (
	flagCandidateVersion  = "candidate-version"
	flagCandidatePriority = "candidate-priority"
	flagPrefer            = "prefer"
)

// addCandidateFlags registers the flags of what this replica advertises in the candidate
// registry and of preferred leadership.
func (o *commonOptions) addCandidateFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.cand.version, flagCandidateVersion, "", "`version` this replica advertises in the candidate registry (the app's; at most 128 bytes); default \"elector VERSION\"")
	fs.Int64Var(&o.cand.priority, flagCandidatePriority, 0, "`priority` this replica advertises; the leader hands over (by resign) to a candidate of a higher one live for 2 × --"+flagLeaseDuration+", and a SIGTERM reserves its release for it")
	fs.StringVar(&o.cand.prefer, flagPrefer, "", "`newest` or oldest: set the priority from --"+flagCandidateVersion+" (semantic versions), so that a rolling update moves leadership once")
}

// validateCandidate checks the candidate flags; each error names the flag.
func (o *commonOptions) validateCandidate() error {
	c := &o.cand
	if err := leasekit.ValidateVersion(c.version); err != nil {
		return fmt.Errorf("--%s: %q %v", flagCandidateVersion, c.version, err)
	}
	switch c.prefer {
	case "":
		return nil
	case preferNewest, preferOldest:
	default:
		return fmt.Errorf("--%s: %q is not a policy; want %s or %s", flagPrefer, c.prefer, preferNewest, preferOldest)
	}
	if c.priority != 0 {
		return fmt.Errorf("--%s and --%s both set the priority; give one", flagPrefer, flagCandidatePriority)
	}
	if c.version == "" {
		return fmt.Errorf("--%s %s ranks replicas by --%s, which is not set", flagPrefer, c.prefer, flagCandidateVersion)
	}
	c.priority = versionPriority(c.prefer, c.version)
	return nil
}

// flagScripts is how the Lua scripts are called (lualib.Mode).
const flagScripts = "redis-scripts"

// addScriptsFlag registers --redis-scripts.
func (o *commonOptions) addScriptsFlag(fs *pflag.FlagSet) {
	fs.StringVar(&o.scripts, flagScripts, string(lualib.Auto), "how the Lua scripts are called: `mode` auto (FCALL of elector's function library, EVALSHA/EVAL where it is not loaded), functions (FCALL only: run elector install-functions first; the Redis user needs +fcall, not +eval) or eval")
}

// Flag names of the replica acknowledgement (run and sidecar).
const (
	flagReplicaAcks       = "redis-replica-acks"
	flagReplicaAckTimeout = "redis-replica-ack-timeout"
)

// addElectionFlags registers the flags that only campaigning commands have.
func (o *commonOptions) addElectionFlags(cmd *cobra.Command) {
	addGroup(cmd, redisGroup, func(g *pflag.FlagSet) {
		g.IntVar(&o.ack.Replicas, flagReplicaAcks, 0, "`replicas` that must acknowledge (WAIT) each acquire and renew before it counts; 0: none. Ask for fewer than exist")
		g.DurationVar(&o.ack.Timeout, flagReplicaAckTimeout, 250*time.Millisecond, "how long each acquire or renew waits for --"+flagReplicaAcks+"; below --"+flagRetryPeriod)
	})
	// Listed with the lease's flags: what this replica advertises under the lease, and how it
	// leads it.
	addGroup(cmd, leaseGroup, o.addCandidateFlags)
	o.electing = true
}

// validateAck checks the replica acknowledgement flags.
func (o *commonOptions) validateAck() error {
	a := o.ack
	switch {
	case a.Replicas < 0:
		return fmt.Errorf("--%s: must be 0 or more, got %d", flagReplicaAcks, a.Replicas)
	case a.Replicas == 0:
		return nil
	case a.Timeout < time.Millisecond || a.Timeout%time.Millisecond != 0:
		return fmt.Errorf("--%s: must be a whole number of milliseconds, at least 1ms, got %v", flagReplicaAckTimeout, a.Timeout)
	case a.Timeout >= o.lease.retryPeriod:
		return fmt.Errorf("--%s: must be shorter than --%s (%v), got %v", flagReplicaAckTimeout, flagRetryPeriod, o.lease.retryPeriod, a.Timeout)
	}
	return nil
}

// Headings of the flags shared by several commands.
const (
	leaseGroup    = "Lease flags"
	redisGroup    = "Redis flags"
	kubeGroup     = "Kubernetes flags"
	endpointGroup = "Endpoint flags"
)

// addFlags registers the lease and Redis flags, each in its group.
func (o *commonOptions) addFlags(cmd *cobra.Command) {
	addGroup(cmd, leaseGroup, o.lease.addFlags)
	addGroup(cmd, redisGroup, o.redis.AddFlags)
	addGroup(cmd, redisGroup, o.addScriptsFlag)
}

// complete fills in defaults, reads the password and checks every flag, without contacting
// Redis. Every error is a usage error.
func (o *commonOptions) complete(c *cli) error {
	if err := o.lease.complete(c); err != nil {
		return err
	}
	if err := o.lease.validate(); err != nil {
		return err
	}
	if err := o.redis.LoadPassword(c.getenv); err != nil {
		return err
	}
	if err := requirePasswords(o.redis); err != nil {
		return err
	}
	if err := o.validateAck(); err != nil {
		return err
	}
	if o.electing {
		if err := o.validateCandidate(); err != nil {
			return err
		}
	}
	if _, err := lualib.ParseMode(o.scripts); err != nil {
		return fmt.Errorf("--%s: %w", flagScripts, err)
	}
	t := o.lease.callTimeout()
	o.redis.DialTimeout, o.redis.ReadTimeout, o.redis.WriteTimeout = t, t, t
	return o.redis.Validate()
}

// requirePasswords refuses a user name without a password: go-redis sends no AUTH without a
// password, so Redis would serve the connection as its default user instead — a
// misconfiguration that looks healthy while the default user is open.
func requirePasswords(rc redisclient.Config) error {
	if rc.Username != "" && rc.Password == "" {
		return fmt.Errorf("--%s %q: no password: set the %s environment variable or --%s (without one, Redis would serve the default user, not %q)",
			redisclient.FlagUsername, rc.Username, redisclient.PasswordEnv, redisclient.FlagPasswordFile, rc.Username)
	}
	if rc.SentinelUsername != "" && rc.SentinelPassword == "" {
		return fmt.Errorf("--%s %q: no password: set the %s environment variable or --%s",
			redisclient.FlagSentinelUsername, rc.SentinelUsername, redisclient.SentinelPasswordEnv, redisclient.FlagSentinelPasswordFile)
	}
	return nil
}

// addObserverFlags registers the observer lease flags and the Redis flags, each in its group.
func (o *commonOptions) addObserverFlags(cmd *cobra.Command) {
	addGroup(cmd, leaseGroup, o.lease.addObserverFlags)
	addGroup(cmd, redisGroup, o.redis.AddFlags)
	addGroup(cmd, redisGroup, o.addScriptsFlag)
}

// newClient builds the Redis client; complete must have succeeded.
func (o *commonOptions) newClient() (redis.UniversalClient, error) {
	client, err := redisclient.New(o.redis)
	if err != nil {
		return nil, fmt.Errorf("build the Redis client: %w", err)
	}
	mode, _ := lualib.ParseMode(o.scripts) // checked by complete
	lualib.SetDefaultMode(client, mode)
	return client, nil
}

// redisDescription names the Redis the client talks to, for error messages.
func redisDescription(rc redisclient.Config) string {
	s := fmt.Sprintf("Redis at %s (%s", strings.Join(rc.Addrs, ","), rc.Mode)
	if rc.Mode == redisclient.ModeSentinel {
		s += ", master " + strconv.Quote(rc.SentinelMaster)
	}
	return s + ")"
}

// validateListenAddr checks an --http-addr value: [host]:port with a port from 0 to 65535.
func validateListenAddr(flag, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--%s: %q is not [host]:port (for example :8080 or 127.0.0.1:8080)", flag, addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("--%s: %q has an invalid port; want [host]:port with a port from 0 to 65535", flag, addr)
	}
	return nil
}
