package fsys

import (
	"sync"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"

	"sluice/backing"
)

// Reads straight from a backing file, none of whose range is in its page
// cache, are read past that cache (backing.File.ReadCold) into a buffer
// of sluice's own, aligned for O_DIRECT, which is the reply: the data is
// copied once, into the mount's page cache, and cached once, there.

// coldMax is the size of the largest buffers, the largest FUSE read
// (MaxWrite); reads up to coldSmall take buffers of that size.
const (
	coldMax   = 1 << 20
	coldSmall = 128 << 10
)

// coldBufs holds the buffers, aligned for O_DIRECT within allocations
// of their own (Go's heap does not move them): [0] of coldSmall bytes,
// [1] of coldMax.
var coldBufs = [2]sync.Pool{{New: func() any { return alignedBuf(coldSmall) }}, {New: func() any { return alignedBuf(coldMax) }}}

func alignedBuf(n int) any {
	b := make([]byte, n+backing.ColdAlign)
	skip := (backing.ColdAlign - int(uintptr(unsafe.Pointer(&b[0]))%backing.ColdAlign)) % backing.ColdAlign
	b = b[skip : skip+n : skip+n]
	return &b
}

func coldPool(n int) *sync.Pool {
	if n <= coldSmall {
		return &coldBufs[0]
	}
	return &coldBufs[1]
}

// coldResult is a reply read past the cache; the buffer goes back to
// the pool once the reply is written.
type coldResult struct {
	buf *[]byte
	n   int
}

func (r *coldResult) Bytes([]byte) ([]byte, fuse.Status) { return (*r.buf)[:r.n], fuse.OK }
func (r *coldResult) Size() int                          { return r.n }
func (r *coldResult) Done()                              { coldPool(cap(*r.buf)).Put(r.buf) }

// readCold reads n bytes at off of file past its page cache, and
// reports false when it did not (see backing.File.ReadCold).
func readCold(file *backing.File, off int64, n int) (fuse.ReadResult, bool, error) {
	if n <= 0 || n > coldMax {
		return nil, false, nil
	}
	pool := coldPool(n)
	buf := pool.Get().(*[]byte)
	got, ok, err := file.ReadCold((*buf)[:(n+backing.ColdAlign-1)&^(backing.ColdAlign-1)], off)
	if !ok || err != nil {
		pool.Put(buf)
		return nil, ok, err
	}
	return &coldResult{buf, min(got, n)}, true, nil
}
