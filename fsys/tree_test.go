package fsys

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	"sluice/backing"
	"sluice/group"
)

// TestTreeMount: a mount serves any backing.Tree given in place of
// SOURCE: one held in memory answers a tenant's creates, writes, reads
// (through the throttle's stack for a limited group and straight for
// root), renames, links and removals through the kernel as a directory
// would.
func TestTreeMount(t *testing.T) {
	mem := backing.NewMemTree(backing.MemOptions{Mode: 0o777})
	rules := []group.Rule{{Group: "t", UID: new(uint32(4101))}}
	_, mnt, _ := mount(t, Options{Tree: mem, AllowOther: true, Rules: rules,
		Limits: []group.LimitSpec{limit(t, "t rbps=64MiB riops=4096")}})
	data := bytes.Repeat([]byte("sluice in memory "), 1<<16) // 1.06 MiB
	var err error
	runAs(4101, func() {
		if err = os.Mkdir(filepath.Join(mnt, "d"), 0o755); err != nil {
			return
		}
		if err = os.WriteFile(filepath.Join(mnt, "d", "f"), data, 0o644); err != nil {
			return
		}
		if err = os.Rename(filepath.Join(mnt, "d", "f"), filepath.Join(mnt, "d", "g")); err != nil {
			return
		}
		if err = os.Link(filepath.Join(mnt, "d", "g"), filepath.Join(mnt, "h")); err != nil {
			return
		}
		err = os.Symlink("d/g", filepath.Join(mnt, "s"))
	})
	if err != nil {
		t.Fatalf("as uid 4101: %v", err)
	}
	for _, reader := range []int{4101, 0} { // limited, then unlimited
		var got []byte
		runAs(reader, func() { got, err = os.ReadFile(filepath.Join(mnt, "s")) })
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("uid %d read %d bytes (%v), want the %d written", reader, len(got), err, len(data))
		}
	}
	st, err := os.Stat(filepath.Join(mnt, "h"))
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Nlink != 2 || sys.Uid != 4101 || st.Size() != int64(len(data)) {
		t.Errorf("h: nlink %d, uid %d, size %d; want 2, 4101, %d", sys.Nlink, sys.Uid, st.Size(), len(data))
	}
	if names := dirNames(t, mnt); !slices.Equal(names, []string{"d", "h", "s"}) {
		t.Errorf("root lists %v, want [d h s]", names)
	}
	runAs(4101, func() { err = os.Remove(filepath.Join(mnt, "d")) })
	if !errors.Is(err, syscall.ENOTEMPTY) {
		t.Errorf("rmdir of a directory holding a file: %v, want ENOTEMPTY", err)
	}
	runAs(4102, func() { err = os.WriteFile(filepath.Join(mnt, "h"), []byte("x"), 0o644) })
	if !errors.Is(err, syscall.EACCES) {
		t.Errorf("uid 4102 writing uid 4101's file of mode 0644: %v, want EACCES", err)
	}
}

