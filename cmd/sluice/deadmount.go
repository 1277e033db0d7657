package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
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
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 || unescapeMountinfo(fields[4]) != mp {
			continue
		}
		for i := 5; i+1 < len(fields); i++ {
			if fields[i] == "-" {
				fstype, mounted = fields[i+1], true
				break
			}
		}
	}
	return fstype, mounted, sc.Err()
}

// unescapeMountinfo undoes the octal escapes (\040 for a space) of a
// path in /proc/self/mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
