package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/spf13/pflag"
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

// completionScript writes sluice's completion script for shell to a file
// and returns its path, and the environment in which the script finds
// sluice (this test binary, acting as the command) to ask it what to
// complete.
func completionScript(t *testing.T, shell string) (path string, env []string) {
	t.Helper()
	var out, errb strings.Builder
	if code := run([]string{"completion", shell}, &out, &errb); code != 0 {
		t.Fatalf("sluice completion %s: exit %d\n%s", shell, code, errb.String())
	}
	dir := t.TempDir()
	path = filepath.Join(dir, "sluice."+shell)
	if err := os.WriteFile(path, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	wrapper := "#!/bin/sh\nSLUICE_AS_MAIN=1 exec '" + os.Args[0] + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "sluice"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
}

// bashCompletion is where the bash-completion package keeps the
// functions cobra's bash script calls (_init_completion, _filedir).
const bashCompletion = "/usr/share/bash-completion/bash_completion"

// bashComplete returns what the bash script completes the last of words
// with, as bash calls it when TAB is pressed at the end of the line.
func bashComplete(t *testing.T, script string, env []string, words ...string) []string {
	t.Helper()
	if _, err := os.Stat(bashCompletion); err != nil {
		t.Skipf("skipping: no %s (apt-get install bash-completion)", bashCompletion)
	}
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = "'" + w + "'"
	}
	line := strings.Join(words, " ")
	// compopt works only while bash completes a line typed at a terminal:
	// here it is a function, which the script finds is no builtin and
	// leaves alone.
	prog := fmt.Sprintf("source %s; source %s; compopt() { :; }; unset COLUMNS; COMP_WORDS=(%s); COMP_CWORD=%d; COMP_LINE='%s'; COMP_POINT=%d; __start_sluice; printf '%%s\\n' \"${COMPREPLY[@]}\"",
		bashCompletion, script, strings.Join(quoted, " "), len(words)-1, line, len(line))
	cmd := exec.Command("bash", "-c", prog)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.Fields(strings.TrimSpace(string(out)))
}

// sorted returns words sorted, for comparing sets of completions.
func sorted(words []string) string {
	words = slices.Clone(words)
	slices.Sort(words)
	return strings.Join(words, " ")
}

// TestCompletion: the bash script completes commands, every flag of a
// command, and flag values, when bash runs it; the zsh script loads in
// zsh.
func TestCompletion(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("skipping: no bash")
	}
	script, env := completionScript(t, "bash")
	complete := func(words ...string) []string {
		t.Helper()
		return bashComplete(t, script, env, words...)
	}
	if got := sorted(complete("sluice", "re")); got != "reload resync" {
		t.Errorf("commands for 're': %q", got)
	}
	if got := sorted(complete("sluice", "mount", "--read")); got != "--read-only --read-policy --readahead --readahead-budget" {
		t.Errorf("mount flags for '--read': %q", got)
	}
	if got := strings.Join(complete("sluice", "mount", "--read-policy", ""), " "); got != "adaptive pid roundrobin latency" {
		t.Errorf("read policies: %q", got)
	}
	if got := sorted(complete("sluice", "mount", "--cache-mode", "")); got != "auto direct kernel" {
		t.Errorf("cache modes: %q", got)
	}
	// A number completes to nothing: sluice tells the shell to offer no
	// file names (directive 4, ShellCompDirectiveNoFileComp).
	for _, words := range [][]string{{"top", "--interval", ""}, {"mount", "--max-io", ""}, {"resync", "--rate", ""}} {
		var out strings.Builder
		run(append([]string{"__complete"}, words...), &out, io.Discard)
		if got := out.String(); got != ":4\n" {
			t.Errorf("sluice __complete %q: %q, want no completions and directive 4", words, got)
		}
	}
	if got := sorted(complete("sluice", "completion", "")); got != "bash fish zsh" {
		t.Errorf("completion's shells: %q", got)
	}
	mount, _ := mountFlags()
	all := " " + strings.Join(complete("sluice", "mount", "--"), " ") + " "
	mount.VisitAll(func(f *pflag.Flag) {
		if !strings.Contains(all, " --"+f.Name+" ") {
			t.Errorf("--%s is not completed", f.Name)
		}
	})
	var out strings.Builder
	if code := run([]string{"completion", "zsh"}, &out, io.Discard); code != 0 || !strings.HasPrefix(out.String(), "#compdef sluice") {
		t.Errorf("zsh completion: exit %d\n%.100s", code, out.String())
	}
	if zsh, err := exec.LookPath("zsh"); err == nil {
		if b, err := exec.Command(zsh, "-n", "-c", out.String()).CombinedOutput(); err != nil {
			t.Errorf("zsh -n: %v\n%s", err, b)
		}
		// Loaded as a user's .zshrc would, it makes _sluice sluice's
		// completion function.
		b, err := exec.Command(zsh, "-f", "-c", "autoload -U compinit && compinit -u && "+out.String()+"\nprint -r -- \"completes with ${_comps[sluice]}\"").CombinedOutput()
		if err != nil || !strings.HasSuffix(string(b), "completes with _sluice\n") {
			t.Errorf("loading the zsh completion: %v\n%s", err, b)
		}
	}
	var errb strings.Builder
	if code := run([]string{"completion", "tcsh"}, io.Discard, &errb); code != 2 || !strings.Contains(errb.String(), `want bash, zsh or fish, got "tcsh"`) {
		t.Errorf("completion tcsh: exit %d\n%s", code, errb.String())
	}
}

