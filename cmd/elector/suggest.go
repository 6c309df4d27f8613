package main

import (
	"fmt"
	"strings"

	"github.com/spf13/pflag"
)

// suggest returns the candidate closest to word within an edit distance of a third of its
// length (at least 1, at most 3) or one that word is a prefix of, "" when none is close.
func suggest(word string, candidates []string) string {
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

// editDistance is the optimal-string-alignment distance of a and b, in bytes: Levenshtein's
// insertions, deletions and substitutions, plus a swap of two adjacent bytes as one edit, the
// commonest typo ("rnu" for "run").
func editDistance(a, b string) int {
	// d[i][j] is the distance of a[:i] and b[:j]; rows i-2, i-1 and i are kept.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
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

// suggestFlag adds "did you mean --X?" to pflag's "unknown flag: --Y" when a visible flag of
// fs is close to Y.
func suggestFlag(fs *pflag.FlagSet, err error) error {
	const prefix = "unknown flag: --"
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return err
	}
	name, _, _ := strings.Cut(strings.TrimPrefix(msg, prefix), "=")
	var names []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	if s := suggest(name, names); s != "" {
		return fmt.Errorf("%w; did you mean --%s?", err, s)
	}
	return err
}

// errUnknownCommand returns the error for an unknown command name, with the closest command.
func errUnknownCommand(name string) error {
	var names []string
	for _, cmd := range commands() {
		names = append(names, cmd.name)
	}
	if s := suggest(name, names); s != "" {
		return fmt.Errorf("unknown command %q; did you mean %q? commands: %s", name, s, commandNames())
	}
	return fmt.Errorf("unknown command %q; commands: %s", name, commandNames())
}
