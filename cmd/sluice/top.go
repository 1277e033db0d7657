package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gdamore/tcell/v2"
	"github.com/rivo/tview"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"sluice/cluster"
	"sluice/control"
	"sluice/group"
	"sluice/stack"
)

const topHelp = `Usage: sluice top [--interval 1s] [--once] MOUNTPOINT

A live view of a running mount in 80 columns, refreshed every second: per
group its limits, its read and write rates each against its byte limit as a
ratio and a bar, the I/Os queued in its throttle on average (time waited over
the interval), the readahead hit ratio (bytes read ahead that were then read)
and its dirty bytes; per mirror of a mirror set its state, read rate, reads
in flight, latency and errors; for a mount in a cluster, per shared cap the
use of every host against the cap, and this host's use and lease. Works over ssh; q, Esc or Ctrl-C quits, the
arrow keys and PgUp/PgDn scroll rows that do not fit. --once prints one
interval's view and exits.
  sluice top /mnt/data
  sluice top --once --interval 5s /mnt/data
`

// topFlags returns top's flags: --interval and --once.
func topFlags() (*pflag.FlagSet, *time.Duration, *bool) {
	fs := newFlagSet("top")
	every := fs.Duration("interval", time.Second, "how often the view refreshes")
	once := fs.Bool("once", false, "print the view of one interval and exit, without a terminal (for scripts)")
	return fs, every, once
}

// topCommand is sluice top.
func topCommand(stdout io.Writer) *cobra.Command {
	fs, every, once := topFlags()
	c := command("top [--interval 1s] [--once] MOUNTPOINT", "a live view of rates against limits", topHelp, fs, func(pos []string) error {
		return cmdTop(pos, *every, *once, stdout)
	})
	c.ValidArgsFunction = completeMount
	return c
}

// cmdTop shows the view of the mount pos names every interval, or with
// once prints one interval's.
func cmdTop(pos []string, every time.Duration, once bool, stdout io.Writer) error {
	if len(pos) != 1 {
		return usagef("want one MOUNTPOINT, got %d argument(s)", len(pos))
	}
	if every < 100*time.Millisecond {
		return usagef("--interval %v: want at least 100ms", every)
	}
	prev, err := control.Stat(pos[0])
	if err != nil {
		return err
	}
	if once {
		time.Sleep(every)
		cur, err := control.Stat(pos[0])
		if err != nil {
			return err
		}
		lines := topLines(pos[0], prev, cur)
		lines[0] = strings.TrimSuffix(lines[0], "  (q quits)")
		_, err = fmt.Fprintln(stdout, strings.Join(lines, "\n"))
		return err
	}
	return newTopView().run(topLines(pos[0], prev, prev), every, func() ([]string, error) {
		cur, err := control.Stat(pos[0])
		if err != nil {
			return nil, err
		}
		lines := topLines(pos[0], prev, cur)
		prev = cur
		return lines, nil
	})
}

// topView is the interactive screen of sluice top, on tview: the first
// line of the view in bold, the others below it, each cut at the
// screen's right edge (never wrapped). The arrow keys, PgUp and PgDn
// scroll the rows that do not fit; q, Esc or Ctrl-C quits.
type topView struct {
	app  *tview.Application
	head *tview.TextView
	rows *tview.TextView
	// quit receives one value when a quitting key is pressed; run
	// stops the application, so that no update is queued after it.
	quit chan struct{}
}

// newTopView returns a view with nothing shown. Its application has no
// screen: run opens the terminal unless app.SetScreen gave it one.
func newTopView() *topView {
	v := &topView{app: tview.NewApplication(), quit: make(chan struct{}, 1)}
	text := func() *tview.TextView {
		t := tview.NewTextView().SetWrap(false).SetTextColor(tcell.ColorDefault)
		t.SetBackgroundColor(tcell.ColorDefault)
		return t
	}
	v.head = text().SetTextStyle(tcell.StyleDefault.Bold(true))
	v.rows = text()
	v.app.SetRoot(tview.NewFlex().SetDirection(tview.FlexRow).
		AddItem(v.head, 1, 0, false).
		AddItem(v.rows, 0, 1, true), true)
	v.app.SetInputCapture(func(ev *tcell.EventKey) *tcell.EventKey {
		if ev.Key() == tcell.KeyCtrlC || ev.Key() == tcell.KeyEscape || (ev.Key() == tcell.KeyRune && ev.Rune() == 'q') {
			select {
			case v.quit <- struct{}{}:
			default: // already quitting
			}
			return nil
		}
		return ev
	})
	return v
}

