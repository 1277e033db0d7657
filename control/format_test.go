package control

import (
	"strings"
	"testing"
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
