package stack

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"sluice/throttle"
)

const (
	ms  = int64(1e6)
	sec = int64(1e9)
	KiB = 1 << 10
	MiB = 1 << 20
)

// rig drives a stack on a synthetic clock with an in-memory file: device
// reads complete when the test says so.
type rig struct {
	t      *testing.T
	s      *Stack
	now    int64
	data   []byte
	wake   int64
	queued []*IO // started, not yet completed
	done   []*Request
	log    []string // every device I/O started: op, offset, length, time
}

// newRig returns a stack with the default options, changed by each of set,
// and a file of size bytes.
func newRig(t *testing.T, size int, set ...func(*Options)) *rig {
	opts := DefaultOptions()
	for _, f := range set {
		f(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*7 + i/4096)
	}
	return &rig{t: t, s: s, data: data, wake: -1}
}

func noBudget(o *Options)    { o.ReadaheadBudget = false }
func noReadahead(o *Options) { o.Readahead = 0 }

func (r *rig) take(a Actions) {
	for _, io := range a.Start {
		r.log = append(r.log, fmt.Sprintf("%d %d+%d @%d", io.Op, io.Off, io.Len, r.now))
	}
	r.queued = append(r.queued, a.Start...)
	r.done = append(r.done, a.Done...)
	r.wake = a.Wake
}

// completeAll finishes every started device I/O: reads with the file's
// bytes, writes and flushes in full (the rig's file does not change).
func (r *rig) completeAll() {
	for len(r.queued) > 0 {
		io := r.queued[0]
		r.queued = r.queued[1:]
		if io.Op != OpRead {
			r.take(r.s.Wrote(r.now, io, io.Len, nil))
			continue
		}
		var pages [][]byte
		for off := io.Off; off < min(io.Off+io.Len, int64(len(r.data))); off += PageSize {
			pages = append(pages, bytes.Clone(r.data[off:min(off+PageSize, int64(len(r.data)))]))
		}
		r.take(r.s.Complete(r.now, io, pages, nil))
	}
}

// advance moves the clock to the stack's wake-up time and ticks.
func (r *rig) advance() bool {
	if r.wake < 0 {
		return false
	}
	r.now = max(r.now, r.wake)
	r.take(r.s.Tick(r.now))
	return true
}

// read issues a read and runs the clock until it finishes.
func (r *rig) read(h *Handle, g *throttle.Group, off, n int64) *Request {
	req := &Request{}
	r.take(r.s.Read(r.now, h, g, off, n, req))
	for !req.done {
		r.completeAll()
		if req.done {
			break
		}
		if !r.advance() {
			r.t.Fatalf("read %d@%d never finishes", n, off)
		}
	}
	r.completeAll()
	buf := make([]byte, n)
	got := req.CopyTo(buf)
	start := min(off, int64(len(r.data)))
	end := min(off+n, int64(len(r.data)))
	if !bytes.Equal(buf[:got], r.data[start:end]) {
		r.t.Fatalf("read %d@%d: %d bytes, want %d identical to the file", n, off, got, end-off)
	}
	return req
}

func (r *rig) metrics(name string) GroupMetrics {
	for _, g := range r.s.Metrics().Groups {
		if g.Group == name {
			return g
		}
	}
	r.t.Fatalf("no group %s", name)
	return GroupMetrics{}
}

