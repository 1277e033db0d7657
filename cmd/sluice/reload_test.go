package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/control"
)

// TestReloadReportsRunning: a reload names exactly the settings whose
// value in the file differs from what the mount runs, with both values,
// every time, and none once the file gives what runs again; it prints
// what it applied, and the mount logs it.
func TestReloadReportsRunning(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	cfg := filepath.Join(dir, "sluice.toml")
	write := func(extra string) {
		t.Helper()
		body := "source = \"" + src + "\"\nmountpoint = \"" + mnt + "\"\n" + extra +
			"[[group]]\nname = \"t\"\nmatch = [\"uid=4242\"]\nlimits = \"rbps=1MiB\"\n"
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	reload := func() (stdout, stderr string) {
		t.Helper()
		cmd := sluice("reload", mnt)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("reload: %v\n%s%s", err, o.String(), e.String())
		}
		return o.String(), e.String()
	}
	write("")
	cmd, log, exited, _ := startMount(t, mnt, "mount", "--config", cfg)

	write("max-io = \"64KiB\"\n")
	for i := range 2 {
		_, e := reload()
		if !strings.Contains(e, "max-io 128KiB → 64KiB") {
			t.Errorf("reload %d of a file giving max-io 64KiB to a mount running 128KiB: stderr %q, want it to name max-io 128KiB → 64KiB", i+1, e)
		}
		for _, other := range []string{"readahead", "cache", "burst", "..."} {
			if strings.Contains(e, other) {
				t.Errorf("reload %d: stderr %q names %s, which did not change", i+1, e, other)
			}
		}
	}
	write("")
	if o, e := reload(); e != "" || !strings.Contains(o, "nothing to apply") {
		t.Errorf("reload of a file giving what the mount runs: stdout %q, stderr %q; want no warning", o, e)
	}

	// A limit changed: printed and logged.
	if err := os.WriteFile(cfg, bytes.Replace(must(os.ReadFile(cfg)), []byte("rbps=1MiB"), []byte("rbps=2MiB wiops=10"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	o, e := reload()
	const want = "limits of t rbps=1MiB wbps=max riops=max wiops=max → rbps=2MiB wbps=max riops=max wiops=10"
	if !strings.Contains(o, "applied: "+want) || e != "" {
		t.Errorf("reload of a changed limit: stdout %q, stderr %q; want %q", o, e, want)
	}

	// SIGHUP, with max-io in the file again: applied and warned of in
	// the log.
	write("max-io = \"64KiB\"\n")
	cmd.Process.Signal(syscall.SIGHUP)
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, err := sluice("stat", "--json", mnt).Output()
		var st control.Status
		if err == nil && json.Unmarshal(out, &st) == nil {
			if g := find(st, "t"); g != nil && g.Limits == "rbps=1MiB wbps=max riops=max wiops=max" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("limits 10 s after SIGHUP: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The log, read once the mount has exited.
	cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	for _, w := range []string{
		`level=INFO msg="sluice reload: reloaded"`, want,
		`level=WARN msg="SIGHUP: reloaded"`, "limits of t rbps=2MiB wbps=max riops=max wiops=10 → rbps=1MiB wbps=max riops=max wiops=max",
		`needs_remount="max-io 128KiB → 64KiB"`,
	} {
		if !strings.Contains(log.String(), w) {
			t.Errorf("the mount's log lacks %q:\n%s", w, log.String())
		}
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
