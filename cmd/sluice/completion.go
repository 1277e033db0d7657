package main

import (
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"sluice/internal/mountinfo"
)

const completionHelp = `Usage: sluice completion bash|zsh|fish

Prints a shell completion script for sluice. The script asks sluice
itself what to complete: commands, each command's flags, the values of
--read-policy, --cache-mode, --readahead-budget and --log-level, the mount
points of running sluice mounts for the commands that take one (and exec's
--mount), read-policy=NAME after set's mount point, directories for mount,
scenario files for sim; files elsewhere. The bash script needs the
bash-completion package.
  sluice completion bash > /etc/bash_completion.d/sluice
  sluice completion zsh > "${fpath[1]}/_sluice"   # or: source <(sluice completion zsh)
  sluice completion fish > ~/.config/fish/completions/sluice.fish
`

// shells are the shells sluice writes completion scripts for.
var shells = []string{"bash", "zsh", "fish"}

// completionCommand is sluice completion, for root's commands.
func completionCommand(root *cobra.Command, stdout io.Writer) *cobra.Command {
	c := command("completion bash|zsh|fish", "a shell completion script", completionHelp, nil, func(pos []string) error {
		if len(pos) != 1 {
			return usagef("want bash, zsh or fish, got %q", strings.Join(pos, " "))
		}
		return writeCompletion(root, pos[0], stdout)
	})
	c.ValidArgsFunction = func(_ *cobra.Command, pos []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(pos) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return shells, cobra.ShellCompDirectiveNoFileComp
	}
	return c
}

// writeCompletion writes root's completion script for shell to w.
func writeCompletion(root *cobra.Command, shell string, w io.Writer) error {
	switch shell {
	case "bash":
		return root.GenBashCompletionV2(w, true)
	case "zsh":
		return root.GenZshCompletion(w)
	case "fish":
		var b strings.Builder
		if err := root.GenFishCompletion(&b, true); err != nil {
			return err
		}
		_, err := io.WriteString(w, fishFlagPrefix.Replace(b.String()))
		return err
	}
	return usagef("want bash, zsh or fish, got %q", shell)
}

// fishFlagPrefix anchors the pattern by which cobra's fish script finds
// a --flag= before the value being completed: unanchored, it found one in
// set's read-policy=NAME ("-policy=") and put it before every completion.
var fishFlagPrefix = strings.NewReplacer(`(string match -r -- '-.*=' "$lastArg")`, `(string match -r -- '^-.*=' "$lastArg")`)

// completeMount completes a command's first argument (or a flag's value)
// with the mount points of running sluice mounts.
func completeMount(_ *cobra.Command, pos []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(pos) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		return nil, cobra.ShellCompDirectiveDefault
	}
	return sluiceMounts(string(b)), cobra.ShellCompDirectiveNoFileComp
}

// sluiceMounts returns the mount points of the sluice mounts in mounts,
// as /proc/self/mounts lists them: a line per mount, its fields
// separated by spaces, a space, tab, newline or backslash in a field
// written as an octal escape (\040).
func sluiceMounts(mounts string) []string {
	var mnts []string
	for _, line := range strings.Split(mounts, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[2] == "fuse.sluice" {
			mnts = append(mnts, mountinfo.Unescape(f[1]))
		}
	}
	return mnts
}
