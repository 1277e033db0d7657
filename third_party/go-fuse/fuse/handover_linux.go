// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

// Handover: a Server stops taking requests from /dev/fuse, without
// losing one, so that another Server (NewServerFrom), of this process or
// another, serves the connection from then on; the kernel keeps the
// connection as long as some process holds a descriptor of it, and
// requests it queues meanwhile wait in it for the next reader.
//
// Readers block in read(2) on /dev/fuse, which no signal interrupts
// (Go's handlers are SA_RESTART) and closing the descriptor does not
// end; a request a reader took after the handover would never be
// answered. So:
//
//  1. Handover sets fuseFD.ho.stopping. A reader that comes back from
//     read(2) with a request serves it (this server has all its state)
//     and then ends instead of reading again, and starts no new reader
//     (fuseFD.readRequest). One reader is let read on while requests
//     taken before the stop (or a NOTIFY_RETRIEVE's reply) are
//     outstanding, so that an INTERRUPT for one of them is served: a
//     read held in the file system until its caller gives up ends, and
//     the handover with it. The requests that reader takes are served,
//     but do not keep it reading.
//  2. Once those are answered, every reader still in read(2) is woken
//     with a request this server answers itself, one at a time while
//     some reader waits (fuseFD.reqReaders): the kernel wakes one reader
//     per request (exclusive wake-up), and a reader that takes another
//     request instead serves it and ends all the same. The request is
//     the NOTIFY_REPLY the kernel queues for a NOTIFY_RETRIEVE of 0
//     bytes (fs/fuse/dev.c, fuse_retrieve: it answers whatever is
//     cached, even nothing) of go-fuse's poll-hack file
//     (".go-fuse-epoll-hack" in the root, node pollHackInode, a regular
//     file of 0 bytes that the server answers for itself: LOOKUP,
//     GETATTR, FORGET, and this NOTIFY_REPLY, which doPollHackLookup
//     drops). The kernel answers a NOTIFY_RETRIEVE only for a regular
//     file it has in its inode cache (since a 2026 fix, EINVAL for a
//     directory, the root included), so Handover first opens the
//     poll-hack file O_PATH under the mount point, while the server
//     still serves (a LOOKUP it answers for itself), and holds it until
//     it returns. Neither the file system nor anything the kernel keeps
//     for it (caches, attributes) sees any of it; closing the O_PATH
//     descriptor may queue a FORGET of the poll-hack node, which
//     whichever server reads it drops.
//  3. Handover returns when no reader is in read(2) and every request
//     taken has been answered (fuseFD.ho.taken counts them from read to
//     fuseFD.returnRequest, after the reply is written, whichever
//     goroutine serves them), or fails when wait has elapsed, and the
//     server then reads again (resumeLocked).
//
// A wake-up sent while the last reader took something else stays queued
// in the kernel, for the next server (or this one, resumed) to read and
// drop. The reader loops end during the handover; Handover holds
// fuseFD.loops meanwhile so that Serve, Wait and Unmount wait for
// Release (Serve returns) or Resume (a new loop starts).
//
// The alternative, statfs(2) of the mount's root to make the kernel send
// a request, reaches the file system (StatFs); and a descriptor of the
// root kept from the mount on, for fstatfs(2), makes umount(2) fail with
// EBUSY.

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Handover stops taking requests from the kernel, waits until every
// request already taken has been answered (at most wait, in all), and
// returns the connection for another server (NewServerFrom). Requests
// the kernel queues meanwhile stay queued in it for the next server to
// read. The server then serves nothing until Release (the Handoff was
// taken) or Resume (it was not).
//
// On error (wait elapsed with requests still in flight, the io_uring
// transport in use, a server not serving, the connection gone) the
// server takes requests again as before and nothing is lost.
//
// A request taken before the handover keeps a reader reading for the
// INTERRUPTs sent for it; the requests that reader takes meanwhile are
// served here too. So a request held in the file system ends the
// handover when its caller gives up, and one held longer than wait
// fails it.
//
// Handover needs the mount point (as NewServer or NewServerFrom was
// given it) to resolve to the mount in this process: it opens the
// poll-hack file under it (O_PATH) for its duration, during which an
// umount(2) without MNT_DETACH fails with EBUSY (Unmount retries for a
// while). wait bounds the whole of it.
//
// The Handoff's Fd is a new descriptor (close-on-exec), the caller's to
// close (once it has passed it on, or after Resume).
func (ms *Server) Handover(wait time.Duration) (*Handoff, error) {
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	if ms.uring != nil {
		return nil, errors.New("handover: the connection is served over io_uring; handover needs the /dev/fuse transport")
	}
	if !ms.kernelSettings.SupportsNotify(NOTIFY_RETRIEVE_CACHE) {
		return nil, fmt.Errorf("handover: kernel protocol 7.%d has no NOTIFY_RETRIEVE", ms.kernelSettings.Minor)
	}
	if ms.dead() {
		return nil, errors.New("handover: the connection has ended")
	}
	if ms.mountPoint == "" || parseFuseFd(ms.mountPoint) >= 0 {
		return nil, fmt.Errorf("handover: needs the mount point (not %q)", ms.mountPoint)
	}
	r := ms.fuseFD
	r.reqMu.Lock()
	var err error
	switch {
	case r.ho.released:
		err = errors.New("handover: the server was released")
	case r.ho.busy || r.ho.pending:
		err = errors.New("handover: the connection is already being handed over")
	case !r.ho.served || r.ho.live == 0:
		err = errors.New("handover: the server is not serving")
	}
	if err != nil {
		r.reqMu.Unlock()
		return nil, err
	}
	r.ho.busy = true
	r.reqMu.Unlock()

	// The node the wake-ups retrieve from, looked up while the
	// readers read.
	pin, err := unix.Open(filepath.Join(ms.mountPoint, pollHackName), unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		r.reqMu.Lock()
		r.ho.busy = false
		r.reqMu.Unlock()
		return nil, fmt.Errorf("handover: %s: %v", filepath.Join(ms.mountPoint, pollHackName), err)
	}
	defer unix.Close(pin)

	r.reqMu.Lock()
	if r.ho.live == 0 {
		r.ho.busy = false
		r.reqMu.Unlock()
		return nil, errors.New("handover: the server is not serving")
	}
	r.ho.stopping = true
	r.ho.old = r.ho.taken
	r.ho.woken = 0
	r.ho.late = make(map[*requestAlloc]struct{})
	r.ho.changed = make(chan struct{}, 1)
	r.loops.Add(1) // the hold: live > 0 keeps the count above 0
	changed := r.ho.changed
	r.reqMu.Unlock()

	h, err := ms.drain(changed, timeout.C, wait)
	r.reqMu.Lock()
	if err != nil {
		ms.resumeLocked()
		return nil, err
	}
	r.ho.busy = false
	r.ho.pending = true
	r.reqMu.Unlock()
	return h, nil
}

