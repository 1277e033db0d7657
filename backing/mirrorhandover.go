package backing

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sluice/mirror"
)

// Handing a mirror set over to another process (a takeover), as
// handover.go does for a Local tree. The set's own state goes with each
// mirror's tree (Local.Export): the set's IDs and their objects in each
// mirror, which mirrors are stale and the read policy (taken as they
// are: the adopting process neither reads the StateFiles afresh, beyond
// checking the mirrors' identities, nor compares the mirrors, nor
// replays the record of files being written), and that record itself:
// its entries, and each healthy mirror's IntentFile by its descriptor and
// the offset its frames end at, so that the files being written stay
// recorded across the handover in the one log file each mirror has.
//
// From Export to the verdict the handing set writes nothing of its own
// (its record's clearing is stopped) and refuses a resync and a mirror
// add; then either Resume (not taken) lets it go on, or Release (taken)
// lets go of the record without a word to it, which the adopting set's
// Activate then goes on writing and clearing. An adopted set that does not
// serve (Release, before Activate) leaves it unwritten too.
//
// Not carried: the mirrors' read counters and latency figures (the read
// policy learns them again), a resync's or a mirror add's progress
// (neither may run), and the watchdog of hedged reads (started again by
// the first read that needs it).

// MirrorState is a mirror set's state as handed to another process
// (Mirror.Export, AdoptMirror): plain data, JSON-encodable. Descriptors
// are indexes into the list handed beside it: each mirror's tree's in
// turn (TreeFds of them each, indexed from its first as LocalState
// does), then the record's logs (indexed in the whole list).
type MirrorState struct {
	Dirs  []string `json:"dirs"`
	Self  []string `json:"self"` // each mirror's identity (StateFile)
	Stale []bool   `json:"stale"`
	// Policy is the read policy in force.
	Policy     string         `json:"policy"`
	Trees      []LocalState   `json:"trees"`
	TreeFds    []int          `json:"tree_fds"`
	Objects    []MirrorObject `json:"objects"`
	NextID     ID             `json:"next_id"`
	Opens      uint64         `json:"opens"`
	Resynced   []int64        `json:"resynced,omitempty"`
	LastResync string         `json:"last_resync,omitempty"`
	// Figures are each mirror's counters, which go on.
	Figures []mirror.Stats `json:"figures,omitempty"`
	Intents IntentState    `json:"intents"`
}

// MirrorObject is one of the set's objects: its ID, its ID in each
// mirror's tree (0 where it has none) and the kernel's references.
type MirrorObject struct {
	ID   ID     `json:"id"`
	Sub  []ID   `json:"sub"`
	Refs uint64 `json:"refs"`
}

// IntentState is the set's record of files being written (IntentFile).
type IntentState struct {
	NextID  uint64        `json:"next_id"`
	Entries []IntentEntry `json:"entries,omitempty"`
	// Pending are changes of the record not yet in the logs (a write of
	// them failed).
	Pending []intentOp `json:"pending,omitempty"`
	// Logs are per mirror: the log open, -1 where none is.
	Logs []IntentLogState `json:"logs"`
}

// IntentEntry is a file recorded as being written: Object is its ID in
// the set, 0 when the set has forgotten it (it stays recorded until
// cleared).
type IntentEntry struct {
	ID      uint64       `json:"id"`
	Object  ID           `json:"object,omitempty"`
	Rec     intentRecord `json:"rec"`
	Holders int          `json:"holders"`
}

// IntentLogState is one mirror's IntentFile open for appending: Fd is
// the index of its descriptor (-1: none open), Off where its frames end.
type IntentLogState struct {
	Fd   int   `json:"fd"`
	Off  int64 `json:"off"`
	Size int64 `json:"size"`
}

// handoverWait is how long Export waits for the set's changes and opens
// under way to end.
const handoverWait = 3 * time.Second

