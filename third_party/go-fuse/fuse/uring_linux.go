// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

// FUSE-over-io_uring (Linux 6.14+; the fuse module's enable_uring
// parameter must be Y). With MountOptions.IOUring, INIT offers
// FUSE_OVER_IO_URING when the kernel does; once it is granted, every
// possible CPU gets a queue of ring entries, registered with
// FUSE_IO_URING_CMD_REGISTER, and the kernel hands each request to an
// entry of the queue of the CPU its caller runs on. The request is
// served by the same protocolServer.handleRequest as one read from
// /dev/fuse, and answered in the entry by FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
// which fetches the entry's next request in the same system call.
//
// /dev/fuse still carries what the kernel never sends to the rings
// (INIT, FORGET, BATCH_FORGET, INTERRUPT) and what the server writes of
// its own accord (notifications), and serves everything when the kernel
// does not grant io_uring or the rings cannot be set up (the server then
// makes the kernel give up on them with a REGISTER it refuses, which
// turns io_uring off for the connection).
//
// Each entry has an io_uring of its own and a goroutine that submits its
// commit and waits for its next request in one io_uring_enter. The
// kernel delivers a request to an entry through task work of the thread
// that submitted the entry's last command, which is then the thread
// waiting for it: a request never waits for a thread busy elsewhere.
// Idle entries hold an OS thread each, blocked in io_uring_enter.
//
// A queue starts with MountOptions.IOUringDepth entries and grows by one
// whenever a request takes its last idle entry, up to MaxIOUringDepth:
// requests that wait long in the file system (a throttled read) take
// entries of their own and leave others to the requests behind them,
// which would otherwise wait in the kernel for an entry.
//
// Replies are copied into the entry's payload buffer: a READ is read
// into it in place where the file system reads into the buffer it is
// given, and a ReadResultFd is read with pread(2); nothing is spliced.
// A request may not be answered other than through its entry: a reply
// written to /dev/fuse for a request taken from a ring is refused by
// the kernel (ENOENT).

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// io_uring constants (include/uapi/linux/io_uring.h) and the FUSE ring
// protocol (include/uapi/linux/fuse.h: struct fuse_uring_req_header,
// struct fuse_uring_ent_in_out, struct fuse_uring_cmd_req).
const (
	ioringSetupSQE128    = 1 << 10
	ioringFeatSingleMmap = 1 << 0
	ioringEnterGetevents = 1 << 0
	ioringOpURingCmd     = 46
	ioringOffSQRing      = 0
	ioringOffCQRing      = 0x8000000
	ioringOffSQEs        = 0x10000000
	ioringSQESize        = 128 // with SQE128
	ioringCQESize        = 16

	fuseURingCmdRegister       = 1
	fuseURingCmdCommitAndFetch = 2

	uringInOut      = 0   // fuse_in_header on fetch, fuse_out_header on commit
	uringOpIn       = 128 // the op's first argument (its fixed-size struct)
	uringEntInOut   = 256 // struct fuse_uring_ent_in_out: flags, commit_id, payload_sz
	uringHeaderSize = 288
	uringIovOff     = 512 // the entry's two iovecs, in its header page

	// DefaultIOUringDepth is the number of ring entries a queue starts
	// with when MountOptions.IOUringDepth is 0.
	DefaultIOUringDepth = 16
	// MaxIOUringDepth is the number of entries a queue grows to at most.
	MaxIOUringDepth = 256
)

var uringLE = binary.LittleEndian

// uringFailEntry, for tests, fails the setup of the entry of this index,
// counted from 0 across the queues in the order they are registered; -1
// fails none.
var uringFailEntry = -1

// uringTransport is the server's set of ring queues.
type uringTransport struct {
	ms *Server

	// ctl is a ring of no entry's, kept from before INIT until the
	// rings are registered or given up: it submits the REGISTER the
	// kernel refuses, which makes it give up on io_uring for the
	// connection (the kernel holds requests back from the moment it
	// granted io_uring until the rings are ready or it gave up).
	ctl *uringRing

	entries []*uringEntry
	queues  []*uringQueue
	// start is closed when Serve starts (or the rings are given up:
	// then abort is set first).
	start chan struct{}
	abort bool

	// served counts the requests served over the rings.
	served atomic.Uint64
}