// TestBudgetClampsReadahead: a 4 KiB reader at 1 MiB/s that keeps up with
// its limit has no credit and reads only what it asks for; with the budget
// off, it reads whole readahead windows into debt.
func TestBudgetClampsReadahead(t *testing.T) {
	for _, tc := range []struct {
		name     string
		noBudget bool
		wantRA   bool
	}{{"on", false, false}, {"off", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, 4*MiB, func(o *Options) { o.ReadaheadBudget = !tc.noBudget })
			r.s.SetLimits(0, "default", throttle.Limits{RBPS: MiB})
			g := r.s.Group("default")
			h := &Handle{Ino: 1}
			for off := int64(0); off < MiB; off += 4 * KiB {
				r.read(h, g, off, 4*KiB)
			}
			m := r.metrics("default")
			if tc.wantRA != (m.RAIssued > 0) {
				t.Fatalf("readahead issued %d bytes; want some: %v", m.RAIssued, tc.wantRA)
			}
			if !tc.wantRA && m.RIOs != 256 {
				t.Fatalf("%d device reads for 256 demand reads with no credit", m.RIOs)
			}
			// Either way the limit holds: 1 MiB took about 1 s of the group's schedule.
			if r.now < 900*ms || r.now > 1010*ms {
				t.Fatalf("1 MiB at 1 MiB/s finished at %v ms", r.now/ms)
			}
		})
	}
}

// TestBudgetGivesIdleReaderReadahead: a slow reader (idle between reads)
// banks credit, so its readahead runs ahead within that credit.
func TestBudgetGivesIdleReaderReadahead(t *testing.T) {
	r := newRig(t, 4*MiB)
	r.s.SetLimits(0, "default", throttle.Limits{RBPS: 100 * MiB})
	g := r.s.Group("default")
	h := &Handle{Ino: 1}
	for off := int64(0); off < MiB; off += 4 * KiB {
		r.read(h, g, off, 4*KiB)
		r.now += ms // the application thinks between reads
	}
	m := r.metrics("default")
	if m.RIOs > 32 {
		t.Fatalf("%d device reads for 1 MiB of 4 KiB reads with credit: readahead did not run", m.RIOs)
	}
	if m.RAUsed < 900*KiB || m.RAWasted != 0 {
		t.Fatalf("readahead used %d wasted %d", m.RAUsed, m.RAWasted)
	}
}

// TestCancelWithdraws: an interrupted read's queued demand I/O leaves the
// queue uncharged, and its pages leave the cache.
func TestCancelWithdraws(t *testing.T) {
	r := newRig(t, 4*MiB, noReadahead)
	r.s.SetLimits(0, "default", throttle.Limits{RBPS: MiB})
	g := r.s.Group("default")
	h := &Handle{Ino: 1}
	r.read(h, g, 0, MiB) // the group owes 1 s
	req := &Request{}
	r.take(r.s.Read(r.now, h, g, MiB, 128*KiB, req))
	if r.s.queue.Len() != 1 {
		t.Fatalf("queue holds %d, want the one demand I/O", r.s.queue.Len())
	}
	r.take(r.s.Cancel(r.now, req))
	if r.s.queue.Len() != 0 || req.Err != ErrCanceled {
		t.Fatalf("after cancel: queue %d, err %v", r.s.queue.Len(), req.Err)
	}
	if n := r.s.files[1].pages.len(); n != 256 {
		t.Fatalf("%d pages cached, want only the 256 of the first read", n)
	}
	// The next read waits only for the first read's debt: 1 s.
	r.read(h, g, 2*MiB, 4*KiB)
	if r.now > sec+ms {
		t.Fatalf("next read finished at %d ms: the cancelled read was charged", r.now/ms)
	}
}

// TestEOFRefund: a window past the end of file reads short; the unread
// bytes are refunded and nothing past the end is cached.
func TestEOFRefund(t *testing.T) {
	r := newRig(t, 10000, noBudget)
	r.s.SetLimits(0, "default", throttle.Limits{RBPS: MiB})
	g := r.s.Group("default")
	h := &Handle{Ino: 1}
	req := r.read(h, g, 0, 64*KiB)
	if req.Size() != 10000 {
		t.Fatalf("read at 0 returned %d bytes, want 10000", req.Size())
	}
	if req := r.read(h, g, 20000, 4*KiB); req.Size() != 0 {
		t.Fatalf("read past the end returned %d bytes", req.Size())
	}
	if n := r.s.files[1].pages.len(); n != 3 {
		t.Fatalf("%d pages cached for a 10000-byte file, want 3", n)
	}
	m := r.metrics("default")
	if m.RBytes != 10000 || m.AppRBytes != 10000 {
		t.Fatalf("device %d, app %d bytes; want 10000 each", m.RBytes, m.AppRBytes)
	}
	// Refunds leave the group owing only for 10000 bytes (~9.5 ms), not
	// for the windows it asked for.
	if e := r.s.tree.Eligible(r.now, g, throttle.Read); e > 10*ms {
		t.Fatalf("group eligible at %d ms after reading 10000 bytes at 1 MiB/s", e/ms)
	}
}

