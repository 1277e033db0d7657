package stack

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"sluice/cost"
	"sluice/group"
	"sluice/throttle"
)

// Counters are one group's running totals, in the shape of io.stat. Like
// io.stat they include the group's descendants. The JSON names are those
// of `sluice stat --json`; CounterFields lists the fields in order.
type Counters struct {
	// Application level: bytes and calls as seen at FUSE.
	AppRBytes int64 `json:"app_rbytes"`
	AppReads  int64 `json:"app_reads"`
	AppWBytes int64 `json:"app_wbytes"`
	AppWrites int64 `json:"app_writes"`
	// Device level, after splitting into MaxIO pieces: the figures the
	// limits govern. Bytes are those the device moved (for reads the
	// driver performs itself, Pay, those charged); I/Os are counted as
	// they are started.
	RBytes int64 `json:"rbytes"`
	RIOs   int64 `json:"rios"`
	WBytes int64 `json:"wbytes"`
	WIOs   int64 `json:"wios"`
	// ThrottledNs sums, over device I/Os, the time each waited for the
	// throttle.
	ThrottledNs int64 `json:"throttled_ns"`
	// FloorBytes are device bytes released ahead of the siblings' turn,
	// for a floor (throttle.Request.Floor): while they grow, a floor is
	// protecting the group from its siblings.
	FloorBytes int64 `json:"floor_bytes"`
	// Readahead bytes read, later used by a read, and dropped unused.
	RAIssued int64 `json:"ra_issued"`
	RAUsed   int64 `json:"ra_used"`
	RAWasted int64 `json:"ra_wasted"`
	// WritebackBytes are bytes written for the kernel's writeback without
	// a caller (mmap writes, flushes at close): written at once and
	// charged as debt. They are part of WBytes and AppWBytes too.
	WritebackBytes int64 `json:"wb_callerless"`
	// WritebackEarly are bytes written through the stack whose writeback
	// the stack started (OpWriteback) before the kernel would have.
	WritebackEarly int64 `json:"wb_early"`
	// Dirty is a gauge, not a total: bytes written through the stack and
	// left in the backing page cache with no writeback started, now.
	Dirty int64 `json:"dirty"`
	// WThrottledNs is the part of ThrottledNs that write pieces waited:
	// the time writers were paused.
	WThrottledNs int64 `json:"wthrottled_ns"`
	// RDemandNs is the part of ThrottledNs that reads a reader waited on
	// waited (not readahead, which keeps no reader waiting): the time
	// readers were held.
	RDemandNs int64 `json:"rdemand_ns"`
}

// WaitBounds are the upper bounds, in ns, of the buckets of a
// WaitHistogram: 0 (no wait) to 10 s.
var WaitBounds = [...]int64{0, 100e3, 1e6, 5e6, 10e6, 25e6, 50e6, 100e6, 250e6, 500e6, 1e9, 2.5e9, 5e9, 10e9}

// WaitHistogram counts waits by bucket: Counts[i] waits of at most
// WaitBounds[i] (and more than the bound before), the last bucket the
// rest; SumNs is their total.
type WaitHistogram struct {
	Counts [len(WaitBounds) + 1]int64
	SumNs  int64
}

func (h *WaitHistogram) add(ns int64) {
	i := 0
	for i < len(WaitBounds) && ns > WaitBounds[i] {
		i++
	}
	h.Counts[i]++
	h.SumNs += ns
}

// CounterField describes one field of Counters for renderings that walk
// them: the stat table, an exporter.
type CounterField struct {
	// Name is the field's JSON name. The stat table uses it as the column
	// heading, less the "_ns" suffix of a time.
	Name string
	// Help says what the field counts, in one line.
	Help string
	// Nanos says the value is a time in nanoseconds; the table shows
	// seconds.
	Nanos bool
	// Get reads the field.
	Get func(*Counters) int64
}

