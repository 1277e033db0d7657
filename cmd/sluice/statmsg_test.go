package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestStatNoMount: stat where no sluice answers says what is there
// instead: nothing, a plain directory, another file system, or a sluice
// mount of another user, which only that user may ask about.
func TestStatNoMount(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	startMount(t, mnt, "mount", src, mnt)
	for _, c := range []struct {
		path, want string
		uid        uint32
	}{
		{filepath.Join(dir, "missing"), "no such file or directory", 0},
		{src, "not a mount point, a plain directory", 0},
		{"/proc", "a proc file system, not a sluice mount", 0},
		{mnt, "a sluice mount of uid 0: only that user may ask", 4101},
	} {
		cmd := sluice("stat", c.path)
		if c.uid != 0 {
			// A copy of the test binary the user may run.
			cmd.Path = filepath.Join(dir, "sluice")
			copyFile(t, os.Args[0], cmd.Path, 0o755)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: c.uid, Gid: c.uid}}
			cmd.Env = append(cmd.Env, "XDG_RUNTIME_DIR=")
		}
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("stat %s as uid %d: %v, %q; want it to say %q", c.path, c.uid, err, out, c.want)
		}
		if strings.Contains(string(out), ".sock") {
			t.Errorf("stat %s as uid %d names a socket path: %q", c.path, c.uid, out)
		}
	}
}
