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
	"regexp"
	"runtime/debug"
	"strings"
	"time"
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
  sluice mirror add MOUNTPOINT DIR         add DIR to a mirror set while it serves
  sluice reload MOUNTPOINT                 apply a mount's changed config file (or SIGHUP)
  sluice exec --mount M --group G -- CMD   run CMD with its I/O through M charged to G
  sluice completion bash|zsh               a shell completion script
  sluice sim [flags] SCENARIO.toml         run a scenario on virtual time
  sluice version                           the build's module version and VCS revision
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
var commands = []string{"mount", "stat", "top", "set", "resync", "mirror", "reload", "exec", "sim"}

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
	case "mirror":
		err = cmdMirror(rest, stdout, stderr)
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
	case "version", "--version":
		err = cmdVersion(rest, stdout)
	case "help", "-h", "-help", "--help":
		return cmdHelp(rest, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	var ue usageError
	var xe exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &xe):
		fmt.Fprintf(stderr, "sluice %s: %v\n", args[0], err)
		return xe.code
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
	case "help":
		fmt.Fprint(stdout, helpHelp)
		return 0
	case "version":
		fmt.Fprint(stdout, versionHelp)
		return 0
	case "mount":
		fs, _ = mountFlags()
	case "stat":
		fs, _, _ = statFlags()
	case "set":
		fs = setFlags()
	case "resync":
		fs, _, _ = resyncFlags()
	case "mirror":
		fs, _, _ = mirrorFlags()
	case "reload":
		fs = reloadFlags()
	case "exec":
		fs, _, _ = execFlags()
	case "top":
		fs, _, _ = topFlags()
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

const helpHelp = `Usage: sluice help [COMMAND]

Prints the overview of sluice's commands, or with COMMAND that command's
usage and flags.
  sluice help mount
`

const versionHelp = `Usage: sluice version

Prints the version of the sluice module the binary was built from, the
VCS revision and its time, whether the tree held uncommitted changes, and
the Go version, as the build recorded them.
  sluice version
`

// cmdVersion prints what the build recorded of itself.
func cmdVersion(args []string, stdout io.Writer) error {
	if len(args) != 0 {
		return usagef("takes no arguments, got %q", strings.Join(args, " "))
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("the binary holds no build information")
	}
	v := bi.Main.Version
	if v == "" {
		v = "(unknown)"
	}
	fmt.Fprintf(stdout, "sluice %s\n", v)
	set := map[string]string{}
	for _, s := range bi.Settings {
		set[s.Key] = s.Value
	}
	if rev := set["vcs.revision"]; rev != "" {
		fmt.Fprintf(stdout, "revision %s", rev)
		if t := set["vcs.time"]; t != "" {
			fmt.Fprintf(stdout, " of %s", t)
		}
		if set["vcs.modified"] == "true" {
			fmt.Fprint(stdout, ", with uncommitted changes")
		}
		fmt.Fprintln(stdout)
	} else {
		fmt.Fprintln(stdout, "revision unknown (built without VCS information)")
	}
	fmt.Fprintf(stdout, "built with %s\n", bi.GoVersion)
	return nil
}

// exitError ends sluice with status code, after its message.
type exitError struct {
	error
	code int
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
			return nil, usageError{flagError(fs, err)}
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

// The flag package's errors, as fs.Parse returns them.
var (
	flagUndefined = regexp.MustCompile(`^flag provided but not defined: -+(.*)$`)
	flagInvalid   = regexp.MustCompile(`^invalid (?:boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-+([^:]+): (.*)$`)
	flagNoValue   = regexp.MustCompile(`^flag needs an argument: -+(.*)$`)
)

// flagError rewrites an error of fs.Parse so that it names the flag as
// it is written (--name), the value given, and what the flag takes; an
// unknown flag gets the nearest known one, if one is close.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if m := flagUndefined.FindStringSubmatch(msg); m != nil {
		if near := nearestFlag(fs, m[1]); near != "" {
			return fmt.Errorf("unknown flag --%s; did you mean --%s?", m[1], near)
		}
		return fmt.Errorf("unknown flag --%s", m[1])
	}
	if m := flagNoValue.FindStringSubmatch(msg); m != nil {
		if f := fs.Lookup(m[1]); f != nil {
			return fmt.Errorf("--%s needs a value: %s", m[1], flagWant(f, ""))
		}
		return fmt.Errorf("--%s needs a value", m[1])
	}
	if m := flagInvalid.FindStringSubmatch(msg); m != nil {
		if f := fs.Lookup(m[2]); f != nil {
			return fmt.Errorf("--%s %s: %s", m[2], m[1], flagWant(f, m[3]))
		}
	}
	if rest, ok := strings.CutPrefix(msg, "bad flag syntax: "); ok {
		return fmt.Errorf("%s: not a flag (flags are --name or --name=value)", rest)
	}
	return err
}

// flagWant says what flag f takes; why is what its Set said of a value,
// used when the flag's type has nothing plainer to say.
func flagWant(f *flag.Flag, why string) string {
	switch v := f.Value.(type) {
	case *sizeFlag:
		return "want a size such as 128KiB or 1.5GiB (k K KiB M MiB G GiB T TiB are powers of 1024; kB MB GB TB powers of 1000)"
	case *onOff:
		return "want on or off"
	case flag.Getter:
		switch v.Get().(type) {
		case time.Duration:
			return "want a duration such as 5ms, 250ms or 2s (a number with a unit: ns, us, ms, s, m, h)"
		case bool:
			return fmt.Sprintf("want true or false (--%s alone is true)", f.Name)
		case int, int64, uint, uint64:
			return "want a whole number"
		}
	}
	if why != "" && why != "parse error" {
		return why
	}
	return "see sluice help"
}

// nearestFlag returns the name of fs's flag nearest to name, if it is at
// most 2 edits away.
func nearestFlag(fs *flag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		if d := editDistance(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
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
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
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
