package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/elector/elector/internal/redisclient"
	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
	"github.com/elector/elector/pkg/lease"
)

// testReplica is one replica of a test, as run and sidecar start it (startReplica), running
// until the test ends.
type testReplica struct {
	l    *replica
	base string // http://127.0.0.1:PORT
	done chan error
}

// startTestReplica starts the replica identity of lease lo on srv with so (its HTTP address
// is 127.0.0.1:0 when empty), campaigning with Recampaign, until the test ends.
func startTestReplica(t *testing.T, srv *redistest.Server, lo leaseOptions, identity string, so serveOptions) *testReplica {
	t.Helper()
	lo.identity = identity
	co := commonOptions{lease: lo, redis: redisclient.Config{Addrs: []string{srv.Addr()}, Mode: redisclient.ModeStandalone}}
	if so.httpAddr == "" {
		so.httpAddr = "127.0.0.1:0"
	}
	l, err := startReplica(&co, &so, election.Callbacks{
		OnStartedLeading: func(ctx context.Context) { <-ctx.Done() },
		OnStoppedLeading: func() {},
	}, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &testReplica{l: l, base: "http://" + l.http.ln.Addr().String(), done: make(chan error, 1)}
	l.serveHTTP(make(chan error, 1))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { r.done <- l.elector.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(time.Minute):
			t.Errorf("%s: Run did not return", identity)
		}
		l.close()
	})
	return r
}

// TestResignRefusals: POST /resign is refused, and the leader keeps its term, for a request a
// web page can make a browser send (an Origin, cross-site or same-origin; a Sec-Fetch-Site
// that is not none; a CORS "simple" content type), for one without the X-Elector-Resign
// header, and without the token of --resign-token-file or with a wrong one. The request
// that has it all moves the leadership. A real elector on a real redis-server.
func TestResignRefusals(t *testing.T) {
	srv := redistest.Start(t)
	lo := leaseOptions{name: "refusals", prefix: lease.DefaultPrefix,
		leaseDuration: 3 * time.Second, renewDeadline: 2 * time.Second, retryPeriod: 300 * time.Millisecond}
	token := "s3cr3t-token-of-the-resign-endpoint"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	so := serveOptions{resignEndpoint: resignLoopback, resignTokenFile: tokenFile}
	if err := so.validate(); err != nil {
		t.Fatal(err)
	}
	a := startTestReplica(t, srv, lo, "a", so)
	waitUntil(t, "a leads", a.l.elector.IsLeader)
	b := startTestReplica(t, srv, lo, "b", so)
	tok := a.l.elector.Status().Token
	waitUntil(t, "b follows a", func() bool { return b.l.elector.Status().Name == "a" })

	good := map[string]string{resignHeader: "1", "Authorization": "Bearer " + token}
	with := func(kv ...string) map[string]string {
		h := map[string]string{}
		for k, v := range good {
			h[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(h, kv[i])
			} else {
				h[kv[i]] = kv[i+1]
			}
		}
		return h
	}
	for _, tc := range []struct {
		name    string
		headers map[string]string
		want    int
	}{
		{"cross-site Origin", with("Origin", "http://attacker.example"), http.StatusForbidden},
		{"Origin of the endpoint itself (DNS rebinding)", with("Origin", a.base), http.StatusForbidden},
		{"Origin null", with("Origin", "null"), http.StatusForbidden},
		{"Sec-Fetch-Site cross-site", with("Sec-Fetch-Site", "cross-site"), http.StatusForbidden},
		{"Sec-Fetch-Site same-site", with("Sec-Fetch-Site", "same-site"), http.StatusForbidden},
		{"Sec-Fetch-Site same-origin", with("Sec-Fetch-Site", "same-origin"), http.StatusForbidden},
		{"text/plain", with("Content-Type", "text/plain;charset=UTF-8"), http.StatusUnsupportedMediaType},
		{"form", with("Content-Type", "application/x-www-form-urlencoded"), http.StatusUnsupportedMediaType},
		{"multipart", with("Content-Type", "multipart/form-data; boundary=x"), http.StatusUnsupportedMediaType},
		{"simple content type, no header", with("Content-Type", "text/plain", resignHeader, ""), http.StatusUnsupportedMediaType},
		{"no X-Elector-Resign", with(resignHeader, ""), http.StatusForbidden},
		{"X-Elector-Resign not 1", with(resignHeader, "yes"), http.StatusForbidden},
		{"no token", with("Authorization", ""), http.StatusUnauthorized},
		{"wrong token", with("Authorization", "Bearer "+token[:len(token)-1]+"X"), http.StatusUnauthorized},
		{"token prefix", with("Authorization", "Bearer "+token[:len(token)-1]), http.StatusUnauthorized},
		{"basic scheme", with("Authorization", "Basic "+token), http.StatusUnauthorized},
	} {
		for _, to := range []string{"", "?to=b"} {
			code, body := postResign(t, a.base+"/resign"+to, tc.headers)
			if code != tc.want {
				t.Errorf("%s%s: %d %q, want %d", tc.name, to, code, body, tc.want)
			}
		}
	}
	if st := a.l.elector.Status(); !st.IsLeader || st.Token != tok {
		t.Fatalf("a refused request moved the leadership: a's status %+v, token was %d", st, tok)
	}

	// Everything a caller who means it sends: the header and the token (curl -X POST sends
	// no Content-Type; application/json is not a simple type).
	code, body := postResign(t, a.base+"/resign?to=b", with("Content-Type", "application/json"))
	if code != http.StatusOK || !strings.Contains(body, `"resigned":true`) {
		t.Fatalf("POST /resign?to=b with the header and the token: %d %q", code, body)
	}
	waitUntil(t, "b leads", b.l.elector.IsLeader)
}

