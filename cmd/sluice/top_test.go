package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/gdamore/tcell/v2"

	"sluice/backing"
	"sluice/cluster"
	"sluice/control"
	"sluice/stack"
)

// TestTop runs sluice top under a pseudo-terminal beside a reader through
// a real mount: the view shows the group and a read rate, and q quits.
func TestTop(t *testing.T) {
	needMount(t)
	_, src, mnt := srcMnt(t)
	os.WriteFile(filepath.Join(src, "f"), make([]byte, 8<<20), 0o644)
	startMount(t, mnt, "mount", "--cache-mode", "direct", "--group", "readers uid=4242", "--limit", "readers rbps=1MiB", src, mnt)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // a reader at 1 MiB/s
		reader := exec.Command("dd", "if="+filepath.Join(mnt, "f"), "of=/dev/null", "bs=4k")
		reader.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
		reader.Start()
		<-stop
		reader.Process.Kill()
		reader.Wait()
	}()

	cmd := sluice("top", "--interval", "200ms", mnt)
	cmd.Env = append(cmd.Env, "TERM=xterm")
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var mu sync.Mutex
	var screen bytes.Buffer
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := tty.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	// What the terminal shows: tcell positions the cursor between words,
	// so the output is replayed onto a grid.
	// rowOf returns the line starting with prefix, or with after the
	// first line starting with prefix when after is not "".
	rowOf := func(prefix, after string) string {
		mu.Lock()
		defer mu.Unlock()
		return lineAfter(replay(screen.Bytes(), 24, 80), prefix, after)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		// readers  rbps=1MiB ..., then "  read  RATE/s  of 1.00 MiB [bar] RATIO ..."
		head, read := strings.Fields(rowOf("readers ", "")), strings.Fields(rowOf("readers ", "  read "))
		if slices.Contains(head, "rbps=1MiB") && len(read) >= 6 && read[1] != "0" && slices.Contains(read, "of") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("top never showed the readers group reading, with its limit; its rows: %q, %q", rowOf("readers ", ""), rowOf("readers ", "  read "))
		}
		time.Sleep(50 * time.Millisecond)
	}
	tty.Write([]byte("q"))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("top after q: %v", err)
		}
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		t.Fatal("top did not quit on q")
	}
}

