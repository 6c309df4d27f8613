package redisclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/internal/testing/testcert"
)

// tlsServer accepts TLS connections that must present a client certificate
// signed by ca, completes the handshake and reports the client's common name.
func tlsServer(t *testing.T, ca *testcert.CA) (addr string, clientCN <-chan string) {
	t.Helper()
	certFile, keyFile := ca.Issue(t, "server", true)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
		MinVersion:   tls.VersionTLS12,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	cns := make(chan string, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				tc := conn.(*tls.Conn)
				_ = tc.SetDeadline(time.Now().Add(10 * time.Second))
				if err := tc.Handshake(); err != nil {
					return
				}
				if peers := tc.ConnectionState().PeerCertificates; len(peers) > 0 {
					cns <- peers[0].Subject.CommonName
				}
				_, _ = tc.Write([]byte("+OK\r\n"))
			}()
		}
	}()
	return ln.Addr().String(), cns
}

// handshake dials addr with cfg and reads the server's first line, which it
// only sends after a successful mutual handshake.
func handshake(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 5)
	if _, err := conn.Read(buf); err != nil {
		return err
	}
	if string(buf) != "+OK\r\n" {
		t.Fatalf("server sent %q", buf)
	}
	return nil
}

func TestTLSConfigDisabled(t *testing.T) {
	c := parse(t)
	cfg, err := c.TLSConfig()
	if err != nil || cfg != nil {
		t.Fatalf("TLSConfig() without --redis-tls = %v, %v; want nil, nil", cfg, err)
	}
}

func TestTLSConfigMutualHandshake(t *testing.T) {
	ca := testcert.NewCA(t, "elector test CA")
	caFile := ca.CertFile
	certFile, keyFile := ca.Issue(t, "elector-client", false)
	addr, cns := tlsServer(t, ca)
	_, port, _ := net.SplitHostPort(addr)

	base := []string{"--redis-tls", "--redis-tls-ca-file=" + caFile, "--redis-tls-cert-file=" + certFile, "--redis-tls-key-file=" + keyFile}
	c := parse(t, base...)
	cfg, err := c.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MinVersion != tls.VersionTLS12 || cfg.ServerName != "" || len(cfg.Certificates) != 1 || cfg.RootCAs == nil || cfg.InsecureSkipVerify {
		t.Fatalf("TLSConfig() = MinVersion %x ServerName %q %d certs RootCAs %v InsecureSkipVerify %v",
			cfg.MinVersion, cfg.ServerName, len(cfg.Certificates), cfg.RootCAs != nil, cfg.InsecureSkipVerify)
	}

	// Without --redis-tls-server-name the host of the dialled address is verified.
	if err := handshake(t, net.JoinHostPort("localhost", port), cfg); err != nil {
		t.Fatalf("handshake with localhost: %v", err)
	}
	if cn := <-cns; cn != "elector-client" {
		t.Errorf("server saw client certificate %q", cn)
	}

	// An explicit server name is what gets verified, whatever address is dialled.
	c = parse(t, append(base, "--redis-tls-server-name=redis.test")...)
	named, err := c.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, addr, named); err != nil {
		t.Fatalf("handshake with server name redis.test: %v", err)
	}
	c = parse(t, append(base, "--redis-tls-server-name=other.test")...)
	wrong, err := c.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, addr, wrong); err == nil || !strings.Contains(err.Error(), "other.test") {
		t.Errorf("handshake with wrong server name = %v, want a certificate name error", err)
	}

	// Without the CA file the test CA is unknown (system roots only).
	c = parse(t, "--redis-tls", "--redis-tls-cert-file="+certFile, "--redis-tls-key-file="+keyFile)
	system, err := c.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	var unknown x509.UnknownAuthorityError
	if err := handshake(t, addr, system); err == nil || !errors.As(err, &unknown) {
		t.Errorf("handshake without the CA = %v, want x509.UnknownAuthorityError", err)
	}

	// Without a client certificate the server refuses the connection.
	c = parse(t, "--redis-tls", "--redis-tls-ca-file="+caFile)
	anonymous, err := c.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	if err := handshake(t, addr, anonymous); err == nil {
		t.Error("handshake without a client certificate succeeded against a server that requires one")
	}
}
