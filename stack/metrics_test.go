package stack

import (
	"encoding/json"
	"reflect"
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

// TestMetricsString: the stat table has a column per counter, times in
// seconds.
func TestMetricsString(t *testing.T) {
	m := Metrics{Groups: []GroupMetrics{{Group: "default", Limits: "rbps=1MiB", Counters: Counters{AppRBytes: 14, RIOs: 3, ThrottledNs: 1500 * 1e6, RAWasted: 7}}}, CacheBytes: 4096, CacheLimit: 1 << 20}
	lines := strings.Split(m.String(), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "group app_rbytes app_reads app_wbytes app_writes rbytes rios wbytes wios throttled ra_issued ra_used ra_wasted wb_callerless wb_early dirty wthrottled limits" {
		t.Errorf("heading %q", lines[0])
	}
	if got := strings.Fields(lines[1]); strings.Join(got, " ") != "default 14 0 0 0 0 3 0 0 1.500s 0 0 7 0 0 0 0.000s rbps=1MiB" {
		t.Errorf("row %q", lines[1])
	}
	if lines[2] != "cache 4096 of 1048576 bytes, 0 I/Os queued" {
		t.Errorf("last line %q", lines[2])
	}
}
