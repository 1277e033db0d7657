package backing

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sluice/throttle"
)

// Resyncing is the state of a stale mirror being made equal again.
const Resyncing = "resyncing"

// Resync makes the stale mirrors equal to the first healthy one and
// returns them to service, copying at most rate bytes a second (0: no
// bound). The mount keeps serving meanwhile from the healthy mirrors: a
// first pass removes what the healthy mirror lacks (making room), then
// copies everything that differs, with no lock held. Each later pass
// copies what the set changed since the pass before: with the changes
// let through, as the first, while files of more than lastPassBytes in
// all were written (up to maxPasses passes); the last with the set's
// changes held off (lookups, opens and reads go on). Then each resynced
// mirror is opened for every object and file in use and read and
// written again. It returns once the mirrors are healthy, or with the
// first error (the mirrors then stay stale).
//
// The copy opens nothing it could block on (a FIFO swapped in for a file
// is not opened for reading, and is skipped when it keeps changing), and
// each of its steps (a system call on one object, a chunk of a file, a
// lock awaited) has a deadline, a minute by default: a step still blocked
// then fails the resync. The step is left to return on its own, and no
// resync starts before it has.
func (m *Mirror) Resync(rate int64) error {
	targets, err := m.beginResync()
	if err != nil {
		return err
	}
	return m.resync(targets, rate)
}

// StartResync is Resync in the background: it returns at once, with an
// error only when there is nothing to resync or a resync is running.
// LastResync reports how it ended.
func (m *Mirror) StartResync(rate int64) error {
	targets, err := m.beginResync()
	if err != nil {
		return err
	}
	go m.resync(targets, rate)
	return nil
}

// LastResync describes how the last resync ended: "" while none has
// ended, "ok", or its error.
func (m *Mirror) LastResync() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastResync
}

func (m *Mirror) beginResync() ([]int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.resyncing {
		return nil, errors.New("a resync is already running")
	}
	if m.blocked != "" {
		return nil, fmt.Errorf("the last resync gave up on a step still blocked (%s): no resync starts before it returns", m.blocked)
	}
	var targets []int
	for i, s := range m.set.StaleMarks() {
		if s {
			targets = append(targets, i)
		}
	}
	if len(targets) == 0 {
		return nil, errors.New("no mirror is stale: nothing to resync")
	}
	m.resyncing = true
	for _, i := range targets {
		m.resynced[i] = 0
		m.copying[i] = true
	}
	return targets, nil
}

func (m *Mirror) resync(targets []int, rate int64) (err error) {
	s := &steps{m: m, limit: m.stepLimit}
	if s.limit <= 0 {
		s.limit = stepLimit
	}
	defer func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.tracking, m.tracked, m.moved = false, nil, nil
		m.resyncing = false
		for _, i := range targets {
			m.copying[i] = false
		}
		m.lastResync = "ok"
		if err != nil {
			m.lastResync = err.Error()
			m.log("%v", err)
		}
	}()
	// Record every change of the set from here on, for the passes after
	// the first: no change is under way while tracking begins.
	if !lockWithin(&m.wmu, s.limit) {
		return fmt.Errorf("resync: the changes under way did not end within %v", s.limit)
	}
	m.mu.Lock()
	src := m.set.Live()[0]
	m.tracking, m.tracked, m.moved, m.wholeTree, m.trackSrc = true, map[*mobj]*change{}, nil, false, src
	m.mu.Unlock()
	m.wmu.Unlock()
	p := &pacer{meter: throttle.NewMeter(max(rate, 0)), pause: s.pause}
	for _, i := range targets {
		err := s.do(m.dirs[i], func() error {
			if err := m.prune(src, i, s); err != nil {
				return err
			}
			return m.copyTree(src, i, p, nil, true, s)
		}, nil)
		if err != nil {
			return fmt.Errorf("resync of %s from %s: %v", m.dirs[i], m.dirs[src], err)
		}
	}
	if m.betweenPasses != nil {
		m.betweenPasses()
	}
	for pass := 2; ; pass++ {
		// What changed since the pass before, taken with the set's
		// changes held off a moment.
		if !lockWithin(&m.wmu, s.limit) {
			return fmt.Errorf("resync: the changes under way did not end within %v", s.limit)
		}
		changes, whole := m.changes(src)
		written := map[string]bool{} // files written: copied whatever their size and time
		for _, ch := range changes {
			if ch.kind == dataChange {
				written[ch.path] = true
			}
		}
		var size int64
		err := s.do(m.dirs[src], func() (err error) {
			size, err = m.sizeOf(src, written, s)
			return err
		}, nil)
		if err != nil {
			m.wmu.Unlock()
			return fmt.Errorf("resync from %s: %v", m.dirs[src], err)
		}
		if size <= lastPassBytes || pass == maxPasses {
			err := m.finish(src, targets, p, changes, whole, written, s)
			m.wmu.Unlock()
			return err
		}
		// Much to copy: copy it with the changes let through, and take
		// those made meanwhile next.
		m.mu.Lock()
		m.tracked, m.moved, m.wholeTree = map[*mobj]*change{}, nil, false
		m.mu.Unlock()
		m.wmu.Unlock()
		for _, i := range targets {
			err := s.do(m.dirs[i], func() error { return m.copyChanged(src, i, p, changes, whole, written, true, s) }, nil)
			if err != nil {
				return fmt.Errorf("resync of %s from %s: %v", m.dirs[i], m.dirs[src], err)
			}
		}
	}
}

