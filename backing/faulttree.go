package backing

import (
	"fmt"
	"math/rand/v2"
	"path"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Op is a set of operations a FaultRule matches: one bit per kind.
type Op uint32

// The operations of a FaultTree. Each Tree method is one of them, and so
// is each method of a File or Dir opened through the tree; Forget, As and
// Close, and File.Seek and Close, are never faulted.
const (
	OpLookup  Op = 1 << iota // Lookup
	OpGetattr                // Getattr, File.Stat
	OpSetattr                // Setattr, File.KillSuidgid
	OpReadlink
	OpMknod
	OpMkdir
	OpSymlink
	OpLink
	OpUnlink
	OpRmdir
	OpRename
	OpCreate  // Create, Tmpfile
	OpOpen    // Open, OpenDir
	OpRead    // File.ReadAt, File.ReadAtFor
	OpWrite   // File.WriteAt, File.Allocate
	OpSync    // File.Sync, File.StartWriteback, File.Flush, Dir.Sync
	OpReaddir // Dir.Seek, Dir.Peek
	OpStatfs
	OpXattr // Getxattr, Listxattr, Setxattr, Removexattr

	// OpAny matches every operation.
	OpAny Op = 1<<iota - 1
)

var opNames = []string{"lookup", "getattr", "setattr", "readlink", "mknod", "mkdir", "symlink",
	"link", "unlink", "rmdir", "rename", "create", "open", "read", "write", "sync", "readdir",
	"statfs", "xattr"}

// String names the operations of o, joined by "|" ("any" for OpAny).
func (o Op) String() string {
	if o == OpAny {
		return "any"
	}
	var s []string
	for i, n := range opNames {
		if o&(1<<i) != 0 {
			s = append(s, n)
		}
	}
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, "|")
}

// FaultRule is one fault of a FaultTree: the operations and objects it
// matches, what it injects, and how often.
type FaultRule struct {
	// Ops are the operations the rule matches. Required (0 matches
	// nothing, which Validate refuses).
	Ops Op
	// Path, when not empty, is a pattern (path.Match) the object's path
	// relative to the root must match: "." is the root, "a/b" an entry
	// of directory a. A pattern ending in "/**" matches what lies below
	// its prefix, at any depth, and the prefix itself. For an operation
	// on an entry (Lookup, the creations, Unlink, Rmdir, Link's new name)
	// the path is the entry's; a Rename matches if either of its names
	// does; a Tmpfile matches its directory's path. The default, "",
	// matches every object, those of no known path included.
	Path string
	// Err is the error the operation fails with, without reaching the
	// tree (a syscall.Errno, as a tree returns). The default, nil,
	// injects only Delay.
	Err error
	// Delay is how long the operation is held before it goes on (or
	// fails with Err), through FaultOptions.Sleep. The default is 0.
	Delay time.Duration
	// Prob is the chance that a matching operation is faulted, drawn from
	// the tree's seeded source: in (0, 1]. The default, 0, is 1: every
	// matching operation.
	Prob float64
	// Limit is how many times the rule fires at most. The default, 0, is
	// no limit.
	Limit int
	// After is how many matching operations the rule lets through before
	// it fires: a read that fails after the first After reads of a file
	// fails in the middle of it. Operations its Prob skipped count too.
	// The default is 0: from the first.
	After int
	// Serial serves the rule's Delay one operation at a time, in the
	// order they come, as a disk that serves one request at a time: an
	// operation waits for those before it, then its Delay. A device of
	// 1000 reads a second is Ops OpRead, Delay 1ms, Serial. The default,
	// false, delays every operation on its own.
	Serial bool
	// Disk, where set, is the disk a Serial rule's operations queue on:
	// the rules of every tree given the same Disk serve one operation at
	// a time among them all, as several hosts' mounts of one server. nil
	// is a disk of the rule's own.
	Disk *Disk
}

// Disk is a queue that Serial rules of several trees share (FaultRule.Disk).
type Disk struct{ ch chan struct{} }

