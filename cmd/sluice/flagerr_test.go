package main

import (
	"os/exec"
	"strings"
	"testing"
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
