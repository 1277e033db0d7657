package fsys

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"sluice/engine"
)

// node is a loopback node whose files are served through the engine.
type node struct {
	fs.LoopbackNode
	fsys *FS

	mu      sync.Mutex
	reader  *os.File // read side of the backing file for throttled reads; O_DIRECT where possible
	readers int      // handles holding reader open
}

var (
	_ = (fs.NodeOpener)((*node)(nil))
	_ = (fs.NodeCreater)((*node)(nil))
	_ = (fs.NodeSetattrer)((*node)(nil))
	_ = (fs.NodeOnForgetter)((*node)(nil))
	_ = (fs.NodeTmpfiler)((*node)(nil))
)

// Open opens the backing file as the loopback does and wraps it.
func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, _, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	if flags&syscall.O_TRUNC != 0 {
		n.fsys.eng.Truncated(n.StableAttr().Ino, 0)
	}
	return n.wrap(ctx, fh, flags)
}

// Create creates the backing file as the loopback does (owned by the
// caller) and wraps it.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, _, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	child, ok := in.Operations().(*node)
	if !ok {
		return in, fh, 0, 0
	}
	// A new file may reuse the inode number of a deleted one.
	n.fsys.eng.Forget(child.StableAttr().Ino)
	h, fl, errno := child.wrap(ctx, fh, flags)
	return in, h, fl, errno
}

// Setattr passes through and drops cached pages past a new size.
func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if h, ok := f.(*handle); ok {
		f = h.lf
	}
	errno := n.LoopbackNode.Setattr(ctx, f, in, out)
	if sz, ok := in.GetSize(); ok {
		// Even on error: the size may have changed before a later step failed.
		n.fsys.eng.Truncated(n.StableAttr().Ino, int64(sz))
	}
	return errno
}

// Tmpfile creates an unnamed file as the loopback does and wraps it, so
// O_TMPFILE writes are throttled like any other.
func (n *node) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, fh, _, errno := n.LoopbackNode.Tmpfile(ctx, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	child, ok := in.Operations().(*node)
	if !ok {
		return nil, nil, 0, syscall.ENOTSUP
	}
	n.fsys.eng.Forget(child.StableAttr().Ino)
	h, fl, errno := child.wrap(ctx, fh, flags)
	return in, h, fl, errno
}

// OnForget drops the file's cached pages.
func (n *node) OnForget() {
	n.fsys.eng.Forget(n.StableAttr().Ino)
}

// wrap turns the loopback's file handle into sluice's. Files opened by a
// group with a limit get FOPEN_DIRECT_IO, so every read and write reaches
// sluice; others may use the kernel's page cache, or passthrough for
// read-only opens when allowed (a passthrough write would change the file
// behind sluice's cache).
func (n *node) wrap(ctx context.Context, fh fs.FileHandle, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return nil, 0, syscall.EIO
	}
	fd, _ := lf.PassthroughFd()
	g, _ := n.fsys.caller(ctx)
	h := &handle{lf: lf, fd: fd, node: n, opener: g}
	h.sh.Ino = n.StableAttr().Ino
	h.sh.File = n
	if !g.Limited() {
		if n.fsys.opts.Passthrough && flags&syscall.O_ACCMODE == syscall.O_RDONLY {
			return &passHandle{h}, 0, 0
		}
		return h, 0, 0
	}
	h.direct = true
	if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		if err := h.ensureReader(); err != nil {
			return nil, 0, fs.ToErrno(err)
		}
	}
	return h, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES, 0
}

// acquireReader makes sure the node's reader is open, from fd on first use:
// O_DIRECT when the backing file system allows it, buffered otherwise. Each
// acquire is paired with a releaseReader; the last release closes it.
func (n *node) acquireReader(fd int) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.reader == nil {
		path := fmt.Sprintf("/proc/self/fd/%d", fd)
		rfd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
		if err == nil {
			n.fsys.directOpens.Add(1)
		} else {
			rfd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			n.fsys.bufferedOpens.Add(1)
		}
		n.reader = os.NewFile(uintptr(rfd), path)
	}
	n.readers++
	return nil
}

func (n *node) releaseReader() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.readers--; n.readers == 0 && n.reader != nil {
		// Reads in flight hold the descriptor until they finish.
		n.reader.Close()
		n.reader = nil
	}
}

// ReadAt is one pread of the node's reader: the engine's device reads.
// It never retries a short read (with O_DIRECT a retry would be unaligned).
// A readahead issued for a file that has since been closed fails with EBADF.
func (n *node) ReadAt(p []byte, off int64) (int, error) {
	n.mu.Lock()
	f := n.reader
	n.mu.Unlock()
	if f == nil {
		return 0, syscall.EBADF
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cnt int
	var perr error
	if err := rc.Control(func(fd uintptr) { cnt, perr = unix.Pread(int(fd), p, off) }); err != nil {
		return 0, err
	}
	return max(cnt, 0), perr
}

var _ engine.ReaderAt = (*node)(nil)
