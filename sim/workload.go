package sim

import (
	"math/rand/v2"

	"sluice/device"
	"sluice/readahead"
	"sluice/stack"
	"sluice/throttle"
)

// The workload: fio-like jobs, each of numjobs threads working on a file,
// and the application requests (calls) they issue; what each job has done
// is counted here for the report.

// file is a simulated backing file: its size and device.
type file struct {
	ino  uint64
	size int64
	// base is where the file starts on its device (fileSpan apart): a
	// device I/O's offset there is base plus the file's offset, so that
	// the model sees which I/Os follow one another.
	base int64
	dev  *device.Model
	devi int // index of dev, and of its series
	name string
	// mirrored files live on every device of the mount's mirror set;
	// owner is the thread whose pid a read goes by when no thread is at
	// hand (a read started by the throttle's wake-up).
	mirrored bool
	owner    *thread
	wb       *stack.Handle // the kernel flusher's handle (write-throttle=writeback)
	kc       *kfile        // the kernel's page cache of it
}

// fileSpan is the room each file has on a device.
const fileSpan = 1 << 44

// thread is one copy of a job (fio's numjobs).
type thread struct {
	job     *jobRun
	h       *stack.Handle
	f       *file
	off     int64 // next sequential offset
	rng     *rand.Rand
	pid     int
	issued  int64 // bytes of requests started
	writes  int
	stopped bool
	kernel  bool            // reads through the kernel's page cache (see pagecache.go)
	cachedW bool            // writes into it (write-cache; see kernel.go)
	ra      readahead.State // the kernel's readahead of its open
}

// dirties reports whether t's writes dirty the mount's page cache (the
// write cache, or a mapping), so that its fsync writes them back first.
func (t *thread) dirties() bool { return t.cachedW || t.job.Mmap }

// jobRun gathers a job's copies and results.
type jobRun struct {
	Job
	g       *throttle.Group
	series  int // index of the group's series
	threads []*thread
	bytes   int64
	ios     int64
	shorts  int64
	clat    hist
	worst   []int64 // per bucket, the longest completion latency (ns)
	// Per bucket, the requests completed and the bytes answered.
	iosAt, bytesAt []int64
	first          int64
	last           int64
	end            int64 // runtime end, absolute
}

// op is what a call asks of sluice.
type op uint8

const (
	opRead  op = iota
	opWrite    // through sluice's write path (write-throttle=write)
	opDirty    // into the kernel's page cache (write-throttle=writeback)
	opFsync
	opSync    // sync(2): every device, after the dirty data of every group
	opFlush   // the kernel flusher writing back dirty data
	opDevSync // one device's flush for a sync
	opKRead   // a FUSE read the kernel sends for its page cache (see kread)
	opMap     // a write through a shared mapping (see kernel.mapWrite)
	opFault   // the FUSE read of a mapped page faulted in for a write
)

// call is one application request in flight, sent to sluice as FUSE
// requests of at most max-read bytes; it is reused once answered.
type call struct {
	t       *thread
	op      op
	off, n  int64 // the application request
	done    int64 // bytes answered so far
	part    int64 // bytes asked by the FUSE request in flight
	got     int64 // bytes the last answer delivered
	start   int64
	pending int           // sync: device flushes outstanding
	parent  *call         // a sync's device flush: the sync
	h       *stack.Handle // the kernel's own calls: the file's handle
	wb      *writeback    // opFlush: whose dirty data it writes
	req     stack.Request
}

func (r *runner) newCall(t *thread, o op, off, n int64) *call {
	var c *call
	if k := len(r.free); k > 0 {
		c = r.free[k-1]
		r.free = r.free[:k-1]
	} else {
		c = new(call)
		c.req.Value = c
	}
	c.t, c.op, c.off, c.n, c.done, c.part, c.got, c.start, c.pending, c.parent, c.h, c.wb = t, o, off, n, 0, 0, 0, r.now, 0, nil, nil, nil
	return c
}

// startJob starts a job: each of its threads issues iodepth requests.
func (r *runner) startJob(j *jobRun) {
	for _, t := range j.threads {
		for range max(j.IODepth, 1) {
			r.next(t)
		}
	}
}

// next starts the thread's next application request, if the job goes on.
func (r *runner) next(t *thread) {
	j := t.job
	if t.stopped {
		return
	}
	if j.end > 0 && r.now >= j.end {
		t.stopped = true
		return
	}
	if j.RW == "sync" {
		t.stopped = true // one sync(2) per copy
		r.send(r.newCall(t, opSync, 0, 0))
		return
	}
	size := int64(j.Size)
	bs := int64(j.BS)
	if !j.TimeBased && t.issued >= size {
		t.stopped = true
		return
	}
	var off int64
	switch j.RW {
	case "randread", "randwrite":
		off = t.rng.Int64N(max(size/bs, 1)) * bs
	default:
		if t.off >= size {
			t.off = 0 // time-based: around again
		}
		off = t.off
		t.off += bs
	}
	t.issued += bs
	o := opRead
	if j.RW == "write" || j.RW == "randwrite" {
		o = opWrite
		switch {
		case j.Mmap:
			o = opMap
		case r.kernel.writeback || t.cachedW:
			o = opDirty
		}
	}
	r.send(r.newCall(t, o, off, bs))
}

// finished records an application request and starts the next, after an
// fsync when one is due.
func (r *runner) finished(c *call) {
	t := c.t
	j := t.job
	r.busy = r.now
	j.ios++
	j.tally(r.now, 1, 0)
	j.clat.add(r.now - c.start)
	b := int(r.now / bucket)
	for len(j.worst) <= b {
		j.worst = append(j.worst, 0)
	}
	j.worst[b] = max(j.worst[b], r.now-c.start)
	if j.first == 0 {
		j.first = c.start
	}
	j.last = r.now
	write := c.op == opWrite || c.op == opDirty || c.op == opMap
	r.release(c)
	if write && j.Fsync > 0 {
		if t.writes++; t.writes%j.Fsync == 0 {
			r.send(r.newCall(t, opFsync, 0, 0))
			return
		}
	}
	r.next(t)
}

// tally counts ios requests completed and bytes answered at time at, in
// the job's per-bucket counts.
func (j *jobRun) tally(at, ios, bytes int64) {
	b := int(at / bucket)
	for len(j.iosAt) <= b {
		j.iosAt = append(j.iosAt, 0)
		j.bytesAt = append(j.bytesAt, 0)
	}
	j.iosAt[b] += ios
	j.bytesAt[b] += bytes
}

func (r *runner) release(c *call) {
	c.t, c.parent, c.h, c.wb = nil, nil, nil, nil
	r.free = append(r.free, c)
}
