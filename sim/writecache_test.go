package sim

import (
	"testing"
)

// writeScenario is writers u (uid-less group u, no limit, 4 KiB) and,
// when tLimits is not empty, t (group t with tLimits, 1 MiB), each
// writing a 1 GiB file for 4 s on a 4 GiB/s disk; extra goes in [mount].
func writeScenario(t *testing.T, tLimits, extra string) *Scenario {
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
	if tLimits != "" {
		src += `
[[group]]
name = "t"
limits = "` + tLimits + `"

[[job]]
name = "t"
group = "t"
rw = "write"
bs = "1M"
size = "1GiB"
runtime = "4s"
time-based = true
`
	}
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
		res, err := Run(writeScenario(t, "", extra))
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

// TestWriteCacheLimited: in kernel cache mode a writer at wbps=640MiB
// writes through the mount's page cache at its limit, and the unlimited
// writer beside it, sharing the mount's dirty bound, is slowed, as
// bench/writecache.sh measures on a mount; under auto its write()s are
// paced one by one and the unlimited writer is not held by them.
func TestWriteCacheLimited(t *testing.T) {
	u := map[string]float64{}
	for _, mode := range []string{"auto", "kernel"} {
		res, err := Run(writeScenario(t, "wbps=640MiB", "write-cache = true\ncache-mode = \""+mode+"\""))
		if err != nil {
			t.Fatal(err)
		}
		uj, tj := job(t, res, "u"), job(t, res, "t")
		u[mode] = uj.BW()
		ratio := tj.BW() / (640 << 20)
		t.Logf("%s: t %.3f of its limit, u beside it %.0f MiB/s", mode, ratio, uj.BW()/(1<<20))
		// Through the cache, a first burst of the dirty bound (64 MiB in
		// 4 s at 640 MiB/s: 2.5 %) comes on top.
		if ratio < 0.98 || ratio > 1.03 {
			t.Errorf("%s: the limited writer got %.3f of its limit, want 0.98 to 1.03", mode, ratio)
		}
	}
	if u["kernel"] >= u["auto"] {
		t.Errorf("the unlimited writer beside the cached limited one wrote %.0f MiB/s, beside the paced one %.0f: want it slower beside the cached one",
			u["kernel"]/(1<<20), u["auto"]/(1<<20))
	}
}