// TestTopOnce: sluice top --once prints one interval's view of a real
// mount without a terminal, in 80 columns: a reader at its 1 MiB/s limit
// shows a ratio near 1.
func TestTopOnce(t *testing.T) {
	needMount(t)
	_, src, mnt := srcMnt(t)
	os.WriteFile(filepath.Join(src, "f"), make([]byte, 16<<20), 0o644)
	startMount(t, mnt, "mount", "--cache-mode", "direct", "--group", "readers uid=4242", "--limit", "readers rbps=1MiB", src, mnt)
	reader := exec.Command("dd", "if="+filepath.Join(mnt, "f"), "of=/dev/null", "bs=4k")
	reader.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242}}
	if err := reader.Start(); err != nil {
		t.Fatal(err)
	}
	defer reader.Wait()
	defer reader.Process.Kill()
	time.Sleep(500 * time.Millisecond) // past its burst
	out, err := sluice("top", "--once", "--interval", "2s", mnt).Output()
	if err != nil {
		t.Fatalf("top --once: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, l := range lines {
		if n := len([]rune(l)); n > topWidth {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}
	read := strings.Fields(lineAfter(lines, "readers ", "  read "))
	// read RATE UNIT/s of LIMIT UNIT [bar] RATIO ...
	i := slices.Index(read, "of")
	if i < 0 || i+4 >= len(read) {
		t.Fatalf("no read line with a limit:\n%s", out)
	}
	var ratio float64
	for _, f := range read[i+3:] {
		if _, err := fmt.Sscanf(f, "%f", &ratio); err == nil && strings.Contains(f, ".") {
			break
		}
	}
	if ratio < 0.8 || ratio > 1.2 {
		t.Errorf("a reader at its 1 MiB/s limit shows a ratio of %.2f, want about 1:\n%s", ratio, out)
	}
	if strings.Contains(string(out), "\x1b") {
		t.Errorf("top --once printed terminal control sequences:\n%q", out)
	}
}

// TestTopLines: a group's rates against its limits (a ratio and a bar),
// I/Os queued on average and readahead hit ratio over the interval between
// two snapshots, in 80 columns; mirrors under their own header.
func TestTopLines(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := func(rb, wb, thr, issued, used int64) stack.GroupMetrics {
		m := stack.GroupMetrics{Group: "tenants/a", Limits: "rbps=4MiB wbps=max riops=max wiops=max"}
		m.AppRBytes, m.AppWBytes, m.ThrottledNs, m.RAIssued, m.RAUsed = rb, wb, thr, issued, used
		return m
	}
	prev := control.Status{Time: t0}
	prev.Groups = []stack.GroupMetrics{g(0, 0, 0, 0, 0)}
	cur := control.Status{Time: t0.Add(2 * time.Second), ReadPolicy: "adaptive",
		Mirrors: []backing.MirrorStats{{Dir: "/m0", State: "healthy", Bytes: 4 << 20, Latency: 250000}}}
	cur.Groups = []stack.GroupMetrics{g(8<<20, 1<<20, 1e9, 4<<20, 3<<20)}
	b := g(2<<20, 0, 0, 0, 0)
	b.Group, b.Limits, b.FloorBytes = "tenants/b", "rbps=max wbps=max riops=max wiops=max rbps.min=1MiB", 2<<20
	cur.Groups = append(cur.Groups, b)
	lines := topLines("/mnt", prev, cur)
	view := strings.Join(lines, "\n")
	if strings.Contains(lineAfter(lines, "tenants/a", ""), "floor") {
		t.Errorf("tenants/a, whose floor released nothing first, says floor:\n%s", view)
	}
	for _, want := range []string{"tenants/a  rbps=4MiB", "tenants/b  floor first 1.00 MiB/s  rbps=max", "read    4.00 MiB/s  of 4.00 MiB [##########]  1.00  queued  0.50  ra hit 75%",
		"write    512 KiB/s  of max      [          ]     -", "/m0", "healthy", "2.00 MiB", "250µs", "read policy adaptive"} {
		if !strings.Contains(view, want) {
			t.Errorf("view lacks %q:\n%s", want, view)
		}
	}
	for _, l := range lines {
		if n := len([]rune(l)); n > topWidth {
			t.Errorf("a line of %d columns: %q", n, l)
		}
	}
	if strings.Contains(view, "device shared") {
		t.Errorf("a device line where the device is not shared:\n%s", view)
	}
	if strings.Contains(view, "cluster") {
		t.Errorf("a cluster section for a mount in no cluster:\n%s", view)
	}
	cur.Device = stack.DeviceMetrics{Shared: true, Saturated: true, Capacity: 0.97}
	if got, want := topLines("/mnt", prev, cur)[2], "device shared by weight: saturated now, given 0.97 s of device time a second"; got != want {
		t.Errorf("the line under the header where the device is shared: %q, want %q", got, want)
	}
}

// TestTopCluster: a mount in a cluster shows, per shared cap, every
// host's use against the cap and its own use against its lease, or its
// fallback while Redis does not answer.
func TestTopCluster(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cs := &cluster.Status{Name: "farm", Host: "h1", Answered: true, Seen: 3, TripsPerSec: 9.8, RTTUs: 420, Caps: []cluster.Cap{
		{Group: "ci", Key: "rbps", Shared: 100 << 20, Rate: 60 << 20, Leased: true, Use: 50 << 20, Total: 95 << 20, Holders: 3},
		{Group: "ci", Key: "riops", Shared: 1000, Rate: 500, Leased: true, Use: 250, Total: 500, Holders: 2},
		{Group: "ci", Key: "dev", Shared: 300, Rate: 200, Leased: true, Use: 190, Total: 290, Holders: 2},
	}}
	cur := control.Status{Time: t0.Add(time.Second), Cluster: cs}
	lines := topLines("/mnt", control.Status{Time: t0}, cur)
	view := strings.Join(lines, "\n")
	for _, want := range []string{
		"cluster farm as h1: 3 hosts, 9.8 round trips/s, the last 420µs",
		"ci rbps  all   95.0 MiB/s  of 100 MiB  [##########]  0.95",
		"  here 50.0 MiB/s of lease 60.0 MiB/s, 3 hosts hold leases",
		"ci riops  all     500 IO/s  of 1000     [#####     ]  0.50",
		"  here 250 IO/s of lease 500 IO/s, 2 hosts hold leases",
		"ci dev  all     290 IO/s  of 300 ",
		"  here 190 IO/s of lease 200 IO/s, 2 hosts hold leases",
	} {
		if !strings.Contains(view, want) {
			t.Errorf("view lacks %q:\n%s", want, view)
		}
	}
	cs.Answered, cs.Caps[0].Leased = false, false
	view = strings.Join(topLines("/mnt", control.Status{Time: t0}, cur), "\n")
	for _, want := range []string{"cluster farm as h1: NO ANSWER, caps at their fallback", "here 50.0 MiB/s of fallback 60.0 MiB/s"} {
		if !strings.Contains(view, want) {
			t.Errorf("without answers, the view lacks %q:\n%s", want, view)
		}
	}
}

// lineAfter returns the first of lines starting with prefix when after is
// "", else the first line after it starting with after ("" when none).
func lineAfter(lines []string, prefix, after string) string {
	for i, l := range lines {
		if !strings.HasPrefix(l, prefix) {
			continue
		}
		if after == "" {
			return l
		}
		for _, m := range lines[i+1:] {
			if strings.HasPrefix(m, after) {
				return m
			}
		}
		return ""
	}
	return ""
}

// replay renders terminal output onto a rows × cols grid: text, cursor
// positioning (CSI row;col H), line breaks; other control sequences are
// skipped. It returns the grid's lines, trailing blanks trimmed.
func replay(out []byte, rows, cols int) []string {
	grid := make([][]rune, rows)
	for i := range grid {
		grid[i] = []rune(strings.Repeat(" ", cols))
	}
	r, c := 0, 0
	text := []rune(string(out))
	for i := 0; i < len(text); i++ {
		ch := text[i]
		switch {
		case ch == 0x1b && i+1 < len(text) && text[i+1] == '[':
			j := i + 2
			for j < len(text) && (text[j] < '@' || text[j] > '~') {
				j++
			}
			if j < len(text) && text[j] == 'H' {
				r, c = 0, 0
				if p := strings.Split(string(text[i+2:j]), ";"); len(p) == 2 {
					fmt.Sscan(p[0], &r)
					fmt.Sscan(p[1], &c)
					r, c = r-1, c-1
				}
			}
			i = j
		case ch == 0x1b && i+1 < len(text) && text[i+1] == ']':
			j := i + 2
			for j < len(text) && text[j] != 0x07 && !(text[j] == 0x1b && j+1 < len(text) && text[j+1] == '\\') {
				j++
			}
			if j < len(text) && text[j] == 0x1b {
				j++
			}
			i = j
		case ch == 0x1b && i+1 < len(text) && (text[i+1] == '(' || text[i+1] == ')'):
			i += 2
		case ch == 0x1b:
			i++
		case ch == '\r':
			c = 0
		case ch == '\n':
			r++
		case ch < ' ':
		default:
			if r >= 0 && r < rows && c >= 0 && c < cols {
				grid[r][c] = ch
			}
			c++
		}
	}
	lines := make([]string, rows)
	for i := range grid {
		lines[i] = strings.TrimRight(string(grid[i]), " ")
	}
	return lines
}

// topViewLines returns what the simulation screen shows, one string a
// row with trailing blanks trimmed, read on the application's loop so
// that no draw runs meanwhile.
func topViewLines(v *topView, scr tcell.SimulationScreen) (lines []string, bold bool) {
	v.app.QueueUpdate(func() {
		cells, w, h := scr.GetContents()
		for y := range h {
			var row []rune
			for _, c := range cells[y*w : (y+1)*w] {
				if len(c.Runes) == 0 {
					row = append(row, ' ')
					continue
				}
				row = append(row, c.Runes[0])
			}
			lines = append(lines, strings.TrimRight(string(row), " "))
		}
		if len(cells) > 0 {
			_, _, attrs := cells[0].Style.Decompose()
			bold = attrs&tcell.AttrBold != 0
		}
	})
	return lines, bold
}

// startTopView runs a view on an 80x24 simulation screen, showing first
// and then, every 100ms, the lines of next. It returns the view, its
// screen and the channel run's result arrives on.
func startTopView(t *testing.T, first []string, next func() ([]string, error)) (*topView, tcell.SimulationScreen, chan error) {
	t.Helper()
	v := newTopView()
	scr := tcell.NewSimulationScreen("")
	v.app.SetScreen(scr)
	scr.SetSize(80, 24)
	done := make(chan error, 1)
	go func() { done <- v.run(first, 100*time.Millisecond, next) }()
	return v, scr, done
}

// waitTopView waits until the screen shows want row by row (rows beyond
// it blank), failing the test after 10 s.
func waitTopView(t *testing.T, v *topView, scr tcell.SimulationScreen, want []string) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, _ := topViewLines(v, scr)
		if len(got) >= len(want) && slices.Equal(got[:len(want)], want) && strings.Join(got[len(want):], "") == "" {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the screen shows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTopView drives the interactive view on a simulation screen of
// 80x24 with canned snapshots: it shows the lines of topLines as they
// are, the header in bold, refreshed every interval; resized to 60
// columns it redraws with each row cut at the edge, not wrapped onto the
// next; q quits.
func TestTopView(t *testing.T) {
	t0 := time.Unix(1000, 0)
	g := func(rb, wb, thr, issued, used int64) stack.GroupMetrics {
		m := stack.GroupMetrics{Group: "tenants/a", Limits: "rbps=4MiB wbps=max riops=max wiops=max"}
		m.AppRBytes, m.AppWBytes, m.ThrottledNs, m.RAIssued, m.RAUsed = rb, wb, thr, issued, used
		return m
	}
	prev := control.Status{Time: t0, ReadPolicy: "adaptive",
		Mirrors: []backing.MirrorStats{{Dir: "/m0", State: "healthy", Latency: 250000}}}
	prev.Groups = []stack.GroupMetrics{g(0, 0, 0, 0, 0)}
	cur := prev
	cur.Time = t0.Add(2 * time.Second)
	cur.Mirrors = []backing.MirrorStats{{Dir: "/m0", State: "healthy", Bytes: 4 << 20, Latency: 250000}}
	cur.Groups = []stack.GroupMetrics{g(8<<20, 1<<20, 1e9, 4<<20, 3<<20)}
	want := topLines("/mnt", prev, cur)

	v, scr, done := startTopView(t, topLines("/mnt", prev, prev), func() ([]string, error) { return want, nil })
	got := waitTopView(t, v, scr, want)
	if len(got) != 24 {
		t.Errorf("the screen has %d rows, want 24", len(got))
	}
	if !strings.HasPrefix(got[0], "sluice top /mnt  ") || !strings.HasSuffix(got[0], "(q quits)") {
		t.Errorf("header %q", got[0])
	}
	if _, bold := topViewLines(v, scr); !bold {
		t.Error("the header is not bold")
	}
	if read := lineAfter(got, "tenants/a ", "  read "); !strings.Contains(read, "4.00 MiB/s  of 4.00 MiB [##########]  1.00") {
		t.Errorf("read row %q", read)
	}
	for _, l := range got {
		if n := len([]rune(l)); n > topWidth {
			t.Errorf("a row of %d columns: %q", n, l)
		}
	}

	// A terminal narrowed to 60 columns, its contents lost: the rows
	// come back cut at column 60, each on its own line.
	v.app.QueueUpdate(func() {
		scr.SetSize(60, 24)
		scr.Clear()
		scr.Show()
	})
	if err := scr.PostEvent(tcell.NewEventResize(60, 24)); err != nil {
		t.Fatal(err)
	}
	var cut []string
	long := false
	for _, l := range want {
		if r := []rune(l); len(r) > 60 {
			l, long = string(r[:60]), true
		}
		cut = append(cut, strings.TrimRight(l, " "))
	}
	if !long {
		t.Fatalf("no row wider than 60 columns to cut:\n%s", strings.Join(want, "\n"))
	}
	waitTopView(t, v, scr, cut)

	scr.InjectKey(tcell.KeyRune, 'q', tcell.ModNone)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after q: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the view did not quit on q")
	}
}

// TestTopViewKeys: q, Esc and Ctrl-C each quit the view with no error;
// other keys do not; a snapshot that fails ends it with that error.
func TestTopViewKeys(t *testing.T) {
	first := []string{"sluice top /mnt  00:00:00  (q quits)", "", "g  rbps=max"}
	next := func() ([]string, error) { return first, nil }
	for _, key := range []*tcell.EventKey{
		tcell.NewEventKey(tcell.KeyRune, 'q', tcell.ModNone),
		tcell.NewEventKey(tcell.KeyEscape, 0, tcell.ModNone),
		tcell.NewEventKey(tcell.KeyCtrlC, 0, tcell.ModCtrl),
	} {
		v, scr, done := startTopView(t, first, next)
		waitTopView(t, v, scr, first)
		scr.InjectKey(tcell.KeyRune, 'x', tcell.ModNone)
		scr.InjectKey(tcell.KeyDown, 0, tcell.ModNone)
		select {
		case err := <-done:
			t.Fatalf("x and Down ended the view: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		scr.InjectKey(key.Key(), key.Rune(), key.Modifiers())
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run after %s: %v", key.Name(), err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the view did not quit on %s", key.Name())
		}
	}

	failed := errors.New("stat /mnt: no such file or directory")
	_, _, done := startTopView(t, first, func() ([]string, error) { return nil, failed })
	select {
	case err := <-done:
		if err != failed {
			t.Errorf("run after a failed snapshot: %v, want %v", err, failed)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the view did not end on a failed snapshot")
	}
}

// TestTopViewScroll: rows below the screen's bottom come into view with
// the Down key, under a header that stays, and stay in view through the
// refreshes.
func TestTopViewScroll(t *testing.T) {
	lines := []string{"sluice top /mnt  00:00:00  (q quits)"}
	for i := range 30 {
		lines = append(lines, fmt.Sprintf("row %d", i))
	}
	next := func() ([]string, error) { return lines, nil }
	v, scr, done := startTopView(t, lines, next)
	waitTopView(t, v, scr, lines[:24])
	scr.InjectKey(tcell.KeyDown, 0, tcell.ModNone)
	scrolled := append([]string{lines[0]}, lines[2:25]...)
	waitTopView(t, v, scr, scrolled)
	time.Sleep(300 * time.Millisecond) // refreshed meanwhile
	if got, _ := topViewLines(v, scr); !slices.Equal(got, scrolled) {
		t.Errorf("after a refresh the screen shows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(scrolled, "\n"))
	}
	scr.InjectKey(tcell.KeyEscape, 0, tcell.ModNone)
	if err := <-done; err != nil {
		t.Errorf("run after Esc: %v", err)
	}
}
