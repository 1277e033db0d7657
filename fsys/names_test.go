package fsys

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"sluice/group"
)

// longComp is a 200-byte path component, distinct per depth.
func longComp(i int) string { return fmt.Sprintf("%03d", i) + strings.Repeat("c", 197) }

// name255 is a NAME_MAX-byte name made of c.
func name255(c string) string { return strings.Repeat(c, 255) }

// namesMount mounts with every caller's reads and writes going through
// sluice's engine.
func namesMount(t *testing.T, source string) (src, mnt string) {
	t.Helper()
	src, mnt, _ = mount(t, Options{Source: source, Limits: []group.LimitSpec{limit(t, "default rbps=1GiB wbps=1GiB")}})
	return src, mnt
}

// compareSteps reports the steps whose outcomes differ between SOURCE and
// the mount, and the steps where SOURCE itself did not answer as expected
// (then the machine, not sluice, is at fault).
func compareSteps(t *testing.T, what string, src, mnt []string, want func(step string) string) {
	t.Helper()
	if len(src) != len(mnt) {
		t.Errorf("%s: %d steps on SOURCE, %d through the mount", what, len(src), len(mnt))
	}
	for i := 0; i < min(len(src), len(mnt)); i++ {
		step, sres, _ := strings.Cut(src[i], ": ")
		_, mres, _ := strings.Cut(mnt[i], ": ")
		if w := want(step); sres != w {
			t.Fatalf("%s: on SOURCE, %s gave %s, want %s", what, step, sres, w)
		}
		if sres != mres {
			t.Errorf("%s: %s gave %s through the mount, %s on SOURCE", what, step, mres, sres)
		}
	}
}

