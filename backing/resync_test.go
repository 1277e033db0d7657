package backing

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/internal/treetest"
)

// TestResyncLastPass: changes of every kind made through the set while a
// resync's first pass runs (and after it has passed them) reach the
// resynced mirror, and the last pass, which holds every change off,
// compares only what changed: the entries of the directories whose
// entries changed, what renames moved, and two files, about 250 of a tree
// of 2044. With a hard
// link made meanwhile it compares the whole tree, which is where the
// link's other names can be seen, and still copies the file written in
// place.
func TestResyncLastPass(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the set creates objects with the caller's credentials, which needs root")
	}
	for _, link := range []bool{false, true} {
		t.Run(map[bool]string{false: "changes", true: "hard link"}[link], func(t *testing.T) { resyncLastPass(t, link) })
	}
}

func resyncLastPass(t *testing.T, link bool) {
	dirs := mirrorDirs(t, 2, nil)
	old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, d := range dirs {
		for i := range 40 {
			sub := filepath.Join(d, fmt.Sprint("d", i))
			if err := os.Mkdir(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			for j := range 50 {
				if err := os.WriteFile(filepath.Join(sub, fmt.Sprint("f", j)), []byte("x"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			// As long ago on both, so that a directory made again
			// since differs in time.
			os.Chtimes(sub, old, old)
		}
		// Two directories of equal times (as cp -a or tar leave them),
		// swapped by renames between the passes.
		for _, dir := range []string{"site", "site.new"} {
			os.Mkdir(filepath.Join(d, dir), 0o755)
			if err := os.WriteFile(filepath.Join(d, dir, "index"), []byte(dir+" content"), 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chtimes(filepath.Join(d, dir, "index"), old, old)
			os.Chtimes(filepath.Join(d, dir), old, old)
		}
	}
	m := staleSet(t, dirs)

	root := &Cred{}
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	look := func(parent ID, name string) ID {
		t.Helper()
		e, err := m.Lookup(parent, name)
		must("lookup "+name, err)
		return e.ID
	}
	write := func(id ID, data []byte, off int64) {
		t.Helper()
		f, err := m.Open(id, syscall.O_WRONLY)
		must("open", err)
		_, err = f.WriteAt(data, off)
		must("write", err)
		must("close", f.Close())
	}
	// Missed while stale, before the resync: the first pass copies it.
	write(look(look(RootID, "d0"), "f0"), []byte("before"), 0)

	m.betweenPasses = func() {
		// One byte rewritten in place: same size, and the same time
		// stamp as the first pass saw (as when both fall in one tick of
		// the file system's clock).
		f1 := filepath.Join(dirs[0], "d1", "f1")
		before, err := os.Stat(f1)
		must("stat", err)
		write(look(look(RootID, "d1"), "f1"), []byte("y"), 0)
		must("chtimes", os.Chtimes(f1, before.ModTime(), before.ModTime()))
		d2, d3 := look(RootID, "d2"), look(RootID, "d3")
		must("rename", m.Rename(d2, "f2", d3, "moved", 0))
		must("unlink", m.Unlink(look(RootID, "d4"), "f4"))
		sub, err := m.Mkdir(root, look(RootID, "d5"), "sub", 0o700)
		must("mkdir", err)
		e, f, err := m.Create(root, sub.ID, "g", syscall.O_RDWR, 0o600)
		must("create", err)
		_, err = f.WriteAt(bytes.Repeat([]byte("g"), 100000), 0)
		must("write g", err)
		f.Close()
		m.Forget(e.ID, 1) // forgotten before the last pass: found by its path
		m.Forget(sub.ID, 1)
		// A directory removed and made again, empty.
		d6 := look(RootID, "d6")
		for j := range 50 {
			must("unlink", m.Unlink(d6, fmt.Sprint("f", j)))
		}
		must("rmdir", m.Rmdir(RootID, "d6"))
		_, err = m.Mkdir(root, RootID, "d6", 0o755)
		must("mkdir d6", err)
		mode := uint32(0o600)
		_, err = m.Setattr(look(look(RootID, "d7"), "f7"), nil, SetAttr{Mode: &mode})
		must("chmod", err)
		_, err = m.Symlink(root, RootID, "l", "d0/f0")
		must("symlink", err)
		must("rename site", m.Rename(RootID, "site", RootID, "site.old", 0))
		must("rename site.new", m.Rename(RootID, "site.new", RootID, "site", 0))
		// A file written and forgotten, then its directory replaced by a
		// file of the same name: its path leads nowhere in the last pass.
		gone, err := m.Mkdir(root, RootID, "gone", 0o755)
		must("mkdir gone", err)
		e, f, err = m.Create(root, gone.ID, "f", syscall.O_RDWR, 0o644)
		must("create gone/f", err)
		_, err = f.WriteAt([]byte("short-lived"), 0)
		must("write gone/f", err)
		f.Close()
		m.Forget(e.ID, 1)
		must("unlink gone/f", m.Unlink(gone.ID, "f"))
		m.Forget(gone.ID, 1)
		must("rmdir gone", m.Rmdir(RootID, "gone"))
		e, f, err = m.Create(root, RootID, "gone", syscall.O_RDWR, 0o644)
		must("create gone", err)
		f.Close()
		m.Forget(e.ID, 1)
		if link {
			_, err = m.Link(root, look(look(RootID, "d8"), "f8"), look(RootID, "d9"), "h")
			must("link", err)
		}
	}
	must("resync", m.Resync(0))
	if s := m.Stats(); s[1].State != Healthy {
		t.Fatalf("mirror 1 is %s after the resync", s[1].State)
	}
	treetest.Same(t, dirs[0], dirs[1], StateFile)
	t.Logf("the last pass compared %d objects", m.lastPass)
	var a, b syscall.Stat_t
	syscall.Lstat(filepath.Join(dirs[1], "d8", "f8"), &a)
	syscall.Lstat(filepath.Join(dirs[1], "d9", "h"), &b)
	switch {
	case link && (a.Ino != b.Ino || a.Nlink != 2):
		t.Errorf("the hard link made during the resync is not one file in the resynced mirror")
	case link && m.lastPass < 1900: // the tree holds 1994 objects by then
		t.Errorf("with a hard link made, the last pass compared %d objects, want the whole tree", m.lastPass)
	case !link && m.lastPass > 300:
		t.Errorf("the last pass compared %d objects, want only what changed (at most 300 of the tree's 2040)", m.lastPass)
	}
}

// TestResyncVanished: objects renamed or removed through the set between
// the first pass's lstat of them and their copy (a file, a directory, a
// symlink, and the first name met of a file of three) do not fail the
// resync, and the resynced mirror ends equal to the source.
func TestResyncVanished(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the set creates objects with the caller's credentials, which needs root")
	}
	dirs := mirrorDirs(t, 2, nil)
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "a"), []byte("a"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Mkdir(filepath.Join(d, "d"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "d", "f"), []byte("f"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("a", filepath.Join(d, "l")); err != nil {
			t.Fatal(err)
		}
		// Three names of one file, in three directories.
		for _, sub := range []string{"x", "y", "z"} {
			os.Mkdir(filepath.Join(d, sub), 0o755)
			if sub == "x" {
				if err := os.WriteFile(filepath.Join(d, "x", "h"), []byte("h"), 0o644); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Link(filepath.Join(d, "x", "h"), filepath.Join(d, sub, "h")); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Missed while stale: mirror 1 differs in every one of them, and
	// lacks the file of two names.
	os.WriteFile(filepath.Join(dirs[0], "a"), []byte("a, later"), 0o644)
	for _, sub := range []string{"x", "y", "z"} {
		os.Remove(filepath.Join(dirs[1], sub, "h"))
	}
	os.WriteFile(filepath.Join(dirs[0], "d", "f"), []byte("f, later"), 0o644)
	os.Remove(filepath.Join(dirs[0], "l"))
	os.Symlink("d/f", filepath.Join(dirs[0], "l"))
	m := staleSet(t, dirs)
	done := map[string]bool{}
	names := 0 // names of the linked file the pass has met
	m.afterLstat = func(rel string) {
		if done[rel] {
			return
		}
		done[rel] = true
		var err error
		switch rel {
		case "/a":
			err = m.Rename(RootID, "a", RootID, "a2", 0)
		case "/d":
			err = m.Rename(RootID, "d", RootID, "d2", 0)
		case "/l":
			err = m.Unlink(RootID, "l")
		case "/x/h", "/y/h", "/z/h":
			// The name the pass meets first goes before it is copied:
			// the two others, in directories that do not change, cannot
			// be linked to it, and the last pass does not look there.
			if names++; names > 1 {
				return
			}
			var dir Entry
			if dir, err = m.Lookup(RootID, rel[1:2]); err == nil {
				err = m.Unlink(dir.ID, "h")
			}
		}
		if err != nil {
			t.Errorf("%s during the first pass: %v", rel, err)
		}
	}
	if err := m.Resync(0); err != nil {
		t.Fatalf("resync: %v", err)
	}
	if names != 3 {
		t.Errorf("the first pass met %d names of the linked file, want 3", names)
	}
	for _, rel := range []string{"/a", "/d", "/l"} {
		if !done[rel] {
			t.Errorf("the first pass never reached %s: the test changed nothing under it", rel)
		}
	}
	if s := m.Stats(); s[1].State != Healthy {
		t.Fatalf("mirror 1 is %s after the resync", s[1].State)
	}
	treetest.Same(t, dirs[0], dirs[1], StateFile)
}

// staleSet opens the set over dirs with mirror 1 recorded stale by mirror
// 0, as a write it missed leaves it; the set is closed when the test ends.
func staleSet(t *testing.T, dirs []string) *Mirror {
	t.Helper()
	st0, _ := readState(dirs[0])
	st1, _ := readState(dirs[1])
	st0.Stale = []string{st1.ID}
	if err := writeState(dirs[0], st0); err != nil {
		t.Fatal(err)
	}
	m, err := NewMirror(dirs, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// TestResyncStepDeadline: a step of a resync that blocks (here the copy of
// one file, held in the first pass; or the wait for a change under way)
// fails the resync within its deadline, leaving the mirror stale and
// saying which step blocked; no resync starts while that step is still
// blocked, and one started once it has returned makes the mirror equal.
func TestResyncStepDeadline(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the set creates objects with the caller's credentials, which needs root")
	}
	const limit = 300 * time.Millisecond
	t.Run("copy", func(t *testing.T) {
		dirs := mirrorDirs(t, 2, nil)
		for _, name := range []string{"a", "b", "c"} {
			if err := os.WriteFile(filepath.Join(dirs[0], name), []byte(name), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		m := staleSet(t, dirs)
		m.stepLimit = limit
		hold := make(chan struct{})
		var once sync.Once
		m.afterLstat = func(rel string) {
			if rel == "/b" {
				once.Do(func() { <-hold })
			}
		}
		start := time.Now()
		err := resyncWithin(t, m, 10*time.Second, func() { close(hold) })
		if err == nil || !strings.Contains(err.Error(), "a step on /b blocked for more than") {
			t.Fatalf("resync with the copy of /b blocked: %v; want it to fail naming /b", err)
		}
		if d := time.Since(start); d > limit+2*time.Second {
			t.Errorf("the resync failed %v after it began; want about %v", d, limit)
		}
		if s := m.Stats(); s[1].State != Stale {
			t.Errorf("mirror 1 is %s after the failed resync; want stale", s[1].State)
		}
		if last := m.LastResync(); !strings.Contains(last, "blocked") {
			t.Errorf("LastResync is %q; want the step that blocked", last)
		}
		if err := m.Resync(0); err == nil || !strings.Contains(err.Error(), "still blocked") {
			t.Errorf("a resync while the step is still blocked: %v; want it refused", err)
		}
		close(hold)
		waitUnblocked(t, m)
		if err := m.Resync(0); err != nil {
			t.Fatalf("resync once the step returned: %v", err)
		}
		treetest.Same(t, dirs[0], dirs[1], StateFile)
	})
	t.Run("change under way", func(t *testing.T) {
		dirs := mirrorDirs(t, 2, map[string]string{"a": "a"})
		m := staleSet(t, dirs)
		m.stepLimit = limit
		m.wmu.RLock() // a change that does not end
		err := resyncWithin(t, m, 10*time.Second, m.wmu.RUnlock)
		if err == nil || !strings.Contains(err.Error(), "did not end within") {
			t.Fatalf("resync with a change under way throughout: %v; want it to fail", err)
		}
		if s := m.Stats(); s[1].State != Stale {
			t.Errorf("mirror 1 is %s after the failed resync; want stale", s[1].State)
		}
		m.wmu.RUnlock()
		if err := m.Resync(0); err != nil {
			t.Fatalf("resync once the change ended: %v", err)
		}
		treetest.Same(t, dirs[0], dirs[1], StateFile)
	})
}

// resyncWithin runs m.Resync and returns its error, failing the test when
// it has not returned after d: then release runs, and it waits for it.
func resyncWithin(t *testing.T, m *Mirror, d time.Duration, release func()) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- m.Resync(0) }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		release()
		err := <-done
		t.Fatalf("the resync had not returned after %v (once released: %v)", d, err)
		return nil
	}
}

// waitUnblocked waits until no step of a resync given up on is blocked.
func waitUnblocked(t *testing.T, m *Mirror) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		m.mu.Lock()
		b := m.blocked
		m.mu.Unlock()
		if b == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the step given up on is still blocked: %s", b)
		}
	}
}
