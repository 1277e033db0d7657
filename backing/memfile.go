package backing

import (
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// memFile is an open file of a MemTree.
type memFile struct {
	t           *MemTree
	n           *memNode
	read, write bool
	append      bool
	closed      bool
	pos         int64 // for SEEK_CUR
}

var _ fileIO = (*memFile)(nil)

func (f *memFile) ReadAt(pid int, p []byte, off int64) (int, error) {
	f.t.mu.Lock()
	defer f.t.mu.Unlock()
	switch {
	case f.closed || !f.read:
		return 0, syscall.EBADF
	case f.n.isDir():
		return 0, syscall.EISDIR
	case off < 0:
		return 0, syscall.EINVAL
	case off >= f.n.attr.Size:
		return 0, nil
	}
	p = p[:min(int64(len(p)), f.n.attr.Size-off)]
	m := 0
	if off < int64(len(f.n.data)) {
		m = copy(p, f.n.data[off:])
	}
	clear(p[m:])
	return len(p), nil
}

func (f *memFile) WriteAt(p []byte, off int64) (int, error) {
	f.t.mu.Lock()
	defer f.t.mu.Unlock()
	switch {
	case f.closed || !f.write:
		return 0, syscall.EBADF
	case off < 0:
		return 0, syscall.EINVAL
	}
	n := f.n
	if f.append {
		off = n.attr.Size
	}
	if len(p) == 0 {
		return 0, nil
	}
	end := off + int64(len(p))
	if err := f.t.grow(n, end); err != nil {
		return 0, err
	}
	copy(n.data[off:], p)
	n.attr.Size = max(n.attr.Size, end)
	f.t.touch(n)
	return len(p), nil
}

func (f *memFile) Stat() (syscall.Stat_t, error) {
	f.t.mu.Lock()
	defer f.t.mu.Unlock()
	if f.closed {
		return syscall.Stat_t{}, syscall.EBADF
	}
	return f.n.stat(), nil
}

func (f *memFile) ok() error {
	f.t.mu.Lock()
	defer f.t.mu.Unlock()
	if f.closed {
		return syscall.EBADF
	}
	return nil
}

// Sync has nothing to flush.
func (f *memFile) Sync(dataOnly bool) error { return f.ok() }

// StartWriteback has nothing to write back.
func (f *memFile) StartWriteback(off, n int64) error { return f.ok() }

// Flush has nothing to flush.
func (f *memFile) Flush() error { return f.ok() }

// Allocate is fallocate(2) with mode 0, FALLOC_FL_KEEP_SIZE,
// FALLOC_FL_PUNCH_HOLE (with FALLOC_FL_KEEP_SIZE, as Linux requires) or
// FALLOC_FL_ZERO_RANGE; other modes fail with EOPNOTSUPP.
func (f *memFile) Allocate(mode uint32, off, size int64) error {
	f.t.mu.Lock()
	defer f.t.mu.Unlock()
	n := f.n
	switch {
	case f.closed || !f.write:
		return syscall.EBADF
	case off < 0 || size <= 0:
		return syscall.EINVAL
	case mode&unix.FALLOC_FL_PUNCH_HOLE != 0 && mode&unix.FALLOC_FL_KEEP_SIZE == 0:
		return syscall.EOPNOTSUPP
	case mode&^(unix.FALLOC_FL_KEEP_SIZE|unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_ZERO_RANGE) != 0:
		return syscall.EOPNOTSUPP
	}
	end := off + size
	if mode&unix.FALLOC_FL_PUNCH_HOLE != 0 {
		if off < int64(len(n.data)) {
			clear(n.data[off:min(end, int64(len(n.data)))])
		}
		f.t.touch(n)
		return nil
	}
	if err := f.t.grow(n, end); err != nil {
		return err
	}
	if mode&unix.FALLOC_FL_ZERO_RANGE != 0 {
		clear(n.data[off:end])
	}
	if mode&unix.FALLOC_FL_KEEP_SIZE == 0 && end > n.attr.Size {
		n.attr.Size = end
	}
	if mode != 0 || end > n.attr.Size {
		f.t.touch(n)
	}
	return nil
}

// Seek is lseek(2): the file holds no hole, so SEEK_DATA returns off and
// SEEK_HOLE the size, for an offset within the file (ENXIO past it).
func (f *memFile) Seek(off int64, whence int) (int64, error) {
	f.t.mu.Lock()
	defer f.t.mu.Unlock()
	if f.closed {
		return -1, syscall.EBADF
	}
	size := f.n.attr.Size
	var to int64
	switch whence {
	case unix.SEEK_SET:
		to = off
	case unix.SEEK_CUR:
		to = f.pos + off
	case unix.SEEK_END:
		to = size + off
	case unix.SEEK_DATA, unix.SEEK_HOLE:
		if off < 0 || off >= size {
			return -1, syscall.ENXIO
		}
		to = off
		if whence == unix.SEEK_HOLE {
			to = size
		}
	default:
		return -1, syscall.EINVAL
	}
	if to < 0 {
		return -1, syscall.EINVAL
	}
	f.pos = to
	return to, nil
}

// Truncate is ftruncate(2): EINVAL unless the file was opened for
// writing.
func (f *memFile) Truncate(size int64) error {
	f.t.mu.Lock()
	defer f.t.mu.Unlock()
	switch {
	case f.closed:
		return syscall.EBADF
	case !f.write:
		return syscall.EINVAL
	}
	return f.t.truncate(f.n, size)
}

func (f *memFile) KillSuidgid() error {
	f.t.mu.Lock()
	defer f.t.mu.Unlock()
	if f.closed {
		return syscall.EBADF
	}
	f.n.killSuidgid()
	return nil
}

func (f *memFile) Close() error { return f.t.closeOpen(f.n, &f.closed) }

// closeOpen closes an open file or directory of n, whose closed flag is
// *closed: n is freed once nothing holds it.
func (t *MemTree) closeOpen(n *memNode, closed *bool) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if *closed {
		return syscall.EBADF
	}
	*closed = true
	n.opens--
	t.maybeFree(n)
	return nil
}

