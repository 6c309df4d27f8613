// Package redisclient builds the one Redis client of the elector command from
// its --redis-* flags: a go-redis standalone, Sentinel (failover) or Cluster
// client behind redis.UniversalClient.
//
// The usual sequence in a command is
//
//	var rc redisclient.Config
//	rc.AddFlags(fs)
//	// fs.Parse, envflag.Apply ...
//	if err := rc.LoadPassword(os.Getenv); err != nil { ... }  // exit 2
//	rc.DialTimeout, rc.ReadTimeout, rc.WriteTimeout = ...     // timing.CallTimeout
//	client, err := redisclient.New(rc)                         // validates; exit 2 on *UsageError
//
// The password never comes from a flag value, where it would show in ps(1)
// and in the pod spec: it is read from the REDIS_PASSWORD environment
// variable or from the file named by --redis-password-file (the Sentinels'
// own password likewise from REDIS_SENTINEL_PASSWORD or
// --sentinel-password-file). It never appears in an error message, and a
// Config prints and logs with the passwords redacted.
//
// It owns the client options, their validation and the reading of secrets. It must not issue
// commands beyond what building and checking a client needs.
package redisclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
)

// The values accepted by --redis-mode.
const (
	// ModeStandalone talks to one Redis server.
	ModeStandalone = "standalone"
	// ModeSentinel asks the Redis Sentinels in Addrs for the current master
	// of SentinelMaster and follows failovers.
	ModeSentinel = "sentinel"
	// ModeCluster talks to a Redis Cluster; Addrs are seed nodes.
	ModeCluster = "cluster"
)

// DefaultAddr is the default of --redis-addr.
const DefaultAddr = "127.0.0.1:6379"

// PasswordEnv is the environment variable LoadPassword reads the password from.
const PasswordEnv = "REDIS_PASSWORD"

// SentinelPasswordEnv is the environment variable LoadPassword reads the Sentinels' password
// from (sentinel mode only).
const SentinelPasswordEnv = "REDIS_SENTINEL_PASSWORD"

// Flag names, as they appear in usage errors (without the leading dashes).
const (
	FlagAddr                 = "redis-addr"
	FlagMode                 = "redis-mode"
	FlagSentinelMaster       = "sentinel-master"
	FlagSentinelUsername     = "sentinel-username"
	FlagSentinelPasswordFile = "sentinel-password-file"
	FlagUsername             = "redis-username"
	FlagPasswordFile         = "redis-password-file"
	FlagDB                   = "redis-db"
	FlagTLS                  = "redis-tls"
	FlagTLSCAFile            = "redis-tls-ca-file"
	FlagTLSCertFile          = "redis-tls-cert-file"
	FlagTLSKeyFile           = "redis-tls-key-file"
	FlagTLSServerName        = "redis-tls-server-name"
)