// Export returns the set's state and the descriptors it names, in order:
// duplicates the caller closes once sent. The caller stops the operations
// on the set first, and hands the open files (File.MirrorFds) and
// directories (Mirror.DirMirror) over itself. A handover is refused while
// a resync runs or a mirror joins. From a successful Export on, the set
// writes nothing of its own and refuses a resync and a mirror add, until
// Resume (the handover failed: it goes on as before) or Release (taken).
func (m *Mirror) Export() (MirrorState, []int, error) {
	m.mu.Lock()
	switch {
	case m.resyncing:
		m.mu.Unlock()
		return MirrorState{}, nil, errors.New("a resync is running (sluice stat shows its progress): hand the mount over once it has ended")
	case m.adding:
		m.mu.Unlock()
		return MirrorState{}, nil, errors.New("a mirror is joining the set, or the set is being handed over already: hand the mount over once it has joined")
	case m.blocked != "":
		m.mu.Unlock()
		return MirrorState{}, nil, fmt.Errorf("the last resync gave up on a step still blocked (%s): the set cannot be handed over before it returns", m.blocked)
	}
	// Set for the handover: no resync nor mirror add starts.
	m.adding = true
	m.mu.Unlock()
	st, fds, err := m.export()
	if err != nil {
		m.Resume()
		return MirrorState{}, nil, err
	}
	return st, fds, nil
}

func (m *Mirror) export() (MirrorState, []int, error) {
	if !lockWithin(&m.wmu, handoverWait) {
		return MirrorState{}, nil, fmt.Errorf("the mirror set's changes under way did not end within %v", handoverWait)
	}
	defer m.wmu.Unlock()
	if !lockWithin(&m.omu, handoverWait) {
		return MirrorState{}, nil, fmt.Errorf("the mirror set's opens under way did not end within %v", handoverWait)
	}
	defer m.omu.Unlock()
	var fds Descriptors
	fail := func(err error) (MirrorState, []int, error) {
		fds.Close()
		return MirrorState{}, nil, err
	}
	if m.intents != nil {
		m.intents.freeze()
	}
	m.mu.Lock()
	st := MirrorState{
		Dirs: slices.Clone(m.dirs), Self: slices.Clone(m.self), Stale: m.set.StaleMarks(), Policy: m.set.Policy(),
		NextID: m.nextID, Opens: m.opens, Resynced: slices.Clone(m.resynced), LastResync: m.lastResync,
		Figures: m.set.Stats(),
	}
	trees := slices.Clone(m.trees)
	ids := make(map[*mobj]ID, len(m.objs))
	for _, id := range slices.Sorted(maps.Keys(m.objs)) {
		o := m.objs[id]
		ids[o] = id
		st.Objects = append(st.Objects, MirrorObject{ID: id, Sub: slices.Clone(o.sub), Refs: o.refs})
	}
	m.mu.Unlock()
	for i, t := range trees {
		l, ok := t.(*Local)
		if !ok {
			return fail(fmt.Errorf("mirror %s is no directory tree: it cannot be handed over", st.Dirs[i]))
		}
		ts, tfds, err := l.Export()
		if err != nil {
			return fail(fmt.Errorf("mirror %s: %v", st.Dirs[i], err))
		}
		fds = append(fds, tfds...)
		st.Trees = append(st.Trees, ts)
		st.TreeFds = append(st.TreeFds, len(tfds))
	}
	if in := m.intents; in != nil {
		in.mu.Lock()
		st.Intents.NextID = in.nextID
		st.Intents.Pending = slices.Clone(in.pending)
		for o, e := range in.entries {
			st.Intents.Entries = append(st.Intents.Entries, IntentEntry{ID: e.id, Object: ids[o], Rec: e.rec, Holders: e.holders})
		}
		slices.SortFunc(st.Intents.Entries, func(a, b IntentEntry) int { return cmp.Compare(a.ID, b.ID) })
		for _, l := range in.logs {
			ls := IntentLogState{Fd: -1}
			if l != nil {
				i, err := fds.Dup(int(l.f.Fd()))
				if err != nil {
					in.mu.Unlock()
					return fail(fmt.Errorf("%s: %v", IntentFile, err))
				}
				ls = IntentLogState{Fd: i, Off: l.off, Size: l.size}
			}
			st.Intents.Logs = append(st.Intents.Logs, ls)
		}
		in.mu.Unlock()
	}
	return st, fds, nil
}

// freeze stops the clearing of the record and waits for a write of the
// logs under way: nothing writes them until thaw.
func (in *intents) freeze() {
	close(in.stop)
	<-in.done
	in.mu.Lock()
	for in.saving {
		in.cond.Wait()
	}
	in.mu.Unlock()
}

