package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"sluice/mirror"
)

const completionHelp = `Usage: sluice completion bash|zsh

Prints a shell completion script for sluice: commands, each command's
flags, the values of --read-policy and --cache-mode, files elsewhere.
  sluice completion bash > /etc/bash_completion.d/sluice
  sluice completion zsh > "${fpath[1]}/_sluice"   # or: source <(sluice completion zsh)
`

// flagSets returns each command's flags, for completion.
func flagSets() map[string]*flag.FlagSet {
	mount, _ := mountFlags()
	stat, _, _ := statFlags()
	resync, _, _ := resyncFlags()
	exec, _, _ := execFlags()
	top, _, _ := topFlags()
	sim, _ := simFlags()
	return map[string]*flag.FlagSet{
		"mount": mount, "stat": stat, "set": setFlags(), "resync": resync,
		"reload": reloadFlags(), "exec": exec, "sim": sim, "top": top,
	}
}

func cmdCompletion(args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
		fmt.Fprint(stdout, completionHelp)
		return nil
	}
	if len(args) != 1 || args[0] != "bash" && args[0] != "zsh" {
		return usagef("want bash or zsh, got %q", strings.Join(args, " "))
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
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} flags=""
	if [ "$COMP_CWORD" -eq 1 ]; then
		COMPREPLY=($(compgen -W "` + strings.Join(commands, " ") + ` completion help" -- "$cur"))
		return
	fi
	case ${COMP_WORDS[1]} in
`)
	sets := flagSets()
	for _, c := range commands {
		var names []string
		sets[c].VisitAll(func(f *flag.Flag) { names = append(names, "--"+f.Name) })
		fmt.Fprintf(&b, "\t%s) flags=%q ;;\n", c, strings.Join(names, " "))
	}
	fmt.Fprintf(&b, `	help) COMPREPLY=($(compgen -W %q -- "$cur")); return ;;
	completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")); return ;;
	esac
	case $prev in
	--read-policy) COMPREPLY=($(compgen -W %q -- "$cur")); return ;;
	--cache-mode) COMPREPLY=($(compgen -W "auto direct kernel" -- "$cur")); return ;;
	--readahead-budget) COMPREPLY=($(compgen -W "on off" -- "$cur")); return ;;
	esac
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$flags" -- "$cur"))
	else
		COMPREPLY=($(compgen -f -- "$cur"))
	fi
}
complete -o filenames -F _sluice sluice
`, strings.Join(commands, " "), strings.Join(mirror.Names, " "))
	return b.String()
}
