package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
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
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 120})
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
	seen := func() string {
		mu.Lock()
		defer mu.Unlock()
		return screen.String()
	}
	deadline := time.Now().Add(15 * time.Second)
	for !(strings.Contains(seen(), "readers") && strings.Contains(seen(), "read MiB/s") && strings.Contains(seen(), "rbps=1MiB")) {
		if time.Now().After(deadline) {
			t.Fatalf("top never showed the group, its rate column and its limit:\n%q", seen())
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

// TestTopLines: a group's rates, wait share and readahead hit ratio over
// the interval between two snapshots; mirrors under their own header.
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
	view := strings.Join(topLines("/mnt", prev, cur), "\n")
	for _, want := range []string{"tenants/a", "4.00", "0.50", "50%", "75%", "rbps=4MiB", "/m0", "healthy", "2.00", "250µs", "read policy adaptive"} {
		if !strings.Contains(view, want) {
			t.Errorf("view lacks %q:\n%s", want, view)
		}
	}
}
