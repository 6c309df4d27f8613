package reliability

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/redistest"
	"github.com/elector/elector/pkg/lease"
)

// certAuthority is a CA generated for one test, writing PEM files into its directory.
type certAuthority struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	dir    string
	name   string
	caFile string
}

func newCA(t *testing.T, name string) *certAuthority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &certAuthority{cert: cert, key: key, dir: t.TempDir(), name: name}
	ca.caFile = filepath.Join(ca.dir, "ca.pem")
	writePEM(t, ca.caFile, "CERTIFICATE", der)
	return ca
}

// issue returns the PEM files of a certificate for localhost, redis.test and 127.0.0.1, for a
// server or a client.
func (ca *certAuthority) issue(t *testing.T, cn string, server bool) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	usage := x509.ExtKeyUsageClientAuth
	if server {
		usage = x509.ExtKeyUsageServerAuth
	}
	serial, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     []string{"localhost", "redis.test"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(ca.dir, cn+".pem"), filepath.Join(ca.dir, cn+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	// redis-server reads the key as another process of the same user: 0600 is enough.
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// startTLS starts a redis-server with a TLS port besides its plain port (redistest probes the
// plain one) and returns the server and "127.0.0.1:TLSPORT". With authClients, clients must
// present a certificate signed by ca.
func startTLS(t *testing.T, ca *certAuthority, authClients bool) (*redistest.Server, string) {
	t.Helper()
	certFile, keyFile := ca.issue(t, "redis-server", true)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	auth := "no"
	if authClients {
		auth = "yes"
	}
	srv := redistest.Start(t,
		"--tls-port", strconv.Itoa(port),
		"--tls-cert-file", certFile,
		"--tls-key-file", keyFile,
		"--tls-ca-cert-file", ca.caFile,
		"--tls-auth-clients", auth)
	return srv, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
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
	ca := newCA(t, "elector test CA")
	srv, addr := startTLS(t, ca, false)
	good := redisclient.Config{Mode: redisclient.ModeStandalone, Addrs: []string{addr}, TLS: true, TLSCAFile: ca.caFile}

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
	wrongCA.TLSCAFile = newCA(t, "other CA").caFile
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
	ca := newCA(t, "elector test CA")
	_, addr := startTLS(t, ca, true)
	certFile, keyFile := ca.issue(t, "elector-client", false)
	mutual := redisclient.Config{Mode: redisclient.ModeStandalone, Addrs: []string{addr}, TLS: true,
		TLSCAFile: ca.caFile, TLSCertFile: certFile, TLSKeyFile: keyFile}

	tm := timing{lease: 2 * time.Second, renew: 1400 * time.Millisecond, retry: 200 * time.Millisecond}
	led := &ledger{}
	r := startElector(t, newClient(t, mutual, tm), "mtls", "pod-a", tm, led)
	waitLeader(t, []*replica{r}, time.Time{}, 30*time.Second)

	anonymous := mutual
	anonymous.TLSCertFile, anonymous.TLSKeyFile = "", ""
	if _, err := tryAcquire(t, anonymous); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("TLS without a client certificate: err = %v, want the server to refuse (certificate required)", err)
	}

	stranger := newCA(t, "stranger CA")
	sc, sk := stranger.issue(t, "stranger", false)
	foreign := mutual
	foreign.TLSCertFile, foreign.TLSKeyFile = sc, sk
	if _, err := tryAcquire(t, foreign); err == nil {
		t.Errorf("TLS with a client certificate of another CA acquired a lease")
	}
	r.stop()
	led.check(t, nil)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
