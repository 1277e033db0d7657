package cost

import (
	"fmt"
	"math/bits"
	"time"
)

// Options tune a Controller. The zero value takes every default.
type Options struct {
	// Period is how often the capacity is decided. The default is 50ms.
	Period time.Duration
	// Threshold and Slack say when a completion was slow: its latency
	// above Threshold times what it takes on a device with room, plus
	// Slack. That is the larger of the 10th percentile of the latencies
	// of I/Os of its kind and size (an estimate that falls fast on lower
	// latencies and rises slowly on higher ones, so a device that became
	// slower for good is learned again; it starts from the least of the
	// kind's first 32 completions, and rises only in periods that follow
	// one in which the device had room: no one competed for it, or the
	// capacity held requests back) and the device time the model
	// prices it at (an I/O that always waits behind larger ones is never
	// seen alone). The device is saturated when slow completions hold
	// most of the period's device time. The defaults are 1.5 and 200µs.
	Threshold float64
	Slack     time.Duration
	// Idle is the share of a period with no I/O in flight above which the
	// device is not saturated, however slow its completions: a device
	// serving one I/O at a time keeps a small read waiting behind a large
	// one without being saturated, and is saturated only once it is never
	// idle. The default is 0.01.
	Idle float64
	// Up is the factor the capacity is multiplied by after a Period in
	// which requests waited on it while the device kept up, at least; by
	// 1 plus the share of the period the device was idle, if that is
	// more. Down is the factor of what the device completed in a
	// saturated Period that the capacity is set to, if that is less. The
	// defaults are 1.02 and 0.97.
	Up, Down float64
	// Calm is how long the device must be neither saturated nor holding
	// requests back before the capacity is lifted (nobody waits until it
	// saturates again). The default is 1s.
	Calm time.Duration
}

// The defaults of Options.
const (
	DefaultPeriod    = 50 * time.Millisecond
	DefaultThreshold = 1.5
	DefaultSlack     = 200 * time.Microsecond
	DefaultIdle      = 0.01
	DefaultUp        = 1.02
	DefaultDown      = 0.97
	DefaultCalm      = time.Second
)

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	if o.Period == 0 {
		o.Period = DefaultPeriod
	}
	if o.Slack == 0 {
		o.Slack = DefaultSlack
	}
	if o.Calm == 0 {
		o.Calm = DefaultCalm
	}
	def(&o.Threshold, DefaultThreshold)
	def(&o.Idle, DefaultIdle)
	def(&o.Up, DefaultUp)
	def(&o.Down, DefaultDown)
}

// Validate names the first field that holds a value a Controller cannot
// use.
func (o *Options) Validate() error {
	switch {
	case o.Period < time.Millisecond:
		return fmt.Errorf("cost: Period %v: want at least 1ms", o.Period)
	case o.Threshold < 1:
		return fmt.Errorf("cost: Threshold %v: want at least 1", o.Threshold)
	case o.Idle <= 0 || o.Idle >= 1:
		return fmt.Errorf("cost: Idle %v: want between 0 and 1", o.Idle)
	case o.Slack < 0:
		return fmt.Errorf("cost: Slack %v: must not be negative", o.Slack)
	case o.Up <= 1:
		return fmt.Errorf("cost: Up %v: want more than 1", o.Up)
	case o.Down <= 0 || o.Down >= 1:
		return fmt.Errorf("cost: Down %v: want between 0 and 1", o.Down)
	case o.Calm < o.Period:
		return fmt.Errorf("cost: Calm %v: want at least Period (%v)", o.Calm, o.Period)
	}
	return nil
}

