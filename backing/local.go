package backing

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LocalOptions configure a Local tree.
type LocalOptions struct {
	// MaxOpen bounds the directory descriptors the tree keeps open between
	// operations to reach objects it holds by file handle; objects in use
	// (open files, operations in progress) are not counted against it and
	// never closed under it. The default is 1024.
	MaxOpen int
	// Faults, when not nil, is injected into the I/O of every file the
	// tree opens.
	Faults *Faults
	// Refs, when not nil, keeps each object's reference count where
	// another process can read it should this one die (RefTable).
	Refs *RefTable
}

// Local is a Tree over a directory. It holds each object by a file handle
// (name_to_handle_at) and opens it on demand for the time of an operation
// or an open file; it keeps up to MaxOpen directories open between
// operations. On a file system without file handles it keeps an O_PATH
// descriptor per object the kernel holds instead (then descriptors grow
// with the objects in use, as with libfuse's passthrough_hp).
type Local struct {
	opts  LocalOptions
	creds *creds

	mu     sync.Mutex
	byID   map[ID]*inode
	byKey  map[devIno]*inode
	nextID ID
	lru    inode       // sentinel of the ring of cached descriptors, newest first
	cached int         // descriptors in the ring
	mounts map[int]int // mount id -> a descriptor on that mount, for open_by_handle_at
	pinned int         // objects held by descriptor (no file handle)
	// noHandles: this process cannot open file handles, so every object
	// is held by descriptor.
	noHandles bool
	journal   LocalJournal // told of new objects, dropped ones and mounts
}

type devIno struct{ dev, ino uint64 }

type inode struct {
	id   ID
	key  devIno
	mode uint32 // type bits

	handle  []byte // file handle; nil when the file system has none
	htype   int32
	mountID int

	fd   int // O_PATH descriptor; -1 when closed
	uses int // operations and open files holding fd
	refs uint64
	slot int32 // in the RefTable; 0 for none

	prev, next *inode // in the ring of cached descriptors
	forgotten  bool
}

var _ Tree = (*Local)(nil)

// NewLocal opens dir as a tree. It sets the process's umask to 0: a new
// object's mode is decided per caller (Cred.Umask, default ACLs), and the
// backing file system must not mask it again.
func NewLocal(dir string, opts LocalOptions) (*Local, error) {
	unix.Umask(0)
	if opts.MaxOpen <= 0 {
		opts.MaxOpen = 1024
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	t := &Local{
		opts:   opts,
		byID:   make(map[ID]*inode),
		byKey:  make(map[devIno]*inode),
		nextID: RootID + 1,
		mounts: make(map[int]int),
	}
	t.lru.prev, t.lru.next = &t.lru, &t.lru
	if fh, mountID, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH); err == nil {
		if mfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			// open_by_handle_at needs CAP_DAC_READ_SEARCH: without it (a
			// mount made without root) objects are held by descriptor.
			if pfd, err := unix.OpenByHandleAt(mfd, fh, unix.O_PATH|unix.O_CLOEXEC); err == nil {
				unix.Close(pfd)
				t.mounts[mountID] = mfd
			} else {
				unix.Close(mfd)
				t.noHandles = true
			}
		}
	}
	root := &inode{id: RootID, key: devIno{st.Dev, st.Ino}, mode: st.Mode & syscall.S_IFMT, fd: fd, refs: 1, uses: 1}
	t.byID[RootID] = root
	t.byKey[root.key] = root
	t.creds = newCreds()
	return t, nil
}

// Close closes every descriptor the tree holds and stops its workers.
func (t *Local) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, in := range t.byID {
		if in.fd >= 0 {
			unix.Close(in.fd)
			in.fd = -1
		}
	}
	for _, fd := range t.mounts {
		unix.Close(fd)
	}
	t.mounts = map[int]int{}
	return nil
}

// As runs fn with c's credentials, as object creation does: for writes
// that must count against the caller's disk quota and stay out of the
// blocks the file system reserves for root.
func (t *Local) As(c *Cred, fn func() error) error { return t.creds.as(c, fn) }

