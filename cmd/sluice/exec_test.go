package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/control"
	"sluice/group"
)

// TestExecDaemonized: a process that the command of sluice exec starts and
// that leaves its process tree, by a new session (setsid -f) or a double
// fork that re-parents it to init, stays in the group: its reads are
// counted to the group and paced at the group's limit.
func TestExecDaemonized(t *testing.T) {
	needMount(t)
	const size, rate = 1 << 20, 512 << 10
	for _, tc := range []struct {
		name   string
		detach func(job string) string // a shell script running job detached
	}{
		{"setsid", func(job string) string { return "setsid -f sh -c '" + job + "'" }},
		{"double fork", func(job string) string { return "(sh -c '" + job + "' &)" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, src, mnt := srcMnt(t)
			os.WriteFile(filepath.Join(src, "f"), make([]byte, size), 0o644)
			startMount(t, mnt, "mount", "--limit", "batch rbps=512KiB", src, mnt)
			done, cg := filepath.Join(dir, "done"), filepath.Join(dir, "cgroup")
			// The detached shell reads the file, notes its cgroups and
			// then leaves a mark; the command itself returns at once.
			job := "dd if=" + filepath.Join(mnt, "f") + " of=/dev/null bs=64k iflag=direct 2>/dev/null; cat /proc/self/cgroup >" + cg + "; touch " + done
			script := tc.detach(job)
			start := time.Now()
			out, err := sluice("exec", "--mount", mnt, "--group", "batch", "--", "sh", "-c", script).CombinedOutput()
			if err == nil && strings.Contains(string(out), "gets no cgroup of its own") {
				t.Skipf("skipping: %s", out)
			}
			if err != nil || len(out) != 0 {
				t.Fatalf("sluice exec: %v\n%s", err, out)
			}
			for {
				if _, err := os.Stat(done); err == nil {
					break
				}
				if time.Since(start) > 30*time.Second {
					t.Fatal("the detached reader has not finished after 30 s")
				}
				time.Sleep(20 * time.Millisecond)
			}
			elapsed := time.Since(start)
			out, err = sluice("stat", "--json", mnt).Output()
			var st control.Status
			if err != nil || json.Unmarshal(out, &st) != nil {
				t.Fatalf("stat: %v\n%s", err, out)
			}
			if g := find(st, "batch"); g == nil || g.AppRBytes != size {
				t.Errorf("group batch after its detached process read %d bytes: %+v", size, g)
			}
			if g := find(st, "default"); g != nil && g.AppRBytes != 0 {
				t.Errorf("default group read %d bytes; want none", g.AppRBytes)
			}
			// Paced at the group's limit: at most 10 % above it over the run.
			if got := float64(size) / elapsed.Seconds(); got > 1.1*rate {
				t.Errorf("detached reader read %d bytes in %v: %.0f B/s, limit %d", size, elapsed.Round(time.Millisecond), got, rate)
			}

			// The detached process was in the command's cgroup; once it
			// has exited, a later sluice exec removes that cgroup.
			b, _ := os.ReadFile(cg)
			var path string
			for line := range strings.Lines(string(b)) {
				if f := strings.SplitN(strings.TrimSpace(line), ":", 3); len(f) == 3 && f[1] == "name="+group.CgroupHierarchy {
					path = f[2]
				}
			}
			if !strings.HasPrefix(filepath.Base(path), "exec-") {
				t.Fatalf("the detached process's cgroups:\n%s", b)
			}
			mi, _ := os.ReadFile("/proc/self/mountinfo")
			if !strings.Contains(string(mi), " "+group.CgroupMountpoint+" ") {
				t.Fatalf("%s is not mounted", group.CgroupMountpoint)
			}
			for deadline := time.Now().Add(5 * time.Second); ; {
				if out, err := sluice("exec", "--mount", mnt, "--group", "batch", "--", "true").CombinedOutput(); err != nil {
					t.Fatalf("sluice exec true: %v\n%s", err, out)
				}
				if _, err := os.Stat(filepath.Join(group.CgroupMountpoint, path)); os.IsNotExist(err) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("cgroup %s of the detached process is still there 5 s after it exited", path)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}
