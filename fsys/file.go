package fsys

import (
	"context"
	"errors"
	"slices"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"sluice/backing"
	"sluice/engine"
	"sluice/stack"
	"sluice/throttle"
)

// node is what the front end keeps of a backing object that has been
// opened: the reader throttled reads use, what the object looked like at
// its last open (for close-to-open coherence of sluice's cache), and its
// passthrough registration.
type node struct {
	id   backing.ID
	fsys *FS

	// rmu guards reader: device reads hold it shared, so the descriptor
	// is not closed under them.
	rmu     sync.RWMutex
	reader  *backing.File // O_DIRECT where the backing file system allows it
	readers int           // handles holding reader open

	mu        sync.Mutex
	stamp     stamp
	backingID int32     // passthrough registration; 0 when none
	passRefs  int       // handles open by passthrough
	cachedIO  int       // handles open through the kernel's page cache (see FS.ioMode)
	directIO  int       // handles open with direct I/O
	cachedW   []*handle // open for writing through the write cache, oldest first

	// appendMu orders the appends of the node's handles: each finds the
	// backing file's end and writes there under it.
	appendMu sync.Mutex
}

// cachedWriter is the handle last opened for writing through the write
// cache, or nil.
func (n *node) cachedWriter() *handle {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.cachedW) == 0 {
		return nil
	}
	return n.cachedW[len(n.cachedW)-1]
}

func (n *node) addCachedWriter(h *handle) {
	n.mu.Lock()
	n.cachedW = append(n.cachedW, h)
	n.mu.Unlock()
}

func (n *node) dropCachedWriter(h *handle) {
	n.mu.Lock()
	n.cachedW = slices.DeleteFunc(n.cachedW, func(x *handle) bool { return x == h })
	n.mu.Unlock()
}

// stamp is what tells a changed file at open: its modification and change
// times and its size.
type stamp struct {
	mtime, ctime syscall.Timespec
	size         int64
}

func stampOf(st *syscall.Stat_t) stamp {
	return stamp{mtime: st.Mtim, ctime: st.Ctim, size: st.Size}
}

// revalidate drops sluice's cached pages of the object when it changed
// since it was last opened (close-to-open coherence, as NFS), and says
// whether it did. The first open of a node counts as a change.
func (n *node) revalidate(st *syscall.Stat_t) (changed bool) {
	s := stampOf(st)
	n.mu.Lock()
	changed = n.stamp != s
	n.stamp = s
	n.mu.Unlock()
	if changed {
		n.fsys.eng.Forget(uint64(n.id))
	}
	return changed
}

// acquireReader makes sure the node's reader is open:
// O_DIRECT when the backing file system allows it, buffered otherwise.
// Each acquire is paired with a releaseReader; the last release closes it.
func (n *node) acquireReader() error {
	n.rmu.Lock()
	defer n.rmu.Unlock()
	if n.reader == nil {
		r, err := n.fsys.tree.Open(n.id, syscall.O_RDONLY|syscall.O_DIRECT)
		if err == nil {
			n.fsys.directOpens.Add(1)
		} else {
			r, err = n.fsys.tree.Open(n.id, syscall.O_RDONLY)
			if err != nil {
				return err
			}
			n.fsys.bufferedOpens.Add(1)
		}
		n.reader = r
	}
	n.readers++
	return nil
}

func (n *node) releaseReader() {
	n.rmu.Lock()
	defer n.rmu.Unlock()
	if n.readers--; n.readers == 0 && n.reader != nil {
		n.reader.Close()
		n.reader = nil
	}
}

// ReadAt is one pread of the node's reader: the engine's device reads. A
// readahead issued for a file that has since been closed fails with EBADF.
func (n *node) ReadAt(p []byte, off int64) (int, error) { return n.readAtFor(0, p, off) }

// readAtFor is ReadAt on behalf of process pid (0: unknown).
func (n *node) readAtFor(pid int, p []byte, off int64) (int, error) {
	n.rmu.RLock()
	defer n.rmu.RUnlock()
	if n.reader == nil {
		return 0, syscall.EBADF
	}
	return n.reader.ReadAtFor(pid, p, off)
}

// openedBy is a node as the engine reads it for the handles one process
// opened: a mirror set's policy sees that process as the reader of the
// device reads the handle causes (its demand reads and its readahead), as
// btrfs sees the process that reads. The cache the handles share is the
// node's.
type openedBy struct {
	*node
	pid int
}

func (o openedBy) ReadAt(p []byte, off int64) (int, error) { return o.readAtFor(o.pid, p, off) }