// Stats are a tree's counters.
type Stats struct {
	Objects int // objects the kernel holds
	Cached  int // descriptors open to reach objects held by file handle
	Pinned  int // objects held by an O_PATH descriptor (no file handles)
}

// Stats returns the tree's counters.
func (t *Local) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return Stats{Objects: len(t.byID), Cached: t.cached, Pinned: t.pinned}
}

// fileHandle returns the file handle that reaches id, and whether it has
// one (a file system without handles holds it by an O_PATH descriptor).
func (t *Local) fileHandle(id ID) (htype int32, h []byte, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := t.byID[id]
	if in == nil || in.handle == nil {
		return 0, nil, false
	}
	return in.htype, in.handle, true
}

// acquire returns a descriptor of id held until release.
func (t *Local) acquire(id ID) (*inode, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	in := t.byID[id]
	if in == nil {
		return nil, syscall.ESTALE
	}
	if in.fd < 0 {
		mfd, ok := t.mounts[in.mountID]
		if !ok || in.handle == nil {
			return nil, syscall.ESTALE
		}
		fd, err := unix.OpenByHandleAt(mfd, unix.NewFileHandle(in.htype, in.handle), unix.O_PATH|unix.O_CLOEXEC)
		if err != nil {
			return nil, err
		}
		in.fd = fd
		t.cached++
	} else if in.next != nil {
		t.unlink(in)
	}
	in.uses++
	return in, nil
}

// release undoes acquire. The descriptor joins the ring of cached ones,
// and the oldest unused ones close while the ring is over its bound.
func (t *Local) release(in *inode) {
	t.mu.Lock()
	t.releaseLocked(in)
	t.mu.Unlock()
}

func (t *Local) releaseLocked(in *inode) {
	in.uses--
	if in.uses > 0 || in.fd < 0 {
		return
	}
	if in.handle == nil && !in.forgotten {
		return // pinned: the descriptor is how the object is held
	}
	if in.forgotten || in.mode != syscall.S_IFDIR {
		// Only directories stay open: they are the parents every name
		// operation starts from. A descriptor of a file would also keep
		// it, and its blocks, alive after it is deleted behind sluice's
		// back.
		t.closeFd(in)
		return
	}
	// Newest first.
	in.prev, in.next = &t.lru, t.lru.next
	t.lru.next.prev = in
	t.lru.next = in
	for t.cached > t.opts.MaxOpen && t.lru.prev != &t.lru {
		old := t.lru.prev
		t.unlink(old)
		t.closeFd(old)
	}
}

func (t *Local) unlink(in *inode) {
	in.prev.next = in.next
	in.next.prev = in.prev
	in.prev, in.next = nil, nil
}

func (t *Local) closeFd(in *inode) {
	if in.fd < 0 {
		return
	}
	unix.Close(in.fd)
	in.fd = -1
	if in.handle != nil {
		t.cached--
	} else {
		t.pinned--
	}
}

// enter records the object open as fd (an O_PATH descriptor that enter
// takes over) and returns its entry with one more reference.
func (t *Local) enter(fd int) (Entry, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return Entry{}, err
	}
	fh, mountID, herr := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH)
	k := devIno{st.Dev, st.Ino}
	t.mu.Lock()
	defer t.mu.Unlock()
	if herr == nil && t.noHandles {
		herr = syscall.EOPNOTSUPP
	}
	if in := t.byKey[k]; in != nil && !in.forgotten && t.same(in, fh, herr) {
		t.ref(in, in.refs+1)
		if in.fd < 0 {
			in.fd = fd
			t.cached++
			in.uses++
			t.releaseLocked(in)
		} else {
			unix.Close(fd)
		}
		return Entry{ID: in.id, Attr: st}, nil
	}
	in := &inode{id: t.nextID, key: k, mode: st.Mode & syscall.S_IFMT, fd: fd, refs: 1}
	t.nextID++
	if herr == nil {
		if _, ok := t.mounts[mountID]; !ok {
			// open_by_handle_at takes a real open file of the mount, not
			// an O_PATH one. Mounts are met at their root, a directory; a
			// file system reached only through another object is held by
			// descriptor instead.
			if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				if mfd, err := unix.Open(procPath(fd), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
					t.mounts[mountID] = mfd
					if t.journal != nil {
						t.journal.Mounted(mountID, mfd)
					}
				}
			}
		}
		if _, ok := t.mounts[mountID]; !ok {
			herr = syscall.EOPNOTSUPP
		}
	}
	if herr == nil {
		in.handle, in.htype, in.mountID = bytes.Clone(fh.Bytes()), fh.Type(), mountID
		t.cached++
	} else {
		t.pinned++
	}
	t.byID[in.id] = in
	t.byKey[k] = in
	t.newRef(in)
	if t.journal != nil {
		pfd := -1
		if in.handle == nil {
			pfd = fd
		}
		t.journal.Entered(in.object(), pfd)
	}
	if in.handle != nil {
		in.uses++
		t.releaseLocked(in)
	}
	return Entry{ID: in.id, Attr: st}, nil
}