// drain wakes the readers and waits for the requests in flight (steps 1
// to 3 above), and returns the Handoff.
func (ms *Server) drain(changed <-chan struct{}, timeout <-chan time.Time, wait time.Duration) (*Handoff, error) {
	r := ms.fuseFD
	sent := 0
	for {
		if ms.dead() {
			return nil, errors.New("handover: the connection has ended")
		}
		r.reqMu.Lock()
		readers, taken, old, woken := r.reqReaders, r.ho.taken, r.ho.old, r.ho.woken
		retrieving := ms.retrieving()
		if readers == 0 && taken == 0 && retrieving == 0 {
			// From here on no reader reads (mayReadLocked),
			// not even one coming back from what it served.
			r.ho.drained = true
			r.reqMu.Unlock()
			break
		}
		r.reqMu.Unlock()
		// One wake-up at a time (woken may count one left queued
		// by an earlier Handover that failed).
		if sent <= woken && readers > 0 && old == 0 && retrieving == 0 {
			if st := ms.sendWake(); !st.Ok() {
				return nil, fmt.Errorf("handover: waking the readers: NOTIFY_RETRIEVE: %v", st)
			}
			sent++
		}
		select {
		case <-changed:
		case <-timeout:
			return nil, fmt.Errorf("handover: %d requests still in flight and %d readers waiting after %v", taken+retrieving, readers, wait)
		}
	}

	return ms.handoff()
}

// Connection returns a Handoff of the connection this server serves, as
// Handover would, without stopping: for a process that keeps the
// connection, and what it was negotiated with, to start another server on
// it should this process die (a crash supervisor). The server must be
// serving /dev/fuse (not io_uring). RetrieveNext is the next retrieve's
// unique at the time of the call: one made from the Handoff of a process
// that went on serving should start well above it.
func (ms *Server) Connection() (*Handoff, error) {
	if ms.uring != nil {
		return nil, errors.New("the connection is served over io_uring; a server taking it needs the /dev/fuse transport")
	}
	return ms.handoff()
}

// handoff dups the connection's descriptor into a Handoff.
func (ms *Server) handoff() (*Handoff, error) {
	r := ms.fuseFD
	var fd int
	var err error
	if cerr := r.withFD(func(f int) {
		fd, err = unix.FcntlInt(uintptr(f), unix.F_DUPFD_CLOEXEC, 0)
	}); cerr != nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("handover: dup: %v", err)
	}
	ms.retrieveMu.Lock()
	next := ms.retrieveNext
	ms.retrieveMu.Unlock()
	return &Handoff{
		Fd:           fd,
		Init:         ms.kernelSettings,
		Flags:        ms.negotiatedFlags,
		Minor:        min(ms.kernelSettings.Minor, _OUR_MINOR_VERSION),
		MaxWrite:     ms.opts.MaxWrite,
		RetrieveNext: next,
	}, nil
}

