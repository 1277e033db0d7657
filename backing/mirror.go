package backing

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"sluice/mirror"
)

// StateFile is the name of the file in each mirror's root that records
// the set's state: the mirror's own identity and which mirrors of the set
// are stale. It is not part of the served tree: lookups do not find it,
// listings skip it, and nothing through the mount can create, rename or
// remove it.
const StateFile = ".sluice-mirror"

// Mirror states.
const (
	Healthy = "healthy"
	Stale   = "stale"
)

// MirrorStats are one mirror's counters.
type MirrorStats struct {
	Dir      string `json:"dir"`
	State    string `json:"state"`    // Healthy or Stale
	Reads    int64  `json:"reads"`    // reads sent to it
	Bytes    int64  `json:"bytes"`    // bytes they returned
	Errors   int64  `json:"errors"`   // operations that failed on it
	Inflight int    `json:"inflight"` // reads in flight
	// Hedged counts its reads still running after the hedge delay, and
	// sent to another mirror too.
	Hedged int64 `json:"hedged"`
	// Latency is a decaying average of its read times, ns (time constant
	// mirror.DecayTime); 0 before its first read.
	Latency int64 `json:"latency_ns"`
	// ReadTime is the total time its reads took, ns, from being sent to
	// their answer (a hedged read's too, to its own answer): over an
	// interval, its change divided by that of Reads is the mean.
	ReadTime int64 `json:"read_ns"`
	// Resynced is how many bytes the last resync copied to it.
	Resynced int64 `json:"resynced_bytes"`
}

// MirrorOptions configure NewMirror.
type MirrorOptions struct {
	LocalOptions
	// Policy names the read policy (mirror.Names); empty for
	// mirror.Default.
	Policy string
	// Now is the clock the read policy runs on, ns; it must not go back.
	Now func() int64
	// Log reports a mirror turning stale; nil for none.
	Log func(format string, args ...any)
	// Faults, when not nil, holds per mirror the faults injected into its
	// file I/O (nil entries for none).
	Faults []*Faults
}

// Mirror is a Tree over directories holding the same content. Reads go to
// one healthy mirror chosen by the read policy, and one that fails is
// retried on another; writes and namespace changes go to every healthy
// mirror, and succeed when one does: a mirror that fails where another
// succeeded is marked stale, in memory and in every healthy mirror's
// StateFile, and is neither read nor written again. The last healthy
// mirror is never marked stale: its failure is the operation's.
//
// Objects are the set's own IDs; each holds one reference to the object
// in every mirror it was found in. Attributes, listings and link targets
// come from the first healthy mirror holding the object.
//
// A mirror may join the set while it serves (AddMirror). The per-mirror
// slices (dirs, trees, self, each object's sub) then grow, with every
// change and open held off (wmu, omu) and under mu: code that holds
// neither wmu nor omu reads them under mu; an open file's per-mirror
// files are MaxMirrors wide and never grow.
type Mirror struct {
	dirs  []string
	trees []Tree
	self  []string // each mirror's identity, from its StateFile
	as    Tree     // trees[0], for As
	lopts LocalOptions
	now   func() int64
	log   func(string, ...any)
	// faults, for tests and fault drills, per mirror (nil entries for
	// none): a resync's copy consults them too.
	faults []*Faults

	// wmu is held shared by every operation that changes the set or
	// its objects, and exclusively by a resync's last pass.
	wmu sync.RWMutex
	// omu is held shared by every operation that makes or opens the
	// set's objects or files, or closes its files, and exclusively while
	// a resync finds the resynced mirrors' counterparts of them all
	// (after wmu: lookups and opens need not wait for a resync's copy).
	omu sync.RWMutex
	// names orders the set's namespace changes (see lockNames); taken
	// after wmu, so that a change waiting for a resync's last pass holds
	// up no lookup or open, and before omu.
	names sync.RWMutex
	// intents records the files being written (IntentFile).
	intents *intents

	mu sync.Mutex
	// set decides which mirrors are healthy and where each read goes;
	// the rest of the Mirror does what it says (mirrorread.go).
	set        *mirror.Set
	copying    []bool // being resynced
	resynced   []int64
	resyncing  bool
	adding     bool // AddMirror runs
	lastResync string
	open       map[*fileSet]struct{}
	objs       map[ID]*mobj
	opens      uint64      // files opened: each fileSet's number, for the policy's streams
	keys       []map[ID]ID // per mirror: its object's ID -> the set's ID
	nextID     ID

	// While a resync runs, what the set changed since it began, for its
	// last pass: objects changed (directories whose entries changed among
	// them); where renames put things (compared whole: a directory moved
	// in may hold anything); and whether the last pass must walk the
	// whole tree instead (a hard link was made, whose other names only the
	// whole tree shows, or the path of a changed object was lost).
	tracking  bool
	tracked   map[*mobj]*change
	moved     []string
	wholeTree bool
	trackSrc  int // the mirror the resync copies from
	lastPass  int // objects the last resync's last pass compared
	// answer answers a request early (SetAnswer); watchdog hedges the
	// reads that can be (answer.go).
	answer   atomic.Pointer[Answer]
	watchdog watchdog

	// blocked, under mu, says which step of a resync given up on is
	// still blocked ("" when none is): no resync starts before it
	// returns.
	blocked string
	// stepLimit, for tests, replaces the deadline of a resync's steps
	// (stepLimit).
	stepLimit time.Duration

	// betweenPasses, for tests, runs between a resync's passes.
	betweenPasses func()
	// afterLstat, for tests, runs in a resync's first pass between the
	// lstat of an object (by its path from the root) and its copy.
	afterLstat func(rel string)
}

