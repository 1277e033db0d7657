package fsys

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"sluice/group"
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

// TestReservedBlocks: a caller without CAP_SYS_RESOURCE fills the file
// system through the mount only as far as it can on SOURCE directly: the
// blocks ext4 reserves for root stay reserved (and disk quotas, enforced
// the same way, are not bypassed).
func TestReservedBlocks(t *testing.T) {
	needFUSE(t)
	root := loopFS(t, 24<<20, "-m", "40", "-N", "128")
	u := filepath.Join(root, "u")
	if err := os.Mkdir(u, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(u, 0o777)
	for _, tc := range []struct {
		name   string
		limits []group.LimitSpec
	}{
		{"unlimited", nil},
		{"limited", []group.LimitSpec{limit(t, "default wbps=1GiB")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			direct := fillAs(t, 4101, filepath.Join(u, "direct"))
			os.Remove(filepath.Join(u, "direct"))
			syscall.Sync()
			_, mnt, _ := mount(t, Options{Source: root, AllowOther: true, Limits: tc.limits})
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
