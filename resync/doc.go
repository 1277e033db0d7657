// Package resync makes one directory tree equal to another, by
// descriptors: a mirror set's resync copies a healthy mirror onto a stale
// one with it while the set keeps serving from the healthy ones.
//
// A Copier holds what a copy needs from its caller (its pacing, the
// deadline of its steps, its injected faults, what it reports); its Prune,
// Tree and Changes walk a source tree and a destination tree open as
// directory descriptors. The copy promises:
//
//   - It never follows a symlink: both trees are walked by descriptor,
//     every open is O_NOFOLLOW, and a path from a root is resolved
//     beneath it through no symlink (RESOLVE_NO_SYMLINKS and
//     RESOLVE_BENEATH). A symlink is copied as a symlink.
//   - What the source lacks, or holds as another type, is removed first:
//     Prune removes it from the whole tree before anything is copied, and
//     each directory compared loses it before its entries are copied, so
//     what it frees makes room for the copies.
//   - An object swapped while it is copied is detected: the object opened
//     is checked to be the one an lstat found (type, device, inode), and
//     one renamed into its place meanwhile is compared again, up to three
//     times, then left as the destination has it (Copier.Logf says so).
//   - Every write is checked: a write that falls short with no error is
//     retried from where it stopped, one that writes nothing fails with
//     ENOSPC, and a failed write fails the copy, naming the file and the
//     byte it reached. A file written is truncated to what was copied and
//     flushed (fsync) before its attributes are set.
//   - It opens nothing it could block on: every open is O_NONBLOCK, a FIFO
//     or a device is opened O_PATH only (never for I/O), and a file held
//     by a lease is tried again for a second before the copy fails.
//   - A regular file's content is copied when its size or modification
//     time differs, or when Copier.Written names it; a file is copied up
//     to the size an lstat saw (one growing meanwhile is caught up by a
//     later copy). A file of several names in the source is one file of
//     as many names in the destination, and a destination file linked
//     where the source's is not becomes a file of its own.
//   - Owner, mode, extended attributes (ACLs among them) and times are
//     copied for every object; owner and times for a symlink.
//   - Each step (a system call on one object, a chunk of a file) is told
//     to Copier.Steps first, which may fail the copy; a wait on purpose
//     (pacing, a flush given time) is told to it too.
//
// With Copier.Busy the source changes meanwhile: an object renamed or
// removed between its lstat and its copy is left to a later copy, which
// sees where it ended.
package resync
