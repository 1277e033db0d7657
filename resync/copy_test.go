package resync

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/sys/unix"

	"sluice/internal/treetest"
	"sluice/throttle"
)

// build makes the objects spec names under root: "d/" a directory,
// "l -> t" a symlink, "p|" a FIFO, "h = f" a second name of file f, and
// any other name a file holding its spec.
func build(t *testing.T, root string, spec map[string]string) {
	t.Helper()
	paths := make([]string, 0, len(spec))
	for p := range spec {
		paths = append(paths, p)
	}
	// Files before their other names, parents before children.
	key := func(p string) string {
		return fmt.Sprintf("%t %03d %s", strings.HasPrefix(spec[p], "= "), strings.Count(p, "/"), p)
	}
	slices.SortFunc(paths, func(a, b string) int { return strings.Compare(key(a), key(b)) })
	for _, p := range paths {
		v, full := spec[p], filepath.Join(root, p)
		var err error
		switch {
		case strings.HasSuffix(p, "/"):
			err = os.MkdirAll(full, 0o755)
		case strings.HasPrefix(v, "-> "):
			err = os.Symlink(v[3:], full)
		case v == "|":
			err = unix.Mkfifo(full, 0o640)
		case strings.HasPrefix(v, "= "):
			err = os.Link(filepath.Join(root, v[2:]), full)
		default:
			err = os.WriteFile(full, []byte(v), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// roots opens src and dst as a copy's roots, closed when the test ends.
func roots(t *testing.T, src, dst string) (int, int) {
	t.Helper()
	sfd, err := OpenRoot(src)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(sfd) })
	dfd, err := OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(dfd) })
	return sfd, dfd
}

// setXattr sets user attribute name on path, skipping the test where the
// file system has none.
func setXattr(t *testing.T, path, name, value string) {
	t.Helper()
	if err := unix.Lsetxattr(path, name, []byte(value), 0); err != nil {
		if errors.Is(err, syscall.ENOTSUP) {
			t.Skipf("skipping: %s holds no extended attributes", path)
		}
		t.Fatal(err)
	}
}

// recorder is a Steps that records the steps told.
type recorder struct {
	steps  []string
	pauses int
}

func (r *recorder) Step(what string) error { r.steps = append(r.steps, what); return nil }
func (r *recorder) Pause(time.Time)        { r.pauses++ }

// TestTree: Prune then Tree make a destination that differs in every way
// equal to the source (files, directories, symlinks, hard links, a FIFO,
// modes, extended attributes, times), remove what the source lacks before
// copying anything, leave the names Skip names alone, and write nothing
// through a symlink the destination held where the source has a
// directory.
func TestTree(t *testing.T) {
	src, dst, outside := t.TempDir(), t.TempDir(), t.TempDir()
	build(t, src, map[string]string{
		"f":       "source content",
		"empty":   "",
		"a/":      "",
		"a/b/":    "",
		"a/b/c":   "deep",
		"l":       "-> a/b/c",
		"dangle":  "-> nowhere",
		"abs":     "-> " + outside,
		"h1":      "linked",
		"a/h2":    "= h1",
		"fifo":    "|",
		"d/":      "",
		"d/x":     "under d",
		"typed":   "a file in src",
		"state":   "src's own",
		"newdir/": "",
	})
	build(t, dst, map[string]string{
		"f":        "stale",
		"gone":     "src lacks it",
		"olddir/":  "",
		"olddir/x": "src lacks it too",
		"d":        "-> " + outside, // a directory in src
		"typed/":   "",              // a file in src
		"typed/y":  "",
		"a/":       "",
		"a/h2":     "linked elsewhere in dst",
		"a/other":  "= a/h2",
		"l":        "-> elsewhere",
		"state":    "dst's own",
	})
	setXattr(t, filepath.Join(src, "f"), "user.k", "v")
	setXattr(t, filepath.Join(src, "a"), "user.dir", "d")
	setXattr(t, filepath.Join(dst, "f"), "user.stale", "gone")
	os.Chmod(filepath.Join(src, "a", "b", "c"), 0o600)
	old := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	os.Chtimes(filepath.Join(src, "f"), old, old)
	os.Chtimes(filepath.Join(src, "a", "b"), old, old)

	sfd, dfd := roots(t, src, dst)
	var rec recorder
	var copied int64
	p := &Pacer{}
	c := &Copier{Steps: &rec, Pacer: p, Skip: func(name string) bool { return name == "state" },
		Copied: func(n int64) { copied += n }}
	if err := c.Prune(sfd, dfd); err != nil {
		t.Fatalf("prune: %v", err)
	}
	// What src lacks or holds as another type is gone; nothing is copied
	// yet.
	for _, name := range []string{"gone", "olddir", "d", "typed", "a/other"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Prune, %s is still in dst (%v)", name, err)
		}
	}
	for _, name := range []string{"f", "a/h2", "l", "state"} {
		if _, err := os.Lstat(filepath.Join(dst, name)); err != nil {
			t.Errorf("after Prune, %s present in both is gone from dst: %v", name, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dst, "empty")); err == nil {
		t.Errorf("Prune copied a file")
	}
	if err := c.Tree(sfd, dfd); err != nil {
		t.Fatalf("tree: %v", err)
	}
	treetest.Same(t, src, dst, "state")
	if b, _ := os.ReadFile(filepath.Join(dst, "state")); string(b) != "dst's own" {
		t.Errorf("dst's skipped file holds %q, want it left as it was", b)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("the copy wrote through a symlink in dst: %s holds %d entries", outside, len(ents))
	}
	var h1, h2 unix.Stat_t
	unix.Lstat(filepath.Join(dst, "h1"), &h1)
	unix.Lstat(filepath.Join(dst, "a", "h2"), &h2)
	if h1.Ino != h2.Ino || h1.Nlink != 2 {
		t.Errorf("h1 and a/h2 are inodes %d and %d (%d links) in dst, want one file of two names", h1.Ino, h2.Ino, h1.Nlink)
	}
	for _, name := range []string{"f", "a/b"} {
		fi, err := os.Stat(filepath.Join(dst, name))
		if err != nil || !fi.ModTime().Equal(old) {
			t.Errorf("%s in dst: modified %v (%v), want %v", name, fi.ModTime(), err, old)
		}
	}
	want := int64(len("source content") + len("deep") + len("linked") + len("under d") + len("a file in src"))
	if copied != want {
		t.Errorf("Copied was told of %d bytes, want %d", copied, want)
	}
	if p.Entries != 16-1 { // every source entry but the skipped one
		t.Errorf("the pacer counted %d objects compared, want 15", p.Entries)
	}
	if len(rec.steps) == 0 || rec.pauses == 0 {
		t.Errorf("Steps was told of %d steps and %d pauses, want some of each", len(rec.steps), rec.pauses)
	}

	// Equal already: a second copy copies no content, but that of the
	// file of two names (the first of its names met is linked elsewhere
	// in dst, which the copy does not tell from a link the source lacks).
	copied = 0
	if err := c.Tree(sfd, dfd); err != nil {
		t.Fatalf("tree again: %v", err)
	}
	if copied > int64(len("linked")) {
		t.Errorf("a copy onto an equal tree copied %d bytes", copied)
	}
	treetest.Same(t, src, dst, "state")
}

