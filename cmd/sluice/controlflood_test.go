package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sluice/control"
)

// TestControlFlood: 300 connections to the control socket held open at
// once, a third sending garbage, a third a truncated request and a third
// nothing, cost the daemon at most control.MaxConns descriptors: with
// its descriptor limit at 128, a tenant's open and ls through the mount
// work meanwhile, sluice stat is told the mount is busy rather than left
// hanging, and once the connections close, stat answers in full; 300
// more, each sending garbage or half a request and closing at once,
// change nothing.
func TestControlFlood(t *testing.T) {
	prlimit, src, mnt := tenantTree(t)
	const limit, conns = 128, 300
	cmd := sluice("mount", "--allow-other", "--group", "a uid=4101", "--limit", "a rbps=8MiB", src, mnt)
	cmd.Path, cmd.Args = prlimit, append([]string{"prlimit", fmt.Sprintf("--nofile=%d:%d", limit, limit), "--"}, cmd.Args...)
	daemon, stderr, exited, _ := startCmd(t, mnt, cmd)
	sock, err := control.SocketPath(mnt)
	if err != nil {
		t.Fatal(err)
	}
	sends := [][]byte{[]byte("\x00\xff garbage \x7f{{{"), []byte(`{"op":"st`), nil}

	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range conns {
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			t.Fatalf("control connection %d: %v", i, err)
		}
		held = append(held, c)
		c.Write(sends[i%len(sends)])
	}
	time.Sleep(100 * time.Millisecond) // the daemon accepts what it will
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(daemon.Process.Pid) + "/fd")
	t.Logf("%d control connections held open; the daemon has %d descriptors of %d", conns, len(fds), limit)

	tenant := func(name string, args ...string) {
		t.Helper()
		c := exec.Command(name, args...)
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4101, Gid: 4101}}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Errorf("uid 4101: %s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	tenant("cat", filepath.Join(mnt, "f"))
	tenant("ls", filepath.Join(mnt, "d"))
	out, err := sluice("stat", mnt).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "busy") {
		t.Errorf("sluice stat with %d control connections held: %v, %q; want it told the mount is busy", conns, err, out)
	}

	for _, c := range held {
		c.Close()
	}
	held = nil
	for i := range conns {
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err != nil {
			t.Fatalf("control connection %d of the second flood: %v", i, err)
		}
		c.Write(sends[i%2])
		c.Close()
	}
	tenant("cat", filepath.Join(mnt, "f"))
	var st control.Status
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err = sluice("stat", "--json", mnt).CombinedOutput()
		if err == nil {
			if err = json.Unmarshal(out, &st); err == nil {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sluice stat --json once the connections closed: %v, %q", err, out)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var a int64 = -1
	for _, g := range st.Groups {
		if g.Group == "a" {
			a = g.AppRBytes
		}
	}
	if st.Schema != control.StatSchema || a <= 0 {
		t.Errorf("stat once the connections closed: schema %d, group a read %d bytes; want schema %d and a's reads", st.Schema, a, control.StatSchema)
	}
	select {
	case <-exited:
		t.Errorf("the daemon exited during the flood\nstderr:\n%s", stderr)
	default:
	}
}
