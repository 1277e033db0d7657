package sim

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// MaxSeries is the most lines one panel of a plot holds.
const MaxSeries = 6

// Panel is one plot of a figure: the series of one kind (devices, or
// groups) of one run, in bytes per bucket.
type Panel struct {
	Title  string
	Labels []string  // a line's name: a device's, or a group's path
	Series [][]int64 // per line, bytes per bucket
	Window int       // buckets averaged into each point
	Marks  []Mark    // spans drawn over the lines: the syncs of a groups panel
	// Latency says the lines are jobs' worst completion latencies per
	// bucket (ns), drawn as the worst of each window, in milliseconds.
	Latency bool
}

// Mark is a span of time drawn over a panel's lines, named.
type Mark struct {
	Label    string
	From, To int64 // virtual ns
}

// Panels lays out the runs' time series for a plot: per run (a
// configuration of --compare), one panel of its devices and one of its
// groups; then per group, one panel of its jobs' worst latencies, a line
// per job and configuration, so that the runs compare on one scale (a
// sync is left out: its groups panel marks it). Each is split where it
// would hold more than MaxSeries lines, and each averaged over the
// shortest window (of 1, 2, 5, 10, 20, 50 or 100 buckets) that leaves at
// most 100 points a line and in which no line that moves reads as a
// sawtooth (at most a tenth of its windows empty between its first and
// last bytes).
func Panels(runs []*Result) []Panel {
	out := throughputPanels(runs)
	var groups []string
	lines := map[string][]string{}
	series := map[string][][]int64{}
	for _, res := range runs {
		for _, j := range res.Jobs {
			if j.RW == "sync" || j.IOs == 0 {
				continue
			}
			if _, ok := lines[j.Group]; !ok {
				groups = append(groups, j.Group)
			}
			label := j.Name
			if res.Config != "" {
				label = res.Config + ", " + j.Name
			}
			// A line ends with its job's last completion.
			w := j.Worst
			for len(w) > 1 && w[len(w)-1] == 0 {
				w = w[:len(w)-1]
			}
			lines[j.Group] = append(lines[j.Group], label)
			series[j.Group] = append(series[j.Group], w)
		}
	}
	for _, g := range groups {
		out = append(out, split("worst latency: "+g, lines[g], series[g], nil, true)...)
	}
	return out
}

// split makes the panels of one title's lines, at most MaxSeries a panel;
// reqs, when not nil, are the lines' request sizes (see window).
func split(title string, labels []string, series [][]int64, reqs []int64, latency bool) []Panel {
	var out []Panel
	for i := 0; i < len(series); i += MaxSeries {
		j := min(i+MaxSeries, len(series))
		t := title
		if len(series) > MaxSeries {
			t = fmt.Sprintf("%s (%d-%d of %d)", title, i+1, j, len(series))
		}
		var r []int64
		if reqs != nil {
			r = reqs[i:j]
		}
		out = append(out, Panel{Title: t, Labels: labels[i:j], Series: series[i:j], Window: window(series[i:j], r), Latency: latency})
	}
	return out
}

// throughputPanels are Panels' panels of devices and groups.
func throughputPanels(runs []*Result) []Panel {
	var out []Panel
	for _, res := range runs {
		for _, kind := range []struct{ prefix, name string }{{"device ", "devices"}, {"group ", "groups"}} {
			var labels []string
			var series [][]int64
			var reqs []int64 // a group's largest application request
			for _, s := range res.Series {
				if name, ok := strings.CutPrefix(s.Name, kind.prefix); ok {
					labels, series = append(labels, name), append(series, s.Bytes)
					var bs int64
					for _, j := range res.Jobs {
						if j.Group == name {
							bs = max(bs, j.BS)
						}
					}
					reqs = append(reqs, bs)
				}
			}
			title := kind.name
			if res.Config != "" {
				title = res.Config + ": " + kind.name
			}
			pns := split(title, labels, series, reqs, false)
			if kind.name == "groups" && len(pns) > 0 {
				pns[0].Marks = syncs(res)
			}
			out = append(out, pns...)
		}
	}
	return out
}

// syncs are the runs' sync(2) calls, each from its start until it
// returned.
func syncs(res *Result) []Mark {
	var out []Mark
	for _, j := range res.Jobs {
		if j.RW == "sync" && j.IOs > 0 {
			d := time.Duration(j.Clat.Max)
			if d >= time.Second {
				d = d.Round(time.Millisecond)
			} else {
				d = d.Round(time.Microsecond)
			}
			out = append(out, Mark{Label: fmt.Sprintf("%s: waited %v", j.Name, d), From: j.StartNs, To: j.StartNs + j.Clat.Max})
		}
	}
	return out
}

// window returns the buckets to average per point for series (see Panels):
// at most 100 points a line, none of its lines a sawtooth, and where reqs
// gives a line's request size (0 for none known), at least 10 of its
// requests to a window at its median rate: 1 MiB requests at 12.5 MiB/s
// land 1 and 2 to a bucket of 100 ms, 12 and 13 to a second.
func window(series [][]int64, reqs []int64) int {
	n, need := 0, 1
	for i, s := range series {
		n = max(n, len(s))
		if i < len(reqs) && reqs[i] > 0 {
			if m := medianMoving(s); m > 0 {
				need = max(need, int((10*reqs[i]+m-1)/m))
			}
		}
	}
	for _, w := range []int{1, 2, 5, 10, 20, 50} {
		if w >= need && w*100 >= n && !sawtooth(series, w) {
			return w
		}
	}
	return 100
}

