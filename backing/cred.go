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
	// Umask is applied by the backing file system to the mode of a new
	// object (together with any default ACL of its directory). Zero when
	// the kernel already applied the caller's umask.
	Umask uint32
}

func (c *Cred) equal(o *Cred) bool {
	return c.Uid == o.Uid && c.Gid == o.Gid && c.Umask == o.Umask && slices.Equal(c.Groups, o.Groups)
}

// creds runs functions on a fixed set of OS threads that take on a
// caller's credentials. Each thread has its own umask (its file-system
// context is unshared from the process), and sets its fsuid, fsgid and
// supplementary groups per call, only when they differ from the last
// call's. The threads never run other goroutines.
type creds struct {
	work chan credJob
}

type credJob struct {
	c    *Cred
	fn   func() error
	done chan error
}

func newCreds(n int) *creds {
	p := &creds{work: make(chan credJob)}
	for range n {
		go p.worker()
	}
	return p
}

// as runs fn with c's credentials and returns its error.
func (p *creds) as(c *Cred, fn func() error) error {
	j := credJob{c: c, fn: fn, done: make(chan error, 1)}
	p.work <- j
	return <-j.done
}

func (p *creds) close() { close(p.work) }

func (p *creds) worker() {
	// Never unlocked: the thread's credentials and umask are its own, and
	// it exits with this goroutine.
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		// Without a private umask the caller's umask cannot be applied
		// per thread; fail every job rather than create wrong modes.
		for j := range p.work {
			j.done <- err
		}
		return
	}
	unix.Umask(0)
	cur := Cred{}
	groups := []int{}
	unix.Setgroups(groups)
	for j := range p.work {
		if !cur.equal(j.c) {
			if err := switchTo(&cur, j.c); err != nil {
				// Back to root so a half-switched thread does no harm.
				switchTo(&cur, &Cred{})
				j.done <- err
				continue
			}
		}
		j.done <- j.fn()
	}
	// The thread exits with the goroutine (locked, never unlocked).
}

// switchTo changes the calling thread's credentials from cur to c. The
// supplementary groups change first, while the thread still has
// CAP_SETGID; fsuid and fsgid act on this thread only.
func switchTo(cur *Cred, c *Cred) error {
	if !slices.Equal(cur.Groups, c.Groups) {
		gs := make([]int, len(c.Groups))
		for i, g := range c.Groups {
			gs[i] = int(g)
		}
		if err := unix.Setgroups(gs); err != nil {
			return err
		}
		cur.Groups = slices.Clone(c.Groups)
	}
	if cur.Gid != c.Gid {
		unix.Setfsgid(int(c.Gid))
		cur.Gid = c.Gid
	}
	if cur.Uid != c.Uid {
		unix.Setfsuid(int(c.Uid))
		cur.Uid = c.Uid
	}
	if cur.Umask != c.Umask {
		unix.Umask(int(c.Umask))
		cur.Umask = c.Umask
	}
	return nil
}