// Config describes how to reach Redis. The zero value is not usable; start
// from AddFlags (which sets the defaults) or fill in at least Addrs and Mode.
//
// Config redacts Password and SentinelPassword whenever it is formatted (any
// fmt verb), logged through logr/klog, or marshalled to JSON.
type Config struct {
	// Addrs are host:port pairs: the server (standalone, exactly one), the
	// Sentinels (sentinel) or the seed nodes (cluster).
	Addrs []string
	// Mode is ModeStandalone, ModeSentinel or ModeCluster.
	Mode string
	// SentinelMaster is the master name the Sentinels monitor (sentinel mode only).
	SentinelMaster string
	// SentinelUsername and SentinelPassword authenticate to the Sentinels
	// themselves (their requirepass or ACL), which is separate from the data
	// nodes' Username and Password. Sentinel mode only; SentinelPassword is set
	// by LoadPassword, never a flag.
	SentinelUsername string
	SentinelPassword string `json:"-"`
	// SentinelPasswordFile is the file LoadPassword reads SentinelPassword from.
	SentinelPasswordFile string
	// Username is the ACL user (Redis 6+); empty means the default user.
	Username string
	// Password authenticates Username. Set by LoadPassword; never a flag.
	Password string `json:"-"`
	// PasswordFile is the file LoadPassword reads the password from.
	PasswordFile string
	// DB is the database number; must be 0 in cluster mode.
	DB int
	// TLS enables TLS (minimum version 1.2) for every connection, including
	// those to Sentinels and to cluster nodes.
	TLS bool
	// TLSCAFile is a PEM bundle of CAs that verify the server; empty means
	// the system roots.
	TLSCAFile string
	// TLSCertFile and TLSKeyFile are the PEM client certificate and key for
	// mutual TLS; both or neither.
	TLSCertFile, TLSKeyFile string
	// TLSServerName is the name verified in server certificates. Empty means
	// the host of the address each connection dials, which for standalone
	// mode is the host of the one address, and which keeps verification
	// correct for Sentinel masters and cluster nodes discovered at run time.
	TLSServerName string
	// DialTimeout, ReadTimeout and WriteTimeout bound each connection
	// attempt, reply and request; zero means go-redis' defaults (5s, 3s, 3s).
	// The elector sets them to its per-call bound (timing.CallTimeout). Context deadlines
	// are always honoured as well.
	DialTimeout, ReadTimeout, WriteTimeout time.Duration
	// MaxRetries is how often go-redis retries a failed command; zero means
	// go-redis' default (3), -1 disables retries.
	MaxRetries int
	// ClientName is sent with CLIENT SETNAME on every connection (shows in
	// CLIENT LIST); empty sends none.
	ClientName string
}

// AddFlags registers the --redis-* and --sentinel-* flags on fs, bound to c,
// and sets c's fields to the flag defaults.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	c.Addrs = []string{DefaultAddr}
	fs.Var(&addrList{addrs: &c.Addrs}, FlagAddr,
		"Redis `host:port`; with --redis-mode=sentinel or cluster a comma-separated list of Sentinel or seed node addresses")
	fs.StringVar(&c.Mode, FlagMode, ModeStandalone,
		"how to reach Redis: standalone, sentinel (addresses are Sentinels) or cluster (addresses are seed nodes)")
	fs.StringVar(&c.SentinelMaster, FlagSentinelMaster, "",
		"`name` of the master the Sentinels monitor (required with --redis-mode=sentinel)")
	fs.StringVar(&c.SentinelUsername, FlagSentinelUsername, "",
		"ACL user `name` to authenticate to the Sentinels as (sentinel mode); its password comes from the "+SentinelPasswordEnv+" environment variable or --"+FlagSentinelPasswordFile)
	fs.StringVar(&c.SentinelPasswordFile, FlagSentinelPasswordFile, "",
		"`file` holding the Sentinels' password (sentinel mode; one trailing newline is ignored); the alternative to the "+SentinelPasswordEnv+" environment variable")
	fs.StringVar(&c.Username, FlagUsername, "",
		"Redis ACL user `name` (Redis 6+); the password comes from the "+PasswordEnv+" environment variable or --"+FlagPasswordFile)
	fs.StringVar(&c.PasswordFile, FlagPasswordFile, "",
		"`file` holding the Redis password (one trailing newline is ignored); the alternative to the "+PasswordEnv+" environment variable")
	fs.IntVar(&c.DB, FlagDB, 0,
		"Redis database `number` (standalone and sentinel modes; cluster mode has only database 0)")
	fs.BoolVar(&c.TLS, FlagTLS, false,
		"connect to Redis (and Sentinels) with TLS 1.2 or later")
	fs.StringVar(&c.TLSCAFile, FlagTLSCAFile, "",
		"PEM `file` of CA certificates that verify the Redis server (default: the system roots); needs --"+FlagTLS)
	fs.StringVar(&c.TLSCertFile, FlagTLSCertFile, "",
		"PEM client certificate `file` for mutual TLS; needs --"+FlagTLSKeyFile+" and --"+FlagTLS)
	fs.StringVar(&c.TLSKeyFile, FlagTLSKeyFile, "",
		"PEM client private key `file` for mutual TLS; needs --"+FlagTLSCertFile+" and --"+FlagTLS)
	fs.StringVar(&c.TLSServerName, FlagTLSServerName, "",
		"`name` to verify in the Redis server certificate (default: the host of each address dialled); needs --"+FlagTLS)
}

