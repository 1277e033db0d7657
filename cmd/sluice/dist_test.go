package main

import (
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
