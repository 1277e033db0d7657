package throttle

import (
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultBurst is the default of Config.Burst.
const DefaultBurst = 10 * time.Millisecond

// Config configures a Tree.
type Config struct {
	// Burst caps idle credit: after a long idle a group may send at most
	// Burst worth of its rate without waiting (plus the one request
	// admitted into debt). It applies to every level and dimension. Zero
	// takes the default; 1ns means practically no idle credit. The default
	// is 10ms.
	Burst time.Duration
}

// EnsureDefaults fills zero fields with their defaults.
func (c *Config) EnsureDefaults() {
	if c.Burst == 0 {
		c.Burst = DefaultBurst
	}
}

// Validate returns an error naming the first field that holds a value the
// Tree cannot use.
func (c *Config) Validate() error {
	if c.Burst < 0 {
		return fmt.Errorf("throttle: Config.Burst %v: must not be negative", c.Burst)
	}
	return nil
}

// Tree is the hierarchy of groups and their absolute schedules. Time is
// always passed in as now, in nanoseconds of the caller's monotonic clock;
// the Tree never reads the clock. now should not go backwards; if it does,
// nothing breaks, but a group admitted at the later time stays in debt as
// seen from the earlier one. A Tree is not safe for concurrent use.
type Tree struct {
	burst  int64
	root   *Group
	groups map[string]*Group
	// floored counts the groups with a floor: without any, the Queue
	// skips looking for one owed (Queue.pickOwed).
	floored int
	// shared says the device is shared (see Shared): some group has a
	// weight, a floor or a latency target with no cap above it.
	shared bool
	// devLeased counts the groups holding a lease of device time.
	devLeased int
	// capacity is the last SetCapacity's rate, held back while a group
	// holds a lease of device time.
	capacity int64
}

// New returns an empty Tree: only the implicit, unlimited root. It panics
// if cfg, after EnsureDefaults, fails Validate.
func New(cfg Config) *Tree {
	cfg.EnsureDefaults()
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	t := &Tree{burst: int64(cfg.Burst), groups: make(map[string]*Group)}
	t.root = &Group{tree: t}
	return t
}

// Group is a node of the Tree: a tenant, or a level of tenants
// ("tenants/a" above "tenants/a/build").
type Group struct {
	tree   *Tree
	path   string
	up     *Group // the implicit root for top-level groups; nil for the root
	limits Limits
	lease  Lease
	m      [2][2]meter // [Dir][bytes, ios]
	// floor meters the service the group got against its floors, as m its
	// caps: a floor's tat at or before now means the group got less than
	// its floor (see owed).
	floor [2][2]meter
	// dev is, for the root, the device's capacity in nanoseconds of
	// device time per second (see SetCapacity), rate 0 while unknown; for
	// a group, its lease of device time (Lease.Dev), rate 0 without one.
	dev meter
	// limited caches Limited: g or an ancestor has a limit. It is the one
	// field safe to read without the caller's lock, so a front end can
	// route a request before taking it.
	limited atomic.Bool
}

const (
	dimBytes = 0
	dimIOs   = 1
)

// Clean returns the canonical form of a group path: slashes collapsed,
// leading and trailing slashes, "." and ".." resolved as in a rooted file
// path ("/a//b/" and "x/../a/b" are both "a/b"). The root is "".
func Clean(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}

// Group returns the group at path, creating it and its missing ancestors,
// all unlimited. The path is cleaned first (see Clean). Group panics if the
// cleaned path is empty: the implicit root above the top-level groups is
// not a group callers may use or limit.
func (t *Tree) Group(p string) *Group {
	p = Clean(p)
	if p == "" {
		panic("throttle: empty group path")
	}
	if g := t.groups[p]; g != nil {
		return g
	}
	up := t.root
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		up = t.Group(p[:i])
	}
	g := &Group{tree: t, path: p, up: up}
	g.limited.Store(up.limited.Load())
	t.groups[p] = g
	return g
}

// Lookup returns the group at path (cleaned), or nil if it does not exist.
func (t *Tree) Lookup(p string) *Group { return t.groups[Clean(p)] }

// Groups returns every group, sorted by path (parents before children).
func (t *Tree) Groups() []*Group {
	out := make([]*Group, 0, len(t.groups))
	for _, g := range t.groups {
		out = append(out, g)
	}
	slices.SortFunc(out, func(a, b *Group) int { return strings.Compare(a.path, b.path) })
	return out
}

