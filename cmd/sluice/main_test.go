package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/control"
	"sluice/fsys"
	"sluice/group"
	"sluice/stack"
)

// TestMain lets the test binary act as the sluice command for end-to-end
// tests: with SLUICE_AS_MAIN=1 it runs main instead of the tests.
func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_AS_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func sluice(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "SLUICE_AS_MAIN=1")
	return cmd
}

// TestUsageErrors: malformed command lines exit 2 with a message naming
// the flag, the bad token and what is allowed.
func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"mount", "--limit", "default rbps=10XB", dir, dir}, []string{`--limit "default rbps=10XB"`, `"10XB"`, "MiB", "max"}},
		{[]string{"mount", "--limit", "default rbs=1M", dir, dir}, []string{`unknown key "rbs"`, "rbps, wbps, riops, wiops, weight, rbps.min"}},
		{[]string{"mount", "--limit", "default riops=1.5", dir, dir}, []string{"riops", `"1.5"`, "whole number"}},
		{[]string{"mount", "--limit", "a//b rbps=1M", dir, dir}, []string{`--limit "a//b rbps=1M"`, "empty component"}},
		{[]string{"mount", "--group", "backup pid=3", dir, dir}, []string{`--group "backup pid=3"`, `unknown key "pid"`, "uid, gid, comm or cgroup"}},
		{[]string{"mount", "--max-io", "1000", dir, dir}, []string{"--max-io", "1000", "multiple of 4KiB"}},
		{[]string{"mount", "--max-io", "12q", dir, dir}, []string{"-max-io", "12q"}},
		{[]string{"mount", "--readahead-budget", "maybe", dir, dir}, []string{"-readahead-budget", `"maybe"`, "on or off"}},
		{[]string{"mount", "--max-wait", "soon", dir, dir}, []string{"--max-wait", `"soon"`, "auto"}},
		{[]string{"mount", "--max-open", "3", dir, dir}, []string{"--max-open 3", "at least 16"}},
		{[]string{"mount", "--cache-mode", "fast", dir, dir}, []string{"--cache-mode fast: want auto, direct or kernel"}},
		{[]string{"mount", "--map-dirty", "1k", dir, dir}, []string{"--map-dirty 1k: want a size of at least 4KiB, auto or kernel"}},
		{[]string{"mount", "--map-dirty", "much", dir, dir}, []string{"--map-dirty much: want a size"}},
		{[]string{"mount", "--mirror", dir, "--mirror", dir, dir, dir}, []string{"--mirror and SOURCE " + dir + ": a mirror set is served in place of SOURCE"}},
		{[]string{"mount", "--mirror", dir, dir}, []string{"--mirror " + dir + ": a mirror set needs --mirror twice or more"}},
		{[]string{"mount", "--read-policy", "pid", dir, dir}, []string{"--read-policy pid without --mirror"}},
		{[]string{"mount", "--mirror", dir, "--mirror", dir, "--read-policy", "fastest", dir}, []string{"--read-policy fastest: want one of adaptive, pid, roundrobin, latency"}},
		{[]string{"mount", "--mirror", dir, "--mirror", dir, "--passthrough", dir}, []string{"--passthrough with --mirror"}},
		{[]string{"mount", "--write-cache", "--passthrough", dir, dir}, []string{"--passthrough with --write-cache"}},
		{[]string{"mount", "--log-level", "loud", dir, dir}, []string{"--log-level loud: want debug, info, warn or error"}},
		{[]string{"exec", "--group", "g", "--", "true"}, []string{"--mount is required"}},
		{[]string{"exec", "--mount", dir, "--", "true"}, []string{"--group is required"}},
		{[]string{"exec", "--mount", dir, "--group", "g"}, []string{"want a command after the flags"}},
		{[]string{"exec", "--mount", dir, "--group", "a b", "--", "true"}, []string{"--group a b:"}},
		{[]string{"set", dir, "read-policy=fast"}, []string{"read policy fast: want one of adaptive, pid, roundrobin, latency"}},
		{[]string{"mount", "--max-io", "3KiB", dir, dir}, []string{"--max-io 3KiB: want a multiple of 4KiB from 4KiB to 1GiB"}},
		{[]string{"mount", "--max-io", "2GiB", dir, dir}, []string{"--max-io 2GiB: want a multiple of 4KiB from 4KiB to 1GiB"}},
		{[]string{"mount", "--readahead", "1000", dir, dir}, []string{"--readahead 1000: want 0 (off) or a multiple of 4KiB up to 64MiB"}},
		{[]string{"mount", "--readahead", "128MiB", dir, dir}, []string{"--readahead 128MiB: want 0 (off)"}},
		{[]string{"mount", "--readahead", "soon", dir, dir}, []string{"-readahead", `"soon"`}},
		{[]string{"mount", "--cache", "1MiB", dir, dir}, []string{"--cache 1MiB: want at least 16 readahead windows, 2MiB"}},
		{[]string{"mount", "--readahead", "0", "--cache", "32KiB", dir, dir}, []string{"--cache 32KiB: want at least 16 pages, 64KiB"}},
		{[]string{"mount", "--cache", "lots", dir, dir}, []string{"-cache", `"lots"`}},
		{[]string{"mount", "--burst", "-1s", dir, dir}, []string{"--burst -1s: want 0 (no idle credit)"}},
		{[]string{"mount", "--burst", "long", dir, dir}, []string{"-burst", `"long"`}},
		{[]string{"mount", "--max-wait", "-1s", dir, dir}, []string{"--max-wait -1s: want 0 (no cap)"}},
		{[]string{"mount", dir}, []string{"want SOURCE and MOUNTPOINT"}},
		{[]string{"mount", "--bogus", dir, dir}, []string{"-bogus"}},
		{[]string{"set", dir, "default rbps=fast"}, []string{`"fast"`, "rbps"}},
		{[]string{"stat"}, []string{"want one MOUNTPOINT"}},
		{[]string{"frobnicate"}, []string{`unknown command "frobnicate"`}},
	} {
		var out, errb bytes.Buffer
		code := run(tc.args, &out, &errb)
		if code != 2 {
			t.Errorf("sluice %q: exit %d, want 2 (stderr %q)", tc.args, code, errb.String())
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(errb.String(), w) {
				t.Errorf("sluice %q: stderr %q does not mention %q", tc.args, errb.String(), w)
			}
		}
	}
}