// show replaces what the view shows with lines, the first of them the
// header. It must run before run or on the application's goroutine.
func (v *topView) show(lines []string) {
	if len(lines) == 0 {
		lines = []string{""}
	}
	v.head.SetText(lines[0])
	v.rows.SetText(strings.Join(lines[1:], "\n"))
}

// run shows first, then every interval the lines next returns, until q,
// Esc or Ctrl-C quits (run returns nil) or next fails (run returns its
// error). The application's screen is closed when run returns; an error
// of the screen is returned as "top needs a terminal".
func (v *topView) run(first []string, every time.Duration, next func() ([]string, error)) error {
	v.show(first)
	ran := make(chan error, 1)
	go func() { ran <- v.app.Run() }()
	screenErr := func(err error) error {
		if err != nil {
			return fmt.Errorf("top needs a terminal: %v", err)
		}
		return nil
	}
	// queue runs f on the application's loop, then draws, and reports
	// whether it ran: the loop ends early only when the screen fails.
	queue := func(f func()) (bool, error) {
		done := make(chan struct{})
		go func() {
			v.app.QueueUpdateDraw(f)
			close(done)
		}()
		select {
		case <-done:
			return true, nil
		case err := <-ran:
			return false, screenErr(err)
		}
	}
	// Wait for the loop: before it starts, Stop finds no screen to stop.
	if ok, err := queue(func() {}); !ok {
		return err
	}
	stop := func() error {
		v.app.Stop()
		return screenErr(<-ran)
	}
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case err := <-ran:
			return screenErr(err)
		case <-v.quit:
			return stop()
		case <-tick.C:
			lines, err := next()
			if err != nil {
				stop()
				return err
			}
			if ok, err := queue(func() { v.show(lines) }); !ok {
				return err
			}
		}
	}
}

// topWidth is the width the view fits.
const topWidth = 80

// topLines renders the view of cur against the snapshot before it, in
// topWidth columns: per group its limits (and the rate its floor had
// released ahead of its siblings, where it did), then its read and write rates
// each against its byte limit as a ratio and a bar, the I/Os queued in
// the throttle on average over the interval (time waited over the
// interval's length), the readahead hit ratio and its dirty bytes;
// per mirror its state, read rate, reads in flight, latency and errors.
// Where the groups share the device, a line says what it is given.
func topLines(mnt string, prev, cur control.Status) []string {
	dt := cur.Time.Sub(prev.Time).Seconds()
	if dt <= 0 {
		dt = 1
	}
	before := map[string]stack.GroupMetrics{}
	for _, g := range prev.Groups {
		before[g.Group] = g
	}
	perSec := func(now, then int64) float64 { return float64(now-then) / dt }
	lines := []string{fit(fmt.Sprintf("sluice top %s  %s  (q quits)", mnt, cur.Time.Format("15:04:05"))), ""}
	if d := cur.Device; d.Shared {
		lines = append(lines, fit("device shared by weight: "+d.State()), "")
	}
	for _, g := range cur.Groups {
		p := before[g.Group]
		var rl, wl int64
		if l, err := group.ParseLimit("g " + g.Limits); err == nil {
			rl, wl = l.To.RBPS, l.To.WBPS
		}
		hit := "-"
		if issued := g.RAIssued - p.RAIssued; issued > 0 {
			// Pages read ahead before the interval may be used in it.
			hit = fmt.Sprintf("%.0f%%", min(100, 100*float64(g.RAUsed-p.RAUsed)/float64(issued)))
		}
		head := g.Group + "  " + g.Limits
		if fl := perSec(g.FloorBytes, p.FloorBytes); fl > 0 {
			// Its floor is holding its siblings back for it.
			head = g.Group + fmt.Sprintf("  floor first %s/s", stack.HumanBytes(int64(fl))) + "  " + g.Limits
		}
		lines = append(lines,
			fit(head),
			fit("  read  "+rateLine(perSec(g.AppRBytes, p.AppRBytes), rl)+fmt.Sprintf("  queued %5.2f  ra hit %s",
				perSec(g.ThrottledNs, p.ThrottledNs)/1e9, hit)),
			fit("  write "+rateLine(perSec(g.AppWBytes, p.AppWBytes), wl)+fmt.Sprintf("  queued %5.2f  dirty %s",
				perSec(g.WThrottledNs, p.WThrottledNs)/1e9, stack.HumanBytes(g.Dirty))))
	}
	if c := cur.Cluster; c != nil {
		lines = append(lines, "", fit(clusterHead(c)))
		for _, x := range c.Caps {
			lines = append(lines, fit(fmt.Sprintf("%s %s  all %s", x.Group, x.Key, capLine(x.Key, float64(x.Total), x.Shared))))
			here := "lease"
			if !x.Leased {
				here = "fallback"
			}
			lines = append(lines, fit(fmt.Sprintf("  here %s of %s %s, %d hosts hold leases", capRate(x.Key, x.Use), here, capRate(x.Key, x.Rate), x.Holders)))
		}
	}
	if len(cur.Mirrors) > 0 {
		lines = append(lines, "", "mirrors, read policy "+cur.ReadPolicy,
			fit(fmt.Sprintf("%-28s %-9s %11s %9s %9s %6s", "mirror", "state", "read/s", "in flight", "latency", "errors")))
		was := map[string]int64{}
		for _, m := range prev.Mirrors {
			was[m.Dir] = m.Bytes
		}
		for _, m := range cur.Mirrors {
			dir := m.Dir
			if len(dir) > 28 {
				dir = "…" + dir[len(dir)-27:]
			}
			lines = append(lines, fit(fmt.Sprintf("%-28s %-9s %11s %9d %9s %6d", dir, m.State, stack.HumanBytes(int64(perSec(m.Bytes, was[m.Dir]))),
				m.Inflight, time.Duration(m.Latency).Round(time.Microsecond), m.Errors)))
		}
	}
	return lines
}

