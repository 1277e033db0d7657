package group

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestExecCgroupName(t *testing.T) {
	name := ExecCgroupName(4242, 1234567)
	if pid, start, ok := parseExecCgroupName(name); !ok || pid != 4242 || start != 1234567 {
		t.Errorf("parse(%q) = %d, %d, %v", name, pid, start, ok)
	}
	for _, bad := range []string{"exec-", "exec-1", "exec-x-2", "exec-0-2", "exec-1-", "cpu", "exec-1-2-3"} {
		if _, _, ok := parseExecCgroupName(bad); ok {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}

func TestHierarchyPath(t *testing.T) {
	cg := "12:name=sluice:/exec-1-2/exec-3-4\n9:name=systemd:/user.slice\n4:memory:/a\n0::/b\n"
	if p := hierarchyPath(cg); p != "/exec-1-2/exec-3-4" {
		t.Errorf("path %q", p)
	}
	if p := hierarchyPath("9:name=systemd:/\n0::/\n"); p != "" {
		t.Errorf("path with no sluice hierarchy %q", p)
	}
}

func TestHierarchyMount(t *testing.T) {
	mi := `25 1 0:22 / /sys rw,nosuid - sysfs sysfs rw
44 27 0:39 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
45 27 0:40 /sub /elsewhere rw,relatime - cgroup sluice rw,name=sluice
46 27 0:40 / /run/sluice/my\040cgroup rw,nosuid,nodev,noexec,relatime - cgroup sluice rw,name=sluice
`
	if m := hierarchyMount(mi); m != "/run/sluice/my cgroup" {
		t.Errorf("mount %q", m)
	}
	if m := hierarchyMount("44 27 0:39 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd\n"); m != "" {
		t.Errorf("mount with no sluice hierarchy %q", m)
	}
}

// TestSweepCgroups: the cgroups of processes that are gone are removed,
// deepest first; those of live processes, and other directories, stay.
func TestSweepCgroups(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"exec-1-1/exec-2-2", "exec-3-3/exec-4-4", "exec-5-5", "other/exec-6-6"} {
		os.MkdirAll(filepath.Join(dir, d), 0o755)
	}
	alive := map[int32]bool{3: true}
	sweepCgroups(dir, func(pid int32, _ uint64) bool { return alive[pid] })
	for d, want := range map[string]bool{"exec-1-1": false, "exec-3-3": true, "exec-3-3/exec-4-4": false, "exec-5-5": false, "other/exec-6-6": true} {
		if _, err := os.Stat(filepath.Join(dir, d)); (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", d, err == nil, want)
		}
	}
}

// TestIdent: a process's Ident stays while it lives, and a process given
// the id of one gone gets another (the kernel's next process id is set
// through /proc/sys/kernel/ns_last_pid, so this needs root).
func TestIdent(t *testing.T) {
	self := int32(os.Getpid())
	a, err := Ident(self)
	if b, err2 := Ident(self); err != nil || err2 != nil || a != b {
		t.Fatalf("Ident of this process twice: %d, %v; %d, %v", a, err, b, err2)
	}
	if _, err := Ident(1 << 30); err == nil {
		t.Error("Ident of a process that does not exist")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping the reuse of a process id: setting the next one needs root")
	}
	first := startSleep(t)
	pid := int32(first.Pid)
	was, err := Ident(pid)
	if err != nil {
		t.Fatal(err)
	}
	first.Kill()
	first.Wait()
	for try := 0; try < 50; try++ {
		if err := os.WriteFile("/proc/sys/kernel/ns_last_pid", []byte(strconv.Itoa(int(pid-1))), 0); err != nil {
			t.Skipf("skipping: %v", err)
		}
		p := startSleep(t)
		if int32(p.Pid) != pid {
			p.Kill()
			p.Wait()
			continue // another process took the id first
		}
		now, err := Ident(pid)
		p.Kill()
		p.Wait()
		if err != nil || now == was {
			t.Errorf("Ident of process %d: %d before, %d (%v) after its id was reused", pid, was, now, err)
		}
		t.Logf("process id %d reused at try %d: Ident %d, then %d", pid, try+1, was, now)
		return
	}
	t.Skip("skipping: process id never reused in 50 tries")
}

func startSleep(t *testing.T) *os.Process {
	t.Helper()
	c := exec.Command("sleep", "100")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	return c.Process
}