// NewDisk returns a Disk with nothing queued.
func NewDisk() *Disk { return &Disk{ch: make(chan struct{}, 1)} }

// Validate reports what is wrong with the rule, naming the field.
func (r *FaultRule) Validate() error {
	switch {
	case r.Ops == 0 || r.Ops&^OpAny != 0:
		return fmt.Errorf("FaultRule.Ops %#x: want a set of Op values", uint32(r.Ops))
	case r.Prob < 0 || r.Prob > 1:
		return fmt.Errorf("FaultRule.Prob %v: want a chance in (0, 1], or 0 for always", r.Prob)
	case r.Delay < 0:
		return fmt.Errorf("FaultRule.Delay %v: want 0 or more", r.Delay)
	case r.Limit < 0:
		return fmt.Errorf("FaultRule.Limit %d: want 0 (no limit) or more", r.Limit)
	case r.After < 0:
		return fmt.Errorf("FaultRule.After %d: want 0 or more", r.After)
	}
	if _, err := path.Match(strings.TrimSuffix(r.Path, "/**"), ""); err != nil {
		return fmt.Errorf("FaultRule.Path %q: %v", r.Path, err)
	}
	return nil
}

// matches reports whether the rule's Path matches p ("" when unknown).
func (r *FaultRule) matches(p string) bool {
	if r.Path == "" {
		return true
	}
	if p == "" {
		return false
	}
	if prefix, ok := strings.CutSuffix(r.Path, "/**"); ok {
		for a := p; ; {
			if ok, _ := path.Match(prefix, a); ok {
				return true
			}
			i := strings.LastIndexByte(a, '/')
			if i < 0 {
				return false
			}
			a = a[:i]
		}
	}
	ok, _ := path.Match(r.Path, p)
	return ok
}

// FaultOptions configure a FaultTree.
type FaultOptions struct {
	// Rules are the faults, in order (see FaultTree). The default is
	// none: the tree passes every operation on.
	Rules []FaultRule
	// Seed seeds the source of the rules' chances. The default is 0 (a
	// seed like any other).
	Seed uint64
	// Sleep holds an operation for a rule's Delay. The default is
	// time.Sleep; a test on virtual time (testing/synctest) may keep
	// it, or pass a function that records the delays.
	Sleep func(time.Duration)
}

// FaultTree wraps a Tree and injects errors and delays into chosen
// operations: the stand-in for a failing or slow backing file system in
// tests and fault drills, as Pebble's errorfs does for its vfs.
//
// Every rule that matches an operation applies, in order: its Delay adds
// to the operation's wait, and the first one with an Err decides the
// error (the rules after it are not consulted). The operation then waits
// once, for the sum, through FaultOptions.Sleep, and fails with that
// error without reaching the inner tree, or goes on.
//
// A rule's Prob is drawn from one math/rand source seeded with
// FaultOptions.Seed, one draw per matching rule with a chance below 1:
// the same seed and the same sequence of operations fault the same ones.
// (Operations run concurrently draw in the order they reach the tree.)
// Matching reads no clock.
//
// Paths are tracked by the wrapper from what passes through it: an
// object's path is the name it was last looked up, created or linked by,
// or renamed to, below the root (a rename of a directory moves what lies
// below it). Changes made behind the wrapper, and objects it never saw
// named (a Tmpfile before Link, an ID the tree gave out before it was
// wrapped), have no known path: only rules without Path match them.
//
// Files and directories opened through the tree are wrapped too: their
// reads, writes and syncs are matched against the path the object had
// when they were opened, or has now if the tree still knows it. They have
// no descriptor (Fd returns -1), so no splice or passthrough bypasses the
// faults.
type FaultTree struct {
	inner Tree
	sleep func(time.Duration)

	mu     sync.Mutex
	rules  []FaultRule
	serial []chan struct{} // per rule: the queue of a Serial one (a lock a synctest bubble sees blocked on)
	fired  []int
	seen   []int // matching operations per rule, fired or not
	rand   *rand.Rand
	names  map[ID]faultLoc // where each object was last seen named
	byName map[faultLoc]ID
}