// A resync's passes after the first copy what changed since the pass
// before; the last holds the set's changes off while it does. Passes
// with the changes let through come first while the files written since
// hold more than lastPassBytes in all, up to maxPasses passes.
const (
	lastPassBytes = 4 << 20
	maxPasses     = 5
)

// finish copies what changed, with the set's changes held off (wmu held
// by the caller), and brings the mirrors back.
func (m *Mirror) finish(src int, targets []int, p *pacer, changes []pathChange, whole bool, written map[string]bool, s *steps) error {
	// The last pass copies unpaced: the set's changes wait on it.
	p.meter = throttle.NewMeter(0)
	p.entries = 0
	for _, i := range targets {
		err := s.do(m.dirs[i], func() error { return m.copyChanged(src, i, p, changes, whole, written, false, s) }, nil)
		if err != nil {
			return fmt.Errorf("resync of %s from %s: %v", m.dirs[i], m.dirs[src], err)
		}
	}
	m.mu.Lock()
	m.lastPass = p.entries
	m.mu.Unlock()
	// The operations that make, open or close the set's objects and
	// files wait while the resynced mirrors' counterparts are found.
	if !lockWithin(&m.omu, s.limit) {
		return fmt.Errorf("resync: the opens under way did not end within %v", s.limit)
	}
	defer m.omu.Unlock()
	for _, i := range targets {
		var rv *revival
		err := s.do(m.dirs[i], func() (err error) {
			rv, err = m.prepareRevive(src, i, s)
			return err
		}, func() { rv.undo(m, i) })
		if err != nil {
			return fmt.Errorf("resync of %s: %v", m.dirs[i], err)
		}
		m.commitRevive(src, i, rv)
	}
	return nil
}

// copyChanged makes what changed in mirror src equal in mirror dst: the
// changes one by one, or the whole tree when whole says so or they cannot
// be copied one by one. busy says the set's changes run meanwhile.
func (m *Mirror) copyChanged(src, dst int, p *pacer, changes []pathChange, whole bool, written map[string]bool, busy bool, s *steps) error {
	err := errWholeTree
	if !whole {
		err = m.copyChanges(src, dst, p, changes, written, busy, s)
	}
	if err == errWholeTree {
		err = m.copyTree(src, dst, p, written, busy, s)
	}
	return err
}

