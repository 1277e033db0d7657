package backing

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// File is an open backing file. While it is open its object stays
// reachable even when no name refers to it any more.
type File struct {
	fd      int
	release func()
	set     *fileSet // a mirror set's file: the methods go to its mirrors
	faults  *Faults  // injected before each read, write and sync; nil for none
	cold    cold     // its O_DIRECT descriptor, for ReadCold
	// io, when not nil, serves every method in place of fd (then -1): a
	// MemTree's file, or another tree's file wrapped by a FaultTree.
	io fileIO
}

// fileIO is the I/O of a File with no descriptor of its own. Each method
// is the File method of the same name, with its promises (ReadAt for the
// process pid; Truncate is ftruncate, for Setattr of an open file).
type fileIO interface {
	ReadAt(pid int, p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	Stat() (syscall.Stat_t, error)
	Sync(dataOnly bool) error
	StartWriteback(off, n int64) error
	Flush() error
	Allocate(mode uint32, off, n int64) error
	Seek(off int64, whence int) (int64, error)
	Truncate(size int64) error
	KillSuidgid() error
	Close() error
}

// Fd is the descriptor of the open file, for splicing and passthrough
// (of a mirror set's file, the first healthy mirror's). It stays valid
// until Close. A file with no descriptor (a MemTree's, or one opened
// through a FaultTree, whose faults a splice would bypass) returns -1:
// its data is reached through ReadAt and WriteAt only.
func (f *File) Fd() int {
	if f.set != nil {
		if p := f.set.primary(); p != nil {
			return p.fd
		}
	}
	return f.fd
}

// Mirrored reports whether f is a mirror set's file, whose reads must go
// through ReadAt to reach the mirror the read policy picks.
func (f *File) Mirrored() bool { return f.set != nil }

// ReadAt is one pread: it may return fewer bytes than asked without an
// error, and never retries (a retry of an O_DIRECT read would be
// unaligned). A mirror set's file reads from the mirror its policy
// picks, and from another when that fails.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	return f.ReadAtFor(0, p, off)
}

// ReadAtFor is ReadAt for the process pid (0 when unknown), which the
// pid read policy of a mirror set goes by.
func (f *File) ReadAtFor(pid int, p []byte, off int64) (int, error) {
	if f.set != nil {
		return f.set.readAt(pid, p, off)
	}
	if f.io != nil {
		return f.io.ReadAt(pid, p, off)
	}
	if f.faults != nil {
		if err := f.faults.read(); err != nil {
			return 0, err
		}
	}
	n, err := unix.Pread(f.fd, p, off)
	return max(n, 0), err
}

// WriteAt writes all of p at off unless an error stops it.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	if f.set != nil {
		n := len(p)
		err := f.set.each(dataChange, func(f *File) error {
			m, err := f.WriteAt(p, off)
			if err != nil {
				n = min(n, m)
			}
			return err
		})
		if err != nil {
			return n, err
		}
		return len(p), nil
	}
	if f.io != nil {
		return f.io.WriteAt(p, off)
	}
	if f.faults != nil {
		if err := f.faults.write(); err != nil {
			return 0, err
		}
	}
	done := 0
	for done < len(p) {
		n, err := unix.Pwrite(f.fd, p[done:], off+int64(done))
		if n > 0 {
			done += n
		}
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			return done, syscall.EIO
		}
	}
	return done, nil
}

// Stat returns the open file's attributes.
func (f *File) Stat() (syscall.Stat_t, error) {
	if f.set != nil {
		if p := f.set.primary(); p != nil {
			return p.Stat()
		}
		return syscall.Stat_t{}, syscall.EIO
	}
	if f.io != nil {
		return f.io.Stat()
	}
	var st syscall.Stat_t
	err := syscall.Fstat(f.fd, &st)
	return st, err
}

// Sync flushes the file to stable storage (fdatasync when dataOnly).
func (f *File) Sync(dataOnly bool) error {
	if f.set != nil {
		return f.set.each(noChange, func(f *File) error { return f.Sync(dataOnly) })
	}
	if f.io != nil {
		return f.io.Sync(dataOnly)
	}
	if f.faults != nil {
		if err := f.faults.write(); err != nil {
			return err
		}
	}
	if dataOnly {
		return unix.Fdatasync(f.fd)
	}
	return unix.Fsync(f.fd)
}

// truncate is ftruncate(2) of the open file (not of a mirror set's).
func (f *File) truncate(size int64) error {
	if f.io != nil {
		return f.io.Truncate(size)
	}
	return unix.Ftruncate(f.fd, size)
}

