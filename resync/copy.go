package resync

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Steps watches a copy step by step; a mirror set's resync fails a step
// under way for too long with it.
type Steps interface {
	// Step marks the start of a step on what (a path from the root, "/"
	// ending a directory's); an error fails the copy with it.
	Step(what string) error
	// Pause says the copy waits on purpose until t (pacing, a flush given
	// time): the step's deadline counts from then.
	Pause(t time.Time)
}

// Copier makes a destination tree equal to a source tree (see the package
// doc). Its fields are what the copy needs from its caller; a Copier
// serves one copy at a time, and each of Prune, Tree and Changes starts
// afresh.
type Copier struct {
	// Steps is told of each step before it is taken, and of each wait
	// on purpose. The default (nil) watches nothing.
	Steps Steps
	// Pacer paces the content copied and counts the objects compared.
	// The default (nil) copies unpaced and counts nothing.
	Pacer *Pacer
	// Written names regular files, by path from the root ("/a/b"), whose
	// content is copied whatever their size and time. The default (nil)
	// names none.
	Written map[string]bool
	// Busy says the source tree changes meanwhile, so an object may be
	// renamed or removed between its lstat and its copy: it is left to a
	// later copy, and a file whose first name met went is copied under
	// the next. The default (false) fails the copy then (an object gone
	// before its lstat is passed over either way).
	Busy bool
	// Skip reports whether name, in the roots of both trees, is none of
	// the tree's: it is neither copied nor removed. The default (nil)
	// skips nothing.
	Skip func(name string) bool
	// BeforeRead and BeforeWrite, when not nil, run before each chunk of
	// a file is read from the source and written to the destination: an
	// error they return fails the copy ("copying /a/b: ..."). A mirror
	// set injects its drills' faults with them. The default (nil) runs
	// nothing.
	BeforeRead, BeforeWrite func() error
	// Copied is told of each n bytes of content written to the
	// destination, before they are paced. The default (nil) is told
	// nothing.
	Copied func(n int64)
	// Logf reports an object left as the destination has it because it
	// kept being replaced while copied. The default (nil) reports
	// nothing.
	Logf func(format string, args ...any)
	// AfterLstat, for tests, runs in a busy copy between the lstat of
	// each source object (named by its path from the root) and its copy.
	// The default (nil) runs nothing.
	AfterLstat func(rel string)

	links map[devIno]string // source file with several links -> its first path in dst
	rootD int               // the destination's root
	// pruned: a copy of changes (Changes), which compares a directory
	// present in both trees only when it changed; then inside says the
	// next entry is a changed object.
	pruned, inside bool
	whole          bool            // in Changes: compare every directory below, whatever its time
	compared       map[string]bool // directories whose entries Changes compared
}

// devIno names a file: its device and inode.
type devIno struct{ dev, ino uint64 }

// ErrWholeTree says what changed cannot be copied object by object: the
// destination lacks a directory that the changes assume, or a file of
// several names changed (its other names may be anywhere in the tree).
// The whole tree must be compared (Tree).
var ErrWholeTree = errors.New("the whole tree must be compared")

// Tree makes the tree under directory dst equal to the tree under
// directory src, comparing every object.
func (c *Copier) Tree(src, dst int) error {
	c.begin(dst, false)
	return c.root(src, dst)
}

// root makes the root dst equal to src: its entries, then its owner,
// mode, extended attributes and times, which a mirror's root serves too.
func (c *Copier) root(src, dst int) error {
	if err := c.dir(src, dst, "", true); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(src, &st); err != nil {
		return err
	}
	return CopyMeta(src, dst, &st)
}

// Change is an object changed in the source tree since the destination
// was last made equal to it.
type Change struct {
	// Path is where the object is now, from the root: "/" or "/a/b".
	Path string
	// Moved says the object was renamed into place: every directory
	// below it is compared, whatever its time.
	Moved bool
}

