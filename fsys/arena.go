package fsys

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// The requests a supervised mount is serving live in memory the
// supervisor holds (a memfd): each is read from /dev/fuse straight into a
// buffer of it, and stays there until it is answered. The kernel sends a
// request once; if the process that read it dies before answering, the
// next one finds it there and serves it (fuse.Server.Replay).
//
// A buffer holds a request while its first 4 bytes (the request's
// length) are not zero: the kernel writes them as it hands the request
// over, and Put zeroes them once the request is answered.

// ArenaSlots is how many requests a supervised mount keeps at once; past
// that, requests are read into the process's own memory (and lost with
// it). Only the pages requests fill are ever allocated: a request of 4
// KiB or less fills one; the memory is virtual otherwise.
const ArenaSlots = 4096

// maxWrite is the largest write the kernel is told to send.
const maxWrite = 1 << 20

// ArenaBytes is the size of the memfd a supervisor makes for a mount's
// requests (ArenaSlots of them).
func ArenaBytes() int64 { return int64(ArenaSlots) * int64(arenaSlot()) }

// arenaSlot is the memory of one request, whole pages.
func arenaSlot() int {
	n := fuse.ReadBufferBytes(maxWrite)
	return (n + 4095) &^ 4095
}

// requestArena gives the FUSE server buffers of a memfd
// (fuse.RequestArena).
type requestArena struct {
	mem   []byte
	bufs  [][]byte        // each slot's buffer
	index map[uintptr]int // a buffer's first byte -> its slot

	mu     sync.Mutex
	free   []int // newest last: a buffer used again while its pages are warm
	unkept atomic.Int64
	// full, if not nil, is called the first time no buffer is free.
	full func()
}

// newRequestArena maps the memfd fd (which it does not keep) of a
// supervised mount's requests.
func newRequestArena(fd int) (*requestArena, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	slot := arenaSlot()
	n := int(st.Size) / slot
	if n < 1 {
		return nil, fmt.Errorf("the requests' memory is %d bytes, less than one request's %d", st.Size, slot)
	}
	mem, err := unix.Mmap(fd, 0, n*slot, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the requests' memory: %v", err)
	}
	a := &requestArena{mem: mem, index: make(map[uintptr]int, n)}
	for i := range n {
		b := fuse.AlignReadBuffer(mem[i*slot:(i+1)*slot:(i+1)*slot], maxWrite)
		a.bufs = append(a.bufs, b)
		a.index[uintptr(unsafe.Pointer(&b[0]))] = i
	}
	return a, nil
}

// header is a pointer to the length of the request in buffer b.
func header(b []byte) *uint32 { return (*uint32)(unsafe.Pointer(&b[0])) }

// pending returns the requests a process that died left unanswered, and
// frees every other buffer. Call it once, before the server reads. It
// reads each buffer's first bytes through fd, the memfd, so that a buffer
// never used is not given memory by being looked at.
func (a *requestArena) pending(fd int) ([][]byte, error) {
	var reqs [][]byte
	a.mu.Lock()
	defer a.mu.Unlock()
	a.free = a.free[:0]
	var hdr [4]byte
	for i := len(a.bufs) - 1; i >= 0; i-- {
		b := a.bufs[i]
		off := int64(uintptr(unsafe.Pointer(&b[0])) - uintptr(unsafe.Pointer(&a.mem[0])))
		if _, err := unix.Pread(fd, hdr[:], off); err != nil {
			return nil, fmt.Errorf("the requests' memory: %v", err)
		}
		switch n := int(binary.LittleEndian.Uint32(hdr[:])); {
		case n == 0:
		case n >= int(unsafe.Sizeof(fuse.InHeader{})) && n <= len(b):
			reqs = append(reqs, b[:n])
			continue
		default:
			atomic.StoreUint32(header(b), 0)
		}
		a.free = append(a.free, i)
	}
	return reqs, nil
}

// Get returns a free buffer, nil when none is.
func (a *requestArena) Get() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.free) == 0 {
		if a.unkept.Add(1) == 1 && a.full != nil {
			go a.full()
		}
		return nil
	}
	i := a.free[len(a.free)-1]
	a.free = a.free[:len(a.free)-1]
	return a.bufs[i]
}

// Put frees a buffer once its request is answered.
func (a *requestArena) Put(b []byte) {
	i, ok := a.index[uintptr(unsafe.Pointer(&b[0]))]
	if !ok {
		panic("fsys: a request buffer not of the arena")
	}
	atomic.StoreUint32(header(a.bufs[i]), 0)
	a.mu.Lock()
	a.free = append(a.free, i)
	a.mu.Unlock()
}

var _ fuse.RequestArena = (*requestArena)(nil)
