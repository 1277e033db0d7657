package fsys

import (
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// openQuota bounds the files and directories each group holds open
// through the mount. Every one holds descriptors of the daemon (a backing
// file's, one per mirror of a set) until the kernel releases it, and the
// daemon's descriptors are shared by all groups: without a bound, one
// group holding opens up to the daemon's limit leaves every other
// group's opens failing with EMFILE. A group at its bound gets EMFILE for
// its own opens only.
type openQuota struct {
	max int // opens per group; at least 1

	mu    sync.Mutex
	held  map[string]int    // opens held, per group path
	files map[uint64]string // the group charged, per file handle
	dirs  map[uint64]string // the group charged, per directory handle
}

// groupMaxOpen is the per-group bound of opens for Options.GroupMaxOpen
// n: n itself, or by default a quarter of the descriptor limit.
func groupMaxOpen(n int) int {
	if n > 0 {
		return n
	}
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) != nil || l.Cur < 64 {
		return 16
	}
	return int(min(l.Cur/4, 1<<30))
}

func newOpenQuota(max int) *openQuota {
	return &openQuota{max: max, held: map[string]int{}, files: map[uint64]string{}, dirs: map[uint64]string{}}
}

// take charges an open to group g; false when g holds its bound already.
func (q *openQuota) take(g string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.held[g] >= q.max {
		return false
	}
	q.held[g]++
	return true
}

// give returns an open taken for g.
func (q *openQuota) give(g string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.giveLocked(g)
}

func (q *openQuota) giveLocked(g string) {
	if q.held[g]--; q.held[g] <= 0 {
		delete(q.held, g)
	}
}

// bind records that handle fh of table m holds the open taken for g.
func (q *openQuota) bind(m map[uint64]string, fh uint64, g string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	m[fh] = g
}

// adopt charges g for handle fh of table m, an open taken over with its
// mount: over the bound, if it must be, as the open was let in before.
func (q *openQuota) adopt(m map[uint64]string, fh uint64, g string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.held[g]++
	m[fh] = g
}

// unbind returns the open handle fh of table m holds, if any.
func (q *openQuota) unbind(m map[uint64]string, fh uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if g, ok := m[fh]; ok {
		delete(m, fh)
		q.giveLocked(g)
	}
}

// quotaRaw is the file system the FUSE server calls: raw, with each
// group's open files and directories bounded by an openQuota. Only the
// operations that open and release are its own.
type quotaRaw struct {
	*raw
	q *openQuota
}

// callerGroup is the path of the group a request's caller is in.
func (r quotaRaw) callerGroup(cancel <-chan struct{}, h *fuse.InHeader) string {
	g, _ := r.f.caller(ctxOf(cancel, h))
	return g.Path()
}

// opening runs open, an open of the caller's group g, within g's quota,
// and binds the handle it made in table m.
func (r quotaRaw) opening(g string, m map[uint64]string, fh *uint64, open func() fuse.Status) fuse.Status {
	if !r.q.take(g) {
		return fuse.Status(syscall.EMFILE)
	}
	s := open()
	if s != fuse.OK {
		r.q.give(g)
		return s
	}
	r.q.bind(m, *fh, g)
	return s
}

func (r quotaRaw) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	g := r.callerGroup(cancel, &in.InHeader)
	s := r.opening(g, r.q.files, &out.Fh, func() fuse.Status { return r.raw.Open(cancel, in, out) })
	if s == fuse.OK {
		r.f.journalOpen(false, out.Fh, g)
	}
	return s
}

func (r quotaRaw) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	g := r.callerGroup(cancel, &in.InHeader)
	s := r.opening(g, r.q.files, &out.Fh, func() fuse.Status { return r.raw.Create(cancel, in, name, out) })
	if s == fuse.OK {
		r.f.journalOpen(false, out.Fh, g)
	}
	return s
}

func (r quotaRaw) Tmpfile(cancel <-chan struct{}, in *fuse.CreateIn, out *fuse.CreateOut) fuse.Status {
	g := r.callerGroup(cancel, &in.InHeader)
	s := r.opening(g, r.q.files, &out.Fh, func() fuse.Status { return r.raw.Tmpfile(cancel, in, out) })
	if s == fuse.OK {
		r.f.journalOpen(false, out.Fh, g)
	}
	return s
}

func (r quotaRaw) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	g := r.callerGroup(cancel, &in.InHeader)
	s := r.opening(g, r.q.dirs, &out.Fh, func() fuse.Status { return r.raw.OpenDir(cancel, in, out) })
	if s == fuse.OK {
		r.f.journalOpen(true, out.Fh, g)
	}
	return s
}

func (r quotaRaw) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	r.raw.Release(cancel, in)
	r.q.unbind(r.q.files, in.Fh)
	r.f.journalClose(false, in.Fh)
}

func (r quotaRaw) ReleaseDir(in *fuse.ReleaseIn) {
	r.raw.ReleaseDir(in)
	r.q.unbind(r.q.dirs, in.Fh)
	r.f.journalClose(true, in.Fh)
}