// StartWriteback starts writing the dirty pages of [off, off+n) to the
// device and does not wait for them (sync_file_range with
// SYNC_FILE_RANGE_WRITE).
func (f *File) StartWriteback(off, n int64) error {
	if f.set != nil {
		return f.set.each(noChange, func(f *File) error { return f.StartWriteback(off, n) })
	}
	if f.io != nil {
		return f.io.StartWriteback(off, n)
	}
	return unix.SyncFileRange(f.fd, off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// Flush is the backing side of a close(2) of one of the caller's
// descriptors: the backing file system sees a close of a duplicate (NFS
// writes back on close, for instance), and the file stays open.
func (f *File) Flush() error {
	if f.set != nil {
		return f.set.each(noChange, (*File).Flush)
	}
	if f.io != nil {
		return f.io.Flush()
	}
	nfd, err := unix.Dup(f.fd)
	if err != nil {
		return err
	}
	return unix.Close(nfd)
}

// Allocate is fallocate(2).
func (f *File) Allocate(mode uint32, off, n int64) error {
	if f.set != nil {
		return f.set.each(dataChange, func(f *File) error { return f.Allocate(mode, off, n) })
	}
	if f.io != nil {
		return f.io.Allocate(mode, off, n)
	}
	return unix.Fallocate(f.fd, mode, off, n)
}

// Seek is lseek(2), for SEEK_DATA and SEEK_HOLE.
func (f *File) Seek(off int64, whence int) (int64, error) {
	if f.set != nil {
		if p := f.set.primary(); p != nil {
			return p.Seek(off, whence)
		}
		return 0, syscall.EIO
	}
	if f.io != nil {
		return f.io.Seek(off, whence)
	}
	return unix.Seek(f.fd, off, whence)
}

// Close closes the file.
func (f *File) Close() error {
	if f.set != nil {
		f.fd = -1
		return f.set.close()
	}
	if f.io != nil {
		err := f.io.Close()
		if f.release != nil {
			f.release()
			f.release = nil
		}
		return err
	}
	f.closeCold()
	err := unix.Close(f.fd)
	f.fd = -1
	if f.release != nil {
		f.release()
		f.release = nil
	}
	return err
}

// Dir is an open directory stream.
type Dir struct {
	fd   int
	buf  []byte
	n, i int
	// next is the offset of the entry at i (0 at the start); it is what a
	// reader passes back to continue after the entries it consumed.
	next uint64
	eof  bool
	// reseek: the descriptor's position is not next yet (a directory
	// taken over from another process, whose stream shares the position
	// with that process's): the next read seeks there first.
	reseek  bool
	release func()
	hide    func(name string) bool // names listings skip (a mirror set's IsStateFile)
	// io, when not nil, serves the stream in place of fd (then -1): a
	// MemTree's directory, or one opened through a FaultTree.
	io dirIO
}

// dirIO is a Dir with no descriptor of its own; each method is the Dir
// method of the same name (Peek without the hiding of names).
type dirIO interface {
	Seek(off uint64) error
	Peek() (DirEntry, bool, error)
	Advance()
	Sync() error
	Close() error
}

// DirEntry is one name of a directory.
type DirEntry struct {
	Name string
	Ino  uint64
	// Mode holds the type bits (S_IFDIR, ...), 0 when unknown.
	Mode uint32
	// Off is the offset just after this entry.
	Off uint64
}

// Seek moves to offset off, as returned in DirEntry.Off (0 is the start).
func (d *Dir) Seek(off uint64) error {
	if d.io != nil {
		return d.io.Seek(off)
	}
	if off == d.next && (d.i < d.n || d.eof || d.n == 0) {
		return nil
	}
	if _, err := unix.Seek(d.fd, int64(off), 0); err != nil {
		return err
	}
	d.n, d.i, d.next, d.eof, d.reseek = 0, 0, off, false, false
	return nil
}

// Fd is the directory's descriptor, to hand over to another process with
// Offset (Local.AdoptDir); -1 for a Dir with no descriptor (a MemTree's,
// or one opened through a FaultTree).
func (d *Dir) Fd() int { return d.fd }

// Offset is the offset the listing continues from: that of the entry
// Peek returns next (0 at the start), which Seek takes back. A Dir with
// no descriptor (Fd is -1) keeps its offset elsewhere and returns 0.
func (d *Dir) Offset() uint64 { return d.next }

// Peek returns the entry at the current offset without consuming it; ok
// is false at the end of the directory.
func (d *Dir) Peek() (e DirEntry, ok bool, err error) {
	for {
		e, ok, err = d.peek()
		if !ok || err != nil || d.hide == nil || !d.hide(e.Name) {
			return e, ok, err
		}
		d.Advance()
	}
}

func (d *Dir) peek() (e DirEntry, ok bool, err error) {
	if d.io != nil {
		return d.io.Peek()
	}
	if d.i >= d.n {
		if d.eof {
			return e, false, nil
		}
		if d.buf == nil {
			d.buf = make([]byte, 32<<10)
		}
		if d.reseek {
			if _, err := unix.Seek(d.fd, int64(d.next), 0); err != nil {
				return e, false, err
			}
			d.reseek = false
		}
		n, err := unix.Getdents(d.fd, d.buf)
		if err != nil {
			return e, false, err
		}
		if n == 0 {
			d.eof = true
			return e, false, nil
		}
		d.n, d.i = n, 0
	}
	b := d.buf[d.i:d.n]
	// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
	e.Ino = le64(b[0:])
	e.Off = le64(b[8:])
	reclen := int(b[16]) | int(b[17])<<8
	e.Mode = uint32(b[18]) << 12
	name := b[19:reclen]
	for j, c := range name {
		if c == 0 {
			name = name[:j]
			break
		}
	}
	e.Name = string(name)
	return e, true, nil
}

// Advance consumes the entry Peek returned.
func (d *Dir) Advance() {
	if d.io != nil {
		d.io.Advance()
		return
	}
	if d.i >= d.n {
		return
	}
	b := d.buf[d.i:d.n]
	d.next = le64(b[8:])
	d.i += int(b[16]) | int(b[17])<<8
}

// Sync fsyncs the directory.
func (d *Dir) Sync() error {
	if d.io != nil {
		return d.io.Sync()
	}
	return unix.Fsync(d.fd)
}

// Close closes the stream.
func (d *Dir) Close() error {
	var err error
	if d.io != nil {
		err = d.io.Close()
	} else {
		err = unix.Close(d.fd)
	}
	if d.release != nil {
		d.release()
		d.release = nil
	}
	return err
}

func le64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
