package backing

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// conf is the state of one tree under the conformance script: the IDs
// and open files it has handed out, by label (a path below the root).
type conf struct {
	tr    Tree
	me    *Cred // the test process's own credentials
	ids   map[string]ID
	files map[string]*File
}

// confStep is one step of the conformance script: what it does to a
// tree, and its outcome as text, which must be the same for every tree.
type confStep struct {
	name string
	root bool // needs root (other uids, device nodes): skipped without
	do   func(c *conf) string
}

func join(parent, name string) string {
	if parent == "." {
		return name
	}
	return parent + "/" + name
}

func errText(err error) string {
	var e syscall.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return fmt.Sprint(err)
}

// attrText is what a step reports of attributes: those a backing file
// system and MemTree agree on (not the device, inode number, blocks or a
// directory's size, nor times, which steps report when they set them).
func attrText(st syscall.Stat_t) string {
	s := fmt.Sprintf("mode=%o nlink=%d uid=%d gid=%d", st.Mode, st.Nlink, st.Uid, st.Gid)
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
	case syscall.S_IFCHR, syscall.S_IFBLK:
		s += fmt.Sprintf(" rdev=%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
	default:
		s += fmt.Sprintf(" size=%d", st.Size)
	}
	return s
}

func (c *conf) entry(label string, e Entry, err error) string {
	if err != nil {
		return errText(err)
	}
	c.ids[label] = e.ID
	return fmt.Sprintf("id=%d %s", e.ID, attrText(e.Attr))
}

func (c *conf) id(label string) ID {
	if label == "." {
		return RootID
	}
	if id, ok := c.ids[label]; ok {
		return id
	}
	return 1 << 40 // never handed out: ESTALE
}

func lookup(parent, name string) func(*conf) string {
	return func(c *conf) string {
		e, err := c.tr.Lookup(c.id(parent), name)
		return c.entry(join(parent, name), e, err)
	}
}

func getattr(label string) func(*conf) string {
	return func(c *conf) string {
		st, err := c.tr.Getattr(c.id(label))
		if err != nil {
			return errText(err)
		}
		return attrText(st)
	}
}

func times(label string) func(*conf) string {
	return func(c *conf) string {
		st, err := c.tr.Getattr(c.id(label))
		if err != nil {
			return errText(err)
		}
		return fmt.Sprintf("atime=%d.%09d mtime=%d.%09d", st.Atim.Sec, st.Atim.Nsec, st.Mtim.Sec, st.Mtim.Nsec)
	}
}

func mkdir(cred *Cred, parent, name string, mode uint32) func(*conf) string {
	return func(c *conf) string {
		e, err := c.tr.Mkdir(credOr(cred, c), c.id(parent), name, mode)
		return c.entry(join(parent, name), e, err)
	}
}

func credOr(cred *Cred, c *conf) *Cred {
	if cred != nil {
		return cred
	}
	return c.me
}

func mknod(parent, name string, mode, dev uint32) func(*conf) string {
	return func(c *conf) string {
		e, err := c.tr.Mknod(c.me, c.id(parent), name, mode, dev)
		return c.entry(join(parent, name), e, err)
	}
}

func symlink(parent, name, target string) func(*conf) string {
	return func(c *conf) string {
		e, err := c.tr.Symlink(c.me, c.id(parent), name, target)
		return c.entry(join(parent, name), e, err)
	}
}

func link(label, parent, name string) func(*conf) string {
	return func(c *conf) string {
		e, err := c.tr.Link(c.me, c.id(label), c.id(parent), name)
		return c.entry(join(parent, name), e, err)
	}
}

func readlink(label string) func(*conf) string {
	return func(c *conf) string {
		b, err := c.tr.Readlink(c.id(label))
		if err != nil {
			return errText(err)
		}
		return string(b)
	}
}

// create creates parent/name and keeps the file open as fh.
func create(cred *Cred, parent, name, fh string, flags, mode uint32) func(*conf) string {
	return func(c *conf) string {
		e, f, err := c.tr.Create(credOr(cred, c), c.id(parent), name, flags, mode)
		if err == nil {
			c.files[fh] = f
		}
		return c.entry(join(parent, name), e, err)
	}
}

func tmpfile(parent, label string, flags, mode uint32) func(*conf) string {
	return func(c *conf) string {
		e, f, err := c.tr.Tmpfile(c.me, c.id(parent), flags, mode)
		if err == nil {
			c.files[label] = f
		}
		return c.entry(label, e, err)
	}
}

