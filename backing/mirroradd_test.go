package backing

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"sluice/internal/treetest"
)

// TestMirrorAdd: an empty directory joins a running set of two, stale,
// while a file is held open and written, and another goroutine looks
// up, stats, reads, makes, writes and removes files throughout (the
// race detector watches the set's state growing under them); reads stay
// on the healthy mirrors; the resync makes it equal and returns it to service, after
// which writes through the file held open all along reach it and reads
// go to it; its state file has an identity of its own, and the set
// opened again with the three directories finds all three healthy.
func TestMirrorAdd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the set creates objects with the caller's credentials, which needs root")
	}
	dirs := mirrorDirs(t, 2, map[string]string{"a": "first", "b": strings.Repeat("b", 1<<20)})
	var logged syncLog
	// Round robin, so that reads are spread over every healthy mirror.
	m, err := NewMirror(dirs, MirrorOptions{Now: clock(), Log: logged.logf, Policy: "roundrobin"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { m.Close() }()
	e, held, err := m.Create(&Cred{}, RootID, "held", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Forget(e.ID, 1)
	if _, err := held.WriteAt([]byte("before the add"), 0); err != nil {
		t.Fatal(err)
	}

	stop, busy := make(chan struct{}), make(chan error)
	go func() { busy <- churn(m, stop) }()
	defer func() {
		if stop != nil {
			close(stop)
			<-busy
		}
	}()

	nd := filepath.Join(t.TempDir(), "new")
	os.Mkdir(nd, 0o755)
	notes, err := m.AddMirror(nd, "")
	if err != nil {
		t.Fatalf("add %s: %v", nd, err)
	}
	if all := strings.Join(notes, "\n"); !strings.Contains(all, "is empty") || !strings.Contains(all, "joined the set") {
		t.Errorf("notes of an empty directory added: %q", notes)
	}
	if s := m.Stats(); len(s) != 3 || s[2].State != Stale || s[2].Dir != nd {
		t.Fatalf("stats after the add: %+v", s)
	}
	// Recorded stale in the healthy mirrors: a restart keeps it stale.
	st0, _ := readState(dirs[0])
	st2, _ := readState(nd)
	if !strings.Contains(strings.Join(st0.Stale, " "), st2.ID) {
		t.Errorf("%s records stale %v, not the new mirror's id %s", dirs[0], st0.Stale, st2.ID)
	}
	// Served from the healthy mirrors meanwhile; writes miss it.
	if _, err := held.WriteAt([]byte("while stale"), 0); err != nil {
		t.Fatal(err)
	}
	f, err := m.Open(m.mustLookup(t, "b"), syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	for off := int64(0); off < 1<<20; off += 4096 {
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
	}
	if s := m.Stats(); s[2].Reads != 0 {
		t.Errorf("%d reads went to the stale new mirror", s[2].Reads)
	}
	if _, err := os.Stat(filepath.Join(nd, "held")); err == nil {
		t.Errorf("a write reached the stale new mirror")
	}

	if err := m.Resync(0); err != nil {
		t.Fatal(err)
	}
	close(stop)
	stop = nil
	if err := <-busy; err != nil {
		t.Fatalf("the set's user during the add and the resync: %v", err)
	}
	if s := m.Stats(); s[2].State != Healthy {
		t.Fatalf("the new mirror after the resync: %s", s[2].State)
	}
	if _, err := held.WriteAt([]byte("after the resync"), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(nd, "held")); !bytes.HasPrefix(b, []byte("after the resync")) {
		t.Errorf("the new mirror holds %q after a write through a file open since before the add", b)
	}
	for off := int64(0); off < 1<<20; off += 4096 {
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
	}
	if s := m.Stats(); s[2].Reads == 0 {
		t.Errorf("no read went to the new mirror once healthy: %+v", s)
	}
	f.Close()
	held.Close()
	treetest.Same(t, dirs[0], nd, StateFile)
	st0, _ = readState(dirs[0])
	st2, _ = readState(nd)
	if st2.ID == "" || st2.ID == st0.ID || len(st0.Stale) != 0 {
		t.Errorf("state files after the resync: %+v and %+v", st0, st2)
	}

	m.Close()
	m, err = NewMirror(append(dirs, nd), MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatalf("the set opened again with the new mirror: %v", err)
	}
	for _, s := range m.Stats() {
		if s.State != Healthy {
			t.Errorf("%s opened again: %s", s.Dir, s.State)
		}
	}
}

// TestMirrorAddCopied: a copy of a mirror made with cp -a, its state
// file with it, joins as a copy, not as the mirror copied: it gets an
// identity of its own, what the copy recorded of files being written is
// removed, and the resync makes it equal.
func TestMirrorAddCopied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the set creates objects with the caller's credentials, which needs root")
	}
	dirs := mirrorDirs(t, 2, map[string]string{"a": "1"})
	m, err := NewMirror(dirs, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cp := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", dirs[0], cp).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(cp, "extra"), []byte("only in the copy"), 0o644)
	os.WriteFile(filepath.Join(cp, IntentFile), []byte("the first mirror's"), 0o600)
	_, _, err = m.Create(&Cred{}, RootID, "after", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	st0, _ := readState(dirs[0])
	notes, err := m.AddMirror(cp, "")
	if err != nil {
		t.Fatalf("add a copy: %v", err)
	}
	if want := "holds a copy of mirror " + dirs[0] + "'s " + StateFile + " (the same id " + st0.ID + "): it gets an id of its own"; !strings.Contains(strings.Join(notes, "\n"), want) {
		t.Errorf("notes %q do not say %q", notes, want)
	}
	if st, _ := readState(cp); st.ID == st0.ID || st.ID == "" {
		t.Errorf("the copy's id after the add: %q (the first mirror's is %s)", st.ID, st0.ID)
	}
	if _, err := os.Stat(filepath.Join(cp, IntentFile)); err == nil {
		t.Errorf("the copy's %s was kept", IntentFile)
	}
	if err := m.Resync(0); err != nil {
		t.Fatal(err)
	}
	treetest.Same(t, dirs[0], cp, StateFile)
}

// TestMirrorAddRefused: what may not join a set is refused with what to
// do, and leaves the set as it was; no mirror joins while a resync runs.
func TestMirrorAddRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the set creates objects with the caller's credentials, which needs root")
	}
	dirs := mirrorDirs(t, 2, map[string]string{"a": "1"})
	os.Mkdir(filepath.Join(dirs[0], "sub"), 0o755)
	os.Mkdir(filepath.Join(dirs[1], "sub"), 0o755)
	m, err := NewMirror(dirs, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	os.WriteFile(file, nil, 0o644)
	full := filepath.Join(tmp, "full")
	os.Mkdir(full, 0o755)
	os.WriteFile(filepath.Join(full, "precious"), []byte("data"), 0o644)
	os.WriteFile(filepath.Join(full, "a"), []byte("1"), 0o644)
	wrongType := filepath.Join(tmp, "type")
	os.MkdirAll(filepath.Join(wrongType, "a"), 0o755)
	seeded := filepath.Join(tmp, "seeded")
	os.MkdirAll(filepath.Join(seeded, "sub"), 0o755)
	os.WriteFile(filepath.Join(seeded, "a"), []byte("old"), 0o644)
	holder := filepath.Join(tmp, "holder")
	os.Mkdir(holder, 0o755)
	inner := filepath.Join(holder, "m")
	os.Mkdir(inner, 0o755)
	for _, c := range []struct{ dir, mountpoint, want string }{
		{"relative/dir", "", "want an absolute path"},
		{filepath.Join(tmp, "missing"), "", "does not exist: make it first"},
		{file, "", "is not a directory"},
		{dirs[1] + "/.", "", "is already in the set: it is mirror " + dirs[1]},
		{filepath.Join(dirs[0], "sub"), "", "is inside mirror " + dirs[0]},
		{filepath.Dir(dirs[0]), "", "holds mirror " + dirs[0]},
		{inner, holder, "is inside the mount " + holder},
		{full, "", "precious is not in " + dirs[0]},
		{full, "", "give an empty directory, or a copy of a mirror"},
		{wrongType, "", "a is of another type in " + dirs[0]},
	} {
		_, err := m.AddMirror(c.dir, c.mountpoint)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("add %s: %v, want an error saying %q", c.dir, err, c.want)
		}
	}
	if s := m.Stats(); len(s) != 2 {
		t.Fatalf("%d mirrors after the refusals", len(s))
	}
	if _, err := os.Stat(filepath.Join(full, StateFile)); err == nil {
		t.Errorf("a refused directory got a state file")
	}
	// A resync running: refused; a directory seeded with names of the
	// set's top level joins once it has ended.
	if _, err := m.AddMirror(seeded, ""); err != nil {
		t.Fatalf("add a seeded directory: %v", err)
	}
	other := filepath.Join(tmp, "other")
	os.Mkdir(other, 0o755)
	var addErr error
	m.betweenPasses = func() { _, addErr = m.AddMirror(other, "") }
	if err := m.Resync(0); err != nil {
		t.Fatal(err)
	}
	if addErr == nil || !strings.Contains(addErr.Error(), "a resync is running") {
		t.Errorf("add during a resync: %v", addErr)
	}
	m.betweenPasses = nil
	treetest.Same(t, dirs[0], seeded, StateFile)
	if _, err := m.AddMirror(other, ""); err != nil {
		t.Errorf("add once the resync ended: %v", err)
	}
}

// churn uses set m as a mount's callers do until stop is closed: it
// looks up and stats the root's files, reads one, and makes, writes,
// renames and removes others.
func churn(m *Mirror, stop chan struct{}) error {
	buf := make([]byte, 8192)
	for k := 0; ; k++ {
		select {
		case <-stop:
			return nil
		default:
		}
		if _, err := m.Getattr(RootID); err != nil {
			return fmt.Errorf("getattr: %v", err)
		}
		e, err := m.Lookup(RootID, "b")
		if err != nil {
			return fmt.Errorf("lookup: %v", err)
		}
		f, err := m.Open(e.ID, syscall.O_RDONLY)
		if err != nil {
			return fmt.Errorf("open: %v", err)
		}
		_, err = f.ReadAt(buf, int64(k%128)*8192)
		f.Close()
		m.Forget(e.ID, 1)
		if err != nil {
			return fmt.Errorf("read: %v", err)
		}
		name := fmt.Sprint("churn", k%8)
		ce, cf, err := m.Create(&Cred{}, RootID, name+".tmp", syscall.O_RDWR|syscall.O_TRUNC, 0o644)
		if err != nil {
			return fmt.Errorf("create: %v", err)
		}
		_, err = cf.WriteAt(bytes.Repeat([]byte{byte(k)}, 1000+k%5000), 0)
		cf.Close()
		m.Forget(ce.ID, 1)
		if err != nil {
			return fmt.Errorf("write: %v", err)
		}
		if err := m.Rename(RootID, name+".tmp", RootID, name, 0); err != nil {
			return fmt.Errorf("rename: %v", err)
		}
		if k%3 == 0 {
			if err := m.Unlink(RootID, fmt.Sprint("churn", (k+4)%8)); err != nil && err != syscall.ENOENT {
				return fmt.Errorf("unlink: %v", err)
			}
		}
	}
}

// mustLookup looks name up in the root.
func (m *Mirror) mustLookup(t *testing.T, name string) ID {
	t.Helper()
	e, err := m.Lookup(RootID, name)
	if err != nil {
		t.Fatal(err)
	}
	return e.ID
}

// syncLog collects a set's log lines from many goroutines.
type syncLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *syncLog) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, format)
}
