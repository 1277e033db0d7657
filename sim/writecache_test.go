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
