package group

import (
	"errors"
	"math"
	"sync"
	"time"
)

// Facts are what rules may need to know about a process beyond the ids the
// kernel sends with each request.
type Facts struct {
	Comm    string
	Cgroups []string
	Groups  []uint32
}

// Need says which Facts to read.
type Need struct {
	Comm, Cgroups, Groups bool
}

func (n Need) any() bool { return n.Comm || n.Cgroups || n.Groups }

// ReadFacts reads from /proc the facts need asks for about process pid. It
// returns whatever it could read together with the errors of the rest.
func ReadFacts(pid int32, need Need) (Facts, error) {
	var f Facts
	var errs []error
	var err error
	if need.Comm {
		f.Comm, err = ReadComm(pid)
		errs = append(errs, err)
	}
	if need.Cgroups {
		f.Cgroups, err = ReadCgroups(pid)
		errs = append(errs, err)
	}
	if need.Groups {
		f.Groups, err = ReadGroups(pid)
		errs = append(errs, err)
	}
	return f, errors.Join(errs...)
}

// Resolver classifies FUSE callers, caching for a while which process each
// thread belongs to and the facts read about each process. The time is
// passed in; the Resolver never reads the clock. Its methods are safe for
// concurrent use. Make one with NewResolver and change its exported fields,
// if at all, before the first call to Group.
type Resolver struct {
	// TTL is how long a thread's process id and a process's facts are
	// reused before /proc is read again; it bounds how late a process that
	// changes its name or cgroup is reclassified. A negative TTL disables
	// caching. The default is 1s.
	TTL time.Duration
	// MaxEntries bounds each of the two caches; when one is full, expired
	// entries and then arbitrary ones are dropped. The default is 4096.
	MaxEntries int
	// ReadTgid returns the process id of a thread. The default is Tgid.
	ReadTgid func(tid int32) (int32, error)
	// ReadFacts reads what need asks for about a process, returning what it
	// could along with any error. The default is ReadFacts.
	ReadFacts func(pid int32, need Need) (Facts, error)
	// ReadGroups reads a thread's supplementary groups. The default is
	// ReadGroups.
	ReadGroups func(tid int32) ([]uint32, error)
	// Ident returns a number naming a thread or process id as the thread
	// or process it is now, one that a later thread given the same id
	// does not get. Every cached entry holds the number of the thread or
	// process it was read for, taken before the read, and is used only
	// while that number is the asker's: a thread or process that reuses
	// the id of one gone is read anew, never charged to the group of the
	// one before. The default is Ident.
	Ident func(id int32) (uint64, error)
	// Tags, when not nil, charge tagged process trees to their groups
	// ahead of the rules.
	Tags *Tags

	c    *Classifier
	need Need

	mu     sync.Mutex
	tgids  map[int32]entry[process]
	facts  map[int32]entry[Facts]
	groups map[int32]entry[[]uint32] // by thread
	tagged map[int32]entry[string]   // by process: its tag's group, or ""
}

// entry is a cached value, the time it was read, in ns, and the Ident of
// the thread or process it was read for.
type entry[T any] struct {
	v  T
	at int64
	id uint64
}

// process is what a thread id resolved to: its process and that process's
// Ident; pid is 0 when it could not be read.
type process struct {
	pid int32
	id  uint64
}

// NewResolver returns a Resolver for the rules of c with default settings.
// It reads /proc only for the facts c's rules look at (see
// Classifier.NeedsProc); c.Rules must not change afterwards.
func NewResolver(c *Classifier) *Resolver {
	comm, cgroup, groups := c.NeedsProc()
	return &Resolver{
		TTL:        time.Second,
		MaxEntries: 4096,
		ReadTgid:   Tgid,
		ReadFacts:  ReadFacts,
		ReadGroups: ReadGroups,
		Ident:      Ident,
		c:          c,
		need:       Need{Comm: comm, Cgroups: cgroup, Groups: groups},
		tgids:      map[int32]entry[process]{},
		facts:      map[int32]entry[Facts]{},
		groups:     map[int32]entry[[]uint32]{},
	}
}

