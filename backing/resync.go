package backing

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sluice/resync"
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
	if m.adding {
		return nil, errors.New("a mirror is joining the set: resync once it has joined")
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
	p := &resync.Pacer{Meter: throttle.NewMeter(max(rate, 0)), Now: monoNow, Pause: s.Pause}
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
func (m *Mirror) finish(src int, targets []int, p *resync.Pacer, changes []pathChange, whole bool, written map[string]bool, s *steps) error {
	// The last pass copies unpaced: the set's changes wait on it.
	p.Meter = throttle.NewMeter(0)
	p.Entries = 0
	for _, i := range targets {
		err := s.do(m.dirs[i], func() error { return m.copyChanged(src, i, p, changes, whole, written, false, s) }, nil)
		if err != nil {
			return fmt.Errorf("resync of %s from %s: %v", m.dirs[i], m.dirs[src], err)
		}
	}
	m.mu.Lock()
	m.lastPass = p.Entries
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
func (m *Mirror) copyChanged(src, dst int, p *resync.Pacer, changes []pathChange, whole bool, written map[string]bool, busy bool, s *steps) error {
	err := resync.ErrWholeTree
	if !whole {
		err = m.copyChanges(src, dst, p, changes, written, busy, s)
	}
	if err == resync.ErrWholeTree {
		err = m.copyTree(src, dst, p, written, busy, s)
	}
	return err
}

// sizeOf is how many bytes the regular files at paths hold in mirror src.
func (m *Mirror) sizeOf(src int, paths map[string]bool, s *steps) (int64, error) {
	root, err := resync.OpenRoot(m.dirs[src])
	if err != nil {
		return 0, err
	}
	defer unix.Close(root)
	var total int64
	for rel := range paths {
		if err := s.Step(rel); err != nil {
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
// resync.ErrWholeTree when dst lacks a directory that the changes assume.
// busy says the set's changes run meanwhile.
func (m *Mirror) copyChanges(src, dst int, p *resync.Pacer, changes []pathChange, written map[string]bool, busy bool, s *steps) error {
	sroot, droot, err := m.openRoots(src, dst)
	if err != nil {
		return err
	}
	defer unix.Close(sroot)
	defer unix.Close(droot)
	chs := make([]resync.Change, len(changes))
	for k, ch := range changes {
		chs[k] = resync.Change{Path: ch.path, Moved: ch.kind == movedIn}
	}
	return m.copier(src, dst, p, written, busy, s).Changes(sroot, droot, chs)
}

// openRoots opens the root directories of mirrors src and dst.
func (m *Mirror) openRoots(src, dst int) (sfd, dfd int, err error) {
	if sfd, err = resync.OpenRoot(m.dirs[src]); err != nil {
		return -1, -1, err
	}
	if dfd, err = resync.OpenRoot(m.dirs[dst]); err != nil {
		unix.Close(sfd)
		return -1, -1, err
	}
	return sfd, dfd, nil
}

// copyTree makes mirror dst's tree equal to mirror src's, walking both by
// descriptor (never through a symlink). busy says the set's changes run
// meanwhile (a resync's first pass).
func (m *Mirror) copyTree(src, dst int, p *resync.Pacer, written map[string]bool, busy bool, s *steps) error {
	sfd, dfd, err := m.openRoots(src, dst)
	if err != nil {
		return err
	}
	defer unix.Close(sfd)
	defer unix.Close(dfd)
	return m.copier(src, dst, p, written, busy, s).Tree(sfd, dfd)
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
	return (&resync.Copier{Steps: s, Skip: IsStateFile}).Prune(sfd, dfd)
}

// copier is the copy of mirror src onto mirror dst for one pass: paced by
// p and watched by s, with the set's own files left alone, the mirrors'
// injected faults consulted for each chunk, the bytes copied counted in
// the set's stats, and what keeps being replaced logged. busy says the
// set's changes run meanwhile; written names the files copied whatever
// their size and time.
func (m *Mirror) copier(src, dst int, p *resync.Pacer, written map[string]bool, busy bool, s *steps) *resync.Copier {
	return &resync.Copier{
		Steps:       s,
		Pacer:       p,
		Written:     written,
		Busy:        busy,
		Skip:        IsStateFile,
		BeforeRead:  func() error { return m.fault(src, (*Faults).read) },
		BeforeWrite: func() error { return m.fault(dst, (*Faults).write) },
		Copied: func(n int64) {
			m.mu.Lock()
			m.resynced[dst] += n
			m.mu.Unlock()
		},
		Logf: func(format string, args ...any) {
			m.log("resync of %s: "+format, append([]any{m.dirs[dst]}, args...)...)
		},
		AfterLstat: m.afterLstat,
	}
}

// fault injects into a read of mirror i's disk (op (*Faults).read) or a
// write to it ((*Faults).write) what MirrorOptions.Faults hold for it.
func (m *Mirror) fault(i int, op func(*Faults) error) error {
	if i >= len(m.faults) || m.faults[i] == nil {
		return nil
	}
	return op(m.faults[i])
}

// copyMeta gives d the owner, mode, extended attributes (ACLs among them)
// and times of s, as a resync's copy does.
func copyMeta(s, d int, st *unix.Stat_t) error { return resync.CopyMeta(s, d, st) }

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
		if err := s.Step(rel); err != nil {
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
		if err := s.Step("an open file"); err != nil {
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

// A resync's copy tells steps of its steps (resync.Copier.Steps).
var _ resync.Steps = (*steps)(nil)

// errGaveUp stops a job the resync gave up on.
var errGaveUp = errors.New("the resync gave up on this step")

// Step marks the start of a step on what (a path); it fails once the
// resync gave up on the job.
func (s *steps) Step(what string) error {
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gaveUp {
		return errGaveUp
	}
	s.what, s.since = what, now
	return nil
}

// Pause says the job waits on purpose until t (pacing, a flush given
// time): the step's deadline counts from then.
func (s *steps) Pause(t time.Time) {
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