// Path returns the group's clean path, e.g. "tenants/a/build".
func (g *Group) Path() string { return g.path }

// Parent returns the group above g, or nil for a top-level group.
func (g *Group) Parent() *Group {
	if g.up == g.tree.root {
		return nil
	}
	return g.up
}

// Limits returns the group's own limits (not its ancestors').
func (g *Group) Limits() Limits { return g.limits }

// Schedule is where a group's caps stand at an instant: per direction
// (Read, Write), of bytes and of I/Os, how far the cap's schedule lies
// ahead of that instant (debt, > 0) or behind it (idle credit, < 0), in
// ns; 0 for a dimension with no cap. It carries a group's state to
// another process (a takeover, a crash).
type Schedule [2][2]int64

// Schedule returns where g's caps stand at now.
func (g *Group) Schedule(now int64) Schedule {
	var s Schedule
	for d := range g.m {
		for k := range g.m[d] {
			if m := &g.m[d][k]; m.rate != 0 {
				s[d][k] = satSub(m.tat, now)
			}
		}
	}
	return s
}

// SetSchedule puts g's caps where s says, relative to now: debt as it
// was, idle credit up to the tree's burst. Dimensions g does not cap, or
// that s does not say, are left as they are.
func (g *Group) SetSchedule(now int64, s Schedule) {
	for d := range g.m {
		for k := range g.m[d] {
			m := &g.m[d][k]
			if m.rate == 0 || s[d][k] == 0 {
				continue
			}
			m.tat, m.rem = max(satAdd(now, s[d][k]), satSub(now, g.tree.burst)), 0
		}
	}
}

// PathLimits returns the tightest cap of each key on g's path, g's own
// and its ancestors', each as its lease holds it (Caps): 0 where no level
// sets one.
func (g *Group) PathLimits() Limits {
	tight := func(cur, v int64) int64 {
		if v == 0 || cur != 0 && cur <= v {
			return cur
		}
		return v
	}
	var t Limits
	for x := g; x != nil; x = x.Parent() {
		l := x.Caps()
		t = Limits{RBPS: tight(t.RBPS, l.RBPS), WBPS: tight(t.WBPS, l.WBPS),
			RIOPS: tight(t.RIOPS, l.RIOPS), WIOPS: tight(t.WIOPS, l.WIOPS)}
	}
	return t
}

// Limited reports whether g or any ancestor has a limit in either
// direction, or the device is shared (Tree.Shared), that is, whether g's
// I/O needs to pass through the throttle at all. Unlike the rest of the Tree it is safe to call concurrently with
// SetLimits; it sees the limits before or after the change.
func (g *Group) Limited() bool { return g.limited.Load() }

// pathLimited computes Limited from the limits.
func (g *Group) pathLimited() bool {
	if g.tree.shared {
		return true
	}
	for x := g; x != nil; x = x.up {
		if !x.limits.Unlimited() {
			return true
		}
	}
	return false
}

// open reports whether every limit of g itself in direction d admits a
// request at now (for the root, the device's capacity).
func (g *Group) open(now int64, d Dir) bool {
	return g.m[d][dimBytes].open(now) && g.m[d][dimIOs].open(now) && g.dev.open(now)
}

// gate returns the latest theoretical arrival time of g's own limits in
// direction d, or math.MinInt64 if g does not limit d.
func (g *Group) gate(d Dir) int64 {
	e := int64(math.MinInt64)
	for i := range g.m[d] {
		if m := &g.m[d][i]; m.rate != 0 {
			e = max(e, m.tat)
		}
	}
	if g.dev.rate != 0 {
		e = max(e, g.dev.tat)
	}
	return e
}

// capped reports whether g limits the bytes or I/Os of direction d: its
// children then share it by bytes, else by device time (see Queue).
func (g *Group) capped(d Dir) bool {
	return g.m[d][dimBytes].rate != 0 || g.m[d][dimIOs].rate != 0
}

// Shared reports whether the device is shared: some group has a weight,
// a floor or a latency target (Limits.Shares) and no cap on any level above it, so what it
// competes for is SOURCE itself. Every group is then Limited, for every
// request must reach the Queue to be ordered, and requests carry their
// device time (Request.Cost), by which groups under an uncapped parent
// share it. The capacity the Queue admits is SetCapacity's.
func (t *Tree) Shared() bool { return t.shared }

