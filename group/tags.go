package group

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// Tags assign process trees to groups (sluice exec): a process whose own
// process, or an ancestor, is tagged is charged to the tag's group,
// whatever the rules say. A tag holds a process by its id and start time,
// so it never passes to a process that reuses its id.
//
// A process tagged while in a cgroup of its own in sluice's hierarchy
// (EnterCgroup) is tagged by that cgroup: every process in it or below
// it is in the group, also one that has left the tagged process's tree
// (a new session, a daemon re-parented to init), until the last of them
// exits. Otherwise the tag follows the parent chain and ends with the
// tagged process. Where both apply, the deepest cgroup wins, then the
// nearest tagged ancestor. Safe for concurrent use; the zero value has no
// tags.
type Tags struct {
	// ReadStat reads a process's parent and start time; the default is
	// ReadStat.
	ReadStat func(pid int32) (ppid int32, start uint64, err error)
	// ReadCgroup returns a process's path in sluice's cgroup hierarchy,
	// "" when it is in none; the default is ReadCgroup.
	ReadCgroup func(pid int32) (string, error)
	// RemoveCgroup removes a cgroup of sluice's hierarchy, named by its
	// path there, failing while a process or a cgroup is in it; an error
	// for which errors.Is(err, fs.ErrNotExist) holds says it is gone. The
	// default is RemoveCgroup.
	RemoveCgroup func(path string) error

	n       atomic.Int64 // len(tags) + len(cgroups)
	mu      sync.Mutex
	tags    map[int32]tag     // tagged processes with no cgroup of their own
	cgroups map[string]string // the group of each tagged cgroup, by path
}

type tag struct {
	start uint64
	group string
}

// ReadStat reads the parent process and the start time (clock ticks
// since boot) of process pid from /proc/PID/stat.
func ReadStat(pid int32) (ppid int32, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// pid (comm) state ppid ... starttime is field 22; comm may hold
	// spaces and parentheses, so count from the last ')'.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, 0, errors.New("malformed /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return 0, 0, errors.New("malformed /proc stat")
	}
	p, err := strconv.ParseInt(f[1], 10, 32)
	if err != nil {
		return 0, 0, err
	}
	s, err := strconv.ParseUint(f[19], 10, 64)
	return int32(p), s, err
}

func (t *Tags) read(pid int32) (int32, uint64, error) {
	if t.ReadStat != nil {
		return t.ReadStat(pid)
	}
	return ReadStat(pid)
}

func (t *Tags) readCgroup(pid int32) (string, error) {
	if t.ReadCgroup != nil {
		return t.ReadCgroup(pid)
	}
	return ReadCgroup(pid)
}

func (t *Tags) removeCgroup(p string) error {
	if t.RemoveCgroup != nil {
		return t.RemoveCgroup(p)
	}
	return RemoveCgroup(p)
}

// any reports whether there is any tag, without taking the lock.
func (t *Tags) any() bool { return t.n.Load() > 0 }

// Tag charges process pid and its descendants to group from now on: by
// its cgroup when pid is in one made for it (named ExecCgroupName(pid,
// its start time)), else by its parent chain. Tags of processes that have
// gone are dropped, and tagged cgroups that have emptied are removed.
func (t *Tags) Tag(pid int32, group string) error {
	_, start, err := t.read(pid)
	if err != nil {
		return err
	}
	cg, err := t.readCgroup(pid)
	if err != nil || path.Base(cg) != ExecCgroupName(pid, start) {
		cg = ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, tg := range t.tags {
		if _, s, err := t.read(p); err != nil || s != tg.start {
			delete(t.tags, p)
		}
	}
	// Deepest first: a cgroup is removed only once those below it are.
	for _, p := range slices.SortedFunc(maps.Keys(t.cgroups), func(a, b string) int { return len(b) - len(a) }) {
		if err := t.removeCgroup(p); err == nil || errors.Is(err, fs.ErrNotExist) {
			delete(t.cgroups, p)
		}
	}
	if cg != "" {
		if t.cgroups == nil {
			t.cgroups = map[string]string{}
		}
		t.cgroups[cg] = group
		delete(t.tags, pid)
	} else {
		if t.tags == nil {
			t.tags = map[int32]tag{}
		}
		t.tags[pid] = tag{start: start, group: group}
	}
	t.n.Store(int64(len(t.tags) + len(t.cgroups)))
	return nil
}

// Of returns the group of the tagged cgroup or process tree pid is in, if
// any.
func (t *Tags) Of(pid int32) (string, bool) {
	t.mu.Lock()
	nc, nt := len(t.cgroups), len(t.tags)
	t.mu.Unlock()
	if pid <= 0 {
		return "", false
	}
	if nc > 0 {
		if p, err := t.readCgroup(pid); err == nil && p != "" {
			t.mu.Lock()
			for ; p != "/" && p != "."; p = path.Dir(p) {
				if g, ok := t.cgroups[p]; ok {
					t.mu.Unlock()
					return g, true
				}
			}
			t.mu.Unlock()
		}
	}
	if nt == 0 {
		return "", false
	}
	for depth := 0; pid > 1 && depth < 64; depth++ {
		ppid, start, err := t.read(pid)
		if err != nil {
			return "", false
		}
		t.mu.Lock()
		tg, ok := t.tags[pid]
		t.mu.Unlock()
		if ok && tg.start == start {
			return tg.group, true
		}
		pid = ppid
	}
	return "", false
}

// TagState is the tags of a mount as handed to the process that takes it
// over (sluice mount --takeover): plain data.
type TagState struct {
	Procs   []TaggedProc      `json:"procs,omitempty"`
	Cgroups map[string]string `json:"cgroups,omitempty"` // the group of each tagged cgroup, by path
}

// TaggedProc is a process tagged by its parent chain.
type TaggedProc struct {
	Pid   int32  `json:"pid"`
	Start uint64 `json:"start"` // clock ticks since boot, as /proc/PID/stat's starttime
	Group string `json:"group"`
}

// Export returns the tags, for Import in another process.
func (t *Tags) Export() TagState {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := TagState{Cgroups: maps.Clone(t.cgroups)}
	for _, p := range slices.Sorted(maps.Keys(t.tags)) {
		s.Procs = append(s.Procs, TaggedProc{Pid: p, Start: t.tags[p].start, Group: t.tags[p].group})
	}
	return s
}

// Import adds the tags s holds, as Export returned them.
func (t *Tags) Import(s TagState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range s.Procs {
		if t.tags == nil {
			t.tags = map[int32]tag{}
		}
		t.tags[p.Pid] = tag{start: p.Start, group: p.Group}
	}
	for cg, g := range s.Cgroups {
		if t.cgroups == nil {
			t.cgroups = map[string]string{}
		}
		t.cgroups[cg] = g
	}
	t.n.Store(int64(len(t.tags) + len(t.cgroups)))
}