// Changes makes what changed in the tree under directory src since the
// tree under dst was made equal to it equal in dst, in the order given
// (parents before children): the entries of each changed directory (a
// subdirectory whose modification time differs is compared in turn, a new
// one copied whole), each changed object's attributes, and the content of
// each file in Written (whatever its size and time). A change whose path
// leads nowhere in src is skipped: the change of its parent's entries
// removes it. It returns ErrWholeTree when what changed cannot be copied
// object by object.
func (c *Copier) Changes(src, dst int, changes []Change) error {
	c.begin(dst, true)
	for _, ch := range changes {
		if err := c.step(ch.Path); err != nil {
			return err
		}
		if ch.Path == "/" {
			c.compared[""] = true
			if err := c.root(src, dst); err != nil {
				return err
			}
			continue
		}
		parent, name := path.Split(ch.Path)
		sp, err := openBeneath(src, parent)
		if noDir(err) {
			continue // gone since: the change of its parent's entries removes it
		}
		if err != nil {
			return err
		}
		dp, err := openBeneath(dst, parent)
		if err != nil {
			unix.Close(sp)
			if noDir(err) {
				return ErrWholeTree
			}
			return err
		}
		c.inside = true // a changed directory: its own entries are compared
		c.whole = ch.Moved
		err = c.entry(sp, dp, name, ch.Path)
		c.inside, c.whole = false, false
		unix.Close(sp)
		unix.Close(dp)
		if err != nil {
			return err
		}
	}
	return nil
}

// begin readies c for a copy to the tree under dst; pruned says it copies
// changes.
func (c *Copier) begin(dst int, pruned bool) {
	c.links, c.rootD = map[devIno]string{}, dst
	c.pruned, c.inside, c.whole, c.compared = pruned, false, false, nil
	if pruned {
		c.compared = map[string]bool{}
	}
}

// step tells Steps of a step on what.
func (c *Copier) step(what string) error {
	if c.Steps == nil {
		return nil
	}
	return c.Steps.Step(what)
}

// pause tells Steps of a wait on purpose until t.
func (c *Copier) pause(t time.Time) {
	if c.Steps != nil {
		c.Steps.Pause(t)
	}
}

// skip reports whether name, in the root, is none of the tree's.
func (c *Copier) skip(name string) bool { return c.Skip != nil && c.Skip(name) }

// dir makes directory dfd equal to sfd (rel is its path in the tree).
func (c *Copier) dir(sfd, dfd int, rel string, root bool) error {
	if err := c.step(rel + "/"); err != nil {
		return err
	}
	snames, err := names(sfd)
	if err != nil {
		return err
	}
	dnames, err := names(dfd)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, name := range snames {
		keep[name] = true
	}
	// What src lacks goes first: what it frees makes room for the copies.
	for _, name := range dnames {
		if root && c.skip(name) || keep[name] {
			continue
		}
		if err := c.step(rel + "/" + name); err != nil {
			return err
		}
		if err := removeAll(dfd, name); err != nil {
			return err
		}
	}
	for _, name := range snames {
		if root && c.skip(name) {
			continue
		}
		if err := c.entry(sfd, dfd, name, rel+"/"+name); err != nil {
			return err
		}
	}
	return nil
}

// entry makes name in dfd equal to name in sfd. An object renamed or
// removed meanwhile in a busy copy is left to the next, which sees where
// it ended. One replaced by another between its lstat and its open
// (swapped with a rename, in the tree itself or through a mirror set) is
// compared again, and left as dst has it when it keeps changing.
func (c *Copier) entry(sfd, dfd int, name, rel string) error {
	for try := 1; ; try++ {
		err := c.copyEntry(sfd, dfd, name, rel)
		if c.Busy && noDir(err) {
			return nil
		}
		if err != errSwapped {
			return err
		}
		if try == swapTries {
			if c.Logf != nil {
				c.Logf("%s was replaced %d times while being copied: left as it was", rel, try)
			}
			return nil
		}
	}
}

