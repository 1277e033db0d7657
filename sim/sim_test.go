package sim

import (
	"bytes"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/stack"
)

// runAll runs a scenario with its own comparison and renders everything a
// user sees.
func runAll(t testing.TB, sc *Scenario) ([]*Result, string) {
	key, vals := "", []string(nil)
	if sc.CompareDefault != "" {
		var err error
		if key, vals, err = ParseCompare(sc.CompareDefault); err != nil {
			t.Fatal(err)
		}
	}
	runs, err := RunCompare(sc, key, vals)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, r := range runs {
		r.Write(&b)
	}
	WriteComparison(&b, sc, runs)
	WriteCSV(&b, runs)
	return runs, b.String()
}

func shipped(t testing.TB) []string {
	files, err := filepath.Glob("../scenarios/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no shipped scenarios: %v", err)
	}
	return files
}

// TestShippedScenarios: every scenario in scenarios/ loads, runs, and shows
// the direction its seed reports (its [[expect]] entries, asserted on the
// results); run twice, it prints the same bytes. An entry marked pending
// describes a target sluice does not meet yet (sluice sim --check fails
// on it): it is logged while it fails, and fails the test once it holds,
// for its mark to go.
func TestShippedScenarios(t *testing.T) {
	for _, f := range shipped(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			sc, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(sc.Expect) == 0 {
				t.Fatalf("%s asserts nothing: add [[expect]]", f)
			}
			runs, out := runAll(t, sc)
			for _, o := range Outcomes(sc, runs) {
				switch {
				case o.Pending == "" && !o.Held:
					t.Error(o.Line)
				case o.Pending != "" && !o.Held:
					t.Logf("target not met yet: %s", o)
				case o.Pending != "":
					t.Errorf("holds, though marked pending (%s): %s; drop the mark", o.Pending, o.Line)
				}
			}
			sc2, _ := Load(f)
			if _, again := runAll(t, sc2); again != out {
				t.Errorf("a second run printed different output")
			}
			checkPlot(t, sc, runs)
		})
	}
}

// TestExpectAlone: every figure alone an [[expect]] entry of a shipped
// scenario states (alone, vs-alone) is what its job does alone: the
// scenario with that job only, measured as the entry measures it.
func TestExpectAlone(t *testing.T) {
	for _, f := range shipped(t) {
		sc, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range sc.Expect {
			for _, c := range []struct {
				job   string
				alone float64
			}{{e.Job, e.Alone}, {e.Vs, e.VsAlone}} {
				if c.alone == 0 {
					continue
				}
				solo, _ := Load(f)
				solo.Expect = nil
				solo.Jobs = slices.DeleteFunc(solo.Jobs, func(j Job) bool { return j.Name != c.job })
				res, err := Run(solo)
				if err != nil {
					t.Fatal(err)
				}
				v, err := res.FigureIn(c.job, e.Metric, int64(e.From), int64(e.Until))
				if err != nil {
					t.Fatal(err)
				}
				if r := v / c.alone; r < 0.99 || r > 1.01 {
					t.Errorf("%s: expect %d: %s alone does %s %.5g, not the %g stated", filepath.Base(f), i, c.job, e.Metric, v, c.alone)
				}
			}
		}
	}
}

