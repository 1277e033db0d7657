package backing

import (
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// Reads past the page cache. Served through FUSE, a read that misses the
// backing file's page cache lands there, is copied to sluice's buffer and
// copied again into the mount's own cache: two copies, and cached twice,
// once by each file system. Read with O_DIRECT, it lands in sluice's
// buffer and is copied once, into the mount's cache. A range any of whose
// pages is cached, dirty or under writeback is read as before, from the
// cache: sluice's own writes, and another process's, are read as they
// stand.

// ColdAlign is the alignment of ReadCold's buffer, offset and length.
const ColdAlign = 4096

// cold is a file's second descriptor, opened with O_DIRECT at its first
// cold read.
type cold struct {
	once sync.Once
	fd   int         // -1 when the file cannot be read with O_DIRECT
	off  atomic.Bool // set when it cannot: no more cachestat for it
}

// noCachestat is set when the kernel lacks cachestat (before 6.5): the
// cache cannot be asked, and no read goes past it.
var noCachestat atomic.Bool

// ReadCold reads into p at off with O_DIRECT when none of the range is
// in the backing file's page cache, and reports whether it did; when it
// did not (a mirror set's file, a file with no descriptor, a file system
// that refuses O_DIRECT, a range partly cached or dirty, an unaligned
// offset or buffer) the caller reads with ReadAt. p's address, off and len(p) must be
// multiples of ColdAlign; past the end of the file it reads short.
func (f *File) ReadCold(p []byte, off int64) (n int, ok bool, err error) {
	if f.set != nil || f.io != nil || noCachestat.Load() || f.cold.off.Load() || off%ColdAlign != 0 || len(p)%ColdAlign != 0 || len(p) == 0 {
		return 0, false, nil
	}
	var st unix.Cachestat_t
	r := unix.CachestatRange{Off: uint64(off), Len: uint64(len(p))}
	if err := unix.Cachestat(uint(f.fd), &r, &st, 0); err != nil {
		if errors.Is(err, syscall.ENOSYS) {
			noCachestat.Store(true)
		}
		return 0, false, nil
	}
	if st.Cache != 0 || st.Dirty != 0 || st.Writeback != 0 {
		return 0, false, nil
	}
	f.cold.once.Do(func() {
		// The same open file, again: a second open of its object, for
		// reading, which its first open checked; never for one opened
		// only to write.
		f.cold.fd = -1
		if fl, err := unix.FcntlInt(uintptr(f.fd), unix.F_GETFL, 0); err != nil || fl&unix.O_ACCMODE == unix.O_WRONLY {
			return
		}
		fd, err := unix.Open("/proc/self/fd/"+strconv.Itoa(f.fd), unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err != nil {
			fd = -1
		}
		f.cold.fd = fd
	})
	if f.cold.fd < 0 {
		f.cold.off.Store(true)
		return 0, false, nil
	}
	if f.faults != nil {
		if err := f.faults.read(); err != nil {
			return 0, true, err
		}
	}
	n, err = unix.Pread(f.cold.fd, p, off)
	if errors.Is(err, syscall.EINVAL) {
		// The buffer or offset does not suit the device after all.
		return 0, false, nil
	}
	return max(n, 0), true, err
}

// closeCold closes the descriptor ReadCold opened, if it did.
func (f *File) closeCold() {
	f.cold.once.Do(func() { f.cold.fd = -1 })
	if f.cold.fd >= 0 {
		unix.Close(f.cold.fd)
		f.cold.fd = -1
	}
}
