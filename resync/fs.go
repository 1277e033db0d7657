package resync

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// How the copy opens a directory: never through a symlink, and never
// waiting (O_NONBLOCK: what is there now is not a directory it could wait
// on, but the flag costs nothing).
const dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC

// OpenRoot opens directory path as the root of a tree to copy from or to,
// as the copy opens every directory: not if it is a symlink, and never
// waiting. The caller closes it.
func OpenRoot(path string) (int, error) {
	return unix.Open(path, dirFlags, 0)
}

// noDir reports whether err says a path leads to no directory.
func noDir(err error) bool {
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP)
}

// openBeneath opens directory rel under root, through no symlink.
func openBeneath(root int, rel string) (int, error) {
	rel = strings.Trim(rel, "/")
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(root, rel, &unix.OpenHow{Flags: dirFlags, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_BENEATH})
}

// names lists directory fd's entries.
func names(fd int) ([]string, error) {
	nfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), "dir")
	defer f.Close()
	return f.Readdirnames(-1)
}

// lstatAt describes name in directory fd, not following a symlink.
func lstatAt(fd int, name string) (st unix.Stat_t, err error) {
	err = unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	return st, err
}

// sameObject reports whether fd is the object st describes: errSwapped
// when another was renamed into its place since.
func sameObject(fd int, st *unix.Stat_t) error {
	var now unix.Stat_t
	if err := unix.Fstat(fd, &now); err != nil {
		return err
	}
	if now.Mode&syscall.S_IFMT != st.Mode&syscall.S_IFMT || now.Ino != st.Ino || now.Dev != st.Dev {
		return errSwapped
	}
	return nil
}

// openSame opens name in dirfd with flags, never waiting, and checks that
// it is the object st describes.
func openSame(dirfd int, name string, flags int, st *unix.Stat_t) (int, error) {
	fd, err := unix.Openat(dirfd, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENXIO):
		return -1, errSwapped // not of the type flags open
	case err != nil:
		return -1, err
	}
	if err := sameObject(fd, st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// pwriteAll writes all of b at off, or says how much it wrote and why it
// stopped: a write that falls short with no error is retried from where
// it stopped, and one that writes nothing fails with ENOSPC.
func pwriteAll(fd int, b []byte, off int64) (written int, err error) {
	for written < len(b) {
		n, err := unix.Pwrite(fd, b[written:], off+int64(written))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return written, err
		}
		if n <= 0 {
			return written, syscall.ENOSPC
		}
		written += n
	}
	return written, nil
}

// procPath names descriptor fd in /proc, for the calls that take a path
// only.
func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// CopyMeta gives d the owner, mode, extended attributes (ACLs among them)
// and times of s, which st describes.
func CopyMeta(s, d int, st *unix.Stat_t) error {
	if err := unix.Fchownat(d, "", int(st.Uid), int(st.Gid), unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, procPath(d), st.Mode&0o7777, 0); err != nil {
		return err
	}
	if err := copyXattrs(procPath(s), procPath(d)); err != nil {
		return err
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(d, "", ts, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW)
}

// linkMeta gives symlink name in dfd the owner and times of st.
func linkMeta(dfd int, name string, st *unix.Stat_t) error {
	if err := unix.Fchownat(dfd, name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return unix.UtimesNanoAt(dfd, name, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
}

// copyXattrs gives the object at path d the extended attributes of the
// one at s, and none other.
func copyXattrs(s, d string) error {
	list := func(p string) ([]string, error) {
		buf := make([]byte, 64<<10)
		n, err := unix.Listxattr(p, buf)
		if err != nil {
			if err == syscall.ENOTSUP {
				return nil, nil
			}
			return nil, err
		}
		var out []string
		for _, b := range strings.Split(string(buf[:n]), "\x00") {
			if b != "" {
				out = append(out, b)
			}
		}
		return out, nil
	}
	snames, err := list(s)
	if err != nil {
		return err
	}
	dnames, err := list(d)
	if err != nil {
		return err
	}
	have := map[string]bool{}
	buf := make([]byte, 64<<10)
	for _, name := range snames {
		have[name] = true
		n, err := unix.Getxattr(s, name, buf)
		if err != nil {
			return err
		}
		if err := unix.Setxattr(d, name, buf[:n], 0); err != nil {
			return err
		}
	}
	for _, name := range dnames {
		if !have[name] {
			if err := unix.Removexattr(d, name); err != nil && err != syscall.ENODATA {
				return err
			}
		}
	}
	return nil
}

// readlinkAt returns the target of symlink name in directory fd.
func readlinkAt(fd int, name string) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// removeAll removes name in dfd and, for a directory, all it holds.
func removeAll(dfd int, name string) error {
	err := unix.Unlinkat(dfd, name, 0)
	if err == nil || errors.Is(err, syscall.ENOENT) {
		return nil
	}
	if !errors.Is(err, syscall.EISDIR) && !errors.Is(err, syscall.EPERM) {
		return err
	}
	d, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	ns, err := names(d)
	if err == nil {
		for _, n := range ns {
			if err = removeAll(d, n); err != nil {
				break
			}
		}
	}
	unix.Close(d)
	if err != nil {
		return err
	}
	return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
}