// TestEvictionCountsWaste: readahead evicted before use is wasted, and the
// cache stays within its bound.
func TestEvictionCountsWaste(t *testing.T) {
	r := newRig(t, 64*MiB, noBudget, func(o *Options) { o.CacheBytes = 2 * MiB })
	g := r.s.Group("default")
	r.s.SetLimits(0, "default", throttle.Limits{RBPS: 1 << 40})
	// Many streams each read one page and move on: their readahead windows
	// are never used, and evicting them is waste.
	for i := int64(0); i < 1024; i++ {
		h := &Handle{Ino: 1}
		r.read(h, g, i*64*KiB, 4*KiB)
		r.read(h, g, i*64*KiB+4*KiB, 4*KiB) // a sequential miss: a window with readahead
	}
	m := r.s.Metrics()
	if m.CacheBytes > 2*MiB {
		t.Fatalf("cache holds %d bytes, bound 2 MiB", m.CacheBytes)
	}
	d := r.metrics("default")
	if d.RAWasted == 0 || d.RAWasted > d.RAIssued {
		t.Fatalf("readahead issued %d, wasted %d", d.RAIssued, d.RAWasted)
	}
}

// TestTruncateGrowDropsTail: a file grown by truncate is read to its new
// end, not to the end its cached last page remembers.
func TestTruncateGrowDropsTail(t *testing.T) {
	r := newRig(t, 5000)
	r.s.SetLimits(0, "default", throttle.Limits{RBPS: 1 << 40})
	g := r.s.Group("default")
	h := &Handle{Ino: 1}
	if req := r.read(h, g, 0, 64*KiB); req.Size() != 5000 {
		t.Fatalf("read %d bytes of a 5000-byte file", req.Size())
	}
	r.data = append(r.data, make([]byte, 100000-5000)...)
	r.s.Truncated(1, 100000)
	if req := r.read(h, g, 0, 64*KiB); req.Size() != 64*KiB {
		t.Fatalf("after growing to 100000 bytes, a 64 KiB read returned %d", req.Size())
	}
}

// TestEOFProbeFree: reading to the end of a small file costs one device
// I/O, not one more for the read that finds the end; after the end's trust
// expires, a file grown behind sluice's back is read again.
func TestEOFProbeFree(t *testing.T) {
	r := newRig(t, 8192)
	r.s.SetLimits(0, "default", throttle.Limits{RIOPS: 100})
	g := r.s.Group("default")
	h := &Handle{Ino: 1}
	r.read(h, g, 0, 128*KiB)
	if req := r.read(h, g, 8192, 128*KiB); req.Size() != 0 {
		t.Fatalf("read at the end returned %d bytes", req.Size())
	}
	if m := r.metrics("default"); m.RIOs != 1 {
		t.Fatalf("%d device reads to read an 8 KiB file to its end, want 1", m.RIOs)
	}
	r.data = append(r.data, make([]byte, 4096)...)
	r.now += 200 * ms
	if req := r.read(h, g, 8192, 128*KiB); req.Size() != 4096 {
		t.Fatalf("after the file grew, a read at the old end returned %d bytes", req.Size())
	}
}