// sizeOf is how many bytes the regular files at paths hold in mirror src.
func (m *Mirror) sizeOf(src int, paths map[string]bool, s *steps) (int64, error) {
	root, err := unix.Open(m.dirs[src], dirFlags, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(root)
	var total int64
	for rel := range paths {
		if err := s.step(rel); err != nil {
			return 0, err
		}
		fd, err := unix.Openat2(root, strings.TrimPrefix(rel, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH})
		if err != nil {
			continue // gone: nothing to copy
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFREG {
			total += st.Size
		}
		unix.Close(fd)
	}
	return total, nil
}

// errWholeTree says the last pass must walk the whole tree: what changed
// cannot be copied object by object.
var errWholeTree = errors.New("the whole tree must be compared")

// pathChange is a change of the set during a resync, by path.
type pathChange struct {
	path string // from the root: "/" or "/a/b"
	kind changeKind
}

// changes lists the objects the set changed since the resync began (or
// since the pass before took them), by their paths in mirror src, parents
// before children; whole says the pass must walk the whole tree instead
// (see Mirror.wholeTree). Called with the set's changes held off.
func (m *Mirror) changes(src int) (out []pathChange, whole bool) {
	m.mu.Lock()
	whole = m.wholeTree
	for _, p := range m.moved {
		out = append(out, pathChange{p, movedIn})
	}
	held := map[*mobj]*change{}
	for o, c := range m.tracked {
		switch {
		case c.lost:
			whole = true
		case c.forgotten && c.path != "":
			out = append(out, pathChange{c.path, c.kind})
		case !c.forgotten:
			held[o] = c
		}
	}
	m.mu.Unlock()
	for o, c := range held {
		// An object removed needs nothing: the change of its parent's
		// entries removes it.
		p, ok := m.pathOf(src, o)
		if !ok {
			whole = true
		} else if p != "" {
			out = append(out, pathChange{p, c.kind})
		}
	}
	depth := func(p string) int {
		if p == "/" {
			return 0
		}
		return strings.Count(p, "/")
	}
	slices.SortFunc(out, func(a, b pathChange) int {
		if d := depth(a.path) - depth(b.path); d != 0 {
			return d
		}
		if c := strings.Compare(a.path, b.path); c != 0 {
			return c
		}
		return int(a.kind) - int(b.kind)
	})
	return slices.Compact(out), whole // the same rename made again, once
}

// copyChanges makes what changed in mirror src since the pass before
// equal in mirror dst: the entries of each changed directory (a
// subdirectory whose modification time differs is compared in turn, a
// new one copied whole), each changed object's attributes, and the
// content of each file written (whatever its size and time). It returns
// errWholeTree when dst lacks a directory that the changes assume. busy
// says the set's changes run meanwhile.
func (m *Mirror) copyChanges(src, dst int, p *pacer, changes []pathChange, written map[string]bool, busy bool, s *steps) error {
	sroot, droot, err := m.openRoots(src, dst)
	if err != nil {
		return err
	}
	defer unix.Close(sroot)
	defer unix.Close(droot)
	c := &copier{m: m, src: src, dst: dst, p: p, s: s, links: map[devIno]string{}, rootD: droot, pruned: true,
		compared: map[string]bool{}, written: written, busy: busy}
	for _, ch := range changes {
		if err := s.step(ch.path); err != nil {
			return err
		}
		if ch.path == "/" {
			c.compared[""] = true
			if err := c.dir(sroot, droot, "", true); err != nil {
				return err
			}
			continue
		}
		parent, name := path.Split(ch.path)
		sp, err := openBeneath(sroot, parent)
		if noDir(err) {
			continue // gone since: the change of its parent's entries removes it
		}
		if err != nil {
			return err
		}
		dp, err := openBeneath(droot, parent)
		if err != nil {
			unix.Close(sp)
			if noDir(err) {
				return errWholeTree
			}
			return err
		}
		c.inside = true // a changed directory: its own entries are compared
		c.whole = ch.kind == movedIn
		err = c.entry(sp, dp, name, ch.path)
		c.inside, c.whole = false, false
		unix.Close(sp)
		unix.Close(dp)
		if err != nil {
			return err
		}
	}
	return nil
}

// openRoots opens the root directories of mirrors src and dst.
func (m *Mirror) openRoots(src, dst int) (sfd, dfd int, err error) {
	if sfd, err = unix.Open(m.dirs[src], dirFlags, 0); err != nil {
		return -1, -1, err
	}
	if dfd, err = unix.Open(m.dirs[dst], dirFlags, 0); err != nil {
		unix.Close(sfd)
		return -1, -1, err
	}
	return sfd, dfd, nil
}

// noDir reports whether err says a path leads to no directory.
func noDir(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP)
}

// openBeneath opens directory rel under root, through no symlink.
func openBeneath(root int, rel string) (int, error) {
	rel = strings.Trim(rel, "/")
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(root, rel, &unix.OpenHow{Flags: dirFlags, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH})
}

// How a resync opens a directory: never through a symlink, and never
// waiting (O_NONBLOCK: what is there now is not a directory it could wait
// on, but the flag costs nothing).
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC

// pacer bounds the copy rate with the throttle's exact meter, and counts
// the objects compared.
type pacer struct {
	meter   *throttle.Meter
	entries int
	pause   func(until time.Time) // told before each sleep
}

// pay charges n bytes copied and waits until they are paid for.
func (p *pacer) pay(n int64) {
	now := monoNow()
	if d := time.Duration(p.meter.Pay(now, n) - now); d > 0 {
		if p.pause != nil {
			p.pause(time.Now().Add(d))
		}
		time.Sleep(d)
	}
}

// copyTree makes mirror dst's tree equal to mirror src's, walking both by
// descriptor (never through a symlink). busy says the set's changes run
// meanwhile (a resync's first pass).
func (m *Mirror) copyTree(src, dst int, p *pacer, written map[string]bool, busy bool, s *steps) error {
	sfd, dfd, err := m.openRoots(src, dst)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	defer unix.Close(dfd)
	c := &copier{m: m, src: src, dst: dst, p: p, s: s, links: map[devIno]string{}, rootD: dfd, written: written, busy: busy}
	return c.dir(sfd, dfd, "", true)
}

type copier struct {
	m        *Mirror
	src, dst int
	p        *pacer
	s        *steps
	links    map[devIno]string // source file with several links -> its first path in dst
	rootD    int
	// pruned: a resync's pass after the first, which compares a
	// directory present in both mirrors only when it changed (see
	// copyChanges); then inside says the next entry is a changed object.
	pruned, inside bool
	whole          bool            // in the pruned pass: compare every directory below, whatever its time
	compared       map[string]bool // directories whose entries the pruned pass compared
	written        map[string]bool // files to copy whatever their size and time, by path
	// busy: the set's changes run meanwhile (the first pass), so an
	// object may be renamed or removed between its lstat and its copy.
	busy bool
}

func names(fd int) ([]string, error) {
	nfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}

// dir makes directory dfd equal to sfd (rel is its path in the tree).
func (c *copier) dir(sfd, dfd int, rel string, root bool) error {
	if err := c.s.step(rel + "/"); err != nil {
		return err
	}
	snames, err := names(sfd)
	if err != nil {
		return err
	}
	dnames, err := names(dfd)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, name := range snames {
		keep[name] = true
	}
	// What src lacks goes first: what it frees makes room for the copies.
	for _, name := range dnames {
		if root && IsStateFile(name) || keep[name] {
			continue
		}
		if err := c.s.step(rel + "/" + name); err != nil {
			return err
		}
		if err := removeAll(dfd, name); err != nil {
			return err
		}
	}
	for _, name := range snames {
		if root && IsStateFile(name) {
			continue
		}
		if err := c.entry(sfd, dfd, name, rel+"/"+name); err != nil {
			return err
		}
	}
	return nil
}

// prune removes from mirror dst's tree, before a resync copies anything
// to it, what mirror src's lacks or holds as another type: what that
// frees makes room for the copies, whichever directories they go to.
func (m *Mirror) prune(src, dst int, s *steps) error {
	sfd, dfd, err := m.openRoots(src, dst)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	defer unix.Close(dfd)
	return pruneDir(sfd, dfd, "", s)
}

func pruneDir(sfd, dfd int, rel string, s *steps) error {
	if err := s.step(rel + "/"); err != nil {
		return err
	}
	stypes, err := types(sfd)
	if err != nil {
		return err
	}
	dtypes, err := types(dfd)
	if err != nil {
		return err
	}
	for name, dt := range dtypes {
		if rel == "" && IsStateFile(name) {
			continue
		}
		if err := s.step(rel + "/" + name); err != nil {
			return err
		}
		st, ok := stypes[name]
		if !ok || st != dt {
			if err := removeAll(dfd, name); err != nil {
				return err
			}
			continue
		}
		if dt != os.ModeDir {
			continue
		}
		// The set's changes run meanwhile: a source directory gone or
		// replaced since is left to the copy.
		sd, err := unix.Openat(sfd, name, dirFlags, 0)
		if noDir(err) {
			continue
		}
		if err != nil {
			return err
		}
		d, err := unix.Openat(dfd, name, dirFlags, 0)
		if err == nil {
			err = pruneDir(sd, d, rel+"/"+name, s)
			unix.Close(d)
		}
		unix.Close(sd)
		if err != nil {
			return err
		}
	}
	return nil
}

// types lists directory fd's entries with their types (os.ModeDir,
// os.ModeSymlink, ...; 0 for a regular file).
func types(fd int) (map[string]os.FileMode, error) {
	nfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), "dir")
	defer f.Close()
	des, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	out := make(map[string]os.FileMode, len(des))
	for _, de := range des {
		out[de.Name()] = de.Type()
	}
	return out, nil
}

