package group

import (
	"errors"
	"os"
	"strings"
	"syscall"
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

// TestTagsCgroup: a process tagged in a cgroup made for it tags the
// cgroup: a process in it or below it is in the group though it has left
// the tagged process's tree, after the tagged process is gone, until the
// cgroup empties; a deeper tagged cgroup wins; a cgroup not named for the
// tagged process tags nothing.
func TestTagsCgroup(t *testing.T) {
	type proc struct {
		ppid   int32
		start  uint64
		cgroup string
	}
	procs := map[int32]proc{
		1:   {0, 1, "/"},
		100: {1, 10, "/exec-100-10"},
		300: {1, 30, "/exec-100-10"}, // started by 100, daemonized
		150: {100, 15, "/exec-100-10/exec-150-15"},
		400: {1, 40, "/"},
		500: {1, 50, "/exec-9-9"}, // a cgroup made for another process
		501: {500, 51, "/exec-9-9"},
		502: {1, 52, "/exec-9-9"},
	}
	exists := map[string]bool{"/exec-100-10": true, "/exec-100-10/exec-150-15": true, "/exec-9-9": true}
	removed := map[string]bool{}
	tags := &Tags{
		ReadStat: func(pid int32) (int32, uint64, error) {
			p, ok := procs[pid]
			if !ok {
				return 0, 0, errors.New("no such process")
			}
			return p.ppid, p.start, nil
		},
		ReadCgroup: func(pid int32) (string, error) {
			p, ok := procs[pid]
			if !ok {
				return "", errors.New("no such process")
			}
			return p.cgroup, nil
		},
		// As rmdir in a cgroup hierarchy: refused while a process or a
		// cgroup is in it.
		RemoveCgroup: func(cg string) error {
			if !exists[cg] {
				return syscall.ENOENT
			}
			for _, p := range procs {
				if p.cgroup == cg || strings.HasPrefix(p.cgroup, cg+"/") {
					return syscall.EBUSY
				}
			}
			for c := range exists {
				if strings.HasPrefix(c, cg+"/") {
					return syscall.EBUSY
				}
			}
			delete(exists, cg)
			removed[cg] = true
			return nil
		},
	}
	for _, tg := range []struct {
		pid   int32
		group string
	}{{100, "batch"}, {150, "inner"}, {500, "x"}} {
		if err := tags.Tag(tg.pid, tg.group); err != nil {
			t.Fatal(err)
		}
	}
	want := map[int32]string{100: "batch", 300: "batch", 150: "inner", 400: "", 500: "x", 501: "x", 502: "", 1: ""}
	for pid, w := range want {
		if g, _ := tags.Of(pid); g != w {
			t.Errorf("process %d in %q, want %q", pid, g, w)
		}
	}
	// The tagged process exits; the daemonized one is still in the group.
	delete(procs, 100)
	if g, _ := tags.Of(300); g != "batch" {
		t.Errorf("daemonized process 300 after the tagged process exited: in %q, want batch", g)
	}
	tags.Tag(400, "y")
	if len(removed) != 0 {
		t.Errorf("cgroups removed while processes are in them: %v", removed)
	}
	// Once the last process in a tagged cgroup is gone, the next tag
	// removes it and forgets it.
	delete(procs, 300)
	delete(procs, 150)
	tags.Tag(400, "y")
	if !removed["/exec-100-10"] || !removed["/exec-100-10/exec-150-15"] || len(tags.cgroups) != 0 {
		t.Errorf("removed %v, %d cgroups left; want both removed", removed, len(tags.cgroups))
	}
}

// TestTagsExport: tags exported and imported into other Tags (another
// process's, after a takeover) charge the same processes and cgroups to
// the same groups, and still never pass to a process that reuses an id.
func TestTagsExport(t *testing.T) {
	type proc struct {
		ppid   int32
		start  uint64
		cgroup string
	}
	procs := map[int32]proc{1: {0, 1, "/"}, 100: {1, 10, "/"}, 101: {100, 11, "/"},
		200: {1, 20, "/exec-200-20"}, 201: {1, 21, "/exec-200-20"}, 300: {1, 30, "/"}}
	stat := func(pid int32) (int32, uint64, error) {
		p, ok := procs[pid]
		if !ok {
			return 0, 0, errors.New("no such process")
		}
		return p.ppid, p.start, nil
	}
	cgroup := func(pid int32) (string, error) {
		p, ok := procs[pid]
		if !ok {
			return "", errors.New("no such process")
		}
		return p.cgroup, nil
	}
	old := &Tags{ReadStat: stat, ReadCgroup: cgroup, RemoveCgroup: func(string) error { return syscall.EBUSY }}
	if err := old.Tag(100, "batch"); err != nil {
		t.Fatal(err)
	}
	if err := old.Tag(200, "ci"); err != nil {
		t.Fatal(err)
	}
	s := old.Export()
	if len(s.Procs) != 1 || len(s.Cgroups) != 1 {
		t.Fatalf("exported %+v: want one process and one cgroup", s)
	}
	adopted := &Tags{ReadStat: stat, ReadCgroup: cgroup}
	adopted.Import(s)
	for pid, want := range map[int32]string{100: "batch", 101: "batch", 200: "ci", 201: "ci", 300: "", 1: ""} {
		if g, _ := adopted.Of(pid); g != want {
			t.Errorf("after import, process %d in %q, want %q", pid, g, want)
		}
	}
	procs[100] = proc{1, 99, "/"}
	if g, ok := adopted.Of(101); ok {
		t.Errorf("after import, the child of a process reusing a tagged id is in %q", g)
	}
}
