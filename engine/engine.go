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
	stack.Options
	// MaxWait caps how long one request waits for the throttle; when a wait
	// reaches it, the request's I/Os are admitted and charged in full (the
	// group goes into debt that later requests pay), so the long-run rate
	// stays exact and no request outlives the kernel's request timeout.
	// The default, 0, means no cap.
	MaxWait time.Duration
	// Dying reports whether the caller of an interrupted request is being
	// killed. The kernel interrupts a request for any signal, but only a
	// dying caller must be answered at once (EINTR); a caller that merely
	// caught a signal (Go's preemption, SIGCHLD, a timer) gets its data, as
	// from a local file, which a read never fails with EINTR. While a
	// request waits after an interrupt, Dying is asked again every
	// DyingPoll. The default, nil, takes every interrupt as fatal.
	Dying func(ctx context.Context) bool
}

// DyingPoll is how often a request that was interrupted by a signal the
// caller survives checks whether its caller is now being killed.
const DyingPoll = 50 * time.Millisecond

// Engine is the real-time driver of a stack. It is safe for concurrent use.
type Engine struct {
	mu      sync.Mutex
	st      *stack.Stack
	epoch   time.Time
	timer   *time.Timer
	armedAt int64 // when the timer fires; -1 when not armed
	maxWait time.Duration
	dying   func(context.Context) bool
	closed  bool
	bufs    sync.Pool // *[]byte aligned read buffers of MaxIO bytes
}

// New returns an engine; see stack.Options for the defaults.
func New(opts Options) (*Engine, error) {
	st, err := stack.New(opts.Options)
	if err != nil {
		return nil, err
	}
	e := &Engine{st: st, epoch: time.Now(), armedAt: -1, maxWait: opts.MaxWait, dying: opts.Dying}
	e.timer = time.AfterFunc(time.Hour, e.tick)
	e.timer.Stop()
	return e, nil
}

// Close stops the timer. Requests still waiting are not woken; close the
// engine only after the FUSE server has stopped.
func (e *Engine) Close() {
	e.mu.Lock()
	e.closed = true
	e.timer.Stop()
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

// Read reads into dst at off through h for group g: from sluice's cache,
// with readahead, device reads split into MaxIO pieces and throttled per
// group. It returns fewer bytes than len(dst) only at end of file. A
// cancelled ctx (a FUSE interrupt) withdraws the request with EINTR.
func (e *Engine) Read(ctx context.Context, h *stack.Handle, g *throttle.Group, dst []byte, off int64) (int, error) {
	r := &stack.Request{Value: make(chan struct{})}
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

// Write writes data at off to w for group g, after the throttle admits each
// MaxIO piece. Cached pages the write touches are dropped. A cancelled ctx
// before admission withdraws the write with EINTR (nothing is written).
func (e *Engine) Write(ctx context.Context, h *stack.Handle, g *throttle.Group, w WriterAt, data []byte, off int64) (int, error) {
	r := &stack.Request{Value: make(chan struct{})}
	e.mu.Lock()
	a := e.st.Write(e.now(), h, g, off, int64(len(data)), r)
	e.mu.Unlock()
	e.apply(a)
	if err := e.wait(ctx, r); err != nil {
		return 0, err
	}
	n, err := w.WriteAt(data, off)
	e.mu.Lock()
	a = e.st.Written(e.now(), r, int64(max(n, 0)))
	e.mu.Unlock()
	e.apply(a)
	return n, err
}

// wait blocks until r is done, ctx is cancelled for a caller that is being
// killed (EINTR), or the wait cap is reached (then r is forced through and
// waited for).
func (e *Engine) wait(ctx context.Context, r *stack.Request) error {
	done := r.Value.(chan struct{})
	var capC <-chan time.Time
	if e.maxWait > 0 {
		t := time.NewTimer(e.maxWait)
		defer t.Stop()
		capC = t.C
	}
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
		case <-capC:
			e.mu.Lock()
			a := e.st.Force(e.now(), r)
			e.mu.Unlock()
			e.apply(a)
			<-done
			return nil
		}
		e.mu.Lock()
		a := e.st.Cancel(e.now(), r)
		e.mu.Unlock()
		e.apply(a)
		select {
		case <-done: // finished before the cancel took hold
			if r.Err == stack.ErrCanceled {
				return syscall.EINTR
			}
			return nil
		default:
			return syscall.EINTR
		}
	}
}

// apply performs a stack's actions: start device reads, wake finished
// requests, arm the timer. Called without the mutex held.
func (e *Engine) apply(a stack.Actions) {
	for _, io := range a.Start {
		go e.device(io)
	}
	for _, r := range a.Done {
		close(r.Value.(chan struct{}))
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
	e.timer.Reset(time.Duration(a.Wake - e.now()))
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
