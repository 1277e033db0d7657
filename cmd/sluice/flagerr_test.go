package main

import (
	"bytes"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestFlagErrors: a flag the command does not take, or a value a flag
// cannot take, is named as it is written (--name) with the value and
// what the flag takes, and an unknown flag gets the nearest known one.
func TestFlagErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mount", "--burst", "5", dir, dir}, `sluice mount: --burst "5": want a duration such as 5ms`},
		{[]string{"mount", "--bogus", dir, dir}, "sluice mount: unknown flag --bogus\n"},
		{[]string{"mount", "--cach", "1MiB", dir, dir}, "sluice mount: unknown flag --cach; did you mean --cache?\n"},
		{[]string{"mount", "--max-wiat", "1s", dir, dir}, "sluice mount: unknown flag --max-wiat; did you mean --max-wait?\n"},
		{[]string{"stat", "--jsn", dir}, "sluice stat: unknown flag --jsn; did you mean --json?\n"},
		{[]string{"mount", "--max-io", "12q", dir, dir}, `sluice mount: --max-io "12q": want a size such as 128KiB`},
		{[]string{"mount", "--max-open", "many", dir, dir}, `sluice mount: --max-open "many": want a whole number`},
		{[]string{"mount", "--allow-other=maybe", dir, dir}, `sluice mount: --allow-other "maybe": want true or false`},
		{[]string{"mount", "--readahead-budget", "maybe", dir, dir}, `sluice mount: --readahead-budget "maybe": want on or off`},
		{[]string{"mount", dir, dir, "--burst"}, "sluice mount: --burst needs a value: want a duration such as 5ms"},
		{[]string{"mount", dir, dir, "--limit"}, "sluice mount: --limit needs a value: want 'GROUP KEY=VALUE...'\n"},
		{[]string{"mount", dir, dir, "--cache-mode"}, "sluice mount: --cache-mode needs a value: want auto|direct|kernel\n"},
		{[]string{"stat", "-json", dir}, "sluice stat: unknown flag -json; did you mean --json? (flags take two dashes)\n"},
		{[]string{"mount", "-max-io=64KiB", dir, dir}, "sluice mount: unknown flag -max-io; did you mean --max-io? (flags take two dashes)\n"},
		{[]string{"mount", "---cache", dir, dir}, "sluice mount: ---cache: not a flag (flags are --name or --name=value)\n"},
		{[]string{"moutn", dir, dir}, `sluice: unknown command "moutn"; did you mean mount?`},
		{[]string{"help", "stats"}, `sluice help: unknown command "stats"; did you mean stat?`},
	} {
		out, err := sluice(tc.args...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("sluice %q: %v, want exit 2\n%s", tc.args, err, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("sluice %q:\n%s\nwant it to contain %q", tc.args, out, tc.want)
		}
		for _, old := range []string{"flag provided but not defined", "for flag -", "parse error", " -bogus"} {
			if strings.Contains(string(out), old) {
				t.Errorf("sluice %q: %q in\n%s", tc.args, old, out)
			}
		}
	}
}

// TestHelpFlags: each command's help lists every flag it takes, with the
// word for its value and its default, wrapped to 80 columns when it is
// not written to a terminal; mount's flags are listed in groups.
func TestHelpFlags(t *testing.T) {
	root := newRoot([]string{"help"}, io.Discard, io.Discard)
	var cmds []*cobra.Command
	for _, c := range root.Commands() {
		cmds = append(append(cmds, c), c.Commands()...) // mirror add too
	}
	for _, c := range cmds {
		if c.HasSubCommands() {
			continue // its help is its subcommands'
		}
		name := strings.TrimPrefix(c.CommandPath(), "sluice ")
		var out, errb bytes.Buffer
		if code := run(append(strings.Fields(name), "--help"), &out, &errb); code != 0 {
			t.Errorf("%s --help: exit %d\n%s", name, code, errb.String())
			continue
		}
		help, ok := strings.CutPrefix(out.String(), c.Long)
		if !ok {
			t.Errorf("%s --help does not begin with its text:\n%s", name, out.String())
			continue
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" {
				return
			}
			line := "  --" + f.Name
			if v := valueName(f); v != "" {
				line += " " + v
			}
			if !strings.Contains(help, "\n"+line+" ") && !strings.Contains(help, "\n"+line+"\n") {
				t.Errorf("%s --help does not list %q:\n%s", name, line, help)
			}
		})
		for _, l := range strings.Split(help, "\n") {
			if len([]rune(l)) > 80 {
				t.Errorf("%s --help has a line of %d columns: %q", name, len([]rune(l)), l)
			}
		}
	}
	// sluice help mirror and help mirror add show mirror add's help.
	var add, mirror bytes.Buffer
	run([]string{"help", "mirror", "add"}, &add, io.Discard)
	run([]string{"help", "mirror"}, &mirror, io.Discard)
	if !strings.HasPrefix(add.String(), "Usage: sluice mirror add") || !strings.Contains(add.String(), "\n  --no-resync ") || mirror.String() != add.String() {
		t.Errorf("help mirror add:\n%s\nhelp mirror:\n%s", add.String(), mirror.String())
	}

	var out bytes.Buffer
	run([]string{"help", "mount"}, &out, io.Discard)
	last := -1
	for _, g := range []string{groupLimits, groupCache, groupMirror, groupMount, groupLog, groupHosts} {
		i := strings.Index(out.String(), "\n"+g+":\n")
		if i <= last {
			t.Errorf("help mount: group %q at %d, after the one before at %d", g, i, last)
		}
		last = i
	}
	for _, w := range []string{"\n  --max-io SIZE ", "(default 128KiB)", "\n  --cache-mode auto|direct|kernel\n", "\n  --readahead-budget on|off "} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("help mount lacks %q", w)
		}
	}

	// At 50 columns every line of a description fits.
	fs, _ := mountFlags()
	var flags []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) { flags = append(flags, f) })
	for _, l := range strings.Split(flagHelp(flags, 50), "\n") {
		if desc := strings.TrimLeft(l, " "); len([]rune(l)) > 50 && !strings.HasPrefix(desc, "--") {
			t.Errorf("a description line of %d columns at width 50: %q", len([]rune(l)), l)
		}
	}
}