// TestStaleCompletionAfterForget: a device read issued before a file was
// forgotten (its cache dropped because the file changed) and finishing
// after it cannot set the end of the file that follows.
func TestStaleCompletionAfterForget(t *testing.T) {
	r := newRig(t, 8192)
	g := r.s.Group("default")
	h := &Handle{Ino: 7}
	req := &Request{}
	r.take(r.s.Read(r.now, h, g, 0, 128*KiB, req))
	if len(r.queued) == 0 {
		t.Fatal("no device read issued")
	}
	stale := r.queued
	r.queued = nil
	r.s.Forget(7)
	// The file grew behind the cache; a fresh read must see all of it even
	// though the stale read below reports the old, shorter end.
	r.data = append(r.data, make([]byte, 8192)...)
	// The file is read again, and then the stale read lands.
	r.read(h, g, 0, 4096)
	// The stale read of the first 128 KiB finds what the file held when
	// it was issued: 8 KiB.
	if stale[0].Off != 0 {
		t.Fatalf("first device read at %d, want 0", stale[0].Off)
	}
	r.take(r.s.Complete(r.now, stale[0], [][]byte{make([]byte, PageSize), make([]byte, PageSize)}, nil))
	if got := r.read(h, g, 0, 128*KiB).Size(); got != 16384 {
		t.Fatalf("read after a stale completion: %d bytes, want 16384", got)
	}
}

// TestIOPSLimitKeepsReadahead: an IOPS limit does not switch readahead
// off: a sequential reader at riops=10 gets whole readahead windows per
// I/O, not one page per I/O.
func TestIOPSLimitKeepsReadahead(t *testing.T) {
	r := newRig(t, 4*MiB)
	r.s.SetLimits(0, "default", throttle.Limits{RIOPS: 10})
	g := r.s.Group("default")
	h := &Handle{Ino: 1}
	for off := int64(0); off < MiB; off += 4 * KiB {
		r.read(h, g, off, 4*KiB)
	}
	m := r.metrics("default")
	if m.RIOs > 16 {
		t.Fatalf("%d device reads for 1 MiB read sequentially at riops=10: readahead was switched off", m.RIOs)
	}
	// About one 128 KiB I/O per 100 ms: 1 MiB in about a second, where page
	// by page it would take 25 s.
	if r.now > 2*sec {
		t.Fatalf("1 MiB at riops=10 finished at %v ms", r.now/ms)
	}
}

// TestReadCachedIsRead: serving a sequential reader's cache hits with
// ReadCached leaves the stack as one Read per read would: the same device
// I/Os at the same times, the same counters, the same readahead, though
// the hits are marked used at the first one's time.
func TestReadCachedIsRead(t *testing.T) {
	const size, n = 4 * MiB, 4 * KiB
	for _, tc := range []struct {
		name string
		rate int64
		set  []func(*Options)
	}{
		{"budget, below the limit", 1 << 30, nil},
		{"no budget, at the limit", MiB, []func(*Options){noBudget}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newRig(t, size, tc.set...), newRig(t, size, tc.set...)
			for _, r := range []*rig{a, b} {
				r.s.SetLimits(0, "default", throttle.Limits{RBPS: tc.rate})
			}
			ha, hb := &Handle{Ino: 1}, &Handle{Ino: 1}
			// A read every millisecond at most; ReadCached serves a run of
			// hits at the first one's time.
			const think = ms
			for off := int64(0); off < size; off += n {
				a.now += think
				a.read(ha, a.s.Group("default"), off, n)
			}
			batched := 0
			for off := int64(0); off < size; {
				b.now += think
				k, acts := b.s.ReadCached(b.now, hb, b.s.Group("default"), off, n, int((size-off)/n))
				b.take(acts)
				if k > 0 {
					batched += k
					off += int64(k) * n
					b.now += int64(k-1) * think
					continue
				}
				b.read(hb, b.s.Group("default"), off, n)
				off += n
			}
			if batched < size/n/2 {
				t.Errorf("ReadCached served %d of %d reads; want most", batched, size/n)
			}
			if !slices.Equal(a.log, b.log) {
				t.Errorf("device I/Os differ:\nRead:       %v\nReadCached: %v", a.log, b.log)
			}
			if ma, mb := a.metrics("default"), b.metrics("default"); ma != mb {
				t.Errorf("counters differ:\nRead:       %+v\nReadCached: %+v", ma, mb)
			}
			if a.now != b.now {
				t.Errorf("finished at %d and %d", a.now, b.now)
			}
		})
	}
}

