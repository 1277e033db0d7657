package engine

import (
	"context"
	"runtime"
	"testing"
)

// TestReadAllocs: a 4 KiB read under a limit it does not reach allocates
// nothing when its page is cached, and a sequential reader through a file
// larger than the cache allocates only per device read (the pages' headers
// and the read's goroutine), a fraction of one allocation per read.
func TestReadAllocs(t *testing.T) {
	if raceOn {
		t.Skip("allocation counts are not kept under the race detector")
	}
	e, g, h := unreached(t)
	opts := e.Options()
	dst := make([]byte, 4<<10)
	ctx := context.Background()
	off := int64(0)
	read := func() {
		if n, err := e.Read(ctx, h, g, dst, off); err != nil || n != len(dst) {
			t.Fatalf("read at %d: %d, %v", off, n, err)
		}
	}

	read()
	if a := testing.AllocsPerRun(1000, read); a != 0 {
		t.Errorf("cached page: %v allocations per read, want 0", a)
	}

	next := func() {
		read()
		off = (off + int64(len(dst))) % (4 * opts.CacheBytes)
	}
	for off < 2*opts.CacheBytes { // the cache full and evicting
		next()
	}
	const reads = 20000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range reads {
		next()
	}
	runtime.ReadMemStats(&after)
	per := float64(after.Mallocs-before.Mallocs) / reads
	t.Logf("sequential: %.3f allocations per 4 KiB read", per)
	if per > 0.1 {
		t.Errorf("sequential: %.3f allocations per 4 KiB read, want under 0.1 (a few per device read of up to %d KiB)",
			per, opts.MaxIO>>10)
	}
}
