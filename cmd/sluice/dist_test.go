package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnit: dist/sluice@.service passes systemd-analyze verify. The
// one complaint allowed is that the binary is not installed at the path
// the unit runs, on a machine where it is not.
func TestSystemdUnit(t *testing.T) {
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("skipping: no systemd-analyze (install systemd)")
	}
	unit, err := os.ReadFile("../../dist/sluice@.service")
	if err != nil {
		t.Fatal(err)
	}
	inst := filepath.Join(t.TempDir(), "sluice@test.service")
	if err := os.WriteFile(inst, unit, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("systemd-analyze", "verify", "--man=no", inst).CombinedOutput()
	const bin = "/usr/local/bin/sluice"
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		if _, err := os.Stat(bin); err != nil && strings.Contains(line, "Command "+bin+" is not executable") {
			continue
		}
		t.Errorf("systemd-analyze verify: %s", line)
	}
}

// TestCompletion: the bash script completes commands, every flag of a
// command, and flag values, when bash runs it.
func TestCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("skipping: no bash")
	}
	script := filepath.Join(t.TempDir(), "sluice.bash")
	if err := os.WriteFile(script, []byte(bashCompletion()), 0o644); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) string {
		t.Helper()
		prog := "source " + script + "; COMP_WORDS=("
		for _, w := range words {
			prog += "'" + w + "' "
		}
		prog += fmt.Sprintf("); COMP_CWORD=%d; _sluice; echo \"${COMPREPLY[*]}\"", len(words)-1)
		out, err := exec.Command(bash, "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := complete("sluice", "re"); got != "resync reload" {
		t.Errorf("commands for 're': %q", got)
	}
	if got := complete("sluice", "mount", "--read"); got != "--read-policy --readahead --readahead-budget" {
		t.Errorf("mount flags for '--read': %q", got)
	}
	if got := complete("sluice", "mount", "--read-policy", ""); got != "adaptive pid roundrobin latency" {
		t.Errorf("read policies: %q", got)
	}
	mount, _ := mountFlags()
	all := " " + complete("sluice", "mount", "--") + " "
	mount.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(all, " --"+f.Name+" ") {
			t.Errorf("--%s is not completed", f.Name)
		}
	})
	var out strings.Builder
	if err := cmdCompletion([]string{"zsh"}, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "#compdef sluice") {
		t.Errorf("zsh completion: %v\n%.100s", err, out.String())
	}
	if zsh, err := exec.LookPath("zsh"); err == nil {
		if b, err := exec.Command(zsh, "-n", "-c", out.String()).CombinedOutput(); err != nil {
			t.Errorf("zsh -n: %v\n%s", err, b)
		}
	}
}
