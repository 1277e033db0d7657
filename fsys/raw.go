package fsys

import (
	"bytes"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"sluice/backing"
	"sluice/engine"
)

// raw translates FUSE requests onto the backing tree and the engine. Node
// ids are backing IDs (FUSE's root id is backing.RootID); file handles
// index the front end's tables.
type raw struct {
	fuse.RawFileSystem // ENOSYS for what is not implemented here
	f                  *FS
}

// ttl is how long the kernel may trust an entry or attributes without
// asking again: changes made to SOURCE behind sluice's back are seen after
// at most this long.
const ttl = time.Second

func (r *raw) String() string { return "sluice" }

func (r *raw) Init(s *fuse.Server) {}

func ctxOf(cancel <-chan struct{}, h *fuse.InHeader) *fuse.Context {
	return &fuse.Context{Caller: h.Caller, Cancel: cancel}
}

func st(err error) fuse.Status { return fuse.Status(errno(err)) }

func fillEntry(out *fuse.EntryOut, e backing.Entry) {
	out.NodeId = uint64(e.ID)
	out.Generation = 0 // IDs are never reused
	out.Attr.FromStat(&e.Attr)
	out.SetEntryTimeout(ttl)
	out.SetAttrTimeout(ttl)
}

func fillAttr(out *fuse.AttrOut, a *syscall.Stat_t) {
	out.Attr.FromStat(a)
	out.SetTimeout(ttl)
}

func (r *raw) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	e, err := r.f.tree.Lookup(backing.ID(h.NodeId), name)
	if err != nil {
		return st(err)
	}
	fillEntry(out, e)
	return fuse.OK
}

func (r *raw) Forget(nodeid, nlookup uint64) {
	if r.f.tree.Forget(backing.ID(nodeid), nlookup) {
		r.f.forgetNode(backing.ID(nodeid))
	}
}

func (r *raw) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if in.Flags()&fuse.FUSE_GETATTR_FH != 0 {
		if h, ok := r.f.files.get(in.Fh()); ok {
			a, err := h.file.Stat()
			if err != nil {
				return st(err)
			}
			fillAttr(out, &a)
			return fuse.OK
		}
	}
	a, err := r.f.tree.Getattr(backing.ID(in.NodeId))
	if err != nil {
		return st(err)
	}
	fillAttr(out, &a)
	return fuse.OK
}

func (r *raw) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	var set backing.SetAttr
	var file *backing.File
	if fh, ok := in.GetFh(); ok {
		if h, ok := r.f.files.get(fh); ok {
			file = h.file
		}
	}
	if m, ok := in.GetMode(); ok {
		set.Mode = &m
	}
	if u, ok := in.GetUID(); ok {
		set.Uid = &u
	}
	if g, ok := in.GetGID(); ok {
		set.Gid = &g
	}
	size, hasSize := in.GetSize()
	if hasSize {
		set.Size = &size
	}
	set.KillSuidgid = in.Valid&fuse.FATTR_KILL_SUIDGID != 0
	set.Atime = timeOf(in.Valid, fuse.FATTR_ATIME, fuse.FATTR_ATIME_NOW, in.Atime, in.Atimensec)
	set.Mtime = timeOf(in.Valid, fuse.FATTR_MTIME, fuse.FATTR_MTIME_NOW, in.Mtime, in.Mtimensec)
	id := backing.ID(in.NodeId)
	a, err := r.f.tree.Setattr(id, file, set)
	if hasSize {
		// Even on error: the size may have changed before a later step failed.
		r.f.eng.Truncated(uint64(id), int64(size))
	}
	if err != nil {
		return st(err)
	}
	fillAttr(out, &a)
	return fuse.OK
}

func timeOf(valid, set, now uint32, sec uint64, nsec uint32) *syscall.Timespec {
	switch {
	case valid&set == 0:
		return nil
	case valid&now != 0:
		return &syscall.Timespec{Nsec: unix.UTIME_NOW}
	}
	return &syscall.Timespec{Sec: int64(sec), Nsec: int64(nsec)}
}