// CounterFields lists every field of Counters, in order.
var CounterFields = []CounterField{
	{Name: "app_rbytes", Help: "bytes read by applications", Get: func(c *Counters) int64 { return c.AppRBytes }},
	{Name: "app_reads", Help: "read calls by applications", Get: func(c *Counters) int64 { return c.AppReads }},
	{Name: "app_wbytes", Help: "bytes written by applications", Get: func(c *Counters) int64 { return c.AppWBytes }},
	{Name: "app_writes", Help: "write calls by applications", Get: func(c *Counters) int64 { return c.AppWrites }},
	{Name: "rbytes", Help: "bytes read from the device (in kernel cache mode: charged reads of the backing file)", Get: func(c *Counters) int64 { return c.RBytes }},
	{Name: "rios", Help: "device reads of at most --max-io bytes", Get: func(c *Counters) int64 { return c.RIOs }},
	{Name: "wbytes", Help: "bytes written to the device", Get: func(c *Counters) int64 { return c.WBytes }},
	{Name: "wios", Help: "device writes of at most --max-io bytes", Get: func(c *Counters) int64 { return c.WIOs }},
	{Name: "throttled_ns", Help: "time device I/Os waited for the throttle, summed", Nanos: true, Get: func(c *Counters) int64 { return c.ThrottledNs }},
	{Name: "floor_bytes", Help: "device bytes released ahead of the siblings' turn for a floor", Get: func(c *Counters) int64 { return c.FloorBytes }},
	{Name: "ra_issued", Help: "bytes read ahead", Get: func(c *Counters) int64 { return c.RAIssued }},
	{Name: "ra_used", Help: "bytes read ahead and then read by an application", Get: func(c *Counters) int64 { return c.RAUsed }},
	{Name: "ra_wasted", Help: "bytes read ahead and dropped unused", Get: func(c *Counters) int64 { return c.RAWasted }},
	{Name: "wb_callerless", Help: "bytes of writeback without a caller, written at once and charged as debt", Get: func(c *Counters) int64 { return c.WritebackBytes }},
	{Name: "wb_early", Help: "bytes written whose writeback sluice started early", Get: func(c *Counters) int64 { return c.WritebackEarly }},
	{Name: "dirty", Help: "bytes written and left dirty in the backing page cache, now", Get: func(c *Counters) int64 { return c.Dirty }},
	{Name: "wthrottled_ns", Help: "time write pieces waited for the throttle", Nanos: true, Get: func(c *Counters) int64 { return c.WThrottledNs }},
	{Name: "rdemand_ns", Help: "time reads a reader waited on waited for the throttle (not readahead)", Nanos: true, Get: func(c *Counters) int64 { return c.RDemandNs }},
}

// groupStats are a group's counters and wait histograms; its limits are
// the group's own (throttle.Group.Limits), where Metrics reads them.
type groupStats struct {
	Counters
	rwait, wwait WaitHistogram
	// units is, for a top-level group where the device is shared, its
	// device time in reference I/Os (see refUnits).
	units float64
}

func (s *Stack) counters(g *throttle.Group) *Counters { return &s.groupStats(g).Counters }

func (s *Stack) groupStats(g *throttle.Group) *groupStats {
	c := s.stats[g]
	if c == nil {
		c = new(groupStats)
		s.stats[g] = c
	}
	return c
}

// Carry sets the counters and wait histograms of the group at path (made
// if need be) to those of m, a group's figures in the process a mount was
// taken over from (sluice mount --takeover): its figures go on from where
// they were rather than from 0. For a stack that has counted nothing yet.
func (s *Stack) Carry(m GroupMetrics) {
	c := s.groupStats(s.Group(m.Group))
	c.Counters, c.rwait, c.wwait = m.Counters, m.ReadWait, m.WriteWait
}

// Schedules returns where every capped group's caps stand at now, by
// path (throttle.Group.Schedule).
func (s *Stack) Schedules(now int64) map[string]throttle.Schedule {
	out := map[string]throttle.Schedule{}
	for _, g := range s.tree.Groups() {
		if sch := g.Schedule(now); sch != (throttle.Schedule{}) {
			out[g.Path()] = sch
		}
	}
	return out
}

