package backing

import (
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"sluice/mirror"
)

// A hedged read of a mirror set may be in flight on two mirrors at once,
// and its caller waits for the first answer or for the hedge delay. With
// goroutines, every hedged read hands off to another goroutine and back,
// which costs as much as the read of a cached page itself. With an
// io_uring the caller submits the reads and waits for their completions
// (or the delay) in one system call on its own goroutine, as a pread
// would. Each waiting caller takes a ring of its own from a pool; where
// io_uring is not available (an old kernel, or kernel.io_uring_disabled)
// the goroutines serve instead.

const (
	ringEntries = 64 // submission queue entries per ring
	ringsKept   = 64 // idle rings kept for reuse

	ioringOpTimeout = 11
	ioringOpRead    = 22

	ioringFeatSingleMmap = 1 << 0
	ioringFeatNoDrop     = 1 << 1
	ioringFeatExtArg     = 1 << 8

	ioringEnterGetEvents = 1 << 0
	ioringEnterExtArg    = 1 << 3

	ioringOffSQRing = 0
	ioringOffSQEs   = 0x10000000
)

// uringParams is struct io_uring_params.
type uringParams struct {
	sqEntries, cqEntries, flags uint32
	sqThreadCPU, sqThreadIdle   uint32
	features, wqFd              uint32
	resv                        [3]uint32
	sqOff                       uringSQOffsets
	cqOff                       uringCQOffsets
}

// uringSQOffsets is struct io_sqring_offsets.
type uringSQOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// uringCQOffsets is struct io_cqring_offsets.
type uringCQOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// uringSQE is struct io_uring_sqe, as used here.
type uringSQE struct {
	opcode, flags uint8
	ioprio        uint16
	fd            int32
	off, addr     uint64
	len, opFlags  uint32
	userData      uint64
	_             [3]uint64
}

// uringCQE is struct io_uring_cqe.
type uringCQE struct {
	userData uint64
	res      int32
	flags    uint32
}

// uringWaitArg is struct io_uring_getevents_arg.
type uringWaitArg struct {
	sigmask   uint64
	sigmaskSz uint32
	minWait   uint32
	ts        uint64
}

// ringOp is one read in flight on a ring: after its injected delay (a
// timeout on the ring), if any, the read itself.
type ringOp struct {
	s       *fileSet
	fl      *mirror.Flight // the flight it is a read of
	st      mirror.Send
	fd      int
	buf     *readBuf
	off     int64
	fault   error // injected: the read fails with it after the delay
	delayed bool  // the delay is done
	ts      unix.Timespec
}

type ring struct {
	fd             int
	mem, sqeMem    []byte
	sqHead, sqTail *uint32
	sqMask         uint32
	sqArray        []uint32
	sqes           []uringSQE
	cqHead, cqTail *uint32
	cqMask         uint32
	cqes           []uringCQE
	ops            []*ringOp // by user data; nil where free
	free           []uint64  // free indices of ops
	inflight       int
	ts             unix.Timespec
	arg            uringWaitArg
}

var rings struct {
	sync.Mutex
	free []*ring
	off  bool // io_uring is not available here
}

// getRing returns an idle ring, or nil when none can be had: io_uring is
// not available here, or a new ring could not be set up just now.
func getRing() *ring {
	rings.Lock()
	if rings.off {
		rings.Unlock()
		return nil
	}
	if n := len(rings.free); n > 0 {
		r := rings.free[n-1]
		rings.free = rings.free[:n-1]
		rings.Unlock()
		return r
	}
	rings.Unlock()
	r, err := newRing()
	if err != nil {
		// Without io_uring here (no system call, disabled, or lacking the
		// features used) the goroutines serve from now on; a passing
		// shortage (descriptors, memory) costs this read only.
		if err == syscall.ENOSYS || err == syscall.EPERM || err == syscall.EINVAL {
			rings.Lock()
			rings.off = true
			rings.Unlock()
		}
		return nil
	}
	return r
}

// putRing returns r to the pool once the reads still in flight on it
// have finished.
func putRing(r *ring) {
	if r.inflight > 0 {
		go r.drain()
		return
	}
	rings.Lock()
	if len(rings.free) < ringsKept {
		rings.free = append(rings.free, r)
		r = nil
	}
	rings.Unlock()
	if r != nil {
		r.close()
	}
}

// drain waits for the reads left in flight, which report to the policy
// as any read does, and returns r to the pool.
func (r *ring) drain() {
	for r.inflight > 0 {
		r.enter(true, 0)
		r.reap(func(op *ringOp, n int, err error) {
			op.s.finished(op.fl, nil, op.st, n, err)
			putBuf(op.buf)
		})
	}
	putRing(r)
}

