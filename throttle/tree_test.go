package throttle

import (
	"math"
	"strings"
	"testing"
	"time"
)

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("%s did not panic", what)
		}
	}()
	f()
}

func TestGroupPaths(t *testing.T) {
	tree := New(Config{})
	ab := tree.Group("a//b/")
	if ab.Path() != "a/b" {
		t.Errorf("Path = %q, want a/b", ab.Path())
	}
	for _, p := range []string{"a/b", "/a/b", "a/./b", "x/../a/b", "../a/b"} {
		if g := tree.Group(p); g != ab {
			t.Errorf("Group(%q) = %q, not the same group as a/b", p, g.Path())
		}
	}
	a := tree.Lookup("a")
	if a == nil || ab.Parent() != a || a.Parent() != nil {
		t.Errorf("parents: a=%v, a/b's parent=%v, a's parent=%v", a, ab.Parent(), a.Parent())
	}
	if !a.Limits().Unlimited() || a.Limited() {
		t.Errorf("an implicitly created ancestor is limited: %v", a.Limits())
	}
	if tree.Lookup("nope") != nil || tree.Lookup("") != nil {
		t.Errorf("Lookup found a group that was never created")
	}
	tree.Group("c")
	var paths []string
	for _, g := range tree.Groups() {
		paths = append(paths, g.Path())
	}
	if got := strings.Join(paths, " "); got != "a a/b c" {
		t.Errorf("Groups = %q, want parents before children, sorted", got)
	}
	for _, p := range []string{"", "/", "//", ".", "a/.."} {
		mustPanic(t, "Group("+p+")", func() { tree.Group(p) })
	}
	mustPanic(t, "Eligible(nil)", func() { tree.Eligible(0, nil, Read) })
	mustPanic(t, "Eligible of another tree's group", func() { New(Config{}).Eligible(0, a, Read) })
	mustPanic(t, "Eligible(Dir(2))", func() { tree.Eligible(0, a, Dir(2)) })
}

func TestLimited(t *testing.T) {
	tree := New(Config{})
	leaf := tree.Group("t/a/build")
	other := tree.Group("u")
	tree.SetLimits(0, "t", Limits{WIOPS: 5})
	if !leaf.Limited() || !tree.Lookup("t").Limited() || other.Limited() {
		t.Errorf("Limited: leaf %v, t %v, u %v; want true, true, false", leaf.Limited(), tree.Lookup("t").Limited(), other.Limited())
	}
	tree.SetLimits(0, "t", Limits{})
	if leaf.Limited() {
		t.Errorf("leaf still limited after its ancestor went to max")
	}
}

func TestLimitsString(t *testing.T) {
	for _, tc := range []struct {
		l    Limits
		want string
	}{
		{Limits{}, "rbps=max wbps=max riops=max wiops=max"},
		{Limits{RBPS: 10 * MiB}, "rbps=10485760 wbps=max riops=max wiops=max"},
		{Limits{WBPS: 1, RIOPS: 100, WIOPS: 7}, "rbps=max wbps=1 riops=100 wiops=7"},
	} {
		if got := tc.l.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.l, got, tc.want)
		}
		if got := tc.l.Unlimited(); got != (tc.l == Limits{}) {
			t.Errorf("%v.Unlimited() = %v", tc.l, got)
		}
	}
	err := Limits{RBPS: 1, WIOPS: -1}.Validate()
	if err == nil || !strings.Contains(err.Error(), "wiops=-1") {
		t.Errorf("Validate = %v, want an error naming wiops=-1", err)
	}
	mustPanic(t, "SetLimits(negative)", func() { New(Config{}).SetLimits(0, "a", Limits{RBPS: -1}) })
	mustPanic(t, "New(negative burst)", func() { New(Config{Burst: -1}) })
	c := Config{}
	c.EnsureDefaults()
	if c.Burst != 10*time.Millisecond {
		t.Errorf("default Burst = %v, want 10ms", c.Burst)
	}
}