// enterHandle records an object by its attributes and file handle, with
// no descriptor: one is opened from the handle when an operation needs
// it. ok is false when the handle's mount has no descriptor to open
// handles with yet; the caller then opens the object and calls enter.
func (t *Local) enterHandle(st *syscall.Stat_t, fh unix.FileHandle, mountID int) (e Entry, ok bool) {
	k := devIno{st.Dev, st.Ino}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.mounts[mountID]; !ok {
		return Entry{}, false
	}
	if in := t.byKey[k]; in != nil && !in.forgotten && t.same(in, fh, nil) {
		t.ref(in, in.refs+1)
		return Entry{ID: in.id, Attr: *st}, true
	}
	in := &inode{id: t.nextID, key: k, mode: st.Mode & syscall.S_IFMT, fd: -1, refs: 1,
		handle: bytes.Clone(fh.Bytes()), htype: fh.Type(), mountID: mountID}
	t.nextID++
	t.byID[in.id] = in
	t.byKey[k] = in
	t.newRef(in)
	if t.journal != nil {
		t.journal.Entered(in.object(), -1)
	}
	return Entry{ID: in.id, Attr: *st}, true
}

// same reports whether an object known as in is the one whose handle is
// fh: an inode number may have been reused by a new object since. An
// object held by descriptor keeps its inode number from being reused.
func (t *Local) same(in *inode, fh unix.FileHandle, herr error) bool {
	if in.handle == nil {
		return in.id == RootID || herr != nil
	}
	return herr == nil && fh.Type() == in.htype && bytes.Equal(fh.Bytes(), in.handle)
}

// ref sets in's reference count, in the RefTable too.
func (t *Local) ref(in *inode, n uint64) {
	in.refs = n
	t.opts.Refs.store(in.slot, n)
}

// newRef gives a new object its slot in the RefTable, its count stored
// before the journal is told of it.
func (t *Local) newRef(in *inode) {
	in.slot = t.opts.Refs.take()
	t.opts.Refs.store(in.slot, in.refs)
}

// Forget drops n references to id.
func (t *Local) Forget(id ID, n uint64) bool {
	if id == RootID {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	in := t.byID[id]
	if in == nil {
		return true
	}
	if in.refs > n {
		t.ref(in, in.refs-n)
		return false
	}
	in.refs = 0
	in.forgotten = true
	delete(t.byID, id)
	if t.journal != nil {
		t.journal.Dropped(id)
	}
	t.opts.Refs.put(in.slot) // once the journal no longer holds the object
	in.slot = 0
	if t.byKey[in.key] == in {
		delete(t.byKey, in.key)
	}
	if in.uses == 0 {
		if in.next != nil {
			t.unlink(in)
		}
		t.closeFd(in)
	}
	return true
}

func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.IndexByte(name, '/') >= 0 {
		return syscall.EINVAL
	}
	return nil
}

func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// Lookup finds name in parent.
func (t *Local) Lookup(parent ID, name string) (e Entry, err error) {
	err = t.inDir(parent, name, func(pfd int) (err error) {
		e, err = t.lookupAt(pfd, name)
		return err
	})
	return e, err
}

