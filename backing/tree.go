// Package backing is sluice's backing layer: the objects behind a mount,
// held by identity rather than by path.
//
// Every object the kernel knows of is an ID that stays bound to one backing
// object for its whole life: a rename, a symlink swapped in for a
// directory, or an inode number reused by a new file never redirects it.
// Operations name objects by ID (and, for entries, a parent ID and one path
// component); nothing is resolved from SOURCE's path after the tree is
// opened, so nothing reached through the tree lies outside SOURCE.
//
// Objects are created with the caller's credentials ([Cred]); everything
// else runs as the serving process after the kernel has checked the
// caller's permissions (the mount uses default_permissions and POSIX
// ACLs), as libfuse's passthrough_hp and virtiofsd do.
//
// [Local] serves a directory of a local or network file system. The Tree
// interface lets other backings stand in its place: [Mirror], a mirror
// set of several directories; [MemTree], a tree held in memory, with
// the errors and attributes Local gives for the same operations (a test
// runs one script on both), for tests and simulations that need a file
// system but not a disk; and [FaultTree], which wraps any Tree and
// injects errors and delays by operation and path, seeded, as rules
// ([FaultRule]). The files and directory streams of the last two have no
// descriptor: File.Fd returns -1, and fsys neither splices nor passes
// through such a file. [Faults] is the older, coarser injector: one
// delay and error for all reads or all writes of a Local tree's files.
package backing

import "syscall"

// ID names a backing object. IDs are never reused within a Tree; RootID
// is SOURCE itself.
type ID uint64

// RootID is the ID of the tree's root directory.
const RootID ID = 1

// Entry is an object as a lookup or a creation returns it: its ID (one
// more reference for the caller to Forget) and its attributes.
type Entry struct {
	ID   ID
	Attr syscall.Stat_t
}

// SetAttr says which attributes Setattr changes.
type SetAttr struct {
	Mode        *uint32 // permission and set-id bits
	Uid, Gid    *uint32
	Size        *uint64
	Atime       *syscall.Timespec // nil: unchanged; Nsec UTIME_NOW for now
	Mtime       *syscall.Timespec
	KillSuidgid bool // clear set-id bits as a write by a non-owner would
}

// Tree is a backing tree. Methods are safe for concurrent use. Errors are
// syscall.Errno values, as the backing file system returned them.
type Tree interface {
	// Lookup finds name in directory parent. The entry carries one
	// reference.
	Lookup(parent ID, name string) (Entry, error)
	// Forget drops n references to id; at zero the tree forgets it. It
	// reports whether the object is gone from the tree.
	Forget(id ID, n uint64) bool
	Getattr(id ID) (syscall.Stat_t, error)
	// Setattr changes attributes; f, when not nil, is an open file of id
	// to use (a file opened for writing may be truncated even if its mode
	// no longer allows it).
	Setattr(id ID, f *File, set SetAttr) (syscall.Stat_t, error)
	Readlink(id ID) ([]byte, error)

	Mknod(c *Cred, parent ID, name string, mode, dev uint32) (Entry, error)
	Mkdir(c *Cred, parent ID, name string, mode uint32) (Entry, error)
	Symlink(c *Cred, parent ID, name, target string) (Entry, error)
	Link(c *Cred, id, parent ID, name string) (Entry, error)
	Unlink(parent ID, name string) error
	Rmdir(parent ID, name string) error
	Rename(parent ID, name string, newParent ID, newName string, flags uint32) error

	// Create opens name in parent, creating it with mode if it does not
	// exist; it never follows a symlink at name.
	Create(c *Cred, parent ID, name string, flags, mode uint32) (Entry, *File, error)
	// Tmpfile creates an unnamed file in directory parent (O_TMPFILE).
	Tmpfile(c *Cred, parent ID, flags, mode uint32) (Entry, *File, error)
	// Open opens id with the open(2) flags given (O_CREAT, O_EXCL and
	// O_NOCTTY are ignored).
	Open(id ID, flags uint32) (*File, error)
	// OpenDir opens directory id for reading its entries.
	OpenDir(id ID) (*Dir, error)

	Statfs(id ID) (syscall.Statfs_t, error)
	Getxattr(id ID, name string, dest []byte) (int, error)
	Listxattr(id ID, dest []byte) (int, error)
	Setxattr(id ID, name string, data []byte, flags int) error
	Removexattr(id ID, name string) error

	// As runs fn with the caller's credentials, so that what fn does to
	// the backing file system is refused where the caller would be.
	As(c *Cred, fn func() error) error

	// Close releases what the tree holds.
	Close() error
}
