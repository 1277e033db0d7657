package stack

import "sluice/throttle"

// CacheMode is how a mount serves the files a group with a limit opens.
type CacheMode int

const (
	// CacheAuto serves a group through the kernel's page cache when its
	// read limits are at least KernelCacheBPS (and KernelCacheIOPS), or
	// absent, and with direct I/O below (KernelCache).
	CacheAuto CacheMode = iota
	// CacheDirect opens every limited group's files with direct I/O:
	// every read() and write() reaches sluice, and sluice's readahead,
	// sized to the group's budget, is the only one.
	CacheDirect
	// CacheKernel lets the kernel's page cache serve every group: reads
	// it holds cost no round trip, and sluice charges and paces the reads
	// the kernel sends (its readahead) and every write. With the write
	// cache it also takes the write()s of groups whose write limits are
	// high enough (WritesCached), and sluice paces their writeback.
	CacheKernel
)

// ParseCacheMode returns the cache mode named s (auto, direct or kernel,
// as --cache-mode takes them; "" is auto); ok is false for any other.
func ParseCacheMode(s string) (m CacheMode, ok bool) {
	switch s {
	case "auto", "":
		return CacheAuto, true
	case "direct":
		return CacheDirect, true
	case "kernel":
		return CacheKernel, true
	}
	return CacheAuto, false
}

// Mode is how one open of a file is served.
type Mode uint8

const (
	// ServeStraight: the kernel's page cache in front, every request
	// sluice gets read or written straight on the backing file; for a
	// limited group the reads are charged and paced first (Engine.Pay).
	ServeStraight Mode = iota
	// ServeDirect: direct I/O (FOPEN_DIRECT_IO), every read() and
	// write() through the stack: sluice's cache, its readahead sized to
	// the group's budget, and its pacing.
	ServeDirect
	// ServePassthrough: the kernel reads the backing file itself
	// (FOPEN_PASSTHROUGH); sluice sees no read.
	ServePassthrough
)

// Open is what decides how an open is served.
type Open struct {
	// Limited says the opener's group has a limit on its path; Limits
	// are those path limits.
	Limited bool
	Limits  throttle.Limits
	// Writes says the open is for writing (not O_RDONLY).
	Writes bool
	// The mount's: its cache mode, whether the kernel's write cache may
	// take write()s (fsys.Options.WriteCache), whether opens of groups
	// without a limit may be passed through (the mount's option, and a
	// file with a descriptor to pass), its dirty bound (bytes, 0 or less
	// for unknown) and its device request size.
	CacheMode   CacheMode
	WriteCache  bool
	Passthrough bool
	Dirty       int64
	MaxIO       int64
	// The file's other opens now, as the mount counts them: some by
	// passthrough (PassOpen), some through the kernel's page cache
	// (CachedOpen), some with direct I/O through sluice (DirectOpen).
	PassOpen, CachedOpen, DirectOpen bool
}

// Serve is how an open is served.
type Serve struct {
	Mode Mode
	// CachedWrites says the kernel's write cache takes the open's
	// write()s, and sends sluice the dirty pages later.
	CachedWrites bool
	// PacedWriteback says the writeback of those pages is paced as the
	// opener's writes (a limited group's); otherwise it is written at
	// once and charged as debt, if to a limited group at all.
	PacedWriteback bool
	// Bypass says the open is passed through although its group has a
	// limit: the kernel holds a file in one mode at a time, and while it
	// is open by passthrough every open of it must be, or fail.
	Bypass bool
}

// ServeOpen decides how an open is served: the one place where a mount's
// cache mode, write cache and passthrough meet a group's limits and the
// file's other opens, used by the mount (fsys) and the simulator alike.
//
// A group without a limit passes its opens through where the mount allows
// it, for reading and writing: the kernel then reads and writes the
// backing file itself, at native speed. Not where the file is open
// through the kernel's page cache (the kernel would refuse the open), nor
// where it is open with direct I/O through sluice (its cache would not
// see the writes, and a mapping of such an open puts the file in the page
// cache's mode unbeknown to sluice): those are served through the page
// cache. Otherwise a group without a limit reads through the page cache.
//
// A limited group is served through the kernel's page cache where its
// cache mode says so (KernelCache under CacheAuto) and, for an open for
// writing with the write cache, only where the write cache takes its
// writes too (WritesCached under CacheKernel): its write()s are otherwise
// paced one by one with direct I/O. But while the file is open by
// passthrough, every open of it is passed through (Bypass), for the
// kernel fails any other with EIO.
func ServeOpen(o Open) Serve {
	if o.PassOpen && o.Passthrough {
		return Serve{Mode: ServePassthrough, Bypass: o.Limited}
	}
	if o.Limited {
		cached := o.CacheMode == CacheKernel || o.CacheMode == CacheAuto && KernelCache(o.Limits)
		if o.Writes && o.WriteCache {
			cached = cached && o.CacheMode == CacheKernel && WritesCached(o.Limits, o.Dirty, o.MaxIO)
		}
		if !cached {
			return Serve{Mode: ServeDirect}
		}
		w := o.Writes && o.WriteCache
		return Serve{Mode: ServeStraight, CachedWrites: w, PacedWriteback: w}
	}
	if o.Passthrough && !o.CachedOpen && !o.DirectOpen {
		return Serve{Mode: ServePassthrough}
	}
	return Serve{Mode: ServeStraight, CachedWrites: o.Writes && o.WriteCache}
}
