package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"sluice/cluster"
	"sluice/lease"
)

type clustered struct {
	snapshot
	cs cluster.Status
}

func (c clustered) Cluster() *cluster.Status { return &c.cs }

// TestClusterExported: a mount in a cluster exports its lease requests,
// their round trips as a histogram, and per shared cap the cluster's cap
// and use beside this host's lease and use; a mount in none exports none.
func TestClusterExported(t *testing.T) {
	counts := make([]int64, len(lease.RTTBounds)+1)
	counts[2], counts[3] = 30, 10 // 30 of at most 500 µs, 10 of 0.5-1 ms
	src := clustered{cs: cluster.Status{Answered: true, Seen: 3, Trips: 40, Failures: 2, RTTCounts: counts, RTTSumNs: 20e6,
		Caps: []cluster.Cap{
			{Group: "ci", Key: "rbps", Shared: 100 << 20, Rate: 60 << 20, Leased: true, Use: 50 << 20, Total: 90 << 20, Holders: 3},
			{Group: "ci", Key: "riops", Shared: 1000, Rate: 333, Use: 10, Total: 20, Holders: 3},
		}}}
	body := scrape(t, src)
	for _, want := range []string{
		`sluice_cluster_answered 1`,
		`sluice_cluster_hosts_seen 3`,
		`sluice_cluster_requests_total{outcome="answered"} 40`,
		`sluice_cluster_requests_total{outcome="failed"} 2`,
		`sluice_cluster_round_trip_seconds_bucket{le="0.0005"} 30`,
		`sluice_cluster_round_trip_seconds_bucket{le="0.001"} 40`,
		`sluice_cluster_round_trip_seconds_bucket{le="+Inf"} 40`,
		`sluice_cluster_round_trip_seconds_sum 0.02`,
		`sluice_cluster_cap_per_second{cap="rbps",group="ci"} 1.048576e+08`,
		`sluice_cluster_lease_per_second{cap="rbps",group="ci"} 6.291456e+07`,
		`sluice_cluster_fallback{cap="rbps",group="ci"} 0`,
		`sluice_cluster_fallback{cap="riops",group="ci"} 1`,
		`sluice_cluster_lease_per_second{cap="riops",group="ci"} 333`,
		`sluice_cluster_use_per_second{cap="rbps",group="ci"} 5.24288e+07`,
		`sluice_cluster_use_all_per_second{cap="rbps",group="ci"} 9.437184e+07`,
		`sluice_cluster_holders{cap="riops",group="ci"} 3`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if body := scrape(t, snapshot{}); strings.Contains(body, "sluice_cluster_") {
		t.Errorf("a mount in no cluster exports cluster figures:\n%s", body)
	}
}

func scrape(t *testing.T, src Source) string {
	t.Helper()
	rec := httptest.NewRecorder()
	Handler(src).ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, err := io.ReadAll(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}
