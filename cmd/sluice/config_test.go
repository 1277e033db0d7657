package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/control"
	"sluice/fsys"
)

// configOptions parses a command line with a config file the way
// cmdMount does, up to the mount's options.
func configOptions(t *testing.T, src string, args ...string) (fsys.Options, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "sluice.toml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	fs, o := mountFlags()
	pos, err := parse(fs, append([]string{"--config", path}, args...))
	if err != nil {
		return fsys.Options{}, err
	}
	c, err := loadConfig(o.config, fs)
	if err != nil {
		return fsys.Options{}, err
	}
	if pos, err = c.apply(fs, o, pos); err != nil {
		return fsys.Options{}, err
	}
	opts, err := mountOptions(fs, o, pos, io.Discard)
	if ue, ok := err.(usageError); ok {
		err = c.located(ue.error)
	}
	return opts, err
}

// TestConfig: every field of a config file reaches the mount's options.
func TestConfig(t *testing.T) {
	opts, err := configOptions(t, `
source = "/srv/data"
mountpoint = "/mnt/data"
max-io = "256KiB"
readahead = "512KiB"
readahead-budget = "off"
cache = "64MiB"
burst = "250ms"
max-wait = "3s"
allow-other = true
max-open = 64
cache-mode = "kernel"
map-dirty = "8MiB"
write-cache = true
debug = true

[[group]]
name = "tenants/a"
match = ["uid=1001", "comm=rsync"]
limits = "rbps=10MiB wiops=100"

[[group]]
name = "backup"
match = ["gid=34"]
`)
	if err != nil {
		t.Fatal(err)
	}
	s := opts.Options.Options
	checks := map[string]bool{
		"source":           opts.Source == "/srv/data",
		"mountpoint":       opts.Mountpoint == "/mnt/data",
		"max-io":           s.MaxIO == 256<<10,
		"readahead":        s.Readahead == 512<<10,
		"readahead-budget": !s.ReadaheadBudget,
		"cache":            s.CacheBytes == 64<<20,
		"burst":            s.Burst == 250*time.Millisecond,
		"max-wait":         s.MaxWait == 3*time.Second,
		"allow-other":      opts.AllowOther,
		"max-open":         opts.MaxOpen == 64,
		"cache-mode":       opts.CacheMode == fsys.CacheKernel,
		"map-dirty":        opts.MapDirty == 8<<20,
		"write-cache":      opts.WriteCache,
		"passthrough":      !opts.Passthrough, // off with the write cache
		"debug":            opts.Debug,
		"group rules":      len(opts.Rules) == 3 && opts.Rules[0].Group == "tenants/a" && opts.Rules[2].Group == "backup",
		"group limits":     len(opts.Limits) == 1 && opts.Limits[0].String() == "tenants/a rbps=10MiB wiops=100",
	}
	for field, ok := range checks {
		if !ok {
			t.Errorf("%s not applied: %+v", field, opts)
		}
	}

	mirrors, err := configOptions(t, "mirrors = [\"/a\", \"/b\"]\nmountpoint = \"/m\"\nread-policy = \"pid\"\n")
	if err != nil || len(mirrors.Mirrors) != 2 || mirrors.Mirrors[1] != "/b" || mirrors.ReadPolicy != "pid" || mirrors.Source != "" {
		t.Errorf("mirrors from the file: %+v, %v", mirrors, err)
	}
	if mirrors.Passthrough {
		t.Errorf("a mirror set from the file passes opens through")
	}
	// Passthrough is on unless the file turns it off.
	for file, want := range map[string]bool{"": true, "passthrough = false\n": false} {
		o, err := configOptions(t, "source = \"/s\"\nmountpoint = \"/m\"\n"+file)
		if err != nil || o.Passthrough != want {
			t.Errorf("config %q: passthrough %v (%v), want %v", file, o.Passthrough, err, want)
		}
	}
}

// TestConfigOverride: the command line wins over the file.
func TestConfigOverride(t *testing.T) {
	opts, err := configOptions(t, `
source = "/srv/data"
mountpoint = "/mnt/data"
cache-mode = "direct"
[[group]]
name = "t"
match = ["uid=1001"]
limits = "rbps=1MiB wbps=1MiB"
`, "--cache-mode", "kernel", "--limit", "t rbps=5MiB", "--group", "fast uid=1001", "/other/src", "/other/mnt")
	if err != nil {
		t.Fatal(err)
	}
	if opts.CacheMode != fsys.CacheKernel {
		t.Errorf("--cache-mode kernel did not win over the file's direct")
	}
	if opts.Source != "/other/src" || opts.Mountpoint != "/other/mnt" {
		t.Errorf("positional arguments did not win: %s %s", opts.Source, opts.Mountpoint)
	}
	if len(opts.Rules) != 2 || opts.Rules[0].Group != "fast" {
		t.Errorf("command-line rules are not matched first: %+v", opts.Rules)
	}
	if n := len(opts.Limits); n != 2 || opts.Limits[n-1].String() != "t rbps=5MiB" {
		t.Errorf("command-line limit not applied last: %+v", opts.Limits)
	}
}