// TestFreedBuffersUnused: a page buffer the stack hands back (Actions.Free)
// is held by nothing: not by a cached page, not by a request still
// waiting. Each freed buffer is overwritten at once, as a driver that reads
// into it again would; every request, copied out when it finishes, still
// gets the file's bytes. Reads overlap, complete out of order, and the file
// is changed, truncated and forgotten under them, in a cache of half the file.
func TestFreedBuffersUnused(t *testing.T) {
	r := newRig(t, 4*MiB, func(o *Options) { o.CacheBytes = 2 * MiB })
	r.s.SetLimits(0, "default", throttle.Limits{RBPS: 64 * MiB})
	g := r.s.Group("default")
	rnd := rand.New(rand.NewPCG(1, 2))
	freed := map[*byte]bool{}
	type pending struct {
		req     *Request
		off, n  int64
		version int
	}
	var waiting []pending
	version := 0 // bumped when the file changes: a read that spans it may see either
	checked := 0
	check := func(p pending) {
		buf := make([]byte, p.n)
		got := p.req.CopyTo(buf)
		if p.version != version {
			return
		}
		checked++
		end := min(p.off+p.n, int64(len(r.data)))
		if p.off < end && !bytes.Equal(buf[:got], r.data[p.off:end]) {
			t.Fatalf("read %d@%d: wrong bytes (a buffer it held was freed)", p.n, p.off)
		}
	}
	take := func(a Actions) {
		r.queued = append(r.queued, a.Start...)
		for _, d := range a.Done {
			i := slices.IndexFunc(waiting, func(p pending) bool { return p.req == d })
			check(waiting[i])
			waiting = slices.Delete(waiting, i, i+1)
		}
		for _, b := range a.Free {
			if freed[&b[0]] {
				t.Fatalf("a buffer freed twice")
			}
			freed[&b[0]] = true
			for i := range b {
				b[i] = 0xee
			}
		}
		r.wake = a.Wake
	}
	handles := []*Handle{{Ino: 1}, {Ino: 1}, {Ino: 1}}
	for range 6000 {
		switch k := rnd.IntN(20); {
		case k < 11: // a read, sequential or not
			h := handles[rnd.IntN(len(handles))]
			off := rnd.Int64N(int64(len(r.data)) / PageSize * 2 / 3 * PageSize)
			n := int64(1+rnd.IntN(8)) * PageSize / int64(1+rnd.IntN(2))
			req := &Request{}
			waiting = append(waiting, pending{req, off, n, version})
			take(r.s.Read(r.now, h, g, off, n, req))
		case k < 15 && len(r.queued) > 0: // one device read finishes
			i := rnd.IntN(len(r.queued))
			io := r.queued[i]
			r.queued = slices.Delete(r.queued, i, i+1)
			var pages [][]byte
			for off := io.Off; off < min(io.Off+io.Len, int64(len(r.data))); off += PageSize {
				pages = append(pages, bytes.Clone(r.data[off:min(off+PageSize, int64(len(r.data)))]))
			}
			take(r.s.Complete(r.now, io, pages, nil))
		case k == 15 && rnd.IntN(50) == 0: // the file changes under the cache
			off := rnd.Int64N(int64(len(r.data)) - PageSize)
			r.data[off] ^= 0xff
			version++
			r.s.Changed(1, off, 1)
		case k == 16 && rnd.IntN(50) == 0:
			r.s.Forget(1)
			version++
		default:
			r.now += 5 * ms
			take(r.s.Tick(r.now))
		}
	}
	if len(freed) == 0 || checked < 500 {
		t.Fatalf("%d buffers freed, %d reads checked: the test did not exercise eviction under waiting reads", len(freed), checked)
	}
	t.Logf("%d buffers freed and overwritten, %d reads checked", len(freed), checked)
}
