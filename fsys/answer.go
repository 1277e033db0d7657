package fsys

import (
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// Early answers. A mirror set's read stuck on a slow mirror past its
// hedge delay is read from another mirror, and that answer is written to
// the FUSE device at once, as the reply to the request (by its unique),
// while the handler serving the request is still stuck (backing.Answer).
// When the stuck read returns, the FUSE library writes the handler's
// reply too, and the kernel, which no longer knows the request, refuses
// it with ENOENT; the library's complaint about that is dropped, once per
// early answer. Unique numbers are never reused by the kernel, so a late
// reply can answer no other request. A read or write held in SOURCE whose
// caller is being killed is answered early too, with EINTR (flights.sweep).

// fuseDevice returns the server's /dev/fuse file. The FUSE library does
// not export it: it is read from the server's fields, and nil where they
// are not what this expects (early answers are then off, and hedged reads
// wait as the mirror set does without them).
func fuseDevice(s *fuse.Server) *os.File {
	v := reflect.ValueOf(s).Elem().FieldByName("fuseFD")
	if !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() {
		return nil
	}
	v = v.Elem().FieldByName("file")
	if !v.IsValid() || v.Type() != reflect.TypeFor[*os.File]() {
		return nil
	}
	return *(**os.File)(unsafe.Pointer(v.UnsafeAddr()))
}

// answerer writes early answers to dev, counting them in late.
func answerer(dev *os.File, late *atomic.Int64) func(unique uint64, p []byte) error {
	r := replier(dev, late)
	if r == nil {
		return nil
	}
	return func(unique uint64, p []byte) error { return r(unique, 0, p) }
}

// replier writes early replies to dev, an error (errno not 0) or p,
// counting them in late.
func replier(dev *os.File, late *atomic.Int64) func(unique uint64, errno syscall.Errno, p []byte) error {
	rc, err := dev.SyscallConn()
	if err != nil {
		return nil
	}
	return func(unique uint64, errno syscall.Errno, p []byte) error {
		var h [16]byte // fuse_out_header: len, error, unique
		if errno != 0 {
			p = nil
			binary.NativeEndian.PutUint32(h[4:], uint32(-int32(errno)))
		}
		binary.NativeEndian.PutUint32(h[0:], uint32(len(h)+len(p)))
		binary.NativeEndian.PutUint64(h[8:], unique)
		var werr error
		if err := rc.Write(func(fd uintptr) bool {
			_, werr = unix.Writev(int(fd), [][]byte{h[:], p})
			return true
		}); err != nil {
			return err
		}
		if werr == nil {
			late.Add(1)
		}
		return werr
	}
}

// lateReplies is a log handler that drops the FUSE library's complaint
// about the kernel refusing a reply to a request answered early, once
// per early answer, and passes everything else on.
type lateReplies struct {
	slog.Handler
	late *atomic.Int64
}

func (h lateReplies) Handle(ctx context.Context, r slog.Record) error {
	if m := r.Message; strings.Contains(m, "Write/Writev failed") && strings.Contains(m, unix.ENOENT.Error()) &&
		(strings.Contains(m, "opcode: READ") || strings.Contains(m, "opcode: WRITE")) {
		for n := h.late.Load(); n > 0; n = h.late.Load() {
			if h.late.CompareAndSwap(n, n-1) {
				return nil
			}
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h lateReplies) WithAttrs(as []slog.Attr) slog.Handler {
	return lateReplies{h.Handler.WithAttrs(as), h.late}
}

func (h lateReplies) WithGroup(name string) slog.Handler {
	return lateReplies{h.Handler.WithGroup(name), h.late}
}