// uringRing is one io_uring instance with its mapped rings.
type uringRing struct {
	fd        int
	sqHead    *uint32
	sqTail    *uint32
	sqMask    uint32
	sqArray   []uint32
	sqes      []byte
	cqHead    *uint32
	cqTail    *uint32
	cqMask    uint32
	cqes      []byte
	maps      [][]byte
	localTail uint32
}

// uringQueue is the entries of one queue (one possible CPU).
type uringQueue struct {
	t       *uringTransport
	qid     int
	payload int          // the payload buffer's size
	idle    atomic.Int32 // entries waiting for a request
	n       atomic.Int32 // entries registered or being registered
}

// grow adds an entry to the queue, if it has fewer than MaxIOUringDepth:
// its goroutine registers it and waits for its first request in one
// io_uring_enter. It is called while an entry of the queue serves, so
// that the server's loops have not ended.
func (q *uringQueue) grow() {
	if q.n.Add(1) > MaxIOUringDepth {
		q.n.Add(-1)
		return
	}
	e, err := q.t.newEntry(q, q.payload)
	if err != nil {
		q.n.Add(-1)
		q.t.ms.opts.Logger.Printf("io_uring: queue %d: another entry: %v", q.qid, err)
		return
	}
	q.t.ms.fuseFD.loops.Add(1)
	q.idle.Add(1)
	e.ring.prepCmd(q.t.ms.devFd(), fuseURingCmdRegister, e.iovAddr, 0, q.qid)
	go e.serve(false)
}

// uringEntry is one registered ring entry: its header and payload
// buffers, in memory of its own, and the ring its commands go through.
type uringEntry struct {
	t       *uringTransport
	q       *uringQueue
	qid     int
	ring    *uringRing
	mem     []byte
	hdr     []byte // struct fuse_uring_req_header
	payload []byte
	iovAddr uintptr
}

// newURingTransport sets up the control ring. It fails where io_uring
// cannot be used (an old kernel, kernel.io_uring_disabled, a seccomp
// filter): INIT must then not ask for FUSE_OVER_IO_URING.
func newURingTransport(ms *Server) (*uringTransport, error) {
	if _, err := os.Stat("/sys/module/fuse/parameters/enable_uring"); err != nil {
		return nil, fmt.Errorf("the kernel has no FUSE-over-io_uring (needs Linux 6.14+ with CONFIG_FUSE_IO_URING): %v", err)
	}
	r, err := newURingRing(1)
	if err != nil {
		return nil, err
	}
	return &uringTransport{ms: ms, ctl: r, start: make(chan struct{})}, nil
}

func newURingRing(entries int) (*uringRing, error) {
	var p struct {
		sqEntries, cqEntries, flags, sqThreadCPU, sqThreadIdle, features, wqFd uint32
		resv                                                                   [3]uint32
		sqOff, cqOff                                                           [10]uint32
	}
	p.flags = ioringSetupSQE128
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", e)
	}
	r := &uringRing{fd: int(fd)}
	sqLen := int(p.sqOff[6] + p.sqEntries*4)
	cqLen := int(p.cqOff[5] + p.cqEntries*ioringCQESize)
	prot, flags := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE
	var merr error
	mmap := func(off int64, n int) []byte {
		if merr != nil {
			return nil
		}
		var b []byte
		b, merr = unix.Mmap(r.fd, off, n, prot, flags)
		r.maps = append(r.maps, b)
		return b
	}
	sqRing := mmap(ioringOffSQRing, sqLen)
	cqRing := sqRing
	if p.features&ioringFeatSingleMmap == 0 {
		cqRing = mmap(ioringOffCQRing, cqLen)
	}
	r.sqes = mmap(ioringOffSQEs, int(p.sqEntries)*ioringSQESize)
	if merr != nil {
		r.close()
		return nil, fmt.Errorf("mmap io_uring: %w", merr)
	}
	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead = u32(sqRing, p.sqOff[0])
	r.sqTail = u32(sqRing, p.sqOff[1])
	r.sqMask = *u32(sqRing, p.sqOff[2])
	r.sqArray = unsafe.Slice(u32(sqRing, p.sqOff[6]), p.sqEntries)
	r.cqHead = u32(cqRing, p.cqOff[0])
	r.cqTail = u32(cqRing, p.cqOff[1])
	r.cqMask = *u32(cqRing, p.cqOff[2])
	r.cqes = cqRing[p.cqOff[5] : p.cqOff[5]+p.cqEntries*ioringCQESize]
	r.localTail = atomic.LoadUint32(r.sqTail)
	return r, nil
}

