package fsys

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"sluice/backing"
	"sluice/engine"
	"sluice/group"
	"sluice/stack"
	"sluice/throttle"
)

// HandoverState is a mount's state as handed to the process that takes it
// over (FS.Handover, Adopt): plain data, JSON-encodable. Descriptors are
// indexes into the list handed beside it; the FUSE connection's is the
// first.
type HandoverState struct {
	// Fuse is the connection and what INIT negotiated on it; its Fd is
	// the index 0.
	Fuse fuse.Handoff `json:"fuse"`
	// Tree is the backing tree's objects, the kernel's node ids among
	// them; its descriptors are TreeFds, from index 1. A mirror set's
	// state is Mirror instead (Tree is then empty), its descriptors the
	// TreeFds from index 1, indexed from there as MirrorState says.
	Tree    backing.LocalState   `json:"tree"`
	Mirror  *backing.MirrorState `json:"mirror,omitempty"`
	TreeFds int                  `json:"tree_fds"`
	Nodes   []NodeState          `json:"nodes,omitempty"`
	Files   []FileState          `json:"files,omitempty"`
	Dirs    []DirState           `json:"dirs,omitempty"`
	// NextFile and NextDir are the last file and directory handles given.
	NextFile uint64 `json:"next_file"`
	NextDir  uint64 `json:"next_dir"`
	// Limits are every group's limits in force, set by the command line,
	// the config file, set or reload, in the order to apply them.
	Limits      map[string]throttle.Limits `json:"limits"`
	LimitsOrder []string                   `json:"limits_order"`
	Tags        group.TagState             `json:"tags"`
	Dirty       int64                      `json:"dirty"`
	// Figures are each group's counters, which go on in the new process.
	Figures []GroupFigures `json:"figures,omitempty"`
	// Schedules are where the capped groups' caps stood (their debt and
	// idle credit) at Clock, the system's monotonic clock in ns.
	Schedules map[string]throttle.Schedule `json:"schedules,omitempty"`
	Clock     int64                        `json:"clock,omitempty"`
}

// monotonic reads the system's monotonic clock, which every process
// reads alike (CLOCK_MONOTONIC), in ns.
func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// GroupFigures are a group's counters and wait histograms.
type GroupFigures struct {
	Group     string              `json:"group"`
	Counters  stack.Counters      `json:"counters"`
	ReadWait  stack.WaitHistogram `json:"read_wait"`
	WriteWait stack.WaitHistogram `json:"write_wait"`
}

// NodeState is what the front end keeps of an object beyond its open files.
type NodeState struct {
	ID        backing.ID       `json:"id"`
	Mtime     syscall.Timespec `json:"mtime"`
	Ctime     syscall.Timespec `json:"ctime"`
	Size      int64            `json:"size"`
	BackingID int32            `json:"backing_id,omitempty"` // passthrough registration
}

// FileState is an open file. A mirror set's file has a descriptor per
// mirror (Fds, -1 where not open; Fd is then -1) and the flags it was
// opened with.
type FileState struct {
	Fh      uint64       `json:"fh"`
	ID      backing.ID   `json:"id"`
	Fd      int          `json:"fd"`
	Fds     []int        `json:"fds,omitempty"`
	Flags   uint32       `json:"flags,omitempty"`
	Opener  string       `json:"opener"` // the group that opened it
	Charged string       `json:"charged"`
	Cred    backing.Cred `json:"cred"`
	Serve   stack.Serve  `json:"serve"`
	Writes  bool         `json:"writes,omitempty"`
	Splice  bool         `json:"splice,omitempty"`
	Append  bool         `json:"append,omitempty"`
	Reading bool         `json:"reading,omitempty"`
}

// DirState is an open directory and where its listing goes on from; of
// a mirror set, Mirror is the mirror it reads.
type DirState struct {
	Fh      uint64     `json:"fh"`
	ID      backing.ID `json:"id"`
	Fd      int        `json:"fd"`
	Mirror  int        `json:"mirror,omitempty"`
	Offset  uint64     `json:"offset"`
	Charged string     `json:"charged"`
}

// HandoverWait is how long Handover waits for the requests being served
// to be answered before it gives up: a read held by a low limit, or one
// SOURCE does not answer, keeps the mount with its process.
const HandoverWait = 10 * time.Second

