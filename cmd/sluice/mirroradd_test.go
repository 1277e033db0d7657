package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"sluice/backing"
	"sluice/control"
	"sluice/internal/treetest"
)

// TestMirrorAddEndToEnd: mirrors are added to a set by starting it again
// with more --mirror directories: one copied whole with cp -a (its state
// file with it) and one empty join the set stale, the mount serves from
// the others, and sluice resync makes them equal.
func TestMirrorAddEndToEnd(t *testing.T) {
	needMount(t)
	dir := t.TempDir()
	a, b, c, d, mnt := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c"), filepath.Join(dir, "d"), filepath.Join(dir, "mnt")
	for _, x := range []string{a, b, d, mnt} {
		os.Mkdir(x, 0o755)
	}
	for _, x := range []string{a, b} {
		os.MkdirAll(filepath.Join(x, "sub"), 0o755)
		os.WriteFile(filepath.Join(x, "sub", "f"), []byte("one"), 0o644)
	}
	cmd, _, exited, _ := startMount(t, mnt, "mount", "--mirror", a, "--mirror", b, mnt)
	if err := os.WriteFile(filepath.Join(mnt, "sub", "g"), []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	if out, err := exec.Command("cp", "-a", a, c).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(a, "sub", "f"), []byte("changed after the copy"), 0o644)
	os.WriteFile(filepath.Join(b, "sub", "f"), []byte("changed after the copy"), 0o644)

	cmd, stderr, exited, _ := startMount(t, mnt, "mount", "--mirror", a, "--mirror", b, "--mirror", c, "--mirror", d, mnt)
	out, err := sluice("stat", "--json", mnt).Output()
	var st control.Status
	if err != nil || json.Unmarshal(out, &st) != nil || len(st.Mirrors) != 4 {
		t.Fatalf("stat: %v\n%s", err, out)
	}
	var states []string
	for _, m := range st.Mirrors {
		states = append(states, m.State)
	}
	if strings.Join(states, " ") != "healthy healthy stale stale" {
		t.Errorf("states %v with a copy and an empty directory added, want healthy healthy stale stale", states)
	}
	if got, _ := os.ReadFile(filepath.Join(mnt, "sub", "f")); string(got) != "changed after the copy" {
		t.Errorf("read through the mount before the resync: %q", got)
	}
	if out, err := sluice("resync", mnt).CombinedOutput(); err != nil {
		t.Fatalf("resync: %v\n%s", err, out)
	}
	for _, x := range []string{c, d} {
		treetest.Same(t, a, x, backing.StateFile)
	}
	// The daemon's log, read once it has exited.
	cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	for _, want := range []string{c + " holds a copy of mirror " + a, d + " is new to the set"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("the daemon's log does not say %q:\n%s", want, stderr)
		}
	}
}
