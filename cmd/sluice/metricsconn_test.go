package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestMetricsHalfSent: connections to --metrics-listen that send half a
// request and wait cost the daemon at most --metrics-max-conns
// descriptors, for at most --metrics-timeout: with its descriptor limit
// at 128, 300 of them leave a tenant's open and ls through the mount
// working, and /metrics answers again once the held ones time out.
func TestMetricsHalfSent(t *testing.T) {
	prlimit, src, mnt := tenantTree(t)
	addr := freeAddr(t)
	const limit, conns = 128, 300
	const timeout = 500 * time.Millisecond
	cmd := sluice("mount", "--metrics-listen", addr, "--metrics-timeout", timeout.String(), "--metrics-max-conns", "4", "--allow-other", src, mnt)
	cmd.Path, cmd.Args = prlimit, append([]string{"prlimit", fmt.Sprintf("--nofile=%d:%d", limit, limit), "--"}, cmd.Args...)
	daemon, stderr, _, _ := startCmd(t, mnt, cmd)

	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range conns {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", len(held), err)
		}
		held = append(held, c)
		c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: sluice\r\n")) // and no end
	}
	time.Sleep(100 * time.Millisecond) // the daemon accepts what it will
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(daemon.Process.Pid) + "/fd")
	t.Logf("%d connections held open; the daemon has %d descriptors of %d", conns, len(fds), limit)

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

	// The held connections time out; a scrape then answers.
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout + 3*time.Second)
	for {
		resp, err := client.Get("http://" + addr + "/metrics")
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(b), "sluice_cache_limit_bytes") {
				break
			}
			err = fmt.Errorf("%s: %.200s", resp.Status, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("/metrics with %d half-sent connections held: %v\nstderr:\n%s", conns, err, stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if t.Failed() {
		t.Logf("stderr:\n%s", stderr)
	}
}