type mobj struct {
	sub  []ID // per mirror; 0 where the object was not found or not made
	refs uint64
}

// changeKind is what an operation changes of an object, for a resync.
type changeKind int

const (
	noChange   changeKind = iota
	metaChange            // attributes, extended attributes, entries of a directory
	dataChange            // a regular file's content
	movedIn               // put there by a rename: compared whole
)

// change is an object changed during a resync.
type change struct {
	kind      changeKind
	forgotten bool   // the set forgot the object: path is where it was then
	path      string // from the root of the resync's source, "" when removed
	lost      bool   // forgotten where its path could not be told
}

// pathOf is where o is in mirror src, from its root ("/a/b"; "/" for the
// root): "" when it was removed. ok is false when that cannot be told: o
// is not in src, or src names it no more (a file whose directory entry the
// kernel let go is reached by its handle alone).
func (m *Mirror) pathOf(src int, o *mobj) (p string, ok bool) {
	l, isLocal := m.trees[src].(*Local)
	if !isLocal || o.sub[src] == 0 {
		return "", false
	}
	root, err := l.path(RootID)
	if err != nil {
		return "", false
	}
	p, err = l.path(o.sub[src])
	switch {
	case errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ESTALE):
		return "", true
	case err != nil:
		return "", false
	case p == root:
		return "/", true
	}
	rel, found := strings.CutPrefix(p, strings.TrimSuffix(root, "/")+"/")
	if !found {
		return "", false
	}
	return "/" + rel, true
}

// touch records that o changed (kind) during a resync. Called with wmu
// held shared, so a resync's last pass (wmu held exclusively) sees it.
func (m *Mirror) touch(o *mobj, kind changeKind) {
	if kind == noChange {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.tracking {
		return
	}
	c := m.tracked[o]
	if c == nil {
		c = &change{}
		m.tracked[o] = c
	}
	c.kind = max(c.kind, kind)
}

var _ Tree = (*Mirror)(nil)

// mirrorState is a StateFile's content.
type mirrorState struct {
	ID    string   `json:"id"`
	Stale []string `json:"stale,omitempty"`
}

// NewMirror opens the directories as one mirror set. Mirrors marked stale
// by any StateFile stay stale. Before serving, it compares the healthy
// mirrors' top levels (names, types and file sizes) and refuses a set
// that differs, saying how.
func NewMirror(dirs []string, opts MirrorOptions) (*Mirror, error) {
	if len(dirs) < 2 {
		return nil, fmt.Errorf("a mirror set needs two mirrors or more, got %d", len(dirs))
	}
	if opts.Policy == "" {
		opts.Policy = mirror.Default
	}
	set, err := mirror.NewSet(len(dirs), opts.Policy, nil)
	if err != nil {
		return nil, err
	}
	if opts.Log == nil {
		opts.Log = func(string, ...any) {}
	}
	m := &Mirror{
		dirs: dirs, now: opts.Now, log: opts.Log, faults: opts.Faults, lopts: opts.LocalOptions,
		copying: make([]bool, len(dirs)), resynced: make([]int64, len(dirs)),
		open:   map[*fileSet]struct{}{},
		objs:   map[ID]*mobj{RootID: {sub: make([]ID, len(dirs)), refs: 1}},
		keys:   make([]map[ID]ID, len(dirs)),
		nextID: RootID + 1,
		set:    set,
	}
	staleIDs := map[string]bool{}
	joined, err := m.identify()
	if err != nil {
		return nil, err
	}
	for i, dir := range dirs {
		st, err := readState(dir)
		if err != nil {
			return nil, fmt.Errorf("mirror %s: %v", dir, err)
		}
		for _, id := range st.Stale {
			staleIDs[id] = true
		}
		m.keys[i] = map[ID]ID{RootID: RootID}
		m.objs[RootID].sub[i] = RootID
	}
	stale := make([]bool, len(dirs))
	for i, id := range m.self {
		stale[i] = staleIDs[id] || joined[i]
	}
	if m.set.SetStale(stale) != nil {
		return nil, fmt.Errorf("every mirror is marked stale in %s: nothing to serve from", StateFile)
	}
	if slices.Contains(joined, true) {
		// Recorded, so that a restart before the resync keeps them
		// stale.
		m.mu.Lock()
		err := m.saveState()
		m.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	if err := m.recoverIntents(); err != nil {
		return nil, err
	}
	if err := m.compare(); err != nil {
		return nil, err
	}
	for i, dir := range dirs {
		lo := opts.LocalOptions
		if i < len(opts.Faults) {
			lo.Faults = opts.Faults[i]
		}
		t, err := NewLocal(dir, lo)
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("mirror %s: %v", dir, err)
		}
		m.trees = append(m.trees, t)
	}
	m.as = m.trees[0]
	in, err := newIntents(m)
	if err != nil {
		m.Close()
		return nil, err
	}
	m.intents = in
	return m, nil
}

// identify gives each mirror its identity (m.self) from its StateFile,
// and reports the mirrors joining the set, which must be resynced before
// they serve: a directory without a StateFile where another mirror has
// one (a new mirror, empty or seeded with a copy that left the state
// files out), and a copy of another mirror's directory whose StateFile
// came with it (cp -a, rsync -a), which gets an identity of its own. A
// set none of whose mirrors has a StateFile is new: its mirrors must hold
// the same tree already. The same directory given twice is refused.
func (m *Mirror) identify() (joined []bool, err error) {
	n := len(m.dirs)
	joined = make([]bool, n)
	has := make([]bool, n)
	ids := make([]string, n)
	keys := make([]devIno, n)
	for i, dir := range m.dirs {
		var st unix.Stat_t
		if err := unix.Stat(dir, &st); err != nil {
			return nil, fmt.Errorf("mirror %s: %v", dir, err)
		}
		keys[i] = devIno{st.Dev, st.Ino}
		for j := range i {
			if keys[j] == keys[i] {
				return nil, fmt.Errorf("mirror %s: the same directory as mirror %s", dir, m.dirs[j])
			}
		}
		b, err := os.ReadFile(filepath.Join(dir, StateFile))
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("mirror %s: %v", dir, err)
		}
		var ms mirrorState
		if err := json.Unmarshal(b, &ms); err != nil || ms.ID == "" {
			return nil, fmt.Errorf("%s is not a mirror state file (%v); move it away to start afresh", filepath.Join(dir, StateFile), err)
		}
		has[i], ids[i] = true, ms.ID
		for j := range i {
			if ids[j] == ms.ID {
				m.log("mirror %s holds a copy of mirror %s's %s (the same id %s): it gets an id of its own, and is stale until sluice resync makes it equal",
					dir, m.dirs[j], StateFile, ms.ID)
				has[i], joined[i] = false, true
				// What the copy recorded of files being written is the
				// other mirror's.
				os.Remove(filepath.Join(dir, IntentFile))
				break
			}
		}
	}
	old := slices.Contains(has, true)
	for i, dir := range m.dirs {
		if !has[i] {
			ids[i] = newMirrorID()
			if err := writeState(dir, mirrorState{ID: ids[i]}); err != nil {
				return nil, fmt.Errorf("mirror %s: %v", dir, err)
			}
			if old && !joined[i] {
				m.log("mirror %s is new to the set (it has no %s): it is stale until sluice resync copies the set onto it", dir, StateFile)
				joined[i] = true
			}
		}
	}
	m.self = ids
	return joined, nil
}