// postResign sends POST url with headers and returns the status code and the body.
func postResign(t *testing.T, url string, headers map[string]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String()
}

// TestResignTokenFile: --resign-token-file must name a readable file with one token of
// visible ASCII characters; the error names the flag and what is allowed.
func TestResignTokenFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		path, want string
	}{
		{filepath.Join(dir, "missing"), "cannot read the token"},
		{write("empty", ""), "holds 0 characters"},
		{write("short", "abc\n"), "holds 3 characters"},
		{write("space", "abcdefgh ijklmnopq\n"), "not visible ASCII"},
		{write("two-lines", "abcdefghijklmnopq\nrstuvwxyz\n"), "not visible ASCII"},
	} {
		o := serveOptions{resignTokenFile: tc.path}
		err := o.validate()
		if err == nil || !strings.HasPrefix(err.Error(), "--resign-token-file: ") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want an error naming --resign-token-file and %q", tc.path, err, tc.want)
		}
	}
	o := serveOptions{resignTokenFile: write("ok", "abcdefghijklmnopq\r\n")}
	if err := o.validate(); err != nil || string(o.resignToken) != "abcdefghijklmnopq" {
		t.Errorf("a good token: %q, %v", o.resignToken, err)
	}
	c, _, stderr := testCLI(nil)
	if code := c.main(context.Background(), []string{"sidecar", "--lease-name", "x", "--identity", "a", "--resign-token-file", filepath.Join(dir, "missing")}); code != exitUsage || !strings.Contains(stderr.String(), "--resign-token-file") {
		t.Errorf("sidecar with a missing token file: exit %d, stderr %q; want %d naming the flag", code, stderr, exitUsage)
	}
	c, _, stderr = testCLI(map[string]string{"ELECTOR_RESIGN_TOKEN_FILE": filepath.Join(dir, "missing")})
	if code := c.main(context.Background(), []string{"sidecar", "--lease-name", "x", "--identity", "a"}); code != exitUsage || !strings.Contains(stderr.String(), "--resign-token-file") {
		t.Errorf("sidecar with ELECTOR_RESIGN_TOKEN_FILE naming a missing file: exit %d, stderr %q; want %d naming the flag", code, stderr, exitUsage)
	}
}
