// Package envflag lets every command-line flag also be set from the
// environment, the way container images are usually configured.
//
// A flag named "redis-addr" is read from PREFIX_REDIS_ADDR (see EnvName).
// Flags given on the command line win over the environment; the environment
// wins over the flag's default. An environment variable that is set but empty
// counts as unset, so that `env: [{name: ELECTOR_REDIS_DB, value: ""}]` in a
// manifest falls back to the default instead of failing to parse.
//
// A variable with the prefix that no flag reads is refused (CheckUnknown), with the closest
// known name: a typo must not be ignored in silence.
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

// UnknownError reports a variable that has the prefix but names no flag: most likely a typo
// that would otherwise be ignored in silence. It is a usage error.
type UnknownError struct {
	// Env is the unknown variable, e.g. "ELECTOR_LEASE_NAMEE".
	Env string
	// Closest is the known variable nearest to Env, "" when none is close.
	Closest string
}

// Error names the variable and, when one is close, the variable that was probably meant.
func (e *UnknownError) Error() string {
	msg := fmt.Sprintf("unknown environment variable %s: no flag reads it", e.Env)
	if e.Closest != "" {
		msg += fmt.Sprintf("; did you mean %s?", e.Closest)
	}
	return msg
}

// CheckUnknown returns an *UnknownError for the first variable of environ ("NAME=value"
// entries, as os.Environ returns them) that starts with PREFIX_ and is neither in known nor
// accepted by ignore (which may be nil; it gets the name and the value).
func CheckUnknown(environ []string, prefix string, known []string, ignore func(name, value string) bool) error {
	isKnown := make(map[string]bool, len(known))
	for _, k := range known {
		isKnown[k] = true
	}
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, prefix+"_") || isKnown[name] || ignore != nil && ignore(name, value) {
			continue
		}
		return &UnknownError{Env: name, Closest: Closest(name, known)}
	}
	return nil
}

// Closest returns the candidate nearest to word, "" when none is within an edit distance of a
// third of word's length (at least 1, at most 3); a candidate that word is a prefix of (word
// of 3 bytes or more) counts as 1 edit away.
func Closest(word string, candidates []string) string {
	best, bestDist := "", min(max(len(word)/3, 1), 3)+1
	for _, c := range candidates {
		d := editDistance(word, c)
		if len(word) >= 3 && strings.HasPrefix(c, word) {
			d = min(d, 1)
		}
		if d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the optimal-string-alignment distance of a and b in bytes: Levenshtein's
// edits plus a swap of two adjacent bytes as one edit, the commonest typo ("rnu" for "run").
func editDistance(a, b string) int {
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
