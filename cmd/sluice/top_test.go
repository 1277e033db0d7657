package main

import (
	"bytes"
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

	"sluice/backing"
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
	lines := topLines("/mnt", prev, cur)
	view := strings.Join(lines, "\n")
	for _, want := range []string{"tenants/a  rbps=4MiB", "read    4.00 MiB/s  of 4.00 MiB [##########]  1.00  queued  0.50  ra hit 75%",
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