// SetCapacity sets at now how much device time the device serves per
// second, in nanoseconds (1e9: one second a second, as the device model
// that prices Request.Cost counts it); 0 admits any. Debt is rescaled as
// SetLimits does. The caller's capacity controller calls it as it learns
// whether the device keeps up; it limits only while Shared.
//
// While a group holds a lease of device time (Lease.Dev), the hosts that
// share the device divide it between them by those leases, and the root
// admits any: the capacity is kept for when the last lease ends.
func (t *Tree) SetCapacity(now, rate int64) {
	t.capacity = max(rate, 0)
	if !t.shared || t.devLeased > 0 {
		rate = 0
	}
	t.root.dev.setRate(now, max(rate, 0))
}

// Capacity returns the device time per second the root admits (0: any).
func (t *Tree) Capacity() int64 { return t.root.dev.rate }

// DeviceBacklog reports whether a request is held back at now by the
// device's capacity alone: the root is closed and its capacity is set.
// A capacity controller grows the capacity only while it holds requests
// back, and latencies say the device keeps up.
func (t *Tree) DeviceBacklog(now int64) bool {
	return t.root.dev.rate != 0 && !t.root.dev.open(now)
}

// Check returns an error if the groups at the paths of changes may not
// take those limits together, the others keeping theirs: one fails
// Validate, or the floors of a group's children exceed one of the group's
// caps. A floor can only be served out of what every level above admits.
// The error names the group, the keys and their values, for the user.
func (t *Tree) Check(changes map[string]Limits) error {
	next := make(map[string]Limits, len(changes))
	for p, l := range changes {
		if p = Clean(p); p == "" {
			return fmt.Errorf("empty group path")
		}
		if err := l.Validate(); err != nil {
			return fmt.Errorf("group %s: %s", p, strings.TrimPrefix(err.Error(), "throttle: "))
		}
		next[p] = l
	}
	limitsOf := func(q string) Limits {
		if l, ok := next[q]; ok {
			return l
		}
		if g := t.groups[q]; g != nil {
			return g.limits
		}
		return Limits{}
	}
	parentOf := func(q string) string {
		if i := strings.LastIndexByte(q, '/'); i >= 0 {
			return q[:i]
		}
		return ""
	}
	paths := map[string]bool{}
	for q := range t.groups {
		paths[q] = true
	}
	for q := range next {
		paths[q] = true
	}
	// The floors of each parent's children, summed.
	sums := map[string]*[4]int64{}
	for q := range paths {
		up := parentOf(q)
		if up == "" {
			continue
		}
		if sums[up] == nil {
			sums[up] = new([4]int64)
		}
		for i, f := range limitsOf(q).floors() {
			sums[up][i] = satAdd(sums[up][i], f.v)
		}
	}
	ups := slices.Sorted(maps.Keys(sums))
	for _, up := range ups {
		for i, c := range limitsOf(up).caps() {
			if c.v != 0 && sums[up][i] > c.v {
				return fmt.Errorf("the floors of %s's children add up to %s=%d, above its %s=%d: a floor is served out of what its parent admits", up, limitsOf(up).floors()[i].name, sums[up][i], c.name, c.v)
			}
		}
	}
	return nil
}

// SetLimits sets the limits of the group at path (creating it if needed)
// at now. Each changed dimension keeps its meaning: outstanding debt is
// rescaled, so a group owing D ns at the old rate owes D*old/new at the new
// one (exactly, remainder included); idle credit is kept as time; going to
// unlimited forgives the debt; going from unlimited to limited starts with
// no debt and no credit. Queued requests are not released here: the caller
// calls Queue.Release afterwards and gets the correct next wake-up.
// SetLimits panics if l fails Validate or the path is empty.
func (t *Tree) SetLimits(now int64, path string, l Limits) {
	if err := l.Validate(); err != nil {
		panic(err)
	}
	g := t.Group(path)
	switch had, has := g.limits.hasFloor(), l.hasFloor(); {
	case has && !had:
		t.floored++
	case had && !has:
		t.floored--
	}
	g.limits = l
	g.setCaps(now)
	for _, d := range []Dir{Read, Write} {
		g.floor[d][dimBytes].setRate(now, l.minBPS(d))
		g.floor[d][dimIOs].setRate(now, l.minIOPS(d))
	}
	t.shared = false
	for _, x := range t.groups {
		t.shared = t.shared || x.sharesDevice()
	}
	if !t.shared {
		t.root.dev.setRate(now, 0)
	}
	for _, x := range t.groups {
		x.limited.Store(x.pathLimited())
		if x.lease.Dev != 0 {
			x.setCaps(now) // a lease of device time holds only while Shared
		}
	}
}