// sendWake makes the kernel queue a request that wakes one reader: a
// NOTIFY_RETRIEVE of nothing of the poll-hack node, which the kernel
// answers with a NOTIFY_REPLY for it, dropped by doPollHackLookup
// (fuseFD.tookLocked counts it).
func (ms *Server) sendWake() Status {
	req := newNotifyRequest(_OP_NOTIFY_RETRIEVE_CACHE)
	q := (*NotifyRetrieveOut)(req.outData())
	q.NotifyUnique = wakeUnique
	q.Nodeid = pollHackInode
	return ms.notifyWrite(req)
}

// wakeUnique is the unique of the wake-ups' NOTIFY_REPLYs, for debug
// output: no reply is expected, and none is looked up.
const wakeUnique = 1 << 63

func (ms *Server) dead() bool {
	ms.interruptMu.Lock()
	defer ms.interruptMu.Unlock()
	return ms.connectionDead
}

// NewServerFrom serves a connection another Server handed over
// (Handover), of this process or another: there is no mount and no INIT
// (the kernel sends INIT once per connection); requests are parsed
// against h.Init and h.Flags, as the old server parsed them, and read
// into buffers for h.MaxWrite (opts.MaxWrite is ignored, as are
// MountOptions that only matter to the mount or to INIT; IOUring is not
// set up; DirectMount and DirectMountStrict choose how Unmount
// unmounts, as for NewServer). fs.Init is called as after a mount; fs
// must know the node ids and file handles the kernel holds (the
// application hands them over). mountPoint is recorded for Unmount and
// Handover (made absolute; "" makes Unmount do nothing). Call Serve as
// usual; WaitMount works as after a mount.
//
// On success the Server owns h.Fd (Serve closes it); on error it is
// still the caller's.
func NewServerFrom(fs RawFileSystem, mountPoint string, h *Handoff, opts *MountOptions) (*Server, error) {
	if h == nil {
		return nil, errors.New("take over: no Handoff")
	}
	switch minor := min(h.Init.Minor, _OUR_MINOR_VERSION); {
	case h.Init.Major != _FUSE_KERNEL_VERSION || h.Init.Minor < _MINIMUM_MINOR_VERSION:
		return nil, fmt.Errorf("take over: kernel protocol %d.%d not supported", h.Init.Major, h.Init.Minor)
	case h.Minor != minor:
		return nil, fmt.Errorf("take over: the connection speaks protocol 7.%d, this server 7.%d", h.Minor, minor)
	case h.MaxWrite <= 0:
		return nil, fmt.Errorf("take over: MaxWrite %d", h.MaxWrite)
	case h.Fd < 0:
		return nil, fmt.Errorf("take over: descriptor %d", h.Fd)
	}
	var st unix.Stat_t
	if err := unix.Fstat(h.Fd, &st); err != nil {
		return nil, fmt.Errorf("take over: descriptor %d: %v", h.Fd, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFCHR || unix.Major(st.Rdev) != 10 || unix.Minor(st.Rdev) != 229 {
		return nil, fmt.Errorf("take over: descriptor %d is not /dev/fuse", h.Fd) // misc device 229
	}
	if mountPoint != "" {
		abs, err := filepath.Abs(mountPoint)
		if err != nil {
			return nil, err
		}
		mountPoint = abs
	}

	var o MountOptions
	if opts != nil {
		o = *opts
	}
	o.MaxWrite = h.MaxWrite
	o.IOUring = false
	ms := newServer(fs, &o)
	if ms.opts.MaxWrite != h.MaxWrite {
		return nil, fmt.Errorf("take over: MaxWrite %d is above the kernel's limit (%d)", h.MaxWrite, ms.opts.MaxWrite)
	}
	ms.kernelSettings = h.Init
	ms.negotiatedFlags = h.Flags
	ms.retrieveNext = h.RetrieveNext
	var err error
	if ms.fuseFD, err = ms.newFuseFD(h.Fd); err != nil {
		return nil, err
	}
	ms.mountPoint = mountPoint
	ms.protocolServer.writev = ms.fuseFD.writev
	if ms.kernelSettings.Minor >= 13 {
		ms.setSplice()
	}
	close(ms.ready)
	ms.fileSystem.Init(ms)
	ms.fuseFD.addLoop()
	return ms, nil
}

// Replay serves requests a server that died had read and not answered,
// found in its MountOptions.RequestArena: each of bufs holds one request
// as read from the device, in a buffer of this server's RequestArena
// (Put back once answered). Call it on a server made by NewServerFrom,
// before Serve. A request the dead server had answered just before it
// died is served again, and its answer refused by the kernel (ENOENT).
func (ms *Server) Replay(bufs [][]byte) {
	r := ms.fuseFD
	for _, buf := range bufs {
		req := r.reqPool.Get().(*requestAlloc)
		r.reqMu.Lock()
		r.inflightRequestBytes += r.requestBytes()
		req.setInput(buf, true)
		req.arena = true
		r.tookLocked(req)
		r.reqMu.Unlock()
		go ms.handleRequest(req)
	}
}