// TestSluiceMounts: the mount points completed are those of sluice mounts
// in /proc/self/mounts, with the octal escapes of spaces undone.
func TestSluiceMounts(t *testing.T) {
	mounts := `proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
/srv/a /mnt/a fuse.sluice rw,nosuid,nodev,relatime,user_id=0,group_id=0,allow_other 0 0
/srv/b /mnt/with\040space\134 fuse.sluice rw,nosuid,nodev 0 0
sshfs#x /mnt/c fuse.sshfs rw 0 0
`
	if got := sluiceMounts(mounts); !slices.Equal(got, []string{"/mnt/a", `/mnt/with space\`}) {
		t.Errorf("sluiceMounts: %q", got)
	}
}

// TestCompletionMounts: bash and fish complete the mount points of running
// sluice mounts for the commands that take one (exec's --mount too), and a
// read policy after set's mount point.
func TestCompletionMounts(t *testing.T) {
	needMount(t)
	_, src, mnt := srcMnt(t)
	startMount(t, mnt, "mount", src, mnt)
	t.Run("bash", func(t *testing.T) {
		bashScript, env := completionScript(t, "bash")
		for _, words := range [][]string{{"sluice", "stat", ""}, {"sluice", "top", "--interval", "2s", ""}, {"sluice", "exec", "--mount", ""}, {"sluice", "reload", ""}} {
			if got := bashComplete(t, bashScript, env, words...); !slices.Contains(got, mnt) {
				t.Errorf("bash completes %q with %q, want the mount point %s among them", words, got, mnt)
			}
		}
		// bash completes the word after the '=' (a word break of its
		// own), so the script answers with the rest of
		// read-policy=roundrobin.
		if got := bashComplete(t, bashScript, env, "sluice", "set", mnt, "read-policy=r"); !slices.Equal(got, []string{"roundrobin"}) {
			t.Errorf("bash completes set's read policy with %q", got)
		}
	})
	fish, err := exec.LookPath("fish")
	if err != nil {
		t.Log("no fish to load its completion in")
		return
	}
	fishScript, env := completionScript(t, "fish")
	complete := func(line string) []string {
		t.Helper()
		cmd := exec.Command(fish, "--no-config", "-c", "source "+fishScript+"; complete -C '"+line+"'")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
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
	if got := complete("sluice set " + mnt + " read-policy="); !slices.Contains(got, "read-policy=roundrobin") {
		t.Errorf("fish completes set's read policy with %q", got)
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
