// Package engine drives a stack on the wall clock: it calls the stack under
// one mutex from the goroutines that carry application requests, runs device
// reads on their own goroutines, and keeps one timer armed for the stack's
// next wake-up. All waiting in sluice's I/O path happens here.
package engine

import (
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"sluice/stack"
	"sluice/throttle"
)

// ReaderAt is a backing file as the engine reads it. Reads are page-aligned
// in offset and length, into page-aligned buffers (suitable for O_DIRECT).
type ReaderAt interface {
	ReadAt(p []byte, off int64) (int, error)
}

// WriterAt is a backing file as the engine writes it.
type WriterAt interface {
	WriteAt(p []byte, off int64) (int, error)
}

// Options configure an Engine.
type Options struct {
	// Options are the stack's, MaxWait among them: a request that waits
	// that long is answered short (see stack.Options.MaxWait), so no
	// request outlives the kernel's request timeout.
	stack.Options
	// Dying reports whether the caller of an interrupted request is being
	// killed. The kernel interrupts a request for any signal, but only a
	// dying caller must be answered at once (EINTR); a caller that merely
	// caught a signal (Go's preemption, SIGCHLD, a timer) gets its data, as
	// from a local file, which a read never fails with EINTR. While a
	// request waits after an interrupt, Dying is asked again every
	// DyingPoll. The default, nil, takes every interrupt as fatal.
	Dying func(ctx context.Context) bool
	// GoTimer wakes the stack with a Go timer instead of a timerfd. Go's
	// timers fire up to a millisecond late on Linux (the runtime's poller
	// sleeps in whole milliseconds), which at a few MiB/s of 4 KiB reads
	// is several pages of schedule; a timerfd is read through the poller
	// when it fires, tens of microseconds late. Tests on virtual time
	// (testing/synctest) need Go's timers. The default is false.
	GoTimer bool
}

var errNoFile = errors.New("engine: I/O without a backing file")

// sparePages bounds the page buffers kept for the next device reads (4 MiB
// of them): in a steady stream each page read in replaces one evicted.
const sparePages = 1024

// DyingPoll is how often a request that was interrupted by a signal the
// caller survives checks whether its caller is now being killed.
const DyingPoll = 50 * time.Millisecond

// Engine is the real-time driver of a stack. It is safe for concurrent use.
type Engine struct {
	mu      sync.Mutex
	st      *stack.Stack
	epoch   time.Time
	alarm   alarm
	armedAt int64 // when the alarm fires; -1 when not armed
	dying   func(context.Context) bool
	closed  bool
	bufs    sync.Pool                  // *[]byte aligned read buffers of MaxIO bytes
	pages   chan *[stack.PageSize]byte // spare buffers for cached pages
	calls   sync.Pool                  // *call
	// io counts the device I/Os in flight on goroutines of their own,
	// which Close waits for (a WaitGroup will not do: a completion may
	// start another I/O while Close waits); idle gets a token each time
	// the count falls to zero.
	io   atomic.Int64
	idle chan struct{}
	// queued, if set, gets a token (when it has room) each time the
	// stack sets its timer: something now waits for the throttle.
	queued chan<- struct{}
}

// New returns an engine; opts.Options must pass stack.Options.Validate
// (start from stack.DefaultOptions).
func New(opts Options) (*Engine, error) {
	st, err := stack.New(opts.Options)
	if err != nil {
		return nil, err
	}
	e := &Engine{st: st, epoch: time.Now(), armedAt: -1, dying: opts.Dying, idle: make(chan struct{}, 1),
		pages: make(chan *[stack.PageSize]byte, sparePages)}
	if !opts.GoTimer {
		e.alarm, err = newFDAlarm(e.tick)
	}
	if opts.GoTimer || err != nil {
		e.alarm = newGoAlarm(e.tick)
	}
	return e, nil
}

// Close stops the timer. Requests still waiting are not woken; close the
// engine only after the FUSE server has stopped.
//
// It waits up to CloseWait for the device I/Os in flight, so that the
// backing files they use may be closed after it.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	e.alarm.stop()
	e.mu.Unlock()
	deadline := time.After(CloseWait)
	for e.io.Load() > 0 {
		select {
		case <-e.idle:
		case <-deadline:
			return
		}
	}
}