func lstatAt(fd int, name string) (st unix.Stat_t, err error) {
	err = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// entry makes name in dfd equal to name in sfd. An object renamed or
// removed meanwhile in a busy pass is left to the next pass, which sees
// where it ended (the last holds the set's changes off). One replaced by another
// between its lstat and its open (swapped with a rename, in the mirror
// itself or through the set) is compared again, and left as dst has it
// when it keeps changing.
func (c *copier) entry(sfd, dfd int, name, rel string) error {
	for try := 1; ; try++ {
		err := c.copyEntry(sfd, dfd, name, rel)
		if c.busy && noDir(err) {
			return nil
		}
		if err != errSwapped {
			return err
		}
		if try == swapTries {
			c.m.log("resync of %s: %s was replaced %d times while being copied: left as it was", c.m.dirs[c.dst], rel, try)
			return nil
		}
	}
}

// errSwapped says the object opened is not the one an lstat found: another
// was renamed into its place meanwhile.
var errSwapped = errors.New("replaced while being copied")

// swapTries is how often entry compares an object that keeps being
// replaced.
const swapTries = 3

// sameObject reports whether fd is the object st describes: ErrSwapped
// when another was renamed into its place since.
func sameObject(fd int, st *unix.Stat_t) error {
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		return err
	}
	if now.Mode&syscall.S_IFMT != st.Mode&syscall.S_IFMT || now.Ino != st.Ino || now.Dev != st.Dev {
		return errSwapped
	}
	return nil
}

