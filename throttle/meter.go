package throttle

import (
	"math"
	"math/bits"
)

const nsPerSec = 1_000_000_000

// A meter is the absolute schedule of one dimension (bytes or I/Os of one
// direction) of one group: GCRA with a carried remainder. The exact
// theoretical arrival time is tat + rem/rate nanoseconds; tat is its floor.
// All arithmetic is integer, with 128-bit intermediates, so charging n
// units k times moves the schedule by exactly floor(k*n*1e9/rate) ns.
type meter struct {
	rate int64  // units per second; 0 means unlimited
	tat  int64  // theoretical arrival time in ns, rounded down
	rem  uint64 // fraction of a ns beyond tat, in units of 1/rate ns; < rate
}

// open reports whether the meter admits a request at now.
func (m *meter) open(now int64) bool { return m.rate == 0 || m.tat <= now }

// charge adds cost units at now, after capping idle credit at burst.
func (m *meter) charge(now, burst, cost int64) {
	if m.rate == 0 {
		return
	}
	if floor := satSub(now, burst); m.tat < floor {
		m.tat, m.rem = floor, 0
	}
	q, r := mulAddDiv(uint64(cost), nsPerSec, m.rem, uint64(m.rate))
	m.tat = satAdd(m.tat, q)
	m.rem = r
}

// refund takes back cost units at now, never leaving more than burst of
// idle credit.
func (m *meter) refund(now, burst, cost int64) {
	if m.rate == 0 {
		return
	}
	q, r := mulAddDiv(uint64(cost), nsPerSec, 0, uint64(m.rate))
	m.tat = satSub(m.tat, q)
	if m.rem < r {
		m.tat = satSub(m.tat, 1)
		m.rem += uint64(m.rate)
	}
	m.rem -= r
	if floor := satSub(now, burst); m.tat < floor {
		m.tat, m.rem = floor, 0
	}
}

// setRate changes the rate at now. Debt (the schedule ahead of now) is
// rescaled so that it stands for the same number of units at the new rate;
// credit is kept as time. Becoming unlimited forgives all debt; becoming
// limited starts at now, with no debt and no credit.
func (m *meter) setRate(now, rate int64) {
	old := m.rate
	switch {
	case rate == old:
		return
	case rate == 0:
		*m = meter{}
		return
	case old == 0:
		*m = meter{rate: rate, tat: now}
		return
	}
	if m.tat > now || m.tat == now && m.rem > 0 {
		d := uint64(m.tat) - uint64(now) // exact: tat > now
		q, r := mulAddDiv(d, uint64(old), m.rem, uint64(rate))
		m.tat, m.rem = satAdd(now, q), r
	} else {
		// rem < old, so the scaled fraction stays below the new rate.
		q, _ := mulAddDiv(m.rem, uint64(rate), 0, uint64(old))
		m.rem = uint64(q)
	}
	m.rate = rate
}

// credit returns how many whole units may be charged at now without going
// into debt: the idle time since tat, capped at burst, times the rate.
// It is math.MaxInt64 when the meter is unlimited.
func (m *meter) credit(now, burst int64) int64 {
	if m.rate == 0 {
		return math.MaxInt64
	}
	if m.tat >= now {
		return 0
	}
	d, rem := uint64(now)-uint64(m.tat), m.rem
	if d > uint64(burst) {
		d, rem = uint64(burst), 0
	}
	hi, lo := bits.Mul64(d, uint64(m.rate))
	lo, b := bits.Sub64(lo, rem, 0) // d >= 1 and rem < rate: no underflow
	hi -= b
	if hi >= nsPerSec {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, nsPerSec)
	return clampInt64(q)
}

// mulAddDiv returns (a*b + c) / d and its remainder, computed in 128 bits.
// A quotient beyond math.MaxInt64 is returned as math.MaxInt64 (and the
// remainder as 0). d must be positive.
func mulAddDiv(a, b, c, d uint64) (int64, uint64) {
	hi, lo := bits.Mul64(a, b)
	lo, carry := bits.Add64(lo, c, 0)
	hi += carry
	if hi >= d {
		return math.MaxInt64, 0
	}
	q, r := bits.Div64(hi, lo, d)
	if q > math.MaxInt64 {
		return math.MaxInt64, 0
	}
	return int64(q), r
}

func clampInt64(u uint64) int64 {
	if u > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(u)
}

// satAdd returns a+b clamped to the int64 range.
func satAdd(a, b int64) int64 {
	s := a + b
	if (s > a) != (b > 0) {
		if b > 0 {
			return math.MaxInt64
		}
		return math.MinInt64
	}
	return s
}

// satSub returns a-b clamped to the int64 range.
func satSub(a, b int64) int64 {
	if b == math.MinInt64 {
		if a >= 0 {
			return math.MaxInt64
		}
		return a - b
	}
	return satAdd(a, -b)
}

// Meter is one rate's exact schedule for a driver that paces a single
// stream of its own (a mirror set's resync copy) rather than tenants'
// requests: the same integer GCRA as a group's limits, with no burst, so
// that n units paid at any pace take exactly n/rate seconds over the run.
// It is pure: the time is an argument, and the driver does the waiting.
type Meter struct{ m meter }

// NewMeter returns a meter of rate units per second; 0 is unlimited.
func NewMeter(rate int64) *Meter {
	if rate < 0 {
		panic("throttle: negative rate")
	}
	return &Meter{meter{rate: rate}}
}

// Pay charges n units at now and returns when they are paid for: the
// driver waits until then before it goes on (not at all when it is not
// after now).
func (m *Meter) Pay(now, n int64) (due int64) {
	m.m.charge(now, 0, n)
	if m.m.rate == 0 {
		return now
	}
	return m.m.tat
}
