// Package metrics exports a mount's figures in the Prometheus text format:
// per group and direction the application's and the device's bytes and
// I/Os, throttle waits as a histogram, readahead, writeback and dirty
// bytes; per mirror of a mirror set its reads, bytes, errors, reads in
// flight, reads hedged, the total time of its reads, latency and state;
// for a mount in a cluster its lease requests and their round trips, and
// per shared cap the cluster's cap and use, this host's lease and use.
// Every scrape reads a fresh snapshot.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"sluice/backing"
	"sluice/cluster"
	"sluice/lease"
	"sluice/stack"
	"sluice/throttle"
)

// Source is what the exporter reads: the stack's snapshot, for a mirror
// set its mirrors (nil otherwise), and for a mount in a cluster the
// cluster's state (nil otherwise).
type Source interface {
	Metrics() stack.Metrics
	Mirrors() []backing.MirrorStats
	Cluster() *cluster.Status
}

// Handler serves /metrics for src, with the Go runtime's and the
// process's own metrics beside sluice's.
func Handler(src Source) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{src}, prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

var (
	gd = []string{"group", "direction"}
	g  = []string{"group"}
	m  = []string{"mirror"}

	appBytes   = prometheus.NewDesc("sluice_app_bytes_total", "Bytes read or written by applications through the mount.", gd, nil)
	appCalls   = prometheus.NewDesc("sluice_app_calls_total", "read and write calls by applications.", gd, nil)
	devBytes   = prometheus.NewDesc("sluice_device_bytes_total", "Bytes the backing device moved for the group, after splitting into --max-io pieces (what rbps and wbps govern).", gd, nil)
	devIOs     = prometheus.NewDesc("sluice_device_ios_total", "Device I/Os of at most --max-io bytes (what riops and wiops govern).", gd, nil)
	wait       = prometheus.NewDesc("sluice_throttle_wait_seconds", "How long each device I/O waited for the group's throttle.", gd, nil)
	limit      = prometheus.NewDesc("sluice_limit_bytes_per_second", "The group's byte limit; absent when it has none.", gd, nil)
	limitIOPS  = prometheus.NewDesc("sluice_limit_ios_per_second", "The group's I/O limit; absent when it has none.", gd, nil)
	floor      = prometheus.NewDesc("sluice_floor_bytes_per_second", "The group's byte floor; absent when it has none.", gd, nil)
	floorIOPS  = prometheus.NewDesc("sluice_floor_ios_per_second", "The group's I/O floor; absent when it has none.", gd, nil)
	weight     = prometheus.NewDesc("sluice_weight", "The group's weight among its siblings under a saturated parent.", g, nil)
	floorBytes = prometheus.NewDesc("sluice_floor_served_bytes_total", "Device bytes released ahead of the siblings' turn for a floor.", g, nil)
	readahead  = prometheus.NewDesc("sluice_readahead_bytes_total", "Bytes read ahead (outcome issued), later read by an application (used), or dropped unread (wasted).", []string{"group", "outcome"}, nil)
	callerless = prometheus.NewDesc("sluice_writeback_callerless_bytes_total", "Bytes of the kernel's writeback without a caller (mmap writes), written at once and charged as debt.", g, nil)
	early      = prometheus.NewDesc("sluice_writeback_early_bytes_total", "Bytes written whose backing writeback sluice started early.", g, nil)
	dirty      = prometheus.NewDesc("sluice_dirty_bytes", "Bytes written through the mount and still dirty in the backing page cache.", g, nil)
	cacheBytes = prometheus.NewDesc("sluice_cache_bytes", "Bytes in sluice's own read cache.", nil, nil)
	cacheLimit = prometheus.NewDesc("sluice_cache_limit_bytes", "The read cache's bound (--cache).", nil, nil)
	queued     = prometheus.NewDesc("sluice_queued_ios", "Device I/Os waiting in the throttle queue.", nil, nil)

	dShared    = prometheus.NewDesc("sluice_device_shared", "1 while groups share the device (one has a weight, a floor or a latency target, with no cap above it).", nil, nil)
	dCapacity  = prometheus.NewDesc("sluice_device_capacity", "Device time the shared device is given a second, as the cost model prices I/Os; 0 while it has room (nobody waits).", nil, nil)
	dDone      = prometheus.NewDesc("sluice_device_done", "Device time the shared device completed a second in the last period, as the cost model prices I/Os.", nil, nil)
	dSaturated = prometheus.NewDesc("sluice_device_saturated", "1 when the last period found the shared device saturated.", nil, nil)
	dPeriods   = prometheus.NewDesc("sluice_device_periods_total", "Periods the capacity of the shared device was decided for (all), and those it was saturated in.", []string{"outcome"}, nil)
	dCost      = prometheus.NewDesc("sluice_device_cost_seconds", "The cost model's device time of an I/O.", []string{"io"}, nil)

	gc = []string{"group", "cap"}

	cAnswered = prometheus.NewDesc("sluice_cluster_answered", "1 while the cluster's Redis server answers this host's lease requests; 0 while its shared caps are held at their fallback.", nil, nil)
	cSeen     = prometheus.NewDesc("sluice_cluster_hosts_seen", "Hosts the Redis server saw ask for leases in the last minute.", nil, nil)
	cTrips    = prometheus.NewDesc("sluice_cluster_requests_total", "Lease requests this host sent: answered, or failed (no answer within the timeout, or an error).", []string{"outcome"}, nil)
	cRTT      = prometheus.NewDesc("sluice_cluster_round_trip_seconds", "Round trips of the answered lease requests.", nil, nil)
	cShared   = prometheus.NewDesc("sluice_cluster_cap_per_second", "The cap the cluster's hosts share, summed over them (bytes for rbps and wbps, I/Os for riops and wiops).", gc, nil)
	cLease    = prometheus.NewDesc("sluice_cluster_lease_per_second", "What the group may use on this host now: its lease, or its fallback where sluice_cluster_fallback is 1.", gc, nil)
	cFallback = prometheus.NewDesc("sluice_cluster_fallback", "1 where the group holds its fallback (the cap over the hosts seen) for want of a lease.", gc, nil)
	cUse      = prometheus.NewDesc("sluice_cluster_use_per_second", "The group's use of the cap on this host, between its last two lease requests.", gc, nil)
	cUseAll   = prometheus.NewDesc("sluice_cluster_use_all_per_second", "The group's use of the cap summed over the hosts that hold a lease on it, as the last answer gave it.", gc, nil)
	cHolders  = prometheus.NewDesc("sluice_cluster_holders", "Hosts holding a lease on the cap.", gc, nil)

	mReads    = prometheus.NewDesc("sluice_mirror_reads_total", "Reads sent to the mirror.", m, nil)
	mBytes    = prometheus.NewDesc("sluice_mirror_read_bytes_total", "Bytes the mirror's reads returned.", m, nil)
	mErrors   = prometheus.NewDesc("sluice_mirror_errors_total", "Reads and writes that failed on the mirror.", m, nil)
	mHedged   = prometheus.NewDesc("sluice_mirror_hedged_reads_total", "Reads of the mirror still running after the hedge delay, and sent to another mirror too.", m, nil)
	mInflight = prometheus.NewDesc("sluice_mirror_inflight_reads", "Reads in flight on the mirror.", m, nil)
	mTime     = prometheus.NewDesc("sluice_mirror_read_seconds_total", "Total time of the mirror's reads, from being sent to their answer.", m, nil)
	mLatency  = prometheus.NewDesc("sluice_mirror_latency_seconds", "A decaying average of the mirror's read times.", m, nil)
	mState    = prometheus.NewDesc("sluice_mirror_state", "1 for the mirror's state (healthy, stale or resyncing), 0 for the others.", []string{"mirror", "state"}, nil)
)

