package fsys

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"sluice/backing"
)

// A mount that survives its process: a supervisor (sluice mount
// --supervise) holds the FUSE connection, a descriptor of every open file
// and directory, and a record of the objects the kernel holds, all told to
// it by the serving process as they change (the journal). When that
// process dies, the supervisor hands the record and the descriptors to a
// new one (Adopt, as a takeover does), which serves the same connection:
// the kernel's node ids and file handles keep their meaning, and the
// requests queued meanwhile are read by the new process.
//
// Each change is told before the request that made it is answered, in one
// datagram of a SOCK_SEQPACKET socket: the kernel queues it whole to the
// supervisor or not at all, and a datagram queued stays readable after
// its sender dies. So the record the supervisor holds is, at any instant
// of a crash, the state of every answered request (and maybe of some not
// yet answered).
//
// Reference counts change at every lookup, too often for a message each:
// they live in memory the supervisor holds, a slot per object
// (backing.RefTable), stored before the lookup is answered. An object with
// no slot (the table full) is kept by a new process until the mount ends
// (it takes the kernel's forgets as if it held more lookups than any the
// kernel can send).

// JournalMsg is one datagram of the journal.
type JournalMsg struct {
	Kind string `json:"k"`
	// Start: the connection and the tree when the journal starts.
	Fuse *fuse.Handoff       `json:"fuse,omitempty"`
	Tree *backing.LocalState `json:"tree,omitempty"`
	// Enter: a new object; Drop: one forgotten (ID).
	Object *backing.LocalObject `json:"o,omitempty"`
	ID     backing.ID           `json:"id,omitempty"`
	// Mount: a mount of SOURCE's file handles.
	Mount int `json:"mount,omitempty"`
	// File and Dir: opened; Close and CloseDir: released (Fh).
	File *FileState `json:"file,omitempty"`
	Dir  *DirState  `json:"dir,omitempty"`
	Fh   uint64     `json:"fh,omitempty"`
	// Backing: node ID's passthrough registration (0: none).
	Backing int32 `json:"bid,omitempty"`
	// Groups: the limits in force, the tags and the counters.
	Groups *HandoverState `json:"groups,omitempty"`
}

// The journal's kinds.
const (
	jStart    = "start"
	jEnter    = "enter"
	jDrop     = "drop"
	jMount    = "mount"
	jFile     = "file"
	jClose    = "close"
	jDir      = "dir"
	jCloseDir = "closedir"
	jBacking  = "backing"
	jGroups   = "groups"
	jUp       = "up"    // a new process serves the mount after a crash
	jReady    = "ready" // the mount serves, its control socket too
)

// Journal is the serving process's end of the journal: a SOCK_SEQPACKET
// socket whose other end the supervisor reads (Options.Journal).
type Journal struct {
	fd   int
	dead atomic.Bool
	once sync.Once
	log  func(err error)
	// arena holds the requests being served; pending are those a
	// process that died left there unanswered.
	arena   *requestArena
	pending [][]byte
	// refs keeps the objects' reference counts for the supervisor.
	refs *backing.RefTable
}

// NewJournal makes a Journal that sends on fd, a SOCK_SEQPACKET socket it
// takes over; requests are read into the memfd arena (ArenaBytes long;
// -1 for none), and the objects' reference counts kept in the memfd refs
// (RefsBytes long; -1 for none), which it maps and closes. log, if not
// nil, is told once when the supervisor cannot be reached (the mount then
// serves on, no longer kept for a crash).
func NewJournal(fd, arena, refs int, log func(err error)) (*Journal, error) {
	// Changes come in bursts (a tree listed with its attributes); the
	// supervisor reads them as they come.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8<<20)
	j := &Journal{fd: fd, log: log}
	if refs >= 0 {
		mem, err := mapRefs(refs, unix.PROT_READ|unix.PROT_WRITE)
		unix.Close(refs)
		if err != nil {
			unix.Close(fd)
			if arena >= 0 {
				unix.Close(arena)
			}
			return nil, err
		}
		j.refs = backing.NewRefTable(mem)
	}
	if arena >= 0 {
		a, err := newRequestArena(arena)
		if err == nil {
			j.pending, err = a.pending(arena)
		}
		unix.Close(arena)
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		a.full = func() {
			if log != nil {
				log(fmt.Errorf("more than %d requests at once: those past them are not kept for a crash", len(a.bufs)))
			}
		}
		j.arena = a
	}
	return j, nil
}