// medianMoving is the median of s's buckets from its first bytes to its
// last, 0 for a line without bytes.
func medianMoving(s []int64) int64 {
	v := slices.Clone(moving(s))
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

// moving returns s from its first non-zero value to its last, nil where
// it has none.
func moving(s []int64) []int64 {
	first, last := -1, -1
	for i, b := range s {
		if b > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return nil
	}
	return s[first : last+1]
}

// sawtooth reports whether some series, summed over windows of w buckets,
// has more than a tenth of its windows empty between its first and last
// bytes.
func sawtooth(series [][]int64, w int) bool {
	for _, s := range series {
		var sums []int64
		for i := 0; i < len(s); i += w {
			var t int64
			for _, b := range s[i:min(i+w, len(s))] {
				t += b
			}
			sums = append(sums, t)
		}
		m := moving(sums)
		if len(m) < 2 {
			continue
		}
		empty := 0
		for _, t := range m {
			if t == 0 {
				empty++
			}
		}
		if empty*10 > len(m) {
			return true
		}
	}
	return false
}

// SavePlot draws the runs' time series to file, the extension picking the
// format (.svg, .png, .pdf): the panels of Panels one above another, each
// with its title, its axes in seconds and MiB/s, its marks as black bars
// above the lines, and its legend beside the data; title names the
// figure.
func SavePlot(file, title string, runs []*Result) error {
	format := strings.TrimPrefix(filepath.Ext(file), ".")
	panels := Panels(runs)
	if len(panels) == 0 {
		return fmt.Errorf("plot: the runs have no time series")
	}
	const width, panelHeight, legendShare = 10 * vg.Inch, 2.6 * vg.Inch, 0.22
	c, err := draw.NewFormattedCanvas(width, panelHeight*vg.Length(len(panels))+0.5*vg.Inch, format)
	if err != nil {
		return fmt.Errorf("plot %s: %v (want .svg, .png or .pdf)", file, err)
	}
	dc := draw.New(c)
	// The figure's title, above the panels.
	head := plot.New()
	head.Title.Text = title
	head.Title.TextStyle.Font.Size = vg.Points(14)
	top := draw.Crop(dc, 0, 0, dc.Max.Y-dc.Min.Y-0.5*vg.Inch, 0)
	head.HideAxes()
	head.Draw(top)
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: 0.5 * vg.Inch, PadY: 0.1 * vg.Inch, PadLeft: 0.1 * vg.Inch, PadRight: 0.1 * vg.Inch}
	for i, pn := range panels {
		tile := tiles.At(dc, 0, i)
		w := tile.Max.X - tile.Min.X
		p := plot.New()
		p.Title.Text = pn.Title
		p.X.Label.Text = "time (s)"
		p.Y.Label.Text = fmt.Sprintf("MiB/s (mean over %d ms)", pn.Window*int(bucket/1e6))
		pts := points
		if pn.Latency {
			p.Y.Label.Text = fmt.Sprintf("ms (worst in %d ms)", pn.Window*int(bucket/1e6))
			pts = worstPoints
		}
		p.Y.Min = 0
		legend := plot.NewLegend()
		top := 0.0
		for k, s := range pn.Series {
			line, err := plotter.NewLine(pts(s, pn.Window))
			if err != nil {
				return fmt.Errorf("plot: %v", err)
			}
			line.Color = plotutil.Color(k)
			line.Dashes = plotutil.Dashes(k)
			line.Width = vg.Points(1.5)
			p.Add(line)
			legend.Add(pn.Labels[k], line)
			for _, pt := range pts(s, pn.Window) {
				top = max(top, pt.Y)
			}
		}
		// Each mark a thick bar above the lines, from its start to its end.
		for k, mk := range pn.Marks {
			y := max(top, 1) * (1.08 + 0.06*float64(k))
			bar, err := plotter.NewLine(plotter.XYs{{X: float64(mk.From) / 1e9, Y: y}, {X: float64(mk.To) / 1e9, Y: y}})
			if err != nil {
				return fmt.Errorf("plot: %v", err)
			}
			bar.Width = vg.Points(4)
			bar.Color = color.Black
			p.Add(bar)
			legend.Add(mk.Label, bar)
		}
		p.Draw(draw.Crop(tile, 0, -w*legendShare, 0, 0))
		legend.Top = true
		legend.Draw(draw.Crop(tile, w*(1-legendShare)+0.1*vg.Inch, 0, 0, -0.3*vg.Inch))
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// points averages s over windows of w buckets, in MiB/s at each window's
// middle.
func points(s []int64, w int) plotter.XYs {
	var pts plotter.XYs
	secs := float64(bucket) / 1e9
	for i := 0; i < len(s); i += w {
		j := min(i+w, len(s))
		var t int64
		for _, b := range s[i:j] {
			t += b
		}
		pts = append(pts, plotter.XY{X: (float64(i) + float64(j-i)/2) * secs, Y: float64(t) / (float64(j-i) * secs) / (1 << 20)})
	}
	return pts
}

// worstPoints is the largest of s over windows of w buckets, from ns to
// ms, at each window's middle.
func worstPoints(s []int64, w int) plotter.XYs {
	var pts plotter.XYs
	secs := float64(bucket) / 1e9
	for i := 0; i < len(s); i += w {
		j := min(i+w, len(s))
		pts = append(pts, plotter.XY{X: (float64(i) + float64(j-i)/2) * secs, Y: float64(slices.Max(s[i:j])) / 1e6})
	}
	return pts
}