func open(label, fh string, flags uint32) func(*conf) string {
	return func(c *conf) string {
		f, err := c.tr.Open(c.id(label), flags)
		if err != nil {
			return errText(err)
		}
		c.files[fh] = f
		if f.Fd() >= 0 != (f.io == nil) {
			return "Fd and io disagree"
		}
		return "ok"
	}
}

func closeFile(fh string) func(*conf) string {
	return func(c *conf) string {
		err := c.files[fh].Close()
		delete(c.files, fh)
		return errText(err)
	}
}

func write(fh, data string, off int64) func(*conf) string {
	return func(c *conf) string {
		n, err := c.files[fh].WriteAt([]byte(data), off)
		return fmt.Sprintf("%d %s", n, errText(err))
	}
}

func read(fh string, off int64, n int) func(*conf) string {
	return func(c *conf) string {
		b := make([]byte, n)
		m, err := c.files[fh].ReadAt(b, off)
		return fmt.Sprintf("%q %s", b[:max(m, 0)], errText(err))
	}
}

func fstat(fh string) func(*conf) string {
	return func(c *conf) string {
		st, err := c.files[fh].Stat()
		if err != nil {
			return errText(err)
		}
		return attrText(st)
	}
}

func allocate(fh string, mode uint32, off, n int64) func(*conf) string {
	return func(c *conf) string { return errText(c.files[fh].Allocate(mode, off, n)) }
}

func seek(fh string, off int64, whence int) func(*conf) string {
	return func(c *conf) string {
		o, err := c.files[fh].Seek(off, whence)
		return fmt.Sprintf("%d %s", o, errText(err))
	}
}

func fileOps(fh string) func(*conf) string {
	return func(c *conf) string {
		f := c.files[fh]
		return strings.Join([]string{errText(f.Sync(false)), errText(f.Sync(true)),
			errText(f.StartWriteback(0, 0)), errText(f.Flush()), errText(f.KillSuidgid())}, " ")
	}
}

func setattr(label, fh string, set SetAttr) func(*conf) string {
	return func(c *conf) string {
		st, err := c.tr.Setattr(c.id(label), c.files[fh], set)
		if err != nil {
			return errText(err)
		}
		return attrText(st)
	}
}

func unlink(parent, name string) func(*conf) string {
	return func(c *conf) string { return errText(c.tr.Unlink(c.id(parent), name)) }
}

func rmdir(parent, name string) func(*conf) string {
	return func(c *conf) string { return errText(c.tr.Rmdir(c.id(parent), name)) }
}

func rename(parent, name, newParent, newName string, flags uint32) func(*conf) string {
	return func(c *conf) string {
		return errText(c.tr.Rename(c.id(parent), name, c.id(newParent), newName, flags))
	}
}

// list reads directory label whole, twice (the second after a rewind),
// and reports its names and types in order of name.
func list(label string) func(*conf) string {
	return func(c *conf) string {
		d, err := c.tr.OpenDir(c.id(label))
		if err != nil {
			return errText(err)
		}
		defer d.Close()
		var out []string
		for pass := range 2 {
			if err := d.Seek(0); err != nil {
				return errText(err)
			}
			var names []string
			for {
				e, ok, err := d.Peek()
				if err != nil {
					return errText(err)
				}
				if !ok {
					break
				}
				names = append(names, fmt.Sprintf("%s:%o", e.Name, e.Mode>>12))
				d.Advance()
			}
			slices.Sort(names)
			if pass == 0 {
				out = names
			} else if !slices.Equal(out, names) {
				return fmt.Sprintf("rewound listing %v, first %v", names, out)
			}
		}
		return strings.Join(out, " ") + " sync " + errText(d.Sync())
	}
}

func statfs(label string) func(*conf) string {
	return func(c *conf) string {
		st, err := c.tr.Statfs(c.id(label))
		if err != nil {
			return errText(err)
		}
		return fmt.Sprintf("namelen=%d free<=total %v", st.Namelen, st.Bfree <= st.Blocks)
	}
}

func setxattr(label, name, value string, flags int) func(*conf) string {
	return func(c *conf) string { return errText(c.tr.Setxattr(c.id(label), name, []byte(value), flags)) }
}