// running reports whether the record is being cleared (not frozen, nor
// adopted and not yet activated).
func (in *intents) running() bool {
	select {
	case <-in.done:
		return false
	default:
		return true
	}
}

// thaw starts the clearing again.
func (in *intents) thaw() {
	in.stop, in.done = make(chan struct{}), make(chan struct{})
	go in.clear()
}

// Resume lets a set whose handover failed (Export) go on as before.
func (m *Mirror) Resume() {
	m.mu.Lock()
	if !m.adding {
		m.mu.Unlock()
		return
	}
	m.adding = false
	m.mu.Unlock()
	if in := m.intents; in != nil && !in.running() {
		in.thaw()
	}
}

// Release lets go of the set's record of files being written without
// writing it: another process holds it now (a handover taken, after
// Export; or an adopted set that is not to serve, before Activate). The
// set is then closed as usual, its trees and files with it.
func (m *Mirror) Release() {
	in := m.intents
	if in == nil {
		return
	}
	if in.running() {
		in.freeze()
	}
	m.intents = nil
	in.closeLogs()
}

// Activate starts an adopted set's clearing of the record of files being
// written, once it serves: until then it writes nothing of its own.
func (m *Mirror) Activate() {
	m.mu.Lock()
	m.adding = false
	m.mu.Unlock()
	if in := m.intents; in != nil && !in.running() {
		in.thaw()
	}
}

// MirrorFds returns, for a mirror set's file, each mirror's descriptor
// (-1 where it is not open) and the flags it was opened with, for a
// handover; nil for another file.
func (f *File) MirrorFds() (fds []int, flags uint32) {
	s := f.set
	if s == nil {
		return nil, 0
	}
	s.m.mu.Lock()
	n := s.m.set.Mirrors()
	s.m.mu.Unlock()
	fds = make([]int, n)
	for i := range fds {
		fds[i] = -1
		if g := s.files[i]; g != nil {
			fds[i] = g.fd
		}
	}
	return fds, s.flags
}

// DirMirror returns which mirror the open directory d of object id is
// of (OpenDir reads one mirror's), for a handover.
func (m *Mirror) DirMirror(id ID, d *Dir) (int, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(d.Fd(), &st); err != nil {
		return -1, err
	}
	m.mu.Lock()
	o := m.objs[id]
	var sub []ID
	if o != nil {
		sub = slices.Clone(o.sub)
	}
	trees := m.trees
	m.mu.Unlock()
	for i, s := range sub {
		l, ok := trees[i].(*Local)
		if s == 0 || !ok {
			continue
		}
		l.mu.Lock()
		in := l.byID[s]
		l.mu.Unlock()
		if in != nil && in.key == (devIno{st.Dev, st.Ino}) {
			return i, nil
		}
	}
	return -1, fmt.Errorf("open directory of object %d: in no mirror", id)
}

