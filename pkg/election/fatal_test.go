package election_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/elector/elector/internal/testing/redistest"
	"github.com/elector/elector/pkg/election"
)

// fatalRetry is the RetryPeriod of the fatal-error tests: Run must return within one, as the
// first attempt is refused (a follower that retried would try again and again meanwhile).
const fatalRetry = 3 * time.Second

// runFor starts e.Run and returns its error, or fails the test when Run has not returned
// within bound.
func runFor(t *testing.T, e *election.Elector, bound time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(bound):
		cancel()
		<-done
		t.Fatalf("Run has not returned within %v", bound)
		return nil
	}
}

// aclUser creates user (password pw) on srv with the ACL rules and returns a client that logs
// in as that user, as the CLI's client builder does (no CLIENT SETINFO).
func aclUser(t *testing.T, srv *redistest.Server, user string, rules ...string) *redis.Client {
	t.Helper()
	args := []any{"ACL", "SETUSER", user, "on", ">pw", "resetkeys", "resetchannels"}
	for _, r := range rules {
		args = append(args, r)
	}
	if err := srv.Client(t).Do(context.Background(), args...).Err(); err != nil {
		t.Fatal(err)
	}
	opts := srv.Options()
	opts.Username, opts.Password, opts.DisableIdentity, opts.ContextTimeoutEnabled = user, "pw", true, true
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	return client
}

