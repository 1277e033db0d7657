package stack

import (
	"fmt"
	"time"
)

// PageSize is the unit of sluice's read cache and readahead.
const PageSize = 4096

// Options configure a Stack. The zero value is usable after EnsureDefaults.
type Options struct {
	// MaxIO is the largest device request in bytes: reads and writes are
	// split into pieces of at most MaxIO, and each piece is one I/O for IOPS
	// limits. It must be a multiple of PageSize. The default is 128KiB.
	MaxIO int64

	// Readahead is the largest readahead window in bytes. It must be a
	// multiple of PageSize; 0 after EnsureDefaults is not possible, use
	// NoReadahead to turn readahead off. The default is 128KiB.
	Readahead int64

	// NoReadahead reads only what each read asks for. The default is false.
	NoReadahead bool

	// NoReadaheadBudget turns off the clamp of asynchronous readahead to the
	// group's current byte budget, reproducing the kernel's behaviour. The
	// default is false: readahead is clamped to the budget.
	NoReadaheadBudget bool

	// CacheBytes bounds the memory of the read cache. The default is 256MiB.
	CacheBytes int64

	// Burst caps a group's idle credit. The default is 10ms.
	Burst time.Duration

	// MaxWait caps how long one request waits for the throttle; 0 means no
	// cap. A request that reaches it is answered with the part that is
	// ready, at least one page, the page forced through into debt that the
	// group's later requests pay (see request.go). The default is 0.
	MaxWait time.Duration
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.MaxIO == 0 {
		o.MaxIO = 128 << 10
	}
	if o.Readahead == 0 {
		o.Readahead = 128 << 10
	}
	if o.CacheBytes == 0 {
		o.CacheBytes = 256 << 20
	}
	if o.Burst == 0 {
		o.Burst = 10 * time.Millisecond
	}
}

// Validate reports the first field that holds a value sluice cannot use.
func (o *Options) Validate() error {
	switch {
	case o.MaxIO < PageSize || o.MaxIO%PageSize != 0:
		return fmt.Errorf("MaxIO %d: must be a positive multiple of %d bytes", o.MaxIO, PageSize)
	case o.MaxIO > 1<<30:
		return fmt.Errorf("MaxIO %d: must be at most 1GiB", o.MaxIO)
	case o.Readahead < PageSize || o.Readahead%PageSize != 0:
		return fmt.Errorf("Readahead %d: must be a positive multiple of %d bytes", o.Readahead, PageSize)
	case o.Readahead > 64<<20:
		return fmt.Errorf("Readahead %d: must be at most 64MiB", o.Readahead)
	case o.CacheBytes < 16*o.Readahead:
		return fmt.Errorf("CacheBytes %d: must hold at least 16 readahead windows (%d bytes)", o.CacheBytes, 16*o.Readahead)
	case o.Burst < 0:
		return fmt.Errorf("Burst %v: must not be negative", o.Burst)
	case o.MaxWait < 0:
		return fmt.Errorf("MaxWait %v: must not be negative (0 is no cap)", o.MaxWait)
	}
	return nil
}