// AdoptMirror makes a mirror set of the state another process exported
// (Mirror.Export): the set's IDs name the same objects in the same
// mirrors, the same mirrors are stale, the read policy is the same, and
// the record of files being written goes on in the same logs. Nothing is
// compared or replayed: the set was serving. opts give the options of
// each mirror's tree, the clock, the log and faults; opts.Policy is not
// used (st.Policy is). It takes fds over, the descriptors st names, and
// closes those it does not keep, on success and on error. The set writes
// nothing of its own (it clears no record) until Activate; Release, then
// Close, drops it without a word to the mirrors (Close alone clears the
// record, as a set that served does).
func AdoptMirror(st MirrorState, fds []int, opts MirrorOptions) (*Mirror, error) {
	kept := make([]bool, len(fds))
	m := &Mirror{}
	fail := func(err error) (*Mirror, error) {
		for _, t := range m.trees {
			t.Close()
		}
		if m.intents != nil {
			m.intents.closeLogs()
		}
		for i, fd := range fds {
			if !kept[i] && fd >= 0 {
				unix.Close(fd)
			}
		}
		return nil, fmt.Errorf("adopting the mirror set handed over: %w", err)
	}
	n := len(st.Dirs)
	switch {
	case n < 2:
		return fail(fmt.Errorf("%d mirrors", n))
	case n > mirror.MaxMirrors:
		return fail(fmt.Errorf("%d mirrors, more than %d", n, mirror.MaxMirrors))
	case len(st.Self) != n || len(st.Stale) != n || len(st.Trees) != n || len(st.TreeFds) != n:
		return fail(fmt.Errorf("%d mirrors, %d identities, %d stale marks, %d trees, %d counts of descriptors", n, len(st.Self), len(st.Stale), len(st.Trees), len(st.TreeFds)))
	case len(st.Intents.Logs) > n:
		return fail(fmt.Errorf("%d logs of files being written for %d mirrors", len(st.Intents.Logs), n))
	}
	set, err := mirror.NewSet(n, cmp.Or(st.Policy, mirror.Default), st.Stale)
	if err != nil {
		return fail(err)
	}
	if len(set.Live()) == 0 {
		return fail(errors.New("every mirror is stale"))
	}
	// The mirrors are those handed over: each healthy one's StateFile
	// names it as the set knew it.
	for i, dir := range st.Dirs {
		if st.Stale[i] {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, StateFile))
		if err != nil {
			return fail(fmt.Errorf("mirror %s: %v", dir, err))
		}
		var ms mirrorState
		if err := json.Unmarshal(b, &ms); err != nil || ms.ID != st.Self[i] {
			return fail(fmt.Errorf("mirror %s: its %s names mirror %q, not %q as the set handed over does (%v)", dir, StateFile, ms.ID, st.Self[i], err))
		}
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	*m = Mirror{
		dirs: slices.Clone(st.Dirs), self: slices.Clone(st.Self), now: opts.Now, log: opts.Log, faults: opts.Faults, lopts: opts.LocalOptions,
		copying: make([]bool, n), resynced: make([]int64, n), lastResync: st.LastResync,
		open: map[*fileSet]struct{}{}, objs: map[ID]*mobj{}, keys: make([]map[ID]ID, n),
		nextID: st.NextID, opens: st.Opens, set: set,
		adding: true, // until Activate
	}
	copy(m.resynced, st.Resynced)
	for i, f := range st.Figures {
		if i < n {
			set.Carry(i, f)
		}
	}
	next := 0
	for i, dir := range st.Dirs {
		c := st.TreeFds[i]
		if c < 0 || next+c > len(fds) {
			return fail(fmt.Errorf("mirror %s: %d descriptors from %d, of %d", dir, c, next, len(fds)))
		}
		tfds := slices.Clone(fds[next : next+c])
		for k := next; k < next+c; k++ {
			kept[k] = true // AdoptLocal keeps or closes them
		}
		next += c
		lo := opts.LocalOptions
		if i < len(opts.Faults) {
			lo.Faults = opts.Faults[i]
		}
		t, err := AdoptLocal(st.Trees[i], tfds, lo)
		if err != nil {
			return fail(fmt.Errorf("mirror %s: %v", dir, err))
		}
		m.trees = append(m.trees, t)
		m.keys[i] = map[ID]ID{}
	}
	m.as = m.trees[0]
	for _, o := range st.Objects {
		switch {
		case len(o.Sub) != n:
			return fail(fmt.Errorf("object %d: %d mirrors' IDs, want %d", o.ID, len(o.Sub), n))
		case o.ID < RootID || o.ID >= st.NextID:
			return fail(fmt.Errorf("object %d: not below the next ID %d", o.ID, st.NextID))
		case m.objs[o.ID] != nil:
			return fail(fmt.Errorf("object %d named twice", o.ID))
		}
		mo := &mobj{sub: slices.Clone(o.Sub), refs: o.Refs}
		for i, s := range o.Sub {
			if s == 0 {
				continue
			}
			if other, ok := m.keys[i][s]; ok {
				return fail(fmt.Errorf("objects %d and %d are both object %d of mirror %s", other, o.ID, s, st.Dirs[i]))
			}
			m.keys[i][s] = o.ID
		}
		m.objs[o.ID] = mo
	}
	if root := m.objs[RootID]; root == nil || slices.ContainsFunc(root.sub, func(s ID) bool { return s != RootID }) {
		return fail(errors.New("no root in every mirror"))
	}
	in := &intents{m: m, entries: map[*mobj]*intent{}, logs: make([]*intentLog, n), nextID: st.Intents.NextID,
		stop: make(chan struct{}), done: make(chan struct{})}
	in.cond.L = &in.mu
	close(in.done) // not clearing until Activate
	m.intents = in
	for i, ls := range st.Intents.Logs {
		if ls.Fd == -1 {
			continue
		}
		if ls.Fd < next || ls.Fd >= len(fds) || kept[ls.Fd] || fds[ls.Fd] < 0 {
			return fail(fmt.Errorf("the log of files being written of mirror %s: no descriptor %d", st.Dirs[i], ls.Fd))
		}
		kept[ls.Fd] = true
		in.logs[i] = &intentLog{f: os.NewFile(uintptr(fds[ls.Fd]), filepath.Join(st.Dirs[i], IntentFile)), off: ls.Off, size: ls.Size}
		if ls.Off < 0 || ls.Off > ls.Size {
			return fail(fmt.Errorf("the log of files being written of mirror %s: its frames end at %d of %d", st.Dirs[i], ls.Off, ls.Size))
		}
	}
	now := time.Now()
	for _, e := range st.Intents.Entries {
		o := m.objs[e.Object]
		if o == nil {
			// Forgotten by the set, and recorded until cleared.
			o = &mobj{sub: make([]ID, n)}
		}
		in.entries[o] = &intent{id: e.ID, rec: e.Rec, holders: e.Holders, ended: now}
	}
	if len(st.Intents.Pending) > 0 {
		in.pending = slices.Clone(st.Intents.Pending)
		in.gen = 1
	}
	for i, fd := range fds {
		if !kept[i] && fd >= 0 {
			unix.Close(fd)
		}
	}
	return m, nil
}