// send sends m with the descriptors fds (read, not taken): the
// changes every request may make in a few bytes (encodeJournal), the
// others as JSON.
func (j *Journal) send(m *JournalMsg, fds ...int) {
	if j == nil || j.dead.Load() {
		return
	}
	var b []byte
	var err error
	if b = encodeJournal(m, len(fds) > 0); b == nil {
		b, err = json.Marshal(m)
	}
	if err == nil {
		var oob []byte
		if len(fds) > 0 {
			oob = unix.UnixRights(fds...)
		}
		for {
			err = unix.Sendmsg(j.fd, b, oob, nil, 0)
			if !errors.Is(err, unix.EINTR) {
				break
			}
		}
	}
	if err != nil {
		j.dead.Store(true)
		j.once.Do(func() {
			if j.log != nil {
				j.log(fmt.Errorf("the supervisor's journal: %v (a crash of this process now ends the mount)", err))
			}
		})
	}
}

// Close closes the journal's socket.
func (j *Journal) Close() {
	if j != nil {
		j.dead.Store(true)
		unix.Close(j.fd)
	}
}

// RefsSlots is how many objects a supervised mount keeps the reference
// counts of (8 bytes each, allocated as they are used); the counts of
// objects past them are not kept, and a new process after a crash keeps
// those objects until the mount ends.
const RefsSlots = 1 << 22

// RefsBytes is the size of the memfd a supervisor makes for a mount's
// reference counts.
func RefsBytes() int64 { return RefsSlots * 8 }

// mapRefs maps the memfd of a mount's reference counts.
func mapRefs(fd, prot int) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Size < 8 {
		return nil, fmt.Errorf("the reference counts' memory is %d bytes", st.Size)
	}
	mem, err := unix.Mmap(fd, 0, int(st.Size), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the reference counts' memory: %v", err)
	}
	return mem, nil
}

// treeJournal tells the journal of the backing tree's changes.
type treeJournal struct{ j *Journal }

func (t treeJournal) Entered(o backing.LocalObject, fd int) {
	if fd < 0 {
		t.j.send(&JournalMsg{Kind: jEnter, Object: &o})
		return
	}
	o.Fd = 0
	t.j.send(&JournalMsg{Kind: jEnter, Object: &o}, fd)
}

func (t treeJournal) Dropped(id backing.ID) { t.j.send(&JournalMsg{Kind: jDrop, ID: id}) }

func (t treeJournal) Mounted(mountID, fd int) {
	t.j.send(&JournalMsg{Kind: jMount, Mount: mountID}, fd)
}

// checkJournal says why a mount of opts cannot be kept for a crash.
func checkJournal(opts Options) error {
	switch {
	case opts.Journal == nil:
		return nil
	case len(opts.Mirrors) > 0:
		return errors.New("a mirror set cannot be supervised yet")
	case opts.Tree != nil:
		return errors.New("only a mount of a SOURCE directory can be supervised")
	case opts.Transport == TransportURing:
		return fmt.Errorf("a mount over io_uring cannot be supervised yet: use --transport %s", TransportDev)
	}
	return nil
}

// startJournal starts the journal of a mount that serves nothing yet:
// fresh, with the connection and the tree as they are (a new mount); or
// going on from the record the supervisor has (a mount it handed this
// process after a crash).
func (f *FS) startJournal(fresh bool) error {
	j := f.opts.Journal
	local, ok := f.tree.(*backing.Local)
	if !ok {
		return errors.New("only a mount of a SOURCE directory can be supervised")
	}
	if !fresh {
		local.SetJournal(treeJournal{j}) // the supervisor has the rest
		j.send(&JournalMsg{Kind: jUp})
		f.journal = j
		return nil
	}
	h, err := f.server.Connection()
	if err != nil {
		return err
	}
	st, fds, err := local.Journal(treeJournal{j})
	if err != nil {
		unix.Close(h.Fd)
		return err
	}
	all := append(backing.Descriptors{h.Fd}, fds...)
	defer all.Close()
	h.Fd = 0
	for i := range st.Objects {
		if st.Objects[i].Fd >= 0 {
			st.Objects[i].Fd++
		}
	}
	for i := range st.Mounts {
		st.Mounts[i].Fd++
	}
	j.send(&JournalMsg{Kind: jStart, Fuse: h, Tree: &st}, all...)
	if j.dead.Load() {
		local.SetJournal(nil)
		return errors.New("the supervisor did not take the mount's state")
	}
	f.journal = j
	return nil
}

