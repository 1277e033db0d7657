package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"

	"golang.org/x/sys/unix"

	"sluice/internal/mountinfo"
)

// A sluice daemon killed without unmounting (SIGKILL, a crash, the OOM
// killer) leaves its FUSE mount in place with no server: every access
// to the mount point fails with ENOTCONN (a stat once the attributes the
// kernel holds have expired, a statfs at once), and so does a new mount
// there.
// sluice mount --unmount-dead clears it, as the service does before each
// start.

// A config file may not hold unmount-dead: the service's mount would
// mount nothing.
func init() {
	configFlags["unmount-dead"] = "a clean-up that mounts nothing belongs on the command line (the service's ExecStartPre)"
}

// unmountDead detaches the topmost mount on mountpoint if it is a sluice
// mount (type fuse.sluice) whose server is gone. A live mount is left
// alone (statfs reaches its server), as is a mount point with nothing
// mounted; a dead mount of
// another file system is left alone too, and is an error: a mount there
// would fail on it. What it did is said on out.
func unmountDead(mountpoint string, out io.Writer) error {
	mp, err := mountpointPath(mountpoint)
	if err != nil {
		return err
	}
	fstype, mounted, err := topMount(mp)
	if err != nil {
		return err
	}
	if !mounted {
		fmt.Fprintf(out, "%s: nothing mounted\n", mp)
		return nil
	}
	// statfs always asks the server, where stat may be answered from
	// the attributes the kernel holds.
	var st unix.Statfs_t
	err = unix.Statfs(mp, &st)
	if err == nil {
		fmt.Fprintf(out, "%s: a live %s mount; left alone\n", mp, fstype)
		return nil
	}
	if !errors.Is(err, unix.ENOTCONN) && !errors.Is(err, unix.ECONNABORTED) {
		return fmt.Errorf("%s: a %s mount that stat cannot reach (%v); left alone", mp, fstype, err)
	}
	if fstype != "fuse.sluice" {
		return fmt.Errorf("%s: a dead %s mount (%v), not sluice's; left alone (umount -l %s clears it)", mp, fstype, err, mp)
	}
	if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("%s: detaching a dead sluice mount: %w", mp, err)
	}
	fmt.Fprintf(out, "%s: detached a dead sluice mount\n", mp)
	return nil
}

// mountpointPath is mountpoint as /proc/self/mountinfo names it: its
// parent directory with symlinks resolved (the mount point itself cannot
// be resolved through a dead mount).
func mountpointPath(mountpoint string) (string, error) {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return "", err
	}
	if abs == "/" {
		return abs, nil
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

// topMount reports the file system type of the last mount listed on mp
// in /proc/self/mountinfo, the one a lookup of mp reaches.
func topMount(mp string) (fstype string, mounted bool, err error) {
	m, ok, err := mountinfo.At(mp)
	return m.FSType, ok, err
}
