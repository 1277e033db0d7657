package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"sluice/mirror"
)

const completionHelp = `Usage: sluice completion bash|zsh|fish

Prints a shell completion script for sluice: commands, each command's
flags, the values of --read-policy, --cache-mode and --readahead-budget,
the mount points of running sluice mounts for the commands that take one,
and read-policy=NAME after set's mount point; files elsewhere.
  sluice completion bash > /etc/bash_completion.d/sluice
  sluice completion zsh > "${fpath[1]}/_sluice"   # or: source <(sluice completion zsh)
  sluice completion fish > ~/.config/fish/completions/sluice.fish
`

// mountCommands are the commands whose first argument is a sluice mount
// point (exec takes it as --mount).
var mountCommands = []string{"stat", "top", "set", "resync", "reload"}

// sluiceMounts is the shell command listing the mount points of running
// sluice mounts (/proc/mounts writes a space in a path as \040).
const sluiceMounts = `awk '$3 == "fuse.sluice" { gsub(/\\040/, " ", $2); print $2 }' /proc/mounts 2>/dev/null`

// flagSets returns each command's flags, for completion.
func flagSets() map[string]*flag.FlagSet {
	mount, _ := mountFlags()
	stat, _, _ := statFlags()
	resync, _, _ := resyncFlags()
	mirrorAdd, _, _ := mirrorFlags()
	exec, _, _ := execFlags()
	top, _, _ := topFlags()
	sim, _ := simFlags()
	return map[string]*flag.FlagSet{
		"mount": mount, "stat": stat, "set": setFlags(), "resync": resync, "mirror": mirrorAdd,
		"reload": reloadFlags(), "exec": exec, "sim": sim, "top": top,
	}
}

func cmdCompletion(args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fmt.Fprint(stdout, completionHelp)
		return nil
	}
	if len(args) != 1 || args[0] != "bash" && args[0] != "zsh" && args[0] != "fish" {
		return usagef("want bash, zsh or fish, got %q", strings.Join(args, " "))
	}
	if args[0] == "fish" {
		fmt.Fprint(stdout, fishCompletion())
		return nil
	}
	if args[0] == "zsh" {
		fmt.Fprintln(stdout, "#compdef sluice")
		fmt.Fprintln(stdout, "autoload -U +X bashcompinit && bashcompinit")
	}
	fmt.Fprint(stdout, bashCompletion())
	return nil
}

func bashCompletion() string {
	var b strings.Builder
	b.WriteString(`# sluice completion (sluice completion bash)
_sluice() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} flags="" valued=""
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "` + strings.Join(commands, " ") + ` completion help" -- "$cur"))
		return
	fi
	case ${COMP_WORDS[1]} in
`)
	sets := flagSets()
	for _, c := range commands {
		var names, valued []string
		sets[c].VisitAll(func(f *flag.Flag) {
			names = append(names, "--"+f.Name)
			if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !bf.IsBoolFlag() {
				valued = append(valued, "--"+f.Name)
			}
		})
		fmt.Fprintf(&b, "\t%s) flags=%q valued=%q ;;\n", c, strings.Join(names, " "), " "+strings.Join(valued, " ")+" ")
	}
	policies := make([]string, len(mirror.Names))
	for i, n := range mirror.Names {
		policies[i] = "read-policy=" + n
	}
	fmt.Fprintf(&b, `	help) COMPREPLY=($(compgen -W %q -- "$cur")); return ;;
	completion) COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")); return ;;
	esac
	if [ "${COMP_WORDS[1]}" = mirror ] && [ "$COMP_CWORD" -eq 2 ]; then
		COMPREPLY=($(compgen -W %q -- "$cur"))
		return
	fi
	case $prev in
	--read-policy) COMPREPLY=($(compgen -W %q -- "$cur")); return ;;
	--cache-mode) COMPREPLY=($(compgen -W "auto direct kernel" -- "$cur")); return ;;
	--readahead-budget) COMPREPLY=($(compgen -W "on off" -- "$cur")); return ;;
	--mount) local IFS=$'\n'; COMPREPLY=($(compgen -W "$(%s)" -- "$cur")); return ;;
	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
		return
	fi
	case " %s " in
	*" ${COMP_WORDS[1]} "*)
		# The mount point first, then for set a read policy.
		local i args=0
		for ((i = 2; i < COMP_CWORD; i++)); do
			case ${COMP_WORDS[i]} in
			-*=* | -*) ;;
			*) [[ $valued == *" ${COMP_WORDS[i-1]} "* ]] || args=$((args + 1)) ;;
			esac
		done
		if [ "$args" -eq 0 ]; then
			local IFS=$'\n'
			COMPREPLY=($(compgen -W "$(%s)" -- "$cur"))
			return
		fi
		if [ "${COMP_WORDS[1]}" = set ] && [ "$args" -eq 1 ]; then
			COMPREPLY=($(compgen -W %q -- "$cur"))
			return
		fi
		;;
	esac
	COMPREPLY=($(compgen -f -- "$cur"))
}
complete -o filenames -F _sluice sluice
`, strings.Join(commands, " "), strings.Join(mirrorSubcommands, " "), strings.Join(mirror.Names, " "), sluiceMounts, strings.Join(mountCommands, " "), sluiceMounts, strings.Join(policies, " "))
	return b.String()
}

