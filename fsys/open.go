package fsys

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"sluice/backing"
	"sluice/stack"
	"sluice/throttle"
)

// nodeOf returns the front end's state of backing object id, made on first
// use.
func (f *FS) nodeOf(id backing.ID) *node {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.nodes[id]
	if n == nil {
		n = &node{id: id, fsys: f, stamp: stamp{size: -1}}
		f.nodes[id] = n
	}
	return n
}

// forgetNode drops what is kept of an object the kernel forgot.
func (f *FS) forgetNode(id backing.ID) {
	f.mu.Lock()
	delete(f.nodes, id)
	f.mu.Unlock()
	f.eng.Forget(uint64(id))
}

// table maps the FUSE file handles of open files or directories to them.
type table[T any] struct {
	mu   sync.Mutex
	next uint64
	m    map[uint64]T
}

func (t *table[T]) add(v T) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[uint64]T)
	}
	t.next++
	t.m[t.next] = v
	return t.next
}

// put enters v as fh, a handle given before (a mount taken over).
func (t *table[T]) put(fh uint64, v T) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[uint64]T)
	}
	t.m[fh] = v
	t.next = max(t.next, fh)
}

// get returns the entry of fh; ok is false when there is none.
func (t *table[T]) get(fh uint64) (v T, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok = t.m[fh]
	return v, ok
}

// drop removes fh and returns what it held.
func (t *table[T]) drop(fh uint64) (v T, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	v, ok = t.m[fh]
	delete(t.m, fh)
	return v, ok
}

// drain removes and returns every entry.
func (t *table[T]) drain() []T {
	t.mu.Lock()
	defer t.mu.Unlock()
	var all []T
	for _, v := range t.m {
		all = append(all, v)
	}
	clear(t.m)
	return all
}

// opened makes a handle of a backing file opened (or created) for the
// caller and fills the open reply. Files opened by a group with a limit
// get FOPEN_DIRECT_IO, so every read and write reaches sluice; others may
// use the kernel's page cache, or passthrough for read-only opens when
// allowed (a passthrough write would change the file behind sluice's
// cache). On error the file is closed.
//
// kill says the open truncated an existing file for a caller without
// CAP_FSETID, as root, so the set-id bits must go as they would on SOURCE.
// (Creation runs as the caller, and the backing file system clears them
// itself when it truncates an existing file.)
func (f *FS) opened(ctx context.Context, id backing.ID, file *backing.File, flags uint32, kill bool, a *syscall.Stat_t, out *fuse.OpenOut) error {
	n := f.nodeOf(id)
	if kill {
		if err := file.KillSuidgid(); err != nil {
			file.Close()
			return err
		}
	}
	if flags&syscall.O_TRUNC != 0 {
		f.eng.Truncated(uint64(id), 0)
	}
	changed := n.revalidate(a)
	g, _ := f.caller(ctx)
	h := &handle{file: file, node: n, opener: g, cred: &backing.Cred{}, writes: flags&syscall.O_ACCMODE != syscall.O_RDONLY}
	h.sh.Ino = uint64(id)
	h.sh.File = n
	if c, ok := fuse.FromContext(ctx); ok {
		h.cred = f.callerCred(&c.Owner, c.Pid, 0)
		if file.Mirrored() {
			h.sh.File = openedBy{n, int(c.Pid)}
		}
	}
	var bid int32
	h.serve, bid = f.ioMode(n, file, f.openOf(g, flags, file), h.cred)
	switch h.serve.Mode {
	case stack.ServeDirect:
		if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
			if err := h.ensureReader(); err != nil {
				file.Close()
				return err
			}
		}
		out.OpenFlags |= fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES
	case stack.ServePassthrough:
		out.BackingID = bid
		out.OpenFlags |= fuse.FOPEN_PASSTHROUGH
		f.passOpen(g, 1)
	}
	// The kernel drops a file's cached pages at each open unless told to
	// keep them: they are kept when the file is as it was at its last open
	// (close-to-open, as sluice's own cache), so a file read again is
	// served from the kernel's cache without a request to sluice.
	if !changed && h.serve.Mode == stack.ServeStraight {
		out.OpenFlags |= fuse.FOPEN_KEEP_CACHE
	}
	// Without FOPEN_DIRECT_IO the kernel takes a short read for the end
	// of the file: a request that reaches the wait cap goes whole.
	h.sh.Whole = h.serve.Mode != stack.ServeDirect
	// With the write cache the kernel keeps the file's size and computes
	// the offsets of appends itself (its writes come back at offsets).
	h.append = flags&syscall.O_APPEND != 0 && !f.opts.WriteCache
	// A file with no descriptor (a tree in memory, or wrapped to inject
	// faults) is read through ReadAt only.
	h.splice = flags&syscall.O_DIRECT == 0 && !file.Mirrored() && file.Fd() >= 0
	if h.serve.CachedWrites {
		n.addCachedWriter(h)
	}
	out.Fh = f.files.add(h)
	return nil
}