// Controller decides the device's capacity, in ns of device time
// (Model.Cost) per second (see the package doc). It is not safe for concurrent use.
type Controller struct {
	o     Options
	rate  int64 // device ns a second; 0: no capacity, nobody waits
	end   int64 // when the current period ends (0: not started)
	calm  int64 // since when the device has been calm (0: it is not)
	floor [2][2][buckets]int64
	seen  [2][2][buckets]int // completions each floor has learned from
	// this period's completions: all, slow ones, those of groups with a
	// latency target and those that missed it, and the Units completed
	total, targeted, missed int
	units, slow             int64 // of all completions, and of the slow ones
	// lat and expect sum the period's latencies and what each would
	// take with room (the larger of its kind's percentile and its price)
	lat, expect        int64
	done               int64
	backlog, contended bool
	// frozen holds the latency percentiles still for a period: the one
	// before it found groups competing for the device and none of them
	// held back by the capacity, so their queue may be in the device and
	// its latencies are not what the device takes with room.
	frozen  bool
	busy    int64 // Model.Busy at the period's start
	stretch int   // periods the current one was extended by
	// State is what the last period found, for the mount's counters.
	State State
}

// State is what a Controller's last period found.
type State struct {
	// Saturated: the device was saturated (or a latency target missed).
	Saturated bool
	// Backlogged: requests waited on the capacity while the device kept
	// up.
	Backlogged bool
	// Done is what the device completed in the period, in device ns a
	// second as the model prices it.
	Done int64
	// Idle is the share of the period with no I/O in flight.
	Idle float64
	// Queued says the period's completions took, on the mean, more than
	// Threshold times what they take with room, plus Slack, while others
	// competed for the device: it queues them, though most may have been
	// quick (a rate server such as blk-throttle lets most through at
	// once and holds the rest to its next slice). The capacity is not
	// decided by it; the hosts of a cluster divide the device by it.
	Queued bool
	// Capacity is the capacity decided, device ns a second (0: none).
	Capacity int64
	// Periods counts the periods decided, Saturations those saturated.
	Periods, Saturations int64
}

// buckets are the sizes the least latencies are kept for: powers of two
// from 4 KiB (and below) to 1 MiB (and above).
const buckets = 9

func bucket(n int64) int {
	if n <= 4096 {
		return 0
	}
	return min(bits.Len64(uint64(n-1))-12, buckets-1)
}

// NewController returns a Controller with o, which after EnsureDefaults
// must pass Validate (it panics otherwise).
func NewController(o Options) *Controller {
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		panic(err)
	}
	return &Controller{o: o}
}

// Capacity returns the capacity in force, device ns a second (0: none).
func (c *Controller) Capacity() int64 { return c.rate }

