package stack

import (
	"encoding/json"
	"reflect"
	"sluice/throttle"
	"strings"
	"testing"
)

// TestCounterFields: the table lists every field of Counters in order,
// under its JSON name, and reads that field.
func TestCounterFields(t *testing.T) {
	typ := reflect.TypeFor[Counters]()
	if len(CounterFields) != typ.NumField() {
		t.Fatalf("%d counter fields listed, Counters has %d", len(CounterFields), typ.NumField())
	}
	var c Counters
	v := reflect.ValueOf(&c).Elem()
	for i := range typ.NumField() {
		v.Field(i).SetInt(int64(100 + i))
	}
	b, _ := json.Marshal(GroupMetrics{Group: "g", Counters: c})
	var m map[string]any
	json.Unmarshal(b, &m)
	for i, f := range CounterFields {
		if tag := typ.Field(i).Tag.Get("json"); f.Name != tag {
			t.Errorf("field %d: listed as %q, JSON name %q", i, f.Name, tag)
		}
		if got := f.Get(&c); got != int64(100+i) {
			t.Errorf("%s reads %d, want %d", f.Name, got, 100+i)
		}
		if got := m[f.Name]; got != float64(100+i) {
			t.Errorf("JSON %s = %v, want %d", f.Name, got, 100+i)
		}
	}
	if len(m) != len(CounterFields)+2 || m["group"] != "g" {
		t.Errorf("JSON of a group: %s", b)
	}
}

// TestMetricsString: the stat output a person reads, sizes and counts
// rounded, and exact with Format(true); no line is 100 columns or more.
func TestMetricsString(t *testing.T) {
	m := Metrics{Groups: []GroupMetrics{
		{Group: "default", Limits: "rbps=10MiB wbps=max riops=max wiops=max", Counters: Counters{
			AppRBytes: 12_897_484, AppReads: 3149, RBytes: 13_107_200, RIOs: 100, ThrottledNs: 1500 * 1e6,
			RAIssued: 1 << 20, RAUsed: 917_504, RAWasted: 131_072}},
		{Group: "tenants/a-long-group-name", Limits: "rbps=max wbps=1.5MiB riops=max wiops=100000", Counters: Counters{
			AppWBytes: 5 << 30, AppWrites: 1_310_720, WBytes: 5 << 30, WIOs: 40960, WThrottledNs: 61_234_567_890,
			WritebackEarly: 4 << 30, Dirty: 700}},
	}, CacheBytes: 4096, CacheLimit: 256 << 20, Queued: 3}
	golden := `group default  limits rbps=10MiB wbps=max riops=max wiops=max
  applications  read 12.3 MiB in 3149 calls  wrote 0 B in 0 calls
  device        read 12.5 MiB in 100 I/Os    wrote 0 B in 0 I/Os
  throttled     reads waited 1.500 s         writers waited 0.000 s
  readahead     1.00 MiB issued, 896 KiB used, 128 KiB wasted
  writeback     0 B without a caller, 0 B started early, 0 B dirty now
group tenants/a-long-group-name  limits rbps=max wbps=1.5MiB riops=max wiops=100000
  applications  read 0 B in 0 calls   wrote 5.00 GiB in 1.31 M calls
  device        read 0 B in 0 I/Os    wrote 5.00 GiB in 41.0 k I/Os
  throttled     reads waited 0.000 s  writers waited 61.235 s
  readahead     0 B issued, 0 B used, 0 B wasted
  writeback     0 B without a caller, 4.00 GiB started early, 700 B dirty now
cache 4.00 KiB of 256 MiB, 3 I/Os queued
`
	if got := m.String(); got != golden {
		t.Errorf("stat output:\n%s\nwant:\n%s", got, golden)
	}
	for _, out := range []string{m.String(), m.Format(true)} {
		for _, l := range strings.Split(out, "\n") {
			if len(l) >= 100 {
				t.Errorf("a line of %d columns: %q", len(l), l)
			}
		}
	}
	exact := m.Format(true)
	for _, want := range []string{"read 12897484 B in 3149 calls", "wrote 5368709120 B in 1310720 calls", "cache 4096 B of 268435456 B, 3 I/Os queued"} {
		if !strings.Contains(exact, want) {
			t.Errorf("exact output lacks %q:\n%s", want, exact)
		}
	}
}

// TestHumanUnits: sizes and counts to three significant figures.
func TestHumanUnits(t *testing.T) {
	for _, c := range []struct {
		n           int64
		size, count string
	}{
		{0, "0 B", "0"}, {1023, "1023 B", "1023"}, {1024, "1.00 KiB", "1024"}, {1536, "1.50 KiB", "1536"},
		{9999, "9.76 KiB", "9999"}, {10000, "9.77 KiB", "10.0 k"}, {123456, "121 KiB", "123 k"},
		{1 << 20, "1.00 MiB", "1.05 M"}, {5 << 30, "5.00 GiB", "5.37 G"}, {1 << 62, "4.00 EiB", "4611686 T"},
	} {
		if got := HumanBytes(c.n); got != c.size {
			t.Errorf("HumanBytes(%d) = %q, want %q", c.n, got, c.size)
		}
		if got := HumanCount(c.n); got != c.count {
			t.Errorf("HumanCount(%d) = %q, want %q", c.n, got, c.count)
		}
	}
}

// TestMetricsStringShared: where groups share the device, stat says each
// top-level group's share by weight, what the device is given and found,
// and the model's costs, in under 100 columns.
func TestMetricsStringShared(t *testing.T) {
	m := Metrics{Groups: []GroupMetrics{
		{Group: "a", Limits: "rbps=max wbps=max riops=max wiops=max weight=200", Limit: throttle.Limits{Weight: 200}},
		{Group: "b", Limits: "rbps=max wbps=max riops=max wiops=max"},
		{Group: "b/x", Limits: "rbps=max wbps=max riops=max wiops=max weight=50", Limit: throttle.Limits{Weight: 50}},
	}, CacheLimit: 256 << 20, Device: DeviceMetrics{Shared: true, Capacity: 0.97, Backlogged: true,
		Periods: 200, Saturations: 12, ReadNs: 2_500_000, WriteNs: 1_000_000, SeqReadNs: 26_000_000}}
	out := m.String()
	for _, want := range []string{
		"  share         200 of 300 by weight of the device, 67 % while all want it\n",
		"  share         100 of 300 by weight of the device, 33 % while all want it\n",
		"device shared by weight: holding requests back, given 0.97 s of device time a second\n",
		"  saturated in 12 of 200 periods of 50ms\n",
		"  costs  4 KiB random read 2.50 ms, write 1.00 ms; 1 MiB sequential read 26.00 ms\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("stat lacks %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "share ") != 2 {
		t.Errorf("a share line for b/x, which shares b's part:\n%s", out)
	}
	for _, l := range strings.Split(out, "\n") {
		if len(l) >= 100 {
			t.Errorf("a line of %d columns: %q", len(l), l)
		}
	}
	m.Device = DeviceMetrics{}
	if out := m.String(); strings.Contains(out, "share") || strings.Contains(out, "device shared") {
		t.Errorf("stat speaks of shares of a device that is not shared:\n%s", out)
	}
}
