package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
)

// sluice's command line is a cobra command tree: cobra finds the command,
// pflag parses its GNU-style flags (--name VALUE, --name=VALUE, flags
// after the arguments, -- ending them), and cobra generates the shells'
// completion scripts, which ask sluice itself what to complete. What
// sluice adds: messages that name the flag, the value and what it takes
// (flagError), the nearest flag to an unknown one, help with flags in
// groups wrapped to the terminal (writeHelp), and exit status 2 for a
// usage error.

// The annotations of a flag that help reads: the group it is listed under
// and the word standing for its value.
const (
	groupAnnotation = "sluice_group"
	valueAnnotation = "sluice_value"
)

// newRoot returns sluice's command tree, writing to stdout and stderr;
// args is the whole command line, which error messages and the mount
// command read.
func newRoot(args []string, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:                        "sluice",
		Long:                       usage,
		Args:                       cobra.ArbitraryArgs,
		SilenceErrors:              true,
		SilenceUsage:               true,
		CompletionOptions:          cobra.CompletionOptions{DisableDefaultCmd: true},
		SuggestionsMinimumDistance: 2,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	version := root.Flags().Bool("version", false, "print the build's version (sluice version)")
	root.Flags().MarkHidden("version")
	root.RunE = func(_ *cobra.Command, rest []string) error {
		switch {
		case len(rest) > 0:
			return unknownCommand(root, rest[0])
		case *version:
			return cmdVersion(nil, stdout)
		}
		return usagef("want a command")
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if c == root && !strings.HasPrefix(args[0], "-") {
			return unknownCommand(root, args[0])
		}
		return usageError{flagError(c.Flags(), err, args)}
	})
	root.SetHelpFunc(func(c *cobra.Command, _ []string) {
		writeHelp(c.OutOrStdout(), c, helpWidth(c.OutOrStdout()))
	})
	root.AddCommand(
		mountCommand(args, stdout, stderr),
		statCommand(stdout),
		topCommand(stdout),
		setCommand(stderr),
		resyncCommand(stdout),
		mirrorCommand(stdout),
		reloadCommand(stdout, stderr),
		execCommand(stderr),
		simCommand(stdout),
		versionCommand(stdout),
		completionCommand(root, stdout),
	)
	root.SetHelpCommand(helpCommand(root, stdout))
	return root
}

// unknownCommand is the usage error of a command sluice does not have,
// with the nearest ones it has.
func unknownCommand(root *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q", name)
	if near := root.SuggestionsFor(name); len(near) > 0 {
		msg += "; did you mean " + orList(near) + "?"
	}
	return usageError{errors.New(msg)}
}

// command returns a command of sluice: use is its name and arguments,
// short what it does in a few words (for completions), long its help,
// fs its flags (nil: none), and run what it does with its positional
// arguments once fs is parsed. It takes any number of arguments: run
// checks them, saying what it wants. The values of fs's sizes, durations
// and counts complete to nothing (no file names).
func command(use, short, long string, fs *pflag.FlagSet, run func(pos []string) error) *cobra.Command {
	c := &cobra.Command{Use: use, Short: short, Long: long, Args: cobra.ArbitraryArgs}
	if run != nil {
		c.RunE = func(_ *cobra.Command, pos []string) error { return run(pos) }
	}
	c.Flags().SortFlags = false
	if fs != nil {
		c.Flags().AddFlagSet(fs)
		fs.VisitAll(func(f *pflag.Flag) {
			switch f.Value.Type() {
			case sizeType, "duration", "int":
				// A number: the shell offers no file names for it.
				c.RegisterFlagCompletionFunc(f.Name, cobra.NoFileCompletions)
			}
		})
	}
	return c
}

// newFlagSet returns an empty flag set of command name, listing its flags
// in the order they are defined.
func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	return fs
}

// flagDoc annotates flags of fs for help: each flag named in values gets
// the word standing for its value there, and, with a group, every flag
// defined so far without a group is listed under group.
func flagDoc(fs *pflag.FlagSet, group string, values map[string]string) {
	for name, v := range values {
		fs.SetAnnotation(name, valueAnnotation, []string{v})
	}
	if group == "" {
		return
	}
	fs.VisitAll(func(f *pflag.Flag) {
		if _, ok := f.Annotations[groupAnnotation]; !ok {
			fs.SetAnnotation(f.Name, groupAnnotation, []string{group})
		}
	})
}

// completeWords completes the value of c's flag name with words.
func completeWords(c *cobra.Command, name string, words []string) {
	c.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(words, cobra.ShellCompDirectiveNoFileComp))
}