// Group returns the group name of a FUSE caller: uid and gid are the fs ids
// and tid the thread id the kernel sent with the request, and now is the
// current time in ns on any monotonic clock. A tid of 0 (a request the
// kernel originated, or a caller in a pid namespace sluice cannot see) is
// classified by uid and gid alone, as is a thread whose process cannot be
// read from /proc; such failures are cached like successes. A time before
// that of a cached entry makes the entry stale. With no tags and no rule
// looking at /proc, nothing is read; otherwise each call takes the
// thread's Ident, and cached entries serve it while it matches.
func (r *Resolver) Group(now int64, uid, gid uint32, tid uint32) string {
	k := Caller{UID: uid, GID: gid}
	tagged := r.Tags != nil && r.Tags.any()
	if tid == 0 || tid > math.MaxInt32 || !tagged && !r.need.any() {
		return r.c.Classify(&k)
	}
	p := r.processOf(now, int32(tid))
	if p.pid <= 0 {
		return r.c.Classify(&k)
	}
	if tagged {
		g := cached(r, &r.tagged, p.pid, p.id, now, func(pid int32) string {
			g, _ := r.Tags.Of(pid)
			return g
		})
		if g != "" {
			return g
		}
	}
	if r.need.any() {
		f := r.procFacts(now, p)
		k.PID, k.Comm, k.Cgroups, k.Groups = p.pid, f.Comm, f.Cgroups, f.Groups
	}
	return r.c.Classify(&k)
}

// Groups returns the supplementary groups of thread tid, for creating
// objects with the caller's credentials. They are the thread's own (a
// thread may change its groups alone, and the kernel checks the thread's),
// cached like the rest; nil when tid is 0 or cannot be read.
func (r *Resolver) Groups(now int64, tid uint32) []uint32 {
	if tid == 0 || tid > math.MaxInt32 {
		return nil
	}
	id, ok := r.ident(int32(tid))
	if !ok {
		return nil
	}
	read := r.ReadGroups
	if read == nil {
		read = ReadGroups
	}
	return cached(r, &r.groups, int32(tid), id, now, func(tid int32) []uint32 {
		gs, err := read(tid)
		if err != nil {
			return nil
		}
		return gs
	})
}

// ident returns the Ident of id; ok is false when it cannot be read.
// Without caching it is never needed, and is 0.
func (r *Resolver) ident(id int32) (_ uint64, ok bool) {
	if r.ttl() < 0 {
		return 0, true
	}
	read := r.Ident
	if read == nil {
		read = Ident
	}
	n, err := read(id)
	return n, err == nil
}

// processOf returns the process of thread tid, with pid 0 if it cannot
// be read.
func (r *Resolver) processOf(now int64, tid int32) process {
	id, ok := r.ident(tid)
	if !ok {
		return process{}
	}
	read := r.ReadTgid
	if read == nil {
		read = Tgid
	}
	return cached(r, &r.tgids, tid, id, now, func(tid int32) process {
		pid, err := read(tid)
		if err != nil || pid <= 0 {
			return process{}
		}
		if pid == tid {
			return process{pid, id}
		}
		pidID, ok := r.ident(pid)
		if !ok {
			return process{}
		}
		return process{pid, pidID}
	})
}

// procFacts returns what is known about process p.
func (r *Resolver) procFacts(now int64, p process) Facts {
	read := r.ReadFacts
	if read == nil {
		read = ReadFacts
	}
	return cached(r, &r.facts, p.pid, p.id, now, func(pid int32) Facts {
		f, _ := read(pid, r.need) // partial facts classify as well as they can
		return f
	})
}

// cached returns (*m)[key] while it is fresh at now and was read for the
// thread or process whose Ident is id; otherwise it reads the value anew,
// outside the lock, and stores it.
func cached[T any](r *Resolver, m *map[int32]entry[T], key int32, id uint64, now int64, read func(int32) T) T {
	r.mu.Lock()
	e, ok := (*m)[key]
	r.mu.Unlock()
	if ok && e.id == id && r.fresh(now, e.at) {
		return e.v
	}
	v := read(key)
	r.mu.Lock()
	*m = store(r, *m, key, entry[T]{v, now, id}, now)
	r.mu.Unlock()
	return v
}

func (r *Resolver) ttl() int64 {
	if r.TTL == 0 {
		return int64(time.Second)
	}
	return int64(r.TTL)
}

func (r *Resolver) fresh(now, at int64) bool {
	ttl := r.ttl()
	return ttl > 0 && now >= at && now-at < ttl
}

// store puts e under key in m, making room first if m is full. It is called
// with r.mu held and returns m, allocated if it was nil.
func store[T any](r *Resolver, m map[int32]entry[T], key int32, e entry[T], now int64) map[int32]entry[T] {
	if r.ttl() < 0 {
		return m
	}
	if m == nil {
		m = map[int32]entry[T]{}
	}
	limit := r.MaxEntries
	if limit <= 0 {
		limit = 4096
	}
	if _, ok := m[key]; !ok && len(m) >= limit {
		for k, old := range m {
			if !r.fresh(now, old.at) {
				delete(m, k)
			}
		}
		// Still full: drop a quarter, whichever come first, so that the
		// sweep above runs once per many inserts rather than on each.
		if len(m) >= limit {
			for k := range m {
				if len(m) < limit-limit/4 {
					break
				}
				delete(m, k)
			}
		}
	}
	m[key] = e
	return m
}
