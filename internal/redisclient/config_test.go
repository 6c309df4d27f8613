package redisclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/elector/elector/internal/testing/testcert"
)

// parse registers the flags on a fresh FlagSet, parses args and returns the Config.
func parse(t *testing.T, args ...string) Config {
	t.Helper()
	var c Config
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	c.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return c
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestAddFlagsDefaults(t *testing.T) {
	c := parse(t)
	if len(c.Addrs) != 1 || c.Addrs[0] != DefaultAddr || c.Mode != ModeStandalone || c.DB != 0 || c.TLS {
		t.Errorf("defaults = %v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

func TestAddrFlagParsing(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{[]string{"--redis-addr=a:1"}, []string{"a:1"}},
		{[]string{"--redis-addr", " a:1 , b:2,c:3 "}, []string{"a:1", "b:2", "c:3"}},
		{[]string{"--redis-addr=a:1", "--redis-addr=b:2"}, []string{"a:1", "b:2"}},
		{[]string{"--redis-addr="}, []string{}},
		{[]string{"--redis-addr=a:1,,b:2"}, []string{"a:1", "", "b:2"}},
		{[]string{"--redis-addr=[::1]:6379"}, []string{"[::1]:6379"}},
	} {
		c := parse(t, tt.args...)
		if strings.Join(c.Addrs, "|") != strings.Join(tt.want, "|") || len(c.Addrs) != len(tt.want) {
			t.Errorf("%q: Addrs = %q, want %q", tt.args, c.Addrs, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	notPEM := writeFile(t, "not.pem", "hello\n")
	ca := testcert.NewCA(t, "elector test CA")
	caFile := ca.CertFile
	certFile, keyFile := ca.Issue(t, "client", false)

	tests := []struct {
		name     string
		args     []string
		wantFlag string // "" means valid
		wantMsg  string
	}{
		{"defaults", nil, "", ""},
		{"hostname", []string{"--redis-addr=redis.default.svc:6379"}, "", ""},
		{"ipv6", []string{"--redis-addr=[::1]:6379"}, "", ""},
		{"empty addr", []string{"--redis-addr="}, "--redis-addr", "must not be empty"},
		{"empty entry", []string{"--redis-mode=cluster", "--redis-addr=a:1,,b:2"}, "--redis-addr", "empty address"},
		{"no port", []string{"--redis-addr=localhost"}, "--redis-addr", "missing port"},
		{"no host", []string{"--redis-addr=:6379"}, "--redis-addr", "no host"},
		{"port zero", []string{"--redis-addr=a:0"}, "--redis-addr", "port from 1 to 65535"},
		{"port too big", []string{"--redis-addr=a:65536"}, "--redis-addr", "port from 1 to 65535"},
		{"port not a number", []string{"--redis-addr=a:redis"}, "--redis-addr", "invalid port"},
		{"url", []string{"--redis-addr=redis://a:6379"}, "--redis-addr", "is a URL"},
		{"unbracketed ipv6", []string{"--redis-addr=::1:6379"}, "--redis-addr", "too many colons"},
		{"standalone list", []string{"--redis-addr=a:1,b:2"}, "--redis-addr", "exactly one"},
		{"unknown mode", []string{"--redis-mode=replica"}, "--redis-mode", `unknown mode "replica"; allowed: standalone, sentinel, cluster`},
		{"sentinel without master", []string{"--redis-mode=sentinel", "--redis-addr=a:26379,b:26379"}, "--sentinel-master", "required"},
		{"sentinel", []string{"--redis-mode=sentinel", "--redis-addr=a:26379,b:26379", "--sentinel-master=mymaster", "--redis-db=2"}, "", ""},
		{"master without sentinel", []string{"--sentinel-master=mymaster"}, "--sentinel-master", "only allowed"},
		{"sentinel user without sentinel", []string{"--sentinel-username=watcher"}, "--sentinel-username", "only allowed"},
		{"sentinel password file in cluster mode", []string{"--redis-mode=cluster", "--sentinel-password-file=/run/pw"}, "--sentinel-password-file", "only allowed"},
		{"sentinel with its own user", []string{"--redis-mode=sentinel", "--redis-addr=a:26379", "--sentinel-master=m", "--sentinel-username=watcher", "--sentinel-password-file=/run/pw"}, "", ""},
		{"cluster", []string{"--redis-mode=cluster", "--redis-addr=a:1,b:2,c:3"}, "", ""},
		{"negative db", []string{"--redis-db=-1"}, "--redis-db", "0 or more"},
		{"cluster db", []string{"--redis-mode=cluster", "--redis-db=1"}, "--redis-db", "must be 0"},
		{"ca without tls", []string{"--redis-tls-ca-file=" + caFile}, "--redis-tls-ca-file", "requires --redis-tls"},
		{"server name without tls", []string{"--redis-tls-server-name=x"}, "--redis-tls-server-name", "requires --redis-tls"},
		{"tls system roots", []string{"--redis-tls"}, "", ""},
		{"tls full", []string{"--redis-tls", "--redis-tls-ca-file=" + caFile, "--redis-tls-cert-file=" + certFile, "--redis-tls-key-file=" + keyFile}, "", ""},
		{"ca missing", []string{"--redis-tls", "--redis-tls-ca-file=" + missing}, "--redis-tls-ca-file", "no such file"},
		{"ca not pem", []string{"--redis-tls", "--redis-tls-ca-file=" + notPEM}, "--redis-tls-ca-file", "no PEM certificate"},
		{"cert without key", []string{"--redis-tls", "--redis-tls-cert-file=" + certFile}, "--redis-tls-cert-file", "requires --redis-tls-key-file"},
		{"key without cert", []string{"--redis-tls", "--redis-tls-key-file=" + keyFile}, "--redis-tls-key-file", "requires --redis-tls-cert-file"},
		{"cert missing", []string{"--redis-tls", "--redis-tls-cert-file=" + missing, "--redis-tls-key-file=" + keyFile}, "--redis-tls-cert-file", "no such file"},
		{"key missing", []string{"--redis-tls", "--redis-tls-cert-file=" + certFile, "--redis-tls-key-file=" + missing}, "--redis-tls-key-file", "no such file"},
		{"cert and key swapped", []string{"--redis-tls", "--redis-tls-cert-file=" + keyFile, "--redis-tls-key-file=" + certFile}, "--redis-tls-cert-file/--redis-tls-key-file", "cannot load"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := parse(t, tt.args...)
			err := c.Validate()
			if tt.wantFlag == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				if _, err := New(c); err != nil {
					t.Fatalf("New() = %v, want nil", err)
				}
				return
			}
			var ue *UsageError
			if !errors.As(err, &ue) {
				t.Fatalf("Validate() = %v (%T), want *UsageError", err, err)
			}
			if ue.Source != tt.wantFlag || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Validate() = %q, want source %s and message containing %q", err, tt.wantFlag, tt.wantMsg)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("usage error %q is not one line", err)
			}
			if _, newErr := New(c); !errors.As(newErr, &ue) {
				t.Errorf("New() = %v, want the same *UsageError", newErr)
			}
		})
	}
}

func TestLoadPassword(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == PasswordEnv {
				return v
			}
			return ""
		}
	}
	dir := t.TempDir()
	tests := []struct {
		name    string
		file    string // file content; "-" means no --redis-password-file, "!" an unreadable path
		env     string
		want    string
		wantErr string
	}{
		{name: "none", file: "-", want: ""},
		{name: "env", file: "-", env: "s3cret", want: "s3cret"},
		{name: "file", file: "s3cret", want: "s3cret"},
		{name: "file newline", file: "s3cret\n", want: "s3cret"},
		{name: "file crlf", file: "s3cret\r\n", want: "s3cret"},
		{name: "only one newline trimmed", file: "s3cret\n\n", want: "s3cret\n"},
		{name: "spaces kept", file: " s3cret ", want: " s3cret "},
		{name: "empty file", file: "", wantErr: "is empty"},
		{name: "only newline", file: "\n", wantErr: "is empty"},
		{name: "both", file: "s3cret", env: "other", wantErr: "conflicts with the REDIS_PASSWORD"},
		{name: "unreadable", file: "!", wantErr: "cannot read the password file"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			switch tt.file {
			case "-":
			case "!":
				c.PasswordFile = filepath.Join(dir, "does-not-exist")
			default:
				c.PasswordFile = filepath.Join(dir, fmt.Sprintf("pw%d", i))
				if err := os.WriteFile(c.PasswordFile, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			err := c.LoadPassword(env(tt.env))
			if tt.wantErr == "" {
				if err != nil || c.Password != tt.want {
					t.Fatalf("LoadPassword() = %v, password %q; want nil, %q", err, c.Password, tt.want)
				}
				return
			}
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("LoadPassword() = %v, want *UsageError containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "other") {
				t.Errorf("error %q contains the password", err)
			}
			if tt.file == "!" && !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("error %v does not wrap fs.ErrNotExist", err)
			}
		})
	}
}

// The Sentinels' password is loaded like the data nodes', from its own variable or file, and
// only in sentinel mode.
func TestLoadSentinelPassword(t *testing.T) {
	env := map[string]string{PasswordEnv: "data-pw", SentinelPasswordEnv: "sentinel-pw"}
	c := parse(t, "--redis-mode=sentinel", "--sentinel-master=m")
	if err := c.LoadPassword(func(k string) string { return env[k] }); err != nil {
		t.Fatal(err)
	}
	if c.Password != "data-pw" || c.SentinelPassword != "sentinel-pw" {
		t.Errorf("from the environment: password %q, sentinel password %q", c.Password, c.SentinelPassword)
	}

	file := writeFile(t, "sentinel-pw", "from-file\n")
	c = parse(t, "--redis-mode=sentinel", "--sentinel-master=m", "--sentinel-password-file="+file)
	if err := c.LoadPassword(func(string) string { return "" }); err != nil || c.SentinelPassword != "from-file" || c.Password != "" {
		t.Errorf("from --sentinel-password-file: %v, sentinel password %q, password %q", err, c.SentinelPassword, c.Password)
	}
	err := c.LoadPassword(func(k string) string { return env[k] })
	var ue *UsageError
	if !errors.As(err, &ue) || ue.Source != "--sentinel-password-file" || !strings.Contains(err.Error(), SentinelPasswordEnv) {
		t.Errorf("file and variable both set: %v; want a usage error about --sentinel-password-file and %s", err, SentinelPasswordEnv)
	}

	c = parse(t)
	if err := c.LoadPassword(func(k string) string { return env[k] }); err != nil || c.SentinelPassword != "" {
		t.Errorf("standalone mode: %v, sentinel password %q; want the variable ignored", err, c.SentinelPassword)
	}
	c = parse(t, "--redis-mode=sentinel", "--sentinel-master=m")
	c.SentinelPassword = "sentinel-secret"
	if out := fmt.Sprintf("%v %+v %#v", c, c, c); strings.Contains(out, "sentinel-secret") {
		t.Errorf("the sentinel password is printed: %s", out)
	}
	if b, _ := json.Marshal(c); strings.Contains(string(b), "sentinel-secret") {
		t.Errorf("the sentinel password is in JSON: %s", b)
	}
}

func TestPasswordNeverPrinted(t *testing.T) {
	const pw = "hunter2-VERY-secret"
	c := parse(t, "--redis-username=alice", "--redis-password-file=/run/secrets/pw")
	c.Password = pw
	type wrapper struct {
		Name   string
		Config Config
		Ptr    *Config
	}
	values := []any{c, &c, wrapper{"w", c, &c}, []Config{c}, map[string]Config{"k": c}}
	verbs := []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%t", "%10.3v"}
	for _, v := range values {
		for _, verb := range verbs {
			out := fmt.Sprintf(verb, v)
			if strings.Contains(out, pw) || strings.Contains(out, fmt.Sprintf("%x", pw)) || strings.Contains(out, fmt.Sprintf("%X", pw)) {
				t.Errorf("fmt %s of %T printed the password: %s", verb, v, out)
			}
		}
	}
	if s := c.String(); !strings.Contains(s, "alice") || !strings.Contains(s, "/run/secrets/pw") || !strings.Contains(s, redacted) {
		t.Errorf("String() = %q, want the user, the password file and %s", s, redacted)
	}
	if s := fmt.Sprintf("%#v", c); !strings.Contains(s, "Username:\"alice\"") {
		t.Errorf("%%#v = %q, want Go syntax", s)
	}
	b, err := json.Marshal(wrapper{"w", c, &c})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), pw) || !strings.Contains(string(b), "alice") {
		t.Errorf("json = %s", b)
	}
	if out := fmt.Sprintf("%+v", c.MarshalLog()); strings.Contains(out, pw) || !strings.Contains(out, redacted) {
		t.Errorf("MarshalLog() = %s", out)
	}
	var empty Config
	if s := empty.String(); strings.Contains(s, redacted) {
		t.Errorf("an empty password is shown as %s: %s", redacted, s)
	}
}
