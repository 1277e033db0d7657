package group

import (
	"errors"
	"testing"
)

func u(n uint32) *uint32 { return &n }

func TestParseRule(t *testing.T) {
	defer fakeLookups(t)()
	for _, tc := range []struct {
		in   string
		want Rule
	}{
		{"backup uid=34", Rule{Group: "backup", UID: u(34)}},
		{"staff gid=50", Rule{Group: "staff", GID: u(50)}},
		{"sync comm=rsync", Rule{Group: "sync", Comm: "rsync"}},
		{"b cgroup=/system.slice/backup.service", Rule{Group: "b", CgroupPrefix: "/system.slice/backup.service"}},
		{"b cgroup=/system.slice/", Rule{Group: "b", CgroupPrefix: "/system.slice"}},
		{"all cgroup=/", Rule{Group: "all", CgroupPrefix: "/"}},
		{"t/a/build uid=1001 gid=100 comm=make cgroup=/ci", Rule{Group: "t/a/build", UID: u(1001), GID: u(100), Comm: "make", CgroupPrefix: "/ci"}},
		{"x uid=0 gid=4294967294", Rule{Group: "x", UID: u(0), GID: u(4294967294)}},
		{"x uid=alice gid=wheel", Rule{Group: "x", UID: u(1001), GID: u(10)}},
		{"x comm=exactly15chars.", Rule{Group: "x", Comm: "exactly15chars."}},
		{"x comm=kworker/0:1", Rule{Group: "x", Comm: "kworker/0:1"}},
	} {
		got, err := ParseRule(tc.in)
		if err != nil || got.String() != tc.want.String() {
			t.Errorf("ParseRule(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func TestParseRuleErrors(t *testing.T) {
	defer fakeLookups(t)()
	for _, tc := range []struct{ in, want string }{
		{"", `empty rule: want "GROUP RULE...", e.g. "backup uid=34"`},
		{"uid=1", `missing group name before "uid=1": want "GROUP RULE...", e.g. "backup uid=34"`},
		{"a/ uid=1", `bad group name "a/": must not start or end with '/'`},
		{"backup", `no rules given for group "backup": want one or more of uid=N, gid=N, comm=NAME, cgroup=/PATH`},
		{"backup uid", `"uid" is not KEY=VALUE: want uid=N, gid=N, comm=NAME or cgroup=/PATH`},
		{"backup pid=1", `unknown key "pid" in "pid=1": want uid, gid, comm or cgroup`},
		{"backup uid=1 uid=2", `duplicate key "uid": conditions in one rule must all hold; repeat the rule for either of two values`},
		{"backup uid=", `empty uid: want a number or a user name`},
		{"backup gid=", `empty gid: want a number or a group name`},
		{"backup uid=-1", `bad uid "-1": want a number from 0 to 4294967294 or a user name`},
		{"backup uid=12x", `bad uid "12x": want a number from 0 to 4294967294 or a user name`},
		{"backup uid=4294967295", `bad uid "4294967295": want a number from 0 to 4294967294 or a user name`},
		{"backup gid=99999999999", `bad gid "99999999999": want a number from 0 to 4294967294 or a group name`},
		{"backup uid=nobodyknows", `unknown user "nobodyknows" for uid: want a number or an existing user name`},
		{"backup gid=nogroup", `unknown group "nogroup" for gid: want a number or an existing group name`},
		{"backup comm=", `empty comm: want a process name as in /proc/PID/comm`},
		{"backup comm=averyveryverylongname", `comm "averyveryverylongname" is 21 bytes and could never match: /proc/PID/comm holds at most 15; use "averyveryverylo"`},
		{"backup cgroup=system.slice", `bad cgroup path "system.slice": want an absolute path such as /system.slice/backup.service`},
		{"backup cgroup=", `bad cgroup path "": want an absolute path such as /system.slice/backup.service`},
		{"backup cgroup=/a//b", `bad cgroup path "/a//b": empty, "." or ".." component`},
		{"backup cgroup=/a/../b", `bad cgroup path "/a/../b": empty, "." or ".." component`},
	} {
		r, err := ParseRule(tc.in)
		if err == nil || err.Error() != tc.want {
			t.Errorf("ParseRule(%q) = %s, %v\nwant error %s", tc.in, r, err, tc.want)
		}
	}
}

// TestParseRuleRealLookup resolves a name through the system's user
// database, when it has one.
func TestParseRuleRealLookup(t *testing.T) {
	id, err := lookupUser("root")
	if err != nil || id != "0" {
		t.Skipf("no user root with uid 0: %q, %v", id, err)
	}
	r, err := ParseRule("admin uid=root")
	if err != nil || r.UID == nil || *r.UID != 0 {
		t.Errorf("ParseRule(uid=root) = %s, %v", r, err)
	}
}

// fakeLookups replaces the user database for a test and returns the undo.
func fakeLookups(t *testing.T) func() {
	t.Helper()
	users := map[string]string{"alice": "1001"}
	groups := map[string]string{"wheel": "10"}
	ou, og := lookupUser, lookupGroup
	lookupUser = func(n string) (string, error) {
		if id, ok := users[n]; ok {
			return id, nil
		}
		return "", errors.New("unknown")
	}
	lookupGroup = func(n string) (string, error) {
		if id, ok := groups[n]; ok {
			return id, nil
		}
		return "", errors.New("unknown")
	}
	return func() { lookupUser, lookupGroup = ou, og }
}