func newRing() (*ring, error) {
	var p uringParams
	fd, _, errno := syscall.Syscall(unix.SYS_IO_URING_SETUP, ringEntries, uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, errno
	}
	r := &ring{fd: int(fd)}
	const need = ioringFeatSingleMmap | ioringFeatNoDrop | ioringFeatExtArg
	if p.features&need != need {
		r.close()
		return nil, syscall.ENOSYS
	}
	size := max(p.sqOff.array+p.sqEntries*4, p.cqOff.cqes+p.cqEntries*uint32(unsafe.Sizeof(uringCQE{})))
	var err error
	if r.mem, err = unix.Mmap(r.fd, ioringOffSQRing, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, err
	}
	if r.sqeMem, err = unix.Mmap(r.fd, ioringOffSQEs, int(p.sqEntries)*int(unsafe.Sizeof(uringSQE{})), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		r.close()
		return nil, err
	}
	u32 := func(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }
	r.sqHead, r.sqTail, r.sqMask = u32(p.sqOff.head), u32(p.sqOff.tail), *u32(p.sqOff.ringMask)
	r.sqArray = unsafe.Slice(u32(p.sqOff.array), p.sqEntries)
	r.sqes = unsafe.Slice((*uringSQE)(unsafe.Pointer(&r.sqeMem[0])), p.sqEntries)
	r.cqHead, r.cqTail, r.cqMask = u32(p.cqOff.head), u32(p.cqOff.tail), *u32(p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*uringCQE)(unsafe.Pointer(&r.mem[p.cqOff.cqes])), p.cqEntries)
	return r, nil
}

func (r *ring) close() {
	if r.sqeMem != nil {
		unix.Munmap(r.sqeMem)
	}
	if r.mem != nil {
		unix.Munmap(r.mem)
	}
	unix.Close(r.fd)
}

// start queues op: its injected delay if it has one, else its read. The
// next enter submits it.
func (r *ring) start(op *ringOp, delay time.Duration) {
	var id uint64
	if n := len(r.free); n > 0 {
		id = r.free[n-1]
		r.free = r.free[:n-1]
	} else {
		id = uint64(len(r.ops))
		r.ops = append(r.ops, nil)
	}
	r.ops[id] = op
	r.inflight++
	if delay > 0 {
		op.ts = unix.NsecToTimespec(int64(delay))
		r.push(uringSQE{opcode: ioringOpTimeout, fd: -1, addr: uint64(uintptr(unsafe.Pointer(&op.ts))), len: 1, userData: id})
		return
	}
	op.delayed = true
	r.pushRead(op, id)
}

func (r *ring) pushRead(op *ringOp, id uint64) {
	r.push(uringSQE{opcode: ioringOpRead, fd: int32(op.fd), off: uint64(op.off),
		addr: uint64(uintptr(unsafe.Pointer(&op.buf.b[:1][0]))), len: uint32(len(op.buf.b)), userData: id})
}

func (r *ring) push(e uringSQE) {
	tail := *r.sqTail
	i := tail & r.sqMask
	r.sqes[i] = e
	r.sqArray[i] = i
	atomic.StoreUint32(r.sqTail, tail+1)
}

// enter submits what is queued and, with wait, waits for a completion or
// until the monotonic deadline (ns of monoNow; 0: none). It reports
// whether the deadline passed.
func (r *ring) enter(wait bool, deadline int64) (late bool) {
	for {
		toSubmit := *r.sqTail - atomic.LoadUint32(r.sqHead)
		var flags, minComplete uintptr
		var argp unsafe.Pointer
		var argSize uintptr
		if wait {
			if r.ready() {
				wait = false
			} else {
				flags, minComplete = ioringEnterGetEvents, 1
				if deadline > 0 {
					left := deadline - monoNow()
					if left <= 0 {
						if toSubmit == 0 {
							return true
						}
						wait = false
					} else {
						r.ts = unix.NsecToTimespec(left)
						r.arg = uringWaitArg{ts: uint64(uintptr(unsafe.Pointer(&r.ts)))}
						flags |= ioringEnterExtArg
						argp, argSize = unsafe.Pointer(&r.arg), unsafe.Sizeof(r.arg)
					}
				}
			}
		}
		if !wait {
			if toSubmit == 0 {
				return false
			}
			flags, minComplete, argp, argSize = 0, 0, nil, 0
		}
		_, _, errno := syscall.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), minComplete, flags, uintptr(argp), argSize)
		switch errno {
		case 0:
			if !wait || r.ready() {
				return false
			}
		case syscall.ETIME:
			if *r.sqTail == atomic.LoadUint32(r.sqHead) {
				return true
			}
		case syscall.EINTR, syscall.EAGAIN, syscall.EBUSY:
		default:
			// Only a bug here makes io_uring_enter fail otherwise.
			panic("io_uring_enter: " + errno.Error())
		}
	}
}

// ready reports whether a completion waits to be reaped.
func (r *ring) ready() bool { return *r.cqHead != atomic.LoadUint32(r.cqTail) }

// reap handles the completions there are: a delay done starts its read
// (or fails the op with its injected error); a read done is reported to
// done, which owns op.buf from then on and hands the end to the set.
func (r *ring) reap(done func(op *ringOp, n int, err error)) {
	head, tail := *r.cqHead, atomic.LoadUint32(r.cqTail)
	for ; head != tail; head++ {
		c := r.cqes[head&r.cqMask]
		op := r.ops[c.userData]
		if !op.delayed {
			op.delayed = true
			if op.fault == nil {
				r.pushRead(op, c.userData)
				continue
			}
		}
		r.ops[c.userData] = nil
		r.free = append(r.free, c.userData)
		r.inflight--
		n, err := int(c.res), error(nil)
		if op.fault != nil {
			n, err = 0, op.fault
		} else if c.res < 0 {
			n, err = 0, syscall.Errno(-c.res)
		}
		done(op, n, err)
	}
	atomic.StoreUint32(r.cqHead, head)
	if *r.sqTail != atomic.LoadUint32(r.sqHead) {
		r.enter(false, 0)
	}
}

var monoBase = time.Now()

// monoNow is a monotonic clock in ns.
func monoNow() int64 { return int64(time.Since(monoBase)) }