// TestTreeSwapped: in a busy copy, a file replaced by a symlink between
// its lstat and its open is compared again and copied as the symlink; one
// replaced every time it is looked at is left as dst has it, and said so.
func TestTreeSwapped(t *testing.T) {
	t.Run("once", func(t *testing.T) {
		src, dst, tmp := t.TempDir(), t.TempDir(), t.TempDir()
		build(t, src, map[string]string{"f": "a file", "g": "another"})
		sfd, dfd := roots(t, src, dst)
		swapped := 0
		c := &Copier{Busy: true, AfterLstat: func(rel string) {
			if rel != "/f" || swapped > 0 {
				return
			}
			swapped++
			link := filepath.Join(tmp, "l")
			if err := os.Symlink("g", link); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(link, filepath.Join(src, "f")); err != nil {
				t.Fatal(err)
			}
		}}
		if err := c.Tree(sfd, dfd); err != nil {
			t.Fatalf("tree: %v", err)
		}
		if swapped != 1 {
			t.Fatalf("f was swapped %d times, want once", swapped)
		}
		treetest.Same(t, src, dst, "")
		if l, err := os.Readlink(filepath.Join(dst, "f")); err != nil || l != "g" {
			t.Errorf("f in dst: symlink to %q (%v), want to g", l, err)
		}
	})
	t.Run("always", func(t *testing.T) {
		src, dst, tmp := t.TempDir(), t.TempDir(), t.TempDir()
		build(t, src, map[string]string{"f": "new"})
		build(t, dst, map[string]string{"f": "old content"})
		sfd, dfd := roots(t, src, dst)
		var logged []string
		n := 0
		c := &Copier{Busy: true,
			Logf: func(format string, args ...any) { logged = append(logged, fmt.Sprintf(format, args...)) },
			AfterLstat: func(rel string) {
				n++
				next := filepath.Join(tmp, fmt.Sprint(n))
				if err := os.WriteFile(next, []byte("new"), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(next, filepath.Join(src, "f")); err != nil {
					t.Fatal(err)
				}
			}}
		if err := c.Tree(sfd, dfd); err != nil {
			t.Fatalf("tree: %v", err)
		}
		if n != swapTries {
			t.Errorf("f was looked at %d times, want %d", n, swapTries)
		}
		if b, _ := os.ReadFile(filepath.Join(dst, "f")); string(b) != "old content" {
			t.Errorf("f in dst holds %q, want it left as it was", b)
		}
		if want := "/f was replaced 3 times while being copied: left as it was"; len(logged) != 1 || logged[0] != want {
			t.Errorf("logged %q, want %q", logged, want)
		}
	})
}

// TestTreeFaults: an error from BeforeRead or BeforeWrite fails the copy,
// naming the file.
func TestTreeFaults(t *testing.T) {
	boom := errors.New("boom")
	for _, write := range []bool{false, true} {
		src, dst := t.TempDir(), t.TempDir()
		build(t, src, map[string]string{"f": "content"})
		sfd, dfd := roots(t, src, dst)
		c := &Copier{}
		if write {
			c.BeforeWrite = func() error { return boom }
		} else {
			c.BeforeRead = func() error { return boom }
		}
		if err := c.Tree(sfd, dfd); err == nil || err.Error() != "copying /f: boom" {
			t.Errorf("tree with a fault (write %v): %v, want copying /f: boom", write, err)
		}
	}
}

// TestChanges: a copy of changes compares only the objects named and the
// directories whose times differ below them: a file written in place
// (same size and time) is copied when Written names it, a directory's new
// entry is copied, and a change elsewhere that is not named is not seen.
// A change under a directory dst lacks, or of a file of two names, needs
// the whole tree.
func TestChanges(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	spec := map[string]string{"d1/": "", "d1/f": "aaaa", "d2/": "", "d3/": "", "d3/x": "same", "h": "linked", "d1/h": "= h"}
	build(t, src, spec)
	sfd, dfd := roots(t, src, dst)
	if err := (&Copier{}).Tree(sfd, dfd); err != nil {
		t.Fatalf("tree: %v", err)
	}
	// Rewritten in place, times kept: only Written tells.
	for _, p := range []string{"d1/f", "d3/x"} {
		full := filepath.Join(src, p)
		fi, _ := os.Stat(full)
		dir, _ := os.Stat(filepath.Dir(full))
		if err := os.WriteFile(full, bytes.ToUpper([]byte(spec[p])), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chtimes(full, fi.ModTime(), fi.ModTime())
		os.Chtimes(filepath.Dir(full), dir.ModTime(), dir.ModTime())
	}
	build(t, src, map[string]string{"d2/new/": "", "d2/new/g": "new file"})
	c := &Copier{Written: map[string]bool{"/d1/f": true}}
	err := c.Changes(sfd, dfd, []Change{{Path: "/d1/f"}, {Path: "/d2"}, {Path: "/gone/x"}})
	if err != nil {
		t.Fatalf("changes: %v", err)
	}
	for p, want := range map[string]string{"d1/f": "AAAA", "d2/new/g": "new file", "d3/x": "same"} {
		if b, err := os.ReadFile(filepath.Join(dst, p)); string(b) != want {
			t.Errorf("%s in dst holds %q (%v), want %q", p, b, err, want)
		}
	}

	build(t, src, map[string]string{"only/": "", "only/x": "x"})
	if err := c.Changes(sfd, dfd, []Change{{Path: "/only/x"}}); err != ErrWholeTree {
		t.Errorf("a change under a directory dst lacks: %v, want ErrWholeTree", err)
	}
	if err := os.WriteFile(filepath.Join(src, "h"), []byte("linked, longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Changes(sfd, dfd, []Change{{Path: "/h"}}); err != ErrWholeTree {
		t.Errorf("a change of a file of two names: %v, want ErrWholeTree", err)
	}
	// d3/x kept its size and time: only Written has the whole tree copy
	// it.
	c.Written["/d3/x"] = true
	if err := c.Tree(sfd, dfd); err != nil {
		t.Fatalf("tree: %v", err)
	}
	treetest.Same(t, src, dst, "")
}

// TestPacer: content copied at 1 MiB/s through a Pacer takes the time it
// is paid for, and the waits are told to Pause.
func TestPacer(t *testing.T) {
	// On virtual time (testing/synctest): the copy's own I/O takes
	// none, so the run takes exactly what the meter makes it wait.
	synctest.Test(t, func(t *testing.T) {
		src, dst := t.TempDir(), t.TempDir()
		const size, rate = 256 << 10, 1 << 20
		build(t, src, map[string]string{"f": string(bytes.Repeat([]byte("p"), size))})
		sfd, dfd := roots(t, src, dst)
		pauses := 0
		p := &Pacer{Meter: throttle.NewMeter(rate), Now: func() int64 { return time.Now().UnixNano() },
			Pause: func(time.Time) { pauses++ }}
		start := time.Now()
		if err := (&Copier{Pacer: p}).Tree(sfd, dfd); err != nil {
			t.Fatalf("tree: %v", err)
		}
		if took, want := time.Since(start), time.Duration(size)*time.Second/rate; took != want {
			t.Errorf("%d bytes at %d B/s took %v, want %v", size, rate, took, want)
		}
		if pauses != 1 {
			t.Errorf("Pause was told of %d waits, want 1", pauses)
		}
		treetest.Same(t, src, dst, "")
	})
}
