package resync

import (
	"time"

	"sluice/throttle"
)

// Pacer bounds a copy's rate with the throttle's exact meter, and counts
// the objects compared. One Pacer may serve several copies in turn: the
// rate holds over them all.
type Pacer struct {
	// Meter is the rate, in bytes a second, of the content copied. The
	// default (nil) is no bound.
	Meter *throttle.Meter
	// Now is the meter's clock, in monotonic nanoseconds. The default
	// (nil) is time elapsed since the package was loaded.
	Now func() int64
	// Pause is told, before each wait, when the wait ends. The default
	// (nil) is told nothing.
	Pause func(until time.Time)
	// Entries counts the objects the copies compared (source entries
	// looked at, retries included).
	Entries int
}

// Pay charges n bytes copied and waits until they are paid for.
func (p *Pacer) Pay(n int64) {
	if p.Meter == nil {
		return
	}
	now := p.now()
	if d := time.Duration(p.Meter.Pay(now, n) - now); d > 0 {
		if p.Pause != nil {
			p.Pause(time.Now().Add(d))
		}
		time.Sleep(d)
	}
}

// now reads the meter's clock.
func (p *Pacer) now() int64 {
	if p.Now != nil {
		return p.Now()
	}
	return int64(time.Since(loaded))
}

// loaded is when the package was loaded: the default clock's zero.
var loaded = time.Now()
