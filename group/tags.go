package group

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Tags assign process trees to groups (sluice exec): a process whose own
// process, or an ancestor, is tagged is charged to the tag's group,
// whatever the rules say. A tag holds a process by its id and start time,
// so it ends with the process and never passes to a process that reuses
// its id. Safe for concurrent use; the zero value has no tags.
type Tags struct {
	// ReadStat reads a process's parent and start time; the default is
	// ReadStat.
	ReadStat func(pid int32) (ppid int32, start uint64, err error)

	mu   sync.Mutex
	tags map[int32]tag
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

// Tag charges process pid and its descendants to group from now on. Tags
// of processes that have gone are dropped.
func (t *Tags) Tag(pid int32, group string) error {
	_, start, err := t.read(pid)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for p, tg := range t.tags {
		if _, s, err := t.read(p); err != nil || s != tg.start {
			delete(t.tags, p)
		}
	}
	if t.tags == nil {
		t.tags = map[int32]tag{}
	}
	t.tags[pid] = tag{start: start, group: group}
	return nil
}

// Of returns the group of the tagged process tree pid is in, if any.
func (t *Tags) Of(pid int32) (string, bool) {
	t.mu.Lock()
	n := len(t.tags)
	t.mu.Unlock()
	if n == 0 || pid <= 0 {
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
