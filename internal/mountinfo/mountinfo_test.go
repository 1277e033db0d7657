package mountinfo

import (
	"slices"
	"testing"
)

// TestParse: paths unescaped, optional fields skipped, the super block's
// options split; a line without its separator is skipped.
func TestParse(t *testing.T) {
	got := Parse("36 35 98:0 /mnt1 /mnt/my\\040data rw,noatime master:1 - fuse.sluice /srv rw,user_id=0,group_id=0\n" +
		"44 27 0:39 / /run/sluice/cgroup rw - cgroup sluice rw,name=sluice\n" +
		"garbage line\n")
	if len(got) != 2 {
		t.Fatalf("%d mounts, want 2: %+v", len(got), got)
	}
	if m := got[0]; m.Root != "/mnt1" || m.Point != "/mnt/my data" || m.FSType != "fuse.sluice" || !slices.Contains(m.Super, "user_id=0") {
		t.Errorf("first mount %+v", m)
	}
	if m := got[1]; m.FSType != "cgroup" || !slices.Contains(m.Super, "name=sluice") {
		t.Errorf("second mount %+v", m)
	}
}