// readState reads dir's StateFile, creating it with a new identity when
// there is none.
func readState(dir string) (mirrorState, error) {
	var st mirrorState
	p := filepath.Join(dir, StateFile)
	b, err := os.ReadFile(p)
	switch {
	case err == nil:
		if err := json.Unmarshal(b, &st); err != nil || st.ID == "" {
			return st, fmt.Errorf("%s is not a mirror state file (%v); move it away to start afresh", p, err)
		}
		return st, nil
	case !errors.Is(err, os.ErrNotExist):
		return st, err
	}
	st.ID = newMirrorID()
	return st, writeState(dir, st)
}

func writeState(dir string, st mirrorState) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	// Through StateFile+".new", one of IsStateFile's names.
	return writeDurable(dir, StateFile, append(b, '\n'))
}

// IsStateFile reports whether name, in a mirror's root, is one of the
// set's own files: StateFile, or the file it is written through before it
// is renamed into place. Other names, however they begin, are the tree's.
func IsStateFile(name string) bool {
	switch name {
	case StateFile, StateFile + ".new", IntentFile, IntentFile + ".new":
		return true
	}
	return false
}

// hidden reports whether name in the root is the set's own.
func hidden(parent ID, name string) bool {
	return parent == RootID && IsStateFile(name)
}

