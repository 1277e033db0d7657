package group

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
)

// maxComm is the longest process name the kernel keeps (TASK_COMM_LEN - 1).
const maxComm = 15

// Rule puts the callers that meet all of its set conditions into Group. A
// nil UID or GID, or an empty Comm or CgroupPrefix, is no condition; a Rule
// without conditions matches every caller.
type Rule struct {
	Group string
	// UID matches the caller's fs uid.
	UID *uint32
	// GID matches the caller's fs gid or any of its supplementary groups.
	GID *uint32
	// Comm matches the process name, /proc/PID/comm, exactly.
	Comm string
	// CgroupPrefix matches a caller with any cgroup path equal to it or
	// below it, compared by whole components. It is absolute and clean.
	CgroupPrefix string
}

// Lookups of user and group names; tests replace them.
var (
	lookupUser  = func(name string) (string, error) { u, err := user.Lookup(name); return uidOf(u), err }
	lookupGroup = func(name string) (string, error) { g, err := user.LookupGroup(name); return gidOf(g), err }
)

func uidOf(u *user.User) string {
	if u == nil {
		return ""
	}
	return u.Uid
}

func gidOf(g *user.Group) string {
	if g == nil {
		return ""
	}
	return g.Gid
}

// ParseRule parses "NAME RULE...", for example
// "backup uid=34 cgroup=/system.slice/backup.service". Each of uid, gid,
// comm and cgroup may appear once. uid and gid take a number or a user or
// group name, which is resolved now. The error does not name the flag;
// callers wrap it, as in fmt.Errorf("--group %q: %w", s, err).
func ParseRule(s string) (Rule, error) {
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return Rule{}, fmt.Errorf(`empty rule: want "GROUP RULE...", e.g. "backup uid=34"`)
	}
	if strings.Contains(fields[0], "=") {
		return Rule{}, fmt.Errorf(`missing group name before %q: want "GROUP RULE...", e.g. "backup uid=34"`, fields[0])
	}
	if err := ValidName(fields[0]); err != nil {
		return Rule{}, err
	}
	r := Rule{Group: fields[0]}
	if len(fields) == 1 {
		return Rule{}, fmt.Errorf("no rules given for group %q: want one or more of uid=N, gid=N, comm=NAME, cgroup=/PATH", r.Group)
	}
	seen := map[string]bool{}
	for _, f := range fields[1:] {
		key, val, ok := strings.Cut(f, "=")
		if !ok {
			return Rule{}, fmt.Errorf("%q is not KEY=VALUE: want uid=N, gid=N, comm=NAME or cgroup=/PATH", f)
		}
		if seen[key] {
			return Rule{}, fmt.Errorf("duplicate key %q: conditions in one rule must all hold; repeat the rule for either of two values", key)
		}
		seen[key] = true
		switch key {
		case "uid":
			id, err := parseID(val, "uid", "user", lookupUser)
			if err != nil {
				return Rule{}, err
			}
			r.UID = &id
		case "gid":
			id, err := parseID(val, "gid", "group", lookupGroup)
			if err != nil {
				return Rule{}, err
			}
			r.GID = &id
		case "comm":
			if val == "" {
				return Rule{}, fmt.Errorf("empty comm: want a process name as in /proc/PID/comm")
			}
			if len(val) > maxComm {
				return Rule{}, fmt.Errorf("comm %q is %d bytes and could never match: /proc/PID/comm holds at most %d; use %q", val, len(val), maxComm, val[:maxComm])
			}
			r.Comm = val
		case "cgroup":
			p, err := cleanCgroup(val)
			if err != nil {
				return Rule{}, err
			}
			r.CgroupPrefix = p
		default:
			return Rule{}, fmt.Errorf("unknown key %q in %q: want uid, gid, comm or cgroup", key, f)
		}
	}
	return r, nil
}

// parseID reads a numeric id or resolves a name with lookup.
func parseID(val, key, kind string, lookup func(string) (string, error)) (uint32, error) {
	if val == "" {
		return 0, fmt.Errorf("empty %s: want a number or a %s name", key, kind)
	}
	if strings.ContainsRune("0123456789-+", rune(val[0])) {
		n, err := strconv.ParseUint(val, 10, 32)
		if err != nil || n == 1<<32-1 {
			return 0, fmt.Errorf("bad %s %q: want a number from 0 to %d or a %s name", key, val, uint32(1<<32-2), kind)
		}
		return uint32(n), nil
	}
	s, err := lookup(val)
	if err != nil {
		return 0, fmt.Errorf("unknown %s %q for %s: want a number or an existing %s name", kind, val, key, kind)
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s %q has id %q, which is not a number", kind, val, s)
	}
	return uint32(n), nil
}

// cleanCgroup checks that p is an absolute cgroup path and drops a trailing
// slash.
func cleanCgroup(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("bad cgroup path %q: want an absolute path such as /system.slice/backup.service", p)
	}
	if p == "/" {
		return p, nil
	}
	p = strings.TrimSuffix(p, "/")
	for _, c := range strings.Split(p[1:], "/") {
		if c == "" || c == "." || c == ".." {
			return "", fmt.Errorf("bad cgroup path %q: empty, \".\" or \"..\" component", p)
		}
	}
	return p, nil
}

// String returns r in the form ParseRule reads, ids as numbers:
// "backup uid=34 cgroup=/system.slice/backup.service".
func (r Rule) String() string {
	var b strings.Builder
	b.WriteString(r.Group)
	if r.UID != nil {
		fmt.Fprintf(&b, " uid=%d", *r.UID)
	}
	if r.GID != nil {
		fmt.Fprintf(&b, " gid=%d", *r.GID)
	}
	if r.Comm != "" {
		b.WriteString(" comm=" + r.Comm)
	}
	if r.CgroupPrefix != "" {
		b.WriteString(" cgroup=" + r.CgroupPrefix)
	}
	return b.String()
}