// openSame opens name in dirfd with flags, never waiting, and checks that
// it is the object st describes.
func openSame(dirfd int, name string, flags int, st *unix.Stat_t) (int, error) {
	fd, err := unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENXIO):
		return -1, errSwapped // not of the type flags open
	case err != nil:
		return -1, err
	}
	if err := sameObject(fd, st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func (c *copier) copyEntry(sfd, dfd int, name, rel string) error {
	if err := c.s.step(rel); err != nil {
		return err
	}
	c.p.entries++
	st, err := lstatAt(sfd, name)
	if errors.Is(err, syscall.ENOENT) {
		return nil // removed meanwhile: the next pass sees it gone
	}
	if err != nil {
		return err
	}
	if c.busy && c.m.afterLstat != nil {
		c.m.afterLstat(rel)
	}
	typ := st.Mode & syscall.S_IFMT
	dt, derr := lstatAt(dfd, name)
	if derr == nil && dt.Mode&syscall.S_IFMT != typ {
		if err := removeAll(dfd, name); err != nil {
			return err
		}
		derr = syscall.ENOENT
	}
	if derr != nil && !errors.Is(derr, syscall.ENOENT) {
		return derr
	}
	missing := derr != nil
	inside, force := c.inside, c.written[rel]
	c.inside = false
	switch typ {
	case syscall.S_IFDIR:
		if missing {
			if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
				return err
			}
		} else if c.pruned && !c.whole && (c.compared[rel] || !inside && dt.Mtim == st.Mtim) {
			// Compared already; or its entries are as dst has them, or
			// it changed through the set and is compared as a change of
			// its own.
			return nil
		}
		if c.pruned {
			c.compared[rel] = true
		}
		s, err := openSame(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY, &st)
		if err != nil {
			return err
		}
		defer unix.Close(s)
		d, err := unix.Openat(dfd, name, dirFlags, 0)
		if err != nil {
			return err
		}
		defer unix.Close(d)
		if err := c.dir(s, d, rel, false); err != nil {
			return err
		}
		return copyMeta(s, d, &st)
	case syscall.S_IFREG:
		key := devIno{st.Dev, st.Ino}
		if st.Nlink > 1 {
			if first, ok := c.links[key]; ok {
				if !missing {
					if ft, err := lstatAt(c.rootD, strings.TrimPrefix(first, "/")); err == nil && ft.Ino == dt.Ino {
						return nil
					}
					if err := unix.Unlinkat(dfd, name, 0); err != nil {
						return err
					}
					missing = true
				}
				err := unix.Linkat(c.rootD, strings.TrimPrefix(first, "/"), dfd, name, 0)
				if !c.busy || !noDir(err) {
					return err
				}
				// Its first name went meanwhile (and was not copied):
				// this one is copied, and is the first from now on. Had
				// it stayed uncopied, a directory the next passes do
				// not compare would lack it.
			}
			c.links[key] = rel
		}
		if c.pruned && st.Nlink > 1 && (missing || force || dt.Size != st.Size || dt.Mtim != st.Mtim) {
			// Its other names may be anywhere in the tree.
			return errWholeTree
		}
		if !missing && dt.Nlink > 1 {
			// Linked elsewhere in dst where the source is not: a file of
			// its own.
			if err := unix.Unlinkat(dfd, name, 0); err != nil {
				return err
			}
			missing = true
		}
		return c.file(sfd, dfd, name, rel, &st, missing || force || dt.Size != st.Size || dt.Mtim != st.Mtim)
	case syscall.S_IFLNK:
		target, err := readlinkAt(sfd, name)
		if errors.Is(err, syscall.EINVAL) {
			return errSwapped // no longer a symlink
		}
		if err != nil {
			return err
		}
		if !missing {
			if cur, err := readlinkAt(dfd, name); err == nil && cur == target {
				return linkMeta(dfd, name, &st)
			}
			if err := unix.Unlinkat(dfd, name, 0); err != nil {
				return err
			}
		}
		if err := unix.Symlinkat(target, dfd, name); err != nil {
			return err
		}
		return linkMeta(dfd, name, &st)
	default: // fifos, sockets, devices
		if !missing && dt.Rdev != st.Rdev {
			if err := unix.Unlinkat(dfd, name, 0); err != nil {
				return err
			}
			missing = true
		}
		// O_PATH: a FIFO or a device is not opened for I/O.
		sp, err := openSame(sfd, name, unix.O_PATH, &st)
		if err != nil {
			return err
		}
		defer unix.Close(sp)
		if missing {
			if err := unix.Mknodat(dfd, name, st.Mode, int(st.Rdev)); err != nil {
				return err
			}
		}
		fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return copyMeta(sp, fd, &st)
	}
}

