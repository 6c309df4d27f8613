// Package envflag lets every command-line flag also be set from the
// environment, the way container images are usually configured.
//
// A flag named "redis-addr" is read from PREFIX_REDIS_ADDR (see EnvName).
// Flags given on the command line win over the environment; the environment
// wins over the flag's default. An environment variable that is set but empty
// counts as unset, so that `env: [{name: ELECTOR_REDIS_DB, value: ""}]` in a
// manifest falls back to the default instead of failing to parse.
//
// It owns the mapping of flag names to environment variables and their parsing. It must not
// validate values (each flag's own parser does) or know which command runs.
package envflag

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// noEnvAnnotation is the pflag annotation key set by MarkNoEnv.
const noEnvAnnotation = "envflag/no-env"

// EnvName returns the environment variable that Apply reads for the flag
// named flagName: the prefix, an underscore, and the flag name in upper case
// with '-' and '.' replaced by '_'. EnvName("ELECTOR", "redis-addr") is
// "ELECTOR_REDIS_ADDR".
func EnvName(prefix, flagName string) string {
	name := strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(flagName))
	if prefix == "" {
		return name
	}
	return prefix + "_" + name
}

// MarkNoEnv marks the flag name of fs as one that Apply must never set from
// the environment.
func MarkNoEnv(fs *pflag.FlagSet, name string) error {
	if err := fs.SetAnnotation(name, noEnvAnnotation, []string{"true"}); err != nil {
		return fmt.Errorf("mark flag --%s as not settable from the environment: %w", name, err)
	}
	return nil
}

// Error reports an environment variable whose value the flag it maps to does
// not accept. Every error returned by Apply is an *Error and is a usage error
// (the CLI exits with status 2).
type Error struct {
	// Env is the environment variable, e.g. "ELECTOR_REDIS_DB".
	Env string
	// Flag is the flag name without dashes, e.g. "redis-db".
	Flag string
	// Value is the rejected value.
	Value string
	// Err is why the flag rejected it.
	Err error
}

// Error names the environment variable, the flag and the rejected value.
func (e *Error) Error() string {
	return fmt.Sprintf("invalid value %q in environment variable %s (flag --%s): %v", e.Value, e.Env, e.Flag, e.Err)
}

// Unwrap returns the flag's parse error.
func (e *Error) Unwrap() error { return e.Err }

// Apply sets every flag of fs that was not given on the command line from
// the environment variable EnvName(prefix, flag) if lookup reports it as set
// and non-empty. Call it after fs.Parse. lookup is usually os.LookupEnv.
//
// Flags marked with MarkNoEnv are skipped. Apply stops at the first value a
// flag rejects and returns an *Error. For list-valued flags (e.g. a string
// slice), the variable holds the same comma-separated form as the flag.
func Apply(fs *pflag.FlagSet, prefix string, lookup func(string) (string, bool)) error {
	var firstErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if firstErr != nil || f.Changed {
			return
		}
		if v, ok := f.Annotations[noEnvAnnotation]; ok && len(v) > 0 {
			return
		}
		env := EnvName(prefix, f.Name)
		value, ok := lookup(env)
		if !ok || value == "" {
			return
		}
		if err := fs.Set(f.Name, value); err != nil {
			// Drop pflag's "invalid argument ... for --flag" wrapper: it
			// would name the flag a second time and hide the variable.
			var invalid *pflag.InvalidValueError
			if errors.As(err, &invalid) && invalid.Unwrap() != nil {
				err = invalid.Unwrap()
			}
			firstErr = &Error{Env: env, Flag: f.Name, Value: value, Err: err}
		}
	})
	return firstErr
}
