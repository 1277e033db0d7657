package sim

import (
	"fmt"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// SavePlot draws the runs' time series (MiB/s per 100 ms) to file; the
// extension picks the format (.svg, .png, .pdf).
func SavePlot(file, title string, runs []*Result) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = "MiB/s (100 ms buckets)"
	p.Legend.Top = true
	var lines []any
	for _, res := range runs {
		for _, s := range res.Series {
			pts := make(plotter.XYs, len(s.Bytes))
			for i, b := range s.Bytes {
				pts[i].X = float64(i) * float64(bucket) / 1e9
				pts[i].Y = float64(b) / (float64(bucket) / 1e9) / (1 << 20)
			}
			lines = append(lines, label(res, s), pts)
		}
	}
	if err := plotutil.AddLines(p, lines...); err != nil {
		return fmt.Errorf("plot: %v", err)
	}
	return p.Save(10*vg.Inch, 5*vg.Inch, file)
}