// TestMountRefusals: a missing SOURCE or a MOUNTPOINT that is a file fail
// with exit 1 and a message that says what is wrong.
func TestMountRefusals(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mount", filepath.Join(dir, "missing"), dir}, "does not exist"},
		{[]string{"mount", dir, file}, "is not a directory"},
	} {
		var out, errb bytes.Buffer
		if code := run(tc.args, &out, &errb); code != 1 || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("sluice %q: exit %d, stderr %q; want 1 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// commands are sluice's commands that take flags.
var commands = []string{"mount", "stat", "top", "set", "resync", "mirror", "reload", "exec", "sim"}

// TestHelp: help teaches the syntax.
func TestHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"help", "mount"}, &out, &errb); code != 0 {
		t.Fatalf("help mount: exit %d", code)
	}
	for _, w := range []string{"--limit 'default rbps=10MiB riops=max'", "-max-io", "-readahead-budget", "cgroup=", "tenants/a", "(default 128KiB)"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("help mount does not mention %q:\n%s", w, out.String())
		}
	}
	// Every command's help shows at least one example of it, and the
	// overview lists every command.
	out.Reset()
	run([]string{"help"}, &out, &errb)
	overview := out.String()
	for _, c := range commands {
		out.Reset()
		if code := run([]string{"help", c}, &out, &errb); code != 0 {
			t.Errorf("help %s: exit %d", c, code)
		}
		if !strings.Contains(out.String(), "\n  sluice "+c+" ") {
			t.Errorf("help %s has no example line (\"  sluice %s ...\"):\n%s", c, c, out.String())
		}
		if !strings.Contains(overview, "sluice "+c+" ") {
			t.Errorf("sluice help does not list %s", c)
		}
	}
}