// Handover stops taking requests, waits until those being served are
// answered (wait at most), and returns the mount's state and the
// descriptors it refers to, duplicates that the caller closes once
// sent. Requests the kernel queues meanwhile wait for the process that
// takes the mount over. The mount must then be either Released (taken)
// or Resumed (not taken); until then it serves nothing.
//
// A mount of SOURCE or of a mirror set over /dev/fuse can be handed
// over; a tree given as Options.Tree and the io_uring transport cannot
// yet. A mirror set is not handed over while a resync runs or a mirror
// joins it.
func (f *FS) Handover(wait time.Duration) (*HandoverState, []int, error) {
	local, ok := f.tree.(*backing.Local)
	switch {
	case f.mirrors != nil:
	case !ok:
		return nil, nil, errors.New("only a mount of a SOURCE directory or a mirror set can be handed over")
	case f.server.IOUring():
		return nil, nil, fmt.Errorf("a mount served over io_uring cannot be handed over yet: mount it with --transport %s", TransportDev)
	}
	h, err := f.server.Handover(wait)
	if err != nil {
		return nil, nil, err
	}
	st, fds, err := f.handoverState(local, h)
	if err != nil {
		f.server.Resume()
		return nil, nil, err
	}
	return st, fds, nil
}

// exportTree exports the backing tree's state into st: local's, or the
// mirror set's.
func (f *FS) exportTree(local *backing.Local, st *HandoverState) ([]int, error) {
	if f.mirrors != nil {
		ms, fds, err := f.mirrors.Export()
		if err != nil {
			return nil, err
		}
		st.Mirror = &ms
		return fds, nil
	}
	tree, fds, err := local.Export()
	st.Tree = tree
	return fds, err
}

// handoverState exports the mount's state; on error it has closed h.Fd
// and every descriptor it made.
func (f *FS) handoverState(local *backing.Local, h *fuse.Handoff) (*HandoverState, []int, error) {
	st := &HandoverState{Fuse: *h, Dirty: f.dirty.Load(), Tags: f.tags.Export()}
	treeFds, err := f.exportTree(local, st)
	if err != nil {
		unix.Close(h.Fd)
		return nil, nil, err
	}
	st.TreeFds = len(treeFds)
	st.Fuse.Fd = 0
	fds := append(backing.Descriptors{h.Fd}, treeFds...)
	closeAll := func() {
		fds.Close()
		if f.mirrors != nil {
			f.mirrors.Resume()
		}
	}
	dup := fds.Dup
	f.mu.Lock()
	for _, id := range slices.Sorted(maps.Keys(f.nodes)) {
		n := f.nodes[id]
		n.mu.Lock()
		st.Nodes = append(st.Nodes, NodeState{ID: id, Mtime: n.stamp.mtime, Ctime: n.stamp.ctime, Size: n.stamp.size, BackingID: n.backingID})
		n.mu.Unlock()
	}
	f.mu.Unlock()
	f.quota.mu.Lock()
	defer f.quota.mu.Unlock()
	f.files.mu.Lock()
	st.NextFile = f.files.next
	for _, fh := range slices.Sorted(maps.Keys(f.files.m)) {
		h := f.files.m[fh]
		if mfds, flags := h.file.MirrorFds(); mfds != nil {
			fs := FileState{Fh: fh, ID: h.node.id, Fd: -1, Flags: flags}
			for _, fd := range mfds {
				i := -1
				if fd >= 0 {
					if i, err = dup(fd); err != nil {
						f.files.mu.Unlock()
						closeAll()
						return nil, nil, err
					}
				}
				fs.Fds = append(fs.Fds, i)
			}
			h.mu.Lock()
			fs.Opener, fs.Charged, fs.Cred, fs.Serve = h.opener.Path(), f.quota.files[fh], *h.cred, h.serve
			fs.Writes, fs.Splice, fs.Append, fs.Reading = h.writes, h.splice, h.append, h.reading
			h.mu.Unlock()
			st.Files = append(st.Files, fs)
			continue
		}
		if h.file.Fd() < 0 {
			f.files.mu.Unlock()
			closeAll()
			return nil, nil, fmt.Errorf("open file %d has no descriptor to hand over", fh)
		}
		i, err := dup(h.file.Fd())
		if err != nil {
			f.files.mu.Unlock()
			closeAll()
			return nil, nil, err
		}
		fs := f.fileState(fh, h)
		fs.Fd, fs.Charged = i, f.quota.files[fh]
		st.Files = append(st.Files, fs)
	}
	f.files.mu.Unlock()
	f.dirs.mu.Lock()
	st.NextDir = f.dirs.next
	for _, fh := range slices.Sorted(maps.Keys(f.dirs.m)) {
		d := f.dirs.m[fh]
		d.mu.Lock()
		fd, off := d.dir.Fd(), d.dir.Offset()
		mi := 0
		var err error
		if f.mirrors != nil {
			mi, err = f.mirrors.DirMirror(d.id, d.dir)
		}
		d.mu.Unlock()
		i := -1
		if err == nil {
			i, err = dup(fd)
		}
		if err != nil {
			f.dirs.mu.Unlock()
			closeAll()
			return nil, nil, err
		}
		st.Dirs = append(st.Dirs, DirState{Fh: fh, ID: d.id, Fd: i, Mirror: mi, Offset: off, Charged: f.quota.dirs[fh]})
	}
	f.dirs.mu.Unlock()
	f.groupsState(st)
	return st, fds, nil
}

