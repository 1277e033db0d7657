package group

import (
	"errors"
	"os"
	"testing"
)

// TestTags: a tagged process and its descendants are in the tag's group;
// others are not; a process that reuses a tagged id is not.
func TestTags(t *testing.T) {
	type proc struct {
		ppid  int32
		start uint64
	}
	procs := map[int32]proc{1: {0, 1}, 100: {1, 10}, 101: {100, 11}, 102: {101, 12}, 200: {1, 20}}
	tags := &Tags{ReadStat: func(pid int32) (int32, uint64, error) {
		p, ok := procs[pid]
		if !ok {
			return 0, 0, errors.New("no such process")
		}
		return p.ppid, p.start, nil
	}}
	if _, ok := tags.Of(101); ok {
		t.Fatal("a process is tagged before any tag")
	}
	if err := tags.Tag(100, "batch"); err != nil {
		t.Fatal(err)
	}
	for pid, want := range map[int32]string{100: "batch", 101: "batch", 102: "batch", 200: "", 1: ""} {
		if g, _ := tags.Of(pid); g != want {
			t.Errorf("process %d in %q, want %q", pid, g, want)
		}
	}
	// 100 exits and its id goes to a new process.
	procs[100] = proc{1, 99}
	if g, ok := tags.Of(100); ok {
		t.Errorf("a process reusing a tagged id is in %q", g)
	}
	if err := tags.Tag(999, "x"); err == nil {
		t.Error("a process that does not exist was tagged")
	}
}

// TestReadStat reads this process's own parent and start time.
func TestReadStat(t *testing.T) {
	ppid, start, err := ReadStat(int32(os.Getpid()))
	if err != nil || ppid != int32(os.Getppid()) || start == 0 {
		t.Errorf("ReadStat(self) = %d, %d, %v; want parent %d", ppid, start, err, os.Getppid())
	}
}
