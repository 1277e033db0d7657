package metrics

import (
	"strings"
	"testing"

	"sluice/backing"
	"sluice/cluster"
	"sluice/stack"
	"sluice/throttle"
)

type snapshot stack.Metrics

func (s snapshot) Metrics() stack.Metrics         { return stack.Metrics(s) }
func (s snapshot) Mirrors() []backing.MirrorStats { return nil }
func (s snapshot) Cluster() *cluster.Status       { return nil }

// TestSharesExported: a group's weight (the default where none is set),
// its floors and the bytes served first for them reach /metrics, and so
// does what the stack knows of the device the groups share.
func TestSharesExported(t *testing.T) {
	snap := snapshot{Groups: []stack.GroupMetrics{
		{Group: "t/a", Limit: throttle.Limits{RBPSMin: 1 << 20, WIOPSMin: 50, Weight: 200}, Counters: stack.Counters{FloorBytes: 4096}},
		{Group: "t/b"},
	}, Device: stack.DeviceMetrics{Shared: true, Capacity: 0.97, Saturated: true, Periods: 20, Saturations: 3, ReadNs: 2_500_000}}
	body := scrape(t, snap)
	for _, want := range []string{
		`sluice_weight{group="t/a"} 200`,
		`sluice_weight{group="t/b"} 100`,
		`sluice_floor_bytes_per_second{direction="read",group="t/a"} 1.048576e+06`,
		`sluice_floor_ios_per_second{direction="write",group="t/a"} 50`,
		`sluice_floor_served_bytes_total{group="t/a"} 4096`,
		`sluice_device_shared 1`,
		`sluice_device_capacity 0.97`,
		`sluice_device_saturated 1`,
		`sluice_device_periods_total{outcome="saturated"} 3`,
		`sluice_device_cost_seconds{io="4KiB random read"} 0.0025`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, `sluice_floor_bytes_per_second{direction="read",group="t/b"}`) {
		t.Errorf("/metrics shows a floor for t/b, which has none")
	}
}