// faultLoc is an entry: a name in a directory.
type faultLoc struct {
	parent ID
	name   string
}

var _ Tree = (*FaultTree)(nil)

// NewFaultTree wraps inner. It fails when a rule is invalid.
func NewFaultTree(inner Tree, opts FaultOptions) (*FaultTree, error) {
	t := &FaultTree{
		inner:  inner,
		sleep:  opts.Sleep,
		rand:   rand.New(rand.NewPCG(opts.Seed, 0x5eedfa17)),
		names:  make(map[ID]faultLoc),
		byName: make(map[faultLoc]ID),
	}
	if t.sleep == nil {
		t.sleep = time.Sleep
	}
	if err := t.SetRules(opts.Rules...); err != nil {
		return nil, err
	}
	return t, nil
}

// SetRules replaces the rules, and their counts of faults and of the
// operations they matched, at any time.
// It fails, changing nothing, when a rule is invalid.
func (t *FaultTree) SetRules(rules ...FaultRule) error {
	for i := range rules {
		if err := rules[i].Validate(); err != nil {
			return fmt.Errorf("rule %d: %v", i, err)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.rules = append([]FaultRule(nil), rules...)
	t.serial = make([]chan struct{}, len(rules))
	for i := range rules {
		switch {
		case rules[i].Serial && rules[i].Disk != nil:
			t.serial[i] = rules[i].Disk.ch
		case rules[i].Serial:
			t.serial[i] = make(chan struct{}, 1)
		}
	}
	t.fired = make([]int, len(rules))
	t.seen = make([]int, len(rules))
	return nil
}

// Fired returns how many times each rule fired since SetRules.
func (t *FaultTree) Fired() []int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]int(nil), t.fired...)
}

// Inner returns the wrapped tree.
func (t *FaultTree) Inner() Tree { return t.inner }

// faultAt says which object an operation is on: the entry name of
// directory parent when name is not empty, else the object id, else
// (id 0) the path given.
type faultAt struct {
	id, parent ID
	name       string
	path       string
}

func onID(id ID) faultAt                     { return faultAt{id: id} }
func onEntry(parent ID, name string) faultAt { return faultAt{parent: parent, name: name} }

// inject applies the rules to one operation op on the objects at (any of
// them matching): it waits the delays and returns the error to fail with.
func (t *FaultTree) inject(op Op, at ...faultAt) error {
	var delay time.Duration
	var err error
	type held struct {
		q chan struct{}
		d time.Duration
	}
	var queues []held
	t.mu.Lock()
	for i := range t.rules {
		r := &t.rules[i]
		if r.Ops&op == 0 || r.Limit > 0 && t.fired[i] >= r.Limit {
			continue
		}
		matched := r.Path == ""
		for _, a := range at {
			if matched {
				break
			}
			matched = r.matches(t.pathOf(a))
		}
		if !matched {
			continue
		}
		if t.seen[i]++; t.seen[i] <= r.After || r.Prob > 0 && r.Prob < 1 && t.rand.Float64() >= r.Prob {
			continue
		}
		t.fired[i]++
		if r.Serial {
			queues = append(queues, held{t.serial[i], r.Delay})
		} else {
			delay += r.Delay
		}
		if r.Err != nil {
			err = r.Err
			break
		}
	}
	t.mu.Unlock()
	if delay > 0 {
		t.sleep(delay)
	}
	for _, h := range queues {
		h.q <- struct{}{}
		t.sleep(h.d)
		<-h.q
	}
	return err
}

// pathOf returns the path of the object at a, "" when unknown.
func (t *FaultTree) pathOf(a faultAt) string {
	switch {
	case a.name != "":
		p := t.idPath(a.parent)
		switch p {
		case "":
			return ""
		case ".":
			return a.name
		}
		return p + "/" + a.name
	case a.id != 0:
		if p := t.idPath(a.id); p != "" {
			return p
		}
	}
	return a.path
}