// memDir is an open directory of a MemTree: a listing taken at its open
// and at each rewind (Seek to 0), "." and ".." first, then the names in
// order. Offsets are positions in the listing.
type memDir struct {
	t      *MemTree
	n      *memNode
	ents   []DirEntry
	i      int
	closed bool
}

var _ dirIO = (*memDir)(nil)

// list takes the listing; the tree's lock is held.
func (d *memDir) list() {
	n := d.n
	d.ents = d.ents[:0]
	d.ents = append(d.ents,
		DirEntry{Name: ".", Ino: n.attr.Ino, Mode: syscall.S_IFDIR},
		DirEntry{Name: "..", Ino: n.parent.attr.Ino, Mode: syscall.S_IFDIR})
	if n.attr.Nlink > 0 {
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range n.kids {
				if !yield(k) {
					return
				}
			}
		}) {
			k := n.kids[name]
			d.ents = append(d.ents, DirEntry{Name: name, Ino: k.attr.Ino, Mode: k.typ()})
		}
	}
	for i := range d.ents {
		d.ents[i].Off = uint64(i + 1)
	}
	d.i = 0
}

func (d *memDir) Seek(off uint64) error {
	d.t.mu.Lock()
	defer d.t.mu.Unlock()
	if d.closed {
		return syscall.EBADF
	}
	if off == 0 {
		d.list()
		return nil
	}
	d.i = int(min(off, uint64(len(d.ents))))
	return nil
}

func (d *memDir) Peek() (DirEntry, bool, error) {
	if d.closed {
		return DirEntry{}, false, syscall.EBADF
	}
	if d.i >= len(d.ents) {
		return DirEntry{}, false, nil
	}
	return d.ents[d.i], true, nil
}

func (d *memDir) Advance() {
	if d.i < len(d.ents) {
		d.i++
	}
}

// Sync has nothing to flush.
func (d *memDir) Sync() error { return nil }

func (d *memDir) Close() error { return d.t.closeOpen(d.n, &d.closed) }