// backingFlags are the flags of the backing open for a FUSE open with
// flags. With the write cache the kernel reads the pages a write() fills
// in part through whichever handle writes, so a write-only open opens
// the backing file for reading too (the caller cannot read(2) it: the
// kernel checks its own open's mode). O_APPEND is left out: writes come
// with their offsets (see handle.appendAt).
func (f *FS) backingFlags(flags uint32) uint32 {
	flags &^= syscall.O_APPEND
	if f.opts.WriteCache && flags&syscall.O_ACCMODE == syscall.O_WRONLY {
		return flags&^syscall.O_ACCMODE | syscall.O_RDWR
	}
	return flags
}

// backingOpen runs open with the backing flags for a FUSE open with
// flags; with the caller's access mode if the backing file system refuses
// the wider open (a file the caller may write but not read, created as
// the caller); and with O_APPEND if it refuses a write without it (an
// append-only file), unless the kernel's write cache, which writes pages
// back at their offsets, takes the writes.
func (f *FS) backingOpen(flags uint32, open func(flags uint32) error) error {
	b := f.backingFlags(flags)
	err := open(b)
	if mode := flags & syscall.O_ACCMODE; errors.Is(err, syscall.EACCES) && b&syscall.O_ACCMODE != mode {
		b = b&^syscall.O_ACCMODE | mode
		err = open(b)
	}
	if errors.Is(err, syscall.EPERM) && flags&syscall.O_APPEND != 0 && !f.opts.WriteCache {
		err = open(b | syscall.O_APPEND)
	}
	return err
}

// openOf is what decides how an open with flags of file by group g is
// served (stack.Open), but for the file's other opens. A limited group's
// writeback through the write cache is paced; that of a file opened
// before its group had a limit stays its debt.
func (f *FS) openOf(g *throttle.Group, flags uint32, file *backing.File) stack.Open {
	o := stack.Open{Limited: g.Limited(), Writes: flags&syscall.O_ACCMODE != syscall.O_RDONLY,
		CacheMode: f.opts.CacheMode, WriteCache: f.opts.WriteCache,
		Passthrough: f.opts.Passthrough && file.Fd() >= 0 && !file.Mirrored(),
		Dirty:       f.dirty.Load(), MaxIO: f.opts.MaxIO}
	if o.Limited {
		o.Limits = f.eng.PathLimits(g)
	}
	return o
}

// ioMode decides how an open o of n is served (stack.ServeOpen, with n's
// other opens), and counts it. The kernel holds a file in one mode at a
// time: while it is open through its page cache, a passthrough open fails
// with EIO, and while it is open by passthrough, so does every open that
// is not. The counts run ahead of the kernel's, which drops a file's mode
// at close, before it sends the release: a file closed a moment ago may
// still count, which costs a passthrough open its passthrough, or passes
// an open through that need not be, never an open its success.
//
// The node's backing file is registered with the kernel once, at its
// first passthrough open, and serves every passthrough open of the node
// until the last is released (the kernel takes one backing file per
// file): reopened for reading and writing where the backing file system
// allows it, so that later opens for writing can be passed through too,
// and registered as the opener c, whose credentials the kernel then uses
// for every read and write it passes through (so that a caller's writes
// cannot use the blocks ext4 reserves for root; see backing's creds).
// Where the kernel refuses the registration the open is served as if the
// mount had no passthrough.
func (f *FS) ioMode(n *node, file *backing.File, o stack.Open, c *backing.Cred) (stack.Serve, int32) {
	n.mu.Lock()
	defer n.mu.Unlock()
	o.PassOpen, o.CachedOpen, o.DirectOpen = n.passRefs > 0, n.cachedIO > 0, n.directIO > 0
	sv := stack.ServeOpen(o)
	if sv.Mode == stack.ServePassthrough {
		if n.backingID == 0 {
			n.backingID = f.registerBacking(file, c)
			if n.backingID != 0 {
				f.journalBacking(n.id, n.backingID)
			}
		}
		if n.backingID != 0 {
			n.passRefs++
			if o.Writes {
				// Writes sluice will not see: its cached copy goes now
				// (another open may have filled it) and at the release.
				f.eng.Forget(uint64(n.id))
			}
			return sv, n.backingID
		}
		o.Passthrough = false
		sv = stack.ServeOpen(o)
	}
	switch sv.Mode {
	case stack.ServeStraight:
		n.cachedIO++
	case stack.ServeDirect:
		n.directIO++
	}
	return sv, 0
}

