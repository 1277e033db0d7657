package sim

import (
	"time"

	"sluice/stack"
	"sluice/throttle"
)

// kernel models Linux's buffered writes as a block-layer throttle sees
// them, for write-throttle=writeback (seed 003): write() copies into the
// page cache and returns at once, so long as the dirty data stays under
// the dirty limit (balance_dirty_pages holds a writer until there is
// room); the flusher writes each group's dirty data back in max-io pieces
// through the group's throttle, oldest first, as cgroup writeback charges
// it to the group that dirtied it; and sync(2) waits until everything
// dirty when it was called has been written back, whoever wrote it, then
// flushes every device.
//
// With write-throttle=write (sluice's design), a write goes through the
// stack and is paced at write(); what it admits is written at once, so a
// sync waits only for the devices' flushes.
//
// With write-cache (the mount's --write-cache), the mount's page cache
// takes the writes of groups without a write limit (and, in kernel cache
// mode, of groups whose limits stack.WritesCached takes) the same way, up
// to the mount's dirty bound (map-dirty, 64 MiB by default), and the
// flusher's pieces go through the stack, paced for a limited group. A
// sync(2) does not wait for them, as Linux does not wait for a FUSE
// server; an fsync waits for what the writer's group has dirtied, then
// flushes the file.
//
// Simplifications: rewriting a page that is still dirty counts it again;
// the flusher keeps flushDepth pieces of each group in flight and never
// waits for dirty_expire or the background threshold.
type kernel struct {
	writeback bool
	cache     bool         // write-cache: the mount's page cache (see above)
	limit     int64        // dirty limit, bytes
	dirtyB    int64        // bytes dirty now
	groups    []*writeback // every group that has dirtied data, in order
	blocked   []*call      // writers held for room under the limit
	syncs     []syncWait

	// The write cache's dirty throttling (see pause).
	writers       []writer
	bw            float64 // writeback bandwidth estimate, bytes/s; 0: none yet
	bwAt, bwBytes int64   // the current period: its start, bytes written back
}

// writer is a thread that wrote into the write cache, and when it last did.
type writer struct {
	t  *thread
	at int64
}

// flushDepth is how many pieces of one group the flusher has in flight.
const flushDepth = 4

// writeback is one group's dirty data, oldest first.
type writeback struct {
	g                *throttle.Group
	extents          []extent
	head             int
	inflight         int
	dirtied, cleaned int64 // running totals, bytes
	sent             int64 // bytes handed to the flusher so far
	mapped           bool  // dirtied through a mapping: written back as debt
	syncTo           int64 // write cache: flush up to this much for an fsync
}

type extent struct {
	f      *file
	off, n int64
}

// syncWait is a sync(2) waiting for the data dirty when it was called:
// targets[i] is groups[i].dirtied then.
type syncWait struct {
	c       *call
	targets []int64
	fsync   bool // an fsync: then the file's flush
}

func (k *kernel) init(sc *Scenario) {
	k.writeback = sc.Mount.WriteThrottle == "writeback"
	k.limit = int64(sc.Mount.DirtyLimit)
	if k.limit == 0 {
		k.limit = defaultDirtyLimit
	}
	mmap := false
	for _, j := range sc.Jobs {
		mmap = mmap || j.Mmap
	}
	if k.cache = sc.Mount.WriteCache || mmap; k.cache {
		k.limit = int64(sc.Mount.MapDirty)
		switch {
		case k.limit > 0:
		case sc.Mount.WriteCache:
			k.limit = defaultWriteCacheDirty
		default:
			k.limit = defaultMapDirty
		}
	}
}

func (k *kernel) group(g *throttle.Group) *writeback {
	for _, wb := range k.groups {
		if wb.g == g {
			return wb
		}
	}
	wb := &writeback{g: g}
	k.groups = append(k.groups, wb)
	return wb
}

// dirty copies c's part into the page cache, or holds the writer while
// the dirty data is at the limit.
func (k *kernel) dirty(r *runner, c *call) {
	if k.dirtyB > 0 && k.dirtyB+c.part > k.limit {
		k.blocked = append(k.blocked, c)
		return
	}
	t := c.t
	k.dirtyB += c.part
	wb := k.group(t.job.g)
	off := c.off + c.done
	if n := len(wb.extents); n > wb.head {
		if e := &wb.extents[n-1]; e.f == t.f && e.off+e.n == off {
			e.n += c.part
		} else {
			wb.extents = append(wb.extents, extent{t.f, off, c.part})
		}
	} else {
		wb.extents = append(wb.extents, extent{t.f, off, c.part})
	}
	wb.dirtied += c.part
	c.got = c.part
	if k.cache {
		r.push(event{at: r.now + k.pause(r, t, c.part), kind: evReply, c: c})
	} else {
		r.answered(c)
	}
	k.flush(r, wb)
}

