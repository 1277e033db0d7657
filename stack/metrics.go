package stack

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

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
	{Name: "ra_issued", Help: "bytes read ahead", Get: func(c *Counters) int64 { return c.RAIssued }},
	{Name: "ra_used", Help: "bytes read ahead and then read by an application", Get: func(c *Counters) int64 { return c.RAUsed }},
	{Name: "ra_wasted", Help: "bytes read ahead and dropped unused", Get: func(c *Counters) int64 { return c.RAWasted }},
	{Name: "wb_callerless", Help: "bytes of writeback without a caller, written at once and charged as debt", Get: func(c *Counters) int64 { return c.WritebackBytes }},
	{Name: "wb_early", Help: "bytes written whose writeback sluice started early", Get: func(c *Counters) int64 { return c.WritebackEarly }},
	{Name: "dirty", Help: "bytes written and left dirty in the backing page cache, now", Get: func(c *Counters) int64 { return c.Dirty }},
	{Name: "wthrottled_ns", Help: "time write pieces waited for the throttle", Nanos: true, Get: func(c *Counters) int64 { return c.WThrottledNs }},
}

// groupStats are a group's counters and wait histograms.
type groupStats struct {
	Counters
	rwait, wwait WaitHistogram
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
}

// Metrics is a snapshot of the stack's figures.
type Metrics struct {
	Groups     []GroupMetrics `json:"groups"`
	CacheBytes int64          `json:"cache_bytes"`
	CacheLimit int64          `json:"cache_limit"`
	Queued     int            `json:"queued"`
}

// Metrics returns a snapshot, groups sorted by path.
func (s *Stack) Metrics() Metrics {
	m := Metrics{CacheBytes: s.cached * PageSize, CacheLimit: s.limit * PageSize, Queued: s.queue.Len()}
	for g, c := range s.stats {
		m.Groups = append(m.Groups, GroupMetrics{Group: g.Path(), Limits: group.FormatLimits(g.Limits()), Limit: g.Limits(), Counters: c.Counters,
			ReadWait: c.rwait, WriteWait: c.wwait})
	}
	sort.Slice(m.Groups, func(i, j int) bool { return m.Groups[i].Group < m.Groups[j].Group })
	return m
}

// String renders the snapshot as an aligned table.
func (m Metrics) String() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(w, "group\t")
	for _, f := range CounterFields {
		if f.Nanos {
			fmt.Fprintf(w, "%s\t", strings.TrimSuffix(f.Name, "_ns"))
		} else {
			fmt.Fprintf(w, "%s\t", f.Name)
		}
	}
	fmt.Fprintln(w, " limits")
	for i := range m.Groups {
		g := &m.Groups[i]
		fmt.Fprintf(w, "%s\t", g.Group)
		for _, f := range CounterFields {
			if v := f.Get(&g.Counters); f.Nanos {
				fmt.Fprintf(w, "%.3fs\t", float64(v)/1e9)
			} else {
				fmt.Fprintf(w, "%d\t", v)
			}
		}
		fmt.Fprintf(w, " %s\n", g.Limits)
	}
	w.Flush()
	fmt.Fprintf(&b, "cache %d of %d bytes, %d I/Os queued\n", m.CacheBytes, m.CacheLimit, m.Queued)
	return b.String()
}