// Observe takes a completion at now: an I/O in direction d, random or
// sequential, of n bytes, which the model prices at units ns of device
// time (Model.Cost), and which took latency ns; target is its group's
// latency target (0: none).
func (c *Controller) Observe(now int64, d Dir, random bool, n, units, latency, target int64) {
	c.start(now)
	f := &c.floor[d&1][b2i(random)][bucket(n)]
	k := &c.seen[d&1][b2i(random)][bucket(n)]
	*k++
	switch {
	case *f == 0 || *k <= warmup && latency < *f:
		// The first completions of a kind set its percentile to their
		// least: one that a stall held (the first read of a cold file,
		// a sync beside it) must not stand for the device's latency.
		*f = latency
	case *k <= warmup:
	case latency < *f:
		// Lower is always learned: the device did that, whatever the
		// period (a frozen percentile that stood too high would never
		// find the device saturated, and so stay frozen).
		*f -= max(int64(float64(*f)*quantStep*(1-quantile)), 1)
	case c.frozen:
	default:
		*f += max(int64(float64(*f)*quantStep*quantile), 1)
	}
	c.total++
	c.units += units
	room := max(*f, units) // what it takes with room
	c.lat += latency
	c.expect += room
	if float64(latency) > float64(room)*c.o.Threshold+float64(c.o.Slack) {
		c.slow += units
	}
	if target > 0 {
		c.targeted++
		if latency > target {
			c.missed++
		}
	}
	c.done += units
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Contended notes that at now more than one group had requests queued or
// in the device: a period without it is never saturated, for one group
// alone competes with no one, and the queue it keeps in the device is its
// own.
func (c *Controller) Contended(now int64) {
	c.start(now)
	c.contended = true
}

// Backlog notes that at now requests waited on the capacity alone.
func (c *Controller) Backlog(now int64) {
	c.start(now)
	c.backlog = true
}

func (c *Controller) start(now int64) {
	if c.end == 0 {
		c.end = now + int64(c.o.Period)
	}
}

// Next returns when Tick is due next: the end of the current period, or
// -1 before anything was observed.
func (c *Controller) Next() int64 {
	if c.end == 0 {
		return -1
	}
	return c.end
}

// Tick decides the capacity for the period that starts at now, if the
// current one has ended, and reports whether it changed. busy is the
// model's busy time (Model.Busy).
func (c *Controller) Tick(now, busy int64) bool {
	if c.end == 0 || now < c.end {
		return false
	}
	period := int64(c.o.Period)
	if c.total < minSamples && c.targeted < minTargeted && c.total > 0 && c.stretch < maxStretch {
		// Too few completions to tell (large I/Os of a slow device): the
		// period goes on.
		c.end += period
		c.stretch++
		return false
	}
	elapsed := now - (c.end - period*int64(1+c.stretch))
	c.stretch = 0
	done := c.done * int64(time.Second) / max(elapsed, 1)
	idle := 1 - float64(busy-c.busy)/float64(max(elapsed, 1))
	c.busy = busy
	saturated := c.contended && (c.total >= minSamples && c.slow*2 > c.units && idle < c.o.Idle ||
		c.targeted >= minTargeted && c.missed*10 > c.targeted)
	backlog := c.backlog && !saturated
	old := c.rate
	switch {
	case saturated:
		// Below what the device just completed: its queue drains, and
		// requests wait where they are ordered.
		if c.rate == 0 || done < c.rate {
			c.rate = done
		}
		c.rate = int64(float64(c.rate) * c.o.Down)
		c.calm = 0
	case backlog:
		// Faster while the device idled: it had room for as much more.
		c.rate = int64(float64(c.rate)*max(c.o.Up, 1+min(idle, 1))) + 1
		c.calm = 0
	case c.rate != 0:
		if c.calm == 0 {
			c.calm = now
		} else if now-c.calm >= int64(c.o.Calm) {
			c.rate, c.calm = 0, 0
		}
	}
	if c.rate != 0 {
		c.rate = max(c.rate, minRate)
	}
	c.frozen = c.contended && !c.backlog
	queued := c.contended && c.total >= minSamples &&
		float64(c.lat) > float64(c.expect)*c.o.Threshold+float64(c.o.Slack)*float64(c.total)
	c.State = State{Saturated: saturated, Backlogged: backlog, Done: done, Idle: idle, Capacity: c.rate, Queued: queued,
		Periods: c.State.Periods + 1, Saturations: c.State.Saturations + int64(b2i(saturated))}
	quiet := c.total == 0 && !c.backlog
	c.total, c.units, c.slow, c.targeted, c.missed, c.done, c.backlog, c.contended = 0, 0, 0, 0, 0, 0, false, false
	c.lat, c.expect = 0, 0
	c.end = now + period
	if quiet && c.rate == 0 {
		c.end = 0 // nothing to decide until the next completion
	}
	return c.rate != old
}

// The latency a completion is compared with is an estimate of the
// quantile of its kind's latencies, moved by quantStep of itself per
// completion: down by (1-quantile) of that on a lower one, up by quantile
// of it on a higher one (stochastic approximation).
const (
	quantile  = 0.1
	quantStep = 0.002
	// warmup is how many completions of a kind its percentile starts
	// from the least of.
	warmup = 32
)

// A period decides on saturation with at least minSamples completions
// (minTargeted of groups with a target), else it is extended; the capacity
// never goes below minRate, 10 ms of device time a second.
const (
	minSamples  = 8
	minTargeted = 4
	minRate     = 10e6
	// maxStretch is how many periods a period with too few completions is
	// extended by, at most, before it is decided on what it has.
	maxStretch = 9
)