// journalOpen tells the journal of a file or directory opened as fh,
// charged to group g's open files.
func (f *FS) journalOpen(dir bool, fh uint64, g string) {
	j := f.journal
	if j == nil {
		return
	}
	if dir {
		d, ok := f.dirs.get(fh)
		if !ok || d.dir.Fd() < 0 {
			return
		}
		j.send(&JournalMsg{Kind: jDir, Dir: &DirState{Fh: fh, ID: d.id, Fd: 0, Charged: g}}, d.dir.Fd())
		return
	}
	h, ok := f.files.get(fh)
	if !ok || h.file.Fd() < 0 {
		return
	}
	fs := f.fileState(fh, h)
	fs.Fd, fs.Charged = 0, g
	j.send(&JournalMsg{Kind: jFile, File: &fs}, h.file.Fd())
}

// journalClose tells the journal of a file or directory released.
func (f *FS) journalClose(dir bool, fh uint64) {
	if j := f.journal; j != nil {
		k := jClose
		if dir {
			k = jCloseDir
		}
		j.send(&JournalMsg{Kind: k, Fh: fh})
	}
}

// journalBacking tells the journal of node id's passthrough registration.
func (f *FS) journalBacking(id backing.ID, bid int32) {
	if j := f.journal; j != nil {
		j.send(&JournalMsg{Kind: jBacking, ID: id, Backing: bid})
	}
}

// Checkpoint tells the supervisor of a supervised mount the limits in
// force, the tags and the counters, which a new process takes on after a
// crash: at once after a change (set, reload, a tag), and every second
// anyway for the counters. It does nothing for a mount not supervised.
func (f *FS) Checkpoint() {
	j := f.journal
	if j == nil {
		return
	}
	st := &HandoverState{Tags: f.tags.Export()}
	f.groupsState(st)
	j.send(&JournalMsg{Kind: jGroups, Groups: st})
}

// Ready tells the supervisor of a supervised mount that it serves, with
// all its process opens beside it (the control socket): the supervisor
// tells the service manager. It does nothing for a mount not supervised.
func (f *FS) Ready() {
	if j := f.journal; j != nil {
		j.send(&JournalMsg{Kind: jReady})
	}
}

// checkpoints calls Checkpoint every second until the mount ends.
func (f *FS) checkpoints() {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-f.stop:
			return
		case <-t.C:
			f.Checkpoint()
		}
	}
}

// Record is the supervisor's copy of a supervised mount's state, made of
// the journal's messages (Apply), and the descriptors they brought, which
// it holds. State turns it into the state a new process adopts.
type Record struct {
	fuse    *fuse.Handoff
	fuseFd  int
	nextID  backing.ID
	noHdl   bool
	objects map[backing.ID]backing.LocalObject // Fd: the descriptor itself, or -1
	mounts  map[int]int
	files   map[uint64]FileState // Fd: the descriptor itself
	dirs    map[uint64]DirState
	nodes   map[backing.ID]int32
	nextFh  uint64
	nextDh  uint64
	groups  *HandoverState
	ready   bool
	refs    []byte // the reference counts' memory (MapRefs), nil for none
}

// MapRefs has the record read the objects' reference counts from fd, the
// memfd the mount's processes keep them in (RefsBytes long), mapped
// read-only; fd stays the caller's.
func (r *Record) MapRefs(fd int) error {
	mem, err := mapRefs(fd, unix.PROT_READ)
	if err == nil {
		r.refs = mem
	}
	return err
}

// NewRecord returns an empty record.
func NewRecord() *Record {
	return &Record{fuseFd: -1, objects: map[backing.ID]backing.LocalObject{}, mounts: map[int]int{},
		files: map[uint64]FileState{}, dirs: map[uint64]DirState{}, nodes: map[backing.ID]int32{}}
}

// Started says whether the record has the mount's connection.
func (r *Record) Started() bool { return r.fuse != nil }

// Ready says whether the mount has said it serves (Ready).
func (r *Record) Ready() bool { return r.ready }

