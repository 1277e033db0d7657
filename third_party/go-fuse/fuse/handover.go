// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

// Handing a live connection from one Server to another (of this process
// or another), with no request lost: see Handover (handover_linux.go).
// This file holds what every system builds: the Handoff, the readers'
// bookkeeping fusefd.go and server.go call, Resume and Release.

// Handoff is what a Server needs to serve a connection another Server
// handed over (Server.Handover, NewServerFrom): the connection's
// descriptor and what INIT negotiated on it. It is plain data (JSON
// encodes it) except Fd, which the application passes on by itself
// (SCM_RIGHTS).
type Handoff struct {
	// Fd is a duplicate (close-on-exec) of the connection's /dev/fuse
	// descriptor, owned by whoever holds the Handoff. It shares its file
	// status flags with the server's own descriptor: leave O_NONBLOCK
	// alone.
	Fd int
	// Init is the kernel's INIT request, as the server kept it
	// (KernelSettings).
	Init InitIn
	// Flags are the capabilities the server answered INIT with.
	Flags uint64
	// Minor is the protocol minor version the kernel speaks on the
	// connection: the lesser of Init.Minor and the one of this package.
	// NewServerFrom refuses a Handoff whose Minor it would not have
	// agreed to.
	Minor uint32
	// MaxWrite is the MaxWrite the kernel was told: requests up to it
	// arrive, and a read of /dev/fuse must have room for one.
	MaxWrite int
	// RetrieveNext is the unique the server would have given its next
	// NOTIFY_RETRIEVE (InodeRetrieveCache); the new server goes on from
	// it, so that no reply meant for the old one is taken for its own.
	RetrieveNext uint64
}

// handoverState is a fuseFD's bookkeeping for Handover, guarded by
// fuseFD.reqMu.
type handoverState struct {
	// served: Serve was called (and not after Release).
	served bool
	// live counts the reader loops (Server.loop) started and not ended:
	// while it is not 0, fuseFD.loops is not either, and Handover may
	// hold it.
	live int
	// taken counts the requests read from the descriptor and not yet
	// returned (answered): fuseFD.readRequest to fuseFD.returnRequest.
	taken int

	// stopping: readers serve what they took and do not read again
	// (from Handover to Resume). One reader may go on reading while old
	// or a NOTIFY_RETRIEVE reply is outstanding, so that the INTERRUPTs
	// of the requests in flight reach them.
	stopping bool
	// old counts the requests of taken read before stopping was set;
	// late holds those read since.
	old  int
	late map[*requestAlloc]struct{}
	// changed is signalled (1-buffered) when readers, taken or live
	// change while stopping.
	changed chan struct{}
	// woken counts the wake-ups (handover_linux.go) read while
	// stopping.
	woken int
	// drained: no reader reads, none is left in read(2), and every
	// request taken was answered; nothing reads until Resume.
	drained bool

	busy     bool // Handover is running
	pending  bool // Handover succeeded; neither Resume nor Release yet
	released bool // Release was called
}

func (h *handoverState) signal() {
	if h.stopping {
		select {
		case h.changed <- struct{}{}:
		default:
		}
	}
}

// mayReadLocked reports whether a reader may read another request: always,
// but while a Handover stops the readers, only one, and only while
// requests taken before it, or a retrieve's reply, are outstanding; and
// none once they are drained.
func (r *fuseFD) mayReadLocked() bool {
	if !r.ho.stopping {
		return true
	}
	if r.ho.drained {
		return false
	}
	return r.reqReaders == 0 && (r.ho.old > 0 || r.server.retrieving() > 0)
}

// tookLocked counts a request readRequest read.
func (r *fuseFD) tookLocked(req *requestAlloc) {
	r.ho.taken++
	if r.ho.stopping {
		r.ho.late[req] = struct{}{}
		if h := req.inHeader(); h.Opcode == _OP_NOTIFY_REPLY && h.NodeId == pollHackInode {
			r.ho.woken++
		}
		r.ho.signal()
	}
}