// fileState is open file fh's state, its descriptor and charge left out.
func (f *FS) fileState(fh uint64, h *handle) FileState {
	h.mu.Lock()
	defer h.mu.Unlock()
	return FileState{Fh: fh, ID: h.node.id, Fd: -1, Opener: h.opener.Path(),
		Cred: *h.cred, Serve: h.serve, Writes: h.writes, Splice: h.splice, Append: h.append, Reading: h.reading}
}

// groupsState puts every group's limits, figures and schedule in st.
func (f *FS) groupsState(st *HandoverState) {
	st.Schedules, st.Clock = f.eng.Schedules(), monotonic()
	m := f.eng.Metrics()
	st.Limits = map[string]throttle.Limits{}
	for _, g := range m.Groups {
		st.Limits[g.Group] = g.Limit
		st.LimitsOrder = append(st.LimitsOrder, g.Group)
		st.Figures = append(st.Figures, GroupFigures{Group: g.Group, Counters: g.Counters, ReadWait: g.ReadWait, WriteWait: g.WriteWait})
	}
}

// Resume serves again after a Handover whose state was not taken.
func (f *FS) Resume() {
	if f.mirrors != nil {
		f.mirrors.Resume()
	}
	f.server.Resume()
}

// Release ends a mount handed over and taken: Wait returns, and the
// mount's files, directories and tree are closed in this process without
// a word to the kernel (the connection, its passthrough registrations
// and its mount are the other process's now).
func (f *FS) Release() {
	f.handed.Store(true)
	if f.mirrors != nil {
		// The record of files being written is the other process's.
		f.mirrors.Release()
	}
	f.server.Release()
}