// TestLimitChange: a change sets the keys it names, to max as well as to
// a rate, and leaves the others as they are.
func TestLimitChange(t *testing.T) {
	cur := Limits{RBPS: 1, WBPS: 2, RIOPS: 3, WIOPS: 4}
	for _, tc := range []struct {
		c    LimitChange
		want Limits
	}{
		{LimitChange{}, cur},
		{LimitChange{Keys: KeyRIOPS, To: Limits{RBPS: 9, RIOPS: 30}}, Limits{RBPS: 1, WBPS: 2, RIOPS: 30, WIOPS: 4}},
		{LimitChange{Keys: KeyRBPS | KeyWIOPS}, Limits{WBPS: 2, RIOPS: 3}},
		{LimitChange{Keys: KeyWBPS, To: Limits{WBPS: 20}}, Limits{RBPS: 1, WBPS: 20, RIOPS: 3, WIOPS: 4}},
		{SetAll(Limits{WIOPS: 40}), Limits{WIOPS: 40}},
		{SetAll(Limits{}), Limits{}},
	} {
		if got := tc.c.Apply(cur); got != tc.want {
			t.Errorf("%+v.Apply(%v) = %v, want %v", tc.c, cur, got, tc.want)
		}
	}
}

// TestChargeOneStep: a charge reaches every level at once and Eligible is
// the latest schedule over the levels.
func TestChargeOneStep(t *testing.T) {
	tree := New(Config{})
	p, a, b := tree.Group("p"), tree.Group("p/a"), tree.Group("p/b")
	tree.SetLimits(0, "p", Limits{RBPS: 10 * MiB})
	tree.SetLimits(0, "p/a", Limits{RBPS: 5 * MiB})
	tree.Charge(0, a, Read, MiB, 1)
	for _, tc := range []struct {
		g    *Group
		d    Dir
		want int64
	}{
		{a, Read, 200 * ms}, // a's own limit is the later one
		{b, Read, 100 * ms}, // b waits for the parent only
		{p, Read, 100 * ms},
		{a, Write, 0}, // writes are not touched
	} {
		if got := tree.Eligible(0, tc.g, tc.d); got != tc.want {
			t.Errorf("Eligible(%s, %v) = %d, want %d", tc.g.Path(), tc.d, got, tc.want)
		}
	}
	if got := tree.Eligible(300*ms, a, Read); got != 300*ms {
		t.Errorf("Eligible after the schedule = %d, want now", got)
	}
	// The I/Os are charged to every level too: 2 I/Os at riops=4 on p put
	// p and both children 500 ms out.
	tree.SetLimits(0, "p", Limits{RIOPS: 4})
	tree.SetLimits(0, "p/a", Limits{})
	tree.Charge(0, a, Read, MiB, 2)
	for _, g := range []*Group{p, a, b} {
		if got := tree.Eligible(0, g, Read); got != 500*ms {
			t.Errorf("after 2 I/Os at riops=4: Eligible(%s) = %d, want 500ms", g.Path(), got)
		}
	}
	mustPanic(t, "Charge(negative)", func() { tree.Charge(0, a, Read, -1, 0) })
}