func (r *uringRing) close() {
	for _, m := range r.maps {
		if m != nil {
			unix.Munmap(m)
		}
	}
	r.maps = nil
	unix.Close(r.fd)
}

// prepCmd queues a FUSE ring command for queue qid: REGISTER of the
// entry described by the iovecs at iov, or COMMIT_AND_FETCH of the
// request commitID.
func (r *uringRing) prepCmd(devFd int, cmd uint32, iov uintptr, commitID uint64, qid int) {
	idx := r.localTail & r.sqMask
	r.sqArray[idx] = idx
	r.localTail++
	sqe := r.sqes[idx*ioringSQESize : (idx+1)*ioringSQESize]
	clear(sqe)
	sqe[0] = ioringOpURingCmd
	uringLE.PutUint32(sqe[4:], uint32(devFd))
	uringLE.PutUint32(sqe[8:], cmd) // cmd_op
	uringLE.PutUint64(sqe[16:], uint64(iov))
	uringLE.PutUint32(sqe[24:], 2) // len: the number of iovecs
	// struct fuse_uring_cmd_req in the command area at offset 48:
	// flags, commit_id, qid.
	uringLE.PutUint64(sqe[56:], commitID)
	uringLE.PutUint16(sqe[64:], uint16(qid))
	atomic.StoreUint32(r.sqTail, r.localTail)
}

// enter submits what is queued and, if wait, waits for a completion.
func (r *uringRing) enter(wait bool) error {
	for {
		toSubmit := r.localTail - atomic.LoadUint32(r.sqHead)
		if toSubmit == 0 && (!wait || r.ready()) {
			return nil
		}
		var flags, min uintptr
		if wait {
			flags, min = ioringEnterGetevents, 1
		}
		_, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), min, flags, 0, 0)
		if e != 0 && e != unix.EINTR && e != unix.EAGAIN && e != unix.EBUSY {
			return e
		}
	}
}

// ready reports whether a completion is waiting.
func (r *uringRing) ready() bool {
	return atomic.LoadUint32(r.cqTail) != atomic.LoadUint32(r.cqHead)
}

// reap takes the next completion's result.
func (r *uringRing) reap() int32 {
	head := atomic.LoadUint32(r.cqHead)
	cqe := r.cqes[(head&r.cqMask)*ioringCQESize:]
	res := int32(uringLE.Uint32(cqe[8:]))
	atomic.StoreUint32(r.cqHead, head+1)
	return res
}

// uringQueues is the kernel's num_possible_cpus(): the number of queues
// of a FUSE ring, every one of which needs an entry before the kernel
// uses the ring.
func uringQueues() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(r, "-")
		if !found {
			hi = lo
		}
		c, err := strconv.Atoi(hi)
		if _, err2 := strconv.Atoi(lo); err != nil || err2 != nil {
			return runtime.NumCPU()
		}
		n = max(n, c+1)
	}
	return n
}