// compare checks that the healthy mirrors' top levels agree: the same
// names, of the same types, regular files of the same sizes.
func (m *Mirror) compare() error {
	type ent struct {
		mode uint32
		size int64
	}
	var ref map[string]ent
	refDir := ""
	var diffs []string
	for i, dir := range m.dirs {
		if m.set.Stale(i) {
			continue
		}
		des, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("mirror %s: %v", dir, err)
		}
		got := map[string]ent{}
		for _, de := range des {
			if hidden(RootID, de.Name()) {
				continue
			}
			fi, err := de.Info()
			if err != nil {
				continue
			}
			e := ent{mode: uint32(fi.Mode().Type())}
			if fi.Mode().IsRegular() {
				e.size = fi.Size()
			}
			got[de.Name()] = e
		}
		if ref == nil {
			ref, refDir = got, dir
			continue
		}
		for name, a := range ref {
			b, ok := got[name]
			switch {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("%s is in %s, not in %s", name, refDir, dir))
			case a.mode != b.mode:
				diffs = append(diffs, fmt.Sprintf("%s is of another type in %s than in %s", name, dir, refDir))
			case a.size != b.size:
				diffs = append(diffs, fmt.Sprintf("%s is %d bytes in %s, %d in %s", name, a.size, refDir, b.size, dir))
			}
		}
		for name := range got {
			if _, ok := ref[name]; !ok {
				diffs = append(diffs, fmt.Sprintf("%s is in %s, not in %s", name, dir, refDir))
			}
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	slices.Sort(diffs)
	if len(diffs) > 10 {
		diffs = append(diffs[:10], fmt.Sprintf("and %d more", len(diffs)-10))
	}
	return fmt.Errorf("the mirrors differ; make them equal first (for example rsync -aHAX --delete --exclude='/%s*' %s/ OTHER/), "+
		"or serve the set with one mirror holding the data and add the others empty, then run sluice resync:\n  %s",
		StateFile, refDir, strings.Join(diffs, "\n  "))
}

// SetPolicy switches the read policy.
func (m *Mirror) SetPolicy(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.set.SetPolicy(name)
}

// Policy is the read policy in force.
func (m *Mirror) Policy() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.set.Policy()
}

// Stats returns each mirror's counters.
func (m *Mirror) Stats() []MirrorStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]MirrorStats, len(m.dirs))
	for i, c := range m.set.Stats() {
		out[i] = MirrorStats{Dir: m.dirs[i], State: Healthy, Reads: c.Reads, Bytes: c.Bytes, Errors: c.Errors,
			Inflight: c.Inflight, Hedged: c.Hedged, Latency: c.Latency, ReadTime: c.ReadTime, Resynced: m.resynced[i]}
		switch {
		case m.copying[i]:
			out[i].State = Resyncing
		case m.set.Stale(i):
			out[i].State = Stale
		}
	}
	return out
}

// markStaleLocked marks mirror i stale for err unless it is the last
// healthy one; it reports whether it did, and the error of recording it
// (saveState): a mark no healthy mirror recorded would be lost by a
// restart, which would serve the stale mirror again, so the operation
// that failed on it must fail too. Called with m.mu held.
func (m *Mirror) markStaleLocked(i int, err error) (bool, error) {
	changed, ok := m.set.MarkStale(i)
	if !changed {
		return ok, nil
	}
	serr := m.saveState()
	m.log("mirror %s is stale (%v): no more reads or writes go to it", m.dirs[i], err)
	return true, serr
}

// saveState records which mirrors are stale in every healthy mirror's
// StateFile. It fails when no healthy mirror recorded it: a restart would
// then serve a stale mirror again. Called with m.mu held.
func (m *Mirror) saveState() error {
	var ids []string
	for j, s := range m.set.StaleMarks() {
		if s {
			ids = append(ids, m.self[j])
		}
	}
	var first error
	saved := false
	live := m.set.Live()
	for _, j := range live {
		if werr := writeState(m.dirs[j], mirrorState{ID: m.self[j], Stale: ids}); werr != nil {
			m.log("mirror %s: recording the set's state: %v", m.dirs[j], werr)
			first = cmpOr(first, werr)
			continue
		}
		saved = true
	}
	if !saved && len(live) > 0 {
		return fmt.Errorf("recording the set's state: %w", first)
	}
	return nil
}

// healthy returns the healthy mirrors holding o, in order.
func (m *Mirror) healthy(o *mobj) []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for _, i := range m.set.Live() {
		if o.sub[i] != 0 {
			out = append(out, i)
		}
	}
	return out
}

func (m *Mirror) obj(id ID) (*mobj, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := m.objs[id]
	if o == nil {
		return nil, syscall.ESTALE
	}
	return o, nil
}

// fan runs op on every healthy mirror holding o and sorts out the
// outcome (settle); ok lists the mirrors that succeeded.
func (m *Mirror) fan(o *mobj, op func(i int, sub ID) error) (ok []int, err error) {
	on := m.healthy(o)
	if len(on) == 0 {
		return nil, syscall.EIO
	}
	errs := make([]error, len(on))
	for k, i := range on {
		if errs[k] = op(i, o.sub[i]); errs[k] == nil {
			ok = append(ok, i)
		}
	}
	if err := m.settle(o, on, errs, ok); err != nil {
		return nil, err
	}
	return ok, nil
}

