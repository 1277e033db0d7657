package backing

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mirrorHandoverDirs makes two mirrors holding the same tree: c.txt,
// w.txt (empty), and list with listEntries names.
func mirrorHandoverDirs(t *testing.T) (dirs []string, list []string) {
	t.Helper()
	dirs = mirrorDirs(t, 2, map[string]string{"c.txt": "sea", "w.txt": ""})
	list = []string{".", ".."}
	for i := range listEntries {
		list = append(list, fmt.Sprintf("entry-%04d", i))
	}
	for _, d := range dirs {
		if err := os.Mkdir(filepath.Join(d, "list"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range list[2:] {
			if err := os.WriteFile(filepath.Join(d, "list", name), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dirs, list
}

// passMirror carries a mirror set's state to the adopting side as JSON
// and its descriptors as duplicates, the sender's closed: numbers of the
// other side's own.
func passMirror(t *testing.T, st MirrorState, fds []int) (MirrorState, []int) {
	t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var got MirrorState
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	return got, dupAll(t, fds)
}

func dupAll(t *testing.T, fds []int) []int {
	t.Helper()
	out := make([]int, len(fds))
	for i, fd := range fds {
		out[i] = -1
		if fd < 0 {
			continue
		}
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		out[i] = d
	}
	return out
}

func mlookup(t *testing.T, m *Mirror, parent ID, name string) Entry {
	t.Helper()
	e, err := m.Lookup(parent, name)
	if err != nil {
		t.Fatalf("lookup %s: %v", name, err)
	}
	return e
}

// intentsOnDisk returns what mirror dir's IntentFile records.
func intentsOnDisk(t *testing.T, dir string) map[uint64]intentRecord {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, IntentFile))
	if err != nil {
		t.Fatal(err)
	}
	return parseLog(b)
}

func fileIno(t *testing.T, p string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestMirrorHandover hands a mirror set in use over, the old set closed
// as its process exiting would: the set's IDs reach the same objects,
// the read policy and the mirrors' states are the same, and the
// StateFiles are left as they were; open files read and write on both
// mirrors; a listing goes on where it stopped; the file being written
// stays recorded in the same IntentFile, which the adopted set clears
// once it serves; new objects get new IDs.
func TestMirrorHandover(t *testing.T) {
	dirs, list := mirrorHandoverDirs(t)
	old, err := NewMirror(dirs, MirrorOptions{Now: clock(), Policy: "roundrobin"})
	if err != nil {
		t.Fatal(err)
	}
	newHandoverLocal(t, dirs[0], false).Close() // skips when this process cannot open file handles
	cred := &Cred{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid())}
	c := mlookup(t, old, RootID, "c.txt")
	w := mlookup(t, old, RootID, "w.txt")
	ls := mlookup(t, old, RootID, "list")
	fc, err := old.Open(c.ID, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	fw, err := old.Open(w.ID, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fw.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	ne, fn, err := old.Create(cred, RootID, "new.txt", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fn.WriteAt([]byte("new"), 0); err != nil {
		t.Fatal(err)
	}
	dl, err := old.OpenDir(ls.ID)
	if err != nil {
		t.Fatal(err)
	}
	before := readDir(t, dl, 100)
	droot, err := old.OpenDir(RootID)
	if err != nil {
		t.Fatal(err)
	}
	rootBefore := readDir(t, droot, 2)
	stateFiles := map[string]string{}
	for _, d := range dirs {
		b, _ := os.ReadFile(filepath.Join(d, StateFile))
		stateFiles[d] = string(b)
	}
	logIno := fileIno(t, filepath.Join(dirs[0], IntentFile))
	old.mu.Lock()
	oldNext := old.nextID
	old.mu.Unlock()

	st, fds, err := old.Export()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Intents.Entries) == 0 {
		t.Errorf("the files written just now are not in the record handed over")
	}
	if err := old.StartResync(0); err == nil || !strings.Contains(err.Error(), "joining") {
		t.Errorf("a resync while handing over: %v, want it refused", err)
	}
	// The open files and directories, as fsys hands them.
	type fileOut struct {
		id    ID
		fds   []int
		flags uint32
	}
	var files []fileOut
	for _, x := range []struct {
		id ID
		f  *File
	}{{c.ID, fc}, {w.ID, fw}, {ne.ID, fn}} {
		mfds, flags := x.f.MirrorFds()
		if len(mfds) != 2 || mfds[0] < 0 || mfds[1] < 0 {
			t.Fatalf("file %d: descriptors %v, want one per mirror", x.id, mfds)
		}
		files = append(files, fileOut{x.id, dupFds(t, mfds), flags})
	}
	type dirOut struct {
		id     ID
		mirror int
		fd     int
		off    uint64
	}
	var ds []dirOut
	for _, x := range []struct {
		id ID
		d  *Dir
	}{{ls.ID, dl}, {RootID, droot}} {
		i, err := old.DirMirror(x.id, x.d)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, dirOut{x.id, i, dupFds(t, []int{x.d.Fd()})[0], x.d.Offset()})
	}
	st, fds = passMirror(t, st, fds)
	// The old process lets go and exits.
	old.Release()
	for _, f := range []*File{fc, fw, fn} {
		f.Close()
	}
	dl.Close()
	droot.Close()
	old.Close()
	if got := intentsOnDisk(t, dirs[0]); len(got) == 0 {
		t.Errorf("the old set cleared the record once it let go of it")
	}

	m, err := AdoptMirror(st, fds, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var adopted []*File
	for _, f := range files {
		af, err := m.AdoptFile(f.id, f.fds, f.flags)
		if err != nil {
			t.Fatal(err)
		}
		if !af.Mirrored() {
			t.Error("an adopted file of a mirror set is not Mirrored")
		}
		adopted = append(adopted, af)
	}
	var dirsIn []*Dir
	for _, d := range ds {
		nd, err := m.AdoptDir(d.id, d.mirror, d.fd, d.off)
		if err != nil {
			t.Fatal(err)
		}
		dirsIn = append(dirsIn, nd)
	}
	// Served again: the same IDs, states and policy.
	if e := mlookup(t, m, RootID, "c.txt"); e.ID != c.ID {
		t.Errorf("c.txt is %d after the handover, %d before", e.ID, c.ID)
	}
	if e := mlookup(t, m, RootID, "new.txt"); e.ID != ne.ID {
		t.Errorf("new.txt is %d after the handover, %d before", e.ID, ne.ID)
	}
	if p := m.Policy(); p != "roundrobin" {
		t.Errorf("read policy %q after the handover", p)
	}
	for i, s := range m.Stats() {
		if s.State != Healthy || s.Dir != dirs[i] {
			t.Errorf("mirror %d after the handover: %+v", i, s)
		}
	}
	if got := intentsOnDisk(t, dirs[1]); len(got) == 0 {
		t.Errorf("the record was cleared before the adopted set serves")
	}
	m.Activate()
	if got := readFile(t, adopted[0], 10); got != "sea" {
		t.Errorf("c.txt reads %q after the handover", got)
	}
	if _, err := adopted[1].WriteAt([]byte(" world"), 5); err != nil {
		t.Fatal(err)
	}
	if _, err := adopted[2].WriteAt([]byte("er"), 3); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		for name, want := range map[string]string{"w.txt": "hello world", "new.txt": "newer"} {
			if b, err := os.ReadFile(filepath.Join(d, name)); err != nil || string(b) != want {
				t.Errorf("%s in %s: %q, %v; want %q", name, d, b, err, want)
			}
		}
	}
	checkListing(t, list, before, readDir(t, dirsIn[0], -1))
	rest := readDir(t, dirsIn[1], -1)
	for _, name := range append(rootBefore, rest...) {
		if IsStateFile(name) {
			t.Errorf("the root's listing shows %s after the handover", name)
		}
	}
	checkListing(t, []string{".", "..", "c.txt", "w.txt", "new.txt", "list"}, rootBefore, rest)
	// New objects get new IDs; one made on both mirrors.
	e, f, err := m.Create(cred, RootID, "later.txt", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if e.ID < oldNext {
		t.Errorf("a new object got ID %d, below the next ID %d handed over", e.ID, oldNext)
	}
	f.WriteAt([]byte("later"), 0)
	f.Close()
	for _, d := range dirs {
		if b, err := os.ReadFile(filepath.Join(d, "later.txt")); err != nil || string(b) != "later" {
			t.Errorf("later.txt in %s: %q, %v", d, b, err)
		}
	}
	// The record goes on in the same file, and is cleared once the
	// writes are over.
	if ino := fileIno(t, filepath.Join(dirs[0], IntentFile)); ino != logIno {
		t.Errorf("the record was made anew (inode %d, was %d)", ino, logIno)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(intentsOnDisk(t, dirs[0])) > 0 || len(intentsOnDisk(t, dirs[1])) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the record still holds %v after 5 s", intentsOnDisk(t, dirs[0]))
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, d := range dirs {
		if b, _ := os.ReadFile(filepath.Join(d, StateFile)); string(b) != stateFiles[d] {
			t.Errorf("%s's state file changed across the handover: %q, was %q", d, b, stateFiles[d])
		}
	}
	for _, f := range adopted {
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}
	for _, d := range dirsIn {
		d.Close()
	}
}

func dupFds(t *testing.T, fds []int) []int {
	t.Helper()
	out := make([]int, len(fds))
	for i, fd := range fds {
		out[i] = -1
		if fd >= 0 {
			d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = d
		}
	}
	return out
}

// TestMirrorHandoverStale: a stale mirror stays stale in the adopted set,
// which writes nothing to it, and the StateFiles stay as they were (no
// startup comparison, no new marks).
func TestMirrorHandoverStale(t *testing.T) {
	dirs, _ := mirrorHandoverDirs(t)
	st0, _ := readState(dirs[0])
	st1, _ := readState(dirs[1])
	st0.Stale = []string{st1.ID}
	writeState(dirs[0], st0)
	// The stale mirror differs: a fresh start would compare nothing of
	// it, and nor does an adoption.
	os.WriteFile(filepath.Join(dirs[1], "extra"), nil, 0o644)
	old, err := NewMirror(dirs, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	w := mlookup(t, old, RootID, "w.txt")
	ms, fds, err := old.Export()
	if err != nil {
		t.Fatal(err)
	}
	ms, fds = passMirror(t, ms, fds)
	old.Release()
	old.Close()
	state0, _ := os.ReadFile(filepath.Join(dirs[0], StateFile))
	m, err := AdoptMirror(ms, fds, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	m.Activate()
	if s := m.Stats(); s[0].State != Healthy || s[1].State != Stale {
		t.Errorf("states after the handover %s, %s; want healthy, stale", s[0].State, s[1].State)
	}
	f, err := m.Open(w.ID, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if b, _ := os.ReadFile(filepath.Join(dirs[0], "w.txt")); string(b) != "x" {
		t.Errorf("the healthy mirror's w.txt: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dirs[1], "w.txt")); string(b) != "" {
		t.Errorf("the stale mirror was written: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dirs[0], StateFile)); string(b) != string(state0) {
		t.Errorf("the state file changed: %q, was %q", b, state0)
	}
}

// TestMirrorHandoverRefused: no handover while a resync runs or a mirror
// joins; one not taken (Resume) leaves the set as it was, its record of
// files written cleared as before.
func TestMirrorHandoverRefused(t *testing.T) {
	dirs, _ := mirrorHandoverDirs(t)
	m, err := NewMirror(dirs, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	for _, c := range []struct {
		set  func(bool)
		want string
	}{
		{func(on bool) { m.resyncing = on }, "a resync is running"},
		{func(on bool) { m.adding = on }, "a mirror is joining the set"},
	} {
		m.mu.Lock()
		c.set(true)
		m.mu.Unlock()
		if _, _, err := m.Export(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Export: %v, want an error saying %q", err, c.want)
		}
		m.mu.Lock()
		c.set(false)
		m.mu.Unlock()
	}
	_, fds, err := m.Export()
	if err != nil {
		t.Fatal(err)
	}
	for _, fd := range fds {
		unix.Close(fd)
	}
	if _, _, err := m.Export(); err == nil {
		t.Error("a second Export while the first is not decided")
	}
	m.Resume()
	if err := m.StartResync(0); err == nil || !strings.Contains(err.Error(), "no mirror is stale") {
		t.Errorf("a resync after the handover was not taken: %v", err)
	}
	w := mlookup(t, m, RootID, "w.txt")
	f, err := m.Open(w.ID, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if len(intentsOnDisk(t, dirs[0])) == 0 {
		t.Error("a write after the handover was not taken is not recorded")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(intentsOnDisk(t, dirs[0])) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the record is not cleared after the handover was not taken")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestMirrorHandoverNotTaken: a set adopted and then dropped (the old
// process kept the mount) writes nothing of the record of files being
// written, which the old set, resumed, goes on writing and clearing.
func TestMirrorHandoverNotTaken(t *testing.T) {
	dirs, _ := mirrorHandoverDirs(t)
	old, err := NewMirror(dirs, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	w := mlookup(t, old, RootID, "w.txt")
	f, err := old.Open(w.ID, syscall.O_RDWR)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("one"), 0); err != nil {
		t.Fatal(err)
	}
	st, fds, err := old.Export()
	if err != nil {
		t.Fatal(err)
	}
	ms, mfds := passMirror(t, st, dupFds(t, fds))
	for _, fd := range fds {
		unix.Close(fd)
	}
	logs := map[string]string{}
	for _, d := range dirs {
		b, _ := os.ReadFile(filepath.Join(d, IntentFile))
		logs[d] = string(b)
	}
	m, err := AdoptMirror(ms, mfds, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * intentLinger) // a clearing would have run by now
	m.Release()
	m.Close()
	for _, d := range dirs {
		if b, _ := os.ReadFile(filepath.Join(d, IntentFile)); string(b) != logs[d] {
			t.Errorf("the set adopted and dropped wrote %s in %s", IntentFile, d)
		}
	}
	old.Resume()
	if _, err := f.WriteAt([]byte("two"), 3); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if b, _ := os.ReadFile(filepath.Join(d, "w.txt")); string(b) != "onetwo" {
			t.Errorf("w.txt in %s: %q", d, b)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(intentsOnDisk(t, dirs[0])) > 0 || len(intentsOnDisk(t, dirs[1])) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the resumed set does not clear its record")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
