package sim

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"sluice/device"
	"sluice/group"
	"sluice/stack"
)

// Result is what a run measured.
type Result struct {
	Scenario string
	Config   string // the --compare setting of this run, "" for none
	End      int64  // virtual time at the end, ns
	Jobs     []JobResult
	Stack    stack.Metrics
	Devices  []DeviceResult
	Series   []Series
}

// JobResult is one job's figures, its copies together (fio's
// group_reporting).
type JobResult struct {
	Name, Group, RW string
	Copies          int
	BS              int64
	Bytes, IOs      int64
	Shorts          int64 // FUSE replies shorter than asked (the wait cap)
	RuntimeNs       int64 // first request to last completion
	StartNs         int64 // the first request, virtual ns
	Clat            Latency
	// Worst is, per bucket of the run's time series, the longest
	// completion latency of the requests that completed in it (ns).
	Worst []int64
	// IOsAt and BytesAt are, per bucket, the requests completed and the
	// bytes answered in it.
	IOsAt, BytesAt []int64
}

// Latency summarises completion latencies in nanoseconds.
type Latency struct {
	Min, Max, P50, P99, P999 int64
	Avg, Stdev               float64
}

// BW returns the job's bandwidth in bytes per second.
func (j JobResult) BW() float64 {
	if j.RuntimeNs <= 0 {
		return 0
	}
	return float64(j.Bytes) / (float64(j.RuntimeNs) / 1e9)
}

// IOPS returns the job's application I/Os per second.
func (j JobResult) IOPS() float64 {
	if j.RuntimeNs <= 0 {
		return 0
	}
	return float64(j.IOs) / (float64(j.RuntimeNs) / 1e9)
}

// DeviceResult is one device's counters.
type DeviceResult struct {
	Name string
	device.ModelStats
}

// IOPS returns the device's I/Os per second over the run.
func (d DeviceResult) IOPS(end int64) float64 {
	if end <= 0 {
		return 0
	}
	return float64(d.Reads+d.Writes) / (float64(end) / 1e9)
}

// Series is bytes per 100 ms bucket of one group (application bytes) or
// device.
type Series struct {
	Name  string
	Bytes []int64
}

func (r *runner) result() *Result {
	end := r.busy
	if r.stop > 0 && r.now >= r.stop {
		end = r.stop // cut short: the run lasted to the stop
	}
	res := &Result{Scenario: r.sc.Name, End: end, Stack: r.st.Metrics()}
	for _, j := range r.jobs {
		h := &j.clat
		res.Jobs = append(res.Jobs, JobResult{
			Name: j.Name, Group: j.g.Path(), RW: j.RW, Copies: len(j.threads), BS: int64(j.BS),
			Bytes: j.bytes, IOs: j.ios, Shorts: j.shorts, RuntimeNs: j.last - j.first, StartNs: j.first,
			Clat: Latency{Min: h.min, Max: h.max, P50: h.pct(50), P99: h.pct(99), P999: h.pct(99.9), Avg: h.mean(), Stdev: h.stdev()},
		})
	}
	for _, d := range r.devList {
		res.Devices = append(res.Devices, DeviceResult{Name: d.Name, ModelStats: d.Stats})
	}
	n := int(end/bucket) + 1
	pad := func(s []int64) []int64 {
		out := make([]int64, n)
		copy(out, s)
		return out
	}
	for i, j := range r.jobs {
		res.Jobs[i].Worst = pad(j.worst)
		res.Jobs[i].IOsAt = pad(j.iosAt)
		res.Jobs[i].BytesAt = pad(j.bytesAt)
	}
	for i, name := range r.names {
		s := append([]int64(nil), r.series[i]...)
		for len(s) < n {
			s = append(s, 0)
		}
		res.Series = append(res.Series, Series{Name: name, Bytes: s[:n]})
	}
	return res
}

// bw formats bytes per second as fio does: "960KiB/s (983kB/s)".
func bw(b float64) string {
	bin := []string{"B", "KiB", "MiB", "GiB"}
	dec := []string{"B", "kB", "MB", "GB"}
	x, y := b, b
	i, k := 0, 0
	for x >= 1024*10 && i < 3 {
		x /= 1024
		i++
	}
	for y >= 1000*10 && k < 3 {
		y /= 1000
		k++
	}
	return fmt.Sprintf("%.0f%s/s (%.0f%s/s)", x, bin[i], y, dec[k])
}

