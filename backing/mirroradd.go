package backing

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sluice/mirror"
)

// addWait is how long AddMirror waits for the set's changes and opens
// under way to end before it lets the new mirror in.
const addWait = 3 * time.Second

// AddMirror adds directory dir (an absolute path) to the running set as
// a new mirror, stale: it is recorded as a stale member in every healthy
// mirror's StateFile first (a restart given it keeps it stale), gets a
// StateFile of its own with a new identity (never another mirror's), and
// joins the set, which serves on from the healthy mirrors until a resync
// (Resync) copies the set onto it and returns it to service. mountpoint,
// when not empty, is where the set is served: dir must not be inside it.
//
// dir must be a directory, not a mirror of the set already, neither
// inside a mirror (or the mount) nor holding one, and either empty, a
// copy of a mirror (cp -a, rsync -a: the StateFile it carries is
// replaced, and what it recorded of files being written is removed), or
// holding at its top level only names the set has, of the same types (a
// copy made without the state files, which the resync tops up): what a
// resync would remove is refused. No resync may be running. notes say
// what was done, for the user; the log says it too.
func (m *Mirror) AddMirror(dir, mountpoint string) (notes []string, err error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("mirror %s: want an absolute path", dir)
	}
	dir = filepath.Clean(dir)
	if err := m.beginAdd(); err != nil {
		return nil, err
	}
	defer func() {
		m.mu.Lock()
		m.adding = false
		m.mu.Unlock()
	}()
	m.mu.Lock()
	dirs, selves := slices.Clone(m.dirs), slices.Clone(m.self)
	src := dirs[m.set.Live()[0]]
	full := m.set.Mirrors() >= mirror.MaxMirrors
	m.mu.Unlock()
	if full {
		return nil, fmt.Errorf("mirror %s: a mirror set has at most %d mirrors, and this one has them all", dir, mirror.MaxMirrors)
	}
	if err := checkMirrorDir(dir); err != nil {
		return nil, err
	}
	if err := apart(dir, dirs, mountpoint); err != nil {
		return nil, err
	}
	id := newMirrorID()
	notes, err = vetJoining(dir, dirs, selves, src, id)
	if err != nil {
		return nil, err
	}
	// What the directory holds of a set's own files is another
	// mirror's, or another set's.
	for _, name := range []string{StateFile, StateFile + ".new", IntentFile, IntentFile + ".new"} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("mirror %s: %v", dir, err)
		}
	}
	lo := m.lopts
	if n := len(dirs); n < len(m.faults) {
		lo.Faults = m.faults[n]
	}
	t, err := NewLocal(dir, lo)
	if err != nil {
		return nil, fmt.Errorf("mirror %s: %v", dir, err)
	}
	if err := m.join(dir, t, id); err != nil {
		t.Close()
		return nil, err
	}
	note := fmt.Sprintf("mirror %s joined the set (id %s), stale: the set serves from the others until sluice resync copies it onto it", dir, id)
	m.log("%s", note)
	return append(notes, note), nil
}

// beginAdd marks an AddMirror under way, unless a resync runs (one
// change of the set's members at a time).
func (m *Mirror) beginAdd() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case m.adding:
		return errors.New("another mirror is joining the set: add this one once it has joined")
	case m.resyncing:
		return errors.New("a resync is running (sluice stat shows its progress): add the mirror once it has ended")
	case m.blocked != "":
		return fmt.Errorf("the last resync gave up on a step still blocked (%s): no mirror joins before it returns", m.blocked)
	}
	m.adding = true
	return nil
}

