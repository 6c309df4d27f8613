package main

import (
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docsURL is the reference of every command; each command's help links to its section.
const docsURL = "https://github.com/elector/elector/blob/main/docs/CLI.md"

// exitCodesHelp is the exit code table shared by `elector help` and docs/CLI.md.
const exitCodesHelp = `Exit codes:
  0  success
  1  runtime error (for example Redis unreachable in status, HTTP address in use)
  2  usage error: unknown flag, bad value, missing argument (one line on stderr names it)
  3  status: the lease has no holder; resign: no holder to resign; run: leadership lost
     with --exit-on-lost
  4  run: gave up without leading (--timeout passed, or --try-once found the lease held)
  5  resign: refused, nothing written: --to is no live candidate, or nobody could take over
  N  run: the exit code of CMD when it exited by itself, or when it was stopped because
     the elector got SIGTERM/SIGINT (128+S when signal S killed it)
`

// helpTemplate is the help of elector (the command list and exit codes) and of each command
// (its synopsis, paragraph, flag groups and documentation link), as cobra renders it.
const helpTemplate = `{{if not .HasParent}}elector: {{.Short}}.

Usage: elector COMMAND [flags]

Commands:
{{range .Commands}}{{if or .IsAvailableCommand (eq .Name "help")}}  {{rpad .Name .NamePadding}}  {{.Short}}
{{end}}{{end}}
Try it without Redis: elector demo

Every flag can also be set from the environment as ELECTOR_<FLAG> (--redis-addr is
ELECTOR_REDIS_ADDR); flags on the command line win. The Redis password comes only from the
REDIS_PASSWORD environment variable or --redis-password-file, never from a flag.

` + exitCodesHelp + `
Run 'elector help COMMAND' or 'elector COMMAND --help' for the flags of a command.
Documentation: ` + docsURL + `
{{else}}Usage: {{.Parent.CommandPath}} {{.Use}}

{{trim .Long}}
{{$groups := flagGroups .}}{{range $groups}}
{{.}}{{end}}
  -h, --help   show this help

{{if and $groups (index .Annotations "` + envAnnotation + `")}}Every flag is also ELECTOR_<FLAG> (--redis-addr: ELECTOR_REDIS_ADDR); the command line wins.
{{end}}Documentation, every flag in full: ` + docsURL + `#{{docsAnchor .}}
{{end}}`

// briefGroups are the flag groups that a command's help lists by name only: they are shared
// by several commands, and in full the help of run would not fit in maxHelpLines (TestHelpShort).
var briefGroups = []string{leaseGroup, redisGroup, kubeGroup, scheduleGroup, endpointGroup}

func init() {
	cobra.AddTemplateFunc("flagGroups", flagGroups)
	cobra.AddTemplateFunc("docsAnchor", func(cmd *cobra.Command) string { return docsAnchor(topCommand(cmd).Name()) })
}

// flagGroups returns the visible flags of cmd by heading (their "group" annotation), in the
// order they were added: each with the first clause of its usage, or by name only for the
// briefGroups. Flags without a heading are under "Flags".
func flagGroups(cmd *cobra.Command) []string {
	var titles []string
	sets := map[string]*pflag.FlagSet{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		title := "Flags"
		if g := f.Annotations[groupAnnotation]; len(g) > 0 {
			title = g[0]
		}
		if sets[title] == nil {
			titles = append(titles, title)
			sets[title] = pflag.NewFlagSet(title, pflag.ContinueOnError)
			sets[title].SortFlags = false
		}
		short := *f
		short.Usage = firstClause(f.Usage)
		sets[title].AddFlag(&short)
	})
	groups := make([]string, len(titles))
	for i, title := range titles {
		groups[i] = title + ":\n" + sets[title].FlagUsagesWrapped(0)
		if slices.Contains(briefGroups, title) {
			groups[i] = wrapNames(title+":", sets[title])
		}
	}
	return groups
}

// wrapNames returns title and the flags of fs by name on lines of at most 100 bytes.
func wrapNames(title string, fs *pflag.FlagSet) string {
	var b strings.Builder
	line := title
	fs.VisitAll(func(f *pflag.Flag) {
		if len(line)+3+len(f.Name) > 100 {
			b.WriteString(line + "\n")
			line = " "
		}
		line += " --" + f.Name
	})
	return b.String() + line + "\n"
}

// firstClause returns usage up to its first "; " or ". " outside parentheses, or its first
// ": " or " (" after five words or more: the help shows that much of a flag, the
// documentation all of it.
func firstClause(usage string) string {
	depth := 0
	for i := 0; i < len(usage)-1; i++ {
		long := len(strings.Fields(usage[:i])) >= 5
		switch c := usage[i]; {
		case c == '(' && long && depth == 0:
			return strings.TrimSuffix(usage[:i], " ")
		case c == '(':
			depth++
		case c == ')':
			depth--
		case depth == 0 && usage[i+1] == ' ' && (c == ';' || c == '.' || c == ':' && long):
			return usage[:i]
		}
	}
	return usage
}

// topCommand is the command under elector that cmd is or belongs to.
func topCommand(cmd *cobra.Command) *cobra.Command {
	for cmd.HasParent() && cmd.Parent().HasParent() {
		cmd = cmd.Parent()
	}
	return cmd
}

// docsAnchor is the section of docs/CLI.md about the command name.
func docsAnchor(name string) string {
	switch name {
	case "version", "install", "help":
		return "elector-version-install-help"
	}
	return "elector-" + name
}
