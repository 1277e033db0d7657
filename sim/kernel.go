package sim

import (
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
// Simplifications: rewriting a page that is still dirty counts it again;
// the flusher keeps flushDepth pieces of each group in flight and never
// waits for dirty_expire or the background threshold.
type kernel struct {
	writeback bool
	limit     int64        // dirty limit, bytes
	dirtyB    int64        // bytes dirty now
	groups    []*writeback // every group that has dirtied data, in order
	blocked   []*call      // writers held for room under the limit
	syncs     []syncWait
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
}

func (k *kernel) init(sc *Scenario) {
	k.writeback = sc.Mount.WriteThrottle == "writeback"
	k.limit = int64(sc.Mount.DirtyLimit)
	if k.limit == 0 {
		k.limit = defaultDirtyLimit
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
	r.answered(c)
	k.flush(r, wb)
}

// flush starts writing back wb's oldest dirty data.
func (k *kernel) flush(r *runner, wb *writeback) {
	for wb.inflight < flushDepth && wb.head < len(wb.extents) {
		e := &wb.extents[wb.head]
		n := min(e.n, r.opts.MaxIO)
		c := r.newCall(nil, opFlush, e.off, n)
		c.part, c.wb = n, wb
		if e.f.wb == nil {
			e.f.wb = &stack.Handle{Ino: e.f.ino, File: e.f}
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
		r.apply(r.st.Write(r.now, c.h, wb.g, c.off, n, &c.req))
	}
}

// cleaned is the flusher's piece c written back.
func (k *kernel) cleaned(r *runner, c *call) {
	wb := c.wb
	wb.inflight--
	wb.cleaned += c.part
	k.dirtyB -= c.part
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
		w.targets = append(w.targets, wb.dirtied)
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