// join lets mirror dir, open as t with identity id, into the set: with
// its changes and opens held off, it records the new mirror as stale in
// every healthy mirror's StateFile, writes dir's own, and grows the
// set's per-mirror state.
func (m *Mirror) join(dir string, t Tree, id string) error {
	if !lockWithin(&m.wmu, addWait) {
		return fmt.Errorf("mirror %s: the changes under way did not end within %v: try again", dir, addWait)
	}
	defer m.wmu.Unlock()
	if !lockWithin(&m.omu, addWait) {
		return fmt.Errorf("mirror %s: the opens under way did not end within %v: try again", dir, addWait)
	}
	defer m.omu.Unlock()
	m.mu.Lock()
	n := len(m.dirs)
	m.mu.Unlock()
	if m.intents != nil {
		m.intents.grow(n + 1)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Recorded stale before dir has an identity: a restart between the
	// two finds it without one, new to the set, and stale all the same.
	if err := m.recordState(id); err != nil {
		return fmt.Errorf("mirror %s: %v", dir, err)
	}
	if err := writeState(dir, mirrorState{ID: id}); err != nil {
		return fmt.Errorf("mirror %s: %v", dir, err)
	}
	i, err := m.set.Add()
	if err != nil {
		return fmt.Errorf("mirror %s: %v", dir, err)
	}
	if i != n {
		panic(fmt.Sprintf("backing: mirror %d added as %d", n, i))
	}
	m.dirs = append(m.dirs, dir)
	m.trees = append(m.trees, t)
	m.self = append(m.self, id)
	m.copying = append(m.copying, false)
	m.resynced = append(m.resynced, 0)
	m.keys = append(m.keys, map[ID]ID{RootID: RootID})
	for _, o := range m.objs {
		o.sub = append(o.sub, 0)
	}
	m.objs[RootID].sub[n] = RootID
	return nil
}

// recordState is saveState with one more stale mirror, of identity id,
// not in the set yet. Called with m.mu held.
func (m *Mirror) recordState(id string) error {
	var ids []string
	for j, s := range m.set.StaleMarks() {
		if s {
			ids = append(ids, m.self[j])
		}
	}
	ids = append(ids, id)
	var first error
	saved := false
	for _, j := range m.set.Live() {
		if err := writeState(m.dirs[j], mirrorState{ID: m.self[j], Stale: ids}); err != nil {
			m.log("mirror %s: recording the set's state: %v", m.dirs[j], err)
			first = cmpOr(first, err)
			continue
		}
		saved = true
	}
	if !saved {
		return fmt.Errorf("recording the set's state: %w", first)
	}
	return nil
}

// grow gives the record a place for mirrors up to n, once no write of
// the logs is under way.
func (in *intents) grow(n int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for in.saving {
		in.cond.Wait()
	}
	for len(in.logs) < n {
		in.logs = append(in.logs, nil)
	}
}

// newMirrorID returns a new mirror identity.
func newMirrorID() string {
	var id [8]byte
	rand.Read(id[:])
	return hex.EncodeToString(id[:])
}

// checkMirrorDir checks that dir is a directory.
func checkMirrorDir(dir string) error {
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("mirror %s does not exist: make it first (mkdir %s), empty, or as a copy of a mirror", dir, dir)
	case errors.Is(err, syscall.ENOTCONN):
		return fmt.Errorf("mirror %s is a FUSE mount whose server died: unmount it first (fusermount3 -u %s)", dir, dir)
	case err != nil:
		return fmt.Errorf("mirror %s: %v", dir, err)
	case !st.IsDir():
		return fmt.Errorf("mirror %s is not a directory", dir)
	}
	return nil
}

// apart checks that dir is none of the set's mirrors dirs and that
// neither holds the other, nor dir and the mount point (when given):
// a resync of dir would copy a mirror into itself, or remove what it
// holds. A mirror that cannot be reached (a failed disk's, stale) is
// compared by its path alone.
func apart(dir string, dirs []string, mountpoint string) error {
	up, err := ancestors(dir)
	if err != nil {
		return fmt.Errorf("mirror %s: %v", dir, err)
	}
	self := up[0]
	type other struct{ path, what string }
	var others []other
	for _, d := range dirs {
		others = append(others, other{d, "mirror " + d})
	}
	if mountpoint != "" {
		others = append(others, other{mountpoint, "the mount " + mountpoint})
	}
	for _, o := range others {
		oup, err := ancestors(o.path)
		switch {
		case err != nil && o.path == mountpoint:
			return fmt.Errorf("%s: %v", o.what, err)
		case err != nil && filepath.Clean(o.path) == dir:
			return fmt.Errorf("mirror %s is already in the set: it is %s", dir, o.what)
		case err != nil:
			continue
		}
		switch {
		case oup[0] == self && o.path == mountpoint:
			return fmt.Errorf("mirror %s is the mount point: give a directory outside the mount", dir)
		case oup[0] == self:
			return fmt.Errorf("mirror %s is already in the set: it is %s", dir, o.what)
		case slices.Contains(up[1:], oup[0]):
			return fmt.Errorf("mirror %s is inside %s: give a directory outside the set's mirrors and the mount", dir, o.what)
		case slices.Contains(oup[1:], self):
			return fmt.Errorf("mirror %s holds %s: give a directory outside the set's mirrors and the mount", dir, o.what)
		}
	}
	return nil
}

