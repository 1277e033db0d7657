package backing

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func mirrorDirs(t testing.TB, n int, files map[string]string) []string {
	t.Helper()
	var dirs []string
	for range n {
		d := t.TempDir()
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(d, name), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		dirs = append(dirs, d)
	}
	return dirs
}

func clock() func() int64 {
	var now int64
	return func() int64 { now += 1000; return now }
}

// TestMirrorCompare: a set whose top levels differ is refused, with what
// differs; a stale mirror is left out of the comparison.
func TestMirrorCompare(t *testing.T) {
	dirs := mirrorDirs(t, 2, map[string]string{"a": "1", "b": "22"})
	os.WriteFile(filepath.Join(dirs[1], "b"), []byte("2"), 0o644)
	os.WriteFile(filepath.Join(dirs[1], "c"), nil, 0o644)
	_, err := NewMirror(dirs, MirrorOptions{Now: clock()})
	if err == nil {
		t.Fatal("differing mirrors accepted")
	}
	for _, want := range []string{"b is 2 bytes in " + dirs[0] + ", 1 in " + dirs[1], "c is in " + dirs[1] + ", not in " + dirs[0]} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// Marked stale by the other mirror's state file: accepted, and the
	// stale one is not served.
	var st0, st1 mirrorState
	st0, _ = readState(dirs[0])
	st1, _ = readState(dirs[1])
	st0.Stale = []string{st1.ID}
	if err := writeState(dirs[0], st0); err != nil {
		t.Fatal(err)
	}
	m, err := NewMirror(dirs, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatalf("a set whose differing mirror is stale: %v", err)
	}
	defer m.Close()
	if s := m.Stats(); s[0].State != Healthy || s[1].State != Stale {
		t.Errorf("states %s, %s; want healthy, stale", s[0].State, s[1].State)
	}
	if _, err := m.Lookup(RootID, "c"); err != syscall.ENOENT {
		t.Errorf("lookup of a name only the stale mirror has: %v, want ENOENT", err)
	}
	// Both stale: nothing to serve.
	st1.Stale = []string{st0.ID}
	writeState(dirs[1], st1)
	if _, err := NewMirror(dirs, MirrorOptions{Now: clock()}); err == nil || !strings.Contains(err.Error(), "every mirror is marked stale") {
		t.Errorf("every mirror stale: %v", err)
	}
}

// TestMirrorObjects: the state file is no part of the tree; an object
// reached by two names is one object; forgetting it releases it in every
// mirror; a file made through the set is in every mirror.
func TestMirrorObjects(t *testing.T) {
	dirs := mirrorDirs(t, 2, map[string]string{"a": "1"})
	for _, d := range dirs {
		if err := os.Link(filepath.Join(d, "a"), filepath.Join(d, "b")); err != nil {
			t.Fatal(err)
		}
	}
	m, err := NewMirror(dirs, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Lookup(RootID, StateFile); err != syscall.ENOENT {
		t.Errorf("lookup of the state file: %v, want ENOENT", err)
	}
	for _, name := range []string{StateFile, StateFile + ".new"} {
		if _, _, err := m.Create(&Cred{}, RootID, name, syscall.O_RDWR, 0o644); err != syscall.EPERM {
			t.Errorf("create %s: %v, want EPERM", name, err)
		}
	}
	d, err := m.OpenDir(RootID)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for {
		e, ok, err := d.Peek()
		if err != nil || !ok {
			break
		}
		d.Advance()
		names = append(names, e.Name)
	}
	d.Close()
	if strings.Contains(strings.Join(names, " "), StateFile) {
		t.Errorf("listing shows the state file: %v", names)
	}
	a, _ := m.Lookup(RootID, "a")
	b, _ := m.Lookup(RootID, "b")
	if a.ID != b.ID || a.ID == 0 {
		t.Errorf("two links of one file are objects %d and %d", a.ID, b.ID)
	}
	m.Forget(a.ID, 1)
	if gone := m.Forget(b.ID, 1); !gone {
		t.Error("object not gone after its last reference")
	}
	for i, tr := range m.trees {
		if n := tr.(*Local).Stats().Objects; n != 1 {
			t.Errorf("mirror %d holds %d objects after the forget, want 1 (the root)", i, n)
		}
	}
	e, f, err := m.Create(&Cred{}, RootID, "new", syscall.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.WriteAt([]byte("both"), 0); n != 4 || err != nil {
		t.Fatalf("write: %d, %v", n, err)
	}
	f.Close()
	m.Forget(e.ID, 1)
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "new")); string(b) != "both" {
			t.Errorf("%s/new: %q, %v", d, b, err)
		}
	}
}