// TestMountFlagDefaults: every stack option has a flag, and the flag's
// default is the stack's.
func TestMountFlagDefaults(t *testing.T) {
	fs, _ := mountFlags()
	d := stack.DefaultOptions()
	want := map[string]string{
		"MaxIO":           group.FormatSize(d.MaxIO),
		"Readahead":       group.FormatSize(d.Readahead),
		"ReadaheadBudget": map[bool]string{true: "on", false: "off"}[d.ReadaheadBudget],
		"CacheBytes":      group.FormatSize(d.CacheBytes),
		"Burst":           d.Burst.String(),
		"MaxWait":         "auto", // resolved at mount time; 0 (no cap) when the kernel has no timeout
	}
	typ := reflect.TypeFor[stack.Options]()
	for i := range typ.NumField() {
		field := typ.Field(i).Name
		name, ok := optionFlags[field]
		if !ok {
			t.Errorf("stack.Options.%s has no flag", field)
			continue
		}
		f := fs.Lookup(strings.TrimPrefix(name, "--"))
		if f == nil {
			t.Errorf("stack.Options.%s: no flag %s", field, name)
			continue
		}
		if f.DefValue != want[field] {
			t.Errorf("%s defaults to %q, want %q", name, f.DefValue, want[field])
		}
	}
}

// TestEndToEnd runs the command as a user would: mount in the foreground,
// stat, set a live limit, stat again, stop with SIGTERM.
func TestEndToEnd(t *testing.T) {
	needMount(t)
	_, src, mnt := srcMnt(t)
	os.WriteFile(filepath.Join(src, "hello"), []byte("hello, sluice\n"), 0o644)

	cmd, stderr, exited, waitErr := startMount(t, mnt, "mount", "--limit", "default rbps=10MiB riops=max", "--group", "tenants/a uid=4242", src, mnt)
	b, err := os.ReadFile(filepath.Join(mnt, "hello"))
	if err != nil || string(b) != "hello, sluice\n" {
		t.Fatalf("read through the mount: %q %v", b, err)
	}

	out, err := sluice("stat", "--json", mnt).Output()
	if err != nil {
		t.Fatalf("stat --json: %v", err)
	}
	var st control.Status
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("stat --json output: %v\n%s", err, out)
	}
	// The documented shape: the schema version and its top-level keys.
	var top map[string]any
	json.Unmarshal(out, &top)
	for _, k := range []string{"schema", "source", "mountpoint", "transport", "backing", "cold_reads", "time", "groups", "cache_bytes", "cache_limit", "queued"} {
		if _, ok := top[k]; !ok {
			t.Errorf("stat --json lacks %q: %s", k, out)
		}
	}
	if st.Schema != control.StatSchema || control.StatSchema != 1 {
		t.Errorf("stat --json schema %d (StatSchema %d), want 1", st.Schema, control.StatSchema)
	}
	def := find(st, "default")
	if def == nil || def.Limits != "rbps=10MiB wbps=max riops=max wiops=max" || def.AppRBytes != 14 || def.AppReads == 0 {
		t.Fatalf("stat default: %+v", def)
	}
	if find(st, "tenants/a") == nil || find(st, "tenants") == nil {
		t.Fatalf("stat lacks the rule's group and its parent: %s", out)
	}
	if st.Backing != "direct" && st.Backing != "buffered" {
		t.Fatalf("backing %q", st.Backing)
	}
	if st.Transport != fsys.DefaultTransport {
		t.Errorf("stat --json transport %q, want the default, %q", st.Transport, fsys.DefaultTransport)
	}

	if out, err := sluice("set", mnt, "default rbps=1MiB wiops=100").CombinedOutput(); err != nil {
		t.Fatalf("set: %v\n%s", err, out)
	}
	out, err = sluice("stat", mnt).Output()
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	if !strings.Contains(string(out), "default") || !strings.Contains(string(out), "rbps=1MiB wbps=max riops=max wiops=100") {
		t.Fatalf("stat after set:\n%s", out)
	}
	// Read by a person: under 100 columns past the line naming the paths,
	// sizes in binary units; --bytes gives them exact.
	for _, l := range strings.Split(string(out), "\n")[1:] {
		if len(l) >= 100 {
			t.Errorf("stat prints a line of %d columns: %q", len(l), l)
		}
	}
	if !regexp.MustCompile(`applications +read [0-9.]+ (B|KiB|MiB) in [0-9.]+ (k )?calls`).Match(out) {
		t.Errorf("stat does not say what applications read in human units:\n%s", out)
	}
	exact, err := sluice("stat", "--bytes", mnt).Output()
	if err != nil || !regexp.MustCompile(`applications +read [0-9]+ B in [0-9]+ calls`).Match(exact) {
		t.Errorf("stat --bytes: %v\n%s", err, exact)
	}
	if out, err := sluice("set", mnt, "tenant/a rbps=1MiB").CombinedOutput(); err != nil || !strings.Contains(string(out), `warning: no caller is classified into "tenant/a"`) {
		t.Fatalf("set on a group no rule reaches: %v\n%s", err, out)
	}
	if out, err := sluice("set", mnt, "tenants rbps=1MiB").CombinedOutput(); err != nil || len(out) != 0 {
		t.Fatalf("set on a rule's parent group: %v\n%s", err, out)
	}
	if out, err := sluice("set", mnt, "default rbps=0").CombinedOutput(); err == nil || !strings.Contains(string(out), "use rbps=max") {
		t.Fatalf("set rbps=0: %v\n%s", err, out)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		// The log: structured lines, none per request at the default level.
		log := stderr.String()
		for _, want := range []string{"level=INFO msg=serving source=" + src + " mountpoint=" + mnt, "level=INFO msg=unmounting signal=terminated"} {
			if !strings.Contains(log, want) {
				t.Errorf("the log lacks %q:\n%s", want, log)
			}
		}
		if strings.Contains(log, "level=DEBUG") {
			t.Errorf("debug lines at the default level:\n%s", log)
		}
		if *waitErr != nil {
			t.Fatalf("mount exited with %v after SIGTERM; stderr:\n%s", *waitErr, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("mount did not exit within 10s of SIGTERM")
	}
	if isMounted(mnt) {
		t.Fatal("still mounted after SIGTERM")
	}
	if _, err := control.Stat(mnt); err == nil {
		t.Fatal("control socket still answers after exit")
	}
}

func find(st control.Status, name string) *stack.GroupMetrics {
	for i := range st.Groups {
		if st.Groups[i].Group == name {
			return &st.Groups[i]
		}
	}
	return nil
}

func isMounted(path string) bool {
	b, _ := os.ReadFile("/proc/mounts")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == path {
			return true
		}
	}
	return false
}

