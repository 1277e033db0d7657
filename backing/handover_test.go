package backing

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// newHandoverLocal opens dir as a tree; noHandles makes it the tree
// NewLocal makes in a process that cannot open file handles, where every
// object is held by descriptor. A tree with handles needs root.
func newHandoverLocal(t *testing.T, dir string, noHandles bool) *Local {
	t.Helper()
	tr, err := NewLocal(dir, LocalOptions{MaxOpen: 4})
	if err != nil {
		t.Fatal(err)
	}
	if noHandles {
		tr.mu.Lock()
		for _, fd := range tr.mounts {
			unix.Close(fd)
		}
		tr.mounts = map[int]int{}
		tr.noHandles = true
		tr.mu.Unlock()
	} else if tr.noHandles {
		tr.Close()
		t.Skip("skipping: this process cannot open file handles (open_by_handle_at needs CAP_DAC_READ_SEARCH)")
	}
	return tr
}

// transfer carries a state and its descriptors to the adopting side: it
// returns the state as that side reads it and the descriptors as that
// side's own, and the sending side's are closed.
type transfer func(t *testing.T, st LocalState, fds []int) (LocalState, []int)

// inProcess hands the state over as JSON and the descriptors as they are.
func inProcess(t *testing.T, st LocalState, fds []int) (LocalState, []int) {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var got LocalState
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	return got, fds
}

// overSocket hands the state over a Unix socket, the descriptors as
// SCM_RIGHTS: they arrive under other numbers (the sender's are still open
// when they arrive), and the sender's are closed then.
func overSocket(t *testing.T, st LocalState, fds []int) (LocalState, []int) {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[0])
	defer unix.Close(sp[1])
	if len(fds) > 250 {
		t.Fatalf("%d descriptors: more than one message carries", len(fds))
	}
	if err := unix.Sendmsg(sp[0], b, unix.UnixRights(fds...), nil, 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(b)+1)
	oob := make([]byte, unix.CmsgSpace(4*len(fds)))
	n, oobn, flags, _, err := unix.Recvmsg(sp[1], buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		t.Fatalf("message truncated (flags %#x)", flags)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages: %v, %v", msgs, err)
	}
	got, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(got) != len(fds) {
		t.Fatalf("%d descriptors received (%v), %d sent", len(got), err, len(fds))
	}
	for i := range fds {
		if got[i] == fds[i] {
			t.Fatalf("descriptor %d arrived as %d, its number on the sending side", i, got[i])
		}
		unix.Close(fds[i])
	}
	var out LocalState
	if err := json.Unmarshal(buf[:n], &out); err != nil {
		t.Fatal(err)
	}
	return out, got
}

// readDir reads up to n entries of d (n < 0: to the end), as a reader
// that goes on from where it stopped.
func readDir(t *testing.T, d *Dir, n int) []string {
	t.Helper()
	var names []string
	for n < 0 || len(names) < n {
		e, ok, err := d.Peek()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		names = append(names, e.Name)
		d.Advance()
	}
	return names
}

// checkListing checks that the names read in parts are the directory's,
// each once.
func checkListing(t *testing.T, want []string, parts ...[]string) {
	t.Helper()
	seen := map[string]bool{}
	for _, p := range parts {
		for _, name := range p {
			if seen[name] {
				t.Errorf("%s listed twice", name)
			}
			seen[name] = true
		}
	}
	for _, name := range want {
		if !seen[name] {
			t.Errorf("%s not listed", name)
		}
		delete(seen, name)
	}
	for name := range seen {
		t.Errorf("%s listed, not in the directory", name)
	}
}

func readFile(t *testing.T, f *File, n int) string {
	t.Helper()
	b := make([]byte, n)
	m, err := f.ReadAt(b, 0)
	if err != nil && m == 0 {
		t.Fatal(err)
	}
	return string(b[:m])
}

const listEntries = 1500 // more than one getdents buffer (32 KiB) holds

