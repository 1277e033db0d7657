package fsys

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"sluice/backing"
)

// TestMirrorStateName: in a mirror set's root only the set's own state
// files are hidden and refused. A tenant's file whose name merely starts
// like them is created, listed, read back, renamed and removed as any
// other, in every mirror.
func TestMirrorStateName(t *testing.T) {
	needFUSE(t)
	const tenant = 4101
	dirs, mnt, _ := mirrorSet(t, 2)
	for _, d := range dirs {
		// The tenant owns the roots, so it may create there.
		if err := os.Chown(d, tenant, tenant); err != nil {
			t.Fatal(err)
		}
	}
	_, unmount := serve(t, mirrorOpts(dirs, mnt, "roundrobin", nil))
	defer unmount()

	const name, renamed = ".sluice-mirrored-photos.txt", ".sluice-mirror-old"
	data := []byte("holiday photos, listed\n")
	var created, read, listErr, renameErr error
	var got []byte
	var names []string
	var state []error // create, lookup and rename onto each state file name
	stateNames := []string{backing.StateFile, backing.StateFile + ".new"}
	if err := runAsGroups(tenant, tenant, nil, func() {
		created = os.WriteFile(filepath.Join(mnt, name), data, 0o644)
		got, read = os.ReadFile(filepath.Join(mnt, name))
		var ents []os.DirEntry
		ents, listErr = os.ReadDir(mnt)
		for _, e := range ents {
			names = append(names, e.Name())
		}
		for _, s := range stateNames {
			_, err := os.OpenFile(filepath.Join(mnt, s), os.O_CREATE|os.O_WRONLY, 0o644)
			state = append(state, err)
			_, err = os.Lstat(filepath.Join(mnt, s))
			state = append(state, err)
			state = append(state, os.Rename(filepath.Join(mnt, name), filepath.Join(mnt, s)))
		}
		renameErr = os.Rename(filepath.Join(mnt, name), filepath.Join(mnt, renamed))
	}); err != nil {
		t.Fatal(err)
	}
	if created != nil || read != nil || string(got) != string(data) {
		t.Fatalf("uid %d creating %s through the mount: %v; reading it back: %q, %v", tenant, name, created, got, read)
	}
	if listErr != nil || !slices.Contains(names, name) {
		t.Errorf("listing of the root: %v, %v; want %s in it", names, listErr, name)
	}
	for _, s := range stateNames {
		if slices.Contains(names, s) {
			t.Errorf("listing of the root shows the state file %s: %v", s, names)
		}
	}
	for i, s := range stateNames {
		c, l, r := state[3*i], state[3*i+1], state[3*i+2]
		if !errors.Is(c, syscall.EPERM) || !errors.Is(l, syscall.ENOENT) || !errors.Is(r, syscall.EPERM) {
			t.Errorf("%s through the mount: create %v, lookup %v, rename onto it %v; want EPERM, ENOENT, EPERM", s, c, l, r)
		}
	}
	if renameErr != nil {
		t.Errorf("rename %s to %s: %v", name, renamed, renameErr)
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, renamed))
		if err != nil || string(b) != string(data) {
			t.Errorf("%s in mirror %s: %q, %v; want the tenant's data", renamed, d, b, err)
		}
		if _, err := os.ReadFile(filepath.Join(d, backing.StateFile)); err != nil {
			t.Errorf("the state file of %s: %v", d, err)
		}
	}
	var rmErr error
	runAsGroups(tenant, tenant, nil, func() { rmErr = os.Remove(filepath.Join(mnt, renamed)) })
	if rmErr != nil {
		t.Errorf("remove %s: %v", renamed, rmErr)
	}
}