// file copies a regular file's content when changed, then its metadata.
// A write that falls short (a mirror without room) fails the copy.
func (c *copier) file(sfd, dfd int, name, rel string, st *unix.Stat_t, changed bool) error {
	s, err := c.openSource(sfd, name, rel, st)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	flags := unix.O_WRONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	if changed {
		flags |= unix.O_CREAT | unix.O_TRUNC
	}
	d, err := unix.Openat(dfd, name, flags, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	if changed {
		// Up to the size seen: a file growing meanwhile is caught up by
		// the next pass.
		buf := make([]byte, 1<<20)
		var off int64
		for off < st.Size {
			if err := c.s.step(rel); err != nil {
				return err
			}
			if err := c.fault(c.src, (*Faults).read); err != nil {
				return fmt.Errorf("copying %s: %v", rel, err)
			}
			n, err := unix.Pread(s, buf[:min(int64(len(buf)), st.Size-off)], off)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			if err := c.fault(c.dst, (*Faults).write); err != nil {
				return fmt.Errorf("copying %s: %v", rel, err)
			}
			if w, err := pwriteAll(d, buf[:n], off); err != nil {
				return fmt.Errorf("copying %s: %v at byte %d of %d", rel, err, off+int64(w), st.Size)
			}
			off += int64(n)
			c.m.mu.Lock()
			c.m.resynced[c.dst] += int64(n)
			c.m.mu.Unlock()
			c.p.pay(int64(n))
		}
		if err := unix.Ftruncate(d, off); err != nil {
			return fmt.Errorf("copying %s: %v", rel, err)
		}
		// Flushing what was written may take a while: the step's
		// deadline grows by a second for each syncRate bytes.
		if err := c.s.step(rel); err != nil {
			return err
		}
		c.s.pause(time.Now().Add(time.Duration(off / syncRate * int64(time.Second))))
		if err := unix.Fsync(d); err != nil {
			return fmt.Errorf("copying %s: %v", rel, err)
		}
	}
	return copyMeta(s, d, st)
}

// fault injects into a read of mirror i's disk (op (*Faults).read) or a
// write to it ((*Faults).write) what MirrorOptions.Faults hold for it.
func (c *copier) fault(i int, op func(*Faults) error) error {
	if i >= len(c.m.faults) || c.m.faults[i] == nil {
		return nil
	}
	return op(c.m.faults[i])
}

// openSource opens regular file name in sfd for reading, without waiting:
// errSwapped when it is not the file st describes. A file that cannot be
// opened without waiting (a lease held on it, being broken) is tried
// again for a second before the copy fails.
func (c *copier) openSource(sfd int, name, rel string, st *unix.Stat_t) (int, error) {
	wait := 10 * time.Millisecond
	for waited := time.Duration(0); ; waited += wait {
		fd, err := openSame(sfd, name, unix.O_RDONLY, st)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fd, err
		}
		if waited >= time.Second {
			return -1, fmt.Errorf("opening %s: %v", rel, err)
		}
		time.Sleep(wait)
	}
}

// syncRate is the slowest rate, in bytes a second, at which a resync's
// flush of a file it wrote is not taken for blocked.
const syncRate = 16 << 20

// pwriteAll writes all of b at off, or says how much it wrote and why it
// stopped: a write that falls short with no error is retried from where
// it stopped, and one that writes nothing fails with ENOSPC.
func pwriteAll(fd int, b []byte, off int64) (written int, err error) {
	for written < len(b) {
		n, err := unix.Pwrite(fd, b[written:], off+int64(written))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return written, err
		}
		if n <= 0 {
			return written, syscall.ENOSPC
		}
		written += n
	}
	return written, nil
}

