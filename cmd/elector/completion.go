package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/elector/elector/internal/redisclient"
)

// completionShells are the shells `elector completion` writes scripts for.
var completionShells = []string{"bash", "zsh", "fish", "powershell"}

// flagValues are the values offered after a flag that takes one of a few words.
var flagValues = map[string][]string{
	redisclient.FlagMode: {redisclient.ModeStandalone, redisclient.ModeSentinel, redisclient.ModeCluster},
	flagOutput:           {"text", "json", "yaml"},
	flagLogFormat:        {logFormatText, logFormatJSON},
	flagOnSuccess:        {onSuccessRelease, onSuccessHold},
	flagResignEndpoint:   {resignLoopback, resignAny, resignOff},
}

// adaptCompletionCmd gives cobra's `elector completion` (its bash, zsh, fish and powershell
// subcommands write the scripts, which ask the binary's hidden __complete command for the
// words) elector's synopsis, help and usage errors.
func (c *cli) adaptCompletionCmd(cmd *cobra.Command) {
	cmd.Use = "completion " + strings.Join(completionShells, "|")
	cmd.Short = "print a shell completion script for bash, zsh, fish or PowerShell"
	cmd.Long = `Print a script that completes elector's commands, flags and flag values:
  bash        source <(elector completion bash)   or save it in /etc/bash_completion.d/elector
  zsh         source <(elector completion zsh)    or save it as _elector in a dir of $fpath
  fish        elector completion fish > ~/.config/fish/completions/elector.fish
  powershell  elector completion powershell | Out-String | Invoke-Expression`
	cmd.Args = cobra.ArbitraryArgs
	cmd.RunE = func(_ *cobra.Command, args []string) error { // a shell is a subcommand: args name none
		if len(args) != 1 {
			return fmt.Errorf("want exactly one shell: %s", strings.Join(completionShells, ", "))
		}
		return fmt.Errorf("unknown shell %q; allowed: %s", args[0], strings.Join(completionShells, ", "))
	}
	for _, shell := range cmd.Commands() {
		write := shell.RunE
		shell.RunE = func(cmd *cobra.Command, args []string) error { // a failed write is a runtime error
			if err := write(cmd, args); err != nil {
				return exitStatus(c.runtimeError("elector completion", err))
			}
			return nil
		}
	}
}

// addValueCompletions offers the values of flagValues after those flags of cmd.
func addValueCompletions(cmd *cobra.Command) {
	for name, values := range flagValues {
		if cmd.Flags().Lookup(name) != nil {
			// Fails only for a flag cmd does not have or has a function for already.
			_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
		}
	}
}

// completeCommandAfterDash completes elector run's arguments: the programs on $PATH right
// after "--", files for CMD's own arguments, nothing before "--".
func completeCommandAfterDash(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	switch dash := cmd.ArgsLenAtDash(); {
	case dash < 0:
		return nil, cobra.ShellCompDirectiveNoFileComp
	case len(args) > dash:
		return nil, cobra.ShellCompDirectiveDefault
	}
	var found []string
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		entries, _ := os.ReadDir(dir) // a missing or unreadable directory has no programs
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), toComplete) || slices.Contains(found, e.Name()) {
				continue
			}
			if st, err := os.Stat(filepath.Join(dir, e.Name())); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				found = append(found, e.Name())
			}
		}
	}
	slices.Sort(found)
	return found, cobra.ShellCompDirectiveNoFileComp
}
