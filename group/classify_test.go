package group

import (
	"testing"
)

func mustRules(t *testing.T, specs ...string) *Classifier {
	t.Helper()
	c := &Classifier{}
	for _, s := range specs {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatalf("ParseRule(%q): %v", s, err)
		}
		c.Rules = append(c.Rules, r)
	}
	return c
}

func TestClassify(t *testing.T) {
	c := mustRules(t,
		"ci/build uid=1001 comm=make", // AND: both must hold
		"backup cgroup=/system.slice/backup.service",
		"staff gid=50",
		"ci uid=1001", // after ci/build: first match wins
		"ci uid=1002", // same name again: OR
		"sync comm=rsync",
	)
	v2 := func(p string) []string { return parseCgroups("0::" + p + "\n") }
	v1 := func(p string) []string {
		return parseCgroups("12:blkio:/other\n4:memory:" + p + "\n1:name=systemd:/user.slice\n0::/\n")
	}
	for _, tc := range []struct {
		name string
		k    Caller
		want string
	}{
		{"nothing matches", Caller{UID: 5, GID: 5}, "default"},
		{"uid and comm", Caller{UID: 1001, Comm: "make"}, "ci/build"},
		{"uid without comm", Caller{UID: 1001, Comm: "cc1"}, "ci"},
		{"comm without uid", Caller{UID: 7, Comm: "make"}, "default"},
		{"second uid of ci", Caller{UID: 1002, Comm: "make"}, "ci"},
		{"comm exact, not prefix", Caller{Comm: "rsyncd"}, "default"},
		{"comm", Caller{Comm: "rsync"}, "sync"},
		{"v2 cgroup equal", Caller{Cgroups: v2("/system.slice/backup.service")}, "backup"},
		{"v2 cgroup below", Caller{Cgroups: v2("/system.slice/backup.service/x")}, "backup"},
		{"v2 cgroup sibling with same prefix", Caller{Cgroups: v2("/system.slice/backup.service2")}, "default"},
		{"v2 cgroup parent", Caller{Cgroups: v2("/system.slice")}, "default"},
		{"v1 cgroup in one hierarchy", Caller{Cgroups: v1("/system.slice/backup.service/sub/leaf")}, "backup"},
		{"v1 cgroup sibling", Caller{Cgroups: v1("/system.slice/backup.services")}, "default"},
		{"v1 name=systemd", Caller{Cgroups: parseCgroups("1:name=systemd:/system.slice/backup.service\n")}, "backup"},
		{"cgroup before uid rule", Caller{UID: 1001, Cgroups: v2("/system.slice/backup.service")}, "backup"},
		{"fs gid", Caller{GID: 50}, "staff"},
		{"supplementary gid", Caller{GID: 7, Groups: []uint32{4, 50, 100}}, "staff"},
		{"gid not held", Caller{GID: 7, Groups: []uint32{4, 51}}, "default"},
		{"uid rule after gid rule", Caller{UID: 1001, GID: 50}, "staff"},
	} {
		if got := c.Classify(&tc.k); got != tc.want {
			t.Errorf("%s: Classify(%+v) = %q; want %q", tc.name, tc.k, got, tc.want)
		}
	}
}

func TestClassifyEdges(t *testing.T) {
	if got := (&Classifier{}).Classify(&Caller{UID: 0}); got != Default {
		t.Errorf("no rules: %q", got)
	}
	all := mustRules(t, "everyone cgroup=/")
	if got := all.Classify(&Caller{Cgroups: []string{"/"}}); got != "everyone" {
		t.Errorf("cgroup=/ on the root cgroup: %q", got)
	}
	if got := all.Classify(&Caller{}); got != Default {
		t.Errorf("cgroup=/ without cgroups: %q", got)
	}
	if got := (&Classifier{Rules: []Rule{{Group: "any"}}}).Classify(&Caller{}); got != "any" {
		t.Errorf("rule without conditions: %q", got)
	}
}

func TestParseCgroups(t *testing.T) {
	in := "12:blkio:/a\n4:memory:/b:c\n3:cpu,cpuacct:/a\n1:name=systemd:/user.slice/x\n0::/\nbad line\n"
	got := parseCgroups(in)
	want := []string{"/a", "/b:c", "/user.slice/x", "/"}
	if len(got) != len(want) {
		t.Fatalf("parseCgroups = %q; want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("parseCgroups = %q; want %q", got, want)
		}
	}
}

func TestNeedsProc(t *testing.T) {
	for _, tc := range []struct {
		rules                []string
		comm, cgroup, groups bool
	}{
		{nil, false, false, false},
		{[]string{"a uid=1"}, false, false, false},
		{[]string{"a uid=1", "b comm=x"}, true, false, false},
		{[]string{"a cgroup=/x"}, false, true, false},
		{[]string{"a gid=3"}, false, false, true},
		{[]string{"a gid=3 comm=y cgroup=/"}, true, true, true},
	} {
		comm, cgroup, groups := mustRules(t, tc.rules...).NeedsProc()
		if comm != tc.comm || cgroup != tc.cgroup || groups != tc.groups {
			t.Errorf("NeedsProc(%q) = %v %v %v; want %v %v %v", tc.rules, comm, cgroup, groups, tc.comm, tc.cgroup, tc.groups)
		}
	}
}