// UsageError is a configuration mistake of the user: the command should
// print it and exit with status 2. Every error from Validate and
// LoadPassword, and every configuration error from New, is a *UsageError.
type UsageError struct {
	// Source names what was wrong: a flag ("--redis-addr") or an
	// environment variable ("REDIS_PASSWORD").
	Source string
	// Msg says what is wrong and what is allowed. It never contains the password.
	Msg string
	// Err is the underlying cause, if any (e.g. an *fs.PathError).
	Err error
}

// Error returns "SOURCE: MSG", one line.
func (e *UsageError) Error() string { return e.Source + ": " + e.Msg }

// Unwrap returns the underlying cause.
func (e *UsageError) Unwrap() error { return e.Err }

func usageErr(flag, format string, args ...any) *UsageError {
	return &UsageError{Source: "--" + flag, Msg: fmt.Sprintf(format, args...)}
}

// Validate checks c and returns a *UsageError naming the first wrong flag
// and what it allows. It reads the TLS files to check them but does not
// check the password (see LoadPassword) and does not contact Redis.
func (c *Config) Validate() error {
	if err := c.validateAddrs(); err != nil {
		return err
	}
	switch c.Mode {
	case ModeStandalone, ModeCluster:
		for _, f := range []struct{ flag, value string }{
			{FlagSentinelMaster, c.SentinelMaster}, {FlagSentinelUsername, c.SentinelUsername}, {FlagSentinelPasswordFile, c.SentinelPasswordFile},
		} {
			if f.value != "" {
				return usageErr(f.flag, "only allowed with --%s=%s (mode is %q)", FlagMode, ModeSentinel, c.Mode)
			}
		}
	case ModeSentinel:
		if c.SentinelMaster == "" {
			return usageErr(FlagSentinelMaster, "required with --%s=%s: the master name the Sentinels monitor", FlagMode, ModeSentinel)
		}
	default:
		return usageErr(FlagMode, "unknown mode %q; allowed: %s, %s, %s", c.Mode, ModeStandalone, ModeSentinel, ModeCluster)
	}
	if c.DB < 0 {
		return usageErr(FlagDB, "must be 0 or more, got %d", c.DB)
	}
	if c.Mode == ModeCluster && c.DB != 0 {
		return usageErr(FlagDB, "must be 0 with --%s=%s (Redis Cluster has only database 0), got %d", FlagMode, ModeCluster, c.DB)
	}
	if _, err := c.TLSConfig(); err != nil {
		return err
	}
	return nil
}

func (c *Config) validateAddrs() error {
	if len(c.Addrs) == 0 {
		return usageErr(FlagAddr, "must not be empty; want host:port (or a comma-separated list for sentinel or cluster mode)")
	}
	for _, a := range c.Addrs {
		if err := checkHostPort(a); err != nil {
			return usageErr(FlagAddr, "%v", err)
		}
	}
	if c.Mode == ModeStandalone && len(c.Addrs) > 1 {
		return usageErr(FlagAddr, "standalone mode takes exactly one host:port, got %d; use --%s=%s or %s for a list",
			len(c.Addrs), FlagMode, ModeSentinel, ModeCluster)
	}
	return nil
}

