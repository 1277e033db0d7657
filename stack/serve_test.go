package stack

import (
	"testing"

	"sluice/throttle"
)

// TestServeOpen: how each open is served, for every combination of the
// mount's cache mode and write cache with a group's limits and the
// open's access.
func TestServeOpen(t *testing.T) {
	low := throttle.Limits{RBPS: 1 << 20}     // below KernelCacheBPS
	high := throttle.Limits{RBPS: 64 << 20}   // at or above it
	fastW := throttle.Limits{WBPS: 1 << 30}   // writes back 64 MiB within WriteCacheDrain
	slowW := throttle.Limits{WBPS: 100 << 20} // does not
	direct, straight := Serve{Mode: ServeDirect}, Serve{Mode: ServeStraight}
	cachedW := Serve{Mode: ServeStraight, CachedWrites: true}
	pacedW := Serve{Mode: ServeStraight, CachedWrites: true, PacedWriteback: true}
	for _, c := range []struct {
		name string
		o    Open
		want Serve
	}{
		{"unlimited read", Open{}, straight},
		{"unlimited read, passthrough", Open{Passthrough: true}, Serve{Mode: ServePassthrough}},
		{"unlimited write, passthrough", Open{Passthrough: true, Writes: true}, Serve{Mode: ServePassthrough}},
		{"unlimited read, passthrough, open through the page cache", Open{Passthrough: true, CachedOpen: true}, straight},
		{"unlimited read, passthrough, open with direct I/O", Open{Passthrough: true, DirectOpen: true}, straight},
		{"unlimited write, passthrough, open with direct I/O", Open{Passthrough: true, Writes: true, DirectOpen: true}, straight},
		{"unlimited write, passthrough, open by passthrough and direct I/O", Open{Passthrough: true, Writes: true, PassOpen: true, DirectOpen: true}, Serve{Mode: ServePassthrough}},
		{"limited, open by passthrough", Open{Limited: true, Limits: low, Passthrough: true, PassOpen: true}, Serve{Mode: ServePassthrough, Bypass: true}},
		{"limited, open by passthrough on a mount without it", Open{Limited: true, Limits: low, PassOpen: true}, direct},
		{"unlimited write, write cache", Open{Writes: true, WriteCache: true}, cachedW},
		{"low read limit, auto", Open{Limited: true, Limits: low}, direct},
		{"high read limit, auto", Open{Limited: true, Limits: high}, straight},
		{"low read limit, kernel", Open{Limited: true, Limits: low, CacheMode: CacheKernel}, straight},
		{"high read limit, direct", Open{Limited: true, Limits: high, CacheMode: CacheDirect}, direct},
		{"limited, passthrough", Open{Limited: true, Limits: high, Passthrough: true}, straight},
		{"high limit write, no write cache", Open{Limited: true, Limits: high, Writes: true}, straight},
		{"fast writer, write cache, auto", Open{Limited: true, Limits: fastW, Writes: true, WriteCache: true}, direct},
		{"fast writer, write cache, kernel", Open{Limited: true, Limits: fastW, Writes: true, WriteCache: true, CacheMode: CacheKernel}, pacedW},
		{"slow writer, write cache, kernel", Open{Limited: true, Limits: slowW, Writes: true, WriteCache: true, CacheMode: CacheKernel}, direct},
		{"slow writer's read-only open, write cache, kernel", Open{Limited: true, Limits: slowW, WriteCache: true, CacheMode: CacheKernel}, straight},
	} {
		if got := ServeOpen(c.o); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
		}
	}
}