// startMount runs sluice with args (a mount command serving mnt) and
// returns once mnt is mounted and its control socket answers; the mount
// is stopped when the test ends. exited closes when it has exited, with
// its error in *waitErr.
func startMount(t *testing.T, mnt string, args ...string) (cmd *exec.Cmd, stderr *safeBuffer, exited chan struct{}, waitErr *error) {
	t.Helper()
	return startCmd(t, mnt, sluice(args...))
}

// startCmd is startMount of a command made ready to run, such as sluice
// run by a wrapper.
func startCmd(t *testing.T, mnt string, cmd *exec.Cmd) (_ *exec.Cmd, stderr *safeBuffer, exited chan struct{}, waitErr *error) {
	t.Helper()
	stderr = new(safeBuffer)
	exited, waitErr = runCmd(t, cmd, stderr)
	deadline := time.Now().Add(10 * time.Second)
	for !isMounted(mnt) {
		if time.Now().After(deadline) {
			t.Fatalf("not mounted after 10s; stderr:\n%s", stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The control socket is up right after the mount; wait for it too.
	for {
		if _, err := control.Stat(mnt); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return cmd, stderr, exited, waitErr
}

// runCmd starts cmd, its stderr to stderr, and stops it (SIGTERM) when
// the test ends; exited closes when it has exited, with its error in
// *waitErr.
func runCmd(t *testing.T, cmd *exec.Cmd, stderr io.Writer) (exited chan struct{}, waitErr *error) {
	t.Helper()
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitErr = new(error)
	exited = make(chan struct{})
	go func() { *waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	})
	return exited, waitErr
}

// TestMirrorEndToEnd: sluice mount refuses mirrors that differ, saying
// how; serves equal ones; stat shows each mirror and set switches the
// read policy; a mirror recorded stale is left out until sluice resync
// has made it equal, and resync says so.
func TestMirrorEndToEnd(t *testing.T) {
	needMount(t)
	dir := t.TempDir()
	a, b, mnt := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "mnt")
	for _, d := range []string{a, b, mnt} {
		os.Mkdir(d, 0o755)
	}
	os.WriteFile(filepath.Join(a, "f"), []byte("one"), 0o644)
	out, err := sluice("mount", "--mirror", a, "--mirror", b, mnt).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the mirrors differ") || !strings.Contains(string(out), "f is in "+a+", not in "+b) {
		t.Fatalf("mount of differing mirrors: %v\n%s", err, out)
	}

	os.WriteFile(filepath.Join(b, "f"), []byte("one"), 0o644)
	stop := func(cmd *exec.Cmd, exited chan struct{}) {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
	}
	cmd, _, exited, _ := startMount(t, mnt, "mount", "--mirror", a, "--mirror", b, mnt)
	if out, err := sluice("set", mnt, "read-policy=roundrobin").CombinedOutput(); err != nil {
		t.Fatalf("set read-policy: %v\n%s", err, out)
	}
	out, _ = sluice("stat", mnt).Output()
	if !strings.Contains(string(out), "mirrors (read policy roundrobin)") || strings.Count(string(out), "healthy") != 2 {
		t.Errorf("stat of a mirror set:\n%s", out)
	}
	if out, err := sluice("resync", mnt).CombinedOutput(); err == nil || !strings.Contains(string(out), "no mirror is stale") {
		t.Errorf("resync with no stale mirror: %v\n%s", err, out)
	}
	stop(cmd, exited)

	// Record b as stale in a's state file, and change a meanwhile.
	var sa, sb struct {
		ID    string   `json:"id"`
		Stale []string `json:"stale"`
	}
	ja, _ := os.ReadFile(filepath.Join(a, ".sluice-mirror"))
	jb, _ := os.ReadFile(filepath.Join(b, ".sluice-mirror"))
	if json.Unmarshal(ja, &sa) != nil || json.Unmarshal(jb, &sb) != nil || sa.ID == "" || sa.ID == sb.ID {
		t.Fatalf("state files: %s, %s", ja, jb)
	}
	sa.Stale = []string{sb.ID}
	ja, _ = json.Marshal(sa)
	os.WriteFile(filepath.Join(a, ".sluice-mirror"), ja, 0o600)
	os.WriteFile(filepath.Join(a, "g"), []byte("two"), 0o644)

	startMount(t, mnt, "mount", "--mirror", a, "--mirror", b, mnt)
	out, _ = sluice("stat", "--json", mnt).Output()
	var st control.Status
	if json.Unmarshal(out, &st) != nil || len(st.Mirrors) != 2 || st.Mirrors[1].State != "stale" || st.ReadPolicy != "adaptive" {
		t.Fatalf("stat after a restart with b recorded stale: %s", out)
	}
	out, err = sluice("resync", "--rate", "100MiB", mnt).CombinedOutput()
	if err != nil || !strings.Contains(string(out), b+": healthy") {
		t.Fatalf("resync: %v\n%s", err, out)
	}
	if g, err := os.ReadFile(filepath.Join(b, "g")); err != nil || string(g) != "two" {
		t.Errorf("b after the resync: %q, %v", g, err)
	}
}

func needMount(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: mounting needs root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("skipping: no /dev/fuse: %v", err)
	}
}

// srcMnt makes a test directory with empty src and mnt directories, all
// reachable by other users.
func srcMnt(t *testing.T) (dir, src, mnt string) {
	t.Helper()
	dir = t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	src, mnt = filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	os.Mkdir(src, 0o755)
	os.Mkdir(mnt, 0o755)
	return dir, src, mnt
}