// idPath returns the path of object id, "" when unknown.
func (t *FaultTree) idPath(id ID) string {
	var parts []string
	for depth := 0; id != RootID; depth++ {
		l, ok := t.names[id]
		if !ok || depth > 4096 {
			return ""
		}
		parts = append(parts, l.name)
		id = l.parent
	}
	if len(parts) == 0 {
		return "."
	}
	var b strings.Builder
	for i := len(parts) - 1; i >= 0; i-- {
		b.WriteString(parts[i])
		if i > 0 {
			b.WriteByte('/')
		}
	}
	return b.String()
}

// named records that id is the entry name of parent.
func (t *FaultTree) named(id, parent ID, name string) {
	if id == RootID {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l := faultLoc{parent, name}
	if old, ok := t.byName[l]; ok && old != id && t.names[old] == l {
		delete(t.names, old)
	}
	if old, ok := t.names[id]; ok && t.byName[old] == id {
		delete(t.byName, old)
	}
	t.names[id] = l
	t.byName[l] = id
}

// removed records that the entry name of parent is gone; its object
// keeps the path it had.
func (t *FaultTree) removed(parent ID, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.byName, faultLoc{parent, name})
}

// renamed records a rename that succeeded.
func (t *FaultTree) renamed(from, to faultLoc, exchange bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	src, srcOK := t.byName[from]
	dst, dstOK := t.byName[to]
	delete(t.byName, from)
	delete(t.byName, to)
	if srcOK {
		t.names[src] = to
		t.byName[to] = src
	}
	if exchange && dstOK {
		t.names[dst] = from
		t.byName[from] = dst
	}
}

// wrapFile wraps a file of the inner tree, opened on the object at.
func (t *FaultTree) wrapFile(f *File, id ID, at faultAt) *File {
	t.mu.Lock()
	p := t.pathOf(at)
	t.mu.Unlock()
	return &File{fd: -1, io: &faultFile{t: t, at: faultAt{id: id, path: p}, f: f}}
}

func (t *FaultTree) Lookup(parent ID, name string) (Entry, error) {
	if err := t.inject(OpLookup, onEntry(parent, name)); err != nil {
		return Entry{}, err
	}
	e, err := t.inner.Lookup(parent, name)
	if err == nil {
		t.named(e.ID, parent, name)
	}
	return e, err
}

func (t *FaultTree) Forget(id ID, n uint64) bool {
	gone := t.inner.Forget(id, n)
	if gone {
		t.mu.Lock()
		if l, ok := t.names[id]; ok {
			delete(t.names, id)
			if t.byName[l] == id {
				delete(t.byName, l)
			}
		}
		t.mu.Unlock()
	}
	return gone
}

func (t *FaultTree) Getattr(id ID) (syscall.Stat_t, error) {
	if err := t.inject(OpGetattr, onID(id)); err != nil {
		return syscall.Stat_t{}, err
	}
	return t.inner.Getattr(id)
}

func (t *FaultTree) Setattr(id ID, f *File, set SetAttr) (syscall.Stat_t, error) {
	if err := t.inject(OpSetattr, onID(id)); err != nil {
		return syscall.Stat_t{}, err
	}
	if f != nil {
		if ff, ok := f.io.(*faultFile); ok {
			f = ff.f
		}
	}
	return t.inner.Setattr(id, f, set)
}

func (t *FaultTree) Readlink(id ID) ([]byte, error) {
	if err := t.inject(OpReadlink, onID(id)); err != nil {
		return nil, err
	}
	return t.inner.Readlink(id)
}

// created records the entry of a creation that succeeded.
func (t *FaultTree) created(e Entry, err error, parent ID, name string) (Entry, error) {
	if err == nil {
		t.named(e.ID, parent, name)
	}
	return e, err
}

func (t *FaultTree) Mknod(c *Cred, parent ID, name string, mode, dev uint32) (Entry, error) {
	if err := t.inject(OpMknod, onEntry(parent, name)); err != nil {
		return Entry{}, err
	}
	e, err := t.inner.Mknod(c, parent, name, mode, dev)
	return t.created(e, err, parent, name)
}