// settle sorts out an operation on o sent to the mirrors on, errs[k]
// being mirror on[k]'s error and ok the mirrors that succeeded
// (mirror.Set's Fanout): when none did, the operation fails with the
// first mirror's error; otherwise the mirrors that failed are marked
// stale, all but the last healthy one, and the marks recorded. A mark
// that could not be recorded fails the operation with EIO.
func (m *Mirror) settle(o *mobj, on []int, errs []error, ok []int) error {
	if len(ok) == 0 {
		return errs[0]
	}
	out := make([]mirror.Outcome, len(on))
	for k := range on {
		switch {
		case errs[k] == nil:
			out[k] = mirror.OK
		case o != nil && m.vanished(o, errs[k], ok[0]):
			out[k] = mirror.Gone
		default:
			out[k] = mirror.Failed
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, marked := m.set.Fanout(on, out)
	if len(marked) == 0 {
		return nil
	}
	serr := m.saveState()
	for _, i := range marked {
		m.log("mirror %s is stale (%v): no more reads or writes go to it", m.dirs[i], errs[slices.Index(on, i)])
	}
	if serr != nil {
		m.log("%v: failing the operation", serr)
		return syscall.EIO
	}
	return nil
}

// vanished reports whether err, of an operation on o that mirror j
// performed, is o having been removed: the object is reached by its
// handle, which a mirror holding it open still resolves once it has no
// name, and another no longer does (ESTALE). That is no divergence when
// o has no name on j either.
func (m *Mirror) vanished(o *mobj, err error, j int) bool {
	if err != syscall.ESTALE && err != syscall.ENOENT {
		return false
	}
	st, gerr := m.trees[j].Getattr(o.sub[j])
	return gerr == syscall.ESTALE || gerr == syscall.ENOENT || gerr == nil && st.Nlink == 0
}

// enter makes the set's object of per-mirror entries (each with one
// reference) and returns its entry with the first one's attributes.
func (m *Mirror) enter(ents []Entry, ok []int) Entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	var o *mobj
	id := ID(0)
	for _, i := range ok {
		if mid, found := m.keys[i][ents[i].ID]; found {
			id, o = mid, m.objs[mid]
			break
		}
	}
	if o == nil {
		id = m.nextID
		m.nextID++
		o = &mobj{sub: make([]ID, len(m.dirs))}
		m.objs[id] = o
	}
	o.refs++
	for _, i := range ok {
		switch o.sub[i] {
		case 0:
			o.sub[i] = ents[i].ID
			m.keys[i][ents[i].ID] = id
		default:
			// The object already holds a reference in this mirror.
			m.trees[i].Forget(ents[i].ID, 1)
		}
	}
	return Entry{ID: id, Attr: ents[ok[0]].Attr}
}

// record records o as being changed (IntentFile): its content, its
// attributes, or the entries of a directory. It returns the call that ends the change, or
// EIO when the record could not be written: the change must not start.
func (m *Mirror) record(o *mobj) (end func(), err error) {
	if m.intents == nil {
		return func() {}, nil
	}
	end, err = m.intents.begin(o)
	if err != nil {
		m.log("%v: failing the change", err)
		return nil, syscall.EIO
	}
	return end, nil
}

// lockNames locks the set's namespace, for a change of it (change) or
// for an operation whose outcome on a mirror depends on it, and returns
// the unlock. A namespace change (an entry made, removed or renamed)
// reaches the mirrors one after another; were another operation let in
// between, it would find the object on one mirror and not on another
// (an open by handle of a file unlinked on the first mirror only gets
// ESTALE there), and the mirror it failed on would be marked stale. With
// the lock every mirror sees the changes and the operations between them
// in one order, so a failure on one mirror alone is a real divergence.
func (m *Mirror) lockNames(change bool) (unlock func()) {
	if change {
		m.names.Lock()
		return m.names.Unlock
	}
	m.names.RLock()
	return m.names.RUnlock
}

func (m *Mirror) Lookup(parent ID, name string) (Entry, error) {
	if hidden(parent, name) {
		return Entry{}, syscall.ENOENT
	}
	return m.entry(parent, noChange, func(i int, t Tree, p ID) (Entry, error) { return t.Lookup(p, name) })
}

// entry runs an operation that yields an entry on every healthy mirror
// holding parent, which it changes as kind says.
func (m *Mirror) entry(parent ID, kind changeKind, op func(i int, t Tree, p ID) (Entry, error)) (Entry, error) {
	if kind != noChange {
		m.wmu.RLock()
		defer m.wmu.RUnlock()
	}
	defer m.lockNames(kind != noChange)()
	m.omu.RLock()
	defer m.omu.RUnlock()
	o, err := m.obj(parent)
	if err != nil {
		return Entry{}, err
	}
	m.touch(o, kind)
	if kind != noChange {
		end, err := m.record(o)
		if err != nil {
			return Entry{}, err
		}
		defer end()
	}
	ents := make([]Entry, len(m.dirs))
	ok, err := m.fan(o, func(i int, p ID) (err error) {
		ents[i], err = op(i, m.trees[i], p)
		return err
	})
	if err != nil {
		return Entry{}, err
	}
	return m.enter(ents, ok), nil
}

func (m *Mirror) Forget(id ID, n uint64) bool {
	if id == RootID {
		return false
	}
	m.wmu.RLock()
	defer m.wmu.RUnlock()
	m.mu.Lock()
	o := m.objs[id]
	if o == nil {
		m.mu.Unlock()
		return true
	}
	if o.refs > n {
		o.refs -= n
		m.mu.Unlock()
		return false
	}
	delete(m.objs, id)
	for i, s := range o.sub {
		if s != 0 {
			delete(m.keys[i], s)
		}
	}
	c := m.tracked[o]
	src := m.trackSrc
	m.mu.Unlock()
	if c != nil {
		// The last pass must find it by name: where it is now.
		var ok bool
		c.path, ok = m.pathOf(src, o)
		c.forgotten, c.lost = true, !ok
	}
	for i, s := range o.sub {
		if s != 0 {
			m.trees[i].Forget(s, 1)
		}
	}
	return true
}

// held is an object's counterpart in one mirror.
type held struct {
	mirror int
	sub    ID
}

// first runs a read-only operation on the first healthy mirror holding
// id, and on the next when it fails with EIO.
func (m *Mirror) first(id ID, op func(t Tree, sub ID) error) error {
	m.mu.Lock()
	o := m.objs[id]
	if o == nil {
		m.mu.Unlock()
		return syscall.ESTALE
	}
	// Under mu: this runs beside AddMirror, which grows trees and sub.
	trees := m.trees
	var on []held
	for _, i := range m.set.Live() {
		if o.sub[i] != 0 {
			on = append(on, held{i, o.sub[i]})
		}
	}
	m.mu.Unlock()
	err := error(syscall.EIO)
	for _, h := range on {
		i := h.mirror
		if err = op(trees[i], h.sub); err != syscall.EIO {
			return err
		}
		m.mu.Lock()
		m.set.Failed(i)
		m.mu.Unlock()
	}
	return err
}

func (m *Mirror) Getattr(id ID) (st syscall.Stat_t, err error) {
	err = m.first(id, func(t Tree, sub ID) (err error) { st, err = t.Getattr(sub); return err })
	return st, err
}

func (m *Mirror) Setattr(id ID, f *File, set SetAttr) (syscall.Stat_t, error) {
	m.wmu.RLock()
	defer m.wmu.RUnlock()
	defer m.lockNames(false)()
	o, err := m.obj(id)
	if err != nil {
		return syscall.Stat_t{}, err
	}
	if set.Size != nil {
		m.touch(o, dataChange)
	} else {
		m.touch(o, metaChange)
	}
	end, err := m.record(o)
	if err != nil {
		return syscall.Stat_t{}, err
	}
	defer end()
	sts := make([]syscall.Stat_t, len(m.dirs))
	ok, err := m.fan(o, func(i int, sub ID) (err error) {
		var sf *File
		if f != nil && f.set != nil {
			if sf = f.set.files[i]; sf == nil {
				return syscall.EBADF
			}
		}
		sts[i], err = m.trees[i].Setattr(sub, sf, set)
		return err
	})
	if err != nil {
		return syscall.Stat_t{}, err
	}
	return sts[ok[0]], nil
}

func (m *Mirror) Readlink(id ID) (b []byte, err error) {
	err = m.first(id, func(t Tree, sub ID) (err error) { b, err = t.Readlink(sub); return err })
	return b, err
}

func (m *Mirror) Mknod(c *Cred, parent ID, name string, mode, dev uint32) (Entry, error) {
	if hidden(parent, name) {
		return Entry{}, syscall.EPERM
	}
	return m.entry(parent, metaChange, func(_ int, t Tree, p ID) (Entry, error) { return t.Mknod(c, p, name, mode, dev) })
}

func (m *Mirror) Mkdir(c *Cred, parent ID, name string, mode uint32) (Entry, error) {
	if hidden(parent, name) {
		return Entry{}, syscall.EPERM
	}
	return m.entry(parent, metaChange, func(_ int, t Tree, p ID) (Entry, error) { return t.Mkdir(c, p, name, mode) })
}

func (m *Mirror) Symlink(c *Cred, parent ID, name, target string) (Entry, error) {
	if hidden(parent, name) {
		return Entry{}, syscall.EPERM
	}
	return m.entry(parent, metaChange, func(_ int, t Tree, p ID) (Entry, error) { return t.Symlink(c, p, name, target) })
}

func (m *Mirror) Link(c *Cred, id, parent ID, name string) (Entry, error) {
	if hidden(parent, name) {
		return Entry{}, syscall.EPERM
	}
	m.wmu.RLock()
	o, err := m.obj(id)
	m.wmu.RUnlock()
	if err != nil {
		return Entry{}, err
	}
	m.mu.Lock()
	if m.tracking {
		m.wholeTree = true
	}
	m.mu.Unlock()
	return m.entry(parent, metaChange, func(i int, t Tree, p ID) (Entry, error) {
		if o.sub[i] == 0 {
			return Entry{}, syscall.ENOENT
		}
		return t.Link(c, o.sub[i], p, name)
	})
}

// change runs a change on every healthy mirror holding parent: of its
// entries when names (see lockNames), else of parent itself.
func (m *Mirror) change(parent ID, names bool, op func(t Tree, p ID) error) error {
	m.wmu.RLock()
	defer m.wmu.RUnlock()
	defer m.lockNames(names)()
	o, err := m.obj(parent)
	if err != nil {
		return err
	}
	m.touch(o, metaChange)
	end, err := m.record(o)
	if err != nil {
		return err
	}
	defer end()
	_, err = m.fan(o, func(i int, p ID) error { return op(m.trees[i], p) })
	return err
}

func (m *Mirror) Unlink(parent ID, name string) error {
	if hidden(parent, name) {
		return syscall.ENOENT
	}
	return m.change(parent, true, func(t Tree, p ID) error { return t.Unlink(p, name) })
}

func (m *Mirror) Rmdir(parent ID, name string) error {
	if hidden(parent, name) {
		return syscall.ENOENT
	}
	return m.change(parent, true, func(t Tree, p ID) error { return t.Rmdir(p, name) })
}

func (m *Mirror) Rename(parent ID, name string, newParent ID, newName string, flags uint32) error {
	if hidden(parent, name) || hidden(newParent, newName) {
		return syscall.EPERM
	}
	m.wmu.RLock()
	defer m.wmu.RUnlock()
	defer m.lockNames(true)()
	np, err := m.obj(newParent)
	if err != nil {
		return err
	}
	o, err := m.obj(parent)
	if err != nil {
		return err
	}
	m.touch(o, metaChange)
	m.touch(np, metaChange)
	for _, d := range []*mobj{o, np} {
		end, err := m.record(d)
		if err != nil {
			return err
		}
		defer end()
	}
	_, err = m.fan(o, func(i int, p ID) error {
		if np.sub[i] == 0 {
			return syscall.ENOENT
		}
		return m.trees[i].Rename(p, name, np.sub[i], newName, flags)
	})
	if err == nil {
		m.movedTo(np, newName)
		if flags&unix.RENAME_EXCHANGE != 0 {
			m.movedTo(o, name)
		}
	}
	return err
}

// movedTo records, during a resync, that a rename put an object at name
// in directory dir: the last pass compares what is there whole.
func (m *Mirror) movedTo(dir *mobj, name string) {
	m.mu.Lock()
	tracking, src := m.tracking, m.trackSrc
	m.mu.Unlock()
	if !tracking {
		return
	}
	p, ok := m.pathOf(src, dir)
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case !ok:
		m.wholeTree = true
	case p != "": // "": the directory is gone already, and what it held
		m.moved = append(m.moved, strings.TrimSuffix(p, "/")+"/"+name)
	}
}

