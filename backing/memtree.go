package backing

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// MemOptions configure a MemTree.
type MemOptions struct {
	// Capacity is the bytes of file data the tree holds, counted in
	// blocks of MemBlockSize: a write or fallocate past it fails with
	// ENOSPC. The default is 1 GiB.
	Capacity int64
	// Files bounds the objects the tree holds at once (Statfs's f_files):
	// a creation past it fails with ENOSPC. The default is 1<<20.
	Files uint64
	// Mode, Uid and Gid are the root directory's permission bits and
	// owner. The defaults are 0o755, 0 and 0.
	Mode     uint32
	Uid, Gid uint32
	// Now stamps the times of objects (creation, writes, changes, and
	// UTIME_NOW). The default is time.Now; a test on virtual time passes
	// its own.
	Now func() time.Time
}

// MemBlockSize is the block size of a MemTree: its Statfs unit, its
// files' st_blksize, and the unit in which their data is counted.
const MemBlockSize = 4096

// memDev is the st_dev of every object of a MemTree.
const memDev = 0x6d656d

// memMaxFileSize bounds a MemTree file's size (EFBIG past it), as ext4's
// 16 TiB with 4 KiB blocks.
const memMaxFileSize = 1 << 44

// MemTree is a Tree held in memory, with the semantics of a local POSIX
// file system as Local reports them (the same syscall.Errno for the same
// case): directories, regular files with data, symbolic links, hard
// links, device nodes, FIFOs and sockets (their attributes only: they
// cannot be opened, ENXIO), renames with RENAME_NOREPLACE and
// RENAME_EXCHANGE, extended attributes, and Setattr of modes, owners,
// sizes and times. It checks no permissions (the kernel does, above
// sluice) and runs As's function as it is; objects are created with the
// caller's uid and gid (the directory's gid under a set-group-ID
// directory) and mode less its umask; default ACLs are not applied, and
// system.posix_acl_* attributes are stored as given, not interpreted.
// Reads leave access times alone (as noatime). Its files and directory
// streams have no descriptor: Fd returns -1.
//
// A file's data counts against Capacity in whole blocks up to its last
// written or allocated byte; a size set past that (truncate) is a hole
// that costs nothing, as on a sparse file. A write that does not fit
// fails whole with ENOSPC (a disk writes what fits first). An object
// unlinked while open lives, and counts, until its last File closes.
//
// Its zero value is not usable; make one with NewMemTree.
type MemTree struct {
	opts MemOptions

	mu      sync.Mutex
	byID    map[ID]*memNode
	nextID  ID
	nextIno uint64
	used    int64  // bytes of data blocks
	objects uint64 // objects alive: linked, or open
}

// memNode is one object of a MemTree.
type memNode struct {
	id   ID     // 0 while the kernel holds no reference
	refs uint64 // the kernel's references (lookups less forgets)
	// opens counts the open Files and Dirs.
	opens int
	attr  syscall.Stat_t
	// data is the file's bytes up to its last written or allocated one;
	// what lies between len(data) and attr.Size reads as zeros. Bytes of
	// data past attr.Size (fallocate with FALLOC_FL_KEEP_SIZE) are zero.
	data   []byte
	target string              // a symlink's
	kids   map[string]*memNode // a directory's entries
	parent *memNode            // a directory's parent (the root's is itself)
	xattr  map[string][]byte
	// linkable: an unnamed file (Tmpfile) that Link may give a name.
	linkable bool
	// freed: unlinked and closed, its data dropped and no longer
	// counted. Its ID is stale, unless it is a directory: Local keeps
	// directories open, and a removed one answers, empty.
	freed bool
}

var _ Tree = (*MemTree)(nil)