// TestHierarchy runs continuously backlogged groups under a limited parent
// for 10 s: the parent's limit bounds the sum, a child's tighter limit
// governs that child, and the parent's spare capacity goes to the others.
func TestHierarchy(t *testing.T) {
	const T = 10 * sec
	const req = 64 * KiB
	for _, tc := range []struct {
		name   string
		limits map[string]Limits
		groups []string
		want   map[string]int64 // bytes per second
	}{
		{"siblings share the parent", map[string]Limits{"p": {RBPS: 10 * MiB}},
			[]string{"p/a", "p/b"}, map[string]int64{"p/a": 5 * MiB, "p/b": 5 * MiB}},
		{"tight child governs itself", map[string]Limits{"p": {RBPS: 10 * MiB}, "p/a": {RBPS: 2 * MiB}},
			[]string{"p/a", "p/b"}, map[string]int64{"p/a": 2 * MiB, "p/b": 8 * MiB}},
		{"loose child follows the parent", map[string]Limits{"p": {RBPS: 10 * MiB}, "p/a": {RBPS: 20 * MiB}},
			[]string{"p/a", "p/b"}, map[string]int64{"p/a": 5 * MiB, "p/b": 5 * MiB}},
		{"alone under a looser parent", map[string]Limits{"p": {RBPS: 10 * MiB}, "p/a": {RBPS: 2 * MiB}},
			[]string{"p/a"}, map[string]int64{"p/a": 2 * MiB}},
		{"parent iops", map[string]Limits{"p": {RIOPS: 160}},
			[]string{"p/a", "p/b"}, map[string]int64{"p/a": 80 * req, "p/b": 80 * req}},
		{"grandparent", map[string]Limits{"t": {RBPS: 10 * MiB}, "t/x": {RBPS: 1 * MiB}},
			[]string{"t/x/a", "t/x/b", "t/y"}, map[string]int64{"t/x/a": MiB / 2, "t/x/b": MiB / 2, "t/y": 9 * MiB}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, Config{})
			for p, l := range tc.limits {
				s.limit(p, l)
			}
			for _, g := range tc.groups {
				s.backlog(g, Read, req, 4)
			}
			s.run(T)
			var sum, wantSum int64
			for g, rate := range tc.want {
				// Each rate is met to within one request and the burst.
				within(t, g+" bytes", s.got[g], rate*T/sec, req+rate/100)
				sum += s.got[g]
				wantSum += rate * T / sec
			}
			within(t, "total bytes", sum, wantSum, req)
		})
	}
}

// TestRefund: a refund is exact and bounded. (Its effect on the schedule
// of every level is traced in testdata/refund.)
func TestRefund(t *testing.T) {
	// A refund is exact at an odd rate: charging and refunding the same
	// bytes restores the schedule to the nanosecond and the remainder.
	odd := New(Config{})
	g := odd.Group("g")
	odd.SetLimits(0, "g", Limits{RBPS: 10_000_007})
	odd.Charge(0, g, Read, 12_345, 1)
	before := g.m[Read][dimBytes]
	odd.Charge(0, g, Read, 777, 1)
	odd.Refund(0, g, Read, 777)
	if after := g.m[Read][dimBytes]; after != before {
		t.Errorf("charge+refund moved the schedule: %+v -> %+v", before, after)
	}

	tree := New(Config{})
	a := tree.Group("p/a")
	tree.SetLimits(0, "p/a", Limits{RBPS: MiB})
	now := 5 * sec

	// In debt, the schedule stops at now-Burst.
	tree.Charge(now, a, Read, 10*MiB, 1)
	tree.Refund(now+sec, a, Read, 10*MiB)
	if got := a.m[Read][dimBytes].tat; got != now+sec-10*ms {
		t.Errorf("refund below the burst floor: tat %d, want %d", got, now+sec-10*ms)
	}
	mustPanic(t, "Refund(negative)", func() { tree.Refund(0, a, Read, -1) })
}

