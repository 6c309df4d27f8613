package redisclient

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
)

// FuzzValidate parses arbitrary --redis-addr, --redis-mode, --sentinel-master and --redis-db
// values as the command line would and validates them. Every refusal is a one-line *UsageError
// that names a flag; every accepted Config has addresses that dial as host:port with a port in
// 1-65535, exactly one of them in standalone mode, a master name exactly in sentinel mode, and
// New builds the client of its mode from it without dialling.
func FuzzValidate(f *testing.F) {
	f.Add("127.0.0.1:6379", "standalone", "", "0")
	f.Add("a:1,b:2,c:3", "sentinel", "mymaster", "1")
	f.Add("[::1]:7000, [::1]:7001", "cluster", "", "0")
	f.Add("redis://h:1", "standalone", "", "0")
	f.Add("h:0", "cluster", "", "2")
	f.Add("h:65536", "sentinel", "", "-1")
	f.Add(",", "Standalone", "m", "x")
	f.Add("h\n:1", "standalone\n", "", "0")
	f.Add("[fe80::1%eth0]:6379", "standalone", "", "15")
	f.Fuzz(func(t *testing.T, addrs, mode, master, db string) {
		fs := pflag.NewFlagSet("fuzz", pflag.ContinueOnError)
		fs.SetOutput(discard{})
		var c Config
		c.AddFlags(fs)
		args := []string{"--" + FlagAddr + "=" + addrs, "--" + FlagMode + "=" + mode, "--" + FlagSentinelMaster + "=" + master, "--" + FlagDB + "=" + db}
		if err := fs.Parse(args); err != nil {
			return // pflag refused the value (--redis-db not an int): not Validate's business
		}
		err := c.Validate()
		if err != nil {
			var ue *UsageError
			if !errors.As(err, &ue) || !strings.HasPrefix(ue.Source, "--") || ue.Msg == "" {
				t.Fatalf("Validate(%q) = %v (%T); want a *UsageError naming a flag", args, err, err)
			}
			if strings.ContainsAny(err.Error(), "\r\n") {
				t.Fatalf("Validate(%q) error %q spans several lines", args, err)
			}
			return
		}
		switch c.Mode {
		case ModeStandalone, ModeCluster:
			if c.SentinelMaster != "" {
				t.Fatalf("Validate(%q) accepted a sentinel master in %s mode", args, c.Mode)
			}
		case ModeSentinel:
			if c.SentinelMaster == "" {
				t.Fatalf("Validate(%q) accepted sentinel mode without a master name", args)
			}
		default:
			t.Fatalf("Validate(%q) accepted mode %q", args, c.Mode)
		}
		if len(c.Addrs) == 0 || (c.Mode == ModeStandalone && len(c.Addrs) != 1) {
			t.Fatalf("Validate(%q) accepted %d addresses in %s mode", args, len(c.Addrs), c.Mode)
		}
		for _, a := range c.Addrs {
			host, port, err := net.SplitHostPort(a)
			n, perr := strconv.Atoi(port)
			if err != nil || host == "" || perr != nil || n < 1 || n > 65535 || strings.ContainsAny(host, " \t\r\n/") {
				t.Fatalf("Validate(%q) accepted address %q", args, a)
			}
		}
		if c.DB < 0 || (c.Mode == ModeCluster && c.DB != 0) {
			t.Fatalf("Validate(%q) accepted database %d in %s mode", args, c.DB, c.Mode)
		}
		client, err := New(c)
		if err != nil {
			t.Fatalf("New(%v) of a valid config: %v", c, err)
		}
		defer client.Close()
		_, isCluster := client.(*redis.ClusterClient)
		if _, isClient := client.(*redis.Client); isCluster != (c.Mode == ModeCluster) || isClient == isCluster {
			t.Fatalf("New(%v) returned a %T", c, client)
		}
	})
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// FuzzPasswordNeverPrinted formats a Config holding an arbitrary password (as the data nodes'
// and the Sentinels' password) in every way a
// program might print or log it. The password must not show, unless it is text that the
// output contains anyway (a password "e" is in every output).
func FuzzPasswordNeverPrinted(f *testing.F) {
	for _, pw := range []string{"s3cr3t-P@ss", "<redacted>", "%v", "\n", "é", "{}", `"quoted"`, "Password"} {
		f.Add(pw)
	}
	show := func(c Config) string {
		j, _ := json.Marshal(c)
		return strings.Join([]string{
			fmt.Sprintf("%v|%+v|%#v|%s|%q|%x|%X|%d|%10.3v", c, c, c, c, c, c, c, c, c),
			fmt.Sprintf("%v|%+v", &c, []Config{c}),
			c.String(), c.GoString(), string(j), fmt.Sprintf("%+v", c.MarshalLog()),
		}, "\n")
	}
	base := Config{Addrs: []string{"h:1"}, Mode: ModeSentinel, SentinelMaster: "m", Username: "u", TLS: true}
	f.Fuzz(func(t *testing.T, pw string) {
		if pw == "" {
			return
		}
		c := base
		c.Password, c.SentinelPassword = pw, pw
		out := show(c)
		if !strings.Contains(out, pw) {
			return
		}
		// The password text may occur in what is printed anyway: the other fields, the
		// placeholder, the syntax of each format. Only an occurrence beyond those is a leak.
		without := base
		without.Password, without.SentinelPassword = redacted, redacted
		if strings.Count(out, pw) > strings.Count(show(without), pw) {
			t.Fatalf("password %q shows in:\n%s", pw, out)
		}
	})
}