// TestConfigErrors: every kind of error names the file, the line and the
// field.
func TestConfigErrors(t *testing.T) {
	head := "source = \"/s\"\nmountpoint = \"/m\"\n"
	for _, c := range []struct{ src, want string }{
		{head + "cache-mode = \"fast\"\n", ":3: cache-mode: fast: want auto, direct or kernel"},
		{head + "max-io = \"1k\"\n", ":3: max-io: 1KiB: want a multiple of 4KiB"},
		{head + "readahead = \"lots\"\n", ":3: readahead: \"lots\": "},
		{head + "max-wait = \"soon\"\n", ":3: max-wait: \"soon\": want auto, 0 (no cap) or a duration"},
		{head + "bogus = 1\n", ":3: bogus: unknown field"},
		{head + "limit = \"x rbps=1\"\n", ":3: limit: not allowed in a config file: use [[group]] tables"},
		{head + "takeover = true\n", ":3: takeover: not allowed in a config file: taking a mount over belongs on the command line"},
		{head + "cache-mode = [1]\n", ":3: cache-mode: want a string, number or boolean"},
		{head + "read-policy = \"pid\"\n", ":3: read-policy: pid without --mirror"},
		{"source = 1\n", ":1: source: want a directory"},
		{"mirrors = [\"/a\"]\nmountpoint = \"/m\"\n", ":1: mirrors: want two directories or more"},
		{head + "[[group]]\nname = \"t\"\nlimits = \"rbps=1MiX\"\n", ":5: group.limits: \"t rbps=1MiX\": bad size"},
		{head + "[[group]]\nname = \"t\"\nmatch = [\"uid=nobody-such\"]\n", ":5: group.match: \"t uid=nobody-such\": unknown user"},
		{head + "[[group]]\nmatch = [\"uid=1\"]\n", ":3: group: a [[group]] needs a name"},
		{head + "[[group]]\nname = \"t\"\nlimit = \"rbps=1\"\n", ":5: group.limit: unknown field"},
		{head + "max-io = \n", ":3: "},
		{"mountpoint = \"/m\"\n", "no source"},
	} {
		_, err := configOptions(t, c.src)
		if err == nil || !strings.Contains(err.Error(), "sluice.toml"+c.want) && !strings.Contains(err.Error(), c.want) {
			t.Errorf("config %q: error %v, want it to contain %q", c.src, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), "sluice.toml") {
			t.Errorf("config %q: error %v does not name the file", c.src, err)
		}
	}
}

// TestConfigMount: a mount made from a config file alone serves what it
// names with the groups and limits it holds.
func TestConfigMount(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	os.WriteFile(filepath.Join(src, "hello"), []byte("hello"), 0o644)
	cfg := filepath.Join(dir, "sluice.toml")
	os.WriteFile(cfg, []byte(`source = "`+src+`"
mountpoint = "`+mnt+`"
cache-mode = "direct"
[[group]]
name = "tenants/a"
match = ["uid=4242"]
limits = "rbps=3MiB wiops=50"
`), 0o644)
	startMount(t, mnt, "mount", "--config", cfg)
	if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "hello" {
		t.Fatalf("read through a mount made from a config file: %q, %v", b, err)
	}
	out, err := sluice("stat", mnt).Output()
	if err != nil || !strings.Contains(string(out), "rbps=3MiB wbps=max riops=max wiops=50") {
		t.Errorf("stat of a mount made from a config file: %v\n%s", err, out)
	}
}

