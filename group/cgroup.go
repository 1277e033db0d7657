package group

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"sluice/internal/mountinfo"
)

// sluice exec keeps its command's processes in a cgroup of their own, in a
// cgroup v1 hierarchy of sluice's with no controller attached: a child
// process starts in its parent's cgroup, and stays in it through setsid,
// daemonizing and re-parenting, so the cgroup holds every process the
// command started until the last exits. The hierarchy limits nothing and
// is seen by nothing else.
const (
	// CgroupHierarchy is the name of sluice's cgroup v1 hierarchy
	// (mount -t cgroup -o none,name=sluice).
	CgroupHierarchy = "sluice"
	// CgroupMountpoint is where EnterCgroup mounts the hierarchy when
	// the mount namespace has no mount of it.
	CgroupMountpoint = "/run/sluice/cgroup"
)

// ExecCgroupName is the name of the cgroup made for process pid that
// started at start (clock ticks since boot, as ReadStat returns).
func ExecCgroupName(pid int32, start uint64) string {
	return fmt.Sprintf("exec-%d-%d", pid, start)
}

// parseExecCgroupName is the inverse of ExecCgroupName.
func parseExecCgroupName(name string) (pid int32, start uint64, ok bool) {
	rest, ok := strings.CutPrefix(name, "exec-")
	if !ok {
		return 0, 0, false
	}
	p, s, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, 0, false
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil || n <= 0 {
		return 0, 0, false
	}
	st, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	return int32(n), st, true
}

// ReadCgroup returns the path of process pid in sluice's hierarchy, from
// /proc/PID/cgroup; "" when the hierarchy does not exist.
func ReadCgroup(pid int32) (string, error) {
	b, err := procFile(pid, "cgroup")
	if err != nil {
		return "", err
	}
	return hierarchyPath(string(b)), nil
}

// hierarchyPath returns the path on the line of sluice's hierarchy in the
// text of a /proc/PID/cgroup ("12:name=sluice:/exec-1-2").
func hierarchyPath(s string) string {
	for line := range strings.Lines(s) {
		f := strings.SplitN(strings.TrimSuffix(line, "\n"), ":", 3)
		if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "name="+CgroupHierarchy) {
			return f[2]
		}
	}
	return ""
}

// hierarchyMount returns where sluice's hierarchy is mounted, at its
// root, in the text of a /proc/self/mountinfo; "" when it is not.
func hierarchyMount(s string) string {
	for _, m := range mountinfo.Parse(s) {
		if m.FSType == "cgroup" && m.Root == "/" && slices.Contains(m.Super, "name="+CgroupHierarchy) {
			return m.Point
		}
	}
	return ""
}

// findCgroupMount returns where this mount namespace has sluice's
// hierarchy mounted.
func findCgroupMount() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	if m := hierarchyMount(string(b)); m != "" {
		return m, nil
	}
	return "", fmt.Errorf("the cgroup v1 hierarchy name=%s is not mounted", CgroupHierarchy)
}

// CgroupMount returns where sluice's hierarchy is mounted, mounting it on
// CgroupMountpoint when the mount namespace has no mount of it. The
// mount stays after sluice exits, as cgroup hierarchies do.
func CgroupMount() (string, error) {
	if m, err := findCgroupMount(); err == nil {
		return m, nil
	}
	if err := os.MkdirAll(CgroupMountpoint, 0o700); err != nil {
		return "", fmt.Errorf("mounting the cgroup v1 hierarchy name=%s: %w", CgroupHierarchy, err)
	}
	err := unix.Mount(CgroupHierarchy, CgroupMountpoint, "cgroup", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "none,name="+CgroupHierarchy)
	if err != nil {
		return "", fmt.Errorf("mounting the cgroup v1 hierarchy name=%s on %s: %w", CgroupHierarchy, CgroupMountpoint, err)
	}
	return CgroupMountpoint, nil
}

// RemoveCgroup removes the cgroup at p in sluice's hierarchy; it fails
// while a process or a cgroup is in it.
func RemoveCgroup(p string) error {
	mnt, err := findCgroupMount()
	if err != nil {
		return err
	}
	dir := filepath.Join(mnt, p)
	if err := unix.Rmdir(dir); err != nil {
		return &fs.PathError{Op: "rmdir", Path: dir, Err: err}
	}
	return nil
}

// EnterCgroup moves process pid, which started at start, into a cgroup of
// its own (ExecCgroupName) in sluice's hierarchy, below the one it is in,
// mounting the hierarchy first if need be. It returns the new cgroup's
// path in the hierarchy. On the way it removes the hierarchy's cgroups
// made for processes that are gone and that no process is in any more.
func EnterCgroup(pid int32, start uint64) (string, error) {
	mnt, err := CgroupMount()
	if err != nil {
		return "", err
	}
	sweepCgroups(mnt, func(pid int32, start uint64) bool {
		_, s, err := ReadStat(pid)
		return err == nil && s == start
	})
	cur, err := ReadCgroup(pid)
	if err != nil {
		return "", err
	}
	if cur == "" {
		return "", fmt.Errorf("process %d is in no cgroup of the hierarchy name=%s mounted on %s", pid, CgroupHierarchy, mnt)
	}
	p := path.Join(cur, ExecCgroupName(pid, start))
	dir := filepath.Join(mnt, p)
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("making cgroup %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(strconv.Itoa(int(pid)))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		unix.Rmdir(dir)
		return "", fmt.Errorf("moving process %d into cgroup %s: %w", pid, dir, err)
	}
	return p, nil
}

// sweepCgroups removes, deepest first, the cgroups below dir made for a
// process (ExecCgroupName) for which alive is false and that nothing is
// in (removing one that holds a process or a cgroup fails, and it stays).
func sweepCgroups(dir string, alive func(pid int32, start uint64) bool) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		pid, start, ok := parseExecCgroupName(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		sub := filepath.Join(dir, e.Name())
		sweepCgroups(sub, alive)
		if !alive(pid, start) {
			unix.Rmdir(sub)
		}
	}
}