func getxattr(label, name string, size int) func(*conf) string {
	return func(c *conf) string {
		b := make([]byte, size)
		n, err := c.tr.Getxattr(c.id(label), name, b)
		if err != nil {
			return errText(err)
		}
		if size == 0 {
			return fmt.Sprint(n)
		}
		return fmt.Sprintf("%q", b[:n])
	}
}

func listxattr(label string) func(*conf) string {
	return func(c *conf) string {
		n, err := c.tr.Listxattr(c.id(label), nil)
		if err != nil {
			return errText(err)
		}
		b := make([]byte, n)
		if n > 0 {
			if _, err := c.tr.Listxattr(c.id(label), b[:n-1]); err != syscall.ERANGE {
				return "short buffer: " + errText(err)
			}
		}
		m, err := c.tr.Listxattr(c.id(label), b)
		if err != nil {
			return errText(err)
		}
		names := strings.Split(strings.TrimSuffix(string(b[:m]), "\x00"), "\x00")
		slices.Sort(names)
		return fmt.Sprintf("%d %q", n, names)
	}
}

func removexattr(label, name string) func(*conf) string {
	return func(c *conf) string { return errText(c.tr.Removexattr(c.id(label), name)) }
}

// forget drops n references to label and reports whether it is gone.
func forget(label string, n uint64) func(*conf) string {
	return func(c *conf) string { return fmt.Sprint(c.tr.Forget(c.id(label), n)) }
}

func u32(v uint32) *uint32 { return &v }
func u64(v uint64) *uint64 { return &v }