type collector struct{ src Source }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{appBytes, appCalls, devBytes, devIOs, wait, limit, limitIOPS, floor, floorIOPS, weight, floorBytes, readahead, callerless,
		early, dirty, cacheBytes, cacheLimit, queued, dShared, dCapacity, dDone, dSaturated, dPeriods, dCost,
		cAnswered, cSeen, cTrips, cRTT, cShared, cLease, cFallback, cUse, cUseAll, cHolders, mReads, mBytes, mErrors, mHedged, mTime, mInflight, mLatency, mState} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	snap := c.src.Metrics()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	count := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge(cacheBytes, float64(snap.CacheBytes))
	gauge(cacheLimit, float64(snap.CacheLimit))
	gauge(queued, float64(snap.Queued))
	if d := snap.Device; d.Shared {
		gauge(dShared, 1)
		gauge(dCapacity, d.Capacity)
		gauge(dDone, d.Done)
		gauge(dSaturated, map[bool]float64{true: 1}[d.Saturated])
		count(dPeriods, d.Periods, "all")
		count(dPeriods, d.Saturations, "saturated")
		gauge(dCost, float64(d.ReadNs)/1e9, "4KiB random read")
		gauge(dCost, float64(d.WriteNs)/1e9, "4KiB random write")
		gauge(dCost, float64(d.SeqReadNs)/1e9, "1MiB sequential read")
	} else {
		gauge(dShared, 0)
	}
	for i := range snap.Groups {
		gm := &snap.Groups[i]
		name := gm.Group
		count(appBytes, gm.AppRBytes, name, "read")
		count(appBytes, gm.AppWBytes, name, "write")
		count(appCalls, gm.AppReads, name, "read")
		count(appCalls, gm.AppWrites, name, "write")
		count(devBytes, gm.RBytes, name, "read")
		count(devBytes, gm.WBytes, name, "write")
		count(devIOs, gm.RIOs, name, "read")
		count(devIOs, gm.WIOs, name, "write")
		ch <- histogram(&gm.ReadWait, name, "read")
		ch <- histogram(&gm.WriteWait, name, "write")
		count(readahead, gm.RAIssued, name, "issued")
		count(readahead, gm.RAUsed, name, "used")
		count(readahead, gm.RAWasted, name, "wasted")
		count(callerless, gm.WritebackBytes, name)
		count(early, gm.WritebackEarly, name)
		gauge(dirty, float64(gm.Dirty), name)
		count(floorBytes, gm.FloorBytes, name)
		limits(ch, name, gm.Limit)
	}
	if cs := c.src.Cluster(); cs != nil {
		gauge(cAnswered, map[bool]float64{true: 1}[cs.Answered])
		gauge(cSeen, float64(cs.Seen))
		count(cTrips, cs.Trips, "answered")
		count(cTrips, cs.Failures, "failed")
		ch <- rttHistogram(cs)
		for _, x := range cs.Caps {
			gauge(cShared, float64(x.Shared), x.Group, x.Key)
			gauge(cLease, float64(x.Rate), x.Group, x.Key)
			gauge(cFallback, map[bool]float64{false: 1}[x.Leased], x.Group, x.Key)
			gauge(cUse, float64(x.Use), x.Group, x.Key)
			gauge(cUseAll, float64(x.Total), x.Group, x.Key)
			gauge(cHolders, float64(x.Holders), x.Group, x.Key)
		}
	}
	for _, ms := range c.src.Mirrors() {
		count(mReads, ms.Reads, ms.Dir)
		count(mBytes, ms.Bytes, ms.Dir)
		count(mErrors, ms.Errors, ms.Dir)
		count(mHedged, ms.Hedged, ms.Dir)
		ch <- prometheus.MustNewConstMetric(mTime, prometheus.CounterValue, float64(ms.ReadTime)/1e9, ms.Dir)
		gauge(mInflight, float64(ms.Inflight), ms.Dir)
		gauge(mLatency, float64(ms.Latency)/1e9, ms.Dir)
		for _, st := range []string{backing.Healthy, backing.Stale, backing.Resyncing} {
			v := 0.0
			if ms.State == st {
				v = 1
			}
			gauge(mState, v, ms.Dir, st)
		}
	}
}