// orList joins words for a message: "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// helpWidth is the width help wraps its flags to: the terminal's, if w is
// one, up to 100 columns, else 80.
func helpWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
			return min(cols, 100)
		}
	}
	return 80
}

// writeHelp writes c's help to w: its text, then its flags, wrapped to
// width columns; for a command with subcommands (sluice mirror), theirs.
func writeHelp(w io.Writer, c *cobra.Command, width int) {
	fmt.Fprint(w, c.Long)
	if c.HasParent() && c.HasSubCommands() {
		for i, sub := range c.Commands() {
			if i > 0 {
				fmt.Fprintln(w)
			}
			writeHelp(w, sub, width)
		}
		return
	}
	var flags []*pflag.Flag
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" {
			flags = append(flags, f)
		}
	})
	if len(flags) > 0 {
		fmt.Fprint(w, "\n"+flagHelp(flags, width))
	}
}

// flagHelp lists flags for help in width columns: under the heading of
// each group in the order the groups first appear ("Flags" for those
// without one), each flag with the word standing for its value, then its
// usage and default, wrapped, in a column of their own (below the name,
// indented, where the width leaves less than 40 columns beside it).
func flagHelp(flags []*pflag.Flag, width int) string {
	var groups []string
	byGroup := map[string][]*pflag.Flag{}
	names := map[*pflag.Flag]string{}
	col := 0
	for _, f := range flags {
		g := "Flags"
		if a := f.Annotations[groupAnnotation]; len(a) > 0 {
			g = a[0]
		}
		if _, ok := byGroup[g]; !ok {
			groups = append(groups, g)
		}
		byGroup[g] = append(byGroup[g], f)
		names[f] = "  --" + f.Name
		if v := valueName(f); v != "" {
			names[f] += " " + v
		}
		if n := len(names[f]); n <= 30 {
			col = max(col, n+3)
		}
	}
	if width-col < 40 {
		// Too narrow for two columns: each name on a line of its own,
		// its description indented below it.
		col = 8
	}
	textWidth := max(width-col, 20)
	var b strings.Builder
	for i, g := range groups {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(g + ":\n")
		for _, f := range byGroup[g] {
			text := f.Usage
			if d := f.DefValue; d != "" && d != "0" && d != "0s" && d != "false" {
				text += " (default " + d + ")"
			}
			lines := wrap(text, textWidth)
			name := names[f]
			if len(name)+2 > col {
				b.WriteString(name + "\n")
				name = ""
			}
			for _, l := range lines {
				fmt.Fprintf(&b, "%-*s%s\n", col, name, l)
				name = ""
			}
		}
	}
	return b.String()
}

// valueName is the word help writes for the value of flag f: its
// annotation, else one for its type; none for a switch.
func valueName(f *pflag.Flag) string {
	if a := f.Annotations[valueAnnotation]; len(a) > 0 {
		return a[0]
	}
	switch t := f.Value.Type(); t {
	case "bool":
		return ""
	case "int", "int64", "uint", "uint64":
		return "N"
	case onOffType:
		return t
	default:
		return strings.ToUpper(t)
	}
}

// wrap breaks text into lines of at most width columns at spaces (a word
// longer than width gets a line of its own).
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case len([]rune(line))+1+len([]rune(word)) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}

const helpHelp = `Usage: sluice help [COMMAND]

Prints the overview of sluice's commands, or with COMMAND that command's
usage and flags (as COMMAND --help does).
  sluice help mount
`

// helpCommand is sluice help, of root's commands.
func helpCommand(root *cobra.Command, stdout io.Writer) *cobra.Command {
	c := command("help [COMMAND]", "the overview, or a command's usage and flags", helpHelp, nil, func(pos []string) error {
		if len(pos) == 0 {
			fmt.Fprint(stdout, usage)
			return nil
		}
		c, _, err := root.Find(pos) // the deepest command pos names: mirror add
		if err != nil || c == root || c.Hidden {
			return unknownCommand(root, pos[0])
		}
		return c.Help()
	})
	c.ValidArgsFunction = func(_ *cobra.Command, pos []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(pos) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []cobra.Completion
		for _, sub := range root.Commands() {
			if !sub.Hidden && sub.Name() != "help" {
				names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
	return c
}

const versionHelp = `Usage: sluice version

Prints the version of the sluice module the binary was built from, the
VCS revision and its time, whether the tree held uncommitted changes, and
the Go version, as the build recorded them.
  sluice version
`

// versionCommand is sluice version.
func versionCommand(stdout io.Writer) *cobra.Command {
	c := command("version", "the build's module version and VCS revision", versionHelp, nil, func(pos []string) error {
		return cmdVersion(pos, stdout)
	})
	c.ValidArgsFunction = cobra.NoFileCompletions
	return c
}