// TestBudget checks the readahead budget in debt, idle, IOPS-limited and
// unlimited states.
func TestBudget(t *testing.T) {
	const maxIO = 128 * KiB
	for _, tc := range []struct {
		name   string
		limits map[string]Limits
		charge int64 // bytes charged to p/a at 0
		now    int64
		d      Dir
		maxIO  int64
		want   int64
	}{
		{"unlimited", nil, 0, sec, Read, maxIO, math.MaxInt64},
		{"other direction limited", map[string]Limits{"p/a": {WBPS: 1}}, 0, sec, Read, maxIO, math.MaxInt64},
		{"just limited", map[string]Limits{"p/a": {RBPS: MiB}}, 0, 0, Read, maxIO, 0},
		{"in debt", map[string]Limits{"p/a": {RBPS: MiB}}, MiB, 500 * ms, Read, maxIO, 0},
		{"on schedule", map[string]Limits{"p/a": {RBPS: MiB}}, MiB, sec, Read, maxIO, 0},
		{"5ms idle", map[string]Limits{"p/a": {RBPS: MiB}}, MiB, sec + 5*ms, Read, maxIO, 5242},
		{"long idle", map[string]Limits{"p/a": {RBPS: MiB}}, 0, 3600 * sec, Read, maxIO, 10485},
		{"parent tighter", map[string]Limits{"p": {RBPS: MiB}, "p/a": {RBPS: 100 * MiB}}, 0, sec, Read, maxIO, 10485},
		{"iops credit", map[string]Limits{"p/a": {RIOPS: 1000}}, 0, sec, Read, maxIO, 10 * maxIO},
		{"iops credit, bytes tighter", map[string]Limits{"p/a": {RIOPS: 1000, RBPS: 10 * MiB}}, 0, sec, Read, maxIO, 104857},
		{"iops below one", map[string]Limits{"p/a": {RIOPS: 1000}}, 0, 500 * 1000, Read, maxIO, 0},
		{"iops below one at any idle", map[string]Limits{"p": {WIOPS: 50}}, 0, sec, Write, maxIO, 0},
		{"iops below one without maxIO", map[string]Limits{"p/a": {RIOPS: 1000}}, 0, 500 * 1000, Read, 0, 0},
		{"iops without maxIO", map[string]Limits{"p/a": {RIOPS: 1000}}, 0, sec, Read, 0, math.MaxInt64},
		{"write bytes", map[string]Limits{"p": {WBPS: 1000 * 1000}}, 0, sec, Write, maxIO, 10000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tree := New(Config{})
			a := tree.Group("p/a")
			for p, l := range tc.limits {
				tree.SetLimits(0, p, l)
			}
			if tc.charge > 0 {
				tree.Charge(0, a, tc.d, tc.charge, 1)
			}
			if got := tree.Budget(tc.now, a, tc.d, tc.maxIO); got != tc.want {
				t.Errorf("Budget = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestByteBudget: the byte budget follows bytes-per-second limits only; an
// IOPS limit, even with less than one I/O of credit, does not enter it.
func TestByteBudget(t *testing.T) {
	tree := New(Config{})
	a := tree.Group("p/a")
	tree.SetLimits(0, "p/a", Limits{RIOPS: 1})
	if got := tree.ByteBudget(sec/2, a, Read); got != math.MaxInt64 {
		t.Errorf("IOPS limit only: ByteBudget = %d, want unlimited", got)
	}
	tree.SetLimits(0, "p", Limits{RBPS: MiB})
	if got, want := tree.ByteBudget(sec, a, Read), tree.Budget(sec, a, Read, 0); got != 10485 || want != 0 {
		t.Errorf("bytes limit above an IOPS limit with no whole I/O of credit: ByteBudget = %d (want 10485), Budget = %d (want 0)", got, want)
	}
}

// TestLease: a lease holds a group's caps to what this host may use of
// them: the leased rate where it is below the cap, the cap where the lease
// is above it or not set, and a change of lease keeps the debt's meaning
// as a change of limit does. The limits themselves are untouched.
func TestLease(t *testing.T) {
	tree := New(Config{})
	g := tree.Group("g")
	tree.SetLimits(0, "g", Limits{RBPS: 10 * MiB, WIOPS: 100})
	tree.SetLease(0, "g", Lease{RBPS: 2 * MiB, WIOPS: 1000})
	if got, want := g.Caps(), (Limits{RBPS: 2 * MiB, WIOPS: 100}); got != want {
		t.Errorf("Caps under the lease = %v, want %v", got, want)
	}
	if got := g.Limits(); got != (Limits{RBPS: 10 * MiB, WIOPS: 100}) {
		t.Errorf("Limits under the lease = %v, want the limits set", got)
	}
	if got := g.PathLimits(); got.RBPS != 2*MiB {
		t.Errorf("PathLimits().RBPS under the lease = %d, want the leased %d", got.RBPS, 2*MiB)
	}
	// 1 MiB at the leased 2 MiB/s: 500 ms of debt.
	tree.Charge(0, g, Read, MiB, 1)
	if got := tree.Eligible(0, g, Read); got != 500*ms {
		t.Errorf("Eligible after 1 MiB at a lease of 2 MiB/s = %v, want 500ms", time.Duration(got))
	}
	// The lease grows to 4 MiB/s at 100 ms: the 400 ms owed at 2 MiB/s
	// are 200 ms at 4.
	tree.SetLease(100*ms, "g", Lease{RBPS: 4 * MiB})
	if got := tree.Eligible(100*ms, g, Read); got != 300*ms {
		t.Errorf("Eligible after the lease grew = %v, want 300ms", time.Duration(got))
	}
	// Writes lost their lease: held to the cap, 100 I/Os a second (10
	// after the 10 ms of idle credit the default burst keeps).
	tree.Charge(100*ms, g, Write, 4096, 10)
	if got := tree.Eligible(100*ms, g, Write); got != 190*ms {
		t.Errorf("Eligible after 10 writes at wiops=100 = %v, want 190ms", time.Duration(got))
	}
	// No lease: the cap again.
	tree.SetLease(100*ms, "g", Lease{})
	if got := tree.Eligible(100*ms, g, Read); got != 180*ms {
		t.Errorf("Eligible with the lease gone = %v, want 180ms (the 200 ms at 4 MiB/s as 80 ms at 10)", time.Duration(got))
	}
	// A lease on a group without that cap leaves it unlimited.
	tree.SetLease(100*ms, "g", Lease{WBPS: MiB})
	if got := g.Caps().WBPS; got != 0 {
		t.Errorf("Caps().WBPS leased with no wbps cap = %d, want 0", got)
	}
	mustPanic(t, "SetLease(negative)", func() { tree.SetLease(0, "g", Lease{RBPS: -1}) })
}

// TestSchedule: a group's schedule carried to another tree at another
// instant keeps its debt and its idle credit (up to the burst there), so
// the group is eligible after the same wait; dimensions with no cap are
// neither reported nor set.
func TestSchedule(t *testing.T) {
	const ms = int64(time.Millisecond)
	a := New(Config{Burst: 10 * time.Millisecond})
	a.SetLimits(0, "g", Limits{RBPS: 1 << 20, WIOPS: 100})
	g := a.Group("g")
	g.m[Read][dimBytes].charge(0, a.burst, 1<<19) // half a second of reads
	s := g.Schedule(100 * ms)
	if s[Read][dimBytes] != 400*ms || s[Read][dimIOs] != 0 || s[Write][dimBytes] != 0 {
		t.Fatalf("schedule at 100 ms %v, want 400 ms of read debt alone", s)
	}
	if s[Write][dimIOs] >= 0 {
		t.Errorf("write IOPS schedule %d, want idle credit (< 0)", s[Write][dimIOs])
	}
	// Another tree, whose clock reads 7 s at the same instant.
	b := New(Config{Burst: 5 * time.Millisecond})
	b.SetLimits(7000*ms, "g", Limits{RBPS: 1 << 20, WIOPS: 100, RIOPS: 50})
	h := b.Group("g")
	h.SetSchedule(7000*ms, s)
	if e := b.Eligible(7000*ms, h, Read); e != 7400*ms {
		t.Errorf("carried read debt: eligible at %d ms, want 7400", e/ms)
	}
	if got := h.Schedule(7000 * ms); got[Read][dimBytes] != 400*ms || got[Read][dimIOs] != 0 || got[Write][dimIOs] != -5*ms {
		t.Errorf("carried schedule %v, want 400 ms of read debt, no read IOPS schedule (not carried), 5 ms of write IOPS credit (the burst)", got)
	}
}