func (t *FaultTree) Mkdir(c *Cred, parent ID, name string, mode uint32) (Entry, error) {
	if err := t.inject(OpMkdir, onEntry(parent, name)); err != nil {
		return Entry{}, err
	}
	e, err := t.inner.Mkdir(c, parent, name, mode)
	return t.created(e, err, parent, name)
}

func (t *FaultTree) Symlink(c *Cred, parent ID, name, target string) (Entry, error) {
	if err := t.inject(OpSymlink, onEntry(parent, name)); err != nil {
		return Entry{}, err
	}
	e, err := t.inner.Symlink(c, parent, name, target)
	return t.created(e, err, parent, name)
}

func (t *FaultTree) Link(c *Cred, id, parent ID, name string) (Entry, error) {
	if err := t.inject(OpLink, onEntry(parent, name)); err != nil {
		return Entry{}, err
	}
	e, err := t.inner.Link(c, id, parent, name)
	return t.created(e, err, parent, name)
}

func (t *FaultTree) Unlink(parent ID, name string) error {
	if err := t.inject(OpUnlink, onEntry(parent, name)); err != nil {
		return err
	}
	err := t.inner.Unlink(parent, name)
	if err == nil {
		t.removed(parent, name)
	}
	return err
}

func (t *FaultTree) Rmdir(parent ID, name string) error {
	if err := t.inject(OpRmdir, onEntry(parent, name)); err != nil {
		return err
	}
	err := t.inner.Rmdir(parent, name)
	if err == nil {
		t.removed(parent, name)
	}
	return err
}

func (t *FaultTree) Rename(parent ID, name string, newParent ID, newName string, flags uint32) error {
	if err := t.inject(OpRename, onEntry(parent, name), onEntry(newParent, newName)); err != nil {
		return err
	}
	err := t.inner.Rename(parent, name, newParent, newName, flags)
	if err == nil {
		t.renamed(faultLoc{parent, name}, faultLoc{newParent, newName}, flags&unix.RENAME_EXCHANGE != 0)
	}
	return err
}

func (t *FaultTree) Create(c *Cred, parent ID, name string, flags, mode uint32) (Entry, *File, error) {
	if err := t.inject(OpCreate, onEntry(parent, name)); err != nil {
		return Entry{}, nil, err
	}
	e, f, err := t.inner.Create(c, parent, name, flags, mode)
	if err != nil {
		return e, f, err
	}
	t.named(e.ID, parent, name)
	return e, t.wrapFile(f, e.ID, onID(e.ID)), nil
}

func (t *FaultTree) Tmpfile(c *Cred, parent ID, flags, mode uint32) (Entry, *File, error) {
	if err := t.inject(OpCreate, onID(parent)); err != nil {
		return Entry{}, nil, err
	}
	e, f, err := t.inner.Tmpfile(c, parent, flags, mode)
	if err != nil {
		return e, f, err
	}
	return e, t.wrapFile(f, e.ID, onID(e.ID)), nil
}

func (t *FaultTree) Open(id ID, flags uint32) (*File, error) {
	if err := t.inject(OpOpen, onID(id)); err != nil {
		return nil, err
	}
	f, err := t.inner.Open(id, flags)
	if err != nil {
		return nil, err
	}
	return t.wrapFile(f, id, onID(id)), nil
}

func (t *FaultTree) OpenDir(id ID) (*Dir, error) {
	if err := t.inject(OpOpen, onID(id)); err != nil {
		return nil, err
	}
	d, err := t.inner.OpenDir(id)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	p := t.pathOf(onID(id))
	t.mu.Unlock()
	return &Dir{fd: -1, io: &faultDir{t: t, at: faultAt{id: id, path: p}, d: d}}, nil
}

func (t *FaultTree) Statfs(id ID) (syscall.Statfs_t, error) {
	if err := t.inject(OpStatfs, onID(id)); err != nil {
		return syscall.Statfs_t{}, err
	}
	return t.inner.Statfs(id)
}