// TestExpectForms: an [[expect]] entry measures over a window of the run
// (from the job's start when that is later), over another job's figure
// (vs) and over figures alone; a pending one that fails is marked so.
func TestExpectForms(t *testing.T) {
	const src = `
[[device]]
name = "d"
bandwidth = "1GiB"
latency = "100us"
queue-depth = 32
[[group]]
name = "x"
limits = "riops=100"
[[group]]
name = "y"
limits = "riops=50"
[[job]]
name = "x"
group = "x"
rw = "randread"
bs = "4k"
size = "1GiB"
runtime = "10s"
time-based = true
direct = true
[[job]]
name = "y"
group = "y"
rw = "randread"
bs = "4k"
size = "1GiB"
start = "5s"
runtime = "5s"
time-based = true
direct = true
[[expect]]
job = "x"
vs = "y"
metric = "iops"
a = ""
min = 1.96
max = 2.04
[[expect]]
job = "y"
metric = "iops"
until = "10s"
a = ""
min = 49
max = 51
[[expect]]
job = "x"
metric = "bw"
from = "2s"
until = "4s"
a = ""
min = 392
max = 408
[[expect]]
job = "x"
alone = 200
vs = "y"
vs-alone = 25
metric = "iops"
from = "6s"
a = ""
min = 0.24
max = 0.26
[[expect]]
job = "y"
metric = "iops"
a = ""
min = 1000
pending = "a faster disk"
`
	sc, err := Parse("x.toml", src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sc)
	if err != nil {
		t.Fatal(err)
	}
	out := Outcomes(sc, []*Result{res})
	for _, o := range out[:4] {
		if !o.Held {
			t.Errorf("does not hold: %s", o.Line)
		}
	}
	if o := out[4]; o.Held || !strings.HasPrefix(o.String(), "pending, a faster disk: y iops = ") {
		t.Errorf("pending entry: held %v, %q", o.Held, o)
	}
	if bad := Check(sc, []*Result{res}); len(bad) != 1 || bad[0] != out[4].String() {
		t.Errorf("Check: %q, want the pending entry's failure alone", bad)
	}
}