// Files and Dirs are the numbers of open files and directories held.
func (r *Record) Files() int { return len(r.files) }
func (r *Record) Dirs() int  { return len(r.dirs) }

// Apply applies one message of the journal, b, which came with the
// descriptors fds: the record keeps those it names and closes the others.
func (r *Record) Apply(b []byte, fds []int) error {
	kept := make([]bool, len(fds))
	defer func() {
		for i, fd := range fds {
			if !kept[i] {
				unix.Close(fd)
			}
		}
	}()
	take := func(i int) (int, error) {
		if i < 0 || i >= len(fds) || kept[i] {
			return -1, fmt.Errorf("descriptor %d of %d", i, len(fds))
		}
		kept[i] = true
		return fds[i], nil
	}
	m, err := decodeJournal(b)
	if err != nil {
		return err
	}
	switch m.Kind {
	case jStart:
		if m.Fuse == nil || m.Tree == nil {
			return errors.New("journal start without connection or tree")
		}
		if r.fuse != nil {
			return errors.New("journal started twice")
		}
		fd, err := take(m.Fuse.Fd)
		if err != nil {
			return fmt.Errorf("journal start: connection: %v", err)
		}
		h := *m.Fuse
		r.fuse, r.fuseFd = &h, fd
		r.nextID, r.noHdl = m.Tree.NextID, m.Tree.NoHandles
		for _, mt := range m.Tree.Mounts {
			fd, err := take(mt.Fd)
			if err != nil {
				return fmt.Errorf("journal start: mount %d: %v", mt.MountID, err)
			}
			r.mounts[mt.MountID] = fd
		}
		for _, o := range m.Tree.Objects {
			if o.Fd >= 0 {
				fd, err := take(o.Fd)
				if err != nil {
					return fmt.Errorf("journal start: object %d: %v", o.ID, err)
				}
				o.Fd = fd
			}
			r.putObject(o)
		}
	case jEnter:
		if m.Object == nil {
			return errors.New("journal enter without object")
		}
		o := *m.Object
		if o.Fd >= 0 {
			fd, err := take(o.Fd)
			if err != nil {
				return fmt.Errorf("journal enter %d: %v", o.ID, err)
			}
			o.Fd = fd
		}
		r.putObject(o)
	case jDrop:
		if o, ok := r.objects[m.ID]; ok {
			if o.Fd >= 0 {
				unix.Close(o.Fd)
			}
			delete(r.objects, m.ID)
			delete(r.nodes, m.ID)
		}
	case jMount:
		fd, err := take(0)
		if err != nil {
			return fmt.Errorf("journal mount %d: %v", m.Mount, err)
		}
		if old, ok := r.mounts[m.Mount]; ok {
			unix.Close(old)
		}
		r.mounts[m.Mount] = fd
	case jFile:
		if m.File == nil {
			return errors.New("journal file without state")
		}
		fd, err := take(m.File.Fd)
		if err != nil {
			return fmt.Errorf("journal file %d: %v", m.File.Fh, err)
		}
		r.closeFile(m.File.Fh)
		fs := *m.File
		fs.Fd = fd
		r.files[fs.Fh] = fs
		r.nextFh = max(r.nextFh, fs.Fh)
	case jClose:
		r.closeFile(m.Fh)
	case jDir:
		if m.Dir == nil {
			return errors.New("journal dir without state")
		}
		fd, err := take(m.Dir.Fd)
		if err != nil {
			return fmt.Errorf("journal dir %d: %v", m.Dir.Fh, err)
		}
		r.closeDir(m.Dir.Fh)
		ds := *m.Dir
		ds.Fd = fd
		r.dirs[ds.Fh] = ds
		r.nextDh = max(r.nextDh, ds.Fh)
	case jCloseDir:
		r.closeDir(m.Fh)
	case jBacking:
		if m.Backing == 0 {
			delete(r.nodes, m.ID)
		} else {
			r.nodes[m.ID] = m.Backing
		}
	case jGroups:
		if m.Groups != nil {
			r.groups = m.Groups
		}
	case jUp:
	case jReady:
		r.ready = true
	default:
		return fmt.Errorf("journal message of kind %q", m.Kind)
	}
	return nil
}

func (r *Record) putObject(o backing.LocalObject) {
	if old, ok := r.objects[o.ID]; ok && old.Fd >= 0 {
		unix.Close(old.Fd)
	}
	r.objects[o.ID] = o
	r.nextID = max(r.nextID, o.ID+1)
}

