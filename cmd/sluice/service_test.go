package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/control"
)

// unitCommands reads the ExecStartPre and ExecStart lines of
// dist/sluice@.service for instance inst, as systemd would run them: %i
// replaced, the prefixes that change how systemd runs a line (-, @, +, !)
// dropped. The installed paths are replaced as given (old, new pairs),
// so that a test runs its own binary and config file.
func unitCommands(t *testing.T, inst string, replace ...string) (pre, start [][]string) {
	t.Helper()
	b, err := os.ReadFile("../../dist/sluice@.service")
	if err != nil {
		t.Fatal(err)
	}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") {
			section = line
			continue
		}
		key, value, ok := strings.Cut(line, "=")
		if section != "[Service]" || !ok || (key != "ExecStartPre" && key != "ExecStart") {
			continue
		}
		value = strings.TrimLeft(value, "-@+!")
		value = strings.ReplaceAll(value, "%i", inst)
		value = strings.NewReplacer(replace...).Replace(value)
		if strings.ContainsAny(value, "\"'\\$%") {
			t.Fatalf("%s=%s: quoting, variables and specifiers other than %%i are not handled here", key, value)
		}
		if key == "ExecStartPre" {
			pre = append(pre, strings.Fields(value))
		} else {
			start = append(start, strings.Fields(value))
		}
	}
	if len(start) != 1 {
		t.Fatalf("want one ExecStart in [Service], got %d", len(start))
	}
	return pre, start
}

// notifyListener is the service manager's end of $NOTIFY_SOCKET: each
// datagram is sent on the channel.
func notifyListener(t *testing.T, name string) <-chan string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(ch)
				return
			}
			ch <- string(buf[:n])
		}
	}()
	return ch
}

// TestServiceNotifyRestart runs the unit's command lines as systemd runs
// a Type=notify service: READY=1 arrives over $NOTIFY_SOCKET only once
// the mount point serves (a file reads through it, the control socket
// answers); after the daemon is killed with SIGKILL, leaving a dead
// mount, ExecStart alone fails but ExecStartPre then ExecStart serve
// again (with an abstract socket name this time): TestUnmountDead
// clears one at once, with the attributes the kernel holds of the mount
// point still valid; SIGTERM sends
// STOPPING=1 and unmounts.
func TestServiceNotifyRestart(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	os.WriteFile(filepath.Join(src, "hello"), []byte("hello"), 0o644)
	inst := "svc"
	os.WriteFile(filepath.Join(dir, inst+".toml"), []byte(fmt.Sprintf("source = %q\nmountpoint = %q\n[[group]]\nname = \"t\"\nmatch = [\"uid=4242\"]\nlimits = \"rbps=2MiB\"\n", src, mnt)), 0o644)
	pre, start := unitCommands(t, inst, "/usr/local/bin/sluice", os.Args[0], "/etc/sluice/", dir+"/")
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })

	command := func(argv []string, notifySocket string) *exec.Cmd {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), "SLUICE_AS_MAIN=1", "NOTIFY_SOCKET="+notifySocket)
		return cmd
	}
	runPre := func(sock string) {
		t.Helper()
		for _, argv := range pre {
			if out, err := command(argv, sock).CombinedOutput(); err != nil {
				t.Fatalf("ExecStartPre %s: %v\n%s", strings.Join(argv, " "), err, out)
			}
		}
	}
	// serve runs ExecStart and returns once READY=1 arrives, having
	// checked that the mount served at that moment.
	serve := func(sock string) (*exec.Cmd, <-chan string, chan struct{}) {
		t.Helper()
		msgs := notifyListener(t, sock)
		cmd := command(start[0], sock)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-exited })
		timeout := time.After(10 * time.Second)
		for {
			select {
			case m := <-msgs:
				if !strings.Contains("\n"+m+"\n", "\nREADY=1\n") {
					continue
				}
				if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "hello" {
					t.Fatalf("READY=1 (%q) came before the mount served: read %q, %v", m, b, err)
				}
				if _, err := control.Stat(mnt); err != nil {
					t.Fatalf("READY=1 came before the control socket answered: %v", err)
				}
				return cmd, msgs, exited
			case <-exited:
				t.Fatalf("ExecStart exited before READY=1: %v\n%s", cmd.ProcessState, stderr.String())
			case <-timeout:
				mounted := isMounted(mnt)
				cmd.Process.Kill()
				<-exited
				t.Fatalf("no READY=1 within 10 s of ExecStart (mounted: %v)\n%s", mounted, stderr.String())
			}
		}
	}

	sock := filepath.Join(dir, "notify")
	runPre(sock) // nothing mounted: nothing to do
	cmd, _, exited := serve(sock)
	runPre(sock + "-pre") // a live mount is left alone
	if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "hello" {
		t.Fatalf("ExecStartPre on a live mount: read %q, %v", b, err)
	}

	cmd.Process.Kill()
	<-exited
	var st syscall.Statfs_t
	if err := syscall.Statfs(mnt, &st); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("after SIGKILL, statfs of the mount point: %v, want ENOTCONN (a dead mount)", err)
	}
	// systemd restarts after RestartSec=2, when the attributes the kernel
	// held of the mount point have expired (1 s).
	time.Sleep(2 * time.Second)
	if out, err := command(start[0], sock).CombinedOutput(); err == nil {
		t.Fatalf("ExecStart over the dead mount succeeded\n%s", out)
	}

	abstract := fmt.Sprintf("@sluice-test-%d", os.Getpid())
	runPre(abstract)
	if isMounted(mnt) {
		t.Fatal("ExecStartPre left the dead mount in place")
	}
	cmd, msgs, exited := serve(abstract)
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("no exit within 10 s of SIGTERM")
	}
	stopping := false
	for wait := time.After(2 * time.Second); !stopping; {
		select {
		case m := <-msgs:
			stopping = strings.Contains("\n"+m+"\n", "\nSTOPPING=1\n")
			continue
		case <-wait:
		}
		t.Error("no STOPPING=1 on SIGTERM")
		break
	}
	if isMounted(mnt) {
		t.Error("still mounted after SIGTERM")
	}
}