// errSwapped says the object opened is not the one an lstat found: another
// was renamed into its place meanwhile.
var errSwapped = errors.New("replaced while being copied")

// swapTries is how often entry compares an object that keeps being
// replaced.
const swapTries = 3

func (c *Copier) copyEntry(sfd, dfd int, name, rel string) error {
	if err := c.step(rel); err != nil {
		return err
	}
	if c.Pacer != nil {
		c.Pacer.Entries++
	}
	st, err := lstatAt(sfd, name)
	if errors.Is(err, syscall.ENOENT) {
		return nil // removed meanwhile: the next copy sees it gone
	}
	if err != nil {
		return err
	}
	if c.Busy && c.AfterLstat != nil {
		c.AfterLstat(rel)
	}
	typ := st.Mode & syscall.S_IFMT
	dt, derr := lstatAt(dfd, name)
	if derr == nil && dt.Mode&syscall.S_IFMT != typ {
		if err := removeAll(dfd, name); err != nil {
			return err
		}
		derr = syscall.ENOENT
	}
	if derr != nil && !errors.Is(derr, syscall.ENOENT) {
		return derr
	}
	missing := derr != nil
	inside, force := c.inside, c.Written[rel]
	c.inside = false
	switch typ {
	case syscall.S_IFDIR:
		if missing {
			if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
				return err
			}
		} else if c.pruned && !c.whole && (c.compared[rel] || !inside && dt.Mtim == st.Mtim) {
			// Compared already; or its entries are as dst has them, or
			// it changed and is compared as a change of its own.
			return nil
		}
		if c.pruned {
			c.compared[rel] = true
		}
		s, err := openSame(sfd, name, unix.O_RDONLY|unix.O_DIRECTORY, &st)
		if err != nil {
			return err
		}
		defer unix.Close(s)
		d, err := unix.Openat(dfd, name, dirFlags, 0)
		if err != nil {
			return err
		}
		defer unix.Close(d)
		if err := c.dir(s, d, rel, false); err != nil {
			return err
		}
		return CopyMeta(s, d, &st)
	case syscall.S_IFREG:
		key := devIno{st.Dev, st.Ino}
		if st.Nlink > 1 {
			if first, ok := c.links[key]; ok {
				if !missing {
					if ft, err := lstatAt(c.rootD, strings.TrimPrefix(first, "/")); err == nil && ft.Ino == dt.Ino {
						return nil
					}
					if err := unix.Unlinkat(dfd, name, 0); err != nil {
						return err
					}
					missing = true
				}
				err := unix.Linkat(c.rootD, strings.TrimPrefix(first, "/"), dfd, name, 0)
				if !c.Busy || !noDir(err) {
					return err
				}
				// Its first name went meanwhile (and was not copied):
				// this one is copied, and is the first from now on. Had
				// it stayed uncopied, a directory later copies of
				// changes do not compare would lack it.
			}
			c.links[key] = rel
		}
		if c.pruned && st.Nlink > 1 && (missing || force || dt.Size != st.Size || dt.Mtim != st.Mtim) {
			// Its other names may be anywhere in the tree.
			return ErrWholeTree
		}
		if !missing && dt.Nlink > 1 {
			// Linked elsewhere in dst where the source is not: a file of
			// its own.
			if err := unix.Unlinkat(dfd, name, 0); err != nil {
				return err
			}
			missing = true
		}
		return c.file(sfd, dfd, name, rel, &st, missing || force || dt.Size != st.Size || dt.Mtim != st.Mtim)
	case syscall.S_IFLNK:
		target, err := readlinkAt(sfd, name)
		if errors.Is(err, syscall.EINVAL) {
			return errSwapped // no longer a symlink
		}
		if err != nil {
			return err
		}
		if !missing {
			if cur, err := readlinkAt(dfd, name); err == nil && cur == target {
				return linkMeta(dfd, name, &st)
			}
			if err := unix.Unlinkat(dfd, name, 0); err != nil {
				return err
			}
		}
		if err := unix.Symlinkat(target, dfd, name); err != nil {
			return err
		}
		return linkMeta(dfd, name, &st)
	default: // fifos, sockets, devices
		if !missing && dt.Rdev != st.Rdev {
			if err := unix.Unlinkat(dfd, name, 0); err != nil {
				return err
			}
			missing = true
		}
		// O_PATH: a FIFO or a device is not opened for I/O.
		sp, err := openSame(sfd, name, unix.O_PATH, &st)
		if err != nil {
			return err
		}
		defer unix.Close(sp)
		if missing {
			if err := unix.Mknodat(dfd, name, st.Mode, int(st.Rdev)); err != nil {
				return err
			}
		}
		fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		return CopyMeta(sp, fd, &st)
	}
}

