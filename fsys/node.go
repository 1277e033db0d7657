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
)

// node is a loopback node whose files are served through the engine.
type node struct {
	fs.LoopbackNode
	fsys *FS

	mu     sync.Mutex
	reader *os.File // read side of the backing file for throttled reads; O_DIRECT where possible
}

var (
	_ = (fs.NodeOpener)((*node)(nil))
	_ = (fs.NodeCreater)((*node)(nil))
	_ = (fs.NodeSetattrer)((*node)(nil))
	_ = (fs.NodeOnForgetter)((*node)(nil))
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
	if sz, ok := in.GetSize(); ok && errno == 0 {
		n.fsys.eng.Truncated(n.StableAttr().Ino, int64(sz))
	}
	return errno
}

// OnForget drops the file's cached pages and closes its reader.
func (n *node) OnForget() {
	n.fsys.eng.Forget(n.StableAttr().Ino)
	n.mu.Lock()
	if n.reader != nil {
		n.reader.Close()
		n.reader = nil
	}
	n.mu.Unlock()
}

// wrap turns the loopback's file handle into sluice's. Files opened by a
// group with a limit get FOPEN_DIRECT_IO, so every read and write reaches
// sluice; others may use the kernel's page cache (or passthrough).
func (n *node) wrap(ctx context.Context, fh fs.FileHandle, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	lf, ok := fh.(*fs.LoopbackFile)
	if !ok {
		return nil, 0, syscall.EIO
	}
	fd, _ := lf.PassthroughFd()
	g, _ := n.fsys.caller(ctx)
	h := &handle{lf: lf, fd: fd, node: n, opener: g}
	h.sh.Ino = n.StableAttr().Ino
	if !g.Limited() {
		if n.fsys.opts.Passthrough {
			return &passHandle{h}, 0, 0
		}
		return h, 0, 0
	}
	h.direct = true
	if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		r, err := n.openReader(fd)
		if err != nil {
			return nil, 0, fs.ToErrno(err)
		}
		h.sh.File = r
	}
	return h, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES, 0
}

// openReader returns the node's reader, opening it from fd on first use:
// O_DIRECT when the backing file system allows it, buffered otherwise.
func (n *node) openReader(fd int) (*os.File, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.reader != nil {
		return n.reader, nil
	}
	path := fmt.Sprintf("/proc/self/fd/%d", fd)
	rfd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err == nil {
		n.fsys.directOpens.Add(1)
	} else {
		rfd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		n.fsys.bufferedOpens.Add(1)
	}
	n.reader = os.NewFile(uintptr(rfd), path)
	return n.reader, nil
}
