package sim

import (
	"fmt"
	"testing"
)

// TestWritePacing: writers are paced at write(), in --max-io steps, on
// virtual time. N writers of one group at wbps converge to the limit
// within 2 % over 10 s; at 1 MiB/s with 1 MiB writes the device sees one
// 128 KiB piece at a time, never two in one 100 ms interval and never a
// gap of more than two pieces' time; a writer with no limit is never
// paused.
func TestWritePacing(t *testing.T) {
	for _, tc := range []struct {
		writers int
		limit   string
		rate    float64
	}{{1, "1MiB", 1 << 20}, {4, "1MiB", 1 << 20}, {8, "10MiB", 10 << 20}} {
		t.Run(fmt.Sprintf("%d writers at %s", tc.writers, tc.limit), func(t *testing.T) {
			sc, err := Parse("pacing.toml", fmt.Sprintf(`
name = "pacing"
seed = 1
[[device]]
name = "disk"
bandwidth = "500MiB"
latency = "lognormal(300us,100us)"
[[group]]
name = "w"
limits = "wbps=%s"
[[group]]
name = "free"
[[job]]
name = "paced"
group = "w"
rw = "write"
bs = "1MiB"
size = "1GiB"
numjobs = %d
runtime = "10s"
[[job]]
name = "unlimited"
group = "free"
rw = "write"
bs = "1MiB"
size = "64MiB"
device = "disk"
`, tc.limit, tc.writers))
			if err != nil {
				t.Fatal(err)
			}
			res, err := Run(sc)
			if err != nil {
				t.Fatal(err)
			}
			// Bytes the group's writes finished in the 10 s the writers
			// ran (the writes in flight at the end finish later).
			var done int64
			for _, s := range res.Series {
				if s.Name == "group w" {
					if len(s.Bytes) < 100 {
						t.Fatalf("the writers were done in %.1f s, not paced over 10 s", float64(len(s.Bytes))/10)
					}
					for _, b := range s.Bytes[:100] {
						done += b
					}
				}
			}
			if got := float64(done) / 10 / tc.rate; got < 0.98 || got > 1.02 {
				t.Errorf("achieved %.3f of the limit over 10 s", got)
			}
			for _, g := range res.Stack.Groups {
				if g.Group == "free" && g.WThrottledNs != 0 {
					t.Errorf("the unlimited writer was paused %d ns", g.WThrottledNs)
				}
			}
			if tc.rate != 1<<20 {
				return
			}
			// The device series counts every byte written; the unlimited
			// writer's 64 MiB land in the first instants, so look from 1 s.
			dev := res.Series[0].Bytes
			gap := 0
			for i, b := range dev[10:100] {
				if b > 2*128<<10 {
					t.Errorf("%d bytes written in the 100 ms from %.1f s: a burst", b, float64(i+10)/10)
				}
				if b == 0 {
					if gap++; gap > 2 {
						t.Errorf("no write for 300 ms up to %.1f s", float64(i+10)/10)
					}
				} else {
					gap = 0
				}
			}
		})
	}
}