// register sets up the rings after INIT, if the kernel granted
// io_uring, and reports whether requests go to them. Entries are
// registered queue after queue: the kernel starts using the rings when
// the last queue gets its first entry, so a failure before that leaves
// /dev/fuse in use (the kernel is made to give up), and one after it
// leaves the last queue with fewer entries.
func (t *uringTransport) register() bool {
	ms := t.ms
	defer func() {
		t.ctl.close()
		t.ctl = nil
	}()
	if ms.negotiatedFlags&CAP_OVER_IO_URING == 0 {
		if ms.opts.Debug {
			ms.opts.Logger.Printf("io_uring: not offered by the kernel (enable_uring N?): serving /dev/fuse")
		}
		return false
	}
	depth := ms.opts.IOUringDepth
	if depth <= 0 {
		depth = DefaultIOUringDepth
	}
	depth = min(depth, MaxIOUringDepth)
	// The kernel's ring->max_payload_sz.
	maxPages := (ms.opts.MaxWrite-1)/syscall.Getpagesize() + 1
	payload := max(_FUSE_MIN_READ_BUFFER, ms.opts.MaxWrite, maxPages*syscall.Getpagesize())
	queues := uringQueues()
	var err error
	for q := 0; q < queues && err == nil; q++ {
		uq := &uringQueue{t: t, qid: q, payload: payload}
		t.queues = append(t.queues, uq)
		for i := 0; i < depth; i++ {
			var e *uringEntry
			e, err = t.newEntry(uq, payload)
			if err == nil && q*depth+i == uringFailEntry {
				e.close()
				err = fmt.Errorf("setup failed for a test")
			}
			if err == nil {
				err = t.run(e)
			}
			if err != nil {
				err = fmt.Errorf("queue %d entry %d: %w", q, i, err)
				break
			}
		}
		if err != nil && q == queues-1 && len(t.entries) > (queues-1)*depth {
			// The rings are in use already, the last queue short.
			ms.opts.Logger.Printf("io_uring: %v; queue %d serves with %d entries", err, q, len(t.entries)-(queues-1)*depth)
			err = nil
			break
		}
	}
	if err != nil {
		ms.opts.Logger.Printf("io_uring: %v: serving /dev/fuse", err)
		t.giveUp()
		return false
	}
	return true
}

// giveUp makes the kernel give up on io_uring for the connection with a
// REGISTER it refuses (queue id out of range), and ends the entries
// registered so far: closing their rings cancels their commands.
func (t *uringTransport) giveUp() {
	t.ctl.prepCmd(t.ms.devFd(), fuseURingCmdRegister, 0, 0, 0xffff)
	if err := t.ctl.enter(true); err != nil {
		t.ms.opts.Logger.Printf("io_uring: refused REGISTER: %v", err)
	}
	t.abort = true
	close(t.start)
}

// newEntry maps an entry's buffers (its header page, then the payload)
// and sets up its ring.
func (t *uringTransport) newEntry(q *uringQueue, payload int) (*uringEntry, error) {
	page := syscall.Getpagesize()
	mem, err := unix.Mmap(-1, 0, page+payload, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("mmap buffers: %w", err)
	}
	r, err := newURingRing(1)
	if err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	e := &uringEntry{t: t, q: q, qid: q.qid, ring: r, mem: mem, hdr: mem[:uringHeaderSize], payload: mem[page:]}
	iovs := unsafe.Slice((*unix.Iovec)(unsafe.Pointer(&mem[uringIovOff])), 2)
	iovs[0].Base = &e.hdr[0]
	iovs[0].SetLen(uringHeaderSize)
	iovs[1].Base = &e.payload[0]
	iovs[1].SetLen(len(e.payload))
	e.iovAddr = uintptr(unsafe.Pointer(&iovs[0]))
	return e, nil
}

func (e *uringEntry) close() {
	e.ring.close()
	unix.Munmap(e.mem)
}

// run starts e's goroutine and returns once e is registered or its
// REGISTER failed. The goroutine's thread is locked until its first
// request: the kernel delivers it through task work of the thread that
// submitted the REGISTER, which waits for it.
func (t *uringTransport) run(e *uringEntry) error {
	registered := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		e.ring.prepCmd(t.ms.devFd(), fuseURingCmdRegister, e.iovAddr, 0, e.qid)
		err := e.ring.enter(false)
		if err == nil && e.ring.ready() {
			// A REGISTER the kernel accepts stays pending; one it
			// refuses completes at once.
			if res := e.ring.reap(); res < 0 {
				err = fmt.Errorf("FUSE_IO_URING_CMD_REGISTER: %w", syscall.Errno(-res))
			}
		}
		if err != nil {
			e.close()
			runtime.UnlockOSThread()
			registered <- err
			return
		}
		t.entries = append(t.entries, e)
		e.q.n.Add(1)
		e.q.idle.Add(1)
		t.ms.fuseFD.loops.Add(1)
		registered <- nil
		<-t.start
		if t.abort {
			e.close()
			runtime.UnlockOSThread()
			t.ms.fuseFD.loops.Done()
			return
		}
		e.serve(true)
	}()
	return <-registered
}