// returnedLocked counts a request returned (answered).
func (r *fuseFD) returnedLocked(req *requestAlloc) {
	r.ho.taken--
	if r.ho.stopping {
		if _, ok := r.ho.late[req]; ok {
			delete(r.ho.late, req)
		} else if r.ho.old > 0 {
			r.ho.old--
		}
		r.ho.signal()
	}
}

// addLoop accounts for a reader loop about to start (go ms.loop()).
func (r *fuseFD) addLoop() {
	r.reqMu.Lock()
	r.ho.live++
	r.loops.Add(1)
	r.reqMu.Unlock()
}

// loopDone ends a reader loop (deferred in Server.loop).
func (r *fuseFD) loopDone() {
	r.reqMu.Lock()
	r.ho.live--
	r.ho.signal()
	r.reqMu.Unlock()
	r.loops.Done()
}

// startServe marks the server served, unless it was released.
func (r *fuseFD) startServe() bool {
	r.reqMu.Lock()
	defer r.reqMu.Unlock()
	if r.ho.released {
		return false
	}
	r.ho.served = true
	return true
}

func (r *fuseFD) isReleased() bool {
	r.reqMu.Lock()
	defer r.reqMu.Unlock()
	return r.ho.released
}

// retrieving counts the NOTIFY_RETRIEVEs (InodeRetrieveCache) whose reply
// is outstanding.
func (ms *protocolServer) retrieving() int {
	ms.retrieveMu.Lock()
	defer ms.retrieveMu.Unlock()
	return len(ms.retrieveTab)
}

// resumeLocked ends a Handover, failed or undone: the readers read again
// (a new loop starts, as the readers may all have ended), and the loop
// Handover held is let go. Called with reqMu held, which it unlocks.
func (ms *Server) resumeLocked() {
	r := ms.fuseFD
	r.ho.stopping = false
	r.ho.drained = false
	r.ho.busy = false
	r.ho.pending = false
	r.ho.old = 0
	r.ho.woken = 0
	r.ho.late = nil
	r.ho.changed = nil
	r.ho.live++
	r.loops.Add(1) // Handover's hold keeps the count above 0
	r.reqMu.Unlock()
	go ms.loop()
	r.loops.Done() // Handover's hold
}

// Resume undoes a Handover whose Handoff the next server did not take:
// this server takes requests again, as before it. The Handoff's Fd is
// the caller's to close. Resume does nothing unless a Handover succeeded
// and neither Resume nor Release followed.
func (ms *Server) Resume() {
	r := ms.fuseFD
	r.reqMu.Lock()
	if !r.ho.pending {
		r.reqMu.Unlock()
		return
	}
	ms.resumeLocked()
}

// Release ends a server whose connection was handed over (Handover) and
// taken by another server: Serve returns, and Wait, without unmounting,
// aborting the connection or calling the file system's OnUnmount (the
// kernel has not forgotten anything; the mount and the nodes the kernel
// knows are the other server's now). Serve closes this server's
// descriptor, which leaves the connection to the other holder; NOTIFY_RETRIEVEs
// (InodeRetrieveCache) still waiting for a reply fail with ENODEV.
// Unmount does nothing afterwards.
//
// Release of a server that was never served (one from NewServerFrom that
// is not to serve after all) closes its descriptor at once, Wait returns,
// and a later Serve returns at once. Release of a server serving its
// connection, without a Handover, does nothing.
func (ms *Server) Release() {
	r := ms.fuseFD
	r.reqMu.Lock()
	switch {
	case r.ho.released || r.ho.busy:
		r.reqMu.Unlock()
	case r.ho.pending:
		r.ho.pending = false
		r.ho.released = true
		r.reqMu.Unlock()
		r.loops.Done() // Handover's hold: Serve goes on
	case !r.ho.served:
		r.ho.released = true
		r.ho.live-- // the loop Serve would have run
		r.reqMu.Unlock()
		r.close()
		r.loops.Done()
	default:
		r.reqMu.Unlock()
		ms.opts.Logger.Printf("Release: the server was not handed over (Handover); ignored")
	}
}
