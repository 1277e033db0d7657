package main

import (
	"bytes"
	"encoding/json"
	"fmt"
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

// TestMirrorAddOnline: sluice mirror add makes an empty directory a
// third mirror of a set of two while it serves and a second user writes
// through it (files rewritten, renamed, a file written in place): it
// returns once the directory is healthy, the three trees are then equal,
// the new mirror's state file has an id of its own, reads are served
// from it, and the set started again with the three --mirror finds it
// healthy.
func TestMirrorAddOnline(t *testing.T) {
	needMount(t)
	dir, _, mnt := srcMnt(t)
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	for _, x := range []string{a, b, c} {
		os.Mkdir(x, 0o755)
	}
	// Round robin spreads reads over every healthy mirror; direct, with
	// a limit, sends each read() to sluice.
	flags := []string{"mount", "--allow-other", "--read-policy", "roundrobin", "--cache-mode", "direct", "--limit", "default rbps=1GiB"}
	cmd, stderr, exited, _ := startMount(t, mnt, append(flags, "--mirror", a, "--mirror", b, mnt)...)
	u := filepath.Join(mnt, "u")
	if err := os.Mkdir(u, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(u, 4103, 4103)
	for i := range 8 {
		if err := os.WriteFile(filepath.Join(mnt, fmt.Sprint("seed", i)), bytes.Repeat([]byte{byte(i)}, 1<<20), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The second user's writer, until the stop file appears.
	stop := filepath.Join(t.TempDir(), "stop")
	w := exec.Command("sh", "-c", `i=0
while [ ! -e "$1" ]; do
	i=$((i + 1))
	head -c $((4096 + i % 7 * 10000)) /dev/urandom > f$((i % 40)).tmp || exit 1
	mv f$((i % 40)).tmp f$((i % 40)) || exit 1
	dd if=/dev/urandom of=big bs=64k count=1 seek=$((i % 64)) conv=notrunc status=none || exit 1
done
echo "$i rounds"`, "writer", stop)
	w.Dir = u
	w.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4103, Gid: 4103}}
	var wout bytes.Buffer
	w.Stdout, w.Stderr = &wout, &wout
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	out, err := sluice("mirror", "add", "--rate", "64MiB", mnt, c).CombinedOutput()
	os.WriteFile(stop, nil, 0o644)
	werr := w.Wait()
	t.Logf("sluice mirror add:\n%s\nwriter: %s", out, wout.String())
	if err != nil {
		t.Fatalf("sluice mirror add: %v", err)
	}
	if werr != nil {
		t.Fatalf("the writer failed: %v", werr)
	}
	for _, want := range []string{c + " is empty", c + " joined the set", c + ": healthy, serving reads", "add --mirror " + c} {
		if !strings.Contains(string(out), want) {
			t.Errorf("sluice mirror add does not say %q", want)
		}
	}
	treetest.Same(t, a, b, backing.StateFile)
	treetest.Same(t, a, c, backing.StateFile)
	ids := map[string]bool{}
	for _, x := range []string{a, b, c} {
		var st struct{ ID string }
		raw, _ := os.ReadFile(filepath.Join(x, backing.StateFile))
		if json.Unmarshal(raw, &st) != nil || st.ID == "" || ids[st.ID] {
			t.Errorf("%s's state file: %s", x, raw)
		}
		ids[st.ID] = true
	}

	// Reads served from the new mirror.
	before := mirrorStats(t, mnt)
	for i := range 8 {
		if _, err := os.ReadFile(filepath.Join(mnt, fmt.Sprint("seed", i))); err != nil {
			t.Fatal(err)
		}
	}
	after := mirrorStats(t, mnt)
	if len(after) != 3 || after[2].Dir != c || after[2].State != backing.Healthy || after[2].Reads == before[2].Reads {
		t.Errorf("the new mirror after reading 8 MiB through the mount: %+v (before: %+v)", after, before)
	}

	cmd.Process.Signal(syscall.SIGTERM)
	<-exited
	if !strings.Contains(stderr.String(), "mirror "+c+" joined the set") {
		t.Errorf("the daemon's log does not say the mirror joined:\n%s", stderr)
	}
	if strings.Contains(stderr.String(), "DATA RACE") {
		t.Errorf("the daemon (built with -race) found a data race:\n%s", stderr)
	}
	startMount(t, mnt, append(flags, "--mirror", a, "--mirror", b, "--mirror", c, mnt)...)
	for _, m := range mirrorStats(t, mnt) {
		if m.State != backing.Healthy {
			t.Errorf("%s after a restart with the three --mirror: %s", m.Dir, m.State)
		}
	}
}

// TestMirrorAddCopy: a copy of a mirror made with cp -a while the set
// serves carries that mirror's state file: sluice mirror add says so and
// gives it an id of its own, and makes it equal. What may not join is
// refused with what to do.
func TestMirrorAddCopy(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	a, b, d := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "d")
	for _, x := range []string{a, b} {
		os.Mkdir(x, 0o755)
	}
	startMount(t, mnt, "mount", "--mirror", a, "--mirror", b, mnt)
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", a, d).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("changed since the copy"), 0o644); err != nil {
		t.Fatal(err)
	}
	var sa struct{ ID string }
	raw, _ := os.ReadFile(filepath.Join(a, backing.StateFile))
	json.Unmarshal(raw, &sa)
	out, err := sluice("mirror", "add", mnt, d).CombinedOutput()
	if err != nil {
		t.Fatalf("sluice mirror add: %v\n%s", err, out)
	}
	want := fmt.Sprintf("mirror %s holds a copy of mirror %s's %s (the same id %s): it gets an id of its own", d, a, backing.StateFile, sa.ID)
	if !strings.Contains(string(out), want) {
		t.Errorf("sluice mirror add does not say %q:\n%s", want, out)
	}
	raw, _ = os.ReadFile(filepath.Join(d, backing.StateFile))
	if strings.Contains(string(raw), sa.ID) {
		t.Errorf("the copy kept %s's id: %s", a, raw)
	}
	treetest.Same(t, a, d, backing.StateFile)

	os.WriteFile(filepath.Join(dir, "file"), nil, 0o644)
	for _, c := range []struct {
		mnt, dir, want string
	}{
		{mnt, filepath.Join(dir, "missing"), "does not exist: make it first"},
		{mnt, filepath.Join(dir, "file"), "is not a directory"},
		{mnt, b, "is already in the set"},
		{mnt, filepath.Join(mnt, "sub"), "is inside the mount " + mnt},
		{mnt, dir, "holds mirror " + a},
		{src, d, "no sluice mount at " + src},
	} {
		if c.dir == filepath.Join(mnt, "sub") {
			os.Mkdir(c.dir, 0o755)
		}
		out, err := sluice("mirror", "add", c.mnt, c.dir).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("sluice mirror add %s %s: %v, want an error saying %q:\n%s", c.mnt, c.dir, err, c.want, out)
		}
	}
	// A mount of SOURCE has no mirrors to add to.
	smnt := filepath.Join(dir, "smnt")
	os.Mkdir(smnt, 0o755)
	startMount(t, smnt, "mount", src, smnt)
	if out, err := sluice("mirror", "add", smnt, filepath.Join(dir, "missing")).CombinedOutput(); err == nil || !strings.Contains(string(out), "serves SOURCE, not a mirror set") {
		t.Errorf("sluice mirror add to a mount of SOURCE: %v\n%s", err, out)
	}
}

// mirrorStats is sluice stat's mirrors of the mount at mnt.
func mirrorStats(t *testing.T, mnt string) []backing.MirrorStats {
	t.Helper()
	out, err := sluice("stat", "--json", mnt).Output()
	var st control.Status
	if err != nil || json.Unmarshal(out, &st) != nil {
		t.Fatalf("stat: %v\n%s", err, out)
	}
	return st.Mirrors
}