// clusterHead is the cluster's line in top: its name, whether its Redis
// server answers, the hosts it saw and this host's round trips.
func clusterHead(c *cluster.Status) string {
	state := fmt.Sprintf("%d hosts, %.1f round trips/s, the last %v", c.Seen, c.TripsPerSec, time.Duration(c.RTTUs)*time.Microsecond)
	if !c.Answered {
		state = "NO ANSWER, caps at their fallback"
	}
	return fmt.Sprintf("cluster %s as %s: %s", c.Name, c.Host, state)
}

// capLine renders a shared cap's use against it, as rateLine does, in
// bytes for rbps and wbps and I/Os for riops and wiops.
func capLine(key string, rate float64, limit int64) string {
	if strings.HasSuffix(key, "bps") {
		return rateLine(rate, limit)
	}
	return meter(fmt.Sprintf("%7.0f IO/s", rate), fmt.Sprint(limit), rate, limit)
}

// capRate renders a rate of a shared cap.
func capRate(key string, v int64) string {
	if strings.HasSuffix(key, "bps") {
		return stack.HumanBytes(v) + "/s"
	}
	return fmt.Sprintf("%d IO/s", v)
}

// rateLine renders a rate in bytes a second against limit (0: none): the
// rate, the limit, and their ratio with a bar of ten cells.
func rateLine(rate float64, limit int64) string {
	return meter(fmt.Sprintf("%10s/s", stack.HumanBytes(int64(rate))), stack.HumanBytes(limit), rate, limit)
}

// meter renders a rate (r, as shown) against a limit (lim, as shown; 0
// for none) with their ratio and a bar of ten cells.
func meter(r, lim string, rate float64, limit int64) string {
	if limit <= 0 {
		return r + "  of max      [          ]     -"
	}
	ratio := rate / float64(limit)
	cells := min(int(ratio*10+0.5), 10)
	return fmt.Sprintf("%s  of %-8s [%s%s] %5.2f", r, lim, strings.Repeat("#", cells), strings.Repeat(" ", 10-cells), ratio)
}

// fit cuts a line to topWidth columns, ending it with … where it was cut.
func fit(l string) string {
	if r := []rune(l); len(r) > topWidth {
		return string(r[:topWidth-1]) + "…"
	}
	return l
}
