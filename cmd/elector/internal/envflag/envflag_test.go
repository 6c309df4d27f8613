package envflag

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

type flags struct {
	fs       *pflag.FlagSet
	addrs    []string
	name     string
	db       int
	tls      bool
	deadline time.Duration
	secret   string
}

func newFlags(t *testing.T) *flags {
	t.Helper()
	f := &flags{fs: pflag.NewFlagSet("test", pflag.ContinueOnError)}
	f.fs.StringSliceVar(&f.addrs, "redis-addr", []string{"127.0.0.1:6379"}, "")
	f.fs.StringVar(&f.name, "lease-name", "default", "")
	f.fs.IntVar(&f.db, "redis-db", 0, "")
	f.fs.BoolVar(&f.tls, "redis-tls", false, "")
	f.fs.DurationVar(&f.deadline, "renew.deadline", 10*time.Second, "")
	f.fs.StringVar(&f.secret, "never-from-env", "unset", "")
	if err := MarkNoEnv(f.fs, "never-from-env"); err != nil {
		t.Fatal(err)
	}
	return f
}

func mapLookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

func TestEnvName(t *testing.T) {
	for _, tt := range []struct{ prefix, flag, want string }{
		{"ELECTOR", "redis-addr", "ELECTOR_REDIS_ADDR"},
		{"ELECTOR", "lease-name", "ELECTOR_LEASE_NAME"},
		{"ELECTOR", "renew.deadline", "ELECTOR_RENEW_DEADLINE"},
		{"ELECTOR", "db", "ELECTOR_DB"},
		{"", "redis-tls", "REDIS_TLS"},
	} {
		if got := EnvName(tt.prefix, tt.flag); got != tt.want {
			t.Errorf("EnvName(%q, %q) = %q, want %q", tt.prefix, tt.flag, got, tt.want)
		}
	}
}

func TestApplySetsUnsetFlagsFromEnv(t *testing.T) {
	f := newFlags(t)
	if err := f.fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"ELECTOR_REDIS_ADDR":      "a:1,b:2",
		"ELECTOR_LEASE_NAME":      "jobs",
		"ELECTOR_REDIS_DB":        "3",
		"ELECTOR_REDIS_TLS":       "true",
		"ELECTOR_RENEW_DEADLINE":  "4s",
		"ELECTOR_NEVER_FROM_ENV":  "leaked",
		"OTHER_LEASE_NAME":        "wrong-prefix",
		"ELECTOR_UNKNOWN_SETTING": "ignored",
	}
	if err := Apply(f.fs, "ELECTOR", mapLookup(env)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if strings.Join(f.addrs, ",") != "a:1,b:2" || f.name != "jobs" || f.db != 3 || !f.tls || f.deadline != 4*time.Second {
		t.Errorf("flags not taken from env: addrs=%v name=%q db=%d tls=%v deadline=%v", f.addrs, f.name, f.db, f.tls, f.deadline)
	}
	if f.secret != "unset" {
		t.Errorf("flag marked with MarkNoEnv was set from env to %q", f.secret)
	}
	if !f.fs.Changed("lease-name") {
		t.Error("a flag set from env should count as changed")
	}
}

