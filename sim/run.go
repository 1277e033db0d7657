// Package sim runs sluice's stack on virtual time: modelled devices
// (device.Model), fio-like jobs and a FUSE round trip per request, driving
// the very stack.Stack that `sluice mount` drives through the engine. Only
// the clock, the devices and the request source are simulated. A run is
// deterministic: the same scenario and seed give the same result, byte
// for byte; page contents never exist (every page is one shared buffer),
// so memory is bounded by the stack's cache whatever a run moves.
package sim

import (
	"fmt"
	"math/rand/v2"
	"time"

	"sluice/device"
	"sluice/mirror"
	"sluice/readahead"
	"sluice/stack"
	"sluice/throttle"
)

// bucket is the width of the time series.
const bucket = int64(100 * time.Millisecond)

// zeroPage stands for every page's contents.
var zeroPage = make([]byte, stack.PageSize)

// kind is what an event does.
type kind uint8

const (
	evJob    kind = iota // a job starts its threads
	evSubmit             // a FUSE request (or sync) reaches sluice
	evReply              // its answer reaches the caller
	evDevice             // a device I/O completes
	evWake               // the stack's wake-up
	evNext               // a thread goes on after a batch of cached reads
	evProbe              // a read policy's background read completes
	evHedge              // a mirror read has run long: send it to another mirror too
)

// event is one entry of the run's timeline, ordered by (at, seq). Events
// are values in a hand-rolled heap: no closure or allocation per event.
type event struct {
	at   int64
	seq  uint64
	kind kind
	c    *call
	t    *thread
	j    *jobRun
	io   *stack.IO
	err  error
	n    int64
	dev  int   // the device of an evDevice
	m    int   // its place in the mirror set, -1 when not a mirror read
	sent int64 // when a mirror read was sent
	h    *hedged
}

// hedged is a mirror read that may be sent to a second mirror: the first
// answer without an error completes it; the other is only counted.
type hedged struct {
	left int  // reads of it in flight
	done bool // answered
}

// events is the queue of what happens next, in order of time and, at
// the same time, of push. The heap holds small keys without pointers, so
// that moving them is cheap and costs the collector nothing; the events
// themselves wait in slots of their own until popped.
type events struct {
	heap  []eventKey
	slots []event
	free  []int32
}

type eventKey struct {
	at   int64
	seq  uint64
	slot int32
}

func (k eventKey) before(o eventKey) bool {
	return k.at < o.at || k.at == o.at && k.seq < o.seq
}

func (q *events) len() int { return len(q.heap) }