// NewMemTree returns an empty tree: a root directory with opts's mode and
// owner.
func NewMemTree(opts MemOptions) *MemTree {
	if opts.Capacity <= 0 {
		opts.Capacity = 1 << 30
	}
	if opts.Files == 0 {
		opts.Files = 1 << 20
	}
	if opts.Mode == 0 {
		opts.Mode = 0o755
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	t := &MemTree{opts: opts, byID: make(map[ID]*memNode), nextID: RootID + 1}
	root := t.newNode(syscall.S_IFDIR|opts.Mode&07777, opts.Uid, opts.Gid)
	root.parent = root
	root.attr.Nlink = 2
	root.id, root.refs = RootID, 1
	t.byID[RootID] = root
	return t
}

// newNode makes an object with nlink 1 and counts it.
func (t *MemTree) newNode(mode, uid, gid uint32) *memNode {
	t.nextIno++
	t.objects++
	now := t.now()
	n := &memNode{attr: syscall.Stat_t{
		Dev: memDev, Ino: t.nextIno, Nlink: 1, Mode: mode, Uid: uid, Gid: gid,
		Blksize: MemBlockSize, Atim: now, Mtim: now, Ctim: now,
	}}
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		n.kids = make(map[string]*memNode)
		n.attr.Size = MemBlockSize
	}
	return n
}

func (t *MemTree) now() syscall.Timespec { return syscall.NsecToTimespec(t.opts.Now().UnixNano()) }

func (n *memNode) isDir() bool { return n.attr.Mode&syscall.S_IFMT == syscall.S_IFDIR }

func (n *memNode) typ() uint32 { return n.attr.Mode & syscall.S_IFMT }

// touch stamps the node's modification and change times.
func (t *MemTree) touch(n *memNode) {
	now := t.now()
	n.attr.Mtim, n.attr.Ctim = now, now
}

// node returns the object id names.
func (t *MemTree) node(id ID) (*memNode, error) {
	n := t.byID[id]
	if n == nil || n.freed && !n.isDir() {
		return nil, syscall.ESTALE
	}
	return n, nil
}

// dir returns directory id, for an operation on its entry name.
func (t *MemTree) dir(id ID, name string) (*memNode, error) {
	if err := memCheckName(name); err != nil {
		return nil, err
	}
	d, err := t.node(id)
	if err != nil {
		return nil, err
	}
	if !d.isDir() {
		return nil, syscall.ENOTDIR
	}
	return d, nil
}

// memCheckName is checkName with the file system's bound on a name.
func memCheckName(name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if len(name) > 255 {
		return syscall.ENAMETOOLONG
	}
	return nil
}

// ref gives n an ID if it has none and one more reference.
func (t *MemTree) ref(n *memNode) Entry {
	if n.id == 0 {
		n.id = t.nextID
		t.nextID++
		t.byID[n.id] = n
	}
	n.refs++
	return Entry{ID: n.id, Attr: n.stat()}
}

// stat returns n's attributes, its block count computed.
func (n *memNode) stat() syscall.Stat_t {
	st := n.attr
	if n.typ() == syscall.S_IFREG {
		st.Blocks = blocks(int64(len(n.data))) / 512
	}
	return st
}

// blocks rounds n bytes up to whole blocks, in bytes.
func blocks(n int64) int64 { return (n + MemBlockSize - 1) &^ (MemBlockSize - 1) }

// maybeFree frees an object no name and no open file refers to.
func (t *MemTree) maybeFree(n *memNode) {
	if n.attr.Nlink > 0 || n.opens > 0 || n.freed {
		return
	}
	n.freed = true
	t.used -= blocks(int64(len(n.data)))
	n.data = nil
	t.objects--
}

// grow makes n's data at least size bytes long, charging the blocks.
func (t *MemTree) grow(n *memNode, size int64) error {
	if size <= int64(len(n.data)) {
		return nil
	}
	if size > memMaxFileSize {
		return syscall.EFBIG
	}
	more := blocks(size) - blocks(int64(len(n.data)))
	if t.used+more > t.opts.Capacity {
		return syscall.ENOSPC
	}
	t.used += more
	n.data = append(n.data, make([]byte, size-int64(len(n.data)))...)
	return nil
}