// The write cache's dirty throttling, after Linux's balance_dirty_pages
// for a FUSE mount (strictlimit, its own bound): below the freerun point,
// three quarters of the bound, a write costs only its copy; above it
// every writer of the mount is paused so that it dirties at the mount's
// writeback bandwidth shared among the writers, times a position factor
// from 2 at the freerun point through 1 half-way to 0 at the bound. The
// bandwidth is measured over periods of bwPeriod, as the kernel does,
// starting from its initial 100 MiB/s; the writers counted are those that
// wrote in the last period. Pauses are at most maxPause.
const (
	bwPeriod = int64(200 * time.Millisecond)
	initBW   = 100 << 20
	maxPause = int64(200 * time.Millisecond)
)

// pause is how long t's write of n bytes into the write cache takes.
func (k *kernel) pause(r *runner, t *thread, n int64) int64 {
	k.noteWriter(r.now, t)
	freerun := k.limit * 3 / 4
	if k.dirtyB <= freerun {
		return cacheHit
	}
	pos := 2 * float64(k.limit-k.dirtyB) / float64(k.limit-freerun)
	rate := k.writeBW() / float64(max(len(k.writers), 1)) * pos
	if rate <= 0 {
		return maxPause
	}
	return max(cacheHit, min(maxPause, int64(float64(n)/rate*1e9)))
}

// noteWriter counts t among the writers of the last period.
func (k *kernel) noteWriter(now int64, t *thread) {
	keep := k.writers[:0]
	seen := false
	for _, w := range k.writers {
		if w.at >= now-bwPeriod {
			seen = seen || w.t == t
			if w.t == t {
				w.at = now
			}
			keep = append(keep, w)
		}
	}
	k.writers = keep
	if !seen {
		k.writers = append(k.writers, writer{t, now})
	}
}

// writeBW is the mount's writeback bandwidth estimate, bytes/s.
func (k *kernel) writeBW() float64 {
	if k.bw == 0 {
		return initBW
	}
	return k.bw
}

// wrote adds n bytes written back at now to the bandwidth estimate.
func (k *kernel) wrote(now, n int64) {
	if k.bwAt == 0 {
		k.bwAt = now
	}
	k.bwBytes += n
	if d := now - k.bwAt; d >= bwPeriod {
		sample := float64(k.bwBytes) / (float64(d) / 1e9)
		if k.bw == 0 {
			k.bw = sample
		} else {
			k.bw = (3*k.bw + sample) / 4
		}
		k.bwAt, k.bwBytes = now, 0
	}
}

// mapWrite is a write through a shared mapping: the pages it touches
// that are not in the page cache are faulted in first, by a FUSE read
// that sluice serves as any read (waiting while the group owes for its
// writeback); then the write dirties them like any cached write.
func (k *kernel) mapWrite(r *runner, c *call) {
	t := c.t
	kf := r.kfileOf(t.f)
	off := c.off + c.done
	lo, hi := off/stack.PageSize, (off+c.part-1)/stack.PageSize+1
	for p := lo; p < hi; p++ {
		if !bit(kf.cached, p) {
			q := p + 1
			for q < hi && !bit(kf.cached, q) {
				q++
			}
			fc := r.newCall(t, opFault, p*stack.PageSize, (q-p)*stack.PageSize)
			fc.parent = c
			r.push(event{at: r.now + r.fuseLat/2, kind: evSubmit, c: fc})
			return
		}
	}
	k.group(t.job.g).mapped = true
	k.dirty(r, c)
}

// faulted is sluice's answer to the fault read fc: the pages are in the
// page cache half a round trip later, and the write goes on.
func (k *kernel) faulted(r *runner, fc *call) {
	kf := r.kfileOf(fc.t.f)
	for p := fc.off / stack.PageSize; p < (fc.off+fc.n)/stack.PageSize; p++ {
		setBit(&kf.cached, p, true)
	}
	c := fc.parent
	r.release(fc)
	r.push(event{at: r.now + r.fuseLat/2, kind: evSubmit, c: c})
}

