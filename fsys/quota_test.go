package fsys

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// fillAs writes path as uid in 64 KiB pieces until the file system is full
// and returns how many bytes it took; the file is removed afterwards.
func fillAs(t *testing.T, uid int, path string) int64 {
	t.Helper()
	var total int64
	var ferr error
	if err := runAsGroups(uid, uid, nil, func() {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			ferr = err
			return
		}
		defer f.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := f.Write(buf)
			total += int64(n)
			if errors.Is(err, syscall.ENOSPC) {
				return
			}
			if err != nil {
				ferr = err
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if ferr != nil {
		t.Fatalf("filling %s as uid %d: %v", path, uid, ferr)
	}
	return total
}

// reservedFS makes an ext4 file system of size bytes, 40 % of it reserved
// for root, and returns its root and a directory u in it that everyone
// may write.
func reservedFS(t *testing.T, size int64) (root, u string) {
	t.Helper()
	needFUSE(t)
	root = loopFS(t, size, "-m", "40", "-N", "128")
	u = filepath.Join(root, "u")
	if err := os.Mkdir(u, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(u, 0o777)
	return root, u
}

// TestReservedBlocks: a caller without CAP_SYS_RESOURCE fills the file
// system through the mount only as far as it can on SOURCE directly: the
// blocks ext4 reserves for root stay reserved (and disk quotas, enforced
// the same way, are not bypassed).
func TestReservedBlocks(t *testing.T) {
	root, u := reservedFS(t, 24<<20)
	for _, tc := range writerCases {
		t.Run(tc.name, func(t *testing.T) {
			direct := fillAs(t, 4101, filepath.Join(u, "direct"))
			os.Remove(filepath.Join(u, "direct"))
			syscall.Sync()
			_, mnt, _ := mount(t, Options{Source: root, AllowOther: true, Limits: limitSpecs(t, tc.limits)})
			through := fillAs(t, 4101, filepath.Join(mnt, "u", "through"))
			os.Remove(filepath.Join(u, "through"))
			syscall.Sync()
			t.Logf("uid 4101 wrote %d KiB directly on SOURCE, %d KiB through the mount", direct>>10, through>>10)
			if through > direct+(1<<20) {
				t.Errorf("uid 4101 wrote %d KiB through the mount but only %d KiB on SOURCE: sluice let it use the blocks reserved for root", through>>10, direct>>10)
			}
			if through < direct/2 {
				t.Errorf("uid 4101 wrote only %d KiB through the mount, %d KiB on SOURCE", through>>10, direct>>10)
			}
		})
	}
}

// TestFallocateReserved: fallocate(2) through the mount takes no more of
// SOURCE's space than the caller could take on SOURCE itself, however
// much is free: a length that fits in the free space only with the
// blocks ext4 reserves for root fails as it does on SOURCE (ENOSPC, with
// what it could allocate kept), and leaves root's reserve whole.
func TestFallocateReserved(t *testing.T) {
	// Over the free space at which writes switch to the caller's
	// credentials (nearFullBytes), with a reserve larger than it.
	root, u := reservedFS(t, 1<<30)
	statfs := func() (avail, free int64) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(root, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Bavail) * st.Bsize, int64(st.Bfree) * st.Bsize
	}
	avail, free := statfs()
	if avail < nearFullBytes+64<<20 {
		t.Fatalf("the test file system has %d MiB for users, want over %d MiB", avail>>20, nearFullBytes>>20)
	}
	// Beyond what users may take, within what root may.
	n := avail + (free-avail)/2
	// allocate asks for n bytes of a new file as uid 4101 and returns
	// the error and the bytes the file holds after it.
	allocate := func(path string) (int64, error) {
		var ferr error
		var st syscall.Stat_t
		if err := runAsGroups(4101, 4101, nil, func() {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				ferr = err
				return
			}
			defer f.Close()
			ferr = syscall.Fallocate(int(f.Fd()), 0, 0, n)
			syscall.Fstat(int(f.Fd()), &st)
		}); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512, ferr
	}
	direct, derr := allocate(filepath.Join(u, "direct"))
	_, dfree := statfs()
	os.Remove(filepath.Join(u, "direct"))
	if !errors.Is(derr, syscall.ENOSPC) {
		t.Fatalf("uid 4101 allocating %d MiB on SOURCE, %d MiB free for users: %v, want ENOSPC", n>>20, avail>>20, derr)
	}
	for _, tc := range writerCases {
		t.Run(tc.name, func(t *testing.T) {
			_, mnt, _ := mount(t, Options{Source: root, AllowOther: true, Limits: limitSpecs(t, tc.limits)})
			_, err := allocate(filepath.Join(mnt, "u", "through"))
			_, tfree := statfs()
			var st syscall.Stat_t
			syscall.Stat(filepath.Join(u, "through"), &st)
			through := st.Blocks * 512
			os.Remove(filepath.Join(u, "through"))
			t.Logf("uid 4101 asking for %d MiB, %d MiB free for users: on SOURCE %v with %d MiB kept, %d MiB left free; through the mount %v with %d MiB kept, %d MiB left free",
				n>>20, avail>>20, derr, direct>>20, dfree>>20, err, through>>20, tfree>>20)
			if !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("uid 4101 allocating %d MiB through the mount: %v, want ENOSPC as on SOURCE", n>>20, err)
			}
			if tfree < dfree-(1<<20) {
				t.Errorf("after uid 4101's fallocate through the mount %d MiB are free, after the same on SOURCE %d MiB: it took root's reserved blocks",
					tfree>>20, dfree>>20)
			}
		})
	}
}