// SetLease sets, at now, what the group at path may use of its caps here
// where other hosts share them (see Lease); the zero Lease holds it to its
// caps again. Debt is rescaled as by SetLimits; queued requests are not
// released here (see SetLimits). SetLease panics if the path is empty or
// a rate is negative.
func (t *Tree) SetLease(now int64, path string, l Lease) {
	if l.RBPS < 0 || l.WBPS < 0 || l.RIOPS < 0 || l.WIOPS < 0 || l.Dev < 0 {
		panic(fmt.Sprintf("throttle: negative lease %+v", l))
	}
	g := t.Group(path)
	switch had, has := g.lease.Dev != 0, l.Dev != 0; {
	case has && !had:
		t.devLeased++
	case had && !has:
		t.devLeased--
	}
	g.lease = l
	g.setCaps(now)
	t.SetCapacity(now, t.capacity)
}

// setCaps sets the cap meters' rates to the caps, each as the lease holds
// it (Caps).
func (g *Group) setCaps(now int64) {
	c := g.Caps()
	for _, d := range []Dir{Read, Write} {
		g.m[d][dimBytes].setRate(now, c.BPS(d))
		g.m[d][dimIOs].setRate(now, c.IOPS(d))
	}
	dev := g.lease.Dev
	if !g.tree.shared {
		dev = 0
	}
	g.dev.setRate(now, dev)
}

// Caps returns the group's own limits with each cap as it holds here: the
// lease where one is set, never above the cap.
func (g *Group) Caps() Limits {
	l := g.limits
	held := func(cap, lease int64) int64 {
		if cap == 0 || lease == 0 {
			return cap
		}
		return min(cap, lease)
	}
	l.RBPS, l.WBPS = held(l.RBPS, g.lease.RBPS), held(l.WBPS, g.lease.WBPS)
	l.RIOPS, l.WIOPS = held(l.RIOPS, g.lease.RIOPS), held(l.WIOPS, g.lease.WIOPS)
	return l
}

// sharesDevice reports whether g's weight, floor or target acts on the
// device: g has one, and no level above it caps anything.
func (g *Group) sharesDevice() bool {
	if !g.limits.Shares() {
		return false
	}
	for x := g.up; x != nil; x = x.up {
		if !x.limits.Unlimited() {
			return false
		}
	}
	return true
}

func (t *Tree) check(g *Group, d Dir) {
	if g == nil || g.tree != t || g == t.root {
		panic("throttle: group is nil, the root, or of another Tree")
	}
	if d > Write {
		panic("throttle: invalid " + d.String())
	}
}

// Eligible returns the earliest time >= now at which a request of g in
// direction d may be admitted: the latest theoretical arrival time over
// the byte and I/O limits of d of g and every ancestor. Admission depends
// on debt, not on the request's size: a level is open once its schedule
// has reached now. Eligible returns now when nothing on the path limits d.
func (t *Tree) Eligible(now int64, g *Group, d Dir) int64 {
	t.check(g, d)
	e := now
	for x := g; x != nil; x = x.up {
		e = max(e, x.gate(d))
	}
	return e
}

// Charge charges bytes and ios in direction d to g and every ancestor in
// one step. At each limited level and dimension the schedule becomes
// max(tat, now-Burst) + cost/rate, in integer nanoseconds with the division
// remainder carried, so the long-run rate is exact. Charge does not check
// eligibility: the caller charges what it admits (see Eligible), and may
// drive a group into debt. A debt beyond the int64 range saturates. Charge
// panics if bytes or ios is negative.
func (t *Tree) Charge(now int64, g *Group, d Dir, bytes, ios int64) {
	t.check(g, d)
	if bytes < 0 || ios < 0 {
		panic(fmt.Sprintf("throttle: Charge of %d bytes, %d ios", bytes, ios))
	}
	t.charge(now, now, g, d, bytes, ios, 0)
}

