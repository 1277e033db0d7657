package fsys

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"sluice/group"
)

// TestSubmount: a file system mounted inside SOURCE is served as part of
// it: its files read, are created and are reopened (by file handle, from
// a descriptor of that file system) through the mount, also after sluice
// closed every descriptor it kept of them.
func TestSubmount(t *testing.T) {
	needFUSE(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	src := filepath.Join(dir, "src")
	sub := filepath.Join(src, "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "none", sub).CombinedOutput(); err != nil {
		t.Skipf("skipping: cannot mount a tmpfs inside SOURCE: %v %s", err, out)
	}
	t.Cleanup(func() { unix.Unmount(sub, unix.MNT_DETACH) })
	want := []byte("on the inner file system\n")
	if err := os.WriteFile(filepath.Join(sub, "a"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	_, mnt, _ := mount(t, Options{Source: src, MaxOpen: 16,
		Limits: []group.LimitSpec{limit(t, "default rbps=100MiB")}})
	got, err := os.ReadFile(filepath.Join(mnt, "sub", "a"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("reading a file of the inner file system through the mount: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "sub", "b"), want, 0o600); err != nil {
		t.Fatalf("creating a file on the inner file system through the mount: %v", err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Join(sub, "b"), &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Fatalf("the new file is not on the inner tmpfs: type %#x, %v", st.Type, err)
	}
	// Push the inner directory out of sluice's descriptor cache, then use
	// its files again: they must be reached through the inner mount.
	for i := range 40 {
		d := filepath.Join(mnt, "d", string(rune('a'+i%26))+string(rune('a'+i/26)))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := os.ReadDir(d); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"a", "b"} {
		got, err := os.ReadFile(filepath.Join(mnt, "sub", name))
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("reading sub/%s again after the descriptor cache turned over: %q, %v", name, got, err)
		}
	}
}