// opened makes the set's file of per-mirror files (mirror.MaxMirrors of
// them, nil where not open), of object o opened with flags.
func (m *Mirror) opened(o *mobj, flags uint32, files []*File, ok []int) *File {
	set := &fileSet{m: m, obj: o, flags: flags, files: files}
	for i, f := range files {
		if f != nil && !slices.Contains(ok, i) {
			f.Close()
			files[i] = nil
		}
	}
	m.mu.Lock()
	m.opens++
	set.n = m.opens
	m.open[set] = struct{}{}
	m.mu.Unlock()
	return &File{fd: files[ok[0]].fd, set: set}
}

func (m *Mirror) Create(c *Cred, parent ID, name string, flags, mode uint32) (Entry, *File, error) {
	if hidden(parent, name) {
		return Entry{}, nil, syscall.EPERM
	}
	return m.create(parent, flags, true, func(t Tree, p ID) (Entry, *File, error) { return t.Create(c, p, name, flags, mode) })
}

func (m *Mirror) Tmpfile(c *Cred, parent ID, flags, mode uint32) (Entry, *File, error) {
	return m.create(parent, flags, false, func(t Tree, p ID) (Entry, *File, error) { return t.Tmpfile(c, p, flags, mode) })
}

// create makes an object in parent on every healthy mirror holding it, a
// named one when names (see lockNames), and opens it.
func (m *Mirror) create(parent ID, flags uint32, names bool, op func(t Tree, p ID) (Entry, *File, error)) (Entry, *File, error) {
	m.wmu.RLock()
	defer m.wmu.RUnlock()
	defer m.lockNames(names)()
	m.omu.RLock()
	defer m.omu.RUnlock()
	o, err := m.obj(parent)
	if err != nil {
		return Entry{}, nil, err
	}
	m.touch(o, metaChange)
	if names {
		end, err := m.record(o)
		if err != nil {
			return Entry{}, nil, err
		}
		defer end()
	}
	ents := make([]Entry, len(m.dirs))
	files := make([]*File, mirror.MaxMirrors) // the fileSet's (opened)
	ok, err := m.fan(o, func(i int, p ID) (err error) {
		ents[i], files[i], err = op(m.trees[i], p)
		return err
	})
	if err != nil {
		return Entry{}, nil, err
	}
	e := m.enter(ents, ok)
	m.mu.Lock()
	obj := m.objs[e.ID]
	m.mu.Unlock()
	return e, m.opened(obj, flags&^(syscall.O_CREAT|syscall.O_EXCL|syscall.O_TRUNC|unix.O_TMPFILE), files, ok), nil
}