// TestSeekScenario: a device with a seek time serves random reads one
// seek at a time, however many are in flight, and sequential ones at its
// bandwidth; the report counts its seeks.
func TestSeekScenario(t *testing.T) {
	const src = `
[[device]]
name = "hdd"
bandwidth = "100MiB"
write-bandwidth = "50MiB"
latency = "100us"
seek = "4ms"
queue-depth = 32
[[device]]
name = "other"
[[job]]
name = "rand"
group = "g"
device = "hdd"
rw = "randread"
bs = "4k"
size = "1GiB"
runtime = "5s"
time-based = true
iodepth = 8
direct = true
[[job]]
name = "seq"
group = "g"
device = "other"
rw = "read"
bs = "1MiB"
size = "1GiB"
runtime = "5s"
time-based = true
iodepth = 8
direct = true
[[expect]]
job = "rand"
metric = "iops"
a = ""
min = 1
`
	run := func(src string) *Result {
		sc, err := Parse("x.toml", src)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(sc)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := run(src)
	// 4 ms of seek and 39 us of bytes each, in series: 247 IOPS.
	if v, _ := res.Figure("rand", "iops"); v < 240 || v > 250 {
		t.Errorf("random 4 KiB reads on a disk of 4 ms seeks: %.1f IOPS, want about 247", v)
	}
	if d := res.Devices[0]; d.Seeks != d.Reads {
		t.Errorf("%d seeks for %d random reads", d.Seeks, d.Reads)
	}
	var b bytes.Buffer
	res.Write(&b)
	if !strings.Contains(b.String(), "seeks") {
		t.Errorf("the report shows no seeks:\n%s", b.String())
	}
	// Sequential on the same disk: at its bandwidth, a seek now and then.
	res = run(strings.Replace(strings.Replace(src, `device = "other"`, `device = "hdd"`, 1), `device = "hdd"
rw = "randread"`, `device = "other"
rw = "randread"`, 1))
	if v, _ := res.Figure("seq", "bw"); v < 0.95*100*1024 {
		t.Errorf("1 MiB sequential reads on a disk of 100 MiB/s: %.0f KiB/s", v)
	}
	if d := res.Devices[0]; d.Seeks > d.Reads/100 {
		t.Errorf("sequential reads: %d seeks in %d reads", d.Seeks, d.Reads)
	}
	// Writes at the write bandwidth.
	res = run(strings.Replace(strings.Replace(strings.Replace(src, `device = "other"`, `device = "hdd"`, 1), `device = "hdd"
rw = "randread"`, `device = "other"
rw = "randread"`, 1), `rw = "read"`, `rw = "write"`, 1))
	d := res.Devices[0]
	if v := float64(d.WBytes) / (float64(res.End) / 1e9) / (1 << 20); v < 0.95*50 || v > 50 {
		t.Errorf("1 MiB sequential writes on a disk of 50 MiB/s for writes: the disk wrote %.2f MiB/s", v)
	}
}

// checkPlot renders the runs' plot and checks its layout: per run (a
// configuration), a panel of devices and one of groups, and per group one
// of its jobs' worst latencies in every run, each of at most MaxSeries
// lines with plain names, each panel's title in the picture.
func checkPlot(t *testing.T, sc *Scenario, runs []*Result) {
	t.Helper()
	panels := Panels(runs)
	want := 0
	for _, res := range runs {
		kinds := map[string]bool{}
		n := map[string]int{}
		for _, s := range res.Series {
			kind, _, _ := strings.Cut(s.Name, " ")
			kinds[kind] = true
			n[kind]++
		}
		for k := range kinds {
			want += (n[k] + MaxSeries - 1) / MaxSeries
		}
	}
	jobs := map[string]int{}
	for _, res := range runs {
		for _, j := range res.Jobs {
			if j.RW != "sync" && j.IOs > 0 {
				jobs[j.Group]++
			}
		}
	}
	for _, n := range jobs {
		want += (n + MaxSeries - 1) / MaxSeries
	}
	if len(panels) != want {
		t.Errorf("%d panels for %d runs, want %d (devices and groups of each, and the latencies of each group's jobs)", len(panels), len(runs), want)
	}
	for _, p := range panels {
		if !p.Latency {
			continue
		}
		for k, s := range p.Series {
			if slices.Max(s) == 0 {
				t.Errorf("panel %q: line %q has no latency", p.Title, p.Labels[k])
			}
		}
	}
	file := filepath.Join(t.TempDir(), "plot.svg")
	if err := SavePlot(file, sc.Name, runs); err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range panels {
		if len(p.Series) > MaxSeries || len(p.Series) != len(p.Labels) {
			t.Errorf("panel %q has %d lines and %d names, want at most %d", p.Title, len(p.Series), len(p.Labels), MaxSeries)
		}
		for _, l := range p.Labels {
			if strings.ContainsAny(l, ":_") {
				t.Errorf("panel %q names a line %q, not plainly", p.Title, l)
			}
		}
		if !strings.Contains(string(svg), html.EscapeString(p.Title)) {
			t.Errorf("the plot does not show panel %q", p.Title)
		}
		for _, mk := range p.Marks {
			if !strings.Contains(string(svg), html.EscapeString(mk.Label)) {
				t.Errorf("the plot does not show mark %q", mk.Label)
			}
		}
	}
	// A sync(2) is drawn on its run's groups panel, as long as it waited.
	for _, res := range runs {
		for _, j := range res.Jobs {
			if j.RW != "sync" {
				continue
			}
			found := false
			for _, p := range panels {
				for _, mk := range p.Marks {
					found = found || mk.To-mk.From == j.Clat.Max && strings.HasPrefix(mk.Label, j.Name+":")
				}
			}
			if !found {
				t.Errorf("the plot does not mark %s's sync (waited %d ns)", res.Config, j.Clat.Max)
			}
		}
	}
}

// TestPlotWindow: a line with a request every few buckets is averaged
// over a window long enough that it reads as a rate, not a sawtooth; a
// steady one is drawn bucket by bucket.
func TestPlotWindow(t *testing.T) {
	steady := make([]int64, 100)
	bursty := make([]int64, 100)
	for i := range steady {
		steady[i] = 1 << 20
		if i%4 == 0 {
			bursty[i] = 1 << 20
		}
	}
	if w := window([][]int64{steady}, nil); w != 1 {
		t.Errorf("a steady line is averaged over %d buckets, want 1", w)
	}
	if w := window([][]int64{steady, bursty}, nil); w != 5 {
		t.Errorf("a line with bytes every 4th bucket is averaged over %d buckets, want 5", w)
	}
	// 1 MiB requests every 80 ms in 100 ms buckets: 1 and 2 to a bucket,
	// 12 and 13 to a second.
	var paced []int64
	for i := range 100 {
		paced = append(paced, int64((i+1)*100/80-i*100/80)<<20)
	}
	if w := window([][]int64{paced}, []int64{1 << 20}); w != 10 {
		t.Errorf("1 MiB requests every 80 ms are averaged over %d buckets, want 10 (at least 10 requests a window)", w)
	}
	if w := window([][]int64{paced}, nil); w != 1 {
		t.Errorf("a line of unknown request size with bytes in every bucket is averaged over %d buckets, want 1", w)
	}
	pts := points(bursty, 5)
	for _, p := range pts[:len(pts)-1] {
		if p.Y < 1 || p.Y > 4 {
			t.Errorf("a point of the averaged bursty line at %.2f MiB/s, want 2 or 2.5", p.Y)
		}
	}
}

// TestReadaheadBudgetDirection: seed 000's claim on the simulator, beyond
// the scenario's own bounds: with the budget, the worst read waits about
// one page at the limit (4 KiB at 1 MB/s is 4.1 ms), without it a whole
// readahead window (128 KiB: 131 ms); both hold the rate.
func TestReadaheadBudgetDirection(t *testing.T) {
	sc, err := Load("../scenarios/000-readahead-1MBps.toml")
	if err != nil {
		t.Fatal(err)
	}
	sc.Jobs[0].Runtime = Duration(30 * time.Second)
	runs, err := RunCompare(sc, "readahead-budget", []string{"off", "on"})
	if err != nil {
		t.Fatal(err)
	}
	off, on := runs[0].Jobs[0], runs[1].Jobs[0]
	if on.Clat.Max > int64(10*time.Millisecond) || off.Clat.Max < int64(100*time.Millisecond) {
		t.Errorf("clat max: budget on %v, off %v; want on under 10ms, off over 100ms",
			time.Duration(on.Clat.Max), time.Duration(off.Clat.Max))
	}
	for _, j := range []JobResult{off, on} {
		if r := j.BW() / 1e6; r < 0.97 || r > 1.01 {
			t.Errorf("achieved %.3f of 1 MB/s", r)
		}
	}
}

// TestBadScenario: a scenario error names the file, the line and the field.
func TestBadScenario(t *testing.T) {
	const good = `name = "x"
[[group]]
name = "g"
limits = "rbps=1MiB"

[[job]]
name = "a"
group = "g"
rw = "read"
bs = "4k"
size = "1MiB"
`
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"bad size", `bs = "4k"`, `bs = "4q"`, "x.toml:10: job.bs:"},
		{"bad rw", `rw = "read"`, `rw = "sideways"`, `x.toml:9: job.0.rw: "sideways": want read, write, randread, randwrite or sync`},
		{"unknown field", `size = "1MiB"`, "size = \"1MiB\"\nspeed = 3", `x.toml:12: job.speed: unknown field "speed"`},
		{"bad limit", `limits = "rbps=1MiB"`, `limits = "rbps=fast"`, "x.toml:4: group.0.limits:"},
		{"syntax", `name = "x"`, `name = x`, "x.toml:1:"},
		{"no device", `group = "g"`, "group = \"g\"\ndevice = \"nvme\"", `x.toml:9: job.0.device: no device "nvme"`},
		{"bad latency", `[[group]]`, "[[device]]\nname = \"d\"\nlatency = \"gauss(1ms)\"\n[[group]]", "x.toml:4: device.latency:"},
		{"bad compare", `name = "x"`, "name = \"x\"\ncompare = \"speed=1,2\"", "x.toml:2: compare: speed: unknown key"},
		{"bad max-io", `name = "x"`, "name = \"x\"\n[mount]\nmax-io = \"3k\"", "x.toml:3: mount.max-io: 3KiB: want a multiple of 4KiB from 4KiB to 1GiB"},
		{"bad readahead", `name = "x"`, "name = \"x\"\n[mount]\nreadahead = \"1000\"", "x.toml:3: mount.readahead: 1000: want 0 (off)"},
		{"small cache", `name = "x"`, "name = \"x\"\n[mount]\nreadahead = \"1MiB\"\ncache = \"8MiB\"", "x.toml:4: mount.cache: 8MiB: want at least 16 readahead windows, 16MiB"},
		{"bad read policy", `name = "x"`, "name = \"x\"\n[mount]\nread-policy = \"fastest\"", "x.toml:3: mount.read-policy: fastest: want one of adaptive, pid, roundrobin, latency"},
		{"bad cache mode", `name = "x"`, "name = \"x\"\n[mount]\ncache-mode = \"fast\"", "x.toml:3: mount.cache-mode: fast: want auto, direct or kernel"},
		{"no fuse latency", `name = "x"`, "name = \"x\"\n[mount]\nfuse-latency = \"0s\"", "x.toml:3: mount.fuse-latency: 0s: want a positive duration"},
		{"mmap reader", `rw = "read"`, "rw = \"read\"\nmmap = true", "x.toml:10: job.0.mmap: models writers only: want rw = write or randwrite"},
		{"bad write throttle", `name = "x"`, "name = \"x\"\n[mount]\nwrite-throttle = \"later\"", "x.toml:3: mount.write-throttle: later: want write"},
		{"mirror not a device", `name = "x"`, "name = \"x\"\n[mount]\nmirrors = [\"a\", \"b\"]", `x.toml:3: mount.mirrors: no device "a"`},
		{"one mirror", `[[group]]`, "[mount]\nmirrors = [\"d\"]\n[[device]]\nname = \"d\"\n[[group]]", `x.toml:3: mount.mirrors: a mirror set needs at least two devices`},
		{"sync job", `rw = "read"`, "rw = \"sync\"\nstart = \"-\"", `x.toml:10: job.start:`},
		{"vs no job", `[[group]]`, "[[expect]]\njob = \"a\"\nvs = \"b\"\nmetric = \"iops\"\n[[group]]", `x.toml:4: expect.0.vs: no job "b"`},
		{"vs-alone alone", `[[group]]`, "[[expect]]\njob = \"a\"\nvs-alone = 3.0\nmetric = \"iops\"\n[[group]]", `x.toml:4: expect.0.vs-alone: is the figure alone of job vs`},
		{"window of clat", `[[group]]`, "[[expect]]\njob = \"a\"\nfrom = \"1s\"\nmetric = \"clat-max\"\n[[group]]", `x.toml:4: expect.0.from: a window is for bw and iops, not clat-max`},
		{"window off the buckets", `[[group]]`, "[[expect]]\njob = \"a\"\nfrom = \"1.05s\"\nmetric = \"iops\"\n[[group]]", `x.toml:4: expect.0.from: want from and until on the 100ms buckets`},
		{"window backwards", `[[group]]`, "[[expect]]\njob = \"a\"\nfrom = \"2s\"\nuntil = \"1s\"\nmetric = \"iops\"\n[[group]]", `x.toml:5: expect.0.until: want until after from`},
		{"bad seek", `[[group]]`, "[[device]]\nname = \"d\"\nseek = \"soon\"\n[[group]]", "x.toml:4: device.seek:"},
		{"bad compare value", `name = "x"`, "name = \"x\"\ncompare = \"max-io=4k,3k\"", "x.toml:2: compare: max-io=3k: max-io 3KiB: want a multiple of 4KiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := strings.Replace(good, tc.from, tc.to, 1)
			_, err := Parse("x.toml", src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v; want it to contain %q", err, tc.want)
			}
		})
	}
	if _, err := Parse("x.toml", good); err != nil {
		t.Fatalf("the good scenario: %v", err)
	}
}