// checkHostPort accepts "host:port" and "[ipv6]:port" with a port in 1-65535.
func checkHostPort(addr string) error {
	if addr == "" {
		return fmt.Errorf("empty address in list; want host:port")
	}
	if strings.Contains(addr, "://") {
		return fmt.Errorf("%q is a URL; want host:port", addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		var addrErr *net.AddrError
		if errors.As(err, &addrErr) {
			return fmt.Errorf("%q is not host:port: %s", addr, addrErr.Err)
		}
		return fmt.Errorf("%q is not host:port: %v", addr, err)
	}
	if host == "" {
		return fmt.Errorf("%q has no host; want host:port", addr)
	}
	if strings.ContainsAny(host, " \t\r\n/") {
		return fmt.Errorf("%q has an invalid host; want host:port", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q has an invalid port; want host:port with a port from 1 to 65535", addr)
	}
	return nil
}

// LoadPassword sets c.Password from the REDIS_PASSWORD environment variable
// (looked up with getenv, usually os.Getenv) or from c.PasswordFile, of which
// one trailing newline ("\n" or "\r\n") is removed. An empty variable counts
// as unset. Giving both is a *UsageError, so that it is never unclear which
// secret is in use; so is a password file that cannot be read or is empty.
// With neither, c.Password is left as it is (normally empty: no AUTH).
//
// In sentinel mode it sets c.SentinelPassword the same way from
// REDIS_SENTINEL_PASSWORD or c.SentinelPasswordFile; in the other modes that
// variable is ignored.
func (c *Config) LoadPassword(getenv func(string) string) error {
	if err := loadSecret(&c.Password, getenv(PasswordEnv), PasswordEnv, c.PasswordFile, FlagPasswordFile); err != nil {
		return err
	}
	if c.Mode != ModeSentinel {
		return nil
	}
	return loadSecret(&c.SentinelPassword, getenv(SentinelPasswordEnv), SentinelPasswordEnv, c.SentinelPasswordFile, FlagSentinelPasswordFile)
}

// loadSecret sets *dst from env (the value of the variable envName) or from file (the value
// of --flag), refusing both at once.
func loadSecret(dst *string, env, envName, file, flag string) error {
	if file == "" {
		if env != "" {
			*dst = env
		}
		return nil
	}
	if env != "" {
		return usageErr(flag, "conflicts with the %s environment variable; set only one of them", envName)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return &UsageError{Source: "--" + flag, Msg: fmt.Sprintf("cannot read the password file: %v", err), Err: err}
	}
	pw := string(b)
	pw = strings.TrimSuffix(pw, "\n")
	pw = strings.TrimSuffix(pw, "\r")
	if pw == "" {
		return usageErr(flag, "password file %q is empty", file)
	}
	*dst = pw
	return nil
}

// redacted replaces a non-empty password wherever a Config is shown.
const redacted = "<redacted>"

// safeConfig has Config's fields but none of its methods, so that formatting
// it does not recurse into Config.Format.
type safeConfig Config

func (c Config) safe() safeConfig {
	s := safeConfig(c)
	if s.Password != "" {
		s.Password = redacted
	}
	if s.SentinelPassword != "" {
		s.SentinelPassword = redacted
	}
	return s
}

// String formats c with the password redacted.
func (c Config) String() string {
	return fmt.Sprintf("%+v", c.safe())
}

// GoString formats c for %#v with the password redacted.
func (c Config) GoString() string {
	return fmt.Sprintf("%#v", c.safe())
}

// Format implements fmt.Formatter so that no verb (%v, %+v, %#v, %s, %q,
// %x, %d, ...) can print the password.
func (c Config) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		fmt.Fprint(f, c.GoString())
		return
	}
	fmt.Fprint(f, c.String())
}

// MarshalLog implements logr.Marshaler (used by klog's structured logging)
// with the password redacted.
func (c Config) MarshalLog() any {
	return c.safe()
}

// MarshalJSON encodes c without the password.
func (c Config) MarshalJSON() ([]byte, error) {
	s := c.safe()
	s.Password, s.SentinelPassword = "", ""
	return json.Marshal(s)
}

// addrList is the pflag.Value behind --redis-addr: a comma-separated list
// whose entries are trimmed of spaces. Empty entries are kept for Validate
// to report. Like pflag's string slices, the first Set replaces the default
// and later ones append.
type addrList struct {
	addrs *[]string
	set   bool
}

func (l *addrList) String() string {
	if l == nil || l.addrs == nil {
		return ""
	}
	return strings.Join(*l.addrs, ",")
}

func (l *addrList) Set(s string) error {
	v := []string{}
	if strings.TrimSpace(s) != "" {
		for _, a := range strings.Split(s, ",") {
			v = append(v, strings.TrimSpace(a))
		}
	}
	if l.set {
		*l.addrs = append(*l.addrs, v...)
	} else {
		*l.addrs = v
		l.set = true
	}
	return nil
}

func (l *addrList) Type() string { return "strings" }