// AdoptFile makes an open file of the set's object id again from fds,
// each mirror's descriptor handed over (File.MirrorFds there; -1 where
// not open), opened with flags. It takes the descriptors over: on error
// it closes them.
func (m *Mirror) AdoptFile(id ID, fds []int, flags uint32) (*File, error) {
	files := make([]*File, mirror.MaxMirrors)
	fail := func(err error) (*File, error) {
		for i, f := range files {
			if f != nil {
				f.Close()
			} else if i < len(fds) && fds[i] >= 0 {
				unix.Close(fds[i])
			}
		}
		for i := len(files); i < len(fds); i++ {
			if fds[i] >= 0 {
				unix.Close(fds[i])
			}
		}
		return nil, fmt.Errorf("object %d: %w", id, err)
	}
	m.mu.Lock()
	o := m.objs[id]
	nm := len(m.trees)
	m.mu.Unlock()
	if o == nil {
		return fail(syscall.ESTALE)
	}
	if len(fds) > nm {
		return fail(fmt.Errorf("%d mirrors' descriptors for %d mirrors", len(fds), nm))
	}
	var ok []int
	for i, fd := range fds {
		if fd < 0 {
			continue
		}
		l, isLocal := m.trees[i].(*Local)
		if o.sub[i] == 0 || !isLocal {
			return fail(fmt.Errorf("not in mirror %s", m.dirs[i]))
		}
		f, err := l.AdoptFile(o.sub[i], fd)
		fds[i] = -1 // AdoptFile took it
		if err != nil {
			return fail(fmt.Errorf("mirror %s: %w", m.dirs[i], err))
		}
		files[i] = f
		ok = append(ok, i)
	}
	if len(ok) == 0 {
		return fail(errors.New("open in no mirror"))
	}
	return m.opened(o, flags, files, ok), nil
}

// AdoptDir makes an open directory of the set's object id again from fd,
// mirror i's descriptor handed over (DirMirror there), its listing to
// continue from off, as Local.AdoptDir does. It takes fd over: on error
// it closes it.
func (m *Mirror) AdoptDir(id ID, i int, fd int, off uint64) (*Dir, error) {
	m.mu.Lock()
	o := m.objs[id]
	var sub ID
	var t Tree
	if o != nil && i >= 0 && i < len(m.trees) {
		sub, t = o.sub[i], m.trees[i]
	}
	m.mu.Unlock()
	l, isLocal := t.(*Local)
	if sub == 0 || !isLocal {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, fmt.Errorf("object %d: not in mirror %d", id, i)
	}
	d, err := l.AdoptDir(sub, fd, off)
	if err != nil {
		return nil, err
	}
	if id == RootID {
		d.hide = IsStateFile
	}
	return d, nil
}