func TestApplyCommandLineWins(t *testing.T) {
	f := newFlags(t)
	if err := f.fs.Parse([]string{"--lease-name=cli", "--redis-addr=c:3", "--redis-db=0"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"ELECTOR_LEASE_NAME": "env",
		"ELECTOR_REDIS_ADDR": "a:1,b:2",
		"ELECTOR_REDIS_DB":   "not-even-a-number", // never parsed: the flag was given
	}
	if err := Apply(f.fs, "ELECTOR", mapLookup(env)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if f.name != "cli" || strings.Join(f.addrs, ",") != "c:3" || f.db != 0 {
		t.Errorf("command line lost to env: name=%q addrs=%v db=%d", f.name, f.addrs, f.db)
	}
}

func TestApplyEmptyValueIsUnset(t *testing.T) {
	f := newFlags(t)
	if err := f.fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"ELECTOR_REDIS_DB": "", "ELECTOR_LEASE_NAME": ""}
	if err := Apply(f.fs, "ELECTOR", mapLookup(env)); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if f.db != 0 || f.name != "default" || f.fs.Changed("lease-name") {
		t.Errorf("empty env values changed flags: db=%d name=%q", f.db, f.name)
	}
}

func TestApplyErrorNamesEnvAndFlag(t *testing.T) {
	f := newFlags(t)
	if err := f.fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	err := Apply(f.fs, "ELECTOR", mapLookup(map[string]string{"ELECTOR_REDIS_DB": "three"}))
	var envErr *Error
	if !errors.As(err, &envErr) {
		t.Fatalf("Apply error = %v (%T), want *Error", err, err)
	}
	if envErr.Env != "ELECTOR_REDIS_DB" || envErr.Flag != "redis-db" || envErr.Value != "three" {
		t.Errorf("error fields = %+v", envErr)
	}
	msg := err.Error()
	for _, want := range []string{"ELECTOR_REDIS_DB", "--redis-db", `"three"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
	if strings.Count(msg, "redis-db") != 1 {
		t.Errorf("error %q names the flag more than once", msg)
	}
}

func TestMarkNoEnvUnknownFlag(t *testing.T) {
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	if err := MarkNoEnv(fs, "nope"); err == nil {
		t.Error("MarkNoEnv of an unknown flag succeeded")
	}
}

func TestEditDistance(t *testing.T) {
	for _, tt := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"run", "run", 0}, {"", "run", 3}, {"run", "", 3},
		{"rnu", "run", 1},       // a swap of neighbours is one edit
		{"statsu", "status", 1}, // also at the end
		{"sidecra", "sidecar", 1},
		{"resing", "resign", 1},
		{"ab", "ba", 1},
		{"abc", "ca", 3},         // optimal string alignment: no edit of a swapped pair
		{"kitten", "sitting", 3}, // Levenshtein's classic
	} {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestClosest(t *testing.T) {
	names := []string{"run", "sidecar", "status", "resign", "lease-name", "lease-duration"}
	for word, want := range map[string]string{
		"rnu": "run", "statsu": "status", "sidcar": "sidecar", "resing": "resign", "xyz": "",
		"lease-nme": "lease-name", "lease-dur": "lease-duration",
	} {
		if got := Closest(word, names); got != want {
			t.Errorf("Closest(%q) = %q, want %q", word, got, want)
		}
	}
}

func TestCheckUnknown(t *testing.T) {
	known := []string{"ELECTOR_LEASE_NAME", "ELECTOR_REDIS_ADDR"}
	ignore := func(name, _ string) bool { return name == "ELECTOR_FENCING_TOKEN" }
	env := []string{"HOME=/root", "ELECTOR_LEASE_NAME=x", "ELECTOR_FENCING_TOKEN=7", "ELECTORX=1"}
	if err := CheckUnknown(env, "ELECTOR", known, ignore); err != nil {
		t.Errorf("known variables refused: %v", err)
	}
	err := CheckUnknown(append(env, "ELECTOR_LEASE_NAMEE=x"), "ELECTOR", known, ignore)
	var unknown *UnknownError
	if !errors.As(err, &unknown) || unknown.Env != "ELECTOR_LEASE_NAMEE" || unknown.Closest != "ELECTOR_LEASE_NAME" ||
		!strings.Contains(err.Error(), "ELECTOR_LEASE_NAMEE") || !strings.Contains(err.Error(), "did you mean ELECTOR_LEASE_NAME?") {
		t.Errorf("typo: %v", err)
	}
	if err := CheckUnknown([]string{"ELECTOR_WHATEVER_ELSE=1"}, "ELECTOR", known, nil); err == nil || strings.Contains(err.Error(), "did you mean") {
		t.Errorf("unrelated variable: %v", err)
	}
}
