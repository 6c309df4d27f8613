package reliability

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/internal/testing/testcert"
	"github.com/elector/elector/pkg/lease"
)

// startTLS starts a redis-server with a TLS port besides its plain port (redistest probes the
// plain one) and returns the server and "127.0.0.1:TLSPORT". With authClients, clients must
// present a certificate signed by ca.
func startTLS(t *testing.T, ca *testcert.CA, authClients bool) (*redistest.Server, string) {
	t.Helper()
	certFile, keyFile := ca.Issue(t, "redis-server", true)
	_, port, _ := net.SplitHostPort(redistest.FreeAddr(t))
	auth := "no"
	if authClients {
		auth = "yes"
	}
	srv := redistest.Start(t,
		"--tls-port", port,
		"--tls-cert-file", certFile,
		"--tls-key-file", keyFile,
		"--tls-ca-cert-file", ca.CertFile,
		"--tls-auth-clients", auth)
	return srv, net.JoinHostPort("127.0.0.1", port)
}

// tryAcquire builds a client from cfg with internal/redisclient, with timeouts of 1s, and acquires
// a lease through it.
func tryAcquire(t *testing.T, cfg redisclient.Config) (lease.Record, error) {
	t.Helper()
	cfg.DialTimeout, cfg.ReadTimeout, cfg.WriteTimeout, cfg.MaxRetries = time.Second, time.Second, time.Second, -1
	c, err := redisclient.New(cfg)
	if err != nil {
		t.Fatalf("redisclient.New: %v", err)
	}
	defer c.Close()
	l, err := lease.New(c, "probe", lease.Options{Identity: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	ok, st, err := l.Acquire(ctx, time.Second)
	t.Logf("acquire through %+v: %v after %v", cfg, err, time.Since(start).Round(time.Millisecond))
	if err == nil && !ok {
		return lease.Record{}, errors.New("lease held by " + st.Record.String())
	}
	return st.Record, err
}

// A client built by internal/redisclient with TLS and the test CA lets an elector lead on the
// TLS port; a wrong CA, a wrong server name or a plain client is refused with an error that says
// why.
func TestTLS(t *testing.T) {
	ca := testcert.NewCA(t, "elector test CA")
	srv, addr := startTLS(t, ca, false)
	good := redisclient.Config{Mode: redisclient.ModeStandalone, Addrs: []string{addr}, TLS: true, TLSCAFile: ca.CertFile}

	tm := timing{lease: 2 * time.Second, renew: 1400 * time.Millisecond, retry: 200 * time.Millisecond}
	led := &ledger{}
	a := startElector(t, newClient(t, good, tm), "tls", "pod-a", tm, led)
	b := startElector(t, newClient(t, good, tm), "tls", "pod-b", tm, led)
	first := waitLeader(t, []*replica{a, b}, time.Time{}, 30*time.Second)
	// The record is on the server: the TLS port reaches the same data as the plain one.
	plain := srv.Client(t)
	if got, err := plain.Get(context.Background(), "elector:{tls}:lease").Result(); err != nil || !strings.Contains(got, first.name) {
		t.Fatalf("lease key read on the plain port = %q, %v; want the record of %s", got, err, first.name)
	}
	// Graceful handover over TLS.
	first.stop()
	other := a
	if first == a {
		other = b
	}
	waitLeader(t, []*replica{other}, time.Now(), 10*time.Second)
	first.start()
	led.check(t, nil)

	// An explicit server name in the certificate works too.
	named := good
	named.TLSServerName = "redis.test"
	if _, err := tryAcquire(t, named); err != nil {
		t.Errorf("TLS with server name redis.test: %v", err)
	}

	wrongCA := good
	wrongCA.TLSCAFile = testcert.NewCA(t, "other CA").CertFile
	_, err := tryAcquire(t, wrongCA)
	var unknown x509.UnknownAuthorityError
	if err == nil || !errors.As(err, &unknown) || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("TLS with the wrong CA: err = %v, want x509: certificate signed by unknown authority", err)
	}

	wrongName := good
	wrongName.TLSServerName = "other.test"
	_, err = tryAcquire(t, wrongName)
	var hostErr x509.HostnameError
	if err == nil || !errors.As(err, &hostErr) || !strings.Contains(err.Error(), "other.test") {
		t.Errorf("TLS with the wrong server name: err = %v, want an x509 error naming other.test", err)
	}

	noTLS := redisclient.Config{Mode: redisclient.ModeStandalone, Addrs: []string{addr}}
	if _, err := tryAcquire(t, noTLS); err == nil {
		t.Errorf("a plain client on the TLS port acquired a lease")
	}

	// A TLS client on a plain port: Redis waits for the end of an inline command that never
	// comes, so the client can only time out.
	tlsOnPlain := good
	tlsOnPlain.Addrs = []string{srv.Addr()}
	if _, err := tryAcquire(t, tlsOnPlain); !errors.Is(err, context.DeadlineExceeded) && !isTimeout(err) {
		t.Errorf("a TLS client on the plain port: err = %v, want a timeout", err)
	}
}

// With tls-auth-clients yes, a client certificate signed by the CA is required: redisclient's
// --redis-tls-cert-file and --redis-tls-key-file provide it; without them the server refuses.
func TestTLSClientCertificates(t *testing.T) {
	ca := testcert.NewCA(t, "elector test CA")
	srv, addr := startTLS(t, ca, true)
	certFile, keyFile := ca.Issue(t, "elector-client", false)
	mutual := redisclient.Config{Mode: redisclient.ModeStandalone, Addrs: []string{addr}, TLS: true,
		TLSCAFile: ca.CertFile, TLSCertFile: certFile, TLSKeyFile: keyFile}

	tm := timing{lease: 2 * time.Second, renew: 1400 * time.Millisecond, retry: 200 * time.Millisecond}
	led := &ledger{}
	r := startElector(t, newClient(t, mutual, tm), "mtls", "pod-a", tm, led)
	waitLeader(t, []*replica{r}, time.Time{}, 30*time.Second)

	anonymous := mutual
	anonymous.TLSCertFile, anonymous.TLSKeyFile = "", ""
	// Under TLS 1.3 the client's handshake completes before the server checked its
	// certificate: the first read sees either the server's certificate-required alert or the
	// connection reset that follows it, whichever arrives first. Both are a refusal; what
	// matters is that no lease was acquired, checked on the server.
	if _, err := tryAcquire(t, anonymous); !refusedHandshake(err) {
		t.Errorf("TLS without a client certificate: err = %v, want the server to refuse (certificate required, or the connection reset)", err)
	}
	assertNoProbeLease(t, srv, "TLS without a client certificate")

	stranger := testcert.NewCA(t, "stranger CA")
	sc, sk := stranger.Issue(t, "stranger", false)
	foreign := mutual
	foreign.TLSCertFile, foreign.TLSKeyFile = sc, sk
	if _, err := tryAcquire(t, foreign); err == nil {
		t.Errorf("TLS with a client certificate of another CA acquired a lease")
	}
	assertNoProbeLease(t, srv, "TLS with a client certificate of another CA")
	r.stop()
	led.check(t, nil)
}

// refusedHandshake reports whether err is the server's refusal of a client certificate: its
// alert ("certificate required", "unknown certificate authority"...) or the connection it
// closed right after (reset, EOF, broken pipe), which may reach the client first.
func refusedHandshake(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, s := range []string{"certificate", "connection reset", "broken pipe", "EOF"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// assertNoProbeLease checks on the server, over its plain port, that tryAcquire's lease
// was not acquired.
func assertNoProbeLease(t *testing.T, srv *redistest.Server, what string) {
	t.Helper()
	if n, err := srv.Client(t).Exists(t.Context(), "elector:{probe}:lease").Result(); err != nil || n != 0 {
		t.Errorf("%s: the probe lease exists on the server (%d, %v): it was acquired", what, n, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