func (r *Record) closeFile(fh uint64) {
	if fs, ok := r.files[fh]; ok {
		unix.Close(fs.Fd)
		delete(r.files, fh)
	}
}

func (r *Record) closeDir(fh uint64) {
	if ds, ok := r.dirs[fh]; ok {
		unix.Close(ds.Fd)
		delete(r.dirs, fh)
	}
}

// crashRefs are the references an object the kernel held at a crash is
// taken to have: more than the kernel can forget.
const crashRefs = math.MaxInt64

// retrieveGap is how far above the last retrieve's unique the record had
// a new process starts its own: the dead one went on retrieving.
const retrieveGap = 1 << 40

// State is the state a new process adopts (Adopt) to serve the mount
// after its process died, and the descriptors it names: the record's
// own, which it keeps (send them; do not close them).
func (r *Record) State() (*HandoverState, []int, error) {
	if r.fuse == nil {
		return nil, nil, errors.New("the journal never started: the mount was not up")
	}
	st := &HandoverState{Fuse: *r.fuse, NextFile: r.nextFh, NextDir: r.nextDh}
	st.Fuse.Fd = 0
	st.Fuse.RetrieveNext += retrieveGap
	fds := []int{r.fuseFd}
	add := func(fd int) int {
		fds = append(fds, fd)
		return len(fds) - 1
	}
	// The tree's descriptors are indexed from the first after the
	// connection's.
	tree := backing.LocalState{NextID: r.nextID, NoHandles: r.noHdl}
	for _, id := range slices.Sorted(maps.Keys(r.mounts)) {
		tree.Mounts = append(tree.Mounts, backing.LocalMount{MountID: id, Fd: add(r.mounts[id]) - 1})
	}
	// The latest object of an inode is the one a lookup finds; older
	// ones (whose inode number was reused) are superseded.
	latest := map[[2]uint64]backing.ID{}
	for id, o := range r.objects {
		k := [2]uint64{o.Dev, o.Ino}
		latest[k] = max(latest[k], id)
	}
	for _, id := range slices.Sorted(maps.Keys(r.objects)) {
		o := r.objects[id]
		if o.Fd >= 0 {
			o.Fd = add(o.Fd) - 1
		}
		if id != backing.RootID {
			// The count kept for it, never below the kernel's; more
			// than the kernel can forget where none is.
			if o.Refs = backing.RefsAt(r.refs, o.Slot); o.Refs == 0 {
				o.Refs = crashRefs
			}
		}
		o.Superseded = latest[[2]uint64{o.Dev, o.Ino}] != id
		tree.Objects = append(tree.Objects, o)
	}
	st.Tree = tree
	st.TreeFds = len(fds) - 1
	for _, id := range slices.Sorted(maps.Keys(r.nodes)) {
		st.Nodes = append(st.Nodes, NodeState{ID: id, BackingID: r.nodes[id]})
	}
	for _, fh := range slices.Sorted(maps.Keys(r.files)) {
		fs := r.files[fh]
		if _, ok := r.objects[fs.ID]; !ok {
			continue // of an object the record never had
		}
		fs.Fd = add(fs.Fd)
		st.Files = append(st.Files, fs)
	}
	for _, fh := range slices.Sorted(maps.Keys(r.dirs)) {
		ds := r.dirs[fh]
		if _, ok := r.objects[ds.ID]; !ok {
			continue
		}
		ds.Fd = add(ds.Fd)
		// The listing goes on from the offset the kernel asks for next:
		// the dead process's buffered entries are gone.
		ds.Offset = 0
		st.Dirs = append(st.Dirs, ds)
	}
	if g := r.groups; g != nil {
		st.Limits, st.LimitsOrder, st.Tags, st.Figures = g.Limits, g.LimitsOrder, g.Tags, g.Figures
		st.Schedules, st.Clock = g.Schedules, g.Clock
	}
	return st, fds, nil
}

// Close closes every descriptor the record holds.
func (r *Record) Close() {
	if r.fuseFd >= 0 {
		unix.Close(r.fuseFd)
		r.fuseFd = -1
	}
	for _, o := range r.objects {
		if o.Fd >= 0 {
			unix.Close(o.Fd)
		}
	}
	for _, fd := range r.mounts {
		unix.Close(fd)
	}
	for fh := range r.files {
		r.closeFile(fh)
	}
	for fh := range r.dirs {
		r.closeDir(fh)
	}
	clear(r.objects)
	clear(r.mounts)
}

