// Package engine drives a stack on the wall clock: it calls the stack under
// one mutex from the goroutines that carry application requests, runs device
// reads on their own goroutines, and keeps one timer armed for the stack's
// next wake-up. All waiting in sluice's I/O path happens here.
package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync"
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
	bufs    sync.Pool // *[]byte aligned read buffers of MaxIO bytes
}

// New returns an engine; opts.Options must pass stack.Options.Validate
// (start from stack.DefaultOptions).
func New(opts Options) (*Engine, error) {
	st, err := stack.New(opts.Options)
	if err != nil {
		return nil, err
	}
	e := &Engine{st: st, epoch: time.Now(), armedAt: -1, dying: opts.Dying}
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
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	e.alarm.stop()
	e.mu.Unlock()
}

// Options returns the stack options in force.
func (e *Engine) Options() stack.Options { return e.st.Options() }

func (e *Engine) now() int64 { return int64(time.Since(e.epoch)) }

// Group returns the group for path, creating it.
func (e *Engine) Group(path string) *throttle.Group {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.st.Group(path)
}

// ReadLimits returns the tightest read limits on g's path: bytes and
// I/Os per second, 0 where no level limits them.
func (e *Engine) ReadLimits(g *throttle.Group) (bps, iops int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	tight := func(cur, v int64) int64 {
		if v == 0 || cur != 0 && cur <= v {
			return cur
		}
		return v
	}
	for x := g; x != nil; x = x.Parent() {
		l := x.Limits()
		bps, iops = tight(bps, l.RBPS), tight(iops, l.RIOPS)
	}
	return bps, iops
}

// SetLimits changes a group's limits now; queued requests are re-timed.
func (e *Engine) SetLimits(path string, l throttle.Limits) {
	e.mu.Lock()
	a := e.st.SetLimits(e.now(), path, l)
	e.mu.Unlock()
	e.apply(a)
}

