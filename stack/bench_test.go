package stack

import (
	"testing"

	"sluice/throttle"
)

// benchRead drives sequential reads of bs bytes through the stack for a
// group under a limit it never reaches, completing every device read at
// once with one shared page, and reports the allocations per read.
func benchRead(b *testing.B, bs int64) {
	opts := DefaultOptions()
	s, err := New(opts)
	if err != nil {
		b.Fatal(err)
	}
	now := int64(0)
	s.SetLimits(now, "t", throttle.Limits{RIOPS: 1e12})
	g := s.Group("t")
	h := &Handle{Ino: 1}
	shared := make([]byte, PageSize)
	pages := make([][]byte, 0, opts.MaxIO/PageSize)
	var pend []*IO
	take := func(a Actions) { pend = append(pend, a.Start...); s.Recycle(a) }
	r := &Request{}
	const fileSize = 1 << 40
	off := int64(0)
	b.ReportAllocs()
	b.SetBytes(bs)
	b.ResetTimer()
	for range b.N {
		take(s.Read(now, h, g, off, bs, r))
		for !r.done {
			for len(pend) > 0 {
				io := pend[len(pend)-1]
				pend = pend[:len(pend)-1]
				pages = pages[:0]
				for range io.Len / PageSize {
					pages = append(pages, shared)
				}
				take(s.Complete(now, io, pages, nil))
			}
			if !r.done {
				now += 1e6
				take(s.Tick(now))
			}
		}
		if r.Size() != bs {
			b.Fatalf("read %d@%d: %d bytes", bs, off, r.Size())
		}
		off = (off + bs) % fileSize
		now += 1000
	}
}

// BenchmarkRead: one application read in, its device reads admitted and
// completed, the request finished, under a limit it does not reach. (The
// engine serves a group without limits without the stack.) A 4 KiB reader
// allocates nothing; a read of a whole device I/O allocates its pages'
// headers in the cache.
func BenchmarkRead(b *testing.B) {
	b.Run("4k", func(b *testing.B) { benchRead(b, 4<<10) })
	b.Run("128k", func(b *testing.B) { benchRead(b, 128<<10) })
}