// copyMeta gives d the owner, mode, extended attributes (ACLs among them)
// and times of s.
func copyMeta(s, d int, st *unix.Stat_t) error {
	if err := unix.Fchownat(d, "", int(st.Uid), int(st.Gid), unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, procPath(d), st.Mode&0o7777, 0); err != nil {
		return err
	}
	if err := copyXattrs(procPath(s), procPath(d)); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(d, "", ts, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
}

// linkMeta gives symlink name in dfd the owner and times of st.
func linkMeta(dfd int, name string, st *unix.Stat_t) error {
	if err := unix.Fchownat(dfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return unix.UtimesNanoAt(dfd, name, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
}

func copyXattrs(s, d string) error {
	list := func(p string) ([]string, error) {
		buf := make([]byte, 64<<10)
		n, err := unix.Listxattr(p, buf)
		if err != nil {
			if err == syscall.ENOTSUP {
				return nil, nil
			}
			return nil, err
		}
		var out []string
		for _, b := range strings.Split(string(buf[:n]), "\x00") {
			if b != "" {
				out = append(out, b)
			}
		}
		return out, nil
	}
	snames, err := list(s)
	if err != nil {
		return err
	}
	dnames, err := list(d)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	buf := make([]byte, 64<<10)
	for _, name := range snames {
		have[name] = true
		n, err := unix.Getxattr(s, name, buf)
		if err != nil {
			return err
		}
		if err := unix.Setxattr(d, name, buf[:n], 0); err != nil {
			return err
		}
	}
	for _, name := range dnames {
		if !have[name] {
			if err := unix.Removexattr(d, name); err != nil && err != syscall.ENODATA {
				return err
			}
		}
	}
	return nil
}

func readlinkAt(fd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// removeAll removes name in dfd and, for a directory, all it holds.
func removeAll(dfd int, name string) error {
	err := unix.Unlinkat(dfd, name, 0)
	if err == nil || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if !errors.Is(err, syscall.EISDIR) && !errors.Is(err, syscall.EPERM) {
		return err
	}
	d, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	ns, err := names(d)
	if err == nil {
		for _, n := range ns {
			if err = removeAll(d, n); err != nil {
				break
			}
		}
	}
	unix.Close(d)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
}

// revival is what prepareRevive readies for commitRevive: the
// counterparts in mirror dst of the set's objects and open files.
type revival struct {
	subs     map[ID]ID  // the set's object -> its counterpart in dst
	opened   []*File    // files opened in dst ...
	openedIn []*fileSet // ... for these open files of the set
}

// prepareRevive finds in mirror dst (equal to src now) a counterpart of
// every object and open file of the set. Called with the set's changes
// held off.
func (m *Mirror) prepareRevive(src, dst int, s *steps) (*revival, error) {
	st, ok := m.trees[src].(*Local)
	if !ok {
		return nil, errors.New("the source mirror cannot name its objects")
	}
	root, err := st.path(RootID)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	objs := make(map[ID]*mobj, len(m.objs))
	for id, o := range m.objs {
		objs[id] = o
	}
	files := make([]*fileSet, 0, len(m.open))
	for s := range m.open {
		files = append(files, s)
	}
	m.mu.Unlock()
	rv := &revival{subs: map[ID]ID{}}
	for id, o := range objs {
		if id == RootID || o.sub[src] == 0 {
			continue
		}
		p, err := st.path(o.sub[src])
		if err != nil {
			continue // no longer named: nothing will reach it in dst
		}
		rel, ok := strings.CutPrefix(p, root)
		if !ok {
			continue
		}
		if err := s.step(rel); err != nil {
			rv.undo(m, dst)
			return nil, err
		}
		if sub, err := m.walk(dst, rel); err == nil {
			rv.subs[id] = sub
		}
	}
	ids := make(map[*mobj]ID, len(objs))
	for id, o := range objs {
		ids[o] = id
	}
	for _, fs := range files {
		if fs.files[dst] != nil || fs.obj == nil {
			continue
		}
		sub := rv.subs[ids[fs.obj]]
		if sub == 0 {
			continue // an unnamed file: dst has no counterpart
		}
		if err := s.step("an open file"); err != nil {
			rv.undo(m, dst)
			return nil, err
		}
		f, err := m.trees[dst].Open(sub, fs.flags)
		if err != nil {
			rv.undo(m, dst)
			return nil, fmt.Errorf("reopening a file in use: %v", err)
		}
		rv.opened = append(rv.opened, f)
		rv.openedIn = append(rv.openedIn, fs)
	}
	return rv, nil
}

// undo lets go of what prepareRevive readied in mirror dst.
func (rv *revival) undo(m *Mirror, dst int) {
	if rv == nil {
		return
	}
	for _, f := range rv.opened {
		f.Close()
	}
	for _, sub := range rv.subs {
		m.trees[dst].Forget(sub, 1)
	}
	rv.opened, rv.openedIn, rv.subs = nil, nil, nil
}

// commitRevive gives every object and open file of the set its
// counterpart in mirror dst, as prepareRevive found them, and returns dst
// to service. Called with the set's changes held off.
func (m *Mirror) commitRevive(src, dst int, rv *revival) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, sub := range rv.subs {
		o := m.objs[id]
		if o == nil || o.sub[dst] == sub {
			m.trees[dst].Forget(sub, 1) // gone, or held already
			continue
		}
		if old := o.sub[dst]; old != 0 {
			// What dst held for it was replaced by the copy.
			delete(m.keys[dst], old)
			m.trees[dst].Forget(old, 1)
		}
		if other, dup := m.keys[dst][sub]; dup && other != id {
			m.trees[dst].Forget(sub, 1)
			continue
		}
		o.sub[dst] = sub
		m.keys[dst][sub] = id
	}
	for k, fs := range rv.openedIn {
		fs.files[dst] = rv.opened[k]
	}
	m.set.Revive(dst)
	m.saveState()
	m.log("mirror %s is healthy again: resynced from %s", m.dirs[dst], m.dirs[src])
}

// stepLimit is how long one step of a resync may take by default (see
// Mirror.Resync).
const stepLimit = time.Minute

// steps runs a resync's work on goroutines of their own and watches it
// step by step: a step under way for longer than limit fails the resync,
// whose goroutine (holding the set's locks) stops waiting for it. What
// the step was blocked in is left to return on its own; the work stops at
// its next step, and Mirror.blocked keeps other resyncs off until then.
type steps struct {
	m     *Mirror
	limit time.Duration

	mu      sync.Mutex
	what    string    // the step under way: the path it works on
	since   time.Time // when it began; for a pause, when the pause ends
	running bool      // a job runs
	gaveUp  bool      // the resync gave up on it: it stops at its next step
}

// errGaveUp stops a job the resync gave up on.
var errGaveUp = errors.New("the resync gave up on this step")

// step marks the start of a step on what (a path); it fails once the
// resync gave up on the job.
func (s *steps) step(what string) error {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gaveUp {
		return errGaveUp
	}
	s.what, s.since = what, now
	return nil
}

// pause says the job waits on purpose until t (pacing, a flush given
// time): the step's deadline counts from then.
func (s *steps) pause(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.since = t
}

// do runs job on a goroutine of its own and returns its error, or an
// error saying which step blocked once one has been under way for longer
// than the limit. Then discard, when not nil, runs on the job's goroutine
// once the job returns: what the job made is not used.
func (s *steps) do(what string, job func() error, discard func()) error {
	s.mu.Lock()
	s.what, s.since, s.running = what, time.Now(), true
	s.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		err := job()
		s.mu.Lock()
		s.running = false
		gaveUp := s.gaveUp
		s.mu.Unlock()
		if gaveUp {
			if discard != nil {
				discard()
			}
			s.m.mu.Lock()
			s.m.blocked = ""
			s.m.mu.Unlock()
		}
		done <- err
	}()
	t := time.NewTimer(s.limit)
	defer t.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-t.C:
		}
		s.mu.Lock()
		if !s.running {
			s.mu.Unlock()
			return <-done
		}
		if left := time.Until(s.since.Add(s.limit)); left > 0 {
			s.mu.Unlock()
			t.Reset(left)
			continue
		}
		s.gaveUp = true
		msg := fmt.Sprintf("a step on %s blocked for more than %v", s.what, s.limit)
		s.m.mu.Lock()
		s.m.blocked = msg
		s.m.mu.Unlock()
		s.mu.Unlock()
		return errors.New(msg)
	}
}