// UpdateLimits changes a group's limits to fn of its current ones, in one
// step: concurrent updates of different keys do not lose each other.
func (e *Engine) UpdateLimits(path string, fn func(throttle.Limits) throttle.Limits) {
	e.mu.Lock()
	l := fn(e.st.Group(path).Limits())
	a := e.st.SetLimits(e.now(), path, l)
	e.mu.Unlock()
	e.apply(a)
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

// waiter is a request's Value: what wakes its goroutine, for a write the
// data its pieces take their bytes from and the file they go to, for a
// sync the file to flush.
type waiter struct {
	done chan struct{}
	data []byte
	w    WriterAt
	sync Syncer
}

// Read reads into dst at off through h for group g: from sluice's cache,
// with readahead, device reads split into MaxIO pieces and throttled per
// group. It returns fewer bytes than len(dst) at end of file, or when the
// wait reached MaxWait (for a handle that is not Whole). A cancelled ctx (a
// FUSE interrupt) of a dying caller withdraws the request with EINTR.
func (e *Engine) Read(ctx context.Context, h *stack.Handle, g *throttle.Group, dst []byte, off int64) (int, error) {
	r := &stack.Request{Value: &waiter{done: make(chan struct{})}}
	e.mu.Lock()
	a := e.st.Read(e.now(), h, g, off, int64(len(dst)), r)
	e.mu.Unlock()
	e.apply(a)
	if err := e.wait(ctx, r); err != nil {
		return 0, err
	}
	if r.Err != nil {
		return 0, r.Err
	}
	return r.CopyTo(dst), nil
}

// Pay waits until group g may read n bytes at off, which the caller then
// reads itself (stack.Stack.Pay): the throttle charges and paces it, and
// neither sluice's cache nor its device reads are involved. A cancelled
// ctx withdraws what is not yet admitted (EINTR).
func (e *Engine) Pay(ctx context.Context, h *stack.Handle, g *throttle.Group, off, n int64) error {
	r := &stack.Request{Value: &waiter{done: make(chan struct{})}}
	e.mu.Lock()
	a := e.st.Pay(e.now(), h, g, off, n, r)
	e.mu.Unlock()
	e.apply(a)
	if err := e.wait(ctx, r); err != nil {
		return err
	}
	return r.Err
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
	r := &stack.Request{Value: &waiter{done: make(chan struct{}), data: data, w: w}}
	e.mu.Lock()
	a := start(e.now(), r)
	e.mu.Unlock()
	e.apply(a)
	if err := e.wait(ctx, r); err != nil {
		return 0, err
	}
	if r.Err != nil {
		return 0, r.Err
	}
	return int(r.Size()), nil
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
	r := &stack.Request{Value: &waiter{done: make(chan struct{}), sync: w}}
	e.mu.Lock()
	a := e.st.Sync(e.now(), h, g, r)
	e.mu.Unlock()
	e.apply(a)
	<-r.Value.(*waiter).done
	return r.Err
}

// wait blocks until r is done, or ctx is cancelled for a caller that is
// being killed (EINTR).
func (e *Engine) wait(ctx context.Context, r *stack.Request) error {
	done := r.Value.(*waiter).done
	cancel := ctx.Done()
	var poll <-chan time.Time
	for {
		select {
		case <-done:
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
		a := e.st.Cancel(e.now(), r)
		e.mu.Unlock()
		e.apply(a)
		<-done // a read at once; a write once its started pieces are written
		if r.Err == stack.ErrCanceled {
			return syscall.EINTR
		}
		return nil
	}
}

// apply performs a stack's actions: start device reads, wake finished
// requests, arm the timer. Called without the mutex held.
func (e *Engine) apply(a stack.Actions) {
	for i := 0; i < len(a.Start); {
		io := a.Start[i]
		switch io.Op {
		case stack.OpRead:
			go e.device(io)
			i++
		case stack.OpFlush:
			go e.flush(io)
			i++
		case stack.OpWriteback:
			go e.writeback(io)
			i++
		default:
			// Pieces of one write admitted together, end to end, go to
			// the file in one call.
			j := i + 1
			for j < len(a.Start) && a.Start[j].Op == stack.OpWrite && a.Start[j].Request() == io.Request() &&
				a.Start[j].Off == a.Start[j-1].Off+a.Start[j-1].Len {
				j++
			}
			go e.write(a.Start[i:j:j])
			i = j
		}
	}
	for _, r := range a.Done {
		close(r.Value.(*waiter).done)
	}
	if a.Wake < 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || (e.armedAt >= 0 && e.armedAt <= a.Wake) {
		return
	}
	e.armedAt = a.Wake
	e.alarm.arm(time.Duration(a.Wake - e.now()))
}

// tick runs when the timer fires: release what is due.
func (e *Engine) tick() {
	e.mu.Lock()
	e.armedAt = -1
	a := e.st.Tick(e.now())
	e.mu.Unlock()
	e.apply(a)
}

// device performs one device read and reports it to the stack, each page
// copied out of the aligned read buffer into its own allocation, so the
// cache's memory bound holds page by page.
func (e *Engine) device(io_ *stack.IO) {
	var pages [][]byte
	f, ok := io_.File.(ReaderAt)
	err := errors.New("engine: I/O without a backing file")
	if ok {
		buf := e.buffer(int(io_.Len))
		var got int
		got, err = readFull(f, buf, io_.Off)
		for off := 0; off < got; off += stack.PageSize {
			pages = append(pages, bytes.Clone(buf[off:min(off+stack.PageSize, got)]))
		}
		e.bufs.Put(&buf)
	}
	e.mu.Lock()
	a := e.st.Complete(e.now(), io_, pages, err)
	e.mu.Unlock()
	e.apply(a)
}

// write writes consecutive pieces of one application write with one call
// and reports each piece.
func (e *Engine) write(ios []*stack.IO) {
	r := ios[0].Request()
	wt := r.Value.(*waiter)
	first, last := ios[0], ios[len(ios)-1]
	lo := first.Off - r.Off()
	n, err := wt.w.WriteAt(wt.data[lo:lo+last.Off+last.Len-first.Off], first.Off)
	e.mu.Lock()
	var a stack.Actions
	for _, pc := range ios {
		got := min(max(int64(n)-(pc.Off-first.Off), 0), pc.Len)
		var perr error
		if got < pc.Len {
			perr = err
			if perr == nil {
				perr = io.ErrShortWrite
			}
		}
		a = merge(a, e.st.Wrote(e.now(), pc, got, perr))
	}
	e.mu.Unlock()
	e.apply(a)
}

// flush performs an fsync for the stack.
func (e *Engine) flush(io *stack.IO) {
	err := io.Request().Value.(*waiter).sync.Sync()
	e.mu.Lock()
	a := e.st.Wrote(e.now(), io, 0, err)
	e.mu.Unlock()
	e.apply(a)
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
	a := e.st.Wrote(e.now(), io, 0, err)
	e.mu.Unlock()
	e.apply(a)
}

// merge appends b's actions to a's; b's wake-up replaces a's.
func merge(a, b stack.Actions) stack.Actions {
	a.Start = append(a.Start, b.Start...)
	a.Done = append(a.Done, b.Done...)
	a.Wake = b.Wake
	return a
}

// buffer returns an aligned read buffer of n bytes, reusing pooled ones.
func (e *Engine) buffer(n int) []byte {
	if p, ok := e.bufs.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return alignedBuf(max(n, int(e.st.Options().MaxIO)))[:n]
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