// StartWriteback starts the writeback of [off, off+n) of the node's
// backing file (the engine's OpWriteback), through the reader when one is
// open, else through a descriptor opened for it.
func (n *node) StartWriteback(off, size int64) error {
	n.rmu.RLock()
	if r := n.reader; r != nil {
		defer n.rmu.RUnlock()
		return r.StartWriteback(off, size)
	}
	n.rmu.RUnlock()
	f, err := n.fsys.tree.Open(n.id, syscall.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.StartWriteback(off, size)
}

var (
	_ engine.ReaderAt    = (*node)(nil)
	_ engine.Writebacker = (*node)(nil)
)

// handle is one open file. Reads and writes of callers in a limited group
// go through the engine; others go straight to the backing file and are
// only counted.
type handle struct {
	file   *backing.File
	node   *node
	opener *throttle.Group
	cred   *backing.Cred // the opener's, for writeback without a caller
	serve  stack.Serve   // how it is served, decided at open (stack.ServeOpen)
	writes bool          // opened for writing
	splice bool          // large unthrottled reads are spliced from file (see spliceMin)
	append bool          // opened with O_APPEND: writes go to the backing file's end

	mu      sync.Mutex
	reading bool         // holds the node's reader
	sh      stack.Handle // per-open state of the stack; used under the engine's lock
}

// group is the group charged for a request: the caller's, or the opener's
// when the kernel names no caller (writeback, an invisible pid namespace).
func (h *handle) group(ctx context.Context) *throttle.Group {
	g, ok := h.node.fsys.caller(ctx)
	if !ok {
		return h.opener
	}
	return g
}

// ensureReader holds the node's reader for a handle that was opened by a
// group without a limit and is now read by one with a limit.
func (h *handle) ensureReader() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reading {
		return nil
	}
	if err := h.node.acquireReader(); err != nil {
		return err
	}
	h.reading = true
	return nil
}

// direct reports whether the handle is served with direct I/O
// (stack.ServeDirect): every read() and write() reaches sluice.
func (h *handle) direct() bool { return h.serve.Mode == stack.ServeDirect }

// read serves a read of the handle: through the stack for a limited
// caller of a handle served with direct I/O, else straight from the
// backing file (readStraight). The caller's group is the request's, which
// need not be the opener's.
func (h *handle) read(ctx context.Context, unique uint64, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	g := h.group(ctx)
	defer h.node.fsys.flights.end(h.node.fsys.flights.begin(g, ctx, unique))
	if !g.Limited() || !h.direct() {
		return h.readStraight(ctx, unique, g, dest, off)
	}
	if err := h.ensureReader(); err != nil {
		return nil, errno(err)
	}
	n, err := h.node.fsys.eng.Read(ctx, &h.sh, g, dest, off)
	if err != nil {
		return nil, errno(err)
	}
	return replyOf(dest[:n]), 0
}

// readReply is a read's reply: bytes read into the request's own buffer,
// written to the kernel as they are (go-fuse's vectored write: neither
// copied nor spliced through a pipe). Replies are pooled: one is taken
// back when go-fuse has sent it (Done).
type readReply struct {
	b [1][]byte
}

var readReplies = sync.Pool{New: func() any { return new(readReply) }}

// replyOf returns the reply of the bytes b.
func replyOf(b []byte) *readReply {
	r := readReplies.Get().(*readReply)
	r.b[0] = b
	return r
}

func (r *readReply) Bytes([]byte) ([]byte, fuse.Status) { return r.b[0], fuse.OK }
func (r *readReply) Size() int                          { return len(r.b[0]) }

// Slices gives go-fuse the reply as a vector, for writev.
func (r *readReply) Slices() ([][]byte, fuse.Status) { return r.b[:], fuse.OK }

func (r *readReply) Done() {
	r.b[0] = nil
	readReplies.Put(r)
}