// ChargeCost is Charge of a request that also takes cost nanoseconds of
// device time, charged to the device's capacity (see SetCapacity).
func (t *Tree) ChargeCost(now int64, g *Group, d Dir, bytes, ios, cost int64) {
	t.check(g, d)
	if bytes < 0 || ios < 0 || cost < 0 {
		panic(fmt.Sprintf("throttle: Charge of %d bytes, %d ios, %d ns", bytes, ios, cost))
	}
	t.charge(now, now, g, d, bytes, ios, cost)
}

// charge is Charge for a request that has waited since arrival. Each
// level's idle credit is capped relative to when the request reached it
// rather than to now: for g that is arrival; for each ancestor, the moment
// the request had cleared every level below. Time a queued request spent
// held back by an ancestor is thus not lost to the burst cap of the levels
// below it, as if each level had its own queue passing requests upward on
// its own schedule; a group under a busy parent still gets its own rate.
func (t *Tree) charge(now, arrival int64, g *Group, d Dir, bytes, ios, cost int64) {
	at := min(arrival, now)
	for x := g; x != nil; x = x.up {
		cleared := min(max(at, x.gate(d)), now)
		x.m[d][dimBytes].charge(at, t.burst, bytes)
		x.m[d][dimIOs].charge(at, t.burst, ios)
		x.floor[d][dimBytes].charge(now, t.burst, bytes)
		x.floor[d][dimIOs].charge(now, t.burst, ios)
		x.dev.charge(at, t.burst, cost)
		at = cleared
	}
}

// owed returns the earliest floor schedule of g in direction d that stands
// at or before now, that is, of a floor g got less than (with at most
// Burst of idle time counted), and whether there is one.
func (g *Group) owed(now int64, d Dir) (int64, bool) {
	best, ok := int64(0), false
	for _, m := range g.floor[d] {
		if at := max(m.tat, now-g.tree.burst); m.rate != 0 && m.tat <= now && (!ok || at < best) {
			best, ok = at, true
		}
	}
	return best, ok
}

// Refund returns bytes charged in direction d but not used (a short read)
// to g and every ancestor: each byte schedule moves back by bytes/rate,
// remainder included, but never below now-Burst, so a refund never creates
// more than Burst of idle credit. I/Os are not refunded. Refund panics if
// bytes is negative.
func (t *Tree) Refund(now int64, g *Group, d Dir, bytes int64) {
	t.check(g, d)
	if bytes < 0 {
		panic(fmt.Sprintf("throttle: Refund of %d bytes", bytes))
	}
	for x := g; x != nil; x = x.up {
		x.m[d][dimBytes].refund(now, t.burst, bytes)
	}
}

// ByteBudget returns how many bytes g may send in direction d at now
// without waiting on a bytes-per-second limit: the minimum over g and its
// ancestors of the byte credit. IOPS limits do not enter it (an I/O made
// larger costs no more I/Os). It is math.MaxInt64 when no level limits
// d's bytes.
func (t *Tree) ByteBudget(now int64, g *Group, d Dir) int64 {
	t.check(g, d)
	b := int64(math.MaxInt64)
	for x := g; x != nil; x = x.up {
		b = min(b, x.m[d][dimBytes].credit(now, t.burst))
	}
	return b
}

// Budget returns how many bytes g may send in direction d at now without
// waiting: the minimum over g and its ancestors of the byte credit (the
// idle time since the schedule, capped at Burst, times the rate; 0 when in
// debt or exactly on schedule). A level limiting IOPS with less than one
// whole I/O of credit makes the budget 0; with k I/Os of credit it is at
// most k*maxIO (maxIO <= 0 skips that bound, keeping only the zero rule).
// Budget is math.MaxInt64 when nothing on the path limits d.
func (t *Tree) Budget(now int64, g *Group, d Dir, maxIO int64) int64 {
	t.check(g, d)
	b := int64(math.MaxInt64)
	for x := g; x != nil; x = x.up {
		b = min(b, x.m[d][dimBytes].credit(now, t.burst))
		if m := &x.m[d][dimIOs]; m.rate != 0 {
			k := m.credit(now, t.burst)
			if k < 1 {
				return 0
			}
			if maxIO > 0 {
				if k > math.MaxInt64/maxIO {
					continue
				}
				b = min(b, k*maxIO)
			}
		}
	}
	return b
}