func histogram(h *stack.WaitHistogram, labels ...string) prometheus.Metric {
	buckets := make(map[float64]uint64, len(stack.WaitBounds))
	var n uint64
	for i, b := range stack.WaitBounds {
		n += uint64(h.Counts[i])
		buckets[float64(b)/1e9] = n
	}
	n += uint64(h.Counts[len(stack.WaitBounds)])
	return prometheus.MustNewConstHistogram(wait, n, float64(h.SumNs)/1e9, buckets, labels...)
}

// rttHistogram is the cluster's round trips as a histogram.
func rttHistogram(cs *cluster.Status) prometheus.Metric {
	buckets := make(map[float64]uint64, len(lease.RTTBounds))
	var n uint64
	for i, c := range cs.RTTCounts {
		n += uint64(c)
		if i < len(lease.RTTBounds) {
			buckets[float64(lease.RTTBounds[i])/1e9] = n
		}
	}
	return prometheus.MustNewConstHistogram(cRTT, n, float64(cs.RTTSumNs)/1e9, buckets)
}

// limits exports the limits a group has.
func limits(ch chan<- prometheus.Metric, name string, l throttle.Limits) {
	for _, x := range []struct {
		d   *prometheus.Desc
		v   int64
		dir string
	}{{limit, l.RBPS, "read"}, {limit, l.WBPS, "write"}, {limitIOPS, l.RIOPS, "read"}, {limitIOPS, l.WIOPS, "write"},
		{floor, l.RBPSMin, "read"}, {floor, l.WBPSMin, "write"}, {floorIOPS, l.RIOPSMin, "read"}, {floorIOPS, l.WIOPSMin, "write"}} {
		if x.v > 0 {
			ch <- prometheus.MustNewConstMetric(x.d, prometheus.GaugeValue, float64(x.v), name, x.dir)
		}
	}
	w := l.Weight
	if w == 0 {
		w = throttle.DefaultWeight
	}
	ch <- prometheus.MustNewConstMetric(weight, prometheus.GaugeValue, float64(w), name)
}
