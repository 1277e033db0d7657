package backing

import (
	"runtime"
	"slices"

	"golang.org/x/sys/unix"
)

// Cred is who asks for an operation: the caller's file-system ids,
// supplementary groups and umask. Objects are created with them, so
// ownership, setgid-directory inheritance, quotas and default ACLs come out
// as they would for the caller acting on SOURCE directly.
type Cred struct {
	Uid, Gid uint32
	// Groups are the caller's supplementary groups.
	Groups []uint32
	// Umask is the caller's umask, applied to the mode of a new object
	// unless its directory has a default ACL (which then decides, as on
	// SOURCE). Zero when the kernel already applied it.
	Umask uint32
}

// creds runs functions with a caller's credentials on the calling
// goroutine's own OS thread: fsuid, fsgid and supplementary groups are
// per-thread on Linux (x/sys's raw setfsuid, setfsgid and setgroups act on
// the calling thread only). The thread is locked for the call and gets the
// process's credentials back before it is unlocked, so no other goroutine
// ever runs with a caller's identity. A caller with the process's own ids
// costs nothing.
type creds struct {
	uid, gid int
	groups   []int // the process's own supplementary groups
}

func newCreds() *creds {
	gs, _ := unix.Getgroups()
	return &creds{uid: unix.Geteuid(), gid: unix.Getegid(), groups: gs}
}

// as runs fn with c's credentials and returns its error.
func (p *creds) as(c *Cred, fn func() error) error {
	gs := make([]int, len(c.Groups))
	for i, g := range c.Groups {
		gs[i] = int(g)
	}
	// Supplementary groups decide nothing for root (its capabilities
	// override them).
	same := slices.Equal(gs, p.groups) || p.uid == 0 && c.Uid == 0
	if int(c.Uid) == p.uid && int(c.Gid) == p.gid && same {
		return fn()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if c.Uid != 0 {
		// Quotas and reserved blocks as for the caller.
		return unprivileged(func() error { return p.switched(c, gs, same, fn) })
	}
	return p.switched(c, gs, same, fn)
}

// switched runs fn with c's ids and groups on the locked calling thread.
func (p *creds) switched(c *Cred, gs []int, same bool, fn func() error) error {
	if !same {
		// Groups change while the thread still has CAP_SETGID, before the
		// fsuid drops it, and come back after the fsuid returned.
		if err := unix.Setgroups(gs); err != nil {
			return err
		}
		defer unix.Setgroups(p.groups)
	}
	unix.Setfsgid(int(c.Gid))
	defer unix.Setfsgid(p.gid)
	unix.Setfsuid(int(c.Uid))
	defer unix.Setfsuid(p.uid)
	return fn()
}

// createMode is the mode to create an object with in directory pfd so that
// it ends up as it would for the caller: the umask applies unless the
// directory has a default ACL, which the backing file system then applies
// instead (the process's own umask is 0 while a tree serves; see NewLocal).
func createMode(pfd int, mode, umask uint32) uint32 {
	if mode&umask&0o777 == 0 {
		return mode
	}
	if _, err := unix.Getxattr(procPath(pfd), "system.posix_acl_default", nil); err == nil {
		return mode // a default ACL decides
	}
	// No default ACL (or no way to tell: then the umask, never wider).
	return mode &^ (umask & 0o777)
}

// unprivileged runs fn on the calling goroutine's thread without
// CAP_SYS_RESOURCE, for work done on behalf of a caller who has no such
// capability: with it, the backing file system would let the caller exceed
// its disk quota and use the blocks reserved for root. Without root
// (nothing to drop) fn runs as it is.
func unprivileged(fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fn()
	}
	const bit = uint32(1) << (unix.CAP_SYS_RESOURCE % 32)
	const word = unix.CAP_SYS_RESOURCE / 32
	if data[word].Effective&bit == 0 {
		return fn()
	}
	drop := data
	drop[word].Effective &^= bit
	if err := unix.Capset(&hdr, &drop[0]); err != nil {
		return err
	}
	defer unix.Capset(&hdr, &data[0])
	return fn()
}