// readStraight reads straight from the backing file. For a limited group
// the kernel's page cache is in front (an unlimited opener, or a group
// whose limits are high: see CacheMode): what it asks for is charged and
// paced first, and sluice's cache stays out of it.
func (h *handle) readStraight(ctx context.Context, unique uint64, g *throttle.Group, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	f := h.node.fsys
	var pay stack.Payment
	if g.Limited() {
		var err error
		if pay, err = f.eng.Pay(ctx, &h.sh, g, off, int64(len(dest))); err != nil {
			return nil, errno(err)
		}
	}
	n := len(dest)
	var (
		res  fuse.ReadResult
		cold bool
	)
	// A read the device's cost model times is read here, not spliced
	// after the reply.
	splice := h.splice && !pay.Due()
	if pay.Due() {
		defer func() { f.eng.Paid(pay, n) }()
	}
	if splice {
		// Past the backing file's cache, when none of it is there.
		var err error
		if res, cold, err = readCold(h.file, off, n); err != nil {
			return nil, errno(err)
		}
	}
	switch {
	case cold:
		f.coldReads.Add(1)
		n = res.Size()
	case splice && n >= spliceMin && n <= f.spliceMax:
		// Zero copy: the reply is spliced from the backing file.
		res = fuse.ReadResultFd(uintptr(h.file.Fd()), off, n)
	default:
		// A mirror set's read goes to the mirror its policy picks
		// for this caller, and to another if that one fails; one
		// stuck on a slow mirror may be answered from another before
		// it returns (answer.go).
		pid := 0
		if c, ok := fuse.FromContext(ctx); ok {
			pid = int(c.Pid)
		}
		var err error
		var answered bool
		if n, answered, err = h.file.ReadAtAnswering(pid, unique, dest, off); err != nil {
			return nil, errno(err)
		}
		if answered {
			// The kernel refuses this reply (see lateReplies).
			res = fuse.ReadResultData(nil)
		} else {
			res = replyOf(dest[:n])
		}
	}
	if !g.Limited() {
		f.eng.Pass(g, throttle.Read, int64(n))
	}
	return res, 0
}

// write writes data at off. kill: the caller lacks CAP_FSETID. cached:
// the kernel is writing back its page cache (FUSE_WRITE_CACHE: pages
// written through mmap, or a file's cached pages flushed), which no
// caller waits on. For a limited group it is paced like a write() when
// the group's writable open went through the write cache (writesCached),
// and the kernel holds the writer at the mount's dirty bound. Otherwise
// (mmap of a direct open, a file opened before its group had a limit) it
// is written at once and charged as debt (stack.WriteBack) rather than
// queued behind the budget.
//
// An append (a handle opened with O_APPEND, without the write cache) goes
// to the backing file's end, found here, unless placed says it was found
// before (a request served again after a crash); place is told where it
// goes before it is written.
func (h *handle) write(ctx context.Context, unique uint64, data []byte, off int64, kill, cached, placed bool, place func(int64)) (uint32, syscall.Errno) {
	f := h.node.fsys
	if kill {
		// The caller lacks CAP_FSETID: a write drops the set-id bits, as
		// on SOURCE.
		if err := h.file.KillSuidgid(); err != nil {
			return 0, errno(err)
		}
	}
	g, by := h.group(ctx), h
	defer f.flights.end(f.flights.begin(g, ctx, unique))
	if cached && h.direct() {
		// The kernel writes a file's dirty pages back through the open
		// for writing made last, which may be a limited group's, served
		// with direct I/O, while the pages are an unlimited writer's
		// through the write cache: they are that writer's.
		if cw := h.node.cachedWriter(); cw != nil {
			g, by = cw.opener, cw
		}
	}
	id := uint64(h.node.id)
	if h.append && !cached && !placed {
		// The kernel's offset for an append is the end of the file as
		// it last saw it; SOURCE may have grown behind the mount since.
		h.node.appendMu.Lock()
		defer h.node.appendMu.Unlock()
		end, err := h.appendAt(off)
		if err != nil {
			return 0, errno(err)
		}
		off = end
		place(off)
	}
	var w engine.WriterAt = h.file
	if f.nearFull() {
		switch cred := by.writer(ctx); {
		case cred.Uid != 0:
			w = asCaller{f.tree, cred, h.file}
		case cached:
			// The kernel's writeback names no writer, and root's open may
			// carry other users' pages: none of it takes the blocks the
			// file system keeps for root.
			w = asCaller{f.tree, &backing.Cred{Uid: nobody, Gid: nobody}, h.file}
		}
	}
	write := func(data []byte, off int64) (n int, err error) {
		switch {
		case !g.Limited():
			n, err = w.WriteAt(data, off)
			if n > 0 {
				f.eng.Pass(g, throttle.Write, int64(n))
				f.eng.Changed(id, off, int64(n))
			}
			return n, err
		case cached && !by.serve.PacedWriteback:
			return f.eng.WriteBack(&h.sh, g, w, data, off)
		}
		return f.eng.Write(ctx, &h.sh, g, w, data, off)
	}
	n, err := write(data, off)
	if cached {
		// The kernel takes any count in the reply to its writeback as all
		// of it, so a short write (a file system filling up) would drop
		// the rest without a word. Write the rest; the error that stops
		// it is the reply, which the kernel keeps for the file's next
		// fsync or close.
		for err == nil && n < len(data) {
			m, werr := write(data[n:], off+int64(n))
			if m <= 0 && werr == nil {
				werr = syscall.EIO
			}
			n, err = n+max(m, 0), werr
		}
		if err != nil {
			return 0, errno(err)
		}
		if g.Limited() && f.eng.InDebt(g) {
			// The group wrote these pages through a mapping faster than
			// its limit. Dropping them from the kernel's cache makes the
			// writer fault them in again, and that read waits for the
			// debt (stack.Stack.Read): the writer is paced, and no sync
			// waits on its budget. After the reply: the pages are under
			// writeback until then.
			go f.server.InodeNotify(id, off, int64(n))
		}
	}
	if n > 0 && h.direct() && !cached {
		// Other handles may hold the overwritten range in the kernel's page
		// cache (unlimited readers, mmap): drop it before the writer's
		// write() returns, so no reader sees old bytes after that. Not for
		// the kernel's own writeback: those pages are the page cache's,
		// under writeback until this reply, and invalidating them here
		// would wait for the reply forever.
		f.server.InodeNotify(id, off, int64(n))
	}
	if err != nil && n <= 0 {
		return 0, errno(err)
	}
	return uint32(n), 0
}

