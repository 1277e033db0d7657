package stack

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"sluice/group"
	"sluice/throttle"
)

// counters are one group's running totals. They include the group's
// descendants, as io.stat does.
type counters struct {
	AppRBytes, AppReads, AppWBytes, AppWrites int64
	RBytes, RIOs, WBytes, WIOs                int64
	ThrottledNs                               int64
	RAIssued, RAUsed, RAWasted                int64
}

func (s *Stack) counters(g *throttle.Group) *counters {
	c := s.stats[g]
	if c == nil {
		c = new(counters)
		s.stats[g] = c
	}
	return c
}

// each applies fn to the counters of g and every ancestor.
func (s *Stack) each(g *throttle.Group, fn func(*counters)) {
	for ; g != nil; g = g.Parent() {
		fn(s.counters(g))
	}
}

// GroupMetrics is one group's figures, in the shape of io.stat.
type GroupMetrics struct {
	Group  string `json:"group"`
	Limits string `json:"limits"`
	// Application level: bytes and calls as seen at FUSE.
	AppRBytes int64 `json:"app_rbytes"`
	AppReads  int64 `json:"app_reads"`
	AppWBytes int64 `json:"app_wbytes"`
	AppWrites int64 `json:"app_writes"`
	// Device level, after splitting into MaxIO pieces: the figures the
	// limits govern.
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
		m.Groups = append(m.Groups, GroupMetrics{
			Group: g.Path(), Limits: group.FormatLimits(g.Limits()),
			AppRBytes: c.AppRBytes, AppReads: c.AppReads, AppWBytes: c.AppWBytes, AppWrites: c.AppWrites,
			RBytes: c.RBytes, RIOs: c.RIOs, WBytes: c.WBytes, WIOs: c.WIOs,
			ThrottledNs: c.ThrottledNs,
			RAIssued:    c.RAIssued, RAUsed: c.RAUsed, RAWasted: c.RAWasted,
		})
	}
	sort.Slice(m.Groups, func(i, j int) bool { return m.Groups[i].Group < m.Groups[j].Group })
	return m
}

// String renders the snapshot as an aligned table.
func (m Metrics) String() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "group\tapp_rbytes\tapp_reads\tapp_wbytes\tapp_writes\trbytes\trios\twbytes\twios\tthrottled\tra_issued\tra_used\tra_wasted\t limits")
	for _, g := range m.Groups {
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3fs\t%d\t%d\t%d\t %s\n",
			g.Group, g.AppRBytes, g.AppReads, g.AppWBytes, g.AppWrites,
			g.RBytes, g.RIOs, g.WBytes, g.WIOs, float64(g.ThrottledNs)/1e9,
			g.RAIssued, g.RAUsed, g.RAWasted, g.Limits)
	}
	w.Flush()
	fmt.Fprintf(&b, "cache %d of %d bytes, %d I/Os queued\n", m.CacheBytes, m.CacheLimit, m.Queued)
	return b.String()
}