// truncate sets a regular file's size; bytes past it are dropped.
func (t *MemTree) truncate(n *memNode, size int64) error {
	switch {
	case n.isDir():
		return syscall.EISDIR
	case n.typ() != syscall.S_IFREG:
		return syscall.EINVAL
	case size < 0:
		return syscall.EINVAL
	case size > memMaxFileSize:
		return syscall.EFBIG
	}
	if size < int64(len(n.data)) {
		t.used -= blocks(int64(len(n.data))) - blocks(size)
		n.data = slices.Clip(n.data[:size])
	}
	n.attr.Size = size
	t.touch(n)
	return nil
}

func (t *MemTree) Lookup(parent ID, name string) (Entry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, err := t.dir(parent, name)
	if err != nil {
		return Entry{}, err
	}
	n := d.kids[name]
	if n == nil {
		return Entry{}, syscall.ENOENT
	}
	return t.ref(n), nil
}

func (t *MemTree) Forget(id ID, n uint64) bool {
	if id == RootID {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	o := t.byID[id]
	if o == nil {
		return true
	}
	if o.refs > n {
		o.refs -= n
		return false
	}
	o.refs, o.id = 0, 0
	delete(t.byID, id)
	return true
}

func (t *MemTree) Getattr(id ID) (syscall.Stat_t, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.node(id)
	if err != nil {
		return syscall.Stat_t{}, err
	}
	return n.stat(), nil
}

// Setattr changes attributes in Local's order: mode, owner, size,
// set-id bits, times; an error stops it there.
func (t *MemTree) Setattr(id ID, f *File, set SetAttr) (syscall.Stat_t, error) {
	t.mu.Lock()
	n, err := t.node(id)
	if err != nil {
		t.mu.Unlock()
		return syscall.Stat_t{}, err
	}
	if set.Mode != nil {
		n.attr.Mode = n.typ() | *set.Mode&07777
		n.attr.Ctim = t.now()
	}
	if set.Uid != nil || set.Gid != nil {
		if set.Uid != nil {
			n.attr.Uid = *set.Uid
		}
		if set.Gid != nil {
			n.attr.Gid = *set.Gid
		}
		// chown clears the set-id bits of what is not a directory.
		if !n.isDir() {
			n.killSuidgid()
		}
		n.attr.Ctim = t.now()
	}
	if set.Size != nil {
		if f != nil {
			// The open file's own truncate, as ftruncate (refused unless
			// it writes); it takes the lock itself.
			t.mu.Unlock()
			err = f.truncate(int64(*set.Size))
			t.mu.Lock()
		} else {
			err = t.truncate(n, int64(*set.Size))
		}
		if err != nil {
			t.mu.Unlock()
			return syscall.Stat_t{}, err
		}
	}
	defer t.mu.Unlock()
	if set.KillSuidgid && n.typ() == syscall.S_IFREG {
		n.killSuidgid()
	}
	if set.Atime != nil || set.Mtime != nil {
		now := t.now()
		for _, p := range []struct{ set, to *syscall.Timespec }{{set.Atime, &n.attr.Atim}, {set.Mtime, &n.attr.Mtim}} {
			switch {
			case p.set == nil || p.set.Nsec == unix.UTIME_OMIT:
			case p.set.Nsec == unix.UTIME_NOW:
				*p.to = now
			default:
				*p.to = *p.set
			}
		}
		n.attr.Ctim = now
	}
	return n.stat(), nil
}

// killSuidgid clears the set-user-ID bit, and the set-group-ID bit when
// the group may execute, as killSuidgid does on a Local file.
func (n *memNode) killSuidgid() {
	kill := uint32(syscall.S_ISUID)
	if n.attr.Mode&syscall.S_IXGRP != 0 {
		kill |= syscall.S_ISGID
	}
	n.attr.Mode &^= kill
}

func (t *MemTree) Readlink(id ID) ([]byte, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.node(id)
	if err != nil {
		return nil, err
	}
	if n.typ() != syscall.S_IFLNK {
		return nil, syscall.ENOENT // readlinkat(fd, "") of what is no symlink
	}
	return []byte(n.target), nil
}

// create makes an object of mode (type and permission bits, the umask
// not yet applied) named name in parent, as c, and returns its entry.
func (t *MemTree) create(c *Cred, parent ID, name string, mode uint32, fill func(n *memNode)) (*memNode, error) {
	d, err := t.dir(parent, name)
	if err != nil {
		return nil, err
	}
	if d.kids[name] != nil {
		return nil, syscall.EEXIST
	}
	if d.attr.Nlink == 0 {
		return nil, syscall.ENOENT // a removed directory
	}
	n, err := t.newObject(c, d, mode)
	if err != nil {
		return nil, err
	}
	if fill != nil {
		fill(n)
	}
	t.enterNode(d, name, n)
	return n, nil
}

// newObject makes an unnamed object of mode as c in directory d.
func (t *MemTree) newObject(c *Cred, d *memNode, mode uint32) (*memNode, error) {
	if t.objects >= t.opts.Files {
		return nil, syscall.ENOSPC
	}
	perm := mode & 07777 &^ (c.Umask & 0o777)
	gid := c.Gid
	if d.attr.Mode&syscall.S_ISGID != 0 {
		gid = d.attr.Gid
		if mode&syscall.S_IFMT == syscall.S_IFDIR {
			perm |= syscall.S_ISGID
		}
	}
	return t.newNode(mode&syscall.S_IFMT|perm, c.Uid, gid), nil
}

// enterNode names n name in directory d.
func (t *MemTree) enterNode(d *memNode, name string, n *memNode) {
	d.kids[name] = n
	if n.isDir() {
		n.parent = d
		n.attr.Nlink = 2
		d.attr.Nlink++
	}
	t.touch(d)
}

func (t *MemTree) Mknod(c *Cred, parent ID, name string, mode, dev uint32) (Entry, error) {
	switch mode & syscall.S_IFMT {
	case 0:
		mode |= syscall.S_IFREG
	case syscall.S_IFREG, syscall.S_IFCHR, syscall.S_IFBLK, syscall.S_IFIFO, syscall.S_IFSOCK:
	case syscall.S_IFDIR:
		return Entry{}, syscall.EPERM
	default:
		return Entry{}, syscall.EINVAL
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.create(c, parent, name, mode, func(n *memNode) {
		if t := n.typ(); t == syscall.S_IFCHR || t == syscall.S_IFBLK {
			n.attr.Rdev = uint64(dev)
		}
	})
	if err != nil {
		return Entry{}, err
	}
	return t.ref(n), nil
}

func (t *MemTree) Mkdir(c *Cred, parent ID, name string, mode uint32) (Entry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	// mkdir keeps the sticky bit, not the set-id ones (set-group-ID comes
	// from the parent).
	n, err := t.create(c, parent, name, syscall.S_IFDIR|mode&(0o777|syscall.S_ISVTX), nil)
	if err != nil {
		return Entry{}, err
	}
	return t.ref(n), nil
}

func (t *MemTree) Symlink(c *Cred, parent ID, name, target string) (Entry, error) {
	switch {
	case target == "":
		return Entry{}, syscall.ENOENT
	case len(target) >= unix.PathMax:
		return Entry{}, syscall.ENAMETOOLONG
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	// A symlink's mode is 0777 whatever the umask.
	n, err := t.create(&Cred{Uid: c.Uid, Gid: c.Gid}, parent, name, syscall.S_IFLNK|0o777, func(n *memNode) {
		n.target = target
		n.attr.Size = int64(len(target))
	})
	if err != nil {
		return Entry{}, err
	}
	return t.ref(n), nil
}

func (t *MemTree) Link(c *Cred, id, parent ID, name string) (Entry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.node(id)
	if err != nil {
		return Entry{}, err
	}
	d, err := t.dir(parent, name)
	if err != nil {
		return Entry{}, err
	}
	switch {
	case d.kids[name] != nil:
		return Entry{}, syscall.EEXIST
	case n.isDir():
		return Entry{}, syscall.EPERM
	case n.attr.Nlink == 0 && !n.linkable:
		return Entry{}, syscall.ENOENT
	case d.attr.Nlink == 0:
		return Entry{}, syscall.ENOENT
	}
	n.attr.Nlink++
	n.linkable = false
	n.attr.Ctim = t.now()
	t.enterNode(d, name, n)
	return t.ref(n), nil
}

func (t *MemTree) Unlink(parent ID, name string) error {
	return t.removeIf(parent, name, func(n *memNode) error {
		if n.isDir() {
			return syscall.EISDIR
		}
		return nil
	})
}

func (t *MemTree) Rmdir(parent ID, name string) error {
	return t.removeIf(parent, name, func(n *memNode) error {
		switch {
		case !n.isDir():
			return syscall.ENOTDIR
		case len(n.kids) > 0:
			return syscall.ENOTEMPTY
		}
		return nil
	})
}

// removeIf removes the entry name of directory parent unless check
// refuses its object (ENOENT when there is none).
func (t *MemTree) removeIf(parent ID, name string, check func(*memNode) error) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, err := t.dir(parent, name)
	if err != nil {
		return err
	}
	n := d.kids[name]
	if n == nil {
		return syscall.ENOENT
	}
	if err := check(n); err != nil {
		return err
	}
	t.remove(d, name)
	return nil
}

// remove drops the entry name of d, and its object once nothing holds it.
func (t *MemTree) remove(d *memNode, name string) {
	n := d.kids[name]
	delete(d.kids, name)
	if n.isDir() {
		n.attr.Nlink = 0
		d.attr.Nlink--
	} else {
		n.attr.Nlink--
	}
	n.attr.Ctim = t.now()
	t.touch(d)
	t.maybeFree(n)
}

// within reports whether directory d is a or lies below it.
func within(d, a *memNode) bool {
	for {
		if d == a {
			return true
		}
		if d.parent == d || d.parent == nil {
			return false
		}
		d = d.parent
	}
}

func (t *MemTree) Rename(parent ID, name string, newParent ID, newName string, flags uint32) error {
	const known = unix.RENAME_NOREPLACE | unix.RENAME_EXCHANGE
	if flags&^known != 0 || flags == known {
		return syscall.EINVAL
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	np, err := t.dir(newParent, newName)
	if err != nil {
		return err
	}
	p, err := t.dir(parent, name)
	if err != nil {
		return err
	}
	src, dst := p.kids[name], np.kids[newName]
	exchange := flags&unix.RENAME_EXCHANGE != 0
	switch {
	case src == nil:
		return syscall.ENOENT
	case flags&unix.RENAME_NOREPLACE != 0 && dst != nil:
		return syscall.EEXIST
	case exchange && dst == nil:
		return syscall.ENOENT
	case src.isDir() && within(np, src):
		return syscall.EINVAL
	case exchange && dst.isDir() && within(p, dst):
		return syscall.EINVAL
	case dst != nil && !exchange && within(p, dst):
		return syscall.ENOTEMPTY
	case src == dst:
		return nil
	case dst != nil && !exchange && src.isDir() && !dst.isDir():
		return syscall.ENOTDIR
	case dst != nil && !exchange && !src.isDir() && dst.isDir():
		return syscall.EISDIR
	case dst != nil && !exchange && len(dst.kids) > 0:
		return syscall.ENOTEMPTY
	}
	now := t.now()
	if exchange {
		p.kids[name], np.kids[newName] = dst, src
		if p != np {
			move(src, p, np)
			move(dst, np, p)
		}
		dst.attr.Ctim = now
	} else {
		if dst != nil {
			t.remove(np, newName)
		}
		delete(p.kids, name)
		np.kids[newName] = src
		if p != np {
			move(src, p, np)
		}
	}
	src.attr.Ctim = now
	t.touch(p)
	t.touch(np)
	return nil
}

// move accounts for n leaving directory from for directory to.
func move(n, from, to *memNode) {
	if n.isDir() {
		n.parent = to
		from.attr.Nlink--
		to.attr.Nlink++
	}
}

// memAccess are the open(2) access bits a memFile honours.
func memAccess(flags uint32) (read, write bool) {
	switch flags & syscall.O_ACCMODE {
	case syscall.O_RDONLY:
		return true, false
	case syscall.O_WRONLY:
		return false, true
	default:
		return true, true
	}
}

func (t *MemTree) Create(c *Cred, parent ID, name string, flags, mode uint32) (Entry, *File, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, err := t.dir(parent, name)
	if err != nil {
		return Entry{}, nil, err
	}
	if n := d.kids[name]; n != nil {
		switch {
		case flags&syscall.O_EXCL != 0:
			return Entry{}, nil, syscall.EEXIST
		case n.typ() == syscall.S_IFLNK:
			return Entry{}, nil, syscall.ELOOP
		case n.isDir():
			return Entry{}, nil, syscall.EISDIR
		}
		f, err := t.open(n, flags)
		if err != nil {
			return Entry{}, nil, err
		}
		return t.ref(n), f, nil
	}
	n, err := t.create(c, parent, name, syscall.S_IFREG|mode&07777, nil)
	if err != nil {
		return Entry{}, nil, err
	}
	f, err := t.open(n, flags&^syscall.O_TRUNC)
	if err != nil {
		return Entry{}, nil, err
	}
	return t.ref(n), f, nil
}

func (t *MemTree) Tmpfile(c *Cred, parent ID, flags, mode uint32) (Entry, *File, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	d, err := t.node(parent)
	if err != nil {
		return Entry{}, nil, err
	}
	switch {
	case !d.isDir():
		return Entry{}, nil, syscall.ENOTDIR
	case flags&syscall.O_ACCMODE == syscall.O_RDONLY:
		return Entry{}, nil, syscall.EINVAL
	case d.attr.Nlink == 0:
		return Entry{}, nil, syscall.ENOENT
	}
	n, err := t.newObject(c, d, syscall.S_IFREG|mode&07777)
	if err != nil {
		return Entry{}, nil, err
	}
	n.attr.Nlink = 0
	n.linkable = true // O_EXCL is not kept, as Local's open flags do not
	f, err := t.open(n, flags)
	if err != nil {
		return Entry{}, nil, err
	}
	return t.ref(n), f, nil
}

func (t *MemTree) Open(id ID, flags uint32) (*File, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.node(id)
	if err != nil {
		return nil, err
	}
	return t.open(n, flags)
}

// open opens n with the open(2) flags given.
func (t *MemTree) open(n *memNode, flags uint32) (*File, error) {
	read, write := memAccess(flags)
	switch n.typ() {
	case syscall.S_IFDIR:
		if write {
			return nil, syscall.EISDIR
		}
	case syscall.S_IFLNK:
		return nil, syscall.ELOOP
	case syscall.S_IFREG:
		if flags&unix.O_DIRECTORY != 0 {
			return nil, syscall.ENOTDIR
		}
		if flags&syscall.O_TRUNC != 0 {
			if err := t.truncate(n, 0); err != nil {
				return nil, err
			}
		}
	default:
		if flags&unix.O_DIRECTORY != 0 {
			return nil, syscall.ENOTDIR
		}
		return nil, syscall.ENXIO
	}
	n.opens++
	return &File{fd: -1, io: &memFile{t: t, n: n, read: read, write: write, append: flags&syscall.O_APPEND != 0}}, nil
}

func (t *MemTree) OpenDir(id ID) (*Dir, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.node(id)
	if err != nil {
		return nil, err
	}
	if !n.isDir() {
		return nil, syscall.ENOTDIR
	}
	if n.attr.Nlink == 0 {
		return nil, syscall.ENOENT // removed
	}
	n.opens++
	d := &memDir{t: t, n: n}
	d.list()
	return &Dir{fd: -1, io: d}, nil
}

func (t *MemTree) Statfs(id ID) (syscall.Statfs_t, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, err := t.node(id); err != nil {
		return syscall.Statfs_t{}, err
	}
	free := uint64(t.opts.Capacity-t.used) / MemBlockSize
	return syscall.Statfs_t{
		Type:    unix.TMPFS_MAGIC,
		Bsize:   MemBlockSize,
		Frsize:  MemBlockSize,
		Blocks:  uint64(t.opts.Capacity) / MemBlockSize,
		Bfree:   free,
		Bavail:  free,
		Files:   t.opts.Files,
		Ffree:   t.opts.Files - t.objects,
		Namelen: 255,
	}, nil
}

// xattrNode returns the object of id for an extended attribute call on
// name ("" for a listing), with the error Local gives a symlink.
func (t *MemTree) xattrNode(id ID) (*memNode, error) {
	n, err := t.node(id)
	if err != nil {
		return nil, err
	}
	if n.typ() == syscall.S_IFLNK {
		return nil, syscall.EPERM
	}
	return n, nil
}

// xattrName checks an attribute's name for n: a known namespace, and
// user attributes only on regular files and directories.
func xattrName(n *memNode, name string) error {
	switch {
	case name == "" || len(name) > 255:
		return syscall.ERANGE
	case strings.HasPrefix(name, "user."):
		if t := n.typ(); t != syscall.S_IFREG && t != syscall.S_IFDIR {
			return syscall.EPERM
		}
	case strings.HasPrefix(name, "trusted."), strings.HasPrefix(name, "security."),
		name == "system.posix_acl_access", name == "system.posix_acl_default":
	default:
		return syscall.EOPNOTSUPP
	}
	return nil
}

func (t *MemTree) Getxattr(id ID, name string, dest []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.xattrNode(id)
	if err == syscall.EPERM {
		return 0, syscall.ENODATA
	}
	if err != nil {
		return 0, err
	}
	if err := xattrName(n, name); err != nil {
		if err == syscall.EPERM {
			err = syscall.ENODATA
		}
		return 0, err
	}
	v, ok := n.xattr[name]
	switch {
	case !ok:
		return 0, syscall.ENODATA
	case len(dest) == 0:
		return len(v), nil
	case len(dest) < len(v):
		return 0, syscall.ERANGE
	}
	return copy(dest, v), nil
}

func (t *MemTree) Listxattr(id ID, dest []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.xattrNode(id)
	if err == syscall.EPERM {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var list []byte
	for _, k := range slices.Sorted(mapKeys(n.xattr)) {
		list = append(append(list, k...), 0)
	}
	switch {
	case len(dest) == 0:
		return len(list), nil
	case len(dest) < len(list):
		return 0, syscall.ERANGE
	}
	return copy(dest, list), nil
}

func (t *MemTree) Setxattr(id ID, name string, data []byte, flags int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.xattrNode(id)
	if err != nil {
		return err
	}
	if err := xattrName(n, name); err != nil {
		return err
	}
	if len(data) > 1<<16 {
		return syscall.E2BIG
	}
	_, ok := n.xattr[name]
	switch {
	case flags&unix.XATTR_CREATE != 0 && ok:
		return syscall.EEXIST
	case flags&unix.XATTR_REPLACE != 0 && !ok:
		return syscall.ENODATA
	}
	if n.xattr == nil {
		n.xattr = make(map[string][]byte)
	}
	n.xattr[name] = slices.Clone(data)
	n.attr.Ctim = t.now()
	return nil
}

func (t *MemTree) Removexattr(id ID, name string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, err := t.xattrNode(id)
	if err != nil {
		return err
	}
	if err := xattrName(n, name); err != nil {
		if err == syscall.EPERM {
			err = syscall.ENODATA
		}
		return err
	}
	if _, ok := n.xattr[name]; !ok {
		return syscall.ENODATA
	}
	delete(n.xattr, name)
	n.attr.Ctim = t.now()
	return nil
}

func mapKeys(m map[string][]byte) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// As runs fn: a MemTree has no credentials to take on.
func (t *MemTree) As(c *Cred, fn func() error) error { return fn() }

// Close forgets every object; the tree answers ESTALE from then on, and
// its open files keep their data until they close.
func (t *MemTree) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byID = map[ID]*memNode{}
	return nil
}

// String names the tree for logs.
func (t *MemTree) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return fmt.Sprintf("memory tree: %d objects known, %d of %d bytes used", len(t.byID), t.used, t.opts.Capacity)
}
