package fsys

import (
	"context"
	"errors"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"sluice/engine"
	"sluice/stack"
	"sluice/throttle"
)

// handle is one open file. Reads and writes of callers in a limited group
// go through the engine; others go straight to the backing file and are
// only counted.
type handle struct {
	lf     *fs.LoopbackFile // the backing file as opened for the caller
	fd     int
	node   *node
	opener *throttle.Group
	direct bool // opened with FOPEN_DIRECT_IO

	mu      sync.Mutex
	reading bool         // holds the node's reader; guarded by mu
	sh      stack.Handle // per-open state of the stack; used under the engine's lock
}

var (
	_ = (fs.FileReader)((*handle)(nil))
	_ = (fs.FileWriter)((*handle)(nil))
	_ = (fs.FileReleaser)((*handle)(nil))
	_ = (fs.FileFlusher)((*handle)(nil))
	_ = (fs.FileFsyncer)((*handle)(nil))
	_ = (fs.FileGetattrer)((*handle)(nil))
	_ = (fs.FileSetattrer)((*handle)(nil))
	_ = (fs.FileLseeker)((*handle)(nil))
	_ = (fs.FileAllocater)((*handle)(nil))
	_ = (fs.FileGetlker)((*handle)(nil))
	_ = (fs.FileSetlker)((*handle)(nil))
	_ = (fs.FileSetlkwer)((*handle)(nil))
)

// group is the group charged for a request: the caller's, or the opener's
// when the kernel names no caller (writeback, an invisible pid namespace).
func (h *handle) group(ctx context.Context) *throttle.Group {
	g, ok := h.node.fsys.caller(ctx)
	if !ok {
		return h.opener
	}
	return g
}

// Read replies by splicing from the backing file (unthrottled reads that
// fit a pipe) or with a vector result, which go-fuse writes with writev and
// never tries to splice.
func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	g := h.group(ctx)
	if !g.Limited() {
		if len(dest) <= h.node.fsys.spliceMax {
			// Zero copy: the reply is spliced from the backing file.
			h.node.fsys.eng.Pass(g, throttle.Read, int64(len(dest)))
			return fuse.ReadResultFd(uintptr(h.fd), off, len(dest)), 0
		}
		n, err := syscall.Pread(h.fd, dest, off)
		if err != nil {
			return nil, fs.ToErrno(err)
		}
		h.node.fsys.eng.Pass(g, throttle.Read, int64(n))
		return fuse.ReadResultVector([][]byte{dest[:n]}), 0
	}
	if err := h.ensureReader(); err != nil {
		return nil, fs.ToErrno(err)
	}
	n, err := h.node.fsys.eng.Read(ctx, &h.sh, g, dest, off)
	if err != nil {
		return nil, errno(err)
	}
	return fuse.ReadResultVector([][]byte{dest[:n]}), 0
}

// ensureReader holds the node's reader for a handle that was opened by a
// group without a limit and is now read by one with a limit.
func (h *handle) ensureReader() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.reading {
		return nil
	}
	if err := h.node.acquireReader(h.fd); err != nil {
		return err
	}
	h.reading = true
	return nil
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	g := h.group(ctx)
	eng := h.node.fsys.eng
	ino := h.sh.Ino
	var n int
	var err error
	if !g.Limited() {
		n, err = syscall.Pwrite(h.fd, data, off)
		if n > 0 {
			eng.Pass(g, throttle.Write, int64(n))
			eng.Changed(ino, off, int64(n))
		}
	} else {
		n, err = eng.Write(ctx, &h.sh, g, fdWriter(h.fd), data, off)
	}
	if n > 0 && h.direct {
		// The kernel may hold pages of this file for handles that use its
		// cache (or for mmap); drop them, off the request path.
		go h.node.NotifyContent(off, int64(n))
	}
	if err != nil && n <= 0 {
		return 0, errno(err)
	}
	return uint32(n), 0
}

func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.mu.Lock()
	if h.reading {
		h.reading = false
		h.node.releaseReader()
	}
	h.mu.Unlock()
	return h.lf.Release(ctx)
}
func (h *handle) Flush(ctx context.Context) syscall.Errno { return h.lf.Flush(ctx) }
func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	return h.lf.Fsync(ctx, flags)
}
func (h *handle) Getattr(ctx context.Context, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Getattr(ctx, out)
}
func (h *handle) Setattr(ctx context.Context, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return h.lf.Setattr(ctx, in, out)
}
func (h *handle) Lseek(ctx context.Context, off uint64, whence uint32) (uint64, syscall.Errno) {
	return h.lf.Lseek(ctx, off, whence)
}
func (h *handle) Allocate(ctx context.Context, off uint64, size uint64, mode uint32) syscall.Errno {
	errno := h.lf.Allocate(ctx, off, size, mode)
	if errno == 0 {
		h.node.fsys.eng.Changed(h.sh.Ino, int64(off), int64(size))
	}
	return errno
}
func (h *handle) Getlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32, out *fuse.FileLock) syscall.Errno {
	return h.lf.Getlk(ctx, owner, lk, flags, out)
}
func (h *handle) Setlk(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlk(ctx, owner, lk, flags)
}
func (h *handle) Setlkw(ctx context.Context, owner uint64, lk *fuse.FileLock, flags uint32) syscall.Errno {
	return h.lf.Setlkw(ctx, owner, lk, flags)
}

// passHandle is a handle of a group with no limit that lets the kernel
// read and write the backing file directly (FUSE passthrough).
type passHandle struct{ *handle }

var _ = (fs.FilePassthroughFder)((*passHandle)(nil))

func (p *passHandle) PassthroughFd() (int, bool) { return p.lf.PassthroughFd() }

type fdWriter int

func (w fdWriter) WriteAt(p []byte, off int64) (int, error) {
	n, err := syscall.Pwrite(int(w), p, off)
	if n < 0 {
		n = 0
	}
	return n, err
}

var _ engine.WriterAt = fdWriter(0)

// errno maps an engine error to the FUSE reply.
func errno(err error) syscall.Errno {
	var e syscall.Errno
	switch {
	case errors.As(err, &e):
		return e
	case errors.Is(err, stack.ErrCanceled):
		return syscall.EINTR
	}
	return syscall.EIO
}
