package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
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
	if got := complete("sluice", "mount", "--read"); got != "--read-only --read-policy --readahead --readahead-budget" {
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
		// Loaded as a user's .zshrc would.
		if b, err := exec.Command(zsh, "-f", "-c", "autoload -U compinit && compinit -u && "+out.String()).CombinedOutput(); err != nil {
			t.Errorf("loading the zsh completion: %v\n%s", err, b)
		}
	}
}

// TestCompletionMounts: bash and fish complete the mount points of running
// sluice mounts for the commands that take one (exec's --mount too), and a
// read policy after set's mount point.
func TestCompletionMounts(t *testing.T) {
	needMount(t)
	_, src, mnt := srcMnt(t)
	startMount(t, mnt, "mount", src, mnt)
	dir := t.TempDir()
	bashScript, fishScript := filepath.Join(dir, "sluice.bash"), filepath.Join(dir, "sluice.fish")
	os.WriteFile(bashScript, []byte(bashCompletion()), 0o644)
	os.WriteFile(fishScript, []byte(fishCompletion()), 0o644)
	bash := func(words ...string) string {
		t.Helper()
		prog := "source " + bashScript + "; COMP_WORDS=("
		for _, w := range words {
			prog += "'" + w + "' "
		}
		prog += fmt.Sprintf("); COMP_CWORD=%d; _sluice; printf '%%s\\n' \"${COMPREPLY[@]}\"", len(words)-1)
		out, err := exec.Command("bash", "-c", prog).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, words := range [][]string{{"sluice", "stat", ""}, {"sluice", "top", "--interval", "2s", ""}, {"sluice", "exec", "--mount", ""}} {
		if got := strings.Split(bash(words...), "\n"); !slices.Contains(got, mnt) {
			t.Errorf("bash completes %q with %q, want the mount point %s among them", words, got, mnt)
		}
	}
	if got := bash("sluice", "set", mnt, "read-policy=r"); got != "read-policy=roundrobin" {
		t.Errorf("bash completes set's read policy with %q", got)
	}
	fish, err := exec.LookPath("fish")
	if err != nil {
		t.Log("no fish to load its completion in")
		return
	}
	complete := func(line string) []string {
		t.Helper()
		out, err := exec.Command(fish, "--no-config", "-c", "source "+fishScript+"; complete -C '"+line+"'").CombinedOutput()
		if err != nil {
			t.Fatalf("fish: %v\n%s", err, out)
		}
		var words []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			words = append(words, strings.SplitN(l, "\t", 2)[0])
		}
		return words
	}
	if got := complete("sluice st"); !slices.Contains(got, "stat") {
		t.Errorf("fish completes 'sluice st' with %q", got)
	}
	if got := complete("sluice stat "); !slices.Contains(got, mnt) {
		t.Errorf("fish completes 'sluice stat ' with %q, want %s among them", got, mnt)
	}
	if got := complete("sluice mount --read-policy "); !slices.Contains(got, "roundrobin") {
		t.Errorf("fish completes --read-policy with %q", got)
	}
	if got := complete("sluice mount --read-p"); !slices.Contains(got, "--read-policy") {
		t.Errorf("fish completes 'sluice mount --read-p' with %q", got)
	}
}

// fstabHelper runs the binary as mount(8) runs /sbin/mount.fuse.sluice.
func fstabHelper(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Args[0] = "mount.fuse.sluice"
	cmd.Env = append(os.Environ(), "SLUICE_AS_MAIN=1")
	return cmd
}

// TestFstabHelper: an /etc/fstab line's options become a background
// mount that serves before the helper returns; a bad option is refused
// with the command line's message; mount -f checks and mounts nothing.
func TestFstabHelper(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	os.WriteFile(filepath.Join(src, "hello"), []byte("hello"), 0o644)
	cfg := filepath.Join(dir, "data.toml")
	os.WriteFile(cfg, []byte("cache-mode = \"direct\"\n[[group]]\nname = \"t\"\nmatch = [\"uid=4242\"]\nlimits = \"rbps=2MiB\"\n"), 0o644)

	out, err := fstabHelper(src, mnt, "-o", "cache_mode=fast,nofail").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "sluice mount: --cache-mode fast: want auto, direct or kernel") {
		t.Errorf("a bad option: %v\n%s", err, out)
	}
	if out, err := fstabHelper(src, mnt, "-o", "bogus=1").CombinedOutput(); err == nil || !strings.Contains(string(out), "-o bogus=1: unknown option") {
		t.Errorf("an unknown option: %v\n%s", err, out)
	}
	if out, err := fstabHelper(src, mnt, "-f", "-o", "config="+cfg).CombinedOutput(); err != nil || isMounted(mnt) {
		t.Errorf("mount -f: %v, mounted %v\n%s", err, isMounted(mnt), out)
	}

	if out, err := fstabHelper(src, mnt, "-n", "-o", "rw,config="+cfg+",nofail,_netdev,x-systemd.automount,max_io=64KiB").CombinedOutput(); err != nil {
		t.Fatalf("mount.fuse.sluice: %v\n%s", err, out)
	}
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	if !isMounted(mnt) {
		t.Fatal("not mounted when the helper returned")
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "hello" {
		t.Errorf("read through the helper's mount: %q, %v", b, err)
	}
	out, _ = sluice("stat", mnt).Output()
	if !strings.Contains(string(out), "rbps=2MiB") {
		t.Errorf("the config file's limits are not in force:\n%s", out)
	}
	if err := syscall.Unmount(mnt, 0); err != nil {
		t.Errorf("umount: %v", err)
	}
}
