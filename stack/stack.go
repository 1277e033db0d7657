// Package stack composes sluice's policies — group tree and throttle,
// readahead, read cache bookkeeping and request splitting — into one
// single-threaded state machine.
//
// The stack has four kinds of input: an application request arrives (Read,
// Write, Sync), a device I/O finishes (Complete for reads, Wrote for writes
// and flushes), the clock reaches the wake-up time the stack asked for
// (Tick), or the driver changes something (SetLimits, Cancel, Changed).
// Each returns Actions: device I/Os to start, application requests that are
// finished, and the next wake-up time. The stack never sleeps, reads the
// clock, starts goroutines or touches a file; it moves page numbers and
// byte counts. Page contents are opaque buffers handed in by the driver on
// Complete and handed back in finished requests. The real engine drives it
// from FUSE goroutines under one mutex; the simulator drives it on virtual
// time.
//
// The files of the package each hold one concern: cache.go the pages and
// file ends, read.go the read path and readahead, write.go writes and
// flushes, request.go the life of an application request (its wait cap
// and cancellation), metrics.go the counters.
package stack

import (
	"errors"

	"sluice/cost"

	"sluice/readahead"
	"sluice/throttle"
)

// Actions is what the driver must do after a call into the stack, in order:
// start every I/O in Start, then complete every request in Done, then make
// sure Tick is called at Wake.
type Actions struct {
	// Start lists device I/Os admitted by the throttle, in admission order.
	// For a read (Op Read), the driver reads Len bytes at Off from the
	// backing file of the I/O's File into a buffer of at least Len bytes
	// and reports the result with Complete. For a write, it writes the
	// Len bytes of the application write's data (IO.Request) at Off and
	// reports with Wrote; for a flush, it makes the file durable and
	// reports with Wrote.
	Start []*IO
	// Done lists application requests that are finished: for a read the
	// driver copies the data out with Request.CopyTo; a write's result is
	// Request.Size bytes or Request.Err.
	Done []*Request
	// Wake is the time at which the driver must call Tick; -1 when nothing
	// is waiting on time. A later call's Wake replaces an earlier one.
	Wake int64
	// Free lists page buffers handed in by Complete that the stack no
	// longer holds: the pages left the cache and no unfinished request
	// reads them. A request in Done of the same Actions may still: a
	// driver that reuses buffers copies its finished reads out first.
	Free [][]byte
	// Queued reports that requests wait for the throttle.
	Queued bool
}

// Handle is the per-open-file state the stack keeps for the driver. The
// driver creates one per open and passes it to every call for that open.
type Handle struct {
	// Ino identifies the file whose pages the handle reads.
	Ino uint64
	// File is the driver's backing file for I/O caused by this handle; the
	// stack copies it into every IO and never looks inside.
	File any
	// Whole says the request's caller takes a short reply for the end of
	// the file (a read through the kernel's page cache), so a request that
	// reaches Options.MaxWait is admitted whole rather than answered with
	// what is ready.
	Whole bool

	ra readahead.State
}

// Op is what a device I/O does.
type Op uint8

const (
	OpRead Op = iota
	OpWrite
	OpFlush
	// OpWriteback starts the backing page cache's writeback of [Off,
	// Off+Len) of the file (sync_file_range with SYNC_FILE_RANGE_WRITE)
	// without waiting for it: what a limited group writes does not pile up
	// as dirty pages that a sync by anyone would wait for. It is not
	// charged; the driver reports it with Wrote like a flush.
	OpWriteback
)

// IO is one device request of at most MaxIO bytes, which the driver
// performs once the stack hands it out in Actions.Start. What the stack
// queues in the throttle for its own sake, and never hands out, is a
// ticket.
type IO struct {
	Op       Op
	Dir      throttle.Dir
	Ino      uint64
	File     any
	Off, Len int64
	Class    throttle.Class

	group    *throttle.Group
	req      throttle.Request
	queuedAt int64
	started  bool
	random   bool       // not where its file's last I/O ended (see price)
	tok      cost.Token // its start, for the cost model, where the device is shared
	gen      uint64     // reads: the file's generation when issued
	pages    []page     // reads: the pages this I/O fills, in order
	write    *Request   // all but reads: the application request it serves
	wrote    int64      // writes: bytes written, once complete
	err      error      // writes: the device's error, once complete
	complete bool       // writes: reported by Wrote
}

// A ticket is an entry of the throttle's queue that is not a device I/O:
// the stack queues it, and when the throttle releases it (or the wait cap
// forces it) the stack acts on it itself; it never appears in Actions.
// Both kinds belong to an application read, r.
type ticket struct {
	kind     ticketKind
	r        *Request
	req      throttle.Request // Value is the ticket
	queuedAt int64
	admitted bool // released by the throttle, or forced
}

// ticketKind is what a ticket stands for.
type ticketKind uint8

