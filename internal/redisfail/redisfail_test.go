package redisfail

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// replyErr is an error reply of a Redis server, as go-redis returns it (a redis.Error).
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

// TestFatal: the replies that retrying cannot cure, each as the servers word it, are fatal, with
// a reason and a fix; the ones that may heal are not. The real servers' replies are checked in
// package election (TestRunEndsOnFatalError).
func TestFatal(t *testing.T) {
	wrap := func(msg string) error { return fmt.Errorf("acquire lease %q: %w", "x", replyErr(msg)) }
	for _, tc := range []struct {
		msg            string
		cluster        bool
		reason         string
		fatal          bool
		fixLib, fixCLI string
	}{
		{"WRONGPASS invalid username-password pair or user is disabled.", false, "auth", true, "Password of Config.Client", "--password"},
		{"NOAUTH Authentication required.", false, "auth", true, "Username and Password", "--password"},
		{"NOPERM User u has no permissions to run the 'evalsha' command", false, "noperm", true, "+evalsha", "+evalsha"},
		{"ERR ACL failure in script: User u has no permissions to run the 'set' command", false, "noperm", true, "+set", "+set"},
		{"ERR unknown command 'evalsha', with args beginning with: 'da68' '3' ", false, "unknown_command", true, "rename-command", "rename-command"},
		{"ERR unknown command `evalsha`, with args beginning with: ", false, "unknown_command", true, "rename-command", "rename-command"},
		{"ERR Unknown Redis command called from script script: abc, on @user_script:1.", false, "unknown_command", true, "rename-command", "rename-command"},
		{"ERR This instance has cluster support disabled", true, "cluster_mode", true, "NewClient", "--mode"},
		{"MOVED 16287 127.0.0.1:39531", false, "cluster_mode", true, "NewClusterClient", "--mode"},
		{"ASK 16287 127.0.0.1:39531", false, "cluster_mode", true, "NewClusterClient", "--mode"},
		{"MOVED 16287 127.0.0.1:39531", true, "cluster_mode", false, "NewClusterClient", "--mode"}, // a Cluster client that gave up following
		{"CLUSTERDOWN Hash slot not served", true, "server", false, "", ""},                        // a cluster that heals
		{"LOADING Redis is loading the dataset in memory", false, "server", false, "", ""},
	} {
		err := wrap(tc.msg)
		if r := Reason(err); r != tc.reason {
			t.Errorf("Reason(%q) = %q, want %q", tc.msg, r, tc.reason)
		}
		if f := Fatal(err, tc.cluster); f != tc.fatal {
			t.Errorf("Fatal(%q, cluster %v) = %v, want %v", tc.msg, tc.cluster, f, tc.fatal)
		}
		cli := Names{Addr: "--addr", Credentials: "--user, --password", Mode: "--mode", KeyPrefix: "--prefix"}
		for _, h := range []struct {
			names Names
			want  string
		}{{Library, tc.fixLib}, {cli, tc.fixCLI}} {
			got := Hint(err, h.names)
			if (h.want == "") != (got == "") || !strings.Contains(got, h.want) {
				t.Errorf("Hint(%q) = %q, want it to name %q", tc.msg, got, h.want)
			}
			if h.names == Library && strings.Contains(got, "--") {
				t.Errorf("Hint(%q, Library) = %q names a flag", tc.msg, got)
			}
		}
	}
	for _, err := range []error{nil, context.DeadlineExceeded, errors.New("dial tcp: connection refused"), fmt.Errorf("x: %w", context.Canceled)} {
		if Fatal(err, false) {
			t.Errorf("Fatal(%v) = true", err)
		}
	}
}

// TestNamesFrom: the CLI's names reach the library through the context; without them the
// library's own.
func TestNamesFrom(t *testing.T) {
	if NamesFrom(context.Background()) != Library {
		t.Error("NamesFrom(Background) is not Library")
	}
	n := Names{Addr: "--redis-addr"}
	if NamesFrom(WithNames(context.Background(), n)) != n {
		t.Error("NamesFrom(WithNames(n)) is not n")
	}
}
