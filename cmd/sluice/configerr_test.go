package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigFileErrors: sluice mount --config refuses a file that gives
// both source and mirrors, as the command line refuses SOURCE with
// --mirror, and names in every error the file, the line and the key,
// type errors of [[group]] tables included.
func TestConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sluice.toml")
	head := "source = \"" + dir + "\"\nmountpoint = \"" + dir + "\"\n"
	for _, tc := range []struct{ src, want string }{
		{head + "mirrors = [\"/a\", \"/b\"]\n", path + ":3: mirrors and source " + dir + ": a mirror set is served in place of source"},
		{"mountpoint = \"/m\"\nmirrors = [\"/a\", \"/b\"]\nsource = \"/s\"\n", path + ":2: mirrors and source /s: a mirror set is served in place of source"},
		{head + "[[group]]\nname = \"t\"\nmatch = \"uid=1\"\n", path + ":5: group.match: want a list of rules"},
		{head + "[[group]]\nname = \"t\"\nmatch = [1]\n", path + ":5: group.match: want a list of rules"},
		{head + "[[group]]\nname = 5\n", path + ":4: group.name: want a group name, as a string, not the integer 5"},
		{head + "[[group]]\nname = \"t\"\nlimits = [\"rbps=1MiB\"]\n", path + ":5: group.limits: want limits as one string"},
		{head + "[group]\nname = \"t\"\n", path + ":3: group: want [[group]] tables"},
		{head + "group = 1\n", path + ":3: group: want [[group]] tables"},
		{head + "max-io = \n", path + ":3: max-io: "},
		{head + "burst = 5\n", path + `:3: burst: "5": want a duration such as 5ms`},
		{head + "[other]\nx = 1\n", path + ":3: other: unknown field"},
	} {
		if err := os.WriteFile(path, []byte(tc.src), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := sluice("mount", "--config", path).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
			t.Errorf("config %q: %v, want exit 2\n%s", tc.src, err, out)
		}
		if !strings.Contains(string(out), tc.want) {
			t.Errorf("config %q:\n%s\nwant it to contain %q", tc.src, out, tc.want)
		}
		for _, old := range []string{"toml: ", "destination has type", "parse error"} {
			if strings.Contains(string(out), old) {
				t.Errorf("config %q: %q in\n%s", tc.src, old, out)
			}
		}
	}

	// SOURCE on the command line wins over the file's mirrors.
	os.WriteFile(path, []byte("mirrors = [\"/a\", \"/b\"]\n"), 0o644)
	opts, _, err := commandOptions([]string{"--config", path, "/s", "/m"}, io.Discard)
	if err != nil || opts.Source != "/s" || len(opts.Mirrors) != 0 {
		t.Errorf("SOURCE MOUNTPOINT on the command line with mirrors in the file: %+v, %v", opts, err)
	}
}