// file copies a regular file's content when changed, then its metadata.
// A write that falls short (a tree without room) fails the copy.
func (c *Copier) file(sfd, dfd int, name, rel string, st *unix.Stat_t, changed bool) error {
	s, err := c.openSource(sfd, name, rel, st)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	flags := unix.O_WRONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	if changed {
		flags |= unix.O_CREAT | unix.O_TRUNC
	}
	d, err := unix.Openat(dfd, name, flags, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(d)
	if changed {
		// Up to the size seen: a file growing meanwhile is caught up by
		// the next copy.
		buf := make([]byte, 1<<20)
		var off int64
		for off < st.Size {
			if err := c.step(rel); err != nil {
				return err
			}
			if err := fault(c.BeforeRead); err != nil {
				return fmt.Errorf("copying %s: %v", rel, err)
			}
			n, err := unix.Pread(s, buf[:min(int64(len(buf)), st.Size-off)], off)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			if err := fault(c.BeforeWrite); err != nil {
				return fmt.Errorf("copying %s: %v", rel, err)
			}
			if w, err := pwriteAll(d, buf[:n], off); err != nil {
				return fmt.Errorf("copying %s: %v at byte %d of %d", rel, err, off+int64(w), st.Size)
			}
			off += int64(n)
			if c.Copied != nil {
				c.Copied(int64(n))
			}
			if c.Pacer != nil {
				c.Pacer.Pay(int64(n))
			}
		}
		if err := unix.Ftruncate(d, off); err != nil {
			return fmt.Errorf("copying %s: %v", rel, err)
		}
		// Flushing what was written may take a while: the step's
		// deadline grows by a second for each syncRate bytes.
		if err := c.step(rel); err != nil {
			return err
		}
		c.pause(time.Now().Add(time.Duration(off / syncRate * int64(time.Second))))
		if err := unix.Fsync(d); err != nil {
			return fmt.Errorf("copying %s: %v", rel, err)
		}
	}
	return CopyMeta(s, d, st)
}

// fault runs hook (Copier.BeforeRead or BeforeWrite) when there is one.
func fault(hook func() error) error {
	if hook == nil {
		return nil
	}
	return hook()
}

// openSource opens regular file name in sfd for reading, without waiting:
// errSwapped when it is not the file st describes. A file that cannot be
// opened without waiting (a lease held on it, being broken) is tried
// again for a second before the copy fails.
func (c *Copier) openSource(sfd int, name, rel string, st *unix.Stat_t) (int, error) {
	wait := 10 * time.Millisecond
	for waited := time.Duration(0); ; waited += wait {
		fd, err := openSame(sfd, name, unix.O_RDONLY, st)
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return fd, err
		}
		if waited >= time.Second {
			return -1, fmt.Errorf("opening %s: %v", rel, err)
		}
		time.Sleep(wait)
	}
}

// syncRate is the slowest rate, in bytes a second, at which the flush of
// a file the copy wrote is not taken for blocked.
const syncRate = 16 << 20