// registerBacking registers file's backing file with the kernel for
// passthrough as c (see ioMode) and returns its id, or 0 where the kernel
// refused.
func (f *FS) registerBacking(file *backing.File, c *backing.Cred) int32 {
	fd := file.Fd()
	path := fmt.Sprintf("/proc/self/fd/%d", fd)
	rw, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if errors.Is(err, syscall.EPERM) {
		// An append-only file opens for writing only to append.
		rw, err = unix.Open(path, unix.O_RDWR|unix.O_APPEND|unix.O_CLOEXEC, 0)
	}
	if err == nil {
		defer unix.Close(rw)
		fd = rw
	}
	var id int32
	f.tree.As(c, func() error {
		if bid, errno := f.server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)}); errno == 0 {
			id = bid
		}
		return nil
	})
	return id
}

// leave counts an open of n served as sv out (see FS.ioMode). An open
// for writing by passthrough leaves sluice's cached copy of the file
// dropped, and the kernel's dropped at the next open: sluice saw none of
// its writes, as none made on SOURCE directly.
func (n *node) leave(sv stack.Serve, writes bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch sv.Mode {
	case stack.ServeStraight:
		n.cachedIO--
	case stack.ServeDirect:
		n.directIO--
	case stack.ServePassthrough:
		if writes {
			n.fsys.eng.Forget(uint64(n.id))
			n.stamp = stamp{}
		}
		// Never once handed over: the registration is the taking
		// process's.
		if n.passRefs--; n.passRefs == 0 && n.backingID != 0 && !n.fsys.handed.Load() {
			n.fsys.server.UnregisterBackingFd(n.backingID)
			n.backingID = 0
			n.fsys.journalBacking(n.id, 0)
		}
	}
}

// cred is the caller of a request as the backing tree creates objects for
// it: fs uid and gid from the kernel, supplementary groups from /proc, and
// the umask the kernel passed (it applied none itself: DONT_MASK).
func (f *FS) cred(h *fuse.InHeader, umask uint32) *backing.Cred {
	if f.server.KernelSettings().Flags64()&fuse.CAP_DONT_MASK == 0 {
		umask = 0
	}
	return f.callerCred(&h.Owner, h.Pid, umask)
}

// callerCred is the credentials of caller tid with the given ids; its
// supplementary groups are the calling thread's, from the resolver's cache.
func (f *FS) callerCred(o *fuse.Owner, tid uint32, umask uint32) *backing.Cred {
	return &backing.Cred{Uid: o.Uid, Gid: o.Gid, Umask: umask & 0o777,
		Groups: f.resolver.Load().Groups(int64(time.Since(f.epoch)), tid)}
}

// nearFullBytes is the free space below which writes of callers other
// than root run with their own credentials: above it no write can reach
// the blocks the file system reserves for root, so none pays for the
// switch.
const nearFullBytes = 256 << 20

// nearFull reports whether SOURCE's file system has less than
// nearFullBytes available to unprivileged users, checked at most every
// 100 ms.
func (f *FS) nearFull() bool {
	now := time.Now().UnixNano()
	if at := f.fullAt.Load(); now-at < int64(100*time.Millisecond) {
		return f.full.Load()
	}
	f.fullAt.Store(now)
	s, err := f.tree.Statfs(backing.RootID)
	full := err != nil || s.Bavail*uint64(s.Bsize) < nearFullBytes
	f.full.Store(full)
	return full
}