// done counts an I/O of e out, telling Close when none is left.
func (e *Engine) done() {
	if e.io.Add(-1) == 0 {
		select {
		case e.idle <- struct{}{}:
		default:
		}
	}
}

// CloseWait is how long Close waits for the device I/Os in flight: a
// device that hangs does not hold up the close for longer.
const CloseWait = 10 * time.Second

// The device I/Os on goroutines of their own, counted for Close (each
// started after e.io.Add(1)).
func (e *Engine) goDevice(io *stack.IO)    { defer e.done(); e.device(io) }
func (e *Engine) goFlush(io *stack.IO)     { defer e.done(); e.flush(io) }
func (e *Engine) goWriteback(io *stack.IO) { defer e.done(); e.writeback(io) }
func (e *Engine) goWrite(ios []*stack.IO)  { defer e.done(); e.write(ios) }
func (e *Engine) goWriteOne(io *stack.IO)  { defer e.done(); e.writeOne(io) }

// Options returns the stack options in force.
func (e *Engine) Options() stack.Options { return e.st.Options() }

func (e *Engine) now() int64 { return int64(time.Since(e.epoch)) }

// Group returns the group for path, creating it.
func (e *Engine) Group(path string) *throttle.Group {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.Group(path)
}

// Carry takes a group's figures over from the process a mount was taken
// over from (stack.Stack.Carry).
func (e *Engine) Carry(m stack.GroupMetrics) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st.Carry(m)
}

// Schedules returns where every capped group's caps stand now, by path
// (stack.Stack.Schedules).
func (e *Engine) Schedules() map[string]throttle.Schedule {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.Schedules(e.now())
}

// SetSchedules puts each group's caps where all says, as of ago before
// now: a debt shrinks, and idle credit grows up to the burst, by what
// passed since (stack.Stack.SetSchedule).
func (e *Engine) SetSchedules(all map[string]throttle.Schedule, ago time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	for path, sch := range all {
		for d := range sch {
			for k := range sch[d] {
				if sch[d][k] != 0 {
					sch[d][k] -= int64(ago)
					if sch[d][k] == 0 {
						sch[d][k] = -1 // due now: still carried
					}
				}
			}
		}
		e.st.SetSchedule(now, path, sch)
	}
}

// PathLimits returns the tightest limits on g's path, per key, 0 where
// no level limits it (throttle.Group.PathLimits).
func (e *Engine) PathLimits(g *throttle.Group) throttle.Limits {
	e.mu.Lock()
	defer e.mu.Unlock()
	return g.PathLimits()
}

// SetLimits applies c to the limits of the group at path (creating it),
// now, in one step under the engine's lock: keys c does not set keep their
// values, so concurrent changes of different keys do not lose each other,
// and queued requests are re-timed. It returns the group's limits before
// and after, or an error and the limits unchanged where the result would
// not hold (throttle.Tree.Check: a floor above a cap). This is the one
// path by which limits change on a running engine; the group's limits
// live only in the throttle (throttle.Group).
func (e *Engine) SetLimits(path string, c throttle.LimitChange) (was, is throttle.Limits, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	was = e.st.Group(path).Limits()
	is = c.Apply(was)
	if err := e.st.CheckLimits(map[string]throttle.Limits{path: is}); err != nil {
		return was, was, err
	}
	e.apply(e.st.SetLimits(e.now(), path, is))
	return was, is, nil
}

// SetAllLimits sets the limits of the groups in order, every key, to
// those in all, in one step under the engine's lock, or none of them where
// they would not hold together (throttle.Tree.Check). It returns each
// group's limits before.
func (e *Engine) SetAllLimits(order []string, all map[string]throttle.Limits) (was map[string]throttle.Limits, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.st.CheckLimits(all); err != nil {
		return nil, err
	}
	was = make(map[string]throttle.Limits, len(order))
	for _, path := range order {
		was[path] = e.st.Group(path).Limits()
		e.apply(e.st.SetLimits(e.now(), path, all[path]))
	}
	return was, nil
}

// SetLease sets what the group at path may use of its caps on this host
// (throttle.Tree.SetLease), under the engine's lock; queued requests are
// re-timed.
func (e *Engine) SetLease(path string, l throttle.Lease) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.apply(e.st.SetLease(e.now(), path, l))
}

