package sim

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzScenario: whatever a scenario file holds, Parse returns a scenario
// or an error naming what is wrong, and never panics.
func FuzzScenario(f *testing.F) {
	files, _ := filepath.Glob("../scenarios/*.toml")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(string(b))
		}
	}
	f.Add("")
	f.Add("[mount]\nmax-io = \"-1\"\n")
	f.Add("[[device]]\nname = 1\n")
	f.Fuzz(func(t *testing.T, src string) {
		sc, err := Parse("fuzz.toml", src)
		if err == nil && sc == nil {
			t.Fatal("Parse returned neither a scenario nor an error")
		}
	})
}
