package backing

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestDescriptorBound: a tree walked far beyond its descriptor bound keeps
// every object reachable, and the descriptors it holds stay at the bound.
func TestDescriptorBound(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: open_by_handle_at needs CAP_DAC_READ_SEARCH (root)")
	}
	dir := t.TempDir()
	const n = 500
	for i := range n {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", i)), []byte(fmt.Sprint(i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := NewLocal(dir, LocalOptions{MaxOpen: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ids := make([]ID, n)
	for i := range n {
		e, err := tr.Lookup(RootID, fmt.Sprintf("f%03d", i))
		if err != nil {
			t.Fatalf("lookup f%03d: %v", i, err)
		}
		ids[i] = e.ID
	}
	if s := tr.Stats(); s.Pinned == 0 && s.Cached > 16 {
		t.Fatalf("%d descriptors cached after %d lookups, bound 16", s.Cached, n)
	}
	for round := range 2 {
		for i, id := range ids {
			f, err := tr.Open(id, syscall.O_RDONLY)
			if err != nil {
				t.Fatalf("round %d: open f%03d: %v", round, i, err)
			}
			b := make([]byte, 16)
			m, _ := f.ReadAt(b, 0)
			f.Close()
			if string(b[:m]) != fmt.Sprint(i) {
				t.Fatalf("round %d: f%03d reads %q", round, i, b[:m])
			}
		}
	}
	if s := tr.Stats(); s.Pinned == 0 && s.Cached > 16 {
		t.Fatalf("%d descriptors cached, bound 16", s.Cached)
	}
	// Directories stay open between operations, up to the bound.
	for i := range 100 {
		name := fmt.Sprintf("d%03d", i)
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		e, err := tr.Lookup(RootID, name)
		if err != nil {
			t.Fatal(err)
		}
		d, err := tr.OpenDir(e.ID)
		if err != nil {
			t.Fatalf("opendir %s: %v", name, err)
		}
		d.Close()
	}
	if s := tr.Stats(); s.Cached != 16 {
		t.Fatalf("%d directory descriptors cached after opening 100 directories, want the bound, 16", s.Cached)
	}
}
