package group

import (
	"slices"
	"strings"
)

// Caller describes who issued a request. UID and GID are the fs ids the
// kernel reports with the request; the other fields come from /proc and are
// empty when not read or not readable.
type Caller struct {
	UID, GID uint32
	// Groups are the supplementary group ids.
	Groups []uint32
	// PID is the thread-group id (the process), 0 if unknown.
	PID int32
	// Comm is the process name, as in /proc/PID/comm.
	Comm string
	// Cgroups are the caller's cgroup paths in every hierarchy, v1 and v2.
	Cgroups []string
}

// Classifier maps callers to group names by the first matching rule. It is
// pure: it reads nothing but its arguments.
type Classifier struct {
	Rules []Rule
}

// Classify returns the group of the first rule k matches, or Default.
func (c *Classifier) Classify(k *Caller) string {
	for i := range c.Rules {
		if c.Rules[i].Matches(k) {
			return c.Rules[i].Group
		}
	}
	return Default
}

// Matches reports whether k meets every condition of r.
func (r *Rule) Matches(k *Caller) bool {
	if r.UID != nil && *r.UID != k.UID {
		return false
	}
	if r.GID != nil && *r.GID != k.GID && !slices.Contains(k.Groups, *r.GID) {
		return false
	}
	if r.Comm != "" && r.Comm != k.Comm {
		return false
	}
	if r.CgroupPrefix != "" && !slices.ContainsFunc(k.Cgroups, func(p string) bool { return underCgroup(p, r.CgroupPrefix) }) {
		return false
	}
	return true
}

// underCgroup reports whether path is prefix or lies below it, by whole
// components.
func underCgroup(path, prefix string) bool {
	if prefix == "/" {
		return strings.HasPrefix(path, "/")
	}
	rest, ok := strings.CutPrefix(path, prefix)
	return ok && (rest == "" || rest[0] == '/')
}

// NeedsProc reports which facts from /proc the rules look at, so that a
// driver reads only those: the process name, the cgroup paths, and the
// supplementary groups.
func (c *Classifier) NeedsProc() (comm, cgroup, groups bool) {
	for _, r := range c.Rules {
		comm = comm || r.Comm != ""
		cgroup = cgroup || r.CgroupPrefix != ""
		groups = groups || r.GID != nil
	}
	return comm, cgroup, groups
}