const (
	// A gate holds a read of a mapped file while its group's writes are
	// behind their schedule (see owes). It is queued in the write
	// direction with no bytes and no I/Os: the throttle releases it, and
	// charges nothing, once the group's write schedule is due, and the
	// read then goes on (ungate). Its wait counts as throttled time.
	gateTicket ticketKind = iota
	// A pay ticket is one MaxIO piece of a read the driver performs itself
	// (see Pay), charged as a demand read of its bytes and one I/O, and
	// counted as a device read of them when released; the read finishes
	// when its last piece is released.
	payTicket
)

// Request returns the application write or sync an OpWrite or OpFlush I/O
// serves, nil for a read.
func (io *IO) Request() *Request { return io.write }

// Waiter returns an unfinished application read waiting for the pages of the read
// I/O io, nil when none does (readahead no one has asked for yet): a
// driver may perform the I/O on that read's behalf.
func (io *IO) Waiter() *Request {
	for k := range io.pages {
		if w := io.pages[k].waiters; len(w) > 0 {
			return w[0]
		}
	}
	return nil
}

// Request is one application read, write or sync as seen at the FUSE layer.
type Request struct {
	// Value is the driver's, untouched by the stack (typically what wakes the
	// goroutine waiting for the request).
	Value any
	// Err is set when the request failed.
	Err error

	dir      throttle.Dir
	group    *throttle.Group
	handle   *Handle
	off, len int64
	pages    []*page   // reads: pages from off on, in order
	gate     *ticket   // reads: queued until the group's write debt is paid
	ios      []*IO     // writes: the pieces; sync: the flush
	pieces   []*ticket // reads the driver performs (pay): the pieces
	pending  int
	done     bool
	// writeback: a write without a caller (WriteBack)
	writeback bool
	// pay: a read the driver performs itself once admitted (Pay)
	pay bool
	// pay, where the device is shared: whether the read is random, and
	// its start (see Paid)
	random   bool
	tok      cost.Token
	deadline int64    // when a wait cap is in force: the latest admission
	wprev    *Request // the list of requests waiting with a deadline
	wnext    *Request
}

// Off returns the request's offset in its file.
func (r *Request) Off() int64 { return r.off }

// ErrCanceled is the error of a request removed by Cancel.
var ErrCanceled = errors.New("request canceled")

// Stack is the composition. It is not safe for concurrent use.
type Stack struct {
	opts    Options
	tree    *throttle.Tree
	queue   *throttle.Queue
	files   map[uint64]*file
	gens    uint64 // file generations handed out: never repeated, so an I/O issued before a file was forgotten or changed cannot touch its successor
	lru     pageList
	cached  int64 // valid pages in the LRU
	limit   int64 // page capacity
	stats   map[*throttle.Group]*groupStats
	waiting reqList // requests with a deadline, oldest first
	dirty   []*file // files with a dirty span, oldest span first
	scratch []*throttle.Request
	// spareIOs are completed device reads' IOs, for the next ones.
	spareIOs []*IO
	acts     Actions
	opened   bool // a gate opened during release: admit again
	dev      device
}

// maxSpareIOs bounds the IOs kept for reuse.
const maxSpareIOs = 64

// Recycle gives the stack back the slices of a, which the driver has
// finished with, for its next Actions: a driver that copies what it needs
// out of each Actions before its next call saves their allocations.
func (s *Stack) Recycle(a Actions) {
	reuse(&s.acts.Start, a.Start)
	reuse(&s.acts.Done, a.Done)
	reuse(&s.acts.Free, a.Free)
}

// reuse makes old, cleared, the storage of the empty slice cur when it is
// the larger.
func reuse[T any](cur *[]T, old []T) {
	if len(*cur) == 0 && cap(old) > cap(*cur) {
		clear(old)
		*cur = old[:0]
	}
}

// New returns a stack with opts, which must pass Options.Validate.
func New(opts Options) (*Stack, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	// The throttle takes a zero Burst as its default; 1ns leaves no idle
	// credit (one byte at 1GB/s).
	t := throttle.New(throttle.Config{Burst: max(opts.Burst, 1)})
	s := &Stack{
		opts:  opts,
		tree:  t,
		queue: throttle.NewQueue(t),
		files: make(map[uint64]*file),
		limit: opts.CacheBytes / PageSize,
		stats: make(map[*throttle.Group]*groupStats),
	}
	s.dev.ctl = cost.NewController(cost.Options{})
	s.lru.init()
	return s, nil
}

// Options returns the options in force.
func (s *Stack) Options() Options { return s.opts }

// Group returns the group for a slash-separated path, creating it.
func (s *Stack) Group(path string) *throttle.Group {
	g := s.tree.Group(path)
	s.each(g, func(*Counters) {}) // list it and its ancestors in Metrics
	return g
}

// CheckLimits returns an error if the groups at the paths of changes may
// not take those limits together (throttle.Tree.Check).
func (s *Stack) CheckLimits(changes map[string]throttle.Limits) error {
	return s.tree.Check(changes)
}