// lockWithin locks l for writing, or gives up after d; it reports whether
// it locked it. A lock given up on is released as soon as it is taken.
func lockWithin(l *sync.RWMutex, d time.Duration) bool {
	if l.TryLock() {
		return true
	}
	var mu sync.Mutex
	got, late := make(chan struct{}), false
	go func() {
		l.Lock()
		mu.Lock()
		defer mu.Unlock()
		if late {
			l.Unlock()
			return
		}
		close(got)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-got:
		return true
	case <-t.C:
	}
	mu.Lock()
	defer mu.Unlock()
	select {
	case <-got:
		return true
	default:
		late = true
		return false
	}
}

// walk looks up the path rel (from the root) in mirror i and returns its
// object there with one reference.
func (m *Mirror) walk(i int, rel string) (ID, error) {
	t := m.trees[i]
	cur := RootID
	for _, name := range strings.Split(strings.Trim(rel, "/"), "/") {
		if name == "" {
			continue
		}
		e, err := t.Lookup(cur, name)
		if cur != RootID {
			t.Forget(cur, 1)
		}
		if err != nil {
			return 0, err
		}
		cur = e.ID
	}
	return cur, nil
}

// path is where the object id is now, as an absolute path.
func (t *Local) path(id ID) (string, error) {
	in, err := t.acquire(id)
	if err != nil {
		return "", err
	}
	defer t.release(in)
	p, err := os.Readlink(procPath(in.fd))
	if err != nil {
		return "", err
	}
	if strings.HasSuffix(p, " (deleted)") {
		return "", syscall.ENOENT
	}
	return p, nil
}
