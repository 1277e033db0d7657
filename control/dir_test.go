package control

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeDir: the socket directory is used only when it is a real
// directory of this user; one planted by another user or a symlink is
// refused with a message that says why.
func TestMakeDir(t *testing.T) {
	base := t.TempDir()

	fresh := filepath.Join(base, "fresh")
	if err := MakeDir(fresh); err != nil {
		t.Fatalf("new directory: %v", err)
	}
	if st, err := os.Lstat(fresh); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("new directory mode %v (%v), want 0700", st.Mode(), err)
	}

	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	if err := MakeDir(open); err != nil {
		t.Fatalf("own directory open to others: %v", err)
	}
	if st, _ := os.Lstat(open); st.Mode().Perm() != 0o700 {
		t.Fatalf("own directory left at %v, want 0700", st.Mode().Perm())
	}

	link := filepath.Join(base, "link")
	os.Symlink(fresh, link)
	if err := MakeDir(link); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("symlink: %v, want a refusal saying it is not a directory", err)
	}

	if os.Geteuid() != 0 {
		t.Skip("skipping the other-owner case: chown needs root")
	}
	other := filepath.Join(base, "other")
	os.Mkdir(other, 0o700)
	if err := os.Chown(other, 4101, 4101); err != nil {
		t.Fatal(err)
	}
	err := MakeDir(other)
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 4101") {
		t.Fatalf("directory of uid 4101: %v, want a refusal naming the owner", err)
	}
}