// SetLimits sets a group's limits, every key, at now (throttle.Tree.SetLimits,
// which keeps them); queued requests are re-timed. A change of some keys
// only is the engine's (engine.Engine.SetLimits).
func (s *Stack) SetLimits(now int64, path string, l throttle.Limits) Actions {
	s.Group(path)
	s.tree.SetLimits(now, path, l)
	return s.release(now)
}

// SetLease sets what a group may use of its caps here where other hosts
// share them (throttle.Tree.SetLease), at now; queued requests are
// re-timed.
func (s *Stack) SetLease(now int64, path string, l throttle.Lease) Actions {
	s.tree.SetLease(now, path, l)
	return s.release(now)
}

// Tick releases what is due at now and answers requests whose wait reached
// the cap.
func (s *Stack) Tick(now int64) Actions { return s.release(now) }

// release admits what the throttle allows at now, after cutting requests
// whose deadline has come, and returns the actions gathered since the last
// return.
func (s *Stack) release(now int64) Actions {
	s.expire(now)
	s.steer(now)
	var next int64
	for {
		s.scratch, next = s.queue.Release(now, s.scratch[:0])
		for _, q := range s.scratch {
			switch v := q.Value.(type) {
			case *IO:
				s.admitted(now, v)
			case *ticket:
				s.released(now, v)
			}
			if q.Floor {
				for g := q.Group; g != nil; g = g.Parent() {
					s.groupStats(g).Counters.FloorBytes += q.Bytes
				}
			}
		}
		clear(s.scratch)
		if !s.opened {
			break
		}
		s.opened = false // the reads it started queued I/O of their own
	}
	if r := s.waiting.head; r != nil && (next < 0 || r.deadline < next) {
		next = r.deadline
	}
	if due := s.steered(now); due >= 0 && (next < 0 || due < next) {
		next = max(due, now+1)
	}
	for len(s.dirty) > 0 && s.dirty[0].dirty.since+DirtyExpire <= now {
		s.writeback(s.dirty[0])
	}
	if len(s.dirty) > 0 {
		if due := s.dirty[0].dirty.since + DirtyExpire; next < 0 || due < next {
			next = due
		}
	}
	a := s.acts
	a.Wake = next
	a.Queued = s.queue.Len() > 0
	s.acts = Actions{}
	return a
}

// admitted records that io left the throttle at now: it is to be started.
func (s *Stack) admitted(now int64, io *IO) {
	io.started = true
	io.tok = s.began(now)
	wait := now - io.queuedAt
	for g := io.group; g != nil; g = g.Parent() {
		gs := s.groupStats(g)
		if g.Parent() == nil && io.req.Cost > 0 {
			gs.units += s.refUnits(io.req.Cost)
		}
		c := &gs.Counters
		c.ThrottledNs += wait
		if io.Dir == throttle.Read {
			c.RIOs++
			gs.rwait.add(wait)
			if io.Class == throttle.Demand {
				c.RDemandNs += wait
			}
		} else {
			c.WIOs++
			c.WThrottledNs += wait
			gs.wwait.add(wait)
		}
	}
	s.acts.Start = append(s.acts.Start, io)
}

// released records that the ticket t left the throttle at now (or was
// forced), and acts on it: a gate lets its read go on; a pay ticket counts
// as a device read of its bytes, and its read finishes with its last
// piece (the driver reads then).
func (s *Stack) released(now int64, t *ticket) {
	t.admitted = true
	wait := now - t.queuedAt
	for g := t.req.Group; g != nil; g = g.Parent() {
		gs := s.groupStats(g)
		if g.Parent() == nil && t.req.Cost > 0 {
			gs.units += s.refUnits(t.req.Cost)
		}
		c := &gs.Counters
		c.ThrottledNs += wait
		c.RDemandNs += wait // a reader waits on every ticket
		if t.kind == payTicket {
			c.RIOs++
			gs.rwait.add(wait)
			c.RBytes += t.req.Bytes // (the stack's device reads count theirs when complete)
		}
	}
	r := t.r
	switch t.kind {
	case gateTicket:
		if s.tree.Shared() {
			s.queue.Finished(now, t.req.Group, throttle.Write, 1) // it moves nothing
		}
		s.ungate(now, r)
		s.opened = true
	case payTicket:
		if r.pending--; r.pending == 0 {
			r.tok = s.began(now)
			s.finish(r)
		}
	}
}

func (s *Stack) finish(r *Request) {
	if r.done {
		return
	}
	r.done = true
	s.waiting.remove(r)
	if r.dir == throttle.Read {
		s.each(r.group, func(c *Counters) { c.AppRBytes += r.Size() })
	}
	for _, p := range r.pages {
		s.unpin(p)
	}
	s.acts.Done = append(s.acts.Done, r)
}