func (t *Local) lookupAt(pfd int, name string) (Entry, error) {
	// Without opening it: the handle and the attributes, two system calls.
	fh, mountID, herr := unix.NameToHandleAt(pfd, name, 0)
	switch herr {
	case nil:
		var st syscall.Stat_t
		if err := fstatat(pfd, name, &st); err != nil {
			return Entry{}, err
		}
		if e, ok := t.enterHandle(&st, fh, mountID); ok {
			return e, nil
		}
	case syscall.EOPNOTSUPP, syscall.EOVERFLOW, syscall.EINVAL, syscall.ENOSYS:
		// No handle for this object: held by descriptor.
	default:
		return Entry{}, herr
	}
	fd, err := unix.Openat(pfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return Entry{}, err
	}
	return t.enter(fd)
}

// fstatat is lstat of name in directory dirfd.
func fstatat(dirfd int, name string, st *syscall.Stat_t) error {
	return unix.Fstatat(dirfd, name, (*unix.Stat_t)(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW)
}

// on runs fn with a descriptor of id held for the call.
func (t *Local) on(id ID, fn func(fd int) error) error {
	in, err := t.acquire(id)
	if err != nil {
		return err
	}
	defer t.release(in)
	return fn(in.fd)
}

func (t *Local) Getattr(id ID) (st syscall.Stat_t, err error) {
	err = t.on(id, func(fd int) error { return syscall.Fstat(fd, &st) })
	return st, err
}

func (t *Local) Setattr(id ID, f *File, set SetAttr) (syscall.Stat_t, error) {
	var st syscall.Stat_t
	in, err := t.acquire(id)
	if err != nil {
		return st, err
	}
	defer t.release(in)
	if set.Mode != nil {
		if err := unix.Fchmodat(unix.AT_FDCWD, procPath(in.fd), *set.Mode&07777, 0); err != nil {
			return st, err
		}
	}
	if set.Uid != nil || set.Gid != nil {
		uid, gid := -1, -1
		if set.Uid != nil {
			uid = int(*set.Uid)
		}
		if set.Gid != nil {
			gid = int(*set.Gid)
		}
		if err := unix.Fchownat(in.fd, "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return st, err
		}
	}
	if set.Size != nil {
		if f != nil {
			err = f.truncate(int64(*set.Size))
		} else {
			err = unix.Truncate(procPath(in.fd), int64(*set.Size))
		}
		if err != nil {
			return st, err
		}
	}
	if set.KillSuidgid {
		if err := killSuidgid(in.fd); err != nil {
			return st, err
		}
	}
	if set.Atime != nil || set.Mtime != nil {
		ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_OMIT}}
		if set.Atime != nil {
			ts[0] = unix.Timespec(*set.Atime)
		}
		if set.Mtime != nil {
			ts[1] = unix.Timespec(*set.Mtime)
		}
		if err := unix.UtimesNanoAt(in.fd, "", ts, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return st, err
		}
	}
	err = syscall.Fstat(in.fd, &st)
	return st, err
}

// killSuidgid clears the set-user-ID bit, and the set-group-ID bit of a
// group-executable file, as the kernel does when an unprivileged caller
// writes or truncates a file.
func killSuidgid(fd int) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return nil
	}
	mode := st.Mode & 07777
	kill := uint32(syscall.S_ISUID)
	if mode&syscall.S_IXGRP != 0 {
		kill |= syscall.S_ISGID
	}
	if mode&kill == 0 {
		return nil
	}
	return unix.Fchmodat(unix.AT_FDCWD, procPath(fd), mode&^kill, 0)
}

// KillSuidgid clears set-id bits of an open file as a write by a caller
// without CAP_FSETID does.
func (f *File) KillSuidgid() error {
	if f.set != nil {
		return f.set.each(metaChange, (*File).KillSuidgid)
	}
	if f.io != nil {
		return f.io.KillSuidgid()
	}
	return killSuidgid(f.fd)
}