// TestNamesLongComponents: a NAME_MAX name at depth 12 of 200-byte
// components is created, opened, written, read, stat'ed, renamed, linked,
// unlinked and removed through the mount exactly as on SOURCE, and a
// 256-byte name gets ENAMETOOLONG on both.
func TestNamesLongComponents(t *testing.T) {
	src, mnt := namesMount(t, "")
	if err := os.Mkdir(filepath.Join(src, "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(src, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	steps := func(root string) []string {
		var out []string
		rec := func(step string, err error, extra ...any) {
			s := step + ": " + errnoStr(err)
			if err == nil && len(extra) > 0 {
				s += " " + fmt.Sprint(extra...)
			}
			out = append(out, s)
		}
		dir := root
		for i := 0; i < 12; i++ {
			dir = filepath.Join(dir, longComp(i))
			rec(fmt.Sprintf("mkdir depth %d", i+1), unix.Mkdir(dir, 0o755))
		}
		f, g, h := filepath.Join(dir, name255("L")), filepath.Join(dir, name255("M")), filepath.Join(dir, name255("K"))
		fd, err := unix.Open(f, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
		rec("create 255-byte name", err)
		if err == nil {
			_, err = unix.Write(fd, []byte("hello"))
			rec("write", err)
			unix.Close(fd)
		}
		b, err := os.ReadFile(f)
		rec("open+read", err, string(b))
		var st unix.Stat_t
		err = unix.Stat(f, &st)
		rec("stat", err, st.Size)
		rec("rename to another 255-byte name", unix.Rename(f, g))
		rec("link to a third 255-byte name", unix.Link(g, h))
		err = unix.Stat(h, &st)
		rec("stat link", err, st.Nlink)
		rec("unlink", unix.Unlink(g))
		rec("unlink link", unix.Unlink(h))
		d := filepath.Join(dir, name255("D"))
		rec("mkdir 255-byte name", unix.Mkdir(d, 0o755))
		rec("rmdir 255-byte name", unix.Rmdir(d))
		s := filepath.Join(dir, name255("S"))
		rec("symlink 255-byte name", unix.Symlink(name255("T"), s))
		target, err := os.Readlink(s)
		rec("readlink", err, len(target))
		rec("unlink symlink", unix.Unlink(s))
		long := filepath.Join(dir, strings.Repeat("N", 256))
		fd, err = unix.Open(long, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		rec("create 256-byte name", err)
		rec("mkdir 256-byte name", unix.Mkdir(long, 0o755))
		rec("stat 256-byte name", unix.Stat(long, &st))
		small := filepath.Join(dir, "small")
		os.WriteFile(small, nil, 0o644)
		rec("rename to 256-byte name", unix.Rename(small, long))
		rec("unlink small", unix.Unlink(small))
		for i := 11; i >= 0; i-- {
			rec(fmt.Sprintf("rmdir depth %d", i+1), unix.Rmdir(dir))
			dir = filepath.Dir(dir)
		}
		return out
	}
	rs := steps(filepath.Join(src, "a"))
	rm := steps(filepath.Join(mnt, "b"))
	compareSteps(t, "long names", rs, rm, func(step string) string {
		switch {
		case strings.Contains(step, "256-byte"):
			return "ENAMETOOLONG"
		case step == "open+read":
			return "ok hello"
		case step == "stat":
			return "ok 5"
		case step == "stat link":
			return "ok 2"
		case step == "readlink":
			return "ok 255"
		}
		return "ok"
	})
}

// TestNamesPathMax: a path through the mount of PATH_MAX-1 bytes works for
// every operation, though the same object's path in SOURCE (a longer
// directory name) is beyond PATH_MAX.
func TestNamesPathMax(t *testing.T) {
	needFUSE(t)
	base := t.TempDir()
	os.Chmod(base, 0o755)
	source := filepath.Join(base, strings.Repeat("s", 250))
	if err := os.Mkdir(source, 0o755); err != nil {
		t.Fatal(err)
	}
	_, mnt := namesMount(t, source)

	// mnt/c0/c1/.../c(k-1)/leaf is 4095 bytes.
	k := 0
	for 4094-len(mnt)-201*k > 255 {
		k++
	}
	leafLen := 4094 - len(mnt) - 201*k
	dfd, err := unix.Open(mnt, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { unix.Close(dfd) }()
	dir := mnt
	for i := 0; i < k; i++ {
		c := longComp(i)
		dir += "/" + c
		if err := unix.Mkdirat(dfd, c, 0o755); err != nil {
			t.Fatalf("mkdirat at depth %d through the mount (mount path %d bytes, in SOURCE %d bytes): %v",
				i+1, len(dir), len(dir)-len(mnt)+len(source), err)
		}
		nfd, err := unix.Openat(dfd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("openat at depth %d through the mount (mount path %d bytes): %v", i+1, len(dir), err)
		}
		unix.Close(dfd)
		dfd = nfd
	}
	leaf := dir + "/" + strings.Repeat("f", leafLen)
	other := dir + "/" + strings.Repeat("g", leafLen)
	if len(leaf) != 4095 {
		t.Fatalf("built a %d-byte path, want 4095", len(leaf))
	}
	srcLen := len(leaf) - len(mnt) + len(source)
	check := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s of a 4095-byte path through the mount (%d bytes in SOURCE): %v", step, srcLen, err)
		}
	}
	fd, err := unix.Open(leaf, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
	check("create", err)
	if err == nil {
		_, err = unix.Write(fd, []byte("data"))
		check("write", err)
		unix.Close(fd)
	}
	b, err := os.ReadFile(leaf)
	check("open+read", err)
	if err == nil && string(b) != "data" {
		t.Errorf("read %q back from a 4095-byte path through the mount, want \"data\"", b)
	}
	var st unix.Stat_t
	check("stat", unix.Stat(leaf, &st))
	check("chmod", unix.Chmod(leaf, 0o600))
	check("truncate", unix.Truncate(leaf, 2))
	check("setxattr", unix.Setxattr(leaf, "user.x", []byte("v"), 0))
	_, err = unix.Getxattr(leaf, "user.x", make([]byte, 16))
	check("getxattr", err)
	check("rename", unix.Rename(leaf, other))
	check("link", unix.Link(other, leaf))
	check("unlink", unix.Unlink(other))
	check("unlink link", unix.Unlink(leaf))
	check("mkdir", unix.Mkdir(leaf, 0o755))
	check("rmdir", unix.Rmdir(leaf))
	check("symlink", unix.Symlink("t", leaf))
	_, err = os.Readlink(leaf)
	check("readlink", err)
	check("unlink symlink", unix.Unlink(leaf))
	check("mkfifo", unix.Mknod(leaf, unix.S_IFIFO|0o644, 0))
	check("unlink fifo", unix.Unlink(leaf))
}

// deepSteps builds 22 levels of 200-byte directories under root with *at
// calls (more than PATH_MAX of relative path), works on files at the
// bottom, and removes it all, recording each step's outcome.
func deepSteps(root string) []string {
	var out []string
	rec := func(step string, err error, extra ...any) {
		s := step + ": " + errnoStr(err)
		if err == nil && len(extra) > 0 {
			s += " " + fmt.Sprint(extra...)
		}
		out = append(out, s)
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	rec("open root", err)
	if err != nil {
		return out
	}
	fds := []int{fd}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	const depth = 22
	for i := 0; i < depth; i++ {
		d := fds[len(fds)-1]
		rec(fmt.Sprintf("mkdirat depth %d", i+1), unix.Mkdirat(d, longComp(i), 0o755))
		nfd, err := unix.Openat(d, longComp(i), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		rec(fmt.Sprintf("openat depth %d", i+1), err)
		if err != nil {
			return out
		}
		fds = append(fds, nfd)
	}
	d := fds[len(fds)-1]
	f, g, h := name255("L"), name255("M"), name255("K")
	ffd, err := unix.Openat(d, f, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
	rec("create", err)
	if err == nil {
		_, err = unix.Pwrite(ffd, []byte("deep data"), 0)
		rec("pwrite", err)
		unix.Close(ffd)
	}
	ffd, err = unix.Openat(d, f, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	rec("open", err)
	if err == nil {
		buf := make([]byte, 64)
		n, err := unix.Pread(ffd, buf, 0)
		rec("pread", err, string(buf[:max(n, 0)]))
		unix.Close(ffd)
	}
	var st unix.Stat_t
	err = unix.Fstatat(d, f, &st, unix.AT_SYMLINK_NOFOLLOW)
	rec("fstatat", err, st.Size)
	rec("fchmodat", unix.Fchmodat(d, f, 0o600, 0))
	rec("fchownat", unix.Fchownat(d, f, 4101, 4101, unix.AT_SYMLINK_NOFOLLOW))
	err = unix.Fstatat(d, f, &st, unix.AT_SYMLINK_NOFOLLOW)
	rec("fstatat after chmod, chown", err, fmt.Sprintf("%o %d", st.Mode, st.Uid))
	rec("renameat", unix.Renameat(d, f, d, g))
	rec("renameat to parent", unix.Renameat(d, g, fds[len(fds)-2], g))
	rec("renameat back", unix.Renameat(fds[len(fds)-2], g, d, g))
	rec("linkat", unix.Linkat(d, g, d, h, 0))
	rec("unlinkat", unix.Unlinkat(d, g, 0))
	rec("unlinkat link", unix.Unlinkat(d, h, 0))
	rec("symlinkat", unix.Symlinkat("target", d, f))
	buf := make([]byte, 64)
	n, err := unix.Readlinkat(d, f, buf)
	rec("readlinkat", err, string(buf[:max(n, 0)]))
	rec("unlinkat symlink", unix.Unlinkat(d, f, 0))
	rec("mknodat fifo", unix.Mknodat(d, f, unix.S_IFIFO|0o644, 0))
	rec("unlinkat fifo", unix.Unlinkat(d, f, 0))
	rec("mkdirat", unix.Mkdirat(d, f, 0o755))
	rec("unlinkat dir", unix.Unlinkat(d, f, unix.AT_REMOVEDIR))
	rec("create 256-byte name", func() error {
		fd, err := unix.Openat(d, strings.Repeat("N", 256), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		return err
	}())
	for i := depth; i > 0; i-- {
		rec(fmt.Sprintf("rmdir depth %d", i), unix.Unlinkat(fds[i-1], longComp(i-1), unix.AT_REMOVEDIR))
	}
	return out
}

// TestNamesDeepRelative: objects more than PATH_MAX below the mount's root,
// reached with *at calls from descriptors of their directories, take every
// operation as they do in SOURCE.
func TestNamesDeepRelative(t *testing.T) {
	src, mnt := namesMount(t, "")
	for _, d := range []string{"a", "b"} {
		if err := os.Mkdir(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rs := deepSteps(filepath.Join(src, "a"))
	rm := deepSteps(filepath.Join(mnt, "b"))
	compareSteps(t, "22 levels of 200-byte names (4422 bytes of relative path)", rs, rm, func(step string) string {
		switch step {
		case "create 256-byte name":
			return "ENAMETOOLONG"
		case "pread":
			return "ok deep data"
		case "fstatat":
			return "ok 9"
		case "fstatat after chmod, chown":
			return "ok 100600 4101"
		case "readlinkat":
			return "ok target"
		}
		return "ok"
	})
}