// TestFaultTreeMount: faults injected under the mount by operation and
// path (backing.FaultTree over SOURCE) reach the tenant as the backing
// tree returned them, through the throttle's stack for a limited group
// and straight for an unlimited one, and touch nothing else: the other
// files read as on SOURCE, and a read that failed once succeeds when
// tried again.
func TestFaultTreeMount(t *testing.T) {
	_, src, _ := mountDirs(t)
	for _, d := range []string{"bad", "good", "ro"} {
		if err := os.Mkdir(filepath.Join(src, d), 0o777); err != nil {
			t.Fatal(err)
		}
		os.Chmod(filepath.Join(src, d), 0o777)
	}
	data := bytes.Repeat([]byte("0123456789abcdef"), 32<<10) // 512 KiB
	for _, p := range []string{"bad/f", "good/f", "good/flaky"} {
		if err := os.WriteFile(filepath.Join(src, p), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	local, err := backing.NewLocal(src, backing.LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ft, err := backing.NewFaultTree(local, backing.FaultOptions{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	rules := []group.Rule{{Group: "t", UID: new(uint32(4101))}}
	_, mnt, _ := mount(t, Options{Tree: ft, AllowOther: true, Rules: rules,
		Limits: []group.LimitSpec{limit(t, "t rbps=8MiB")}})
	for _, c := range []struct {
		name string
		uid  int
	}{{"limited", 4101}, {"unlimited", 4102}} {
		t.Run(c.name, func(t *testing.T) {
			if err := ft.SetRules(
				backing.FaultRule{Ops: backing.OpRead, Path: "bad/**", Err: syscall.EIO},
				backing.FaultRule{Ops: backing.OpRead, Path: "good/flaky", Err: syscall.EIO, Limit: 1},
				backing.FaultRule{Ops: backing.OpCreate | backing.OpMkdir, Path: "ro/**", Err: syscall.EROFS},
			); err != nil {
				t.Fatal(err)
			}
			var got, again []byte
			var errBad, errGood, errFlaky, errAgain, errCreate, errMkdir, errOther error
			runAs(c.uid, func() {
				_, errBad = os.ReadFile(filepath.Join(mnt, "bad", "f"))
				got, errGood = os.ReadFile(filepath.Join(mnt, "good", "f"))
				_, errFlaky = os.ReadFile(filepath.Join(mnt, "good", "flaky"))
				again, errAgain = os.ReadFile(filepath.Join(mnt, "good", "flaky"))
				errCreate = os.WriteFile(filepath.Join(mnt, "ro", c.name), nil, 0o644)
				errMkdir = os.Mkdir(filepath.Join(mnt, "ro", c.name+".d"), 0o755)
				errOther = os.WriteFile(filepath.Join(mnt, "good", c.name), data, 0o644)
			})
			if !errors.Is(errBad, syscall.EIO) {
				t.Errorf("read of bad/f: %v, want EIO", errBad)
			}
			if errGood != nil || !bytes.Equal(got, data) {
				t.Errorf("read of good/f: %d bytes (%v), want SOURCE's %d", len(got), errGood, len(data))
			}
			// A limited group's reads come through the stack with
			// direct I/O: the failed read is its caller's. An unlimited
			// group reads through the kernel's page cache, whose failed
			// readahead the kernel reads again when the page is needed:
			// the caller sees none.
			if fired := ft.Fired(); fired[1] != 1 {
				t.Errorf("the fault of good/flaky fired %d times, want once", fired[1])
			}
			if want := error(nil); c.uid == 4101 && !errors.Is(errFlaky, syscall.EIO) || c.uid != 4101 && errFlaky != want {
				t.Errorf("first read of good/flaky: %v, want EIO for the limited group and success for the other", errFlaky)
			}
			if errAgain != nil || !bytes.Equal(again, data) {
				t.Errorf("good/flaky read again: %d bytes (%v), want SOURCE's %d", len(again), errAgain, len(data))
			}
			if !errors.Is(errCreate, syscall.EROFS) || !errors.Is(errMkdir, syscall.EROFS) {
				t.Errorf("create and mkdir in ro: %v, %v; want EROFS", errCreate, errMkdir)
			}
			if errOther != nil {
				t.Errorf("write of good/%s: %v", c.name, errOther)
			}
			if b, err := os.ReadFile(filepath.Join(src, "good", c.name)); err != nil || !bytes.Equal(b, data) {
				t.Errorf("SOURCE's good/%s: %d bytes (%v), want the %d written", c.name, len(b), err, len(data))
			}
		})
	}
}

// TestDirCache: a listing the kernel keeps from one open of a directory
// to the next is dropped when the directory changed: through the mount,
// or on SOURCE behind it (at the next open, as files are).
func TestDirCache(t *testing.T) {
	src, mnt, _ := mount(t, Options{})
	if err := os.Mkdir(filepath.Join(src, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(src, "d", n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, step := range []struct {
		what   string
		change func() error
		want   []string
	}{
		{"as created on SOURCE", func() error { return nil }, []string{"a", "b"}},
		{"listed again", func() error { return nil }, []string{"a", "b"}},
		{"after a create on SOURCE", func() error { return os.WriteFile(filepath.Join(src, "d", "c"), nil, 0o644) }, []string{"a", "b", "c"}},
		{"after a create through the mount", func() error { return os.WriteFile(filepath.Join(mnt, "d", "e"), nil, 0o644) }, []string{"a", "b", "c", "e"}},
		{"after an unlink on SOURCE", func() error { return os.Remove(filepath.Join(src, "d", "a")) }, []string{"b", "c", "e"}},
		{"after a rename on SOURCE", func() error { return os.Rename(filepath.Join(src, "d", "b"), filepath.Join(src, "d", "f")) }, []string{"c", "e", "f"}},
		{"after an unlink through the mount", func() error { return os.Remove(filepath.Join(mnt, "d", "c")) }, []string{"e", "f"}},
	} {
		if err := step.change(); err != nil {
			t.Fatalf("%s: %v", step.what, err)
		}
		if got := dirNames(t, filepath.Join(mnt, "d")); !slices.Equal(got, step.want) {
			t.Errorf("listing %s: %v, want %v", step.what, got, step.want)
		}
	}
}

// dirNames lists directory dir's names, in order.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// lookupCounter counts the lookups made in the tree it wraps.
type lookupCounter struct {
	backing.Tree
	n atomic.Int64
}

func (c *lookupCounter) Lookup(parent backing.ID, name string) (backing.Entry, error) {
	c.n.Add(1)
	return c.Tree.Lookup(parent, name)
}

// TestListNamesFewLookups: a listing of names looks up a few of the
// directory's entries in SOURCE, not all of them (the first reply to the
// kernel's READDIRPLUS holds plusFirst entries); a listing whose lister
// stats each entry as it goes gets every entry's attributes right.
func TestListNamesFewLookups(t *testing.T) {
	_, src, _ := mountDirs(t)
	const files = 300
	if err := os.Mkdir(filepath.Join(src, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range files {
		if err := os.WriteFile(filepath.Join(src, "d", fmt.Sprintf("f%03d", i)), make([]byte, i), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	local, err := backing.NewLocal(src, backing.LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tree := &lookupCounter{Tree: local}
	_, mnt, _ := mount(t, Options{Tree: tree})
	before := tree.n.Load()
	if names := dirNames(t, filepath.Join(mnt, "d")); len(names) != files {
		t.Fatalf("listed %d names, want %d", len(names), files)
	}
	// The directory itself is looked up too.
	if n := tree.n.Load() - before; n > plusFirst+1 {
		t.Errorf("a listing of %d names made %d lookups in SOURCE, want at most %d", files, n, plusFirst+1)
	}
	d, err := os.Open(filepath.Join(mnt, "d"))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	seen := 0
	for {
		batch, err := d.ReadDir(16)
		for _, e := range batch {
			var i int64
			if _, err := fmt.Sscanf(e.Name(), "f%03d", &i); err != nil {
				t.Fatalf("listed %q: %v", e.Name(), err)
			}
			if fi, err := os.Lstat(filepath.Join(mnt, "d", e.Name())); err != nil || fi.Size() != i {
				t.Fatalf("stat of %s while listing: %v, %v; want size %d", e.Name(), fi, err, i)
			}
			seen++
		}
		if err != nil || len(batch) == 0 {
			break
		}
	}
	if seen != files {
		t.Errorf("listed and stat'ed %d entries, want %d", seen, files)
	}
}