// The changes every request may make go in a few bytes rather than JSON,
// which the supervisor decodes at a tenth of the cost: a kind byte (JSON
// starts with '{'), then fixed fields, little-endian.
//
//	enter     'E' id dev ino u64, mode u32, htype i32, mount i64, refs u64,
//	          slot i32, fd u8 (1: the object's descriptor comes with it),
//	          handle length u8, handle
//	drop      'D' id u64
//	close     'C' fh u64 (a file), 'c' (a directory)
//	backing   'B' id u64, registration i32
const (
	binEnter    = 'E'
	binDrop     = 'D'
	binClose    = 'C'
	binCloseDir = 'c'
	binBacking  = 'B'
)

// encodeJournal encodes m in the few bytes of its kind, or returns nil for
// a kind sent as JSON; fd says a descriptor comes with it.
func encodeJournal(m *JournalMsg, fd bool) []byte {
	le := binary.LittleEndian
	switch m.Kind {
	case jEnter:
		o := m.Object
		if o == nil || len(o.Handle) > 255 {
			return nil
		}
		b := make([]byte, 0, 60+len(o.Handle))
		b = append(b, binEnter)
		b = le.AppendUint64(b, uint64(o.ID))
		b = le.AppendUint64(b, o.Dev)
		b = le.AppendUint64(b, o.Ino)
		b = le.AppendUint32(b, o.Mode)
		b = le.AppendUint32(b, uint32(o.HType))
		b = le.AppendUint64(b, uint64(int64(o.MountID)))
		b = le.AppendUint64(b, o.Refs)
		b = le.AppendUint32(b, uint32(o.Slot))
		var f byte
		if fd {
			f = 1
		}
		b = append(b, f, byte(len(o.Handle)))
		return append(b, o.Handle...)
	case jDrop:
		return le.AppendUint64([]byte{binDrop}, uint64(m.ID))
	case jClose:
		return le.AppendUint64([]byte{binClose}, m.Fh)
	case jCloseDir:
		return le.AppendUint64([]byte{binCloseDir}, m.Fh)
	case jBacking:
		return le.AppendUint32(le.AppendUint64([]byte{binBacking}, uint64(m.ID)), uint32(m.Backing))
	}
	return nil
}

// decodeJournal decodes a message of either form.
func decodeJournal(b []byte) (JournalMsg, error) {
	var m JournalMsg
	if len(b) > 0 && b[0] == '{' {
		if err := json.Unmarshal(b, &m); err != nil {
			return m, fmt.Errorf("journal message: %v", err)
		}
		return m, nil
	}
	le := binary.LittleEndian
	short := fmt.Errorf("journal message of %d bytes, cut short", len(b))
	if len(b) < 9 {
		return m, short
	}
	u := le.Uint64(b[1:9])
	switch b[0] {
	case binEnter:
		if len(b) < 55 {
			return m, short
		}
		o := backing.LocalObject{ID: backing.ID(u), Dev: le.Uint64(b[9:]), Ino: le.Uint64(b[17:]), Mode: le.Uint32(b[25:]),
			HType: int32(le.Uint32(b[29:])), MountID: int(int64(le.Uint64(b[33:]))), Refs: le.Uint64(b[41:]),
			Slot: int32(le.Uint32(b[49:])), Fd: -1}
		if b[53] == 1 {
			o.Fd = 0
		}
		n := int(b[54])
		if len(b) != 55+n {
			return m, fmt.Errorf("journal enter of %d bytes, its handle %d", len(b), n)
		}
		if n > 0 {
			o.Handle = bytes.Clone(b[55:])
		}
		m.Kind, m.Object = jEnter, &o
	case binDrop:
		m.Kind, m.ID = jDrop, backing.ID(u)
	case binClose:
		m.Kind, m.Fh = jClose, u
	case binCloseDir:
		m.Kind, m.Fh = jCloseDir, u
	case binBacking:
		if len(b) < 13 {
			return m, short
		}
		m.Kind, m.ID, m.Backing = jBacking, backing.ID(u), int32(le.Uint32(b[9:]))
	default:
		return m, fmt.Errorf("journal message of kind %q", b[0])
	}
	return m, nil
}