// SetSchedule puts the caps of the group at path where sch says, at now
// (throttle.Group.SetSchedule): a group carried from another process.
func (s *Stack) SetSchedule(now int64, path string, sch throttle.Schedule) {
	s.Group(path).SetSchedule(now, sch)
}

// each applies fn to the counters of g and every ancestor.
func (s *Stack) each(g *throttle.Group, fn func(*Counters)) {
	for ; g != nil; g = g.Parent() {
		fn(s.counters(g))
	}
}

// GroupMetrics is one group's figures: its path and limits, and a copy of
// its counters.
type GroupMetrics struct {
	Group  string `json:"group"`
	Limits string `json:"limits"`
	Counters
	// Limit is Limits as numbers (0: none), for exporters.
	Limit throttle.Limits `json:"-"`
	// ReadWait and WriteWait count device reads and writes by how long
	// each waited for the throttle (for exporters; not in stat's JSON).
	ReadWait, WriteWait WaitHistogram `json:"-"`
	// Waiting is, per direction, how long the group's longest-waiting
	// request has waited so far (0: none waits); Stack.Capped alone sets
	// it.
	Waiting [2]int64 `json:"-"`
}

// Metrics is a snapshot of the stack's figures.
type Metrics struct {
	Groups     []GroupMetrics `json:"groups"`
	CacheBytes int64          `json:"cache_bytes"`
	CacheLimit int64          `json:"cache_limit"`
	Queued     int            `json:"queued"`
	// Device is the device the groups share, where they do.
	Device DeviceMetrics `json:"device"`
}

// Metrics returns a snapshot, groups sorted by path.
func (s *Stack) Metrics() Metrics {
	m := Metrics{CacheBytes: s.cached * PageSize, CacheLimit: s.limit * PageSize, Queued: s.queue.Len(), Device: s.deviceMetrics()}
	for g, c := range s.stats {
		m.Groups = append(m.Groups, GroupMetrics{Group: g.Path(), Limits: group.FormatLimits(g.Limits()), Limit: g.Limits(), Counters: c.Counters,
			ReadWait: c.rwait, WriteWait: c.wwait})
	}
	sort.Slice(m.Groups, func(i, j int) bool { return m.Groups[i].Group < m.Groups[j].Group })
	return m
}

// Capped returns the figures of every group with a cap of its own (its
// limits, not its lease), sorted by path, whether or not it has moved a
// byte yet, with how long its longest-waiting read and write have waited
// at now.
func (s *Stack) Capped(now int64) []GroupMetrics {
	var out []GroupMetrics
	for _, g := range s.tree.Groups() {
		l := g.Limits()
		if l.RBPS == 0 && l.WBPS == 0 && l.RIOPS == 0 && l.WIOPS == 0 {
			continue
		}
		m := GroupMetrics{Group: g.Path(), Limits: group.FormatLimits(l), Limit: l}
		if c := s.stats[g]; c != nil {
			m.Counters = c.Counters
		}
		m.Waiting = s.longestWait(now, g)
		out = append(out, m)
	}
	return out
}

// longestWait returns, per direction, how long the longest-waiting demand
// request in g or below it has waited at now (0: none waits).
func (s *Stack) longestWait(now int64, g *throttle.Group) (w [2]int64) {
	enq, ok := s.queue.Oldest(g)
	for d := range enq {
		if ok[d] {
			w[d] = max(now-enq[d], 1)
		}
	}
	return w
}

// String renders the snapshot for a person: per group, a heading with
// its limits and a few labelled lines, sizes in binary units and counts
// rounded (see Format), in under 100 columns.
func (m Metrics) String() string { return m.Format(false) }

