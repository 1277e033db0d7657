package engine

import (
	"context"
	"fmt"
	"testing"

	"sluice/stack"
	"sluice/throttle"
)

// zeroFile is a backing file of zeros that is never short.
type zeroFile struct{}

func (zeroFile) ReadAt(p []byte, off int64) (int, error) {
	clear(p)
	return len(p), nil
}

// unreached returns an engine with an 8 MiB cache (steady state, evicting,
// after a short warm-up), a group under a limit it never reaches, and a
// handle on a file of zeros.
func unreached(tb testing.TB) (*Engine, *throttle.Group, *stack.Handle) {
	opts := Options{Options: stack.DefaultOptions()}
	opts.CacheBytes = 8 << 20
	e, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(e.Close)
	e.SetLimits("t", throttle.SetAll(throttle.Limits{RIOPS: 1e12}))
	return e, e.Group("t"), &stack.Handle{Ino: 1, File: zeroFile{}}
}

// BenchmarkRead: one application read of bs bytes in, admitted under a
// limit it does not reach, its device reads performed and the data copied
// out, sequentially through a file larger than the cache. A 4 KiB reader
// allocates nothing per read: the request, its pages' buffers and the
// stack's lists are used again.
func BenchmarkRead(b *testing.B) {
	for _, bs := range []int{4 << 10, 128 << 10} {
		b.Run(fmt.Sprint(bs>>10, "KiB"), func(b *testing.B) {
			e, g, h := unreached(b)
			opts := e.Options()
			dst := make([]byte, bs)
			ctx := context.Background()
			span := 4 * opts.CacheBytes
			off := int64(0)
			read := func() {
				n, err := e.Read(ctx, h, g, dst, off)
				if err != nil || n != bs {
					b.Fatalf("read %d@%d: %d, %v", bs, off, n, err)
				}
				off = (off + int64(bs)) % span
			}
			for off < 2*opts.CacheBytes { // the cache full, evicting
				read()
			}
			b.ReportAllocs()
			b.SetBytes(int64(bs))
			b.ResetTimer()
			for range b.N {
				read()
			}
		})
	}
}
