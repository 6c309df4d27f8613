package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// docsURL is the reference of every command; each command's help links to its section.
const docsURL = "https://github.com/elector/elector/blob/main/docs/CLI.md"

// maxHelpLines bounds a command's help: what does not fit is in the documentation.
const maxHelpLines = 40

// exitCodesHelp is the exit code table shared by `elector help` and docs/CLI.md.
const exitCodesHelp = `Exit codes:
  0  success
  1  runtime error (for example Redis unreachable in status, HTTP address in use)
  2  usage error: unknown flag, bad value, missing argument (one line on stderr names it)
  3  status: the lease has no holder; resign: no holder to resign; run: leadership lost
     with --exit-on-lost
  4  run: gave up without leading (--timeout passed, or --try-once found the lease held)
  N  run: the exit code of CMD when it exited by itself, or when it was stopped because
     the elector got SIGTERM/SIGINT (128+S when signal S killed it)
`

// envHelp ends the help of every command that has flags.
const envHelp = "Every flag can also be set from the environment as ELECTOR_<FLAG> (--redis-addr is\n" +
	"ELECTOR_REDIS_ADDR, -v is ELECTOR_V); the command line wins; unknown ELECTOR_* are refused.\n"

// helpText returns the help of cmd: the command list for elector itself.
func helpText(cmd *cobra.Command) string {
	if !cmd.HasParent() {
		return mainHelp(cmd)
	}
	head := fmt.Sprintf("Usage: elector %s\n\n%s\n", cmd.Use, strings.TrimSpace(cmd.Long))
	foot := "\n  -h, --help   show this help\n\n"
	groups := flagGroups(cmd)
	if len(groups) > 0 {
		foot += envHelp
	}
	foot += "Documentation, every flag in full: " + docsURL + "#" + docsAnchor(cmd.Name()) + "\n"
	budget := maxHelpLines - strings.Count(head, "\n") - strings.Count(foot, "\n")
	return head + renderGroups(groups, budget) + foot
}

// docsAnchor is the section of docs/CLI.md about the command name.
func docsAnchor(name string) string {
	switch name {
	case "version", "install", "help":
		return "elector-version-install-help"
	}
	return "elector-" + name
}

// mainHelp is the text of `elector help`.
func mainHelp(root *cobra.Command) string {
	var b strings.Builder
	fmt.Fprintf(&b, "elector: %s.\n\nUsage: elector COMMAND [flags]\n\nCommands:\n", root.Short)
	cmds := append(root.Commands(), newHelpCmd())
	width := 0
	for _, cmd := range cmds {
		width = max(width, len(cmd.Name()))
	}
	for _, cmd := range cmds {
		if cmd.IsAvailableCommand() || cmd.Name() == "help" {
			fmt.Fprintf(&b, "  %-*s  %s\n", width, cmd.Name(), cmd.Short)
		}
	}
	b.WriteString(`
Try it without Redis: elector demo

Every flag can also be set from the environment as ELECTOR_<FLAG> (--redis-addr is
ELECTOR_REDIS_ADDR); flags on the command line win. The Redis password comes only from the
REDIS_PASSWORD environment variable or --redis-password-file, never from a flag.

`)
	b.WriteString(exitCodesHelp)
	fmt.Fprintf(&b, "\nRun 'elector help COMMAND' or 'elector COMMAND --help' for the flags of a command.\nDocumentation: %s\n", docsURL)
	return b.String()
}

// flagGroup is the visible flags of one help heading.
type flagGroup struct {
	title   string
	flags   []*pflag.Flag
	summary bool // listed by name only
}

// flagGroups returns the visible flags of cmd by heading, in the order they were added.
func flagGroups(cmd *cobra.Command) []*flagGroup {
	var groups []*flagGroup
	byTitle := map[string]*flagGroup{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		title := f.Annotations[groupAnnotation]
		if f.Hidden || len(title) == 0 {
			return
		}
		g := byTitle[title[0]]
		if g == nil {
			g = &flagGroup{title: title[0]}
			byTitle[title[0]] = g
			groups = append(groups, g)
		}
		g.flags = append(g.flags, f)
	})
	return groups
}

// renderGroups lists the flags of each group, one line each with the first clause of its
// usage; while that takes more than budget lines, the largest group but the first (the
// command's own flags) is listed by name only.
func renderGroups(groups []*flagGroup, budget int) string {
	for {
		var b strings.Builder
		for _, g := range groups {
			b.WriteString(g.render())
		}
		var largest *flagGroup
		for _, g := range groups[min(1, len(groups)):] {
			if !g.summary && (largest == nil || len(g.flags) > len(largest.flags)) {
				largest = g
			}
		}
		if strings.Count(b.String(), "\n") <= budget || largest == nil {
			return b.String()
		}
		largest.summary = true
	}
}

// render returns the group's heading and flags.
func (g *flagGroup) render() string {
	if g.summary {
		return "\n" + wrapWords(g.title+":", flagNames(g.flags), 100)
	}
	fs := pflag.NewFlagSet(g.title, pflag.ContinueOnError)
	fs.SortFlags = false
	for _, f := range g.flags {
		short := *f
		short.Usage = firstClause(f.Usage)
		fs.AddFlag(&short)
	}
	return "\n" + g.title + ":\n" + fs.FlagUsagesWrapped(0)
}

// flagNames returns --name (-v for a one-letter name) of each flag.
func flagNames(flags []*pflag.Flag) []string {
	names := make([]string, len(flags))
	for i, f := range flags {
		names[i] = "--" + f.Name
		if len(f.Name) == 1 {
			names[i] = "-" + f.Name
		}
	}
	return names
}

// wrapWords returns title and words on lines of at most width bytes, continuation lines
// indented by two spaces.
func wrapWords(title string, words []string, width int) string {
	var b strings.Builder
	line := title
	for _, w := range words {
		if len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = " "
		}
		line += " " + w
	}
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

// newHelpCmd returns `elector help [COMMAND]`.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [COMMAND]",
		Short: "show help for elector or one command",
		Long:  "Show the help of elector, or of COMMAND.",
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			var names []string
			for _, sub := range cmd.Root().Commands() {
				if len(args) == 0 && sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, sub.Name())
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			if len(args) > 1 {
				return fmt.Errorf("unexpected argument %q: want elector help [COMMAND]", args[1])
			}
			if len(args) == 0 || args[0] == "help" {
				fmt.Fprint(cmd.OutOrStdout(), helpText(root))
				return nil
			}
			for _, sub := range root.Commands() {
				if sub.Name() == args[0] && sub.IsAvailableCommand() {
					fmt.Fprint(cmd.OutOrStdout(), helpText(sub))
					return nil
				}
			}
			return errUnknownCommand(root, args[0])
		},
	}
}