func (t *Local) Readlink(id ID) ([]byte, error) {
	buf := make([]byte, unix.PathMax)
	n := 0
	err := t.on(id, func(fd int) (err error) {
		n, err = unix.Readlinkat(fd, "", buf)
		return err
	})
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// create runs mk as the caller in directory parent, then enters name.
func (t *Local) create(c *Cred, parent ID, name string, mk func(pfd int) error) (e Entry, err error) {
	err = t.inDir(parent, name, func(pfd int) error {
		fd := -1
		err := t.creds.as(c, func() error {
			if err := mk(pfd); err != nil {
				return err
			}
			var err error
			fd, err = unix.Openat(pfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			return err
		})
		if err != nil {
			return err
		}
		e, err = t.enter(fd)
		return err
	})
	return e, err
}

func (t *Local) Mknod(c *Cred, parent ID, name string, mode, dev uint32) (Entry, error) {
	return t.create(c, parent, name, func(pfd int) error {
		return unix.Mknodat(pfd, name, createMode(pfd, mode, c.Umask), int(dev))
	})
}

func (t *Local) Mkdir(c *Cred, parent ID, name string, mode uint32) (Entry, error) {
	return t.create(c, parent, name, func(pfd int) error {
		return unix.Mkdirat(pfd, name, createMode(pfd, mode, c.Umask))
	})
}

func (t *Local) Symlink(c *Cred, parent ID, name, target string) (Entry, error) {
	return t.create(c, parent, name, func(pfd int) error { return unix.Symlinkat(target, pfd, name) })
}

func (t *Local) Link(c *Cred, id, parent ID, name string) (Entry, error) {
	in, err := t.acquire(id)
	if err != nil {
		return Entry{}, err
	}
	defer t.release(in)
	return t.create(c, parent, name, func(pfd int) error {
		// AT_EMPTY_PATH links the object itself, a symlink included, but
		// needs CAP_DAC_READ_SEARCH; /proc/self/fd/N reaches a regular file
		// without it.
		if c.Uid == 0 {
			err := unix.Linkat(in.fd, "", pfd, name, unix.AT_EMPTY_PATH)
			if err != syscall.EPERM && err != syscall.ENOENT {
				return err
			}
		}
		return unix.Linkat(unix.AT_FDCWD, procPath(in.fd), pfd, name, unix.AT_SYMLINK_FOLLOW)
	})
}

func (t *Local) Unlink(parent ID, name string) error {
	return t.inDir(parent, name, func(pfd int) error { return unix.Unlinkat(pfd, name, 0) })
}

func (t *Local) Rmdir(parent ID, name string) error {
	return t.inDir(parent, name, func(pfd int) error { return unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR) })
}

func (t *Local) inDir(parent ID, name string, fn func(pfd int) error) error {
	if err := checkName(name); err != nil {
		return err
	}
	return t.on(parent, fn)
}

func (t *Local) Rename(parent ID, name string, newParent ID, newName string, flags uint32) error {
	if err := checkName(newName); err != nil {
		return err
	}
	np, err := t.acquire(newParent)
	if err != nil {
		return err
	}
	defer t.release(np)
	return t.inDir(parent, name, func(pfd int) error {
		return unix.Renameat2(pfd, name, np.fd, newName, uint(flags))
	})
}

// openFlags are the flags a backing open keeps: the kernel has already
// created the file, and the serving process has no controlling terminal
// to acquire. O_APPEND is kept when asked for: on Linux every pwrite to
// such a descriptor goes to the end of the file, so a caller that writes
// at offsets asks for it only where the file takes nothing else (an
// append-only file).
func openFlags(flags uint32) int {
	const fmodeExec = 0x20
	return int(flags&^(syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOCTTY|unix.O_NOFOLLOW|fmodeExec)) | unix.O_CLOEXEC
}

func (t *Local) Create(c *Cred, parent ID, name string, flags, mode uint32) (Entry, *File, error) {
	if err := checkName(name); err != nil {
		return Entry{}, nil, err
	}
	return t.openNew(c, parent, name, openFlags(flags)|unix.O_CREAT|unix.O_NOFOLLOW|int(flags&syscall.O_EXCL), mode)
}

func (t *Local) Tmpfile(c *Cred, parent ID, flags, mode uint32) (Entry, *File, error) {
	return t.openNew(c, parent, ".", openFlags(flags)|unix.O_TMPFILE, mode)
}

// openNew opens name in parent with flags that may create it, as the
// caller, and enters what it opened.
func (t *Local) openNew(c *Cred, parent ID, name string, flags int, mode uint32) (e Entry, f *File, err error) {
	fd := -1
	err = t.on(parent, func(pfd int) error {
		return t.creds.as(c, func() (err error) {
			fd, err = unix.Openat(pfd, name, flags, createMode(pfd, mode, c.Umask))
			return err
		})
	})
	if err != nil {
		return Entry{}, nil, err
	}
	return t.enterOpen(fd)
}

// enterOpen enters the object of an open file descriptor and wraps it.
func (t *Local) enterOpen(fd int) (Entry, *File, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return Entry{}, nil, err
	}
	if fh, mountID, err := unix.NameToHandleAt(fd, "", unix.AT_EMPTY_PATH); err == nil {
		if e, ok := t.enterHandle(&st, fh, mountID); ok {
			// The open file keeps the object alive, and its handle reaches
			// it even once it has no name.
			return e, &File{fd: fd, faults: t.opts.Faults}, nil
		}
	}
	pfd, err := unix.Open(procPath(fd), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return Entry{}, nil, err
	}
	e, err := t.enter(pfd)
	if err != nil {
		unix.Close(fd)
		return Entry{}, nil, err
	}
	in, err := t.acquire(e.ID)
	if err != nil {
		unix.Close(fd)
		t.Forget(e.ID, 1)
		return Entry{}, nil, err
	}
	return e, &File{fd: fd, release: func() { t.release(in) }, faults: t.opts.Faults}, nil
}