// NotifyQueued makes the engine send ch a token, where it has room,
// after each call of the stack that leaves requests waiting for the
// throttle (a token says to look, not what is there); nil stops it. It
// lets a watcher of the groups' waits (the cluster's leases) look at
// them often only while one waits.
func (e *Engine) NotifyQueued(ch chan<- struct{}) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.queued = ch
}

// Capped returns the figures of every group with a cap of its own
// (stack.Stack.Capped).
func (e *Engine) Capped() []stack.GroupMetrics {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.Capped(e.now())
}

// Sharing returns the device's state and its top-level groups' totals,
// where the device is shared (stack.Stack.Sharing).
func (e *Engine) Sharing() stack.Sharing {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.Sharing(e.now())
}

// SetElsewhere says whether groups of other hosts use the device now
// (stack.Stack.SetElsewhere).
func (e *Engine) SetElsewhere(v bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.st.SetElsewhere(v)
}

// Metrics returns a snapshot of the stack's figures.
func (e *Engine) Metrics() stack.Metrics {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.Metrics()
}

// Pass accounts a request that a group with no limit served without the
// stack.
func (e *Engine) Pass(g *throttle.Group, d throttle.Dir, n int64) {
	e.mu.Lock()
	e.st.Pass(g, d, n)
	e.mu.Unlock()
}

// Changed drops cached pages after a write that bypassed Write.
func (e *Engine) Changed(ino uint64, off, n int64) {
	e.mu.Lock()
	e.st.Changed(ino, off, n)
	e.mu.Unlock()
}

// InDebt reports whether g's writes are behind their schedule now (the
// kernel's writeback charged them beyond the limit): reads of files g
// wrote through a mapping then wait for the debt (stack.Stack.InDebt).
func (e *Engine) InDebt(g *throttle.Group) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.InDebt(e.now(), g)
}

// Truncated drops cached pages past a file's new size.
func (e *Engine) Truncated(ino uint64, size int64) {
	e.mu.Lock()
	e.st.Truncated(ino, size)
	e.mu.Unlock()
}

// Forget drops a file's cached pages.
func (e *Engine) Forget(ino uint64) {
	e.mu.Lock()
	e.st.Forget(ino)
	e.mu.Unlock()
}

// call is one application request on its way through the engine: the
// stack's request, the token that wakes the goroutine waiting for it, and
// what the request moves. Calls are reused, so a request in, admitted and
// finished allocates nothing.
type call struct {
	req  stack.Request
	done chan struct{} // one token when the request has finished
	work chan job      // device I/O to perform for the request
	dst  []byte        // a read's buffer, filled under mu as it finishes
	n    int           // bytes copied into dst
	data []byte        // a write's data
	w    WriterAt      // the file a write goes to
	sync Syncer        // the file a sync flushes
}

// getCall returns a call from the engine's pool. (The pool is the
// engine's: a channel made on virtual time, in a synctest bubble, belongs
// to that bubble.)
func (e *Engine) getCall() *call {
	if c, ok := e.calls.Get().(*call); ok {
		return c
	}
	c := &call{done: make(chan struct{}, 1), work: make(chan job, 1)}
	c.req.Value = c
	return c
}

// job is device I/O handed to the goroutine of the request it serves:
// a read of pages the request waits for, or pieces of the request's own
// write, end to end.
type job struct {
	read   *stack.IO
	piece  *stack.IO   // a write admitted in one piece (most are)
	pieces []*stack.IO // pieces of one write admitted together
}

func (e *Engine) do(j job) {
	switch {
	case j.read != nil:
		e.device(j.read)
	case j.piece != nil:
		e.writeOne(j.piece)
	default:
		e.write(j.pieces)
	}
}

// putCall returns c, whose request has finished and whose token was taken.
func (e *Engine) putCall(c *call) {
	c.dst, c.n, c.data, c.w, c.sync = nil, 0, nil, nil, nil
	c.req.Err = nil
	e.calls.Put(c)
}