func (m *Mirror) Open(id ID, flags uint32) (*File, error) {
	if flags&syscall.O_TRUNC != 0 {
		m.wmu.RLock()
		defer m.wmu.RUnlock()
	}
	defer m.lockNames(false)()
	m.omu.RLock()
	defer m.omu.RUnlock()
	o, err := m.obj(id)
	if err != nil {
		return nil, err
	}
	if flags&syscall.O_TRUNC != 0 {
		m.touch(o, dataChange)
		end, err := m.record(o)
		if err != nil {
			return nil, err
		}
		defer end()
	}
	files := make([]*File, mirror.MaxMirrors) // the fileSet's (opened)
	ok, err := m.fan(o, func(i int, sub ID) (err error) {
		files[i], err = m.trees[i].Open(sub, flags)
		return err
	})
	if err != nil {
		return nil, err
	}
	return m.opened(o, flags&^syscall.O_TRUNC, files, ok), nil
}

func (m *Mirror) OpenDir(id ID) (d *Dir, err error) {
	err = m.first(id, func(t Tree, sub ID) (err error) { d, err = t.OpenDir(sub); return err })
	if err == nil && id == RootID {
		d.hide = IsStateFile
	}
	return d, err
}

func (m *Mirror) Statfs(id ID) (st syscall.Statfs_t, err error) {
	err = m.first(id, func(t Tree, sub ID) (err error) { st, err = t.Statfs(sub); return err })
	return st, err
}

