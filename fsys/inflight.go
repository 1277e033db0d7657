package fsys

import (
	"context"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"sluice/throttle"
)

// InFlight is how many reads and writes of one group the mount is
// serving now, and since when the oldest: a request that SOURCE holds (a
// backing read that never returns) shows as one in flight for ever
// longer, where a throttled one is answered within --max-wait.
type InFlight struct {
	Group    string `json:"group"`
	Requests int    `json:"requests"`
	// OldestNs is how long the oldest of them has been served, in ns.
	OldestNs int64 `json:"oldest_ns"`
}

// flights are the reads and writes being served, each in a slot that
// holds its group and when it began; slots are reused, so that counting
// a request allocates nothing once the mount has served as many at once.
type flights struct {
	mu    sync.Mutex
	slots []flight
	free  []int // indexes of unused slots
}

type flight struct {
	g      *throttle.Group // nil: unused
	since  time.Time
	ctx    context.Context // the request's: done once the kernel interrupts it
	unique uint64          // the request's, for an early answer
	// sweeps counts the sweeps that found the request interrupted; -1
	// once it was answered early.
	sweeps int
}

// begin counts the request unique of g in and returns its slot, for end.
func (f *flights) begin(g *throttle.Group, ctx context.Context, unique uint64) int {
	x := flight{g: g, since: time.Now(), ctx: ctx, unique: unique}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := len(f.free); n > 0 {
		i := f.free[n-1]
		f.free = f.free[:n-1]
		f.slots[i] = x
		return i
	}
	f.slots = append(f.slots, x)
	return len(f.slots) - 1
}

// end counts the request in slot i out.
func (f *flights) end(i int) {
	f.mu.Lock()
	f.slots[i] = flight{}
	f.free = append(f.free, i)
	f.mu.Unlock()
}

// snapshot returns the requests in flight per group, by group name.
func (f *flights) snapshot(now time.Time) []InFlight {
	f.mu.Lock()
	by := map[*throttle.Group]*InFlight{}
	for _, s := range f.slots {
		if s.g == nil {
			continue
		}
		x := by[s.g]
		if x == nil {
			x = &InFlight{Group: s.g.Path()}
			by[s.g] = x
		}
		x.Requests++
		x.OldestNs = max(x.OldestNs, int64(now.Sub(s.since)))
	}
	f.mu.Unlock()
	out := make([]InFlight, 0, len(by))
	for _, x := range by {
		out = append(out, *x)
	}
	slices.SortFunc(out, func(a, b InFlight) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// InFlight lists, per group with any, the reads and writes the mount is
// serving now (see InFlight).
func (f *FS) InFlight() []InFlight { return f.flights.snapshot(time.Now()) }

// sweepEvery is how often the requests in flight are looked at for one
// interrupted by a fatal signal and not answered.
const sweepEvery = 100 * time.Millisecond

// sweep answers EINTR, through answer, to each request in flight that
// the kernel interrupted two sweeps ago or more and whose caller is
// dying (see dying), once. Such a request is held in SOURCE (a throttled
// one is answered by the engine at the interrupt): the kernel would keep
// its caller unkillable until SOURCE returned, for ever if it never does.
// The request stays counted in flight until it returns; its own reply
// then comes too late, and the kernel refuses it.
func (f *flights) sweep(answer func(unique uint64, errno syscall.Errno) error, dying func(context.Context) bool) {
	var due []int
	f.mu.Lock()
	for i := range f.slots {
		x := &f.slots[i]
		if x.g == nil || x.sweeps < 0 || x.unique == 0 {
			continue
		}
		select {
		case <-x.ctx.Done():
			if x.sweeps++; x.sweeps >= 2 {
				due = append(due, i)
			}
		default:
		}
	}
	f.mu.Unlock()
	for _, i := range due {
		f.mu.Lock()
		x := f.slots[i]
		f.mu.Unlock()
		if x.g == nil || !dying(x.ctx) {
			continue
		}
		f.mu.Lock()
		if f.slots[i].unique != x.unique || f.slots[i].sweeps < 0 {
			f.mu.Unlock()
			continue
		}
		f.slots[i].sweeps = -1
		f.mu.Unlock()
		answer(x.unique, syscall.EINTR)
	}
}

// sweepInterrupts runs sweep every sweepEvery until stop is closed.
func (f *flights) sweepInterrupts(stop <-chan struct{}, answer func(uint64, syscall.Errno) error, dying func(context.Context) bool) {
	t := time.NewTicker(sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			f.sweep(answer, dying)
		}
	}
}