func (r *raw) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	b, err := r.f.tree.Readlink(backing.ID(h.NodeId))
	return b, st(err)
}

func (r *raw) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	e, err := r.f.tree.Mknod(r.f.cred(&in.InHeader, in.Umask), backing.ID(in.NodeId), name, in.Mode, in.Rdev)
	if err != nil {
		return st(err)
	}
	fillEntry(out, e)
	return fuse.OK
}

func (r *raw) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	e, err := r.f.tree.Mkdir(r.f.cred(&in.InHeader, in.Umask), backing.ID(in.NodeId), name, in.Mode)
	if err != nil {
		return st(err)
	}
	fillEntry(out, e)
	return fuse.OK
}

func (r *raw) Symlink(cancel <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	e, err := r.f.tree.Symlink(r.f.cred(h, 0), backing.ID(h.NodeId), name, target)
	if err != nil {
		return st(err)
	}
	fillEntry(out, e)
	return fuse.OK
}

func (r *raw) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	e, err := r.f.tree.Link(r.f.cred(&in.InHeader, 0), backing.ID(in.Oldnodeid), backing.ID(in.NodeId), name)
	if err != nil {
		return st(err)
	}
	fillEntry(out, e)
	return fuse.OK
}

func (r *raw) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return st(r.f.tree.Unlink(backing.ID(h.NodeId), name))
}

func (r *raw) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return st(r.f.tree.Rmdir(backing.ID(h.NodeId), name))
}

func (r *raw) Rename(cancel <-chan struct{}, in *fuse.RenameIn, name, newName string) fuse.Status {
	return st(r.f.tree.Rename(backing.ID(in.NodeId), name, backing.ID(in.Newdir), newName, in.Flags))
}

func (r *raw) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	// The kernel checks permissions itself (default_permissions).
	return fuse.ENOSYS
}

func (r *raw) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	c := r.f.cred(&in.InHeader, in.Umask)
	var e backing.Entry
	var file *backing.File
	err := r.f.backingOpen(in.Flags, func(flags uint32) (err error) {
		e, file, err = r.f.tree.Create(c, backing.ID(in.NodeId), name, flags, in.Mode)
		return err
	})
	return r.created(cancel, in, out, e, file, err)
}

func (r *raw) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	e, file, err := r.f.tree.Tmpfile(r.f.cred(&in.InHeader, in.Umask), backing.ID(in.NodeId), r.f.backingFlags(in.Flags), in.Mode)
	return r.created(cancel, in, out, e, file, err)
}

// created replies to a create: the new entry and its open file.
func (r *raw) created(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut, e backing.Entry, file *backing.File, err error) fuse.Status {
	if err != nil {
		return st(err)
	}
	fillEntry(&out.EntryOut, e)
	if err := r.f.opened(ctxOf(cancel, &in.InHeader), e.ID, file, in.Flags, false, &e.Attr, &out.OpenOut); err != nil {
		// The kernel holds the new entry only if the reply succeeds.
		r.Forget(uint64(e.ID), 1)
		return st(err)
	}
	return fuse.OK
}

func (r *raw) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	id := backing.ID(in.NodeId)
	var file *backing.File
	err := r.f.backingOpen(in.Flags, func(flags uint32) (err error) {
		file, err = r.f.tree.Open(id, flags)
		return err
	})
	if err != nil {
		return st(err)
	}
	a, err := file.Stat()
	if err != nil {
		file.Close()
		return st(err)
	}
	kill := in.Mode&fuse.OPEN_KILL_SUIDGID != 0 && in.Flags&syscall.O_TRUNC != 0
	return st(r.f.opened(ctxOf(cancel, &in.InHeader), id, file, in.Flags, kill, &a, out))
}

func (r *raw) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	h, ok := r.f.files.get(in.Fh)
	if !ok {
		return nil, fuse.EBADF
	}
	res, e := h.read(ctxOf(cancel, &in.InHeader), in.Unique, buf[:min(len(buf), int(in.Size))], int64(in.Offset))
	return res, fuse.Status(e)
}

// writePlaced marks a write request whose offset sluice has decided (an
// append's): a bit of write_flags the kernel does not use.
const writePlaced = 1 << 31

