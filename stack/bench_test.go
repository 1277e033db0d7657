package stack

import (
	"testing"

	"sluice/throttle"
)

// benchRead drives sequential reads of bs bytes through the stack for a
// group under a limit it never reaches, completing every device read at
// once with one shared page, and reports the allocations per read.
func benchRead(b *testing.B, bs, span int64) {
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
	ios := 0
	take := func(a Actions) { ios += len(a.Start); pend = append(pend, a.Start...); s.Recycle(a) }
	// complete finishes every device read started, at once.
	complete := func() {
		for len(pend) > 0 {
			io := pend[len(pend)-1]
			pend = pend[:len(pend)-1]
			pages = pages[:0]
			for range io.Len / PageSize {
				pages = append(pages, shared)
			}
			take(s.Complete(now, io, pages, nil))
		}
	}
	r := &Request{}
	off := int64(0)
	if span < 1<<40 {
		// Read the span once, so that every timed read finds its pages
		// in the cache.
		for ; off < span; off += bs {
			take(s.Read(now, h, g, off, bs, r))
			complete()
			now += 1000
		}
		off, ios = 0, 0
	}
	b.ReportAllocs()
	b.SetBytes(bs)
	b.ResetTimer()
	for range b.N {
		take(s.Read(now, h, g, off, bs, r))
		for !r.done {
			complete()
			if !r.done {
				now += 1e6
				take(s.Tick(now))
			}
		}
		if r.Size() != bs {
			b.Fatalf("read %d@%d: %d bytes", bs, off, r.Size())
		}
		off = (off + bs) % span
		now += 1000
	}
	if span < 1<<40 && ios > 0 {
		b.Fatalf("%d device reads of a span read before: its pages were not all in the cache", ios)
	}
}

// BenchmarkRead: one application read in, its device reads admitted and
// completed, the request finished, under a limit it does not reach. (The
// engine serves a group without limits without the stack.) A 4 KiB reader
// allocates nothing; a read of a whole device I/O allocates its pages'
// headers in the cache. 4k-cached reads 4 KiB pages already in the cache,
// going round 16 MiB of them (as the simulator's readers of one shared
// file do): what the stack costs an application read that makes no
// device I/O.
func BenchmarkRead(b *testing.B) {
	b.Run("4k", func(b *testing.B) { benchRead(b, 4<<10, 1<<40) })
	b.Run("4k-cached", func(b *testing.B) { benchRead(b, 4<<10, 16<<20) })
	b.Run("128k", func(b *testing.B) { benchRead(b, 128<<10, 1<<40) })
}