// ancestors returns the device and inode of p (symlinks resolved) and of
// each directory above it, up to the root.
func ancestors(p string) ([]devIno, error) {
	p, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, err
	}
	var out []devIno
	for {
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			return nil, err
		}
		out = append(out, devIno{st.Dev, st.Ino})
		up := filepath.Dir(p)
		if up == p {
			return out, nil
		}
		p = up
	}
}

// vetJoining says whether dir may join the set whose mirrors are dirs
// (with identities selves; src the first healthy one) as the mirror of
// identity id, and what is to be said of it: a copy of a mirror (its
// StateFile names one of the set), or a directory whose top level holds
// only what src's does (empty among them). Anything else would lose
// what it holds to the resync: it is refused, saying what to do.
func vetJoining(dir string, dirs, selves []string, src, id string) (notes []string, err error) {
	b, err := os.ReadFile(filepath.Join(dir, StateFile))
	switch {
	case err == nil:
		var ms mirrorState
		if err := json.Unmarshal(b, &ms); err != nil || ms.ID == "" {
			return nil, fmt.Errorf("%s is not a mirror state file (%v); move it away to start afresh", filepath.Join(dir, StateFile), err)
		}
		if j := slices.Index(selves, ms.ID); j >= 0 {
			return []string{fmt.Sprintf("mirror %s holds a copy of mirror %s's %s (the same id %s): it gets an id of its own (%s), and the resync makes it equal",
				dir, dirs[j], StateFile, ms.ID, id)}, nil
		}
		notes = append(notes, fmt.Sprintf("mirror %s holds the %s of a mirror not in this set (id %s): it gets an id of its own (%s)", dir, StateFile, ms.ID, id))
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("mirror %s: %v", dir, err)
	}
	diffs, empty, err := topLevelExtra(dir, src)
	if err != nil {
		return nil, err
	}
	switch {
	case len(diffs) > 0:
		if len(diffs) > 5 {
			diffs = append(diffs[:5], fmt.Sprintf("and %d more", len(diffs)-5))
		}
		return nil, fmt.Errorf("mirror %s holds what the set does not, which the resync would remove:\n  %s\n"+
			"give an empty directory, or a copy of a mirror (cp -a %s DIR, or rsync -aHAX --exclude='/%s*' %s/ DIR/)",
			dir, strings.Join(diffs, "\n  "), src, StateFile, src)
	case empty:
		notes = append(notes, fmt.Sprintf("mirror %s is empty: the resync copies the whole set onto it", dir))
	default:
		notes = append(notes, fmt.Sprintf("mirror %s holds names of the set's top level: the resync copies only what differs", dir))
	}
	return notes, nil
}

// topLevelExtra lists the names at dir's top level that src's lacks or
// holds as another type; empty says dir holds nothing (the set's own
// files aside).
func topLevelExtra(dir, src string) (diffs []string, empty bool, err error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, false, fmt.Errorf("mirror %s: %v", dir, err)
	}
	empty = true
	for _, de := range des {
		if IsStateFile(de.Name()) {
			continue
		}
		empty = false
		fi, err := os.Lstat(filepath.Join(src, de.Name()))
		switch {
		case errors.Is(err, os.ErrNotExist):
			diffs = append(diffs, fmt.Sprintf("%s is not in %s", de.Name(), src))
		case err != nil:
			return nil, false, fmt.Errorf("mirror %s: %v", src, err)
		case fi.Mode().Type() != de.Type():
			diffs = append(diffs, fmt.Sprintf("%s is of another type in %s", de.Name(), src))
		}
	}
	return diffs, empty, nil
}
