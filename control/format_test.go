package control

import (
	"encoding/json"
	"strings"
	"testing"

	"sluice/cluster"
)

// TestPassLine: stat's line about files open by passthrough names every
// group's count, and apart those of limited groups, which escape the
// limit; there is no line when none is.
func TestPassLine(t *testing.T) {
	if got := passLine(nil); got != "" {
		t.Errorf("no passthrough opens: %q, want no line", got)
	}
	got := passLine([]PassOpens{{Group: "default", Opens: 3}, {Group: "tenants/b", Opens: 1, Limited: true}})
	want := "passthrough: 4 open files read and written by the kernel itself, not counted below\n" +
		"  default 3, tenants/b 1\n" +
		"  of those, beyond their group's limit (limited since, or the file open by passthrough):\n" +
		"  tenants/b 1\n"
	if got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	for _, l := range strings.Split(got, "\n") {
		if len(l) > 100 {
			t.Errorf("line of %d columns, want at most 100: %q", len(l), l)
		}
	}
	s := Status{Source: "/srv", Mountpoint: "/mnt", Passthrough: []PassOpens{{Group: "default", Opens: 2}}}
	if out := s.Format(false); !strings.Contains(out, "passthrough: 2 open files read and written by the kernel itself") {
		t.Errorf("stat's output has no passthrough line:\n%s", out)
	}
}

// TestFlightLine: stat's line about the reads and writes being served
// names each group's count and the age of its oldest, in --json too;
// there is no line when none is.
func TestFlightLine(t *testing.T) {
	if got := flightLine(nil); got != "" {
		t.Errorf("nothing in flight: %q, want no line", got)
	}
	s := Status{Source: "/srv", Mountpoint: "/mnt", InFlight: []InFlight{{Group: "o", Requests: 2, OldestNs: 1e6}, {Group: "t", Requests: 1, OldestNs: 12_345_000_000}}}
	want := "in flight: o 2 (oldest 0.001 s), t 1 (oldest 12.345 s)\n"
	if out := s.Format(false); !strings.Contains(out, want) {
		t.Errorf("stat's output has no line %q:\n%s", want, out)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"in_flight":[{"group":"o","requests":2,"oldest_ns":1000000},{"group":"t","requests":1,"oldest_ns":12345000000}]`; !strings.Contains(string(b), want) {
		t.Errorf("stat --json: %s\nwant %s in it", b, want)
	}
}

// TestTransportLine: stat names the transport the mount's requests come
// by, and has no such line for a mount that does not say.
func TestTransportLine(t *testing.T) {
	for _, tc := range []struct{ transport, want string }{
		{"uring", "requests by FUSE-over-io_uring (transport uring)\n"},
		{"dev", "requests by /dev/fuse (transport dev)\n"},
		{"", ""},
	} {
		s := Status{Source: "/srv", Mountpoint: "/mnt", Transport: tc.transport}
		lines := strings.SplitAfterN(s.Format(false), "\n", 3)
		got := lines[1]
		if strings.HasPrefix(got, "backing files") {
			got = ""
		}
		if got != tc.want {
			t.Errorf("transport %q: stat's second line %q, want %q", tc.transport, got, tc.want)
		}
	}
}

// TestClusterLinesDev: stat shows a group's part of a device the hosts
// share by weight as the cap "dev", in reference I/Os a second, and says
// what that is.
func TestClusterLinesDev(t *testing.T) {
	out := clusterLines(&cluster.Status{Name: "farm", Host: "h1", URL: "redis://r:6379", Answered: true, Seen: 2, Caps: []cluster.Cap{
		{Group: "a", Key: "dev", Shared: 266, Rate: 270, Leased: true, Use: 260, Total: 260, Holders: 1},
	}}, true)
	for _, want := range []string{"a  dev   266/s  270/s      260/s        260/s      1", "dev: a group's part of the device the hosts share by weight, in 4 KiB random reads a second"} {
		if !strings.Contains(out, want) {
			t.Errorf("stat's cluster lines lack %q:\n%s", want, out)
		}
	}
}