// Adopt takes over a mount another process handed over (FS.Handover):
// state and fds are what it handed, the descriptors this process's own.
// opts are the mount's options, as for Mount; Source and Mountpoint must
// be the mount's. The limits in force are those handed over, every
// group's, with opts.Limits applied over them when newLimits says they
// are new (a command line given for the takeover) rather than those the
// mount started with. What the kernel agreed to at the mount's INIT
// stays: WriteCache and Passthrough follow it, whatever opts say. The
// mount serves nothing until Serve; Discard drops it (closing the
// descriptors, the connection left to the other process).
//
// A mirror set is taken over with its mirrors as the state names them
// (opts.Mirrors must be the first of them: mirrors added while it served
// come last), which of them are stale, and its read policy, set at run
// time or not; opts.ReadPolicy replaces it only when newLimits (a command
// line given for the takeover). Its record of files being written goes
// on in the same files, written by this process from Serve on.
func Adopt(opts Options, st *HandoverState, fds []int, newLimits bool) (*FS, error) {
	closeAll := func() {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}
	if len(fds) < 1+st.TreeFds {
		closeAll()
		return nil, fmt.Errorf("handover: %d descriptors, want %d at least", len(fds), 1+st.TreeFds)
	}
	if opts.Tree != nil || (len(opts.Mirrors) > 0) != (st.Mirror != nil) {
		closeAll()
		if st.Mirror != nil {
			return nil, errors.New("the mount handed over serves a mirror set: take it over with its mirrors")
		}
		return nil, errors.New("only a mount of a SOURCE directory or a mirror set can be taken over")
	}
	if st.Mirror != nil {
		// The set's mirrors, those added while it served last.
		dirs := st.Mirror.Dirs
		abs := func(p string) string { a, _ := filepath.Abs(p); return filepath.Clean(a) }
		if len(opts.Mirrors) > len(dirs) || !slices.EqualFunc(opts.Mirrors, dirs[:len(opts.Mirrors)], func(a, b string) bool { return abs(a) == abs(b) }) {
			closeAll()
			return nil, fmt.Errorf("the mount serves the mirror set %s, not %s", strings.Join(dirs, ","), strings.Join(opts.Mirrors, ","))
		}
		opts.Mirrors = slices.Clone(dirs)
		opts.Passthrough = false
	}
	if opts.Transport == TransportURing {
		closeAll()
		return nil, fmt.Errorf("transport %s: a mount is taken over on /dev/fuse", TransportURing)
	}
	opts.Transport = TransportDev
	opts.WriteCache = st.Fuse.Flags&fuse.CAP_WRITEBACK_CACHE != 0
	opts.Passthrough = st.Fuse.Flags&fuse.CAP_PASSTHROUGH != 0 && st.Mirror == nil
	take := func(i int) int {
		if i < 0 || i >= len(fds) {
			return -1
		}
		fd := fds[i]
		fds[i] = -1
		return fd
	}
	raiseNoFile()
	eopts := opts.Options
	if eopts.Dying == nil {
		eopts.Dying = dying
	}
	eng, err := engine.New(eopts)
	if err != nil {
		closeAll()
		return nil, err
	}
	f := &FS{
		opts: opts, eng: eng, epoch: time.Now(),
		groups: make(map[string]*throttle.Group),
		nodes:  make(map[backing.ID]*node),
		quota:  newOpenQuota(groupMaxOpen(opts.GroupMaxOpen)),
	}
	treeFds := make([]int, st.TreeFds)
	for i := range treeFds {
		treeFds[i] = take(1 + i)
	}
	lopts := backing.LocalOptions{MaxOpen: opts.MaxOpen}
	if opts.Journal != nil {
		lopts.Refs = opts.Journal.refs
	}
	var local *backing.Local
	if st.Mirror != nil {
		f.mirrors, err = backing.AdoptMirror(*st.Mirror, treeFds, backing.MirrorOptions{
			LocalOptions: lopts, Faults: opts.MirrorFaults,
			Now: func() int64 { return int64(time.Since(f.epoch)) },
			Log: func(format string, args ...any) { f.log().Warn(fmt.Sprintf(format, args...), "component", "mirror") },
		})
		if err != nil {
			eng.Close()
			closeAll()
			return nil, fmt.Errorf("mirrors %s: %v", strings.Join(opts.Mirrors, ","), err)
		}
		f.tree = f.mirrors
		if newLimits && opts.ReadPolicy != "" && opts.ReadPolicy != f.mirrors.Policy() {
			if err := f.mirrors.SetPolicy(opts.ReadPolicy); err != nil {
				f.mirrors.Release()
				f.mirrors.Close()
				eng.Close()
				closeAll()
				return nil, fmt.Errorf("--read-policy: %v", err)
			}
		}
	} else {
		local, err = backing.AdoptLocal(st.Tree, treeFds, lopts)
		if err != nil {
			eng.Close()
			closeAll()
			return nil, fmt.Errorf("SOURCE %s: %v", opts.Source, err)
		}
		f.tree = local
	}
	fail := func(err error) (*FS, error) {
		for _, h := range f.files.drain() {
			h.file.Close()
		}
		for _, d := range f.dirs.drain() {
			d.dir.Close()
		}
		if f.mirrors != nil {
			f.mirrors.Release()
		}
		f.tree.Close()
		eng.Close()
		closeAll()
		return nil, err
	}
	f.group(group.Default)
	f.SetRules(opts.Rules)
	f.tags.Import(st.Tags)
	order, all := slices.Clone(st.LimitsOrder), maps.Clone(st.Limits)
	if all == nil {
		all = map[string]throttle.Limits{}
	}
	if newLimits {
		for _, l := range opts.Limits {
			if _, ok := all[l.Group]; !ok {
				order = append(order, l.Group)
			}
			all[l.Group] = l.Apply(all[l.Group])
		}
	}
	if _, err := eng.SetAllLimits(order, all); err != nil {
		return fail(fmt.Errorf("the limits handed over: %v", err))
	}
	for _, g := range st.Figures {
		eng.Carry(stack.GroupMetrics{Group: g.Group, Counters: g.Counters, ReadWait: g.ReadWait, WriteWait: g.WriteWait})
	}
	if st.Clock != 0 {
		// Each group's debt and idle credit, less what passed since.
		eng.SetSchedules(st.Schedules, time.Duration(max(monotonic()-st.Clock, 0)))
	}
	for _, ns := range st.Nodes {
		n := f.nodeOf(ns.ID)
		n.stamp = stamp{mtime: ns.Mtime, ctime: ns.Ctime, size: ns.Size}
		n.backingID = ns.BackingID
	}
	f.files.next, f.dirs.next = st.NextFile, st.NextDir
	for _, fs := range st.Files {
		var file *backing.File
		if f.mirrors != nil {
			mfds := make([]int, len(fs.Fds))
			for i, k := range fs.Fds {
				mfds[i] = take(k)
			}
			file, err = f.mirrors.AdoptFile(fs.ID, mfds, fs.Flags)
		} else {
			file, err = local.AdoptFile(fs.ID, take(fs.Fd))
		}
		if err != nil {
			return fail(fmt.Errorf("open file %d: %v", fs.Fh, err))
		}
		n := f.nodeOf(fs.ID)
		cred := fs.Cred
		h := &handle{file: file, node: n, opener: f.group(fs.Opener), cred: &cred, serve: fs.Serve,
			writes: fs.Writes, splice: fs.Splice, append: fs.Append}
		h.sh.Ino, h.sh.File, h.sh.Whole = uint64(fs.ID), n, fs.Serve.Mode != stack.ServeDirect
		n.adopt(h)
		if fs.Reading {
			if err := h.ensureReader(); err != nil {
				return fail(fmt.Errorf("open file %d: %v", fs.Fh, err))
			}
		}
		if fs.Serve.Mode == stack.ServePassthrough {
			f.passOpen(h.opener, 1)
		}
		f.files.put(fs.Fh, h)
		if fs.Charged != "" {
			f.quota.adopt(f.quota.files, fs.Fh, fs.Charged)
		}
	}
	for _, ds := range st.Dirs {
		var d *backing.Dir
		if f.mirrors != nil {
			d, err = f.mirrors.AdoptDir(ds.ID, ds.Mirror, take(ds.Fd), ds.Offset)
		} else {
			d, err = local.AdoptDir(ds.ID, take(ds.Fd), ds.Offset)
		}
		if err != nil {
			return fail(fmt.Errorf("open directory %d: %v", ds.Fh, err))
		}
		f.dirs.put(ds.Fh, &dirHandle{dir: d, id: ds.ID})
		if ds.Charged != "" {
			f.quota.adopt(f.quota.dirs, ds.Fh, ds.Charged)
		}
	}
	h := st.Fuse
	h.Fd = take(0)
	mo, dirty := f.mountOptions(false)
	server, err := fuse.NewServerFrom(quotaRaw{&raw{RawFileSystem: fuse.NewDefaultRawFileSystem(), f: f}, f.quota}, opts.Mountpoint, &h, &mo)
	if err != nil {
		unix.Close(h.Fd)
		return fail(fmt.Errorf("take over %s: %w", opts.Mountpoint, err))
	}
	closeAll() // any the state did not name
	f.server = server
	f.stop = make(chan struct{})
	if opts.Journal != nil {
		if err := f.startJournal(false); err != nil {
			return fail(err)
		}
	}
	f.dirty.Store(cmp.Or(st.Dirty, dirty))
	f.spliceMax = pipeMax() - 2*4096
	return f, nil
}

