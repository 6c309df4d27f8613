package envflag

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// FuzzApply sets the flags of newFlags from arbitrary environment values. Apply must behave
// exactly like setting each flag in turn, in name order, from its non-empty variable: the same
// values, the first rejected value reported as an *Error that names the variable, the flag and
// the value, flags given on the command line and flags marked with MarkNoEnv untouched.
func FuzzApply(f *testing.F) {
	f.Add("a:1,b:2", "jobs", "3", "true", "4s", "leaked")
	f.Add("", "", "", "", "", "")
	f.Add("a:1", "x", "three", "yes", "4", "")
	f.Add(",", "é", "-1", "0", "-1h", "x")
	f.Add("a:1,,b:2", "name with spaces", "99999999999999999999", "T", "1.5µs", "\x00")
	f.Fuzz(func(t *testing.T, addrs, name, db, tls, deadline, secret string) {
		env := map[string]string{
			"ELECTOR_REDIS_ADDR":     addrs,
			"ELECTOR_LEASE_NAME":     name, // given on the command line below: must be ignored
			"ELECTOR_REDIS_DB":       db,
			"ELECTOR_REDIS_TLS":      tls,
			"ELECTOR_RENEW_DEADLINE": deadline,
			"ELECTOR_NEVER_FROM_ENV": secret,
		}
		got := newFlags(t)
		if err := got.fs.Parse([]string{"--lease-name=cli"}); err != nil {
			t.Fatal(err)
		}
		err := Apply(got.fs, "ELECTOR", mapLookup(env))

		// The reference: set each flag by hand, in the order Apply visits them.
		want := newFlags(t)
		if err := want.fs.Parse([]string{"--lease-name=cli"}); err != nil {
			t.Fatal(err)
		}
		var wantErr *Error
		for _, flag := range []string{"redis-addr", "redis-db", "redis-tls", "renew.deadline"} {
			v := env[EnvName("ELECTOR", flag)]
			if v == "" {
				continue
			}
			if serr := want.fs.Set(flag, v); serr != nil {
				wantErr = &Error{Env: EnvName("ELECTOR", flag), Flag: flag, Value: v}
				break
			}
		}

		var envErr *Error
		switch {
		case wantErr == nil && err != nil:
			t.Fatalf("Apply(%q) = %v; setting the flags by hand succeeds", env, err)
		case wantErr != nil && !errors.As(err, &envErr):
			t.Fatalf("Apply(%q) = %v (%T); want an *Error for %s", env, err, err, wantErr.Env)
		case wantErr != nil:
			if envErr.Env != wantErr.Env || envErr.Flag != wantErr.Flag || envErr.Value != wantErr.Value || envErr.Err == nil {
				t.Fatalf("Apply(%q) error %+v; want it about %s=%q (flag %s)", env, envErr, wantErr.Env, wantErr.Value, wantErr.Flag)
			}
			msg := err.Error()
			for _, part := range []string{envErr.Env, "--" + envErr.Flag, fmt.Sprintf("%q", envErr.Value)} {
				if !strings.Contains(msg, part) {
					t.Fatalf("error %q does not contain %q", msg, part)
				}
			}
			return
		}
		for _, flag := range []string{"redis-addr", "lease-name", "redis-db", "redis-tls", "renew.deadline", "never-from-env"} {
			g, w := got.fs.Lookup(flag), want.fs.Lookup(flag)
			if g.Value.String() != w.Value.String() || g.Changed != w.Changed {
				t.Fatalf("Apply(%q): --%s = %q (changed %v); setting by hand gives %q (changed %v)",
					env, flag, g.Value, g.Changed, w.Value, w.Changed)
			}
		}
		if got.name != "cli" || got.secret != "unset" {
			t.Fatalf("Apply(%q) changed --lease-name to %q or --never-from-env to %q", env, got.name, got.secret)
		}
	})
}
