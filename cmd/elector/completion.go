package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/pflag"

	"github.com/elector/elector/internal/redisclient"
)

// completionShells are the shells `elector completion` writes scripts for.
var completionShells = []string{"bash", "zsh", "fish"}

// flagValues are the values offered after a flag that takes one of a few words.
var flagValues = map[string][]string{
	redisclient.FlagMode: {redisclient.ModeStandalone, redisclient.ModeSentinel, redisclient.ModeCluster},
	flagOutput:           {"text", "json", "yaml"},
	flagLogFormat:        {logFormatText, logFormatJSON},
}

// compFlag is one flag as completion sees it.
type compFlag struct {
	name, short, usage string
	value              bool // takes a value
}

// compCommand is one command with its flags and its words after the flags.
type compCommand struct {
	name, short string
	flags       []compFlag
	args        []string // completed as arguments (help: commands; completion: shells)
}

// completionTable learns every command's flags from the flag set the command builds, so that
// the scripts list exactly the flags the commands accept.
func (c *cli) completionTable() []compCommand {
	var table []compCommand
	for _, cmd := range commands() {
		cc := compCommand{name: cmd.name, short: cmd.short}
		switch cmd.name {
		case "help":
			for _, other := range commands() {
				cc.args = append(cc.args, other.name)
			}
		case "completion":
			cc.args = completionShells
		default:
			sub := *c
			sub.flagSink = func(fs *flagSet) {
				fs.all.VisitAll(func(f *pflag.Flag) {
					if f.Hidden {
						return
					}
					usage := strings.SplitN(f.Usage, ";", 2)[0]
					usage = strings.ReplaceAll(usage, "`", "")
					cc.flags = append(cc.flags, compFlag{name: f.Name, short: f.Shorthand, usage: usage, value: f.Value.Type() != "bool"})
				})
			}
			cmd.run(&sub, context.Background(), nil)
		}
		table = append(table, cc)
	}
	return table
}

// completionCmd is `elector completion bash|zsh|fish`.
func (c *cli) completionCmd(_ context.Context, args []string) int {
	const who = "elector completion"
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help") {
		cmd, _ := findCommand("completion")
		fmt.Fprintf(c.stdout, "Usage: elector %s\n\n%s\n", cmd.synopsis, strings.TrimSpace(commandHelp("completion")))
		return exitOK
	}
	if len(args) != 1 {
		return c.usageError(who, fmt.Errorf("want exactly one shell: %s", strings.Join(completionShells, ", ")))
	}
	table := c.completionTable()
	switch args[0] {
	case "bash":
		fmt.Fprint(c.stdout, bashCompletion(table))
	case "zsh":
		fmt.Fprint(c.stdout, "#compdef elector\n# elector completion for zsh, through zsh's bash completion support.\nautoload -U +X bashcompinit && bashcompinit\n")
		fmt.Fprint(c.stdout, bashCompletion(table))
	case "fish":
		fmt.Fprint(c.stdout, fishCompletion(table))
	default:
		return c.usageError(who, fmt.Errorf("unknown shell %q; allowed: %s", args[0], strings.Join(completionShells, ", ")))
	}
	return exitOK
}

// bashCompletion returns a bash script that completes commands, flags, the values of flags
// with few values (files for other flags with values) and commands after `run ... --`.
func bashCompletion(table []compCommand) string {
	var b strings.Builder
	b.WriteString(`# elector completion for bash: source it, or put it in /etc/bash_completion.d/elector.
_elector() {
    local cur prev cmd i
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev="${COMP_WORDS[COMP_CWORD-1]}"
    if [[ "$cur" == "=" ]]; then cur=""; prev="${COMP_WORDS[COMP_CWORD-1]}"
    elif [[ "$prev" == "=" ]]; then prev="${COMP_WORDS[COMP_CWORD-2]}"; fi
    COMPREPLY=()
    if [[ $COMP_CWORD -eq 1 ]]; then
`)
	var names []string
	for _, cc := range table {
		names = append(names, cc.name)
	}
	fmt.Fprintf(&b, "        COMPREPLY=($(compgen -W %q -- \"$cur\"))\n        return\n    fi\n", strings.Join(append(names, "--help", "--version"), " "))
	b.WriteString(`    cmd="${COMP_WORDS[1]}"
    for ((i = 2; i < COMP_CWORD; i++)); do
        if [[ "${COMP_WORDS[i]}" == "--" ]]; then
            if [[ $i -eq $((COMP_CWORD - 1)) ]]; then COMPREPLY=($(compgen -c -- "$cur")); else COMPREPLY=($(compgen -f -- "$cur")); fi
            return
        fi
    done
    local flags="" valued=""
    case "$cmd" in
`)
	for _, cc := range table {
		flags, valued := cc.flagWords()
		if len(cc.args) > 0 {
			fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", cc.name, strings.Join(cc.args, " "))
			continue
		}
		fmt.Fprintf(&b, "    %s) flags=%q; valued=%q ;;\n", cc.name, strings.Join(append(flags, "--help"), " "), strings.Join(valued, " "))
	}
	b.WriteString("    *) return ;;\n    esac\n    case \"$prev\" in\n")
	for _, name := range sortedKeys(flagValues) {
		pattern := "--" + name
		if name == flagOutput {
			pattern += "|-o"
		}
		fmt.Fprintf(&b, "    %s) COMPREPLY=($(compgen -W %q -- \"$cur\")); return ;;\n", pattern, strings.Join(flagValues[name], " "))
	}
	b.WriteString(`    esac
    if [[ " $valued " == *" $prev "* ]]; then
        COMPREPLY=($(compgen -f -- "$cur"))
        return
    fi
    COMPREPLY=($(compgen -W "$flags" -- "$cur"))
}
complete -F _elector elector
`)
	return b.String()
}

// flagWords returns the words of cc's flags (--name and -short) and those of them that take
// a value.
func (cc compCommand) flagWords() (flags, valued []string) {
	for _, f := range cc.flags {
		words := []string{"--" + f.name}
		if f.short != "" {
			words = append(words, "-"+f.short)
		}
		flags = append(flags, words...)
		if f.value {
			valued = append(valued, words...)
		}
	}
	return flags, valued
}

// fishCompletion returns a fish script with the same completions as bashCompletion.
func fishCompletion(table []compCommand) string {
	var b strings.Builder
	b.WriteString("# elector completion for fish: put it in ~/.config/fish/completions/elector.fish.\ncomplete -c elector -f\n")
	var names []string
	for _, cc := range table {
		names = append(names, cc.name)
	}
	for _, cc := range table {
		fmt.Fprintf(&b, "complete -c elector -n 'not __fish_seen_subcommand_from %s' -a %s -d %s\n", strings.Join(names, " "), cc.name, fishQuote(cc.short))
	}
	for _, cc := range table {
		cond := "__fish_seen_subcommand_from " + cc.name
		if len(cc.args) > 0 {
			fmt.Fprintf(&b, "complete -c elector -n '%s' -a %s\n", cond, fishQuote(strings.Join(cc.args, " ")))
		}
		for _, f := range cc.flags {
			line := fmt.Sprintf("complete -c elector -n '%s' -l %s", cond, f.name)
			if f.short != "" {
				line += " -s " + f.short
			}
			if vals, ok := flagValues[f.name]; ok {
				line += " -x -a " + fishQuote(strings.Join(vals, " "))
			} else if f.value {
				line += " -r -F"
			}
			fmt.Fprintf(&b, "%s -d %s\n", line, fishQuote(f.usage))
		}
	}
	return b.String()
}

// fishQuote quotes s for fish in single quotes.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

func sortedKeys(m map[string][]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
