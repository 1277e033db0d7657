// Command sluice mounts a directory through sluice's I/O control layer and
// talks to running mounts.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

const usage = `sluice: precise per-tenant I/O limits in front of any directory.

Usage:
  sluice mount [flags] SOURCE MOUNTPOINT   serve SOURCE on MOUNTPOINT (foreground)
  sluice mount [flags] --mirror DIR1 --mirror DIR2 MOUNTPOINT   serve a mirror set
  sluice stat [--json] MOUNTPOINT          per-group counters of a running mount
  sluice top MOUNTPOINT                    a live view of rates against limits
  sluice set MOUNTPOINT 'GROUP KEY=VALUE...'  change a group's limits live
  sluice set MOUNTPOINT read-policy=NAME   switch a mirror set's read policy
  sluice resync [--rate SIZE] MOUNTPOINT   make a mirror set's stale mirrors equal again
  sluice reload MOUNTPOINT                 apply a mount's changed config file (or SIGHUP)
  sluice exec --mount M --group G -- CMD   run CMD with its I/O through M charged to G
  sluice completion bash|zsh               a shell completion script
  sluice sim [flags] SCENARIO.toml         run a scenario on virtual time
  sluice help [COMMAND]                    this text, or a command's flags

Run 'sluice help mount' for the limit and group syntax.
`

func main() {
	if filepath.Base(os.Args[0]) == "mount.fuse.sluice" {
		os.Exit(runFstab(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// runFstab runs sluice as mount(8)'s helper for type fuse.sluice. Errors
// read as those of sluice mount; the exit status is mount(8)'s: 1 for a
// bad invocation, 32 for a mount that failed.
func runFstab(args []string, stdout, stderr io.Writer) int {
	err := cmdFstab(args, stdout, stderr)
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "sluice mount: %v\n", err)
	if errors.As(err, new(usageError)) {
		return 1
	}
	return 32
}

// commands are the subcommands, as help and completions list them.
var commands = []string{"mount", "stat", "top", "set", "resync", "reload", "exec", "sim"}

// run executes one command line and returns the exit status: 0 on success,
// 1 when the command failed, 2 for a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "mount":
		err = cmdMount(rest, stdout, stderr)
	case "stat":
		err = cmdStat(rest, stdout, stderr)
	case "set":
		err = cmdSet(rest, stdout, stderr)
	case "resync":
		err = cmdResync(rest, stdout, stderr)
	case "reload":
		err = cmdReload(rest, stdout, stderr)
	case "exec":
		err = cmdExec(rest, stdout, stderr)
	case "completion":
		err = cmdCompletion(rest, stdout, stderr)
	case "top":
		err = cmdTop(rest, stdout, stderr)
	case "sim":
		err = cmdSim(rest, stdout, stderr)
	case "help", "-h", "-help", "--help":
		return cmdHelp(rest, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "sluice %s: %v\nRun 'sluice help %s' for usage.\n", args[0], err, args[0])
		return 2
	default:
		fmt.Fprintf(stderr, "sluice %s: %v\n", args[0], err)
		return 1
	}
}

func cmdHelp(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return 0
	}
	var fs *flag.FlagSet
	switch args[0] {
	case "completion":
		fmt.Fprint(stdout, completionHelp)
		return 0
	case "mount":
		fs, _ = mountFlags()
	case "stat":
		fs, _ = statFlags()
	case "set":
		fs = setFlags()
	case "resync":
		fs, _, _ = resyncFlags()
	case "reload":
		fs = reloadFlags()
	case "exec":
		fs, _, _ = execFlags()
	case "top":
		fs, _ = topFlags()
	case "sim":
		fs, _ = simFlags()
	default:
		fmt.Fprintf(stderr, "sluice help: unknown command %q\n", args[0])
		return 2
	}
	fs.SetOutput(stdout)
	fs.Usage()
	return 0
}

// usageError is a malformed command line.
type usageError struct{ error }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// parse parses flags anywhere on the command line (flags may follow the
// positional arguments) and returns the positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

// helpFor prints a FlagSet's usage to w when parse returns ErrHelp.
func helpFor(fs *flag.FlagSet, w io.Writer, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(w)
		fs.Usage()
	}
	return err
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ") + "\n"
}
