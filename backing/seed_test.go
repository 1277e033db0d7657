package backing

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"sluice/internal/treetest"
)

// TestMirrorJoins: a directory with no state file given as a mirror of a
// set whose other mirrors have theirs is a new mirror: it is stale, so
// the set serves without comparing it, and a resync makes it equal, empty
// or seeded with a copy that left the state files out (rsync --exclude).
// A restart before the resync keeps it stale.
func TestMirrorJoins(t *testing.T) {
	for _, seeded := range []bool{false, true} {
		name := map[bool]string{false: "empty", true: "seeded"}[seeded]
		t.Run(name, func(t *testing.T) {
			dirs := mirrorDirs(t, 2, map[string]string{"a": "1", "b": "22"})
			m, err := NewMirror(dirs, MirrorOptions{Now: clock()})
			if err != nil {
				t.Fatal(err)
			}
			m.Close()
			d := t.TempDir()
			if seeded {
				os.WriteFile(filepath.Join(d, "a"), []byte("1"), 0o644)
				os.WriteFile(filepath.Join(d, "b"), []byte("old"), 0o644)
			}
			dirs = append(dirs, d)
			var logged []string
			logf := func(f string, args ...any) { logged = append(logged, f) }
			for round := range 2 {
				m, err = NewMirror(dirs, MirrorOptions{Now: clock(), Log: logf})
				if err != nil {
					t.Fatalf("a set with a new mirror (round %d): %v", round, err)
				}
				if s := m.Stats(); s[0].State != Healthy || s[1].State != Healthy || s[2].State != Stale {
					t.Fatalf("states %s %s %s with a new third mirror (round %d), want healthy healthy stale", s[0].State, s[1].State, s[2].State, round)
				}
				if round == 0 {
					m.Close()
				}
			}
			defer m.Close()
			if !strings.Contains(strings.Join(logged, "\n"), "new") {
				t.Errorf("nothing logged says the mirror is new: %q", logged)
			}
			if err := m.Resync(0); err != nil {
				t.Fatal(err)
			}
			if s := m.Stats(); s[2].State != Healthy {
				t.Fatalf("the new mirror after a resync: %s", s[2].State)
			}
			treetest.Same(t, dirs[0], d, StateFile)
		})
	}
}

// TestMirrorCopiedState: a mirror made by copying another whole (cp -a,
// rsync -a), its state file with it, is told from the same directory
// given twice: it gets an identity of its own and is stale until a resync
// makes it equal; the same directory given twice is still refused.
func TestMirrorCopiedState(t *testing.T) {
	dirs := mirrorDirs(t, 2, map[string]string{"a": "1"})
	m, err := NewMirror(dirs, MirrorOptions{Now: clock()})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	cp := filepath.Join(t.TempDir(), "copy")
	if out, err := exec.Command("cp", "-a", dirs[0], cp).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	os.WriteFile(filepath.Join(dirs[0], "a"), []byte("changed since the copy"), 0o644)
	var logged []string
	m, err = NewMirror([]string{dirs[0], cp}, MirrorOptions{Now: clock(), Log: func(f string, args ...any) { logged = append(logged, f) }})
	if err != nil {
		t.Fatalf("a set with a copied mirror: %v", err)
	}
	defer m.Close()
	if s := m.Stats(); s[0].State != Healthy || s[1].State != Stale {
		t.Fatalf("states %s %s with the second a copy of the first, want healthy stale", s[0].State, s[1].State)
	}
	if st0, _ := readState(dirs[0]); st0.ID == m.self[1] {
		t.Errorf("the copy kept the first mirror's identity %s", st0.ID)
	}
	if !strings.Contains(strings.Join(logged, "\n"), "copy") {
		t.Errorf("nothing logged says the mirror is a copy: %q", logged)
	}
	if err := m.Resync(0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(cp, "a")); string(b) != "changed since the copy" {
		t.Errorf("the copy after a resync holds %q", b)
	}
	if _, err := NewMirror([]string{dirs[0], dirs[0] + "/."}, MirrorOptions{Now: clock()}); err == nil || !strings.Contains(err.Error(), "the same directory") {
		t.Errorf("the same directory given twice: %v", err)
	}
}