func us(ns float64) string { return fmt.Sprintf("%.2f", ns/1e3) }

// Write prints the result: fio-like per job, then the groups in `sluice
// stat` form, then the devices.
func (res *Result) Write(w io.Writer) {
	if res.Config != "" {
		fmt.Fprintf(w, "== %s\n", res.Config)
	}
	for _, j := range res.Jobs {
		if j.RW == "sync" {
			fmt.Fprintf(w, "%s: (jobs=%d): group=%s rw=sync\n", j.Name, j.Copies, j.Group)
			fmt.Fprintf(w, "  sync: calls=%d\n", j.IOs)
		} else {
			fmt.Fprintf(w, "%s: (jobs=%d): group=%s rw=%s bs=%s\n", j.Name, j.Copies, j.Group, j.RW, group.FormatSize(j.BS))
		}
		dir := "read"
		if strings.Contains(j.RW, "write") {
			dir = "write"
		}
		if j.RW != "sync" {
			fmt.Fprintf(w, "  %s: IOPS=%.0f, BW=%s(%s/%dmsec)\n", dir, j.IOPS(), bw(j.BW()), group.FormatSize(j.Bytes), j.RuntimeNs/1e6)
		}
		c := j.Clat
		fmt.Fprintf(w, "    clat (usec): min=%s, max=%s, avg=%s, stdev=%s\n", us(float64(c.Min)), us(float64(c.Max)), us(c.Avg), us(c.Stdev))
		fmt.Fprintf(w, "    clat percentiles (usec): 50.00th=%s, 99.00th=%s, 99.90th=%s\n", us(float64(c.P50)), us(float64(c.P99)), us(float64(c.P999)))
		if j.Shorts > 0 {
			fmt.Fprintf(w, "    short replies (wait cap): %d\n", j.Shorts)
		}
	}
	fmt.Fprintln(w)
	fmt.Fprint(w, res.Stack.String())
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// Seeks are shown where a device paid any (a seek time is set).
	seeks := false
	for _, d := range res.Devices {
		seeks = seeks || d.Seeks > 0
	}
	fmt.Fprint(tw, "device\treads\twrites\tflushes\trbytes\twbytes\terrors\t")
	if seeks {
		fmt.Fprint(tw, "seeks\t")
	}
	fmt.Fprintln(tw, "iops\tutil\t")
	for _, d := range res.Devices {
		util := 0.0
		if res.End > 0 {
			util = float64(d.BusyNs) / float64(res.End)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t", d.Name, d.Reads, d.Writes, d.Flushes, d.RBytes, d.WBytes, d.Errors)
		if seeks {
			fmt.Fprintf(tw, "%d\t", d.Seeks)
		}
		fmt.Fprintf(tw, "%.1f\t%.1f%%\t\n", d.IOPS(res.End), util*100)
	}
	tw.Flush()
	fmt.Fprintf(w, "virtual time %.3fs\n", float64(res.End)/1e9)
}

// WriteCSV writes the time series: one row per 100 ms, MiB/s per series.
func WriteCSV(w io.Writer, runs []*Result) {
	var cols []string
	n := 0
	for _, res := range runs {
		for _, s := range res.Series {
			cols = append(cols, label(res, s))
			n = max(n, len(s.Bytes))
		}
	}
	fmt.Fprintf(w, "time_s,%s\n", strings.Join(cols, ","))
	for b := range n {
		fmt.Fprintf(w, "%.1f", float64(b)*float64(bucket)/1e9)
		for _, res := range runs {
			for _, s := range res.Series {
				v := 0.0
				if b < len(s.Bytes) {
					v = float64(s.Bytes[b]) / (float64(bucket) / 1e9) / (1 << 20)
				}
				fmt.Fprintf(w, ",%.3f", v)
			}
		}
		fmt.Fprintln(w)
	}
}

func label(res *Result, s Series) string {
	l := strings.ReplaceAll(s.Name, " ", ":") + "_MiBps"
	if res.Config != "" {
		l = res.Config + ":" + l
	}
	return strings.ReplaceAll(l, ",", ";")
}

// Figure is a job's figure in a metric's unit: bw KiB/s, iops, clat-max
// and clat-avg ms, dev-iops device I/Os per second.
func (res *Result) Figure(job, metric string) (float64, error) {
	if metric == "dev-iops" {
		var n int64
		for _, d := range res.Devices {
			n += d.Reads + d.Writes
		}
		return float64(n) / (float64(res.End) / 1e9), nil
	}
	for _, j := range res.Jobs {
		if j.Name != job {
			continue
		}
		switch metric {
		case "bw":
			return j.BW() / 1024, nil
		case "iops":
			return j.IOPS(), nil
		case "clat-max":
			return float64(j.Clat.Max) / 1e6, nil
		case "clat-avg":
			return j.Clat.Avg / 1e6, nil
		case "clat-p99":
			return float64(j.Clat.P99) / 1e6, nil
		}
		return 0, fmt.Errorf("unknown metric %q; want bw, iops, clat-max, clat-avg, clat-p99 or dev-iops", metric)
	}
	return 0, fmt.Errorf("no job %q", job)
}

// FigureIn is Figure over the window from..until of the run (until 0:
// the job's last completion), on its 100 ms buckets: bw and iops of the
// requests completed within it, over its length. With no window it is
// Figure.
func (res *Result) FigureIn(job, metric string, from, until int64) (float64, error) {
	if from == 0 && until == 0 {
		return res.Figure(job, metric)
	}
	for _, j := range res.Jobs {
		if j.Name != job {
			continue
		}
		var per []int64
		div := 1.0
		switch metric {
		case "bw":
			per, div = j.BytesAt, 1024
		case "iops":
			per = j.IOsAt
		default:
			return 0, fmt.Errorf("a window is for bw and iops, not %q", metric)
		}
		end := j.StartNs + j.RuntimeNs
		if until > 0 && until < end {
			end = until
		}
		start := max(from, j.StartNs)
		if end <= start {
			return 0, nil
		}
		var n int64
		for b := from / bucket; b < int64(len(per)) && b*bucket < end; b++ {
			n += per[b]
		}
		return float64(n) / div / (float64(end-start) / 1e9), nil
	}
	return 0, fmt.Errorf("no job %q", job)
}

var metricUnit = map[string]string{"bw": "KiB/s", "iops": "IOPS", "clat-max": "ms", "clat-avg": "ms", "clat-p99": "ms", "dev-iops": "IOPS"}

// WriteComparison prints the runs side by side, with the seed's published
// figures next to the simulated ones.
func WriteComparison(w io.Writer, sc *Scenario, runs []*Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "job\tmetric\t")
	for _, res := range runs {
		c := res.Config
		if c == "" {
			c = "simulated"
		}
		fmt.Fprintf(tw, "%s\t", c)
	}
	fmt.Fprintln(tw)
	metrics := []string{"bw", "iops", "clat-avg", "clat-p99", "clat-max"}
	for _, j := range runs[0].Jobs {
		for _, m := range metrics {
			if j.RW == "sync" && (m == "bw" || m == "iops") {
				continue // a sync moves no bytes of its own
			}
			fmt.Fprintf(tw, "%s\t%s (%s)\t", j.Name, m, metricUnit[m])
			for _, res := range runs {
				v, _ := res.Figure(j.Name, m)
				fmt.Fprintf(tw, "%s\t", num(v))
			}
			fmt.Fprintln(tw)
		}
	}
	fmt.Fprintf(tw, "all\tdev-iops (IOPS)\t")
	for _, res := range runs {
		v, _ := res.Figure("", "dev-iops")
		fmt.Fprintf(tw, "%s\t", num(v))
	}
	fmt.Fprintln(tw)
	tw.Flush()
	if len(sc.Published) == 0 {
		return
	}
	fmt.Fprintln(w, "\nthe seed's published figures beside the simulated ones:")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "config\tjob\tmetric\tpublished\tsimulated\tseed's label\t")
	for _, p := range sc.Published {
		sim := "-"
		for _, res := range runs {
			if res.Config == p.Config || p.Config == "" {
				if v, err := res.Figure(p.Job, p.Metric); err == nil {
					sim = num(v)
				}
				break
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s (%s)\t%s\t%s\t%s\t\n", p.Config, p.Job, p.Metric, metricUnit[p.Metric], num(p.Value), sim, p.Label)
	}
	tw.Flush()
}

func num(v float64) string {
	switch {
	case v == 0 || math.IsNaN(v):
		return "0"
	case math.Abs(v) >= 100:
		return fmt.Sprintf("%.0f", v)
	case math.Abs(v) >= 1:
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.3f", v)
}