// TestRunGivesUpOnFatalError: each Redis reply that retrying cannot cure ends Run within one
// retry period with an error that wraps ErrGaveUp and the go-redis error, and names the
// reason and the Config field to fix (never a flag). Real servers, each misconfigured one way.
func TestRunGivesUpOnFatalError(t *testing.T) {
	for _, tc := range []struct {
		name   string
		client func(t *testing.T) redis.UniversalClient
		reply  string // how the server's reply starts
		reason string
		fix    string
		// observe: Observe is refused too (it reads and subscribes, no script: an ACL without
		// scripting, or a renamed EVALSHA, lets it observe).
		observe bool
	}{
		{"WRONGPASS", func(t *testing.T) redis.UniversalClient {
			opts := redistest.Start(t, "--requirepass", "right").Options()
			opts.Password = "wrong"
			return redis.NewClient(opts)
		}, "WRONGPASS", "auth", "Username and Password of Config.Client", true},
		{"NOAUTH", func(t *testing.T) redis.UniversalClient {
			opts := redistest.Start(t, "--requirepass", "right").Options()
			opts.Password = "" // redistest's options carry the server's password
			return redis.NewClient(opts)
		}, "NOAUTH", "auth", "Username and Password of Config.Client", true},
		{"NOPERM", func(t *testing.T) redis.UniversalClient {
			return aclUser(t, redistest.Start(t), "noscript", "~*", "&*", "+@all", "-@scripting")
		}, "NOPERM", "noperm", "grant the Redis user +", false},
		{"unknown command", func(t *testing.T) redis.UniversalClient {
			args := []string{"--rename-command", "evalsha", "", "--rename-command", "eval", ""}
			if _, v := redistest.ServerVersion(t); !strings.HasPrefix(v, "6.") {
				args = append(args, "--rename-command", "fcall", "") // Redis functions, where the lease may use them
			}
			return redis.NewClient(redistest.Start(t, args...).Options())
		}, "ERR unknown command", "unknown_command", "rename-command", false},
		{"cluster client, standalone server", func(t *testing.T) redis.UniversalClient {
			return redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{redistest.Start(t).Addr()}, ContextTimeoutEnabled: true})
		}, "ERR This instance has cluster support disabled", "cluster_mode", "NewClient", true},
		{"standalone client, cluster node", func(t *testing.T) redis.UniversalClient {
			cl := redistest.StartCluster(t, 3)
			// A node that does not serve the lease's slot redirects every call (MOVED).
			owner, err := cl.Client(t).MasterForKey(context.Background(), "{fatal}")
			if err != nil {
				t.Fatal(err)
			}
			for _, addr := range cl.Addrs() {
				if addr != owner.Options().Addr {
					return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
				}
			}
			t.Fatal("every node serves the slot")
			return nil
		}, "MOVED", "cluster_mode", "NewClusterClient", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := tc.client(t)
			t.Cleanup(func() { _ = client.Close() })
			var started, stopped atomic.Int32
			e, err := election.New(election.Config{
				Client: client, LeaseName: "fatal", Identity: "pod-a", RetryPeriod: fatalRetry,
				Callbacks: election.Callbacks{
					OnStartedLeading: func(context.Context) { started.Add(1) },
					OnStoppedLeading: func() { stopped.Add(1) },
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			err = runFor(t, e, fatalRetry)
			var redisErr redis.Error
			switch {
			case !errors.Is(err, election.ErrGaveUp):
				t.Fatalf("Run = %v, want an error wrapping ErrGaveUp", err)
			case !errors.As(err, &redisErr) || !strings.HasPrefix(redisErr.Error(), tc.reply):
				t.Errorf("Run = %v: want it to wrap the server's reply %q (errors.As redis.Error)", err, tc.reply)
			case errors.Is(err, election.ErrLeadershipLost):
				t.Errorf("Run = %v: no term began, none was lost", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "("+tc.reason+";") || !strings.Contains(msg, tc.fix) || strings.Contains(msg, "--") {
				t.Errorf("Run = %q: want the reason %q and a fix naming %q, and no flag", msg, tc.reason, tc.fix)
			}
			if started.Load() != 0 || stopped.Load() != 0 || e.IsLeader() {
				t.Errorf("callbacks ran (started %d, stopped %d) or leading %v", started.Load(), stopped.Load(), e.IsLeader())
			}
			// Observe gives up on it too, rather than retry.
			for _, err := range e.Observe(context.Background()) {
				if !tc.observe {
					break
				}
				if err == nil || !errors.As(err, &redisErr) {
					t.Errorf("Observe: %v, want the server's refusal", err)
				}
				break
			}
		})
	}
}

// TestLeaderStepsDownOnNOPERM: an administrator revokes the leader's scripting while it leads.
// Its next renew is refused (NOPERM): it steps down as any failed renew ends a term — the
// work's ctx cancelled, with a cause wrapping ErrLeadershipLost and ErrGaveUp, IsLeader false
// before OnStoppedLeading runs — well before its trust deadline, and Run then returns the error
// (also wrapping ErrLeadershipLost with Recampaign off). The release is attempted
// (ReleaseOnCancel) and refused too; the lease then runs out in Redis, as after a crash.
func TestLeaderStepsDownOnNOPERM(t *testing.T) {
	for _, recampaign := range []bool{false, true} {
		t.Run(map[bool]string{false: "once", true: "recampaign"}[recampaign], func(t *testing.T) {
			srv := redistest.Start(t)
			admin := srv.Client(t)
			client := aclUser(t, srv, "leader", "~*", "&*", "+@all")
			const retry, deadline, leaseFor = 300 * time.Millisecond, 2 * time.Second, 3 * time.Second
			leading := make(chan struct{})
			cause := make(chan error, 1)
			var leaderAtStop atomic.Value
			var e *election.Elector
			e, err := election.New(election.Config{
				Client: client, LeaseName: "revoked", Identity: "pod-a",
				LeaseDuration: leaseFor, RenewDeadline: deadline, RetryPeriod: retry,
				ReleaseOnCancel: true, Recampaign: recampaign,
				Callbacks: election.Callbacks{
					OnStartedLeading: func(ctx context.Context) {
						close(leading)
						<-ctx.Done()
						cause <- context.Cause(ctx)
					},
					OnStoppedLeading: func() { leaderAtStop.Store(e.IsLeader()) },
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- e.Run(context.Background()) }()
			select {
			case <-leading:
			case <-time.After(10 * time.Second):
				t.Fatal("never led")
			}
			// A renewal or two first: the term is established.
			time.Sleep(2 * retry)
			revoked := time.Now()
			if err := admin.Do(context.Background(), "ACL", "SETUSER", "leader", "-@scripting").Err(); err != nil {
				t.Fatal(err)
			}
			var runErr error
			select {
			case runErr = <-done:
			case <-time.After(deadline + 10*retry):
				t.Fatal("Run has not returned after the ACL was revoked")
			}
			// The step-down came from the refused renew (the next one after the revoke, within a
			// retry period or so), not from the trust deadline.
			if took := time.Since(revoked); took >= deadline {
				t.Errorf("Run returned %v after the revoke, not before the renew deadline (%v)", took, deadline)
			}
			if c := <-cause; !errors.Is(c, election.ErrLeadershipLost) || !errors.Is(c, election.ErrGaveUp) || !redis.IsPermissionError(errors.Unwrap(errors.Unwrap(c))) && !strings.Contains(c.Error(), "NOPERM") {
				t.Errorf("the work's cause = %v, want ErrLeadershipLost and ErrGaveUp with the NOPERM", c)
			}
			if v, _ := leaderAtStop.Load().(bool); v {
				t.Error("IsLeader was true in OnStoppedLeading")
			}
			if e.IsLeader() || e.Status().Token != 0 {
				t.Errorf("after Run: IsLeader %v, %+v", e.IsLeader(), e.Status())
			}
			if !errors.Is(runErr, election.ErrGaveUp) || !strings.Contains(runErr.Error(), "NOPERM") || !strings.Contains(runErr.Error(), "refused the renew") {
				t.Errorf("Run = %v, want ErrGaveUp for the refused renew", runErr)
			}
			if lost := errors.Is(runErr, election.ErrLeadershipLost); lost == recampaign {
				t.Errorf("Run = %v: wraps ErrLeadershipLost %v, want %v (Recampaign %v)", runErr, lost, !recampaign, recampaign)
			}
			// The release was refused as well: the lease runs out by itself.
			if ttl := admin.PTTL(context.Background(), "elector:{revoked}:lease").Val(); ttl <= 0 || ttl > leaseFor {
				t.Errorf("the lease's PTTL is %v; want it to run out by itself (release refused)", ttl)
			}
		})
	}
}

// TestStartTimeout: with Redis unreachable, Run returns after Config.StartTimeout with an error
// wrapping ErrGaveUp and context.DeadlineExceeded that names the last error and its fix; once
// a reply came, the bound no longer applies.
func TestStartTimeout(t *testing.T) {
	const bound = 500 * time.Millisecond
	t.Run("unreachable", func(t *testing.T) {
		client := redis.NewClient(&redis.Options{Addr: redistest.FreeAddr(t), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = client.Close() })
		e, err := election.New(election.Config{
			Client: client, LeaseName: "start", Identity: "pod-a", RetryPeriod: 200 * time.Millisecond, StartTimeout: bound,
			Callbacks: election.Callbacks{OnStartedLeading: func(context.Context) {}},
		})
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		// The bound, plus one call in flight when it passes (max(RetryPeriod, RenewDeadline/2)),
		// plus slack for a loaded machine.
		err = runFor(t, e, bound+5*time.Second+5*time.Second)
		if took := time.Since(start); took < bound {
			t.Errorf("Run returned after %v, before StartTimeout (%v)", took, bound)
		}
		if !errors.Is(err, election.ErrGaveUp) || !errors.Is(err, context.DeadlineExceeded) ||
			!strings.Contains(err.Error(), "Config.StartTimeout (500ms)") || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "address of Config.Client") {
			t.Errorf("Run = %v, want ErrGaveUp and DeadlineExceeded naming Config.StartTimeout, the refusal and its fix", err)
		}
	})
	t.Run("replied", func(t *testing.T) {
		srv := redistest.Start(t)
		leading := make(chan struct{})
		e, err := election.New(election.Config{
			Client: srv.Client(t), LeaseName: "start", Identity: "pod-a", RetryPeriod: 100 * time.Millisecond,
			LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, StartTimeout: bound,
			Callbacks: election.Callbacks{OnStartedLeading: func(ctx context.Context) { close(leading); <-ctx.Done() }},
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.Run(ctx) }()
		<-leading
		select {
		case err := <-done:
			t.Fatalf("Run returned while leading: %v", err)
		case <-time.After(3 * bound):
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v after the cancel", err)
		}
	})
}