// adopt counts a handle taken over as ioMode counted it at its open.
func (n *node) adopt(h *handle) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch h.serve.Mode {
	case stack.ServeStraight:
		n.cachedIO++
	case stack.ServeDirect:
		n.directIO++
	case stack.ServePassthrough:
		n.passRefs++
	}
	if h.serve.CachedWrites {
		n.cachedW = append(n.cachedW, h)
	}
}

// Serve starts serving a mount taken over (Adopt).
func (f *FS) Serve() {
	if dev := fuseDevice(f.server); dev != nil {
		f.watch(dev, true)
		if f.mirrors != nil {
			if a := answerer(dev, &f.late); a != nil {
				f.mirrors.SetAnswer(a)
			}
		}
	}
	if f.mirrors != nil {
		f.mirrors.Activate()
	}
	if j := f.journal; j != nil {
		go f.checkpoints()
		// The requests the dead process read and did not answer.
		f.server.Replay(j.pending)
		j.pending = nil
	}
	go f.server.Serve()
}

// Discard drops a mount taken over (Adopt) that is not to serve: its
// descriptors close, and the connection stays with the process that
// handed it over.
func (f *FS) Discard() {
	f.handed.Store(true)
	if f.mirrors != nil {
		// The record of files being written stays the other process's.
		f.mirrors.Release()
	}
	f.closeQuietly()
	f.server.Release()
}

// closeQuietly closes this process's descriptors of the mount's open
// files, directories and tree without a word to the kernel: for a mount
// whose connection another process serves.
func (f *FS) closeQuietly() {
	for _, h := range f.files.drain() {
		h.mu.Lock()
		if h.reading {
			h.reading = false
			h.node.releaseReader()
		}
		h.mu.Unlock()
		h.file.Close()
	}
	for _, d := range f.dirs.drain() {
		d.dir.Close()
	}
	f.eng.Close()
	f.tree.Close()
}