func (q *events) push(e event) {
	var slot int32
	if n := len(q.free); n > 0 {
		slot, q.free = q.free[n-1], q.free[:n-1]
		q.slots[slot] = e
	} else {
		slot = int32(len(q.slots))
		q.slots = append(q.slots, e)
	}
	k := eventKey{e.at, e.seq, slot}
	h := append(q.heap, k)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !k.before(h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = k
	q.heap = h
}

func (q *events) pop() event {
	h := q.heap
	top := h[0]
	n := len(h) - 1
	last := h[n]
	h = h[:n]
	if n > 0 {
		i := 0
		for {
			l := 2*i + 1
			if l >= n {
				break
			}
			m := l
			if r := l + 1; r < n && h[r].before(h[l]) {
				m = r
			}
			if !h[m].before(last) {
				break
			}
			h[i] = h[m]
			i = m
		}
		h[i] = last
	}
	q.heap = h
	e := q.slots[top.slot]
	q.slots[top.slot] = event{} // what it points to is the collector's again
	q.free = append(q.free, top.slot)
	return e
}

// file is a simulated backing file: its size and device.
type file struct {
	ino  uint64
	size int64
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
	first   int64
	last    int64
	end     int64 // runtime end, absolute
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

type runner struct {
	sc      *Scenario
	opts    stack.Options
	now     int64
	seq     uint64
	q       events
	st      *stack.Stack
	wakeAt  int64
	devs    map[string]*device.Model
	devList []*device.Model
	devFile []*stack.Handle // per device, the handle a sync flushes
	jobs    []*jobRun
	files   []*file
	stop    int64
	fuseLat int64
	// wakeLate is how late the stack's wake-ups come, drawn from wakeRNG.
	wakeLate device.Dist
	wakeRNG  *rand.Rand
	maxRead  int64
	free     []*call
	pages    [][]byte
	names    []string  // series names, in order
	series   [][]int64 // per series, bytes per bucket
	kernel   kernel
	mirrors  []int // device indexes of the mirror set
	policy   mirror.Policy
	cur      *thread // the thread whose request is being submitted
	// busy is when the last device I/O or application request finished:
	// the run's end, whatever wake-ups (a dirty span's expiry) follow.
	busy int64
	// fanout counts, per write or flush sent to every mirror, the mirrors
	// still to answer, and the first error.
	fanout map[*stack.IO]*fan
	// pc is the kernel's page cache, and kio the device reads made for
	// the kernel's FUSE reads, by their call.
	pc  pcache
	kio map[*stack.IO]*call
}

type fan struct {
	left int
	err  error
}

func (r *runner) push(e event) {
	r.seq++
	e.seq = r.seq
	r.q.push(e)
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

// Run runs sc and returns its result.
func Run(sc *Scenario) (*Result, error) {
	opts, err := sc.options()
	if err != nil {
		return nil, err
	}
	st, err := stack.New(opts)
	if err != nil {
		return nil, err
	}
	r := &runner{sc: sc, opts: opts, st: st, wakeAt: -1, devs: map[string]*device.Model{}}
	r.stop = int64(sc.Duration)
	r.fuseLat = int64(sc.Mount.FuseLatency)
	if r.wakeLate = sc.Mount.WakeLatency.Dist; r.wakeLate.Kind != "" {
		// A stream of its own: the other draws stay as they are.
		r.wakeRNG = rand.New(rand.NewPCG(sc.Seed, 1<<40))
	}
	r.maxRead = int64(sc.Mount.MaxRead)
	if r.maxRead == 0 {
		r.maxRead = 1 << 20
	}
	r.kernel.init(sc)
	r.fanout = map[*stack.IO]*fan{}
	r.kio = map[*stack.IO]*call{}
	r.pc.limit = int64(sc.Mount.PageCache)
	if r.pc.limit == 0 {
		r.pc.limit = defaultPageCache
	}
	for i, d := range sc.Devices {
		m := &device.Model{Name: d.Name, Bandwidth: int64(d.Bandwidth), Latency: d.Latency.Dist, QueueDepth: d.QueueDepth}
		if m.Latency.Kind == "" {
			m.Latency = device.Dist{Kind: "const"}
		}
		for _, s := range d.Slow {
			m.Slow = append(m.Slow, device.Slowdown{Window: device.Window{At: time.Duration(s.At), Until: time.Duration(s.Until)}, Factor: s.Factor})
		}
		for _, f := range d.Fail {
			m.Faults = append(m.Faults, device.Fault{Window: device.Window{At: time.Duration(f.At), Until: time.Duration(f.Until)}, Op: f.Op.Op})
		}
		m.Seed(sc.Seed*1000 + uint64(i))
		r.devs[d.Name] = m
		r.devList = append(r.devList, m)
		f := &file{ino: 1<<62 + uint64(i), dev: m, devi: i, name: d.Name}
		r.devFile = append(r.devFile, &stack.Handle{Ino: f.ino, File: f})
		r.track("device " + d.Name)
	}
	for _, name := range sc.Mount.Mirrors {
		for i, d := range sc.Devices {
			if d.Name == name {
				r.mirrors = append(r.mirrors, i)
			}
		}
	}
	if len(r.mirrors) > 0 {
		name := sc.Mount.ReadPolicy
		if name == "" {
			name = mirror.Default
		}
		if r.policy, err = mirror.New(name, len(r.mirrors)); err != nil {
			return nil, err
		}
	}
	pid := 1000
	for _, g := range sc.Groups {
		l, _ := sc.limits(g)
		r.st.SetLimits(0, g.Name, l)
	}
	for ji, j := range sc.Jobs {
		jr := &jobRun{Job: j, g: r.st.Group(j.Group)}
		jr.series = r.track("group " + jr.g.Path())
		devi := 0
		for i, d := range sc.Devices {
			if d.Name == j.Device {
				devi = i
			}
		}
		dev := r.devList[devi]
		var shared *file
		for k := range max(j.NumJobs, 1) {
			f := shared
			if f == nil {
				f = &file{ino: uint64(len(r.files) + 1), dev: dev, devi: devi, name: fmt.Sprintf("%s.%d", j.Name, k),
					mirrored: len(r.mirrors) > 0 && j.Device == ""}
				if j.RW == "read" || j.RW == "randread" {
					f.size = int64(j.Size)
				}
				r.files = append(r.files, f)
				if j.Shared {
					shared = f
				}
			}
			t := &thread{job: jr, f: f, h: &stack.Handle{Ino: f.ino, File: f}, pid: pid,
				rng: rand.New(rand.NewPCG(sc.Seed, uint64(ji*1000+k+1)))}
			if j.RW == "read" || j.RW == "randread" {
				// As the mount opens it: through the kernel's page cache
				// (sluice paces what the kernel sends; a short reply at
				// the end of the file is taken whole) or with direct I/O.
				t.kernel = kernelServed(sc.Mount.CacheMode, jr.g)
				t.h.Whole = t.kernel
			} else if sc.Mount.WriteCache {
				// As the mount opens it with --write-cache: through the
				// page cache for groups without a write limit, and in
				// kernel cache mode for those whose limits qualify.
				t.cachedW = !jr.g.Limited() || sc.Mount.CacheMode == "kernel" &&
					stack.WritesCached(jr.g.PathLimits(), r.kernel.limit, opts.MaxIO)
				t.h.Whole = t.cachedW
			}
			pid++
			if f.owner == nil {
				f.owner = t
			}
			jr.threads = append(jr.threads, t)
		}
		r.jobs = append(r.jobs, jr)
		start := int64(j.Start)
		if j.Runtime > 0 {
			jr.end = start + int64(j.Runtime)
		}
		r.push(event{at: start, kind: evJob, j: jr})
	}
	for r.q.len() > 0 {
		ev := r.q.pop()
		if r.stop > 0 && ev.at > r.stop {
			r.now = r.stop
			break
		}
		r.now = ev.at
		switch ev.kind {
		case evJob:
			for _, t := range ev.j.threads {
				for range max(ev.j.IODepth, 1) {
					r.next(t)
				}
			}
		case evSubmit:
			r.submit(ev.c)
		case evReply:
			r.reply(ev.c)
		case evDevice:
			r.deviceDone(ev)
		case evProbe:
			r.count(ev.dev, r.now, ev.n)
			r.policy.Done(r.now, ev.m, ev.sent, ev.err)
		case evHedge:
			r.hedge(ev)
		case evNext:
			r.next(ev.t)
		case evWake:
			if r.wakeAt != ev.n {
				continue // replaced by an earlier wake-up
			}
			r.wakeAt = -1
			r.apply(r.st.Tick(r.now))
		}
	}
	return r.result(), nil
}

// track adds a time series and returns its index.
func (r *runner) track(name string) int {
	for i, n := range r.names {
		if n == name {
			return i
		}
	}
	r.names = append(r.names, name)
	r.series = append(r.series, nil)
	return len(r.names) - 1
}

func (r *runner) count(series int, at, n int64) {
	b := int(at / bucket)
	s := r.series[series]
	for len(s) <= b {
		s = append(s, 0)
	}
	s[b] += n
	r.series[series] = s
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

// send sends the FUSE request for the part of c from c.done on, at most
// maxRead bytes; the kernel sends the next part when this one is
// answered, and a short answer is continued (fio resubmits the rest),
// until the whole request is served or a read finds the end.
func (r *runner) send(c *call) {
	c.part = min(c.n-c.done, r.maxRead)
	at := r.now + r.fuseLat/2
	if c.inKernel() {
		at = r.now
	}
	r.push(event{at: at, kind: evSubmit, c: c})
}

// inKernel reports whether the kernel's page cache takes c before any
// request of it reaches sluice: a read it serves (kread sends what it asks
// of sluice itself), a write into it, or an fsync, before which the
// kernel writes the file's dirty pages back.
func (c *call) inKernel() bool {
	t := c.t
	switch c.op {
	case opRead:
		return t.kernel
	case opMap:
		return true
	case opDirty:
		return t.cachedW
	case opFsync:
		return t.dirties()
	}
	return false
}

// submit hands c's request to sluice (or, for the kernel's own paths, to
// the modelled page cache).
func (r *runner) submit(c *call) {
	t := c.t
	r.cur = t
	defer func() { r.cur = nil }()
	switch c.op {
	case opRead:
		if t.kernel {
			r.kread(c)
			return
		}
		if r.cached(c) {
			return
		}
		r.apply(r.st.Read(r.now, t.h, t.job.g, c.off+c.done, c.part, &c.req))
	case opWrite:
		r.apply(r.st.Write(r.now, t.h, t.job.g, c.off+c.done, c.part, &c.req))
	case opFsync:
		if t.dirties() {
			r.kernel.fsync(r, c)
			return
		}
		r.apply(r.st.Sync(r.now, t.h, t.job.g, &c.req))
	case opDirty:
		r.kernel.dirty(r, c)
	case opSync:
		r.kernel.sync(r, c)
	case opKRead:
		r.ksubmit(c)
	case opMap:
		r.kernel.mapWrite(r, c)
	case opFault:
		r.apply(r.st.Read(r.now, t.h, t.job.g, c.off, c.n, &c.req))
	}
}

// cached serves c and the sequential reads after it, for as long as
// each is a cache hit that starts nothing, in one step: stack.ReadCached
// does what a Read of each would, and the thread goes on when the last
// would have been answered. Each takes one FUSE round trip; events of
// other threads in between are not interleaved, which only moves the
// moment the cached pages are marked used. A read with iodepth above
// one, or split into several FUSE requests, goes the usual way.
func (r *runner) cached(c *call) bool {
	t := c.t
	j := t.job
	half := r.fuseLat / 2
	step := 2 * half
	if j.RW != "read" || j.IODepth > 1 || half <= 0 || c.done != 0 || c.part != c.n {
		return false
	}
	bs, size := c.n, int64(j.Size)
	replyAt := func(i int64) int64 { return r.now + i*step + half }
	if r.stop > 0 && replyAt(0) > r.stop {
		return false
	}
	// Read i >= 1 is issued when read i-1 is answered; count how many
	// the job would issue and the run would see answered.
	ceil := func(a, b int64) int64 { return max(0, (a+b-1)/b) }
	k := 1 + r.opts.CacheBytes/bs    // no more than the cache holds
	k = min(k, ceil(size-c.off, bs)) // the file ends or wraps: the usual way
	if j.end > 0 {
		k = min(k, 1+ceil(j.end-replyAt(0), step))
	}
	if r.stop > 0 {
		k = min(k, 1+(r.stop-replyAt(0))/step)
	}
	if !j.TimeBased {
		k = min(k, 1+ceil(size-t.issued, bs))
	}
	n, a := r.st.ReadCached(r.now, t.h, j.g, c.off, bs, int(k))
	r.apply(a)
	if n == 0 {
		return false
	}
	got := int64(n)
	j.ios += got
	j.bytes += got * bs
	j.clat.addN(step, got)
	if j.first == 0 {
		j.first = c.start
	}
	for i := range got {
		r.count(j.series, replyAt(i), bs)
	}
	j.last = replyAt(got - 1)
	r.busy = max(r.busy, j.last)
	t.off = c.off + got*bs
	t.issued += (got - 1) * bs
	r.release(c)
	r.push(event{at: j.last, kind: evNext, t: t})
	return true
}

// answered is called when sluice (or the page cache) has answered c's
// request with c.got bytes: the answer reaches the caller half a round
// trip later.
func (r *runner) answered(c *call) {
	switch c.op {
	case opFlush:
		r.kernel.cleaned(r, c)
		return
	case opKRead:
		r.kdevice(c) // admitted: the driver reads the device
		return
	case opFault:
		r.kernel.faulted(r, c)
		return
	case opDevSync:
		p := c.parent
		r.release(c)
		if p.pending--; p.pending == 0 {
			r.answered(p)
		}
		return
	}
	r.push(event{at: r.now + r.fuseLat/2, kind: evReply, c: c})
}

// reply delivers an answer to the caller.
func (r *runner) reply(c *call) {
	t := c.t
	j := t.job
	switch c.op {
	case opKRead:
		r.kreply(c)
		return
	case opFsync:
		r.release(c)
		r.next(t)
		return
	case opSync:
		r.finished(c)
		return
	}
	if c.got < c.part {
		j.shorts++
	}
	j.bytes += c.got
	r.count(j.series, r.now, c.got)
	c.done += c.got
	if c.got > 0 && c.done < c.n && c.req.Err == nil {
		r.send(c)
		return
	}
	r.finished(c)
}

// finished records an application request and starts the next, after an
// fsync when one is due.
func (r *runner) finished(c *call) {
	t := c.t
	j := t.job
	r.busy = r.now
	j.ios++
	j.clat.add(r.now - c.start)
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

func (r *runner) release(c *call) {
	c.t, c.parent, c.h, c.wb = nil, nil, nil, nil
	r.free = append(r.free, c)
}

// apply performs the stack's actions on virtual time.
func (r *runner) apply(a stack.Actions) {
	for _, io := range a.Start {
		r.start(io)
	}
	for _, req := range a.Done {
		c := req.Value.(*call)
		c.got = req.Size()
		if req.Err != nil {
			c.got = 0
		}
		r.answered(c)
	}
	if a.Wake >= 0 && (r.wakeAt < 0 || r.wakeAt <= r.now || a.Wake < r.wakeAt) {
		r.wakeAt = a.Wake
		at := a.Wake
		if r.wakeLate.Kind != "" {
			at += max(r.wakeLate.Sample(r.wakeRNG), 0)
		}
		r.push(event{at: at, kind: evWake, n: a.Wake})
	}
	r.st.Recycle(a) // nothing above kept its slices
}

// start sends the device I/O io to its device (or, for a mirror set's
// read, to the mirror the policy picks).
func (r *runner) start(io *stack.IO) {
	f := io.File.(*file)
	op := device.Read
	switch io.Op {
	case stack.OpWrite:
		op = device.Write
	case stack.OpFlush:
		op = device.Flush
	}
	n := io.Len
	if op == device.Read {
		n = max(min(io.Len, f.size-io.Off), 0)
	}
	if io.Op == stack.OpWriteback {
		// The modelled devices have no page cache: written is on disk.
		r.push(event{at: r.now, kind: evDevice, io: io, dev: f.devi, m: -1})
		return
	}
	switch {
	case !f.mirrored:
		doneAt, err := f.dev.Start(r.now, op, n)
		r.push(event{at: doneAt, kind: evDevice, io: io, n: n, err: err, dev: f.devi, m: -1})
	case op == device.Read:
		t := r.cur
		if t == nil {
			t = f.owner
		}
		rd := mirror.Read{PID: t.pid, File: io.Ino, Off: io.Off, Len: io.Len}
		m := r.policy.Pick(r.now, rd)
		r.policy.Started(r.now, m, rd)
		di := r.mirrors[m]
		doneAt, err := r.devList[di].Start(r.now, op, n)
		var hr *hedged
		if hg, ok := r.policy.(mirror.Hedger); ok && len(r.mirrors) > 1 {
			// As the mount does: a read still unanswered after the
			// policy's delay goes to another mirror too (once here; the
			// mount goes on to a third mirror of three).
			if after := hg.HedgeAfter(r.now, m); after > 0 && r.now+after < doneAt {
				hr = &hedged{left: 1}
				r.push(event{at: r.now + after, kind: evHedge, io: io, n: n, m: m, t: t, h: hr, sent: r.now})
			}
		}
		r.push(event{at: doneAt, kind: evDevice, io: io, n: n, err: err, dev: di, m: m, sent: r.now, h: hr})
		if pr, ok := r.policy.(mirror.Prober); ok {
			// The mount reads a mirror the policy asks to probe in the
			// background; so does the model.
			if pm, ok := pr.Probe(r.now); ok {
				r.policy.Started(r.now, pm, rd)
				pd := r.mirrors[pm]
				doneAt, err := r.devList[pd].Start(r.now, op, n)
				r.push(event{at: doneAt, kind: evProbe, n: n, err: err, dev: pd, m: pm, sent: r.now})
			}
		}
	default: // writes and flushes go to every mirror
		r.fanout[io] = &fan{left: len(r.mirrors)}
		for _, di := range r.mirrors {
			doneAt, err := r.devList[di].Start(r.now, op, n)
			r.push(event{at: doneAt, kind: evDevice, io: io, n: n, err: err, dev: di, m: -1})
		}
	}
}

// hedge sends a mirror read that has run long to the mirror the policy
// names (mirror.Hedger's HedgeTo), or asks again a hedge delay later.
func (r *runner) hedge(ev event) {
	if ev.h.done {
		return
	}
	hg := r.policy.(mirror.Hedger)
	m, ok := hg.HedgeTo(r.now, ev.m, ev.sent, func(j int) bool { return j != ev.m })
	if !ok {
		if after := hg.HedgeAfter(r.now, ev.m); after > 0 {
			ev.at = r.now + after
			r.push(ev)
		}
		return
	}
	rd := mirror.Read{PID: ev.t.pid, File: ev.io.Ino, Off: ev.io.Off, Len: ev.io.Len}
	r.policy.Started(r.now, m, rd)
	di := r.mirrors[m]
	doneAt, err := r.devList[di].Start(r.now, device.Read, ev.n)
	ev.h.left++
	r.push(event{at: doneAt, kind: evDevice, io: ev.io, n: ev.n, err: err, dev: di, m: m, sent: r.now, h: ev.h})
}

// deviceDone reports a device I/O's completion to the stack.
func (r *runner) deviceDone(ev event) {
	io, n, err := ev.io, ev.n, ev.err
	if io.Op != stack.OpWriteback {
		r.busy = r.now
	}
	r.count(ev.dev, r.now, n)
	if ev.m >= 0 {
		r.policy.Done(r.now, ev.m, ev.sent, err)
	}
	if h := ev.h; h != nil {
		h.left--
		if h.done || err != nil && h.left > 0 {
			return // answered by the other mirror, or it may yet answer
		}
		h.done = true
	}
	if fo := r.fanout[io]; fo != nil {
		if fo.err == nil {
			fo.err = err
		}
		if fo.left--; fo.left > 0 {
			return
		}
		delete(r.fanout, io)
		err = fo.err
	}
	if len(r.kio) > 0 {
		if c := r.kio[io]; c != nil {
			delete(r.kio, io)
			r.kdone(c, n, err)
			return
		}
	}
	f := io.File.(*file)
	switch io.Op {
	case stack.OpRead:
		pages := r.pages[:0]
		if err == nil {
			for k := int64(0); k < n; k += stack.PageSize {
				pages = append(pages, zeroPage[:min(stack.PageSize, n-k)])
			}
		}
		r.pages = pages
		r.apply(r.st.Complete(r.now, io, pages, err))
	case stack.OpWrite:
		if err == nil {
			f.size = max(f.size, io.Off+io.Len)
		}
		r.apply(r.st.Wrote(r.now, io, io.Len, err))
	default:
		r.apply(r.st.Wrote(r.now, io, 0, err))
	}
}