// Read reads into dst at off through h for group g: from sluice's cache,
// with readahead, device reads split into MaxIO pieces and throttled per
// group. It returns fewer bytes than len(dst) at end of file, or when the
// wait reached MaxWait (for a handle that is not Whole). A cancelled ctx (a
// FUSE interrupt) of a dying caller withdraws the request with EINTR.
func (e *Engine) Read(ctx context.Context, h *stack.Handle, g *throttle.Group, dst []byte, off int64) (int, error) {
	c := e.getCall()
	c.dst = dst
	err := e.run(ctx, c, func(now int64, r *stack.Request) stack.Actions {
		return e.st.Read(now, h, g, off, int64(len(dst)), r)
	})
	n := c.n
	e.putCall(c)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Pay waits until group g may read n bytes at off, which the caller then
// reads itself (stack.Stack.Pay): the throttle charges and paces it, and
// neither sluice's cache nor its device reads are involved. A cancelled
// ctx withdraws what is not yet admitted (EINTR). Where the returned
// Payment is Due (the device is shared), the caller reports its read with
// Paid, after it, whatever its outcome.
func (e *Engine) Pay(ctx context.Context, h *stack.Handle, g *throttle.Group, off, n int64) (stack.Payment, error) {
	c := e.getCall()
	err := e.run(ctx, c, func(now int64, r *stack.Request) stack.Actions {
		return e.st.Pay(now, h, g, off, n, r)
	})
	p := c.req.TakePayment()
	e.putCall(c)
	return p, err
}

// Paid reports that the caller's read of a Pay returned n bytes now
// (stack.Stack.Paid); it does nothing where p is not Due.
func (e *Engine) Paid(p stack.Payment, n int) {
	if !p.Due() {
		return
	}
	e.mu.Lock()
	e.apply(e.st.Paid(e.now(), p, int64(n)))
	e.mu.Unlock()
}

// Write writes data at off to w for group g: each MaxIO piece is written
// as the throttle admits it, so the device sees the group's rate in steps
// of at most MaxIO. It returns fewer bytes than len(data) when a piece
// failed or came short, or when the wait reached MaxWait (for a handle
// that is not Whole). Cached pages the write touches are dropped. A
// cancelled ctx of a dying caller withdraws the pieces not yet admitted
// (EINTR); pieces already being written finish first.
func (e *Engine) Write(ctx context.Context, h *stack.Handle, g *throttle.Group, w WriterAt, data []byte, off int64) (int, error) {
	return e.submitWrite(ctx, w, data, func(now int64, r *stack.Request) stack.Actions {
		return e.st.Write(now, h, g, off, int64(len(data)), r)
	})
}

// WriteBack writes data at off to w for the kernel's writeback, which no
// caller waits on: at once, charged to g as debt that its later requests
// pay (stack.WriteBack). It is not interrupted.
func (e *Engine) WriteBack(h *stack.Handle, g *throttle.Group, w WriterAt, data []byte, off int64) (int, error) {
	return e.submitWrite(context.Background(), w, data, func(now int64, r *stack.Request) stack.Actions {
		return e.st.WriteBack(now, h, g, off, int64(len(data)), r)
	})
}

// submitWrite starts a write of data to w with start (the stack's Write
// or WriteBack) and waits for it.
func (e *Engine) submitWrite(ctx context.Context, w WriterAt, data []byte, start func(int64, *stack.Request) stack.Actions) (int, error) {
	c := e.getCall()
	c.data, c.w = data, w
	err := e.run(ctx, c, start)
	n := int(c.req.Size())
	e.putCall(c)
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Syncer is a backing file as the engine flushes it.
type Syncer interface {
	Sync() error
}

// SyncFunc is a function used as a Syncer.
type SyncFunc func() error

func (f SyncFunc) Sync() error { return f() }

// Sync makes w's data durable (fsync) for group g, as one flush I/O that
// the stack sees like any other device I/O. It is not interrupted: once
// started, a flush runs to its end.
func (e *Engine) Sync(h *stack.Handle, g *throttle.Group, w Syncer) error {
	c := e.getCall()
	c.sync = w
	err := e.run(context.Background(), c, func(now int64, r *stack.Request) stack.Actions {
		return e.st.Sync(now, h, g, r)
	})
	e.putCall(c)
	return err
}

// run starts c's request with start (one of the stack's request calls)
// and waits for it: the error of the wait (EINTR), else the request's.
func (e *Engine) run(ctx context.Context, c *call, start func(now int64, r *stack.Request) stack.Actions) error {
	e.mu.Lock()
	e.apply(start(e.now(), &c.req))
	e.mu.Unlock()
	if err := e.wait(ctx, c); err != nil {
		return err
	}
	return c.req.Err
}

// wait blocks until c's request has finished, or ctx is cancelled for a
// caller that is being killed (EINTR). Meanwhile it performs the device
// I/O handed to it: reads of its pages, pieces of its write.
func (e *Engine) wait(ctx context.Context, c *call) error {
	cancel := ctx.Done()
	var poll <-chan time.Time
	for {
		select {
		case j := <-c.work:
			e.do(j)
			continue
		case <-c.done:
			e.drain(c)
			return nil
		case <-cancel:
			if e.dying != nil && !e.dying(ctx) {
				// A signal the caller survives: finish the request, and
				// watch for a fatal one while it waits.
				cancel = nil
				t := time.NewTicker(DyingPoll)
				defer t.Stop()
				poll = t.C
				continue
			}
		case <-poll:
			if !e.dying(ctx) {
				continue
			}
		}
		e.mu.Lock()
		e.apply(e.st.Cancel(e.now(), &c.req))
		e.mu.Unlock()
		<-c.done // a read at once; a write once its started pieces are written
		e.drain(c)
		if c.req.Err == stack.ErrCanceled {
			return syscall.EINTR
		}
		return nil
	}
}

// drain performs device I/O handed to c before its request finished
// without it (a read cut at the wait cap, or cancelled: other readers wait
// for those pages). Work is handed over only while the request is unfinished,
// so it is in the channel before the token that says it finished.
func (e *Engine) drain(c *call) {
	select {
	case j := <-c.work:
		e.do(j)
	default:
	}
}

// apply performs a stack's actions, with mu held: it hands device I/O to
// the goroutine of a request waiting for it (or starts a goroutine when
// there is none free), copies finished reads out and wakes their callers, keeps the page buffers the stack let go for the next device
// reads, arms the timer, and gives the stack its slices back.
func (e *Engine) apply(a stack.Actions) {
	for i := 0; i < len(a.Start); {
		io := a.Start[i]
		switch io.Op {
		case stack.OpRead:
			// A read that waits for the pages performs it: no goroutine
			// to start, and one hand-off fewer before the reply.
			if r := io.Waiter(); r != nil {
				select {
				case r.Value.(*call).work <- job{read: io}:
					i++
					continue
				default:
				}
			}
			e.io.Add(1)
			go e.goDevice(io)
			i++
		case stack.OpFlush:
			e.io.Add(1)
			go e.goFlush(io)
			i++
		case stack.OpWriteback:
			e.io.Add(1)
			go e.goWriteback(io)
			i++
		default:
			// Pieces of one write admitted together, end to end, go to
			// the file in one call.
			j := i + 1
			for j < len(a.Start) && a.Start[j].Op == stack.OpWrite && a.Start[j].Request() == io.Request() &&
				a.Start[j].Off == a.Start[j-1].Off+a.Start[j-1].Len {
				j++
			}
			// The writer waits for them: it writes them itself.
			work := io.Request().Value.(*call).work
			if j == i+1 {
				i = j
				select {
				case work <- job{piece: io}:
				default:
					e.io.Add(1)
					go e.goWriteOne(io)
				}
				continue
			}
			pieces := slices.Clone(a.Start[i:j])
			i = j
			select {
			case work <- job{pieces: pieces}:
			default:
				e.io.Add(1)
				go e.goWrite(pieces)
			}
		}
	}
	for _, r := range a.Done {
		c := r.Value.(*call)
		if c.dst != nil && r.Err == nil {
			// Here, under mu: the stack may let the pages go at its next
			// call, and their buffers are then read into again.
			c.n = r.CopyTo(c.dst)
		}
		c.done <- struct{}{}
	}
	for _, b := range a.Free {
		if cap(b) < stack.PageSize {
			continue
		}
		select {
		case e.pages <- (*[stack.PageSize]byte)(b[:stack.PageSize]):
		default: // enough spares: the collector takes it
		}
	}
	if a.Wake >= 0 && !e.closed && (e.armedAt < 0 || a.Wake < e.armedAt) {
		e.armedAt = a.Wake
		e.alarm.arm(time.Duration(a.Wake - e.now()))
	}
	if a.Queued && e.queued != nil {
		select {
		case e.queued <- struct{}{}:
		default:
		}
	}
	e.st.Recycle(a)
}

// tick runs when the timer fires: release what is due.
func (e *Engine) tick() {
	e.mu.Lock()
	e.armedAt = -1
	e.apply(e.st.Tick(e.now()))
	e.mu.Unlock()
}

// device performs one device read and reports it to the stack, each page
// copied out of the aligned read buffer into a page buffer of its own, so
// the cache's memory bound holds page by page. Page buffers the stack let
// go are used again.
func (e *Engine) device(io_ *stack.IO) {
	var arr [32][]byte
	pages := arr[:0]
	f, ok := io_.File.(ReaderAt)
	err := errNoFile
	if ok {
		bp := e.buffer(int(io_.Len))
		buf := (*bp)[:io_.Len]
		var got int
		got, err = readFull(f, buf, io_.Off)
		for off := 0; off < got; off += stack.PageSize {
			var pb *[stack.PageSize]byte
			select {
			case pb = <-e.pages:
			default:
				pb = new([stack.PageSize]byte)
			}
			pages = append(pages, pb[:copy(pb[:], buf[off:got])])
		}
		e.bufs.Put(bp)
	}
	e.mu.Lock()
	e.apply(e.st.Complete(e.now(), io_, pages, err))
	e.mu.Unlock()
}

// write writes consecutive pieces of one application write with one call
// and reports each piece.
// writeOne is write of a single piece, which needs no slice of its own.
func (e *Engine) writeOne(io *stack.IO) { e.write([]*stack.IO{io}) }

func (e *Engine) write(ios []*stack.IO) {
	r := ios[0].Request()
	c := r.Value.(*call)
	first, last := ios[0], ios[len(ios)-1]
	lo := first.Off - r.Off()
	n, err := c.w.WriteAt(c.data[lo:lo+last.Off+last.Len-first.Off], first.Off)
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, pc := range ios {
		got := min(max(int64(n)-(pc.Off-first.Off), 0), pc.Len)
		var perr error
		if got < pc.Len {
			perr = err
			if perr == nil {
				perr = io.ErrShortWrite
			}
		}
		e.apply(e.st.Wrote(e.now(), pc, got, perr))
	}
}

// flush performs an fsync for the stack.
func (e *Engine) flush(io *stack.IO) {
	err := io.Request().Value.(*call).sync.Sync()
	e.mu.Lock()
	e.apply(e.st.Wrote(e.now(), io, 0, err))
	e.mu.Unlock()
}

// Writebacker is a backing file whose writeback the engine starts early
// (stack.OpWriteback).
type Writebacker interface {
	StartWriteback(off, n int64) error
}

// writeback starts the backing page cache's writeback of io's range.
func (e *Engine) writeback(io *stack.IO) {
	var err error
	if w, ok := io.File.(Writebacker); ok {
		err = w.StartWriteback(io.Off, io.Len)
	}
	e.mu.Lock()
	e.apply(e.st.Wrote(e.now(), io, 0, err))
	e.mu.Unlock()
}

// buffer returns an aligned read buffer of at least n bytes, reusing
// pooled ones; put it back into bufs.
func (e *Engine) buffer(n int) *[]byte {
	if p, ok := e.bufs.Get().(*[]byte); ok && cap(*p) >= n {
		return p
	}
	b := alignedBuf(max(n, int(e.st.Options().MaxIO)))
	return &b
}

// readFull reads until buf is full or end of file: only a read that
// returns nothing marks the end. A short read in the middle of a file (a
// network file system may return one) is continued; on an O_DIRECT file
// the continuation of a read short of a page boundary is refused as
// unaligned (EINVAL), and there only the end of the file ends a read short.
func readFull(f ReaderAt, buf []byte, off int64) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := f.ReadAt(buf[n:], off+int64(n))
		n += m
		if err == io.EOF || (err == nil && m == 0) {
			return n, nil
		}
		if err != nil {
			if errors.Is(err, syscall.EINTR) {
				continue
			}
			if errors.Is(err, syscall.EINVAL) && n%stack.PageSize != 0 {
				return n, nil
			}
			return n, err
		}
	}
	return n, nil
}

// alignedBuf returns a page-aligned buffer of n bytes, as O_DIRECT needs.
func alignedBuf(n int) []byte {
	b := make([]byte, n+stack.PageSize)
	skip := 0
	if r := int(uintptr(unsafe.Pointer(&b[0])) % stack.PageSize); r != 0 {
		skip = stack.PageSize - r
	}
	return b[skip : skip+n]
}