// confScript exercises every Tree method, and File's and Dir's, with
// the outcomes a POSIX file system gives, errors included.
func confScript() []confStep {
	other := &Cred{Uid: 4101, Gid: 4102}
	masked := &Cred{Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid()), Umask: 0o027}
	rw := uint32(syscall.O_RDWR)
	at := syscall.Timespec{Sec: 1_600_000_000, Nsec: 123_456_789}
	mt := syscall.Timespec{Sec: 1_500_000_000, Nsec: 987_654_321}
	long := strings.Repeat("n", 256)
	return []confStep{
		{name: "statfs", do: statfs(".")},
		{name: "getattr of the root", do: getattr(".")},
		{name: "mkdir d", do: mkdir(nil, ".", "d", 0o755)},
		{name: "mkdir d again", do: mkdir(nil, ".", "d", 0o755)},
		{name: "mkdir with a umask", do: mkdir(masked, ".", "m", 0o777)},
		{name: "mkdir keeps the sticky bit only", do: mkdir(nil, ".", "s", 0o7777)},
		{name: "mkdir of a bad name", do: mkdir(nil, ".", "a/b", 0o755)},
		{name: "mkdir of a long name", do: mkdir(nil, ".", long, 0o755)},
		{name: "root nlink", do: getattr(".")},
		{name: "create d/f", do: create(nil, "d", "f", "f", rw, 0o644)},
		{name: "write d/f", do: write("f", "hello, world", 0)},
		{name: "read d/f", do: read("f", 0, 64)},
		{name: "read d/f past its end", do: read("f", 100, 8)},
		{name: "fstat d/f", do: fstat("f")},
		{name: "file syncs", do: fileOps("f")},
		{name: "seek data", do: seek("f", 0, unix.SEEK_DATA)},
		{name: "seek hole", do: seek("f", 0, unix.SEEK_HOLE)},
		{name: "seek data past the end", do: seek("f", 100, unix.SEEK_DATA)},
		{name: "create d/f exclusive", do: create(nil, "d", "f", "x", rw|syscall.O_EXCL, 0o644)},
		{name: "create d/f again, truncating", do: create(nil, "d", "f", "f2", rw|syscall.O_TRUNC, 0o600)},
		{name: "read d/f truncated", do: read("f", 0, 8)},
		{name: "write d/f again", do: write("f2", "0123456789", 0)},
		{name: "close the second", do: closeFile("f2")},
		{name: "lookup d", do: lookup(".", "d")},
		{name: "lookup d/f", do: lookup("d", "f")},
		{name: "lookup of a missing name", do: lookup("d", "nope")},
		{name: "lookup in a file", do: lookup("d/f", "x")},
		{name: "lookup of ..", do: lookup("d", "..")},
		{name: "lookup of a long name", do: lookup("d", long)},
		{name: "getattr of an unknown id", do: getattr("nope")},
		{name: "symlink d/l", do: symlink("d", "l", "f")},
		{name: "symlink to nothing", do: symlink("d", "e", "")},
		{name: "symlink over a name", do: symlink("d", "f", "x")},
		{name: "readlink d/l", do: readlink("d/l")},
		{name: "readlink of a file", do: readlink("d/f")},
		{name: "create over a symlink", do: create(nil, "d", "l", "x", rw, 0o644)},
		{name: "create over a directory", do: create(nil, ".", "d", "x", syscall.O_RDONLY, 0o644)},
		{name: "open a symlink", do: open("d/l", "x", syscall.O_RDONLY)},
		{name: "open a directory to write", do: open("d", "x", rw)},
		{name: "open a file as a directory", do: open("d/f", "x", syscall.O_RDONLY|unix.O_DIRECTORY)},
		{name: "open d/f read-only", do: open("d/f", "r", syscall.O_RDONLY)},
		{name: "write to a read-only file", do: write("r", "x", 0)},
		{name: "read a read-only file", do: read("r", 2, 4)},
		{name: "open d/f write-only", do: open("d/f", "w", syscall.O_WRONLY)},
		{name: "read a write-only file", do: read("w", 0, 4)},
		{name: "open d/f to append", do: open("d/f", "a", syscall.O_WRONLY|syscall.O_APPEND)},
		{name: "append", do: write("a", "AB", 0)},
		{name: "read after the append", do: read("r", 0, 64)},
		{name: "close the appender", do: closeFile("a")},
		{name: "truncate through a read-only file", do: setattr("d/f", "r", SetAttr{Size: u64(4)})},
		{name: "truncate through a write-only file", do: setattr("d/f", "w", SetAttr{Size: u64(4)})},
		{name: "read after the truncate", do: read("r", 0, 64)},
		{name: "allocate", do: allocate("w", 0, 0, 8192)},
		{name: "size after allocate", do: fstat("w")},
		{name: "allocate keeping the size", do: allocate("w", unix.FALLOC_FL_KEEP_SIZE, 8192, 4096)},
		{name: "size after allocate keeping it", do: fstat("w")},
		{name: "punch a hole without keeping the size", do: allocate("w", unix.FALLOC_FL_PUNCH_HOLE, 0, 2)},
		{name: "punch a hole", do: allocate("w", unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 1, 2)},
		{name: "read after the hole", do: read("r", 0, 6)},
		{name: "allocate on a read-only file", do: allocate("r", 0, 0, 10)},
		{name: "truncate d/f", do: setattr("d/f", "", SetAttr{Size: u64(3)})},
		{name: "grow d/f", do: setattr("d/f", "", SetAttr{Size: u64(10)})},
		{name: "read the grown d/f", do: read("r", 0, 64)},
		{name: "truncate a directory", do: setattr("d", "", SetAttr{Size: u64(0)})},
		{name: "chmod d/f", do: setattr("d/f", "", SetAttr{Mode: u32(0o6755)})},
		{name: "chown d/f clears the set-id bits", root: true, do: setattr("d/f", "", SetAttr{Uid: u32(4101), Gid: u32(4102)})},
		{name: "chmod d/f again", do: setattr("d/f", "", SetAttr{Mode: u32(0o6745)})},
		{name: "kill set-id, group not executable", do: setattr("d/f", "", SetAttr{KillSuidgid: true})},
		{name: "chmod d/f once more", do: setattr("d/f", "", SetAttr{Mode: u32(0o6775)})},
		{name: "kill set-id through the file", do: func(c *conf) string { return errText(c.files["w"].KillSuidgid()) }},
		{name: "mode after the kill", do: getattr("d/f")},
		{name: "kill set-id of a directory", do: setattr("s", "", SetAttr{Mode: u32(0o6755), KillSuidgid: true})},
		{name: "set times", do: setattr("d/f", "", SetAttr{Atime: &at, Mtime: &mt})},
		{name: "times", do: times("d/f")},
		{name: "set mtime alone", do: setattr("d/f", "", SetAttr{Mtime: &at})},
		{name: "times again", do: times("d/f")},
		{name: "set times of a symlink", do: setattr("d/l", "", SetAttr{Atime: &mt, Mtime: &mt})},
		{name: "symlink times", do: times("d/l")},
		{name: "close the reader", do: closeFile("r")},
		{name: "close the writer", do: closeFile("w")},
		{name: "close the first", do: closeFile("f")},
		{name: "link d/f as d/h", do: link("d/f", "d", "h")},
		{name: "nlink of d/f", do: getattr("d/f")},
		{name: "link a directory", do: link("d", ".", "d2")},
		{name: "link over a name", do: link("d/f", "d", "l")},
		{name: "link a symlink", root: true, do: link("d/l", ".", "l2")},
		{name: "mknod a fifo", do: mknod(".", "p", syscall.S_IFIFO|0o640, 0)},
		{name: "mknod a character device", root: true, do: mknod(".", "c", syscall.S_IFCHR|0o600, uint32(unix.Mkdev(1, 3)))},
		{name: "mknod with no type", do: mknod(".", "r", 0o600, 0)},
		{name: "mknod a directory", do: mknod(".", "x", syscall.S_IFDIR|0o755, 0)},
		{name: "mknod over a name", do: mknod(".", "d", syscall.S_IFIFO|0o644, 0)},
		{name: "unlink a missing name", do: unlink("d", "nope")},
		{name: "unlink a directory", do: unlink(".", "d")},
		{name: "unlink d/h", do: unlink("d", "h")},
		{name: "nlink of d/f after", do: getattr("d/f")},
		{name: "rmdir a file", do: rmdir("d", "f")},
		{name: "rmdir a full directory", do: rmdir(".", "d")},
		{name: "rmdir a missing name", do: rmdir(".", "nope")},
		{name: "rmdir m", do: rmdir(".", "m")},
		{name: "root nlink after", do: getattr(".")},
		{name: "rename d/f to d/g", do: rename("d", "f", "d", "g", 0)},
		{name: "lookup the old name", do: lookup("d", "f")},
		{name: "lookup the new name", do: lookup("d", "g")},
		{name: "rename without replacing", do: rename("d", "g", "d", "l", unix.RENAME_NOREPLACE)},
		{name: "rename with both flags", do: rename("d", "g", "d", "l", unix.RENAME_NOREPLACE|unix.RENAME_EXCHANGE)},
		{name: "rename to a bad name", do: rename("d", "g", "d", "", 0)},
		{name: "rename a missing name", do: rename("d", "nope", "d", "x", 0)},
		{name: "exchange d/g and d/l", do: rename("d", "g", "d", "l", unix.RENAME_EXCHANGE)},
		{name: "readlink of d/g", do: func(c *conf) string {
			e, err := c.tr.Lookup(c.id("d"), "g")
			if err != nil {
				return errText(err)
			}
			b, err := c.tr.Readlink(e.ID)
			return fmt.Sprintf("%s same as d/l: %v %s", b, e.ID == c.id("d/l"), errText(err))
		}},
		{name: "exchange with a missing name", do: rename("d", "g", "d", "nope", unix.RENAME_EXCHANGE)},
		{name: "mkdir d/e", do: mkdir(nil, "d", "e", 0o755)},
		{name: "mkdir d/e/k", do: mkdir(nil, "d/e", "k", 0o755)},
		{name: "mkdir t", do: mkdir(nil, ".", "t", 0o755)},
		{name: "rename a directory into itself", do: rename("d", "e", "d/e/k", "x", 0)},
		{name: "rename a file over a directory", do: rename("d", "l", "d", "e", 0)},
		{name: "rename a directory over a file", do: rename("d", "e", "d", "l", 0)},
		{name: "rename a directory over a full one", do: rename(".", "t", "d", "e", 0)},
		{name: "rename a directory over an empty one", do: rename("d", "e", ".", "t", 0)},
		{name: "lookup the moved directory", do: lookup(".", "t")},
		{name: "nlink of d", do: getattr("d")},
		{name: "nlink of the root", do: getattr(".")},
		{name: "exchange a directory and a file across directories", do: rename(".", "t", "d", "l", unix.RENAME_EXCHANGE)},
		{name: "nlink of d after", do: getattr("d")},
		{name: "nlink of the root after", do: getattr(".")},
		{name: "rename onto a hard link of itself", do: func(c *conf) string {
			e, err := c.tr.Lookup(c.id("d"), "g")
			if err != nil {
				return errText(err)
			}
			if _, err := c.tr.Link(c.me, e.ID, c.id("d"), "g2"); err != nil {
				return errText(err)
			}
			err = c.tr.Rename(c.id("d"), "g", c.id("d"), "g2", 0)
			e, err2 := c.tr.Lookup(c.id("d"), "g")
			return errText(err) + " " + errText(err2) + " " + attrText(e.Attr)
		}},
		{name: "mknod v1", do: mknod(".", "v1", syscall.S_IFREG|0o600, 0)},
		{name: "mknod v2", do: mknod(".", "v2", syscall.S_IFREG|0o644, 0)},
		{name: "link v2 as v3", do: link("v2", ".", "v3")},
		{name: "rename a file over a file", do: rename(".", "v1", ".", "v2", 0)},
		{name: "the replaced file", do: getattr("v3")},
		{name: "the moved file", do: lookup(".", "v2")},
		{name: "mkdir gone", do: mkdir(nil, ".", "gone", 0o755)},
		{name: "rmdir gone", do: rmdir(".", "gone")},
		{name: "getattr of a removed directory", do: getattr("gone")},
		{name: "lookup in a removed directory", do: lookup("gone", "x")},
		{name: "create in a removed directory", do: create(nil, "gone", "x", "x", rw, 0o644)},
		{name: "mkdir in a removed directory", do: mkdir(nil, "gone", "x", 0o755)},
		{name: "list a removed directory", do: list("gone")},
		{name: "open a directory", do: open("d", "dir", syscall.O_RDONLY)},
		{name: "read a directory", do: read("dir", 0, 8)},
		{name: "fstat a directory", do: fstat("dir")},
		{name: "close the directory", do: closeFile("dir")},
		{name: "list the root", do: list(".")},
		{name: "list d", do: list("d")},
		{name: "list a file", do: list("d/l")},
		{name: "tmpfile", do: tmpfile("d", "tmp", rw, 0o640)},
		{name: "write the tmpfile", do: write("tmp", "unnamed", 0)},
		{name: "getattr of the tmpfile", do: getattr("tmp")},
		{name: "link the tmpfile", do: link("tmp", "d", "named")},
		{name: "getattr of the named tmpfile", do: getattr("tmp")},
		{name: "close the tmpfile", do: closeFile("tmp")},
		{name: "read-only tmpfile", do: tmpfile("d", "x", syscall.O_RDONLY, 0o640)},
		{name: "exclusive tmpfile", do: tmpfile("d", "tx", rw|syscall.O_EXCL, 0o640)},
		{name: "link the exclusive tmpfile", do: link("tx", "d", "tx")},
		{name: "close the exclusive tmpfile", do: closeFile("tx")},
		{name: "tmpfile in a file", do: tmpfile("d/named", "x", rw, 0o640)},
		{name: "setxattr", do: setxattr("d/named", "user.a", "value", 0)},
		{name: "getxattr", do: getxattr("d/named", "user.a", 64)},
		{name: "getxattr size", do: getxattr("d/named", "user.a", 0)},
		{name: "getxattr short", do: getxattr("d/named", "user.a", 2)},
		{name: "getxattr missing", do: getxattr("d/named", "user.b", 64)},
		{name: "setxattr create existing", do: setxattr("d/named", "user.a", "v", unix.XATTR_CREATE)},
		{name: "setxattr replace missing", do: setxattr("d/named", "user.b", "v", unix.XATTR_REPLACE)},
		{name: "setxattr replace", do: setxattr("d/named", "user.a", "v2", unix.XATTR_REPLACE)},
		{name: "setxattr trusted", root: true, do: setxattr("d/named", "trusted.t", "t", 0)},
		{name: "setxattr empty", do: setxattr("d/named", "user.e", "", 0)},
		{name: "setxattr unknown namespace", do: setxattr("d/named", "other.a", "v", 0)},
		{name: "listxattr", do: listxattr("d/named")},
		{name: "removexattr", do: removexattr("d/named", "user.a")},
		{name: "removexattr missing", do: removexattr("d/named", "user.a")},
		{name: "listxattr after", do: listxattr("d/named")},
		{name: "listxattr of nothing", do: listxattr("d")},
		{name: "setxattr of a directory", do: setxattr("d", "user.d", "dir", 0)},
		{name: "getxattr of a directory", do: getxattr("d", "user.d", 16)},
		{name: "setxattr of a symlink", do: setxattr("d/l", "user.a", "v", 0)},
		{name: "getxattr of a symlink", do: getxattr("d/l", "user.a", 16)},
		{name: "listxattr of a symlink", do: listxattr("d/l")},
		{name: "removexattr of a symlink", do: removexattr("d/l", "user.a")},
		{name: "setxattr user of a fifo", do: setxattr("p", "user.a", "v", 0)},
		{name: "getxattr user of a fifo", do: getxattr("p", "user.a", 16)},
		{name: "mkdir pub", root: true, do: mkdir(nil, ".", "pub", 0o777)},
		{name: "chmod pub", root: true, do: setattr("pub", "", SetAttr{Mode: u32(0o777)})},
		{name: "create in pub as 4101", root: true, do: create(other, "pub", "o", "o", rw, 0o666)},
		{name: "close it", root: true, do: closeFile("o")},
		{name: "mkdir in pub as 4101", root: true, do: mkdir(other, "pub", "od", 0o777)},
		{name: "set-group-id directory", root: true, do: setattr("pub", "", SetAttr{Gid: u32(4200), Mode: u32(0o2777)})},
		{name: "a file inherits its gid", root: true, do: create(other, "pub", "g", "g", rw, 0o644)},
		{name: "close the inheriting file", root: true, do: closeFile("g")},
		{name: "a directory inherits gid and set-group-id", root: true, do: mkdir(other, "pub", "gd", 0o755)},
		{name: "an open file outlives its name", do: create(nil, "d", "z", "z", rw, 0o644)},
		{name: "write z", do: write("z", "still here", 0)},
		{name: "unlink z", do: unlink("d", "z")},
		{name: "read unlinked z", do: read("z", 0, 64)},
		{name: "getattr of unlinked z", do: getattr("d/z")},
		{name: "close z", do: closeFile("z")},
		{name: "getattr of z closed", do: getattr("d/z")},
		{name: "forget one reference of d/named", do: forget("d/named", 1)},
		{name: "getattr of d/named", do: getattr("d/named")},
		{name: "forget the rest of d/named", do: forget("d/named", 1<<20)},
		{name: "getattr of forgotten d/named", do: getattr("d/named")},
		{name: "lookup of d/named again", do: lookup("d", "named")},
		{name: "forget the root", do: forget(".", 1)},
		{name: "forget an unknown id", do: forget("nope", 1)},
		{name: "as", do: func(c *conf) string {
			ran := false
			err := c.tr.As(c.me, func() error { ran = true; return syscall.EDOM })
			return fmt.Sprint(ran, " ", errText(err))
		}},
		{name: "statfs of d", do: statfs("d")},
	}
}