// TestMountDefaults: keys a scenario leaves out take sluice mount's
// defaults; 0 turns readahead, idle credit and the wait cap off.
func TestMountDefaults(t *testing.T) {
	const jobs = `
[[job]]
name = "a"
group = "g"
rw = "read"
bs = "4k"
size = "1MiB"
`
	sc, err := Parse("x.toml", jobs)
	if err != nil {
		t.Fatal(err)
	}
	if o, err := sc.options(); err != nil || o != stack.DefaultOptions() {
		t.Fatalf("no [mount]: %+v, %v; want the defaults %+v", o, err, stack.DefaultOptions())
	}
	sc, err = Parse("x.toml", "[mount]\nreadahead = \"0\"\nburst = \"0s\"\nreadahead-budget = false\n"+jobs)
	if err != nil {
		t.Fatal(err)
	}
	want := stack.DefaultOptions()
	want.Readahead, want.Burst, want.ReadaheadBudget = 0, 0, false
	if o, err := sc.options(); err != nil || o != want {
		t.Fatalf("readahead and burst 0, budget off: %+v, %v; want %+v", o, err, want)
	}
}

// TestSiblingShare: siblings reading 1 MiB and 4 KiB blocks under a
// saturated parent each get half of it within 10 %; with readahead sized
// to the parent's raw credit instead of the group's share, the small
// reader got one page per large piece (about 1:30).
func TestSiblingShare(t *testing.T) {
	sc, err := Load("../scenarios/sibling-share.toml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sc)
	if err != nil {
		t.Fatal(err)
	}
	half := 10.0 * (1 << 20) / 2
	for _, j := range res.Jobs {
		if r := j.BW() / half; r < 0.9 || r > 1.1 {
			t.Errorf("%s got %.3f of half the parent", j.Name, r)
		}
	}
}

// BenchmarkSpeed reports how much faster than real time each shipped
// scenario runs (virtual seconds per wall second).
func BenchmarkSpeed(b *testing.B) {
	for _, f := range shipped(b) {
		b.Run(filepath.Base(f), func(b *testing.B) {
			sc, err := Load(f)
			if err != nil {
				b.Fatal(err)
			}
			var virtual, appIOs, devIOs int64
			start := time.Now()
			for b.Loop() {
				runs, _ := runAll(b, sc)
				for _, r := range runs {
					virtual += r.End
					for _, j := range r.Jobs {
						appIOs += j.IOs
					}
					for _, d := range r.Devices {
						devIOs += d.Reads + d.Writes + d.Flushes
					}
				}
			}
			wall := time.Since(start)
			b.ReportMetric(float64(virtual)/float64(wall), "x-realtime")
			// What a virtual second holds, and what each of its
			// application I/Os cost in wall time, policy and model
			// together: a scenario's speed is the one over the other's
			// product, so at N application I/Os a virtual second 1000x
			// real time leaves 1e6/N ns for each.
			b.ReportMetric(float64(appIOs)/(float64(virtual)/1e9), "app-IOs/vs")
			b.ReportMetric(float64(devIOs)/(float64(virtual)/1e9), "dev-IOs/vs")
			b.ReportMetric(float64(wall)/float64(max(appIOs, 1)), "ns/app-IO")
		})
	}
}

// TestHedgedReads: one mirror of two turns 1000x slower (100 ms a read)
// for a second. Under adaptive, a read sent to it just before is hedged on
// the other mirror a few milliseconds later, as the mount does, so no read
// waits anywhere near 100 ms; latency, which does not hedge, leaves such
// reads to finish where they were sent.
func TestHedgedReads(t *testing.T) {
	src := hangScenario("hedging", 2, hangDev{"a", "100us", true}, hangDev{"b", "100us", false})
	for _, tc := range []struct {
		policy string
		hedged bool
	}{{"adaptive", true}, {"latency", false}} {
		sc, err := Parse("hedging.toml", src+"\n")
		if err != nil {
			t.Fatal(err)
		}
		sc.Mount.ReadPolicy = tc.policy
		res, err := Run(sc)
		if err != nil {
			t.Fatal(err)
		}
		worst := res.Jobs[0].Clat.Max
		t.Logf("%s: max clat %.1f ms", tc.policy, float64(worst)/1e6)
		if tc.hedged && worst > 10e6 {
			t.Errorf("%s: a read waited %.1f ms: it was not hedged", tc.policy, float64(worst)/1e6)
		}
		if !tc.hedged && worst < 50e6 {
			t.Errorf("%s: max clat %.1f ms: the slow mirror never held a read (the test shows nothing)", tc.policy, float64(worst)/1e6)
		}
	}
}

// TestHedgedReadsThird: two mirrors of three hang (1000x slower, 100 ms
// a read) for a second, and the third is the slowest when all are well.
// A read sent to a hung mirror is hedged on the next cheapest, the other
// hung one, and then, as the mount goes on, on the third: no read waits
// near 100 ms.
func TestHedgedReadsThird(t *testing.T) {
	src := hangScenario("hedging3", 1, hangDev{"a", "100us", true}, hangDev{"b", "100us", true}, hangDev{"c", "300us", false})
	sc, err := Parse("hedging3.toml", src)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(sc)
	if err != nil {
		t.Fatal(err)
	}
	worst := res.Jobs[0].Clat.Max
	t.Logf("max clat %.1f ms; reads a %d, b %d, c %d", float64(worst)/1e6,
		res.Devices[0].Reads, res.Devices[1].Reads, res.Devices[2].Reads)
	if worst > 20e6 {
		t.Errorf("a read waited %.1f ms: it was not hedged on to the third mirror", float64(worst)/1e6)
	}
	if res.Devices[0].Reads == 0 || res.Devices[1].Reads == 0 {
		t.Errorf("reads a %d, b %d: the mirrors that hang were not read (the test shows nothing)", res.Devices[0].Reads, res.Devices[1].Reads)
	}
}

// hangDev is a device of hangScenario's mirror set: its latency, and
// whether it hangs (1000 times slower) from 1 s to 2 s.
type hangDev struct {
	name, latency string
	hangs         bool
}

// hangScenario is a mirror set of devs read for 3 s by numjobs 4 KiB
// random direct readers.
func hangScenario(name string, numjobs int, devs ...hangDev) string {
	var b strings.Builder
	var names []string
	for _, d := range devs {
		names = append(names, strconv.Quote(d.name))
	}
	fmt.Fprintf(&b, "\nname = %q\nseed = 1\n[mount]\nmirrors = [%s]\n", name, strings.Join(names, ", "))
	for _, d := range devs {
		fmt.Fprintf(&b, "[[device]]\nname = %q\nbandwidth = \"2000MiB\"\nlatency = %q\n", d.name, d.latency)
		if d.hangs {
			b.WriteString("[[device.slow]]\nat = \"1s\"\nuntil = \"2s\"\nfactor = 1000.0\n")
		}
	}
	b.WriteString("[[group]]\nname = \"g\"\n[[job]]\nname = \"r\"\ngroup = \"g\"\nrw = \"randread\"\nbs = \"4k\"\n" +
		"size = \"1GiB\"\nruntime = \"3s\"\ntime-based = true\n")
	if numjobs > 1 {
		fmt.Fprintf(&b, "numjobs = %d\n", numjobs)
	}
	b.WriteString("direct = true\n")
	return b.String()
}

// TestWakeLatency: a reader held at its limit page by page has no credit
// when the stack's wake-ups come on time, so budget-aware readahead reads
// nothing ahead; when they come late, as a timer on a busy machine does,
// the reader falls behind its limit between releases, and the credit it
// builds is read ahead, as on a real mount. The same scenario and seed
// give the same figures.
func TestWakeLatency(t *testing.T) {
	src := `
name = "late wake-ups"
seed = 1
[mount]
fuse-latency = "35us"
%s
[[device]]
name = "d"
bandwidth = "1GiB"
latency = "lognormal(100us,40us)"
[[group]]
name = "g"
limits = "rbps=8MiB"
[[job]]
name = "r"
group = "g"
rw = "read"
bs = "4k"
size = "1GiB"
runtime = "5s"
time-based = true
`
	ra := func(wake string) (issued, rbytes int64, out string) {
		sc, err := Parse("wake.toml", fmt.Sprintf(src, wake))
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(sc)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		res.Write(&b)
		for _, g := range res.Stack.Groups {
			if g.Group == "g" {
				return g.RAIssued, g.RBytes, b.String()
			}
		}
		t.Fatalf("no group g: %+v", res.Stack.Groups)
		return 0, 0, ""
	}
	onTime, rb0, _ := ra("")
	late, rb1, out1 := ra(`wake-latency = "lognormal(300us,200us)"`)
	_, _, out2 := ra(`wake-latency = "lognormal(300us,200us)"`)
	t.Logf("read ahead: %d of %d bytes with wake-ups on time, %d of %d with them late", onTime, rb0, late, rb1)
	if onTime*100 > rb0 {
		t.Errorf("on time: %d of %d bytes read ahead; want under 1 %%", onTime, rb0)
	}
	if late*100 < rb1 {
		t.Errorf("late: %d of %d bytes read ahead; want 1 %% or more", late, rb1)
	}
	if out1 != out2 {
		t.Errorf("the same scenario twice gave different output:\n%s\n%s", out1, out2)
	}
}
