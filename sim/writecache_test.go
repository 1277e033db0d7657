package sim

import (
	"testing"
)

// writeScenario is a writer u (group u, no limit, 4 KiB blocks) of a
// 1 GiB file for 4 s on a 4 GiB/s disk; extra goes in [mount].
func writeScenario(t *testing.T, extra string) *Scenario {
	t.Helper()
	src := `name = "write cache"
[mount]
` + extra + `
[[device]]
name = "disk"
bandwidth = "4GiB"
latency = "50us"
queue-depth = 64

[[group]]
name = "u"

[[job]]
name = "u"
group = "u"
rw = "write"
bs = "4k"
size = "1GiB"
runtime = "4s"
time-based = true
`
	sc, err := Parse("x.toml", src)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func job(t *testing.T, res *Result, name string) JobResult {
	t.Helper()
	for _, j := range res.Jobs {
		if j.Name == name {
			return j
		}
	}
	t.Fatalf("no job %s", name)
	return JobResult{}
}

// TestWriteCache: with write-cache, an unlimited 4 KiB writer's writes
// reach sluice as pieces of the flusher's, not one request each, and run
// faster than one FUSE round trip each allows.
func TestWriteCache(t *testing.T) {
	bw := map[bool]float64{}
	for _, wc := range []bool{false, true} {
		extra := ""
		if wc {
			extra = "write-cache = true"
		}
		res, err := Run(writeScenario(t, extra))
		if err != nil {
			t.Fatal(err)
		}
		j := job(t, res, "u")
		var writes int64
		for _, g := range res.Stack.Groups {
			if g.Group == "u" {
				writes = g.AppWrites
			}
		}
		bw[wc] = j.BW()
		t.Logf("write cache %v: %.0f MiB/s, %d writes, %d requests reached sluice", wc, j.BW()/(1<<20), j.IOs, writes)
		switch {
		case wc && writes > j.IOs/128:
			t.Errorf("with the write cache %d requests reached sluice for %d writes, want at most %d", writes, j.IOs, j.IOs/128)
		case !wc && writes < j.IOs:
			t.Errorf("without the write cache %d requests reached sluice for %d writes, want one each", writes, j.IOs)
		}
	}
	if bw[true] < 2*bw[false] {
		t.Errorf("4 KiB writes through the write cache ran at %.0f MiB/s, without it %.0f: want at least twice as fast", bw[true]/(1<<20), bw[false]/(1<<20))
	}
}

// TestMmapWriter: a writer through a shared mapping in a group at
// wbps=2MiB, whose pages the kernel writes back unpaced (charged as
// debt) and which faults them in again while its group owes, is held at
// its limit over the run, as writeback.sh's mmap case holds it on the
// mount (0.993 there over 30 s).
func TestMmapWriter(t *testing.T) {
	sc, err := Parse("x.toml", `name = "mmap"
[[device]]
name = "disk"
bandwidth = "500MiB"
latency = "100us"
[[group]]
name = "t"
limits = "wbps=2MiB"
[[job]]
name = "w"
group = "t"
rw = "write"
bs = "4k"
size = "256MiB"
runtime = "20s"
time-based = true
mmap = true
`)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sc)
	if err != nil {
		t.Fatal(err)
	}
	j := job(t, res, "w")
	var g GroupCounters
	var wb int64
	for _, m := range res.Stack.Groups {
		if m.Group == "t" {
			g, wb = GroupCounters{AppReads: m.AppReads, RBytes: m.RBytes}, m.WritebackBytes
		}
	}
	ratio := j.BW() / (2 << 20)
	t.Logf("%.3f of the limit, %d writes, %d bytes written back by the kernel, %d fault reads, max clat %.0f ms", ratio, j.IOs, wb, g.AppReads, float64(j.Clat.Max)/1e6)
	if ratio < 0.95 || ratio > 1.05 {
		t.Errorf("the mmap writer got %.3f of its limit, want 0.95 to 1.05", ratio)
	}
	if wb < j.Bytes*9/10 {
		t.Errorf("the kernel wrote back %d bytes of the %d written, want nearly all", wb, j.Bytes)
	}
}
