package main

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestVersion: sluice version prints the module version and the VCS
// revision the build recorded, a commit of this repository.
func TestVersion(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	if out, err := exec.Command(goTool, "build", "-buildvcs=true", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Skipf("cannot build with VCS information: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("sluice version: %v\n%s", err, out)
	}
	if meta, _ := exec.Command(goTool, "version", "-m", bin).Output(); !strings.Contains(string(meta), "vcs.revision=") {
		if !strings.Contains(string(out), "revision unknown") {
			t.Errorf("sluice version of a build with no VCS revision:\n%s", out)
		}
		t.Skipf("the build recorded no VCS revision (a tree the go tool finds no repository for)")
	}
	m := regexp.MustCompile(`^sluice (v\S+|\(devel\))\nrevision ([0-9a-f]{40}) of \S+`).FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("sluice version:\n%s\nwant the module version and a revision", out)
	}
	if err := exec.Command("git", "cat-file", "-e", m[2]+"^{commit}").Run(); err != nil {
		t.Errorf("revision %s is no commit of this repository: %v", m[2], err)
	}
	if !strings.Contains(string(out), "built with "+runtime.Version()) {
		t.Errorf("sluice version does not name %s:\n%s", runtime.Version(), out)
	}
}

// TestHelpHelp: help knows itself and version.
func TestHelpHelp(t *testing.T) {
	for _, c := range []string{"help", "version"} {
		out, err := sluice("help", c).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Usage: sluice "+c) || !strings.Contains(string(out), "\n  sluice "+c) {
			t.Errorf("sluice help %s: %v\n%s", c, err, out)
		}
	}
}

// TestExecNotFound: a command sluice exec cannot find exits 127, one it
// finds but cannot run 126, as from a shell, with the reason.
func TestExecNotFound(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		cmd  string
		code int
		want string
	}{
		{"/nonexistent", 127, "sluice exec: /nonexistent: no such file or directory\n"},
		{"sluice-no-such-command", 127, "sluice exec: sluice-no-such-command: command not found\n"},
		{dir, 126, "sluice exec: " + dir + ": "},
	} {
		out, err := sluice("exec", "--mount", dir, "--group", "g", "--", tc.cmd).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != tc.code || !strings.HasPrefix(string(out), tc.want) {
			t.Errorf("sluice exec %s: %v\n%s\nwant exit %d and %q", tc.cmd, err, out, tc.code, tc.want)
		}
	}
}