// flush starts writing back wb's oldest dirty data: at once for the
// block layer's writeback; for the write cache, in requests of up to
// max-read (the kernel's FUSE writes), while the mount's dirty data is
// over half its bound (the background threshold) or an fsync waits.
func (k *kernel) flush(r *runner, wb *writeback) {
	for wb.inflight < flushDepth && wb.head < len(wb.extents) &&
		(!k.cache || k.dirtyB > k.limit/2 || wb.sent < wb.syncTo) {
		e := &wb.extents[wb.head]
		n := min(e.n, r.opts.MaxIO)
		if k.cache {
			n = min(e.n, r.maxRead)
		}
		wb.sent += n
		c := r.newCall(nil, opFlush, e.off, n)
		c.part, c.wb = n, wb
		if e.f.wb == nil {
			// The write cache's writeback is never cut at the wait cap.
			e.f.wb = &stack.Handle{Ino: e.f.ino, File: e.f, Whole: k.cache}
		}
		c.h = e.f.wb
		e.off += n
		if e.n -= n; e.n == 0 {
			wb.head++
			if wb.head == len(wb.extents) {
				wb.extents, wb.head = wb.extents[:0], 0
			}
		}
		wb.inflight++
		if wb.mapped {
			// The kernel's writeback of mapped pages: written at once
			// and charged as debt (stack.WriteBack), as the mount does.
			r.apply(r.st.WriteBack(r.now, c.h, wb.g, c.off, n, &c.req))
			continue
		}
		r.apply(r.st.Write(r.now, c.h, wb.g, c.off, n, &c.req))
	}
}

// cleaned is the flusher's piece c written back.
func (k *kernel) cleaned(r *runner, c *call) {
	wb := c.wb
	wb.inflight--
	wb.cleaned += c.part
	k.dirtyB -= c.part
	if k.cache {
		k.wrote(r.now, c.part)
	}
	if wb.mapped && r.st.InDebt(r.now, wb.g) {
		// As the mount: while the group owes for its writeback, the
		// pages written back leave the page cache, and the writer's next
		// write to them faults them in again and waits for the debt.
		kf := r.kfileOf(c.h.File.(*file))
		for p := c.off / stack.PageSize; p < (c.off+c.part+stack.PageSize-1)/stack.PageSize; p++ {
			setBit(&kf.cached, p, false)
		}
	}
	r.release(c)
	for len(k.blocked) > 0 && k.dirtyB+k.blocked[0].part <= k.limit {
		b := k.blocked[0]
		k.blocked = k.blocked[1:]
		k.dirty(r, b)
	}
	k.checkSyncs(r)
	k.flush(r, wb)
}

// sync starts a sync(2): it waits for what is dirty now.
func (k *kernel) sync(r *runner, c *call) {
	w := syncWait{c: c}
	for _, wb := range k.groups {
		if k.cache {
			w.targets = append(w.targets, 0) // Linux does not wait for FUSE
		} else {
			w.targets = append(w.targets, wb.dirtied)
		}
	}
	k.syncs = append(k.syncs, w)
	k.checkSyncs(r)
}

// fsync starts an fsync by a writer through the write cache or a mapping:
// it waits for what its group has dirtied, then flushes the file.
func (k *kernel) fsync(r *runner, c *call) {
	w := syncWait{c: c, fsync: true}
	own := k.group(c.t.job.g)
	own.syncTo = own.dirtied
	k.flush(r, own)
	for _, wb := range k.groups {
		if wb == own {
			w.targets = append(w.targets, wb.dirtied)
		} else {
			w.targets = append(w.targets, 0)
		}
	}
	k.syncs = append(k.syncs, w)
	k.checkSyncs(r)
}

// checkSyncs flushes the devices for every sync whose data is written.
func (k *kernel) checkSyncs(r *runner) {
	keep := k.syncs[:0]
	for _, w := range k.syncs {
		ready := true
		for i, target := range w.targets {
			if k.groups[i].cleaned < target {
				ready = false
			}
		}
		if !ready {
			keep = append(keep, w)
			continue
		}
		c := w.c
		if w.fsync {
			r.apply(r.st.Sync(r.now, c.t.h, c.t.job.g, &c.req))
			continue
		}
		c.pending = len(r.devFile)
		if c.pending == 0 {
			r.answered(c)
		}
		for _, h := range r.devFile {
			d := r.newCall(nil, opDevSync, 0, 0)
			d.parent, d.h = c, h
			r.apply(r.st.Sync(r.now, h, c.t.job.g, &d.req))
		}
	}
	k.syncs = keep
}
