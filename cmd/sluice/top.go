package main

import (
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/gdamore/tcell/v2"

	"sluice/control"
	"sluice/stack"
)

func topFlags() (*flag.FlagSet, *time.Duration) {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	every := fs.Duration("interval", time.Second, "how often the view refreshes")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: sluice top [--interval 1s] MOUNTPOINT

A live view of a running mount, refreshed every second: per group its read
and write rates against its limits, the share of the interval its I/Os spent
waiting for the throttle, the readahead hit ratio (bytes read ahead that were
then read) and its dirty bytes; per mirror of a mirror set its state, read
rate, reads in flight, latency and errors. Works over ssh; q or Ctrl-C quits.
  sluice top /mnt/data

Flags:
`)
		fs.PrintDefaults()
	}
	return fs, every
}

func cmdTop(args []string, stdout, stderr io.Writer) error {
	fs, every := topFlags()
	pos, err := parse(fs, args)
	if err != nil {
		return helpFor(fs, stdout, err)
	}
	if len(pos) != 1 {
		return usagef("want one MOUNTPOINT, got %d argument(s)", len(pos))
	}
	if *every < 100*time.Millisecond {
		return usagef("--interval %v: want at least 100ms", *every)
	}
	prev, err := control.Stat(pos[0])
	if err != nil {
		return err
	}
	scr, err := tcell.NewScreen()
	if err != nil {
		return fmt.Errorf("top needs a terminal: %v", err)
	}
	if err := scr.Init(); err != nil {
		return fmt.Errorf("top needs a terminal: %v", err)
	}
	defer scr.Fini()
	quit := make(chan struct{})
	go func() {
		for {
			switch ev := scr.PollEvent().(type) {
			case nil:
				return
			case *tcell.EventKey:
				if ev.Key() == tcell.KeyCtrlC || ev.Key() == tcell.KeyEscape || ev.Rune() == 'q' {
					close(quit)
					return
				}
			case *tcell.EventResize:
				scr.Sync()
			}
		}
	}()
	draw := func(lines []string) {
		scr.Clear()
		for y, l := range lines {
			style := tcell.StyleDefault
			if y == 0 {
				style = style.Bold(true)
			}
			for x, r := range []rune(l) {
				scr.SetContent(x, y, r, nil, style)
			}
		}
		scr.Show()
	}
	draw(topLines(pos[0], prev, prev))
	tick := time.NewTicker(*every)
	defer tick.Stop()
	for {
		select {
		case <-quit:
			return nil
		case <-tick.C:
			cur, err := control.Stat(pos[0])
			if err != nil {
				scr.Fini()
				return err
			}
			draw(topLines(pos[0], prev, cur))
			prev = cur
		}
	}
}

// topLines renders the view of cur against the snapshot before it.
func topLines(mnt string, prev, cur control.Status) []string {
	dt := cur.Time.Sub(prev.Time).Seconds()
	if dt <= 0 {
		dt = 1
	}
	before := map[string]stack.GroupMetrics{}
	for _, g := range prev.Groups {
		before[g.Group] = g
	}
	rate := func(now, then int64) string { return fmt.Sprintf("%.2f", float64(now-then)/dt/(1<<20)) }
	lines := []string{
		fmt.Sprintf("sluice top %s  %s  (q quits)", mnt, cur.Time.Format("15:04:05")),
		"",
		fmt.Sprintf("%-20s %10s %10s %8s %8s %10s  %s", "group", "read MiB/s", "write MiB/s", "waiting", "ra hit", "dirty MiB", "limits"),
	}
	for _, g := range cur.Groups {
		p := before[g.Group]
		wait := float64(g.ThrottledNs-p.ThrottledNs) / 1e9 / dt
		hit := "-"
		if issued := g.RAIssued - p.RAIssued; issued > 0 {
			hit = fmt.Sprintf("%.0f%%", 100*float64(g.RAUsed-p.RAUsed)/float64(issued))
		}
		lines = append(lines, fmt.Sprintf("%-20s %10s %10s %7.0f%% %8s %10.1f  %s", g.Group,
			rate(g.AppRBytes, p.AppRBytes), rate(g.AppWBytes, p.AppWBytes), 100*wait, hit,
			float64(g.Dirty)/(1<<20), g.Limits))
	}
	if len(cur.Mirrors) > 0 {
		lines = append(lines, "", fmt.Sprintf("%-32s %-10s %10s %9s %10s %8s   read policy %s", "mirror", "state", "MiB/s", "in flight", "latency", "errors", cur.ReadPolicy))
		was := map[string]int64{}
		for _, m := range prev.Mirrors {
			was[m.Dir] = m.Bytes
		}
		for _, m := range cur.Mirrors {
			lines = append(lines, fmt.Sprintf("%-32s %-10s %10s %9d %10s %8d", m.Dir, m.State, rate(m.Bytes, was[m.Dir]),
				m.Inflight, time.Duration(m.Latency).Round(time.Microsecond), m.Errors))
		}
	}
	return lines
}