// TestMemTreeConformance runs one script of operations on a Local tree
// over a directory and on a MemTree, and requires the same outcome of
// every step: errors, entries' IDs and attributes, data, link targets,
// extended attributes and listings.
func TestMemTreeConformance(t *testing.T) {
	dir := t.TempDir()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	local, err := NewLocal(dir, LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	mem := NewMemTree(MemOptions{Mode: st.Mode & 07777, Uid: st.Uid, Gid: st.Gid})
	defer mem.Close()
	me := &Cred{Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid())}
	root := os.Geteuid() == 0
	trees := []*conf{
		{tr: local, me: me, ids: map[string]ID{}, files: map[string]*File{}},
		{tr: mem, me: me, ids: map[string]ID{}, files: map[string]*File{}},
	}
	for _, s := range confScript() {
		if s.root && !root {
			continue
		}
		want := s.do(trees[0])
		got := s.do(trees[1])
		if got != want {
			t.Errorf("%s: MemTree %s, Local %s", s.name, got, want)
		}
		if testing.Verbose() {
			t.Logf("%s: %s", s.name, want)
		}
	}
}

// TestMemTreeCapacity: data past the capacity fails with ENOSPC and
// leaves the tree as it was; freeing data (truncate, unlink of a closed
// file) makes room again; Statfs counts what is used; a creation past the
// bound on objects fails with ENOSPC.
func TestMemTreeCapacity(t *testing.T) {
	const capacity = 16 * MemBlockSize
	tr := NewMemTree(MemOptions{Capacity: capacity, Files: 4})
	me := &Cred{}
	e, f, err := tr.Create(me, RootID, "a", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	free := func() uint64 {
		s, err := tr.Statfs(RootID)
		if err != nil {
			t.Fatal(err)
		}
		return s.Bfree
	}
	if n := free(); n != 16 {
		t.Fatalf("%d blocks free when empty, want 16", n)
	}
	if _, err := f.WriteAt(make([]byte, 10*MemBlockSize+1), 0); err != nil {
		t.Fatal(err)
	}
	if n := free(); n != 5 {
		t.Fatalf("%d blocks free after 10 blocks and a byte, want 5", n)
	}
	if n, err := f.WriteAt(make([]byte, 6*MemBlockSize), 10*MemBlockSize+1); err != syscall.ENOSPC || n != 0 {
		t.Fatalf("a write past the capacity: %d, %v; want 0, ENOSPC", n, err)
	}
	if st, _ := f.Stat(); st.Size != 10*MemBlockSize+1 || st.Blocks != 11*MemBlockSize/512 {
		t.Fatalf("after the failed write: size %d, blocks %d", st.Size, st.Blocks)
	}
	if err := f.Allocate(0, 0, capacity+1); err != syscall.ENOSPC {
		t.Fatalf("fallocate past the capacity: %v, want ENOSPC", err)
	}
	// A hole costs nothing.
	if _, err := tr.Setattr(e.ID, nil, SetAttr{Size: u64(1 << 40)}); err != nil {
		t.Fatal(err)
	}
	if n := free(); n != 5 {
		t.Fatalf("%d blocks free after a truncate up, want 5", n)
	}
	if _, err := tr.Setattr(e.ID, nil, SetAttr{Size: u64(MemBlockSize)}); err != nil {
		t.Fatal(err)
	}
	if n := free(); n != 15 {
		t.Fatalf("%d blocks free after a truncate to one block, want 15", n)
	}
	if err := tr.Unlink(RootID, "a"); err != nil {
		t.Fatal(err)
	}
	if n := free(); n != 15 {
		t.Fatalf("%d blocks free with the unlinked file open, want 15", n)
	}
	f.Close()
	if n := free(); n != 16 {
		t.Fatalf("%d blocks free after the last close, want 16", n)
	}
	// The root and three more objects.
	for i := range 3 {
		if _, err := tr.Mkdir(me, RootID, fmt.Sprint("d", i), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if s, _ := tr.Statfs(RootID); s.Ffree != 0 || s.Files != 4 {
		t.Fatalf("files %d free of %d, want 0 of 4", s.Ffree, s.Files)
	}
	if _, err := tr.Mkdir(me, RootID, "one more", 0o755); err != syscall.ENOSPC {
		t.Fatalf("a creation past the bound on objects: %v, want ENOSPC", err)
	}
}

// TestMemTreeIDs: an ID names one object for as long as the tree holds
// a reference, whatever happens to its names, and is never given again.
func TestMemTreeIDs(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	tr := NewMemTree(MemOptions{Now: func() time.Time { return now }})
	me := &Cred{}
	a, err := tr.Mkdir(me, RootID, "a", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if a.Attr.Mtim.Sec != now.Unix() {
		t.Errorf("mtime %d, want the tree's clock %d", a.Attr.Mtim.Sec, now.Unix())
	}
	seen := map[ID]bool{RootID: true, a.ID: true}
	for i := range 10 {
		e, err := tr.Mknod(me, a.ID, "f", syscall.S_IFREG|0o644, 0)
		if err != nil {
			t.Fatal(err)
		}
		if seen[e.ID] {
			t.Fatalf("round %d: ID %d given again", i, e.ID)
		}
		seen[e.ID] = true
		if err := tr.Rename(a.ID, "f", RootID, "g", 0); err != nil {
			t.Fatal(err)
		}
		l, err := tr.Lookup(RootID, "g")
		if err != nil || l.ID != e.ID {
			t.Fatalf("round %d: lookup after rename: %v, %v; want ID %d", i, l.ID, err, e.ID)
		}
		if gone := tr.Forget(e.ID, 1); gone {
			t.Fatalf("round %d: forgotten with a reference left", i)
		}
		if gone := tr.Forget(e.ID, 1); !gone {
			t.Fatalf("round %d: not forgotten at zero references", i)
		}
		if _, err := tr.Getattr(e.ID); err != syscall.ESTALE {
			t.Fatalf("round %d: getattr of a forgotten ID: %v, want ESTALE", i, err)
		}
		if err := tr.Unlink(RootID, "g"); err != nil {
			t.Fatal(err)
		}
	}
}