// fishCompletion is the completion script for fish.
func fishCompletion() string {
	var b strings.Builder
	b.WriteString("# sluice completion (sluice completion fish)\ncomplete -c sluice -f\n")
	fmt.Fprintf(&b, "complete -c sluice -n __fish_use_subcommand -a %q\n", strings.Join(append(slices.Clone(commands), "completion", "help"), " "))
	fmt.Fprintf(&b, "complete -c sluice -n '__fish_seen_subcommand_from help' -a %q\n", strings.Join(commands, " "))
	b.WriteString("complete -c sluice -n '__fish_seen_subcommand_from completion' -a 'bash zsh fish'\n")
	fmt.Fprintf(&b, "complete -c sluice -n '__fish_seen_subcommand_from mirror; and not __fish_seen_subcommand_from %s' -a %q\n",
		strings.Join(mirrorSubcommands, " "), strings.Join(mirrorSubcommands, " "))
	// In fish's single quotes a backslash and a quote are escaped.
	mounts := "(" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(sluiceMounts) + ")"
	values := map[string]string{"read-policy": strings.Join(mirror.Names, " "), "cache-mode": "auto direct kernel", "readahead-budget": "on off", "mount": mounts}
	sets := flagSets()
	for _, c := range commands {
		sets[c].VisitAll(func(f *flag.Flag) {
			help := strings.ReplaceAll(strings.SplitN(f.Usage, ";", 2)[0], "'", "")
			if len(help) > 60 {
				help = help[:57] + "..."
			}
			line := fmt.Sprintf("complete -c sluice -n '__fish_seen_subcommand_from %s' -l %s -d '%s'", c, f.Name, help)
			if v, ok := values[f.Name]; ok {
				line += fmt.Sprintf(" -x -a '%s'", v)
			} else if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); !ok || !bf.IsBoolFlag() {
				line += " -r -F"
			}
			b.WriteString(line + "\n")
		})
	}
	fmt.Fprintf(&b, "complete -c sluice -n '__fish_seen_subcommand_from %s' -a '%s'\n", strings.Join(mountCommands, " "), mounts)
	policies := make([]string, len(mirror.Names))
	for i, n := range mirror.Names {
		policies[i] = "read-policy=" + n
	}
	fmt.Fprintf(&b, "complete -c sluice -n '__fish_seen_subcommand_from set' -a '%s'\n", strings.Join(policies, " "))
	fmt.Fprintf(&b, "complete -c sluice -n '__fish_seen_subcommand_from mount sim' -F\n")
	return b.String()
}
