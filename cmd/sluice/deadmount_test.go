package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// deadFuseMount mounts a FUSE file system of type fuse.NAME on mnt and
// closes its device at once, leaving a mount whose server is gone.
func deadFuseMount(t *testing.T, name, mnt string) {
	t.Helper()
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)
	if err := syscall.Mount(name, mnt, "fuse."+name, syscall.MS_NOSUID|syscall.MS_NODEV, data); err != nil {
		syscall.Close(fd)
		t.Fatalf("mount fuse.%s: %v", name, err)
	}
	syscall.Close(fd)
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
}

// TestUnmountDead: sluice mount --unmount-dead detaches a sluice mount
// whose daemon was killed, at once (while the kernel still holds the
// mount point's attributes, so stat alone would not see it dead), and
// leaves alone a live sluice mount, a live mount of another file system,
// a dead FUSE mount of another file system (an error, naming it) and a
// mount point with nothing mounted.
func TestUnmountDead(t *testing.T) {
	needMount(t)
	_, src, mnt := srcMnt(t)
	os.WriteFile(filepath.Join(src, "hello"), []byte("hello"), 0o644)
	clear := func(want string, fails bool) {
		t.Helper()
		out, err := sluice("mount", "--unmount-dead", src, mnt).CombinedOutput()
		if (err != nil) != fails || !strings.Contains(string(out), want) {
			t.Errorf("--unmount-dead: %v, want failure %v and %q\n%s", err, fails, want, out)
		}
	}

	clear("nothing mounted", false)

	cmd, _, exited, _ := startMount(t, mnt, "mount", src, mnt)
	clear("a live fuse.sluice mount; left alone", false)
	if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "hello" {
		t.Fatalf("read after --unmount-dead on a live mount: %q, %v", b, err)
	}
	var st syscall.Stat_t
	syscall.Stat(mnt, &st)
	cmd.Process.Kill()
	<-exited
	if err := syscall.Stat(mnt, &st); err != nil {
		t.Logf("stat right after SIGKILL: %v (the attributes had expired)", err)
	}
	// A mount over it is refused with the ways out and the way to avoid
	// it next time.
	if out, err := sluice("mount", src, mnt).CombinedOutput(); err == nil || !strings.Contains(string(out), "--unmount-dead") || !strings.Contains(string(out), "--supervise") {
		t.Errorf("sluice mount over the dead mount: %v, want a refusal naming --unmount-dead and --supervise\n%s", err, out)
	}
	clear("detached a dead sluice mount", false)
	if isMounted(mnt) {
		t.Fatal("the dead sluice mount is still mounted")
	}

	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	clear("a live tmpfs mount; left alone", false)
	if !isMounted(mnt) {
		t.Error("--unmount-dead unmounted a live tmpfs")
	}
	syscall.Unmount(mnt, 0)

	deadFuseMount(t, "other", mnt)
	clear("a dead fuse.other mount", true)
	if !isMounted(mnt) {
		t.Error("--unmount-dead unmounted a dead mount of another file system")
	}
}

// TestUnmountDeadNotInConfig: a config file may not hold unmount-dead,
// which would turn the service's mount into a clean-up that mounts
// nothing.
func TestUnmountDeadNotInConfig(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "x.toml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("source = %q\nmountpoint = %q\nunmount-dead = true\n", dir, dir)), 0o644)
	out, err := sluice("mount", "--config", cfg).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "unmount-dead") {
		t.Errorf("a config file with unmount-dead: %v, want a usage error naming it\n%s", err, out)
	}
}