func (r *raw) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	h, ok := r.f.files.get(in.Fh)
	if !ok {
		return 0, fuse.EBADF
	}
	// Where an append goes is written into the request itself, which a
	// supervised mount keeps until it is answered: served again after a
	// crash, it goes there, not to the end again.
	n, e := h.write(ctxOf(cancel, &in.InHeader), in.Unique, data, int64(in.Offset),
		in.WriteFlags&fuse.WRITE_KILL_SUIDGID != 0, in.WriteFlags&fuse.WRITE_CACHE != 0,
		in.WriteFlags&writePlaced != 0, func(off int64) {
			in.Offset = uint64(off)
			in.WriteFlags |= writePlaced
		})
	return n, fuse.Status(e)
}

func (r *raw) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	h, ok := r.f.files.get(in.Fh)
	if !ok {
		return fuse.EBADF
	}
	off, err := h.file.Seek(int64(in.Offset), int(in.Whence))
	if err != nil {
		return st(err)
	}
	out.Offset = uint64(off)
	return fuse.OK
}

func (r *raw) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	if h, ok := r.f.files.drop(in.Fh); ok {
		h.release()
	}
}

func (r *raw) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	h, ok := r.f.files.get(in.Fh)
	if !ok {
		return fuse.EBADF
	}
	return st(h.file.Flush())
}

func (r *raw) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	h, ok := r.f.files.get(in.Fh)
	if !ok {
		return fuse.EBADF
	}
	dataOnly := in.FsyncFlags&1 != 0
	ctx := ctxOf(cancel, &in.InHeader)
	return st(r.f.eng.Sync(&h.sh, h.group(ctx), engine.SyncFunc(func() error { return h.file.Sync(dataOnly) })))
}

func (r *raw) Fallocate(cancel <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	h, ok := r.f.files.get(in.Fh)
	if !ok {
		return fuse.EBADF
	}
	if in.Uid != 0 {
		// fallocate drops set-id bits of a caller without CAP_FSETID, as
		// a write does; sluice allocates as root, so it drops them itself.
		if err := h.file.KillSuidgid(); err != nil {
			return st(err)
		}
	}
	allocate := func() error { return h.file.Allocate(in.Mode, int64(in.Offset), int64(in.Length)) }
	var err error
	if in.Uid != 0 {
		// As the caller, whatever the free space: one call may ask for
		// any length, the blocks reserved for root included.
		err = r.f.tree.As(r.f.callerCred(&in.Owner, in.Pid, 0), allocate)
	} else {
		err = allocate()
	}
	id := uint64(h.node.id)
	const collapse, insert = 0x08, 0x20 // FALLOC_FL_COLLAPSE_RANGE, FALLOC_FL_INSERT_RANGE
	if in.Mode&(collapse|insert) != 0 {
		// Everything from the offset on moved: drop it to the end.
		r.f.eng.Truncated(id, int64(in.Offset))
	} else {
		r.f.eng.Changed(id, int64(in.Offset), int64(in.Length))
	}
	if h.direct() {
		r.f.server.InodeNotify(id, int64(in.Offset), -1)
	}
	return st(err)
}

func (r *raw) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	id := backing.ID(in.NodeId)
	d, err := r.f.tree.OpenDir(id)
	if err != nil {
		return st(err)
	}
	// The kernel keeps the listing in its cache (FOPEN_CACHE_DIR) and
	// drops it when the directory changes through the mount; it keeps it
	// from one open to the next (FOPEN_KEEP_CACHE) while the directory is
	// as it was at its last open (close-to-open, as files: a change on
	// SOURCE behind the mount shows at the next open).
	if a, err := r.f.tree.Getattr(id); err == nil {
		out.OpenFlags |= fuse.FOPEN_CACHE_DIR
		if !r.f.nodeOf(id).revalidate(&a) {
			out.OpenFlags |= fuse.FOPEN_KEEP_CACHE
		}
	}
	out.Fh = r.f.dirs.add(&dirHandle{dir: d, id: id})
	return fuse.OK
}

func (r *raw) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return r.readDir(in, out, false)
}

