package sim

import (
	"testing"
)

// kernelScenario is a sequential 4 KiB buffered reader of a file of size
// in group g with limits, on a disk of 500 MiB/s, going round the file
// for runtime; extra goes in [mount].
func kernelScenario(t *testing.T, limits, size, runtime, extra string) *Scenario {
	t.Helper()
	src := `name = "page cache"
[mount]
` + extra + `
[[device]]
name = "disk"
bandwidth = "500MiB"
latency = "100us"

[[group]]
name = "g"
limits = "` + limits + `"

[[job]]
name = "r"
group = "g"
rw = "read"
bs = "4k"
size = "` + size + `"
runtime = "` + runtime + `"
time-based = true
`
	sc, err := Parse("x.toml", src)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func groupOf(t *testing.T, res *Result, name string) GroupCounters {
	t.Helper()
	for _, g := range res.Stack.Groups {
		if g.Group == name {
			return GroupCounters{AppReads: g.AppReads, RBytes: g.RBytes}
		}
	}
	t.Fatalf("no group %s in the result", name)
	return GroupCounters{}
}

// GroupCounters are the counters these tests read.
type GroupCounters struct{ AppReads, RBytes int64 }

// TestKernelCacheMode: a group at rbps=64MiB, which cache-mode auto serves
// through the kernel's page cache as the mount does, reads 4 KiB at a time
// at its limit with a few large requests reaching sluice (the kernel's
// readahead, up to 1 MiB each); with cache-mode direct every read() is a
// request of its own. Both hold the limit.
func TestKernelCacheMode(t *testing.T) {
	for _, mode := range []string{"auto", "kernel", "direct"} {
		res, err := Run(kernelScenario(t, "rbps=64MiB", "1GiB", "4s", `cache-mode = "`+mode+`"`))
		if err != nil {
			t.Fatal(err)
		}
		j := res.Jobs[0]
		c := groupOf(t, res, "g")
		ratio := j.BW() / (64 << 20)
		t.Logf("%s: %.3f of the limit, %d reads, %d requests reached sluice, max clat %.1f ms", mode, ratio, j.IOs, c.AppReads, float64(j.Clat.Max)/1e6)
		if ratio < 0.98 || ratio > 1.02 {
			t.Errorf("%s: the reader got %.3f of its limit, want 0.98 to 1.02", mode, ratio)
		}
		switch {
		case mode != "direct" && c.AppReads > j.IOs/32:
			t.Errorf("%s: %d requests reached sluice for %d reads, want at most %d (the kernel's readahead)", mode, c.AppReads, j.IOs, j.IOs/32)
		case mode == "direct" && c.AppReads < j.IOs:
			t.Errorf("direct: %d requests reached sluice for %d reads, want one each", c.AppReads, j.IOs)
		}
	}
}

// TestPageCache: an unlimited reader going round a 64 MiB file reads it
// from the device once while the page cache holds it, at the cost of a
// copy per read() after that, and on every pass when the cache is smaller
// than the file; the kernel's readahead grows to 1 MiB requests.
func TestPageCache(t *testing.T) {
	for _, tc := range []struct {
		cache      string
		minB, maxB int64
		passes     float64 // at least: reads from the cache cost cacheHit, no FUSE request; the device reads 500 MiB/s
	}{{"4GiB", 64 << 20, 64 << 20, 15}, {"32MiB", 3 * 64 << 20, 1 << 40, 6}} {
		res, err := Run(kernelScenario(t, "", "64MiB", "1s", `page-cache = "`+tc.cache+`"`))
		if err != nil {
			t.Fatal(err)
		}
		j, d := res.Jobs[0], res.Devices[0]
		passes := float64(j.Bytes) / (64 << 20)
		t.Logf("page cache %s: %.1f passes over the file, %d device reads of %d bytes", tc.cache, passes, d.Reads, d.RBytes)
		if d.RBytes < tc.minB || d.RBytes > tc.maxB {
			t.Errorf("page cache %s: the device read %d bytes in %.1f passes over 64 MiB, want %d to %d", tc.cache, d.RBytes, passes, tc.minB, tc.maxB)
		}
		if passes < tc.passes {
			t.Errorf("page cache %s: %.1f passes over the file in 1 s, want at least %.0f", tc.cache, passes, tc.passes)
		}
		if tc.cache == "4GiB" && d.Reads > 64+8 {
			t.Errorf("%d device reads for one pass over 64 MiB, want at most 72 (readahead of up to 1 MiB)", d.Reads)
		}
	}
}