// serve answers the entry's requests until the connection ends, the
// entry counted idle. locked says the thread is locked, until the
// first wait.
func (e *uringEntry) serve(locked bool) {
	defer e.t.ms.fuseFD.loops.Done()
	defer e.close()
	defer e.q.n.Add(-1)
	for {
		// The thread that submits the command must be the one that
		// waits for its completion, to the end: the kernel delivers the
		// request through task work of the submitting thread, and ends
		// it with ECANCELED if that thread has exited meanwhile (a
		// goroutine moved to another thread after an interrupted wait
		// left the command with a thread a locked goroutine could end).
		runtime.LockOSThread()
		err := e.ring.enter(true)
		runtime.UnlockOSThread()
		if locked {
			runtime.UnlockOSThread()
			locked = false
		}
		idle := e.q.idle.Add(-1)
		if err != nil {
			e.t.ms.opts.Logger.Printf("io_uring: queue %d: io_uring_enter: %v", e.qid, err)
			return
		}
		if res := e.ring.reap(); res < 0 {
			// The entry is the kernel's no more: the connection ended
			// (ENOTCONN, ECANCELED) or a commit was refused.
			if errno := syscall.Errno(-res); errno != unix.ENOTCONN && errno != unix.ECANCELED && errno != unix.ECONNABORTED {
				e.t.ms.opts.Logger.Printf("io_uring: queue %d: entry ended: %v", e.qid, errno)
			}
			return
		}
		if idle == 0 {
			e.q.grow()
		}
		commitID := uringLE.Uint64(e.hdr[uringEntInOut+8:])
		n := e.handle()
		clear(e.hdr[uringOpIn:uringEntInOut])
		uringLE.PutUint32(e.hdr[uringEntInOut+16:], uint32(n)) // payload_sz
		e.ring.prepCmd(e.t.ms.devFd(), fuseURingCmdCommitAndFetch, 0, commitID, e.qid)
		e.q.idle.Add(1)
	}
}

// handle serves the request in the entry and leaves the reply in it: the
// out header in the header's in_out, the reply's arguments in the
// payload, whose length it returns.
func (e *uringEntry) handle() int {
	ms := e.t.ms
	req := ms.reqPool.Get().(*requestAlloc)
	defer e.release(req)
	if ms.opts.SingleThreaded {
		ms.requestProcessingMu.Lock()
		defer ms.requestProcessingMu.Unlock()
	}
	// The input is the in header and the op's fixed-size struct, from
	// the entry's header, and the payload (names, WRITE data,
	// extensions). Bytes of op_in beyond the struct the kernel sent
	// are zero (cleared at each commit), as parseRequest expects.
	hsz := int(unsafe.Sizeof(InHeader{}))
	in := req.smallInputBuf[:]
	copy(in, e.hdr[uringInOut:uringInOut+hsz])
	copy(in[hsz:], e.hdr[uringOpIn:uringEntInOut])
	psz := min(int(uringLE.Uint32(e.hdr[uringEntInOut+16:])), len(e.payload))

	h, inSize, outSize, outPayloadSize, code := parseRequest(in, &ms.kernelSettings, ms.negotiatedFlags)
	req.inputBuf = in[:hsz]
	req.status = code
	if !code.Ok() && code != ENOSYS {
		ms.opts.Logger.Printf("parseRequest: %v", code)
	}
	if code.Ok() {
		req.inputBuf = in[:inSize]
		req.inPayload = e.payload[:psz]
		req.extendInput(int(h.InputSize))
		req.status = req.splitExt(&req.extInline)
		if !req.status.Ok() {
			ms.opts.Logger.Printf("op %s: bad request extension: %v", h.Name, req.status)
		}
	}
	req.outHeaderBuf = req.outHeaderInline[:]
	req.outDataBuf = req.outDataInline[:outSize]
	clear(req.outHeaderBuf)
	clear(req.outDataBuf)
	if outPayloadSize > 0 {
		if psz == 0 && outSize+outPayloadSize <= len(e.payload) {
			// Read in place (READ, READDIR, LISTXATTR).
			req.outPayload = e.payload[outSize : outSize+outPayloadSize]
		} else {
			req.outPayload = ms.buffers.AllocBuffer(uint32(outPayloadSize))
			req.bufferPoolOutputBuf = req.outPayload
		}
	}
	ms.protocolServer.handleRequest(h, &req.request)
	e.t.served.Add(1)
	if req.suppressReply {
		// Nothing the kernel sends to a ring goes unanswered there
		// (FORGET and INTERRUPT come through /dev/fuse), and an
		// entry that commits nothing is lost: commit an empty reply.
		req.status = OK
		req.outDataBuf = nil
		req.outPayload = nil
		if req.readResult != nil {
			req.readResult.Done()
			req.readResult = nil
		}
		req.serializeHeader(0)
		copy(e.hdr[uringInOut:], req.outHeaderBuf)
		return 0
	}
	return e.reply(req)
}

