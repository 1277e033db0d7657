// Command sluice mounts a directory through sluice's I/O control layer and
// talks to running mounts.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/spf13/pflag"
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
  sluice completion bash|zsh|fish          a shell completion script
  sluice sim [flags] SCENARIO.toml         run a scenario on virtual time
  sluice version                           the build's module version and VCS revision
  sluice help [COMMAND]                    this text, or a command's flags

Flags are spelled --name VALUE or --name=VALUE, before or after the
arguments; -- ends them. Run 'sluice help COMMAND' (or sluice COMMAND --help)
for a command's flags, and 'sluice help mount' for the limit and group syntax.
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

// run executes one command line and returns the exit status: 0 on success,
// 1 when the command failed, 2 for a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	root := newRoot(args, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	name := "sluice" // the command's path: sluice mirror add
	if cmd != nil {
		name = cmd.CommandPath()
	}
	var ue usageError
	var xe exitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &xe):
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return xe.code
	case errors.As(err, &ue) && name == "sluice":
		fmt.Fprintf(stderr, "sluice: %v\n\n%s", err, usage)
		return 2
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "%s: %v\nRun 'sluice help %s' for usage.\n", name, err, strings.TrimPrefix(name, "sluice "))
		return 2
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
}

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
// positional arguments; all after -- are positional) and returns the
// positional arguments. It serves the command lines sluice reads again
// or builds itself (reload, the mount helper); cobra parses the others
// with the same flag sets.
func parse(fs *pflag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		return nil, usageError{flagError(fs, err, args)}
	}
	return fs.Args(), nil
}

// flagError rewrites an error of parsing flags so that it names the flag
// as it is written (--name), the value given, and what the flag takes; an
// unknown flag gets the nearest known one, if one is close.
// args is the command line, where a flag with one dash is found whole
// (pflag reports only the letters from the first one it did not know).
func flagError(fs *pflag.FlagSet, err error, args []string) error {
	var (
		unknown *pflag.NotExistError
		noValue *pflag.ValueRequiredError
		invalid *pflag.InvalidValueError
		syntax  *pflag.InvalidSyntaxError
	)
	switch {
	case errors.As(err, &unknown):
		if short := unknown.GetSpecifiedShortnames(); short != "" {
			// -json: a long flag with one dash, read as -j -s -o -n.
			short, _, _ = strings.Cut(short, "=")
			short = singleDash(args, short)
			if f := fs.Lookup(short); f != nil {
				return fmt.Errorf("unknown flag -%s; did you mean --%s? (flags take two dashes)", short, f.Name)
			}
			if near := nearestFlag(fs, short); near != "" {
				return fmt.Errorf("unknown flag -%s; did you mean --%s? (flags take two dashes)", short, near)
			}
			return fmt.Errorf("unknown flag -%s (flags take two dashes: --name or --name=value)", short)
		}
		name := unknown.GetSpecifiedName()
		if near := nearestFlag(fs, name); near != "" {
			return fmt.Errorf("unknown flag --%s; did you mean --%s?", name, near)
		}
		return fmt.Errorf("unknown flag --%s", name)
	case errors.As(err, &noValue):
		f := noValue.GetFlag()
		return fmt.Errorf("--%s needs a value: %s", f.Name, flagWant(f, ""))
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		why := ""
		if cause := errors.Unwrap(invalid); cause != nil {
			why = cause.Error()
		}
		return fmt.Errorf("--%s %q: %s", f.Name, invalid.GetValue(), flagWant(f, why))
	case errors.As(err, &syntax):
		return fmt.Errorf("%s: not a flag (flags are --name or --name=value)", syntax.GetSpecifiedFlag())
	}
	return err
}

// singleDash returns the flag of args, written with one dash, whose
// letters end with short, without its dash and value; short if none does.
func singleDash(args []string, short string) string {
	for _, a := range args {
		if a == "--" {
			break
		}
		name, _, _ := strings.Cut(a, "=")
		if len(name) > 1 && name[0] == '-' && name[1] != '-' && strings.HasSuffix(name, short) {
			return name[1:]
		}
	}
	return short
}

// flagWant says what flag f takes; why is what its Set said of a value,
// used when the flag's type has nothing plainer to say.
func flagWant(f *pflag.Flag, why string) string {
	switch f.Value.Type() {
	case sizeType:
		return "want a size such as 128KiB or 1.5GiB (k K KiB M MiB G GiB T TiB are powers of 1024; kB MB GB TB powers of 1000)"
	case onOffType:
		return "want on or off"
	case "duration":
		return "want a duration such as 5ms, 250ms or 2s (a number with a unit: ns, us, ms, s, m, h)"
	case "bool":
		return fmt.Sprintf("want true or false (--%s alone is true)", f.Name)
	case "int", "int64", "uint", "uint64":
		return "want a whole number"
	}
	if why != "" {
		return why
	}
	if v := f.Annotations[valueAnnotation]; len(v) > 0 {
		return "want " + v[0] // as help writes it: 'GROUP KEY=VALUE...', auto|direct|kernel
	}
	return "see sluice help"
}

// nearestFlag returns the name of fs's flag nearest to name, if it is at
// most 2 edits away.
func nearestFlag(fs *pflag.FlagSet, name string) string {
	best, bestD := "", 3
	fs.VisitAll(func(f *pflag.Flag) {
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
