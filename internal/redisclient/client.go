package redisclient

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"
)

// TLSConfig returns the TLS client configuration described by c, or nil when
// c.TLS is false. It reads and checks the CA, certificate and key files; any
// problem, including a TLS file flag given without --redis-tls, is a
// *UsageError.
//
// The result verifies the server against the CAs of TLSCAFile (the system
// roots when empty), presents the client key pair when one is given, sends
// and verifies TLSServerName when set (otherwise the host of each dialled
// address, which crypto/tls fills in per connection) and accepts TLS 1.2 or
// later.
func (c *Config) TLSConfig() (*tls.Config, error) {
	if !c.TLS {
		for _, f := range []struct{ flag, value string }{
			{FlagTLSCAFile, c.TLSCAFile},
			{FlagTLSCertFile, c.TLSCertFile},
			{FlagTLSKeyFile, c.TLSKeyFile},
			{FlagTLSServerName, c.TLSServerName},
		} {
			if f.value != "" {
				return nil, usageErr(f.flag, "requires --%s", FlagTLS)
			}
		}
		return nil, nil
	}
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		ServerName: c.TLSServerName,
	}
	if c.TLSCAFile != "" {
		pem, err := os.ReadFile(c.TLSCAFile)
		if err != nil {
			return nil, &UsageError{Source: "--" + FlagTLSCAFile, Msg: fmt.Sprintf("cannot read the CA file: %v", err), Err: err}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usageErr(FlagTLSCAFile, "no PEM certificate found in %q", c.TLSCAFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case c.TLSCertFile != "" && c.TLSKeyFile == "":
		return nil, usageErr(FlagTLSCertFile, "requires --%s", FlagTLSKeyFile)
	case c.TLSCertFile == "" && c.TLSKeyFile != "":
		return nil, usageErr(FlagTLSKeyFile, "requires --%s", FlagTLSCertFile)
	case c.TLSCertFile != "":
		for _, f := range []struct{ flag, path string }{{FlagTLSCertFile, c.TLSCertFile}, {FlagTLSKeyFile, c.TLSKeyFile}} {
			if _, err := os.Stat(f.path); err != nil {
				return nil, &UsageError{Source: "--" + f.flag, Msg: fmt.Sprintf("cannot read the file: %v", err), Err: err}
			}
		}
		pair, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return nil, &UsageError{
				Source: "--" + FlagTLSCertFile + "/--" + FlagTLSKeyFile,
				Msg:    fmt.Sprintf("cannot load the client key pair: %v", err),
				Err:    err,
			}
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// New validates c and returns a client for its mode: a *redis.Client
// (standalone), a *redis.Client from redis.NewFailoverClient that always
// talks to the current master (sentinel), or a *redis.ClusterClient
// (cluster). A configuration error is a *UsageError. New does not contact
// Redis; connections are made on first use. The caller closes the client.
//
// Context deadlines are honoured on every command (ContextTimeoutEnabled),
// in addition to c's timeouts.
//
// The client does not send CLIENT SETINFO on connect (DisableIdentity): the
// documented minimal ACL does not grant it, and Redis 7.0 refuses an ACL rule
// naming it (the subcommand exists from 7.2 on), so one ACL line serves every
// server. CLIENT LIST shows empty lib-name and lib-ver for these connections;
// ClientName (CLIENT SETNAME, sent with HELLO) still names them.
func New(c Config) (redis.UniversalClient, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tlsConfig, err := c.TLSConfig()
	if err != nil {
		return nil, err
	}
	// One set of options; go-redis makes a failover client when MasterName is set, a cluster
	// client in cluster mode (also with a single seed address), else a single-node client.
	opts := &redis.UniversalOptions{
		Addrs:                 c.Addrs,
		ClientName:            c.ClientName,
		Username:              c.Username,
		Password:              c.Password,
		DB:                    c.DB,
		MaxRetries:            c.MaxRetries,
		DialTimeout:           c.DialTimeout,
		ReadTimeout:           c.ReadTimeout,
		WriteTimeout:          c.WriteTimeout,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
		TLSConfig:             tlsConfig,
		IsClusterMode:         c.Mode == ModeCluster,
	}
	if c.Mode == ModeSentinel {
		opts.MasterName = c.SentinelMaster
		opts.SentinelUsername, opts.SentinelPassword = c.SentinelUsername, c.SentinelPassword
	}
	return redis.NewUniversalClient(opts), nil
}