func (m *Mirror) Getxattr(id ID, name string, dest []byte) (n int, err error) {
	err = m.first(id, func(t Tree, sub ID) (err error) { n, err = t.Getxattr(sub, name, dest); return err })
	return n, err
}

func (m *Mirror) Listxattr(id ID, dest []byte) (n int, err error) {
	err = m.first(id, func(t Tree, sub ID) (err error) { n, err = t.Listxattr(sub, dest); return err })
	return n, err
}

func (m *Mirror) Setxattr(id ID, name string, data []byte, flags int) error {
	return m.change(id, false, func(t Tree, sub ID) error { return t.Setxattr(sub, name, data, flags) })
}

func (m *Mirror) Removexattr(id ID, name string) error {
	return m.change(id, false, func(t Tree, sub ID) error { return t.Removexattr(sub, name) })
}

// As runs fn with the caller's credentials (the mirrors share the
// process's).
func (m *Mirror) As(c *Cred, fn func() error) error { return m.as.As(c, fn) }

func (m *Mirror) Close() error {
	m.stopWatch()
	if m.intents != nil {
		m.intents.close()
	}
	var first error
	for _, t := range m.trees {
		if err := t.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (m *Mirror) String() string { return strings.Join(m.Dirs(), ",") }

// Dirs lists the set's mirrors in order, those added while it serves
// (AddMirror) last.
func (m *Mirror) Dirs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.dirs)
}

// fileSet is an open file of a mirror set: one file per mirror.
type fileSet struct {
	m     *Mirror
	n     uint64 // its number among the set's opens (mirror.Read's File)
	obj   *mobj  // the object open
	flags uint32 // how, for opening it in a resynced mirror
	// files are per mirror, nil where not open: mirror.MaxMirrors of
	// them whatever the set's size, so that a mirror added to the set
	// gets its place without the slice changing under the reads that
	// index it without m.mu.
	files []*File
	// busy counts reads in flight (hedged and probing reads outlive the
	// caller's); a close leaves the files to the last of them to close.
	busy    int
	closing bool
}

// close closes every mirror's file and forgets the set; with reads still
// in flight, the last of them closes the files.
func (s *fileSet) close() error {
	s.m.omu.RLock()
	defer s.m.omu.RUnlock()
	s.m.mu.Lock()
	delete(s.m.open, s)
	s.closing = true
	busy := s.busy > 0
	s.m.mu.Unlock()
	if busy {
		return nil
	}
	return s.closeFiles()
}

func (s *fileSet) closeFiles() error {
	var first error
	for i, f := range s.files {
		if f != nil {
			if err := f.Close(); err != nil && first == nil {
				first = err
			}
			s.files[i] = nil
		}
	}
	return first
}

// each runs op, which changes the file as kind says, on every healthy
// mirror's file and sorts out the outcome as fan does.
func (s *fileSet) each(kind changeKind, op func(f *File) error) error {
	m := s.m
	if kind != noChange {
		m.wmu.RLock()
		defer m.wmu.RUnlock()
	}
	m.touch(s.obj, kind)
	m.mu.Lock()
	var on []int
	for _, i := range m.set.Live() {
		if s.files[i] != nil {
			on = append(on, i)
		}
	}
	m.mu.Unlock()
	if len(on) == 0 {
		return syscall.EIO
	}
	if kind == dataChange {
		end, err := m.record(s.obj)
		if err != nil {
			return err
		}
		defer end()
	}
	errs := make([]error, len(on))
	var ok []int
	for k, i := range on {
		if errs[k] = op(s.files[i]); errs[k] == nil {
			ok = append(ok, i)
		}
	}
	return m.settle(nil, on, errs, ok)
}

// primary is the first healthy mirror's file.
func (s *fileSet) primary() *File {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	for _, i := range s.m.set.Live() {
		if s.files[i] != nil {
			return s.files[i]
		}
	}
	return nil
}