func (r *raw) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	return r.readDir(in, out, true)
}

// plusFirst is how many entries the first reply to a READDIRPLUS holds
// (see readDir).
const plusFirst = 8

func (r *raw) readDir(in *fuse.ReadIn, out *fuse.DirEntryList, plus bool) fuse.Status {
	d, ok := r.f.dirs.get(in.Fh)
	if !ok {
		return fuse.EBADF
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.dir.Seek(in.Offset); err != nil {
		return st(err)
	}
	parent := backing.ID(in.NodeId)
	// The kernel asks for a listing's first entries with their attributes
	// (READDIRPLUS_AUTO), and for the rest only once the lister has
	// stat'ed some of those: the first reply holds plusFirst looked-up
	// entries and no more, so that a listing of names costs as many
	// lookups, where a whole directory in one reply cost one per entry.
	looked, most := 0, -1
	if plus && in.Offset == 0 {
		most = plusFirst
	}
	for {
		if looked == most {
			return fuse.OK
		}
		e, ok, err := d.dir.Peek()
		if err != nil {
			return st(err)
		}
		if !ok {
			return fuse.OK
		}
		de := fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: e.Mode, Off: e.Off}
		if !plus {
			if !out.AddDirEntry(de) {
				return fuse.OK
			}
			d.dir.Advance()
			continue
		}
		eo := out.AddDirLookupEntry(de)
		if eo == nil {
			return fuse.OK
		}
		d.dir.Advance()
		if e.Name == "." || e.Name == ".." {
			continue
		}
		looked++
		if ent, err := r.f.tree.Lookup(parent, e.Name); err == nil {
			fillEntry(eo, ent)
		}
		// A name gone since it was listed stays a bare entry (node id 0),
		// which the kernel does not instantiate.
	}
}

func (r *raw) ReleaseDir(in *fuse.ReleaseIn) {
	if d, ok := r.f.dirs.drop(in.Fh); ok {
		d.dir.Close()
	}
}

func (r *raw) FsyncDir(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	d, ok := r.f.dirs.get(in.Fh)
	if !ok {
		return fuse.EBADF
	}
	return st(d.dir.Sync())
}

func (r *raw) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	s, err := r.f.tree.Statfs(backing.ID(h.NodeId))
	if err != nil {
		return st(err)
	}
	out.FromStatfsT(&s)
	return fuse.OK
}

func (r *raw) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, name string, dest []byte) (uint32, fuse.Status) {
	n, err := r.f.tree.Getxattr(backing.ID(h.NodeId), name, dest)
	return uint32(max(n, 0)), st(err)
}

func (r *raw) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	id := backing.ID(h.NodeId)
	// sluice lists as root; a caller without CAP_SYS_ADMIN, whatever its
	// uid, does not see trusted.* names on SOURCE, so it does not see
	// them here.
	if hasCap(h.Pid, capSysAdmin) {
		n, err := r.f.tree.Listxattr(id, dest)
		return uint32(max(n, 0)), st(err)
	}
	buf := make([]byte, 4096)
	for {
		n, err := r.f.tree.Listxattr(id, buf)
		if err == syscall.ERANGE && len(buf) < 1<<20 {
			buf = make([]byte, 4*len(buf))
			continue
		}
		if err != nil {
			return 0, st(err)
		}
		buf = buf[:n]
		break
	}
	var list []byte
	for name := range bytes.SplitSeq(buf, []byte{0}) {
		if len(name) > 0 && !bytes.HasPrefix(name, []byte("trusted.")) {
			list = append(append(list, name...), 0)
		}
	}
	switch {
	case len(dest) == 0:
		return uint32(len(list)), fuse.OK
	case len(dest) < len(list):
		return 0, fuse.ERANGE
	}
	return uint32(copy(dest, list)), fuse.OK
}

func (r *raw) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, name string, data []byte) fuse.Status {
	return st(r.f.tree.Setxattr(backing.ID(in.NodeId), name, data, int(in.Flags)))
}

func (r *raw) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	return st(r.f.tree.Removexattr(backing.ID(h.NodeId), name))
}