// Format renders the snapshot as String does, every figure exact (bytes,
// calls, nanoseconds as seconds to the millisecond) when exact is set.
func (m Metrics) Format(exact bool) string {
	size, count := Units(exact)
	secs := func(ns int64) string { return fmt.Sprintf("%.3f s", float64(ns)/1e9) }
	var b strings.Builder
	// Where the device is shared, the top-level groups' weights divide it.
	var weights int64
	for i := range m.Groups {
		if m.Device.Shared && !strings.Contains(m.Groups[i].Group, "/") {
			weights += m.Groups[i].Limit.WeightOrDefault()
		}
	}
	for i := range m.Groups {
		g := &m.Groups[i]
		c := &g.Counters
		w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintf(&b, "group %s  limits %s\n", g.Group, g.Limits)
		fmt.Fprintf(w, "  applications\tread %s in %s calls\twrote %s in %s calls\n", size(c.AppRBytes), count(c.AppReads), size(c.AppWBytes), count(c.AppWrites))
		fmt.Fprintf(w, "  device\tread %s in %s I/Os\twrote %s in %s I/Os\n", size(c.RBytes), count(c.RIOs), size(c.WBytes), count(c.WIOs))
		fmt.Fprintf(w, "  throttled\treads waited %s\twriters waited %s\n", secs(c.ThrottledNs), secs(c.WThrottledNs))
		if weights > 0 && !strings.Contains(g.Group, "/") {
			wt := g.Limit.WeightOrDefault()
			fmt.Fprintf(w, "  share\t%d of %d by weight of the device, %.0f %% while all want it\n", wt, weights, 100*float64(wt)/float64(weights))
		}
		if c.FloorBytes > 0 {
			fmt.Fprintf(w, "  floor\t%s served first for a floor\n", size(c.FloorBytes))
		}
		fmt.Fprintf(w, "  readahead\t%s issued, %s used, %s wasted\n", size(c.RAIssued), size(c.RAUsed), size(c.RAWasted))
		fmt.Fprintf(w, "  writeback\t%s without a caller, %s started early, %s dirty now\n", size(c.WritebackBytes), size(c.WritebackEarly), size(c.Dirty))
		w.Flush()
	}
	fmt.Fprintf(&b, "cache %s of %s, %s I/Os queued\n", size(m.CacheBytes), size(m.CacheLimit), count(int64(m.Queued)))
	if d := m.Device; d.Shared {
		fmt.Fprintf(&b, "device shared by weight: %s\n", d.State())
		fmt.Fprintf(&b, "  saturated in %s of %s periods of %s\n", count(d.Saturations), count(d.Periods), cost.DefaultPeriod)
		ms := func(ns int64) string { return fmt.Sprintf("%.2f ms", float64(ns)/1e6) }
		fmt.Fprintf(&b, "  costs  4 KiB random read %s, write %s; 1 MiB sequential read %s\n", ms(d.ReadNs), ms(d.WriteNs), ms(d.SeqReadNs))
	}
	return b.String()
}

// Units returns how Format writes sizes and counts: HumanBytes and
// HumanCount, or in full when exact ("4096 B", "3149").
func Units(exact bool) (size, count func(int64) string) {
	if exact {
		return func(n int64) string { return fmt.Sprintf("%d B", n) }, func(n int64) string { return fmt.Sprint(n) }
	}
	return HumanBytes, HumanCount
}

// HumanBytes writes n bytes in the largest binary unit below it, to three
// significant figures: "512 B", "4.00 KiB", "12.3 MiB", "1.50 GiB".
func HumanBytes(n int64) string {
	const units = "KMGTPE"
	if n < 1024 && n > -1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, u := float64(n), -1
	for (v >= 1024 || v <= -1024) && u < len(units)-1 {
		v /= 1024
		u++
	}
	return fmt.Sprintf("%s %ciB", sig3(v), units[u])
}

// HumanCount writes a count to three significant figures with a decimal
// suffix past 9999: "812", "9999", "12.3 k", "4.56 M".
func HumanCount(n int64) string {
	if n < 10000 && n > -10000 {
		return fmt.Sprint(n)
	}
	v, u := float64(n), 0
	for (v >= 1000 || v <= -1000) && u < 4 {
		v /= 1000
		u++
	}
	return sig3(v) + " " + []string{"", "k", "M", "G", "T"}[u]
}

// sig3 writes v, at least 1 in size and under 1024, to three significant
// figures.
func sig3(v float64) string {
	switch a := max(v, -v); {
	case a < 9.995:
		return fmt.Sprintf("%.2f", v)
	case a < 99.95:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}
