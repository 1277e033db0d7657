package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSimCheck: sluice sim --check says which expectations hold, fails
// when one does not, and names the pending ones (targets not met yet)
// among the failures, and one that holds though marked pending.
func TestSimCheck(t *testing.T) {
	const src = `
[[group]]
name = "g"
limits = "riops=100"
[[job]]
name = "r"
group = "g"
rw = "randread"
bs = "4k"
size = "1GiB"
runtime = "2s"
time-based = true
direct = true
[[expect]]
job = "r"
metric = "iops"
a = ""
min = 95
max = 105
`
	for _, tc := range []struct {
		name, extra string
		fails       bool
		want        []string
	}{
		{"holds", "", false, []string{"holds: r iops = ", "all 1 expectations hold"}},
		{"pending fails", "[[expect]]\njob = \"r\"\nmetric = \"iops\"\na = \"\"\nmin = 1000\npending = \"a faster disk\"\n", true,
			[]string{"holds: r iops = ", "expectations failed, 1 of them pending (targets not met yet):\n  pending, a faster disk: r iops = "}},
		{"pending holds", "[[expect]]\njob = \"r\"\nmetric = \"iops\"\na = \"\"\nmin = 50\npending = \"a faster disk\"\n", false,
			[]string{"holds, though marked pending (a faster disk): r iops = ", "all 2 expectations hold"}},
		{"fails", "[[expect]]\njob = \"r\"\nmetric = \"iops\"\na = \"\"\nmin = 1000\n", true,
			[]string{"expectations failed:\n  r iops = "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "x.toml")
			if err := os.WriteFile(file, []byte(src+tc.extra), 0o644); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := cmdSim([]string{file}, &simOpts{check: true}, &out)
			if (err != nil) != tc.fails {
				t.Fatalf("error %v, want one: %v", err, tc.fails)
			}
			got := out.String()
			if err != nil {
				got += err.Error()
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("output lacks %q:\n%s", w, got)
				}
			}
		})
	}
}