func (t *Local) Open(id ID, flags uint32) (*File, error) {
	in, err := t.acquire(id)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(procPath(in.fd), openFlags(flags), 0)
	if err != nil {
		t.release(in)
		return nil, err
	}
	return &File{fd: fd, release: func() { t.release(in) }, faults: t.opts.Faults}, nil
}

func (t *Local) OpenDir(id ID) (*Dir, error) {
	in, err := t.acquire(id)
	if err != nil {
		return nil, err
	}
	fd, err := unix.Openat(in.fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.release(in)
		return nil, err
	}
	return &Dir{fd: fd, release: func() { t.release(in) }}, nil
}

func (t *Local) Statfs(id ID) (st syscall.Statfs_t, err error) {
	err = t.on(id, func(fd int) error { return syscall.Fstatfs(fd, &st) })
	return st, err
}

// xattr runs fn on a path that reaches the object itself: extended
// attribute calls take no descriptor opened with O_PATH.
func (t *Local) xattr(id ID, fn func(path string) error) error {
	in, err := t.acquire(id)
	if err != nil {
		return err
	}
	defer t.release(in)
	if in.mode == syscall.S_IFLNK {
		// Following /proc/self/fd/N of a symlink would reach its target.
		return syscall.EPERM
	}
	return fn(procPath(in.fd))
}

func (t *Local) Getxattr(id ID, name string, dest []byte) (n int, err error) {
	err = t.xattr(id, func(p string) error { n, err = unix.Getxattr(p, name, dest); return err })
	if err == syscall.EPERM {
		err = syscall.ENODATA
	}
	return n, err
}

func (t *Local) Listxattr(id ID, dest []byte) (n int, err error) {
	err = t.xattr(id, func(p string) error { n, err = unix.Listxattr(p, dest); return err })
	if err == syscall.EPERM {
		return 0, nil
	}
	return n, err
}

func (t *Local) Setxattr(id ID, name string, data []byte, flags int) error {
	return t.xattr(id, func(p string) error { return unix.Setxattr(p, name, data, flags) })
}

func (t *Local) Removexattr(id ID, name string) error {
	return t.xattr(id, func(p string) error { return unix.Removexattr(p, name) })
}

// String names the tree for logs.
func (t *Local) String() string {
	s := t.Stats()
	return fmt.Sprintf("local tree: %d objects, %d cached descriptors, %d pinned", s.Objects, s.Cached, s.Pinned)
}