// reply copies req's reply into the entry and returns the length of its
// payload.
func (e *uringEntry) reply(req *requestAlloc) int {
	p := e.payload
	n := copy(p, req.outDataBuf) // nil on error
	if rr := req.readResult; rr != nil {
		sz := min(rr.Size(), len(p)-n)
		data, st := rr.Bytes(p[n : n+sz])
		m := 0
		if st.Ok() {
			m = min(len(data), len(p)-n)
			if m > 0 && &data[0] != &p[n] {
				copy(p[n:], data[:m])
			}
		}
		rr.Done()
		req.readResult = nil
		req.status = st
		if !st.Ok() {
			n = 0
		}
		req.serializeHeader(m)
		n += m
	} else if len(req.outPayload) > 0 {
		if &req.outPayload[0] != &p[n] {
			copy(p[n:], req.outPayload)
		}
		n += min(len(req.outPayload), len(p)-n)
	}
	copy(e.hdr[uringInOut:], req.outHeaderBuf)
	return n
}

// release returns req to the pool, as fuseFD.returnRequest does for a
// request read from /dev/fuse (whose byte accounting it is no part of).
func (e *uringEntry) release(req *requestAlloc) {
	ms := e.t.ms
	if req.bufferPoolOutputBuf != nil {
		ms.buffers.FreeBuffer(req.bufferPoolOutputBuf)
		req.bufferPoolOutputBuf = nil
	}
	if req.interrupted {
		req.interrupted = false
		req.cancel = make(chan struct{})
	}
	req.clear()
	ms.reqPool.Put(req)
}

// devFd is the /dev/fuse descriptor the ring commands name. The rings
// end with the connection, before Serve closes it.
func (ms *Server) devFd() int {
	fd := -1
	ms.fuseFD.withFD(func(f int) { fd = f })
	return fd
}

// startURing lets the ring entries serve (Serve calls it).
func (ms *Server) startURing() {
	if ms.uring != nil {
		close(ms.uring.start)
	}
}

// setupURing prepares io_uring before INIT (NewServer calls it): where
// the kernel cannot have it, INIT does not ask for it.
func (ms *Server) setupURing() {
	if !ms.opts.IOUring {
		return
	}
	t, err := newURingTransport(ms)
	if err != nil {
		ms.opts.Logger.Printf("io_uring: %v: serving /dev/fuse", err)
		return
	}
	ms.uring = t
	ms.opts.ExtraCapabilities |= CAP_OVER_IO_URING
}

// registerURing registers the rings after INIT (NewServer calls it).
func (ms *Server) registerURing() {
	if ms.uring != nil && !ms.uring.register() {
		ms.uring = nil
	}
}

// IOUring reports whether requests are served over io_uring: the mount
// asked for it (MountOptions.IOUring), the kernel granted it and the
// rings were set up.
func (ms *Server) IOUring() bool { return ms.uring != nil }
