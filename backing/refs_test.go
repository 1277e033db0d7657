package backing

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRefTable: a tree keeping its reference counts in a RefTable writes
// each object's count to its slot as lookups and forgets change it, frees
// the slot of an object forgotten (zeroed, and taken by the next new
// object), and a tree adopted from the state with the same table keeps
// the slots of the objects it adopts and gives new objects the others.
func TestRefTable(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"a", "b", "c"} {
		os.WriteFile(filepath.Join(dir, n), nil, 0o644)
	}
	mem := make([]byte, 8*8)
	tab := NewRefTable(mem)
	tr, err := NewLocal(dir, LocalOptions{Refs: tab})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	slot := func(tr *Local, id ID) int32 {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		if in := tr.byID[id]; in != nil {
			return in.slot
		}
		return -1
	}
	a := lookupOK(t, tr, RootID, "a")
	lookupOK(t, tr, RootID, "a")
	b := lookupOK(t, tr, RootID, "b")
	sa, sb := slot(tr, a.ID), slot(tr, b.ID)
	if sa <= 0 || sb <= 0 || sa == sb || RefsAt(mem, sa) != 2 || RefsAt(mem, sb) != 1 {
		t.Fatalf("slots %d and %d hold %d and %d, want two slots holding 2 and 1", sa, sb, RefsAt(mem, sa), RefsAt(mem, sb))
	}
	tr.Forget(a.ID, 1)
	if RefsAt(mem, sa) != 1 {
		t.Errorf("after a forget of one of a's two: %d", RefsAt(mem, sa))
	}
	tr.Forget(b.ID, 1)
	if RefsAt(mem, sb) != 0 {
		t.Errorf("b forgotten, its slot holds %d, want 0", RefsAt(mem, sb))
	}
	c := lookupOK(t, tr, RootID, "c")
	if sc := slot(tr, c.ID); sc != sb || RefsAt(mem, sc) != 1 {
		t.Errorf("c took slot %d holding %d, want b's freed slot %d holding 1", sc, RefsAt(mem, sc), sb)
	}

	// A new tree from the state, as after a crash, on the same memory.
	st, fds, err := tr.Export()
	if err != nil {
		t.Fatal(err)
	}
	adopted, err := AdoptLocal(st, fds, LocalOptions{Refs: NewRefTable(mem)})
	if err != nil {
		t.Fatal(err)
	}
	defer adopted.Close()
	if slot(adopted, a.ID) != sa || slot(adopted, c.ID) != sb || RefsAt(mem, sa) != 1 || RefsAt(mem, sb) != 1 {
		t.Errorf("adopted: a in slot %d, c in %d (holding %d, %d); want %d and %d holding 1 each", slot(adopted, a.ID), slot(adopted, c.ID), RefsAt(mem, sa), RefsAt(mem, sb), sa, sb)
	}
	b2 := lookupOK(t, adopted, RootID, "b")
	if s := slot(adopted, b2.ID); s <= 0 || s == sa || s == sb {
		t.Errorf("a new object after the adoption took slot %d, one in use (%d, %d)", s, sa, sb)
	}
}
