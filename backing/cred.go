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