// TestReload: a changed limit reaches a reader in the middle of a file,
// which sees no error; a broken file is refused and the limits in force
// stay; SIGHUP reloads too; limits the file no longer gives go back to max.
func TestReload(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	const size = 16 << 20
	if err := os.WriteFile(filepath.Join(src, "big"), make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "sluice.toml")
	write := func(limits string) {
		t.Helper()
		body := "source = \"" + src + "\"\nmountpoint = \"" + mnt + "\"\ncache-mode = \"direct\"\n[[group]]\nname = \"t\"\nmatch = [\"uid=4242\"]\n"
		if limits != "" {
			body += "limits = \"" + limits + "\"\n"
		}
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	limitsOf := func() string {
		out, err := sluice("stat", "--json", mnt).Output()
		var st control.Status
		if err != nil || json.Unmarshal(out, &st) != nil {
			t.Fatalf("stat: %v\n%s", err, out)
		}
		if g := find(st, "t"); g != nil {
			return g.Limits
		}
		return ""
	}
	write("rbps=256KiB wiops=50")
	cmd, _, _, _ := startMount(t, mnt, "mount", "--config", cfg)

	// A reader as uid 4242: 16 MiB at 256 KiB/s would take 64 s.
	reader := exec.Command("dd", "if="+filepath.Join(mnt, "big"), "of=/dev/null", "bs=64k")
	reader.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
	var out bytes.Buffer
	reader.Stderr = &out
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- reader.Wait() }()
	defer reader.Process.Kill()
	// Mid-file: some of it read, far from all.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var st control.Status
		b, _ := sluice("stat", "--json", mnt).Output()
		json.Unmarshal(b, &st)
		if g := find(st, "t"); g != nil && g.AppRBytes > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reader read nothing in 10 s: %s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	write("rbps=64MiB")
	if b, err := sluice("reload", mnt).CombinedOutput(); err != nil {
		t.Fatalf("reload: %v\n%s", err, b)
	}
	reloaded := time.Now()
	if l := limitsOf(); l != "rbps=64MiB wbps=max riops=max wiops=max" {
		t.Errorf("limits after the reload: %s (wiops, no longer in the file, should be max)", l)
	}
	select {
	case err := <-done:
		if err != nil || !strings.Contains(out.String(), fmt.Sprint(size)+" bytes") {
			t.Errorf("reader across the reload: %v\n%s", err, out.String())
		}
		t.Logf("the reader finished %v after the reload", time.Since(reloaded))
	case <-time.After(20 * time.Second):
		t.Fatalf("the reader was still reading 20 s after the limit went from 256 KiB/s to 64 MiB/s")
	}

	// A broken file is refused; the limits in force stay.
	os.WriteFile(cfg, []byte("source = \n"), 0o644)
	if b, err := sluice("reload", mnt).CombinedOutput(); err == nil || !strings.Contains(string(b), cfg+":1:") {
		t.Errorf("reload of a broken file: %v\n%s", err, b)
	}
	if l := limitsOf(); l != "rbps=64MiB wbps=max riops=max wiops=max" {
		t.Errorf("limits after a refused reload: %s", l)
	}
	// So is a floor above its cap.
	write("rbps=1MiB rbps.min=2MiB")
	if b, err := sluice("reload", mnt).CombinedOutput(); err == nil || !strings.Contains(string(b), "rbps.min=2097152 is above rbps=1048576") {
		t.Errorf("reload of a floor above its cap: %v\n%s", err, b)
	}
	if l := limitsOf(); l != "rbps=64MiB wbps=max riops=max wiops=max" {
		t.Errorf("limits after a refused reload: %s", l)
	}

	// SIGHUP; and a group whose limits are gone goes back to max.
	write("")
	cmd.Process.Signal(syscall.SIGHUP)
	for deadline := time.Now().Add(10 * time.Second); limitsOf() != "rbps=max wbps=max riops=max wiops=max"; {
		if time.Now().After(deadline) {
			t.Fatalf("limits 10 s after SIGHUP: %s", limitsOf())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestExec: a command run by sluice exec, and what it starts, is charged
// to the named group; a process outside it is not; the command's exit
// status is sluice exec's.
func TestExec(t *testing.T) {
	needMount(t)
	_, src, mnt := srcMnt(t)
	os.WriteFile(filepath.Join(src, "f1"), make([]byte, 1<<20), 0o644)
	os.WriteFile(filepath.Join(src, "f2"), make([]byte, 2<<20), 0o644)
	// Reads are counted where they reach sluice: not by passthrough.
	startMount(t, mnt, "mount", "--passthrough=false", src, mnt)
	dd := func(f string) string {
		return "dd if=" + filepath.Join(mnt, f) + " of=/dev/null bs=64k iflag=direct 2>/dev/null"
	}
	if out, err := sluice("exec", "--mount", mnt, "--group", "batch", "--", "sh", "-c", dd("f1")).CombinedOutput(); err != nil {
		t.Fatalf("sluice exec: %v\n%s", err, out)
	}
	if out, err := exec.Command("sh", "-c", dd("f2")).CombinedOutput(); err != nil {
		t.Fatalf("dd outside: %v\n%s", err, out)
	}
	out, err := sluice("stat", "--json", mnt).Output()
	var st control.Status
	if err != nil || json.Unmarshal(out, &st) != nil {
		t.Fatalf("stat: %v\n%s", err, out)
	}
	if g := find(st, "batch"); g == nil || g.AppRBytes != 1<<20 {
		t.Errorf("group batch after the command's child read 1 MiB: %+v", g)
	}
	if g := find(st, "default"); g == nil || g.AppRBytes != 2<<20 {
		t.Errorf("default group after a process outside read 2 MiB: %+v", g)
	}
	err = sluice("exec", "--mount", mnt, "--group", "batch", "--", "sh", "-c", "exit 3").Run()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Errorf("exit status of the command: %v, want 3", err)
	}
}