// appendAt returns where an append the kernel placed at off goes: the
// backing file's end. When that is not off, the kernel's idea of the
// file (its size, the pages it holds from off on) is dropped, after the
// reply for a write through its page cache, whose pages stay locked
// until then.
func (h *handle) appendAt(off int64) (int64, error) {
	st, err := h.file.Stat()
	if err != nil {
		return 0, err
	}
	if st.Size != off {
		id, from := uint64(h.node.id), min(off, st.Size)
		if h.direct() {
			h.node.fsys.server.InodeNotify(id, -1, 0)
		} else {
			go h.node.fsys.server.InodeNotify(id, from, 0)
		}
	}
	return st.Size, nil
}

// writer is whose write this is: the caller's, or the opener's for
// writeback the kernel sends without a caller.
func (h *handle) writer(ctx context.Context) *backing.Cred {
	if c, ok := fuse.FromContext(ctx); ok && c.Pid != 0 {
		return h.node.fsys.callerCred(&c.Owner, c.Pid, 0)
	}
	return h.cred
}

// asCaller writes with the caller's credentials, so the backing file
// system refuses what it would refuse the caller: blocks reserved for root.
type asCaller struct {
	tree backing.Tree
	c    *backing.Cred
	f    *backing.File
}

func (a asCaller) WriteAt(p []byte, off int64) (n int, err error) {
	a.tree.As(a.c, func() error {
		n, err = a.f.WriteAt(p, off)
		return nil
	})
	return n, err
}

func (h *handle) release() {
	if h.serve.CachedWrites {
		h.node.dropCachedWriter(h)
	}
	h.mu.Lock()
	if h.reading {
		h.reading = false
		h.node.releaseReader()
	}
	h.mu.Unlock()
	h.node.leave(h.serve, h.writes)
	if h.serve.Mode == stack.ServePassthrough {
		h.node.fsys.passOpen(h.opener, -1)
	}
	h.file.Close()
}

// errno maps an error to the FUSE reply.
func errno(err error) syscall.Errno {
	var e syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.As(err, &e):
		return e
	case errors.Is(err, stack.ErrCanceled):
		return syscall.EINTR
	}
	return syscall.EIO
}

// nobody is the user and group ids that the kernel's writeback runs as
// when the backing file system is nearly full and no writer is known.
const nobody = 65534

// spliceMin is the smallest unthrottled read that is spliced from the
// backing file rather than read into the reply. Measured on the bench's
// 2-core VM with fio through sluice, the backing file in the page cache:
// 4 KiB and 16 KiB random reads ran 1.2 to 1.4 times as fast read into the
// reply (splicing costs a pipe and two more system calls), 64 KiB about
// alike, and 256 KiB and 1 MiB (sequential) 1.1 times as fast spliced. A
// backing file opened O_DIRECT is never spliced: the kernel copies such a
// splice through pages of its own, and 4 KiB reads ran 1.6 times as fast,
// 1 MiB ones 1.2 times, read into the reply.
const spliceMin = 64 << 10