func handoverSource(t *testing.T) (dir string, list []string) {
	t.Helper()
	dir = t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(filepath.Join(dir, "a"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a", "b.txt"), []byte("bee"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "c.txt"), []byte("sea"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "gone.txt"), []byte("gone"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "w.txt"), nil, 0o644))
	must(os.Mkdir(filepath.Join(dir, "list"), 0o755))
	list = []string{".", ".."}
	for i := range listEntries {
		name := fmt.Sprintf("entry-%04d", i)
		must(os.WriteFile(filepath.Join(dir, "list", name), nil, 0o644))
		list = append(list, name)
	}
	return dir, list
}

func lookupOK(t *testing.T, tr *Local, parent ID, name string) Entry {
	t.Helper()
	e, err := tr.Lookup(parent, name)
	if err != nil {
		t.Fatalf("lookup %s: %v", name, err)
	}
	return e
}

func nextID(tr *Local) ID {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.nextID
}

// TestHandover hands a tree in use over, the old tree closed as its
// process exiting would: every ID reaches its object in the adopting tree,
// with its references, the open files and directories go on, and new
// objects get new IDs.
func TestHandover(t *testing.T) {
	for _, mode := range []struct {
		name      string
		noHandles bool
	}{{"handles", false}, {"no handles", true}} {
		for _, tc := range []struct {
			name string
			tr   transfer
		}{{"in process", inProcess}, {"over a socket", overSocket}} {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) { testHandover(t, mode.noHandles, tc.tr) })
		}
	}
}

