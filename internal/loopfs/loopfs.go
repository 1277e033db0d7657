// Package loopfs makes small ext4 file systems on loop devices for tests.
package loopfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"sluice/internal/mountinfo"
)

// Options say how the file system is made and mounted.
type Options struct {
	// Mkfs are more arguments of mkfs.ext4 (-m 40, -N 128, ...).
	Mkfs []string
	// Mount is mount(8)'s -o options, such as "sync"; "" for none.
	Mount string
	// DirectIO makes the loop device read and write its image with
	// direct I/O, so that its writes wait for the disk rather than the
	// page cache.
	DirectIO bool
}

// Ext4 makes an ext4 image of size bytes in a new temporary directory,
// mounts it on a loop device and returns where; it is unmounted (unless
// the test detached it) and the device detached when the test ends. It skips the test where that cannot
// be done (not root, no mkfs.ext4, no loop devices).
func Ext4(t testing.TB, size int64, o Options) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: mounting a file system on a loop device needs root")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("skipping: no mkfs.ext4 (install e2fsprogs) to make a small ext4 file system")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("skipping: no loop devices: %v", err)
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	img, root := filepath.Join(dir, "ext4.img"), filepath.Join(dir, "ext4")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	// With a journal (the default) ext4 hands out the lowest free inode
	// number at once; without one it holds back recently deleted ones.
	if out, err := exec.Command(mkfs, append(append([]string{"-q", "-F"}, o.Mkfs...), img)...).CombinedOutput(); err != nil {
		t.Fatalf("%s -q -F %v %s: %v\n%s", mkfs, o.Mkfs, img, err, out)
	}
	args := []string{"--find", "--show"}
	if o.DirectIO {
		args = append(args, "--direct-io=on")
	}
	out, err := exec.Command("losetup", append(args, img)...).Output()
	if err != nil {
		t.Skipf("skipping: no loop device for %s: losetup: %v", img, err)
	}
	dev := strings.TrimSpace(string(out))
	margs := []string{"-t", "ext4"}
	if o.Mount != "" {
		margs = append(margs, "-o", o.Mount)
	}
	if out, err := exec.Command("mount", append(margs, dev, root)...).CombinedOutput(); err != nil {
		exec.Command("losetup", "-d", dev).Run()
		t.Skipf("skipping: cannot mount an ext4 image on %s: %v\n%s", dev, err, out)
	}
	t.Cleanup(func() {
		if _, mounted, _ := mountinfo.At(root); !mounted {
			// The test detached it (umount -l): it went once unused.
			exec.Command("losetup", "-d", dev).Run()
			return
		}
		if out, err := exec.Command("umount", root).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s(detaching it instead)", root, err, out)
			unix.Unmount(root, unix.MNT_DETACH)
		}
		exec.Command("losetup", "-d", dev).Run()
	})
	return root
}
