package backing

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
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

// TestWithoutHandleCapability: a process that may not open file handles
// (no CAP_DAC_READ_SEARCH, as for a mount made without root) holds every
// object by descriptor instead, and every object stays reachable.
func TestWithoutHandleCapability(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: dropping a capability needs to have it (root)")
	}
	dir := t.TempDir()
	for i := range 20 {
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%02d", i)), []byte(fmt.Sprint(i)), 0o644)
	}
	errc := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, and its reduced capabilities, end
		// with this goroutine.
		runtime.LockOSThread()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		data[0].Effective &^= 1 << unix.CAP_DAC_READ_SEARCH
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			errc <- err
			return
		}
		tr, err := NewLocal(dir, LocalOptions{MaxOpen: 16})
		if err != nil {
			errc <- err
			return
		}
		defer tr.Close()
		for i := range 20 {
			e, err := tr.Lookup(RootID, fmt.Sprintf("f%02d", i))
			if err != nil {
				errc <- fmt.Errorf("lookup f%02d: %v", i, err)
				return
			}
			f, err := tr.Open(e.ID, syscall.O_RDONLY)
			if err != nil {
				errc <- fmt.Errorf("open f%02d: %v", i, err)
				return
			}
			b := make([]byte, 8)
			n, _ := f.ReadAt(b, 0)
			f.Close()
			if string(b[:n]) != fmt.Sprint(i) {
				errc <- fmt.Errorf("f%02d reads %q", i, b[:n])
				return
			}
		}
		// A second lookup finds the same object, holding nothing more.
		e1, err1 := tr.Lookup(RootID, "f00")
		e2, err2 := tr.Lookup(RootID, "f00")
		if err1 != nil || err2 != nil || e1.ID != e2.ID {
			errc <- fmt.Errorf("two lookups of f00: %d (%v) and %d (%v), want one object", e1.ID, err1, e2.ID, err2)
			return
		}
		if s := tr.Stats(); s.Pinned != 20 {
			errc <- fmt.Errorf("%d objects held by descriptor, want all 20", s.Pinned)
			return
		}
		errc <- nil
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}