func testHandover(t *testing.T, noHandles bool, pass transfer) {
	dir, list := handoverSource(t)
	old := newHandoverLocal(t, dir, noHandles)
	cred := &Cred{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}

	// The kernel's objects: a twice, the others once.
	a := lookupOK(t, old, RootID, "a")
	lookupOK(t, old, RootID, "a")
	b := lookupOK(t, old, a.ID, "b.txt")
	c := lookupOK(t, old, RootID, "c.txt")
	gone := lookupOK(t, old, RootID, "gone.txt")
	w := lookupOK(t, old, RootID, "w.txt")
	ls := lookupOK(t, old, RootID, "list")
	// Open files: one deleted once open, one written, one created, one
	// with no name (O_TMPFILE).
	files := map[string]*File{}
	ids := map[string]ID{}
	open := func(name string, e Entry, flags uint32) {
		f, err := old.Open(e.ID, flags)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		files[name], ids[name] = f, e.ID
	}
	open("gone", gone, syscall.O_RDONLY)
	open("w", w, syscall.O_RDWR)
	open("c", c, syscall.O_RDONLY)
	if err := old.Unlink(RootID, "gone.txt"); err != nil {
		t.Fatal(err)
	}
	if _, err := files["w"].WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	ne, nf, err := old.Create(cred, RootID, "new.txt", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	files["new"], ids["new"] = nf, ne.ID
	if _, err := nf.WriteAt([]byte("new"), 0); err != nil {
		t.Fatal(err)
	}
	te, tf, err := old.Tmpfile(cred, a.ID, syscall.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	files["tmp"], ids["tmp"] = tf, te.ID
	if _, err := tf.WriteAt([]byte("tmp"), 0); err != nil {
		t.Fatal(err)
	}
	// Open directories: one read in part, one to its end.
	dl, err := old.OpenDir(ls.ID)
	if err != nil {
		t.Fatal(err)
	}
	before := readDir(t, dl, 100)
	da, err := old.OpenDir(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkListing(t, []string{".", "..", "b.txt"}, readDir(t, da, -1))

	oldStats, oldNext := old.Stats(), nextID(old)
	st, fds, err := old.Export()
	if err != nil {
		t.Fatal(err)
	}
	// The open files and directories, as the caller hands them.
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range files {
			if !yield(name) {
				return
			}
		}
	})
	dup := func(fd int) int {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	treeFds := len(fds)
	for _, name := range names {
		fds = append(fds, dup(files[name].Fd()))
	}
	fds = append(fds, dup(dl.Fd()), dup(da.Fd()))
	offl, offa := dl.Offset(), da.Offset()
	// The old process ends.
	for _, f := range files {
		f.Close()
	}
	dl.Close()
	da.Close()
	old.Close()

	st, fds = pass(t, st, fds)
	tr, err := AdoptLocal(st, fds[:treeFds], LocalOptions{MaxOpen: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	adopted := map[string]*File{}
	for i, name := range names {
		f, err := tr.AdoptFile(ids[name], fds[treeFds+i])
		if err != nil {
			t.Fatalf("adopt file %s: %v", name, err)
		}
		adopted[name] = f
		defer f.Close()
	}
	ndl, err := tr.AdoptDir(ls.ID, fds[treeFds+len(names)], offl)
	if err != nil {
		t.Fatal(err)
	}
	defer ndl.Close()
	nda, err := tr.AdoptDir(a.ID, fds[treeFds+len(names)+1], offa)
	if err != nil {
		t.Fatal(err)
	}
	defer nda.Close()

	// Stats: the same objects, the same pinned; the descriptors cached
	// are those of the objects held by handle that open files and
	// directories hold.
	want := Stats{Objects: oldStats.Objects, Pinned: oldStats.Pinned}
	if !noHandles {
		want.Cached = len(files) + 2
	}
	if got := tr.Stats(); got != want {
		t.Errorf("stats after adoption %+v, want %+v (before the handover %+v)", got, want, oldStats)
	}

	// Every ID reaches its object.
	for name, e := range map[string]Entry{"a": a, "b": b, "c": c, "gone": gone, "w": w, "list": ls, "new": ne, "tmp": te} {
		got, err := tr.Getattr(e.ID)
		if err != nil {
			t.Errorf("getattr %s (%d): %v", name, e.ID, err)
			continue
		}
		if got.Ino != e.Attr.Ino || got.Dev != e.Attr.Dev {
			t.Errorf("%s (%d) is inode %d, want %d", name, e.ID, got.Ino, e.Attr.Ino)
		}
	}
	if st, err := tr.Getattr(gone.ID); err == nil && st.Nlink != 0 {
		t.Errorf("the deleted file has %d links", st.Nlink)
	}
	// Lookups find the same objects.
	if e := lookupOK(t, tr, a.ID, "b.txt"); e.ID != b.ID {
		t.Errorf("b.txt is %d after the handover, %d before", e.ID, b.ID)
	}
	if e := lookupOK(t, tr, RootID, "c.txt"); e.ID != c.ID {
		t.Errorf("c.txt is %d after the handover, %d before", e.ID, c.ID)
	}
	if e := lookupOK(t, tr, RootID, "new.txt"); e.ID != ne.ID {
		t.Errorf("new.txt is %d after the handover, %d before", e.ID, ne.ID)
	}

	// The files handed over.
	if got := readFile(t, adopted["gone"], 16); got != "gone" {
		t.Errorf("the deleted file reads %q", got)
	}
	if got := readFile(t, adopted["c"], 16); got != "sea" {
		t.Errorf("c.txt reads %q", got)
	}
	if _, err := adopted["w"].WriteAt([]byte(" world"), 5); err != nil {
		t.Fatal(err)
	}
	if _, err := adopted["new"].WriteAt([]byte(" file"), 3); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"w.txt": "hello world", "new.txt": "new file"} {
		if b, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(b) != want {
			t.Errorf("%s holds %q (%v), want %q", name, b, err, want)
		}
	}
	if got := readFile(t, adopted["tmp"], 16); got != "tmp" {
		t.Errorf("the unnamed file reads %q", got)
	}
	if st, err := tr.Getattr(te.ID); err != nil || st.Nlink != 0 {
		t.Errorf("the unnamed file: %d links (%v)", st.Nlink, err)
	}
	le, err := tr.Link(cred, te.ID, RootID, "linked")
	if err != nil {
		t.Fatalf("link the unnamed file: %v", err)
	}
	if le.ID != te.ID {
		t.Errorf("the unnamed file, linked, is %d, was %d", le.ID, te.ID)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "linked")); err != nil || string(b) != "tmp" {
		t.Errorf("the unnamed file, linked, holds %q (%v)", b, err)
	}
	// Opens of objects the old tree knew.
	f, err := tr.Open(b.ID, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, f, 16); got != "bee" {
		t.Errorf("b.txt reads %q", got)
	}
	f.Close()
	d, err := tr.OpenDir(a.ID)
	if err != nil {
		t.Fatal(err)
	}
	checkListing(t, []string{".", "..", "b.txt"}, readDir(t, d, -1))
	d.Close()

	// The listings go on where they stopped, as the kernel asks.
	if err := ndl.Seek(offl); err != nil {
		t.Fatal(err)
	}
	checkListing(t, list, before, readDir(t, ndl, -1))
	if err := nda.Seek(offa); err != nil {
		t.Fatal(err)
	}
	if rest := readDir(t, nda, -1); len(rest) != 0 {
		t.Errorf("a listing read to its end goes on with %q", rest)
	}
	// And start again.
	if err := ndl.Seek(0); err != nil {
		t.Fatal(err)
	}
	checkListing(t, list, readDir(t, ndl, -1))

	// References carry over: a, looked up twice, stays after one forget.
	if tr.Forget(a.ID, 1) {
		t.Fatal("a forgotten after one of its two references")
	}
	if _, err := tr.Getattr(a.ID); err != nil {
		t.Fatalf("a after one forget: %v", err)
	}
	if e := lookupOK(t, tr, RootID, "a"); e.ID != a.ID {
		t.Fatalf("a is %d after the handover, %d before", e.ID, a.ID)
	}
	if !tr.Forget(a.ID, 2) {
		t.Fatal("a still held after all its references are forgotten")
	}
	if _, err := tr.Getattr(a.ID); err != syscall.ESTALE {
		t.Errorf("getattr of a forgotten: %v, want ESTALE", err)
	}
	// New objects get IDs never given.
	na := lookupOK(t, tr, RootID, "a")
	if na.ID < oldNext {
		t.Errorf("a looked up again is %d, below the old tree's next ID %d", na.ID, oldNext)
	}
	if err := os.WriteFile(filepath.Join(dir, "late.txt"), []byte("late"), 0o644); err != nil {
		t.Fatal(err)
	}
	if e := lookupOK(t, tr, RootID, "late.txt"); e.ID < oldNext || e.ID == na.ID {
		t.Errorf("a new object is %d (old next ID %d, a is %d)", e.ID, oldNext, na.ID)
	}
	// b, its parent forgotten, is still the kernel's.
	if e := lookupOK(t, tr, na.ID, "b.txt"); e.ID != b.ID {
		t.Errorf("b.txt is %d after a is forgotten, %d before", e.ID, b.ID)
	}
}

// TestExportLeavesTree: a handover that fails, after the adopting side
// took the tree, its files and directories and closed them again, leaves
// the old tree as it was: it goes on serving.
func TestExportLeavesTree(t *testing.T) {
	for _, noHandles := range []bool{false, true} {
		t.Run(fmt.Sprintf("noHandles=%v", noHandles), func(t *testing.T) {
			dir, list := handoverSource(t)
			tr := newHandoverLocal(t, dir, noHandles)
			defer tr.Close()
			a := lookupOK(t, tr, RootID, "a")
			lookupOK(t, tr, RootID, "a")
			w := lookupOK(t, tr, RootID, "w.txt")
			ls := lookupOK(t, tr, RootID, "list")
			f, err := tr.Open(w.ID, syscall.O_RDWR)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			d, err := tr.OpenDir(ls.ID)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			before := readDir(t, d, 100)
			stats, next := tr.Stats(), nextID(tr)

			st, fds, err := tr.Export()
			if err != nil {
				t.Fatal(err)
			}
			ffd, err := unix.FcntlInt(uintptr(f.Fd()), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			dfd, err := unix.FcntlInt(uintptr(d.Fd()), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			st, fds = inProcess(t, st, fds)
			nt, err := AdoptLocal(st, fds, LocalOptions{})
			if err != nil {
				t.Fatal(err)
			}
			nf, err := nt.AdoptFile(w.ID, ffd)
			if err != nil {
				t.Fatal(err)
			}
			nd, err := nt.AdoptDir(ls.ID, dfd, d.Offset())
			if err != nil {
				t.Fatal(err)
			}
			// The adopting side gives up.
			nf.Close()
			nd.Close()
			nt.Close()

			if got := tr.Stats(); got != stats {
				t.Errorf("stats %+v after the export, %+v before", got, stats)
			}
			if got := nextID(tr); got != next {
				t.Errorf("next ID %d after the export, %d before", got, next)
			}
			// The directory reads on, each entry once.
			if err := d.Seek(d.Offset()); err != nil {
				t.Fatal(err)
			}
			checkListing(t, list, before, readDir(t, d, -1))
			// The file, the objects, the references, the IDs.
			if _, err := f.WriteAt([]byte("still"), 0); err != nil {
				t.Fatal(err)
			}
			if got := readFile(t, f, 16); got != "still" {
				t.Errorf("w.txt reads %q", got)
			}
			if e := lookupOK(t, tr, RootID, "w.txt"); e.ID != w.ID {
				t.Errorf("w.txt is %d, was %d", e.ID, w.ID)
			}
			if e := lookupOK(t, tr, a.ID, "b.txt"); e.ID != next {
				t.Errorf("b.txt, new, is %d, want the next ID %d", e.ID, next)
			}
			if tr.Forget(a.ID, 1) || !tr.Forget(a.ID, 1) {
				t.Error("a, looked up twice, is not forgotten at its second forget")
			}
			if _, err := tr.Getattr(ls.ID); err != nil {
				t.Error(err)
			}
		})
	}
}

// isOpen reports whether fd is an open descriptor.
func isOpen(fd int) bool {
	_, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	return err == nil
}

// TestAdoptRejects: a state whose descriptors are not of the objects it
// names is refused, and every descriptor handed is closed; so is a
// descriptor handed for the wrong object.
func TestAdoptRejects(t *testing.T) {
	dir, _ := handoverSource(t)
	export := func(noHandles bool) (LocalState, []int, map[string]Entry) {
		tr := newHandoverLocal(t, dir, noHandles)
		defer tr.Close()
		es := map[string]Entry{}
		for _, name := range []string{"a", "c.txt", "w.txt"} {
			es[name] = lookupOK(t, tr, RootID, name)
		}
		st, fds, err := tr.Export()
		if err != nil {
			t.Fatal(err)
		}
		return st, fds, es
	}
	object := func(st LocalState, id ID) *LocalObject {
		for i := range st.Objects {
			if st.Objects[i].ID == id {
				return &st.Objects[i]
			}
		}
		t.Fatalf("no object %d in the state", id)
		return nil
	}
	for _, tc := range []struct {
		name      string
		noHandles bool
		spoil     func(st *LocalState, fds []int, es map[string]Entry) []int
	}{
		{"swapped descriptors", true, func(st *LocalState, fds []int, es map[string]Entry) []int {
			r, c := object(*st, RootID), object(*st, es["c.txt"].ID)
			r.Fd, c.Fd = c.Fd, r.Fd
			return fds
		}},
		{"next ID reused", true, func(st *LocalState, fds []int, es map[string]Entry) []int {
			st.NextID = es["c.txt"].ID
			return fds
		}},
		{"a descriptor missing", true, func(st *LocalState, fds []int, es map[string]Entry) []int {
			unix.Close(fds[len(fds)-1])
			return fds[:len(fds)-1]
		}},
		{"a descriptor named twice", true, func(st *LocalState, fds []int, es map[string]Entry) []int {
			object(*st, es["w.txt"].ID).Fd = object(*st, es["c.txt"].ID).Fd
			return fds
		}},
		{"the wrong mount", false, func(st *LocalState, fds []int, es map[string]Entry) []int {
			st.Mounts[0].MountID++
			return fds
		}},
		{"a handle with no mount", false, func(st *LocalState, fds []int, es map[string]Entry) []int {
			object(*st, es["c.txt"].ID).MountID++
			return fds
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, fds, es := export(tc.noHandles)
			fds = tc.spoil(&st, fds, es)
			if _, err := AdoptLocal(st, fds, LocalOptions{}); err == nil {
				t.Fatal("adopted")
			} else {
				t.Log(err)
			}
			for i, fd := range fds {
				if isOpen(fd) {
					t.Errorf("descriptor %d (%d) left open", i, fd)
					unix.Close(fd)
				}
			}
		})
	}

	t.Run("a file of another object", func(t *testing.T) {
		st, fds, es := export(false)
		tr, err := AdoptLocal(st, fds, LocalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		fd, err := unix.Open(filepath.Join(dir, "c.txt"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.AdoptFile(es["w.txt"].ID, fd); err == nil {
			t.Error("a descriptor of c.txt adopted as w.txt")
		}
		if isOpen(fd) {
			t.Error("the descriptor refused is left open")
			unix.Close(fd)
		}
		fd, err = unix.Open(filepath.Join(dir, "c.txt"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tr.AdoptDir(es["c.txt"].ID, fd, 0); err == nil {
			t.Error("a file adopted as a directory")
		}
		if isOpen(fd) {
			t.Error("the descriptor refused is left open")
			unix.Close(fd)
		}
		if s := tr.Stats(); s.Cached != 0 {
			t.Errorf("%d descriptors cached after the adoptions refused", s.Cached)
		}
	})
}

// TestHandoverInodeReused: when the kernel still holds an object whose
// inode number a new object took, the new object is the one lookups find
// after the handover too.
func TestHandoverInodeReused(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := newHandoverLocal(t, dir, false)
	defer old.Close()
	x := lookupOK(t, old, RootID, "x")
	if err := os.Remove(filepath.Join(dir, "x")); err != nil {
		t.Fatal(err)
	}
	// A new file takes the inode number; ext4 gives the one just freed.
	name := ""
	for i := range 100 {
		p := filepath.Join(dir, fmt.Sprint("y", i))
		if err := os.WriteFile(p, []byte("y"), 0o644); err != nil {
			t.Fatal(err)
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Ino == x.Attr.Ino {
			name = filepath.Base(p)
			break
		}
	}
	if name == "" {
		t.Skip("skipping: the file system gave no new file the inode number freed")
	}
	y := lookupOK(t, old, RootID, name)
	if y.ID == x.ID {
		t.Fatalf("%s, a new file, is the deleted file's object %d", name, x.ID)
	}
	st, fds, err := old.Export()
	if err != nil {
		t.Fatal(err)
	}
	superseded := map[ID]bool{}
	for _, o := range st.Objects {
		superseded[o.ID] = o.Superseded
	}
	if !superseded[x.ID] || superseded[y.ID] {
		t.Errorf("superseded: x %v, %s %v; want x only", superseded[x.ID], name, superseded[y.ID])
	}
	st, fds = overSocket(t, st, fds)
	tr, err := AdoptLocal(st, fds, LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if e := lookupOK(t, tr, RootID, name); e.ID != y.ID {
		t.Errorf("%s is %d after the handover, %d before", name, e.ID, y.ID)
	}
	if _, err := tr.Getattr(x.ID); err != syscall.ESTALE {
		t.Errorf("getattr of the deleted file: %v, want ESTALE", err)
	}
	if !tr.Forget(x.ID, 1) {
		t.Error("the deleted file is still held after its one reference is forgotten")
	}
	if e := lookupOK(t, tr, RootID, name); e.ID != y.ID {
		t.Errorf("%s is %d once the deleted file is forgotten, %d before", name, e.ID, y.ID)
	}
}
