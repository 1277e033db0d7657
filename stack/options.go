package stack

import (
	"fmt"
	"time"

	"sluice/group"
	"sluice/throttle"
)

// PageSize is the unit of sluice's read cache and readahead.
const PageSize = 4096

// Bounds of the options (see Validate).
const (
	maxIOLimit     = 1 << 30
	readaheadLimit = 64 << 20
	// cacheWindows is how many readahead windows (pages, with readahead
	// off) the read cache must hold at least.
	cacheWindows = 16
)

// Options configure a Stack. Start from DefaultOptions: in the zero value
// readahead, idle credit and the wait cap are off, and MaxIO and CacheBytes
// are 0, which Validate rejects.
type Options struct {
	// MaxIO is the largest device request in bytes: reads and writes are
	// split into pieces of at most MaxIO, and each piece is one I/O for IOPS
	// limits. It must be a multiple of PageSize from PageSize to 1GiB.
	// The default is 128KiB.
	MaxIO int64

	// Readahead is the largest readahead window in bytes; 0 turns
	// readahead off (each read reads only what it asks for). Otherwise it
	// must be a multiple of PageSize up to 64MiB. The default is
	// 128KiB.
	Readahead int64

	// ReadaheadBudget clamps asynchronous readahead to the group's current
	// byte budget; false reproduces the kernel's behaviour. The default is
	// true.
	ReadaheadBudget bool

	// CacheBytes bounds the memory of the read cache. It must hold at least
	// 16 readahead windows, or 16 pages with readahead off. The default is
	// 256MiB.
	CacheBytes int64

	// Burst caps a group's idle credit, as time at its rate; 0 means no
	// idle credit. It must not be negative. The default is 10ms.
	Burst time.Duration

	// MaxWait caps how long one request waits for the throttle; 0 means no
	// cap. A request that reaches it is answered with the part that is
	// ready, at least one page, the page forced through into debt that the
	// group's later requests pay (see request.go). It must not be
	// negative. The default is 0.
	MaxWait time.Duration
}

// DefaultOptions returns the defaults of every option.
func DefaultOptions() Options {
	return Options{
		MaxIO:           128 << 10,
		Readahead:       128 << 10,
		ReadaheadBudget: true,
		CacheBytes:      256 << 20,
		Burst:           throttle.DefaultBurst,
	}
}

// OptionError is the error of Validate: the field of Options that holds a
// value sluice cannot use, the value, and what is allowed. Front ends name
// the field as their users spell it (a flag, a key).
type OptionError struct {
	Field string // the field of Options, such as "MaxIO"
	Value string // the value as a user would write it: "3KiB", "-1s"
	Want  string // what is allowed: "a multiple of 4KiB from 4KiB to 1GiB"
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("%s %s: want %s", e.Field, e.Value, e.Want)
}

// Validate returns an *OptionError for the first field that holds a value
// sluice cannot use, or nil.
func (o *Options) Validate() error {
	size := group.FormatSize
	bad := func(field, value, want string, a ...any) error {
		return &OptionError{Field: field, Value: value, Want: fmt.Sprintf(want, a...)}
	}
	switch {
	case o.MaxIO < PageSize || o.MaxIO%PageSize != 0 || o.MaxIO > maxIOLimit:
		return bad("MaxIO", size(o.MaxIO), "a multiple of %s from %s to %s", size(PageSize), size(PageSize), size(maxIOLimit))
	case o.Readahead < 0 || o.Readahead%PageSize != 0 || o.Readahead > readaheadLimit:
		return bad("Readahead", size(o.Readahead), "0 (off) or a multiple of %s up to %s", size(PageSize), size(readaheadLimit))
	case o.CacheBytes < o.minCache():
		if o.Readahead == 0 {
			return bad("CacheBytes", size(o.CacheBytes), "at least %d pages, %s", cacheWindows, size(o.minCache()))
		}
		return bad("CacheBytes", size(o.CacheBytes), "at least %d readahead windows, %s", cacheWindows, size(o.minCache()))
	case o.Burst < 0:
		return bad("Burst", o.Burst.String(), "0 (no idle credit) or a positive duration such as 10ms")
	case o.MaxWait < 0:
		return bad("MaxWait", o.MaxWait.String(), "0 (no cap) or a positive duration such as 30s")
	}
	return nil
}

// minCache is the least CacheBytes that Validate accepts.
func (o *Options) minCache() int64 {
	return cacheWindows * max(o.Readahead, PageSize)
}

// Read limits from which the mount's auto cache mode (fsys.CacheAuto)
// serves a group through the kernel's page cache: there a demand read waits behind at most one kernel
// readahead request (up to 1 MiB, 31 ms at 32 MiB/s). Measured with 4 KiB
// sequential reads (bench/speed.sh), direct I/O's worst wait was 4-6 ms
// up to 30 MiB/s against the page cache's 23-105 ms; from 40 MiB/s, as its
// one round trip per read nears saturation, direct I/O waited longer (27
// ms at 40, where the page cache waited 15) and from 50 it fell short of
// the limit, which the page cache held at a tenth of the CPU.
const (
	KernelCacheBPS  = 32 << 20
	KernelCacheIOPS = 512
)

// KernelCache reports whether the mount's auto cache mode serves a group
// whose path limits are l through the kernel's page cache.
func KernelCache(l throttle.Limits) bool {
	return (l.RBPS == 0 || l.RBPS >= KernelCacheBPS) && (l.RIOPS == 0 || l.RIOPS >= KernelCacheIOPS)
}

// WriteCacheDrain is how soon a limited group's write limits must write
// back the mount's dirty bound (fsys.Options.MapDirty), or 64 MiB if that
// is more, for the mount's kernel cache mode (fsys.CacheKernel) to let the
// kernel's page cache take its write()s with the write cache
// (fsys.Options.WriteCache): 640 MiB/s, and 5120 IOPS of 128 KiB, for the
// default bound. Its writeback is then paced, and the kernel holds the
// writer as the mount's dirty pages reach the bound, so what waits on
// that writeback (the writer's close and fsync, writes and readahead of
// others that the kernel queues behind it) waits about this long at most.
//
// The auto cache mode never does: the kernel's dirty throttling is the
// mount's, not a group's, so while paced writeback holds dirty pages every
// cached writer of the mount is slowed. On the bench's 2-core VM
// (bench/writecache.sh) an unlimited 4 KiB writer beside a 1 MiB writer at
// wbps=640MiB wrote 309 MiB/s with the latter's writes cached and 582
// with them paced at write().
const WriteCacheDrain = 100 * time.Millisecond

// MinDrainBytes is the least dirty bound WritesCached assumes: the
// mount's default with the write cache. A variable for tests only.
var MinDrainBytes int64 = 64 << 20

// WritesCached reports whether the write cache takes the write()s of a
// group whose path limits are l, on a mount whose dirty bound is dirty
// bytes (0 or less: unknown) and whose device requests are maxIO bytes:
// when l writes back that bound, or MinDrainBytes if more, within
// WriteCacheDrain.
func WritesCached(l throttle.Limits, dirty, maxIO int64) bool {
	bytes := float64(max(dirty, MinDrainBytes))
	drain := WriteCacheDrain.Seconds()
	return (l.WBPS == 0 || float64(l.WBPS)*drain >= bytes) &&
		(l.WIOPS == 0 || float64(l.WIOPS)*drain >= bytes/float64(maxIO))
}