func (t *FaultTree) Getxattr(id ID, name string, dest []byte) (int, error) {
	if err := t.inject(OpXattr, onID(id)); err != nil {
		return 0, err
	}
	return t.inner.Getxattr(id, name, dest)
}

func (t *FaultTree) Listxattr(id ID, dest []byte) (int, error) {
	if err := t.inject(OpXattr, onID(id)); err != nil {
		return 0, err
	}
	return t.inner.Listxattr(id, dest)
}

func (t *FaultTree) Setxattr(id ID, name string, data []byte, flags int) error {
	if err := t.inject(OpXattr, onID(id)); err != nil {
		return err
	}
	return t.inner.Setxattr(id, name, data, flags)
}

func (t *FaultTree) Removexattr(id ID, name string) error {
	if err := t.inject(OpXattr, onID(id)); err != nil {
		return err
	}
	return t.inner.Removexattr(id, name)
}

// As runs fn as the inner tree does; it is not faulted.
func (t *FaultTree) As(c *Cred, fn func() error) error { return t.inner.As(c, fn) }

// Close closes the inner tree.
func (t *FaultTree) Close() error { return t.inner.Close() }

// faultFile is a file opened through a FaultTree.
type faultFile struct {
	t  *FaultTree
	at faultAt // the object, and its path at the open
	f  *File   // the inner tree's
}

var _ fileIO = (*faultFile)(nil)

func (f *faultFile) ReadAt(pid int, p []byte, off int64) (int, error) {
	if err := f.t.inject(OpRead, f.at); err != nil {
		return 0, err
	}
	return f.f.ReadAtFor(pid, p, off)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	if err := f.t.inject(OpWrite, f.at); err != nil {
		return 0, err
	}
	return f.f.WriteAt(p, off)
}

func (f *faultFile) Stat() (syscall.Stat_t, error) {
	if err := f.t.inject(OpGetattr, f.at); err != nil {
		return syscall.Stat_t{}, err
	}
	return f.f.Stat()
}

func (f *faultFile) Sync(dataOnly bool) error {
	if err := f.t.inject(OpSync, f.at); err != nil {
		return err
	}
	return f.f.Sync(dataOnly)
}

func (f *faultFile) StartWriteback(off, n int64) error {
	if err := f.t.inject(OpSync, f.at); err != nil {
		return err
	}
	return f.f.StartWriteback(off, n)
}

func (f *faultFile) Flush() error {
	if err := f.t.inject(OpSync, f.at); err != nil {
		return err
	}
	return f.f.Flush()
}

func (f *faultFile) Allocate(mode uint32, off, n int64) error {
	if err := f.t.inject(OpWrite, f.at); err != nil {
		return err
	}
	return f.f.Allocate(mode, off, n)
}

func (f *faultFile) Seek(off int64, whence int) (int64, error) { return f.f.Seek(off, whence) }

// Truncate is not faulted: it comes from Setattr, which is.
func (f *faultFile) Truncate(size int64) error { return f.f.truncate(size) }

func (f *faultFile) KillSuidgid() error {
	if err := f.t.inject(OpSetattr, f.at); err != nil {
		return err
	}
	return f.f.KillSuidgid()
}

func (f *faultFile) Close() error { return f.f.Close() }

// faultDir is a directory stream opened through a FaultTree.
type faultDir struct {
	t  *FaultTree
	at faultAt
	d  *Dir // the inner tree's
}

var _ dirIO = (*faultDir)(nil)

func (d *faultDir) Seek(off uint64) error {
	if err := d.t.inject(OpReaddir, d.at); err != nil {
		return err
	}
	return d.d.Seek(off)
}

func (d *faultDir) Peek() (DirEntry, bool, error) {
	if err := d.t.inject(OpReaddir, d.at); err != nil {
		return DirEntry{}, false, err
	}
	return d.d.Peek()
}

func (d *faultDir) Advance() { d.d.Advance() }

func (d *faultDir) Sync() error {
	if err := d.t.inject(OpSync, d.at); err != nil {
		return err
	}
	return d.d.Sync()
}

func (d *faultDir) Close() error { return d.d.Close() }
