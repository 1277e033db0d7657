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
	"time"

	"sluice/control"
	"sluice/internal/loopfs"
)

// TestMirrorCrash: the daemon killed (SIGKILL) while a tenant writes a
// mirrored file at random offsets, then started again, never serves two
// contents for one block: at the restart the mirrors hold the same bytes,
// or the one that differs is stale. The writes reach the mirrors one after
// another, so the kill catches some written to one mirror only; the set's
// record of the files being written names them, and the restart makes
// them equal.
func TestMirrorCrash(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("skipping: fio is not installed")
	}
	const size = 16 << 20
	seed := bytes.Repeat([]byte("sluice mirror\n"), size/14+1)[:size]
	crashRounds(t, func(u string) error { return os.WriteFile(filepath.Join(u, "f"), seed, 0o644) },
		func(mnt string, round int) *exec.Cmd {
			return exec.Command("fio", "--name=w", "--filename="+filepath.Join(mnt, "u", "f"), "--thread",
				"--rw=randwrite", "--bs=64k", "--numjobs=4", "--ioengine=psync", "--size=16M",
				fmt.Sprintf("--randseed=%d", round+1), "--time_based", "--runtime=30", "--output-format=terse")
		},
		func(a, b string) string {
			if n := differ(t, filepath.Join(a, "f"), filepath.Join(b, "f")); n > 0 {
				return fmt.Sprintf("f differs in %d bytes", n)
			}
			return ""
		})
}

// TestMirrorCrashNames: the daemon killed while a tenant makes, renames
// and removes names in a mirrored directory, then started again, never
// serves two trees: at the restart the mirrors hold the same names, or
// the one that differs is stale.
func TestMirrorCrashNames(t *testing.T) {
	crashRounds(t, func(u string) error { return os.Mkdir(filepath.Join(u, "d"), 0o755) },
		func(mnt string, round int) *exec.Cmd {
			return exec.Command("sh", "-c", `cd "$1"/u/d || exit 1
i=0
while :; do
	: > f$i && mkdir d$i && mv f$i g$i && rm -f g$((i-2)) && rmdir d$((i-2)) 2>/dev/null
	i=$((i+1))
done`, "sh", mnt)
		},
		func(a, b string) string {
			na, nb := names(t, filepath.Join(a, "d")), names(t, filepath.Join(b, "d"))
			if na != nb {
				return fmt.Sprintf("d holds %q in one, %q in the other", na, nb)
			}
			return ""
		})
}

// crashRounds serves two mirrors, the first on a file system mounted
// sync (each change there waits for its disk, as on a slow mirror, and
// one the kill finds there completes while the second mirror's never
// starts), each with a directory u of uid 4101 that prepare fills. In
// each round uid 4101 runs what work makes while the daemon is killed,
// and diff says how the two mirrors' u differ ("" when they do not) after
// the kill and after a restart. It fails when the restarted set is
// healthy and its mirrors differ, and runs until two kills have caught a
// change between the mirrors, twelve rounds at most.
func crashRounds(t *testing.T, prepare func(u string) error, work func(mnt string, round int) *exec.Cmd, diff func(a, b string) string) {
	needMount(t)
	dir, _, mnt := srcMnt(t)
	a, b := syncFS(t, 64<<20), filepath.Join(dir, "b")
	os.Mkdir(b, 0o755)
	for _, d := range []string{a, b} {
		u := filepath.Join(d, "u")
		os.Mkdir(u, 0o755)
		if err := prepare(u); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("chown", "-R", "4101:4101", u).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v\n%s", err, out)
		}
	}
	ua, ub := filepath.Join(a, "u"), filepath.Join(b, "u")
	caught := 0 // kills that caught a change between the mirrors
	for round := 0; round < 12 && caught < 2; round++ {
		cmd, stderr, exited, _ := startMount(t, mnt, "mount", "--allow-other", "--mirror", a, "--mirror", b, mnt)
		w := work(mnt, round)
		w.Dir = t.TempDir()
		os.Chmod(w.Dir, 0o777)
		w.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4101, Gid: 4101}}
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(500+100*(round%6)) * time.Millisecond)
		cmd.Process.Kill()
		<-exited
		// The dead mount answers ENOTCONN; the work gives up on it.
		exec.Command("umount", "-l", mnt).Run()
		w.Process.Kill()
		w.Wait()
		diverged := diff(ua, ub)

		cmd2, stderr2, exited2, _ := startMount(t, mnt, "mount", "--allow-other", "--mirror", a, "--mirror", b, mnt)
		out, err := sluice("stat", "--json", mnt).Output()
		var st control.Status
		if err != nil || json.Unmarshal(out, &st) != nil || len(st.Mirrors) != 2 {
			t.Fatalf("stat after the restart: %v\n%s", err, out)
		}
		after := diff(ua, ub)
		t.Logf("round %d: after the kill %q; after the restart %q, states %s and %s",
			round, diverged, after, st.Mirrors[0].State, st.Mirrors[1].State)
		if diverged != "" {
			caught++
		}
		if after != "" && st.Mirrors[0].State == "healthy" && st.Mirrors[1].State == "healthy" {
			// The restarted daemon's log, read once it has exited.
			cmd2.Process.Signal(syscall.SIGTERM)
			<-exited2
			t.Errorf("round %d: the restarted set serves two versions (%s) and both mirrors are healthy; daemon log:\n%s%s",
				round, after, stderr.String(), stderr2.String())
		}
		if t.Failed() {
			return
		}
		if st.Mirrors[0].State != "healthy" || st.Mirrors[1].State != "healthy" {
			if out, err := sluice("resync", mnt).CombinedOutput(); err != nil {
				t.Fatalf("resync: %v\n%s", err, out)
			}
		}
		exec.Command("umount", mnt).Run()
		<-exited2
	}
	if caught == 0 {
		t.Errorf("no kill of 12 caught a change between the mirrors: the restarts had nothing to mend")
	}
}

// names lists the entries of directory d with their types, sorted.
func names(t *testing.T, d string) string {
	t.Helper()
	des, err := os.ReadDir(d)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, fmt.Sprintf("%s:%v", de.Name(), de.Type()))
	}
	return strings.Join(out, " ")
}

// syncFS mounts a new ext4 file system of size bytes, on a loop device
// writing its image with direct I/O and with the sync option, and returns
// a directory in it; it is unmounted when the test ends.
func syncFS(t *testing.T, size int64) string {
	t.Helper()
	m := filepath.Join(loopfs.Ext4(t, size, loopfs.Options{Mount: "sync", DirectIO: true}), "m") // beside lost+found
	if err := os.Mkdir(m, 0o755); err != nil {
		t.Fatal(err)
	}
	return m
}

// differ returns how many bytes of files x and y differ, counting the
// length of one past the other's end.
func differ(t *testing.T, x, y string) int {
	t.Helper()
	bx, err := os.ReadFile(x)
	if err != nil {
		t.Fatal(err)
	}
	by, err := os.ReadFile(y)
	if err != nil {
		t.Fatal(err)
	}
	n := max(len(bx), len(by)) - min(len(bx), len(by))
	for i := range min(len(bx), len(by)) {
		if bx[i] != by[i] {
			n++
		}
	}
	return n
}
