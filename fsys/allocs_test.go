//go:build !race

package fsys

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"

	"sluice/group"
)

// TestRequestAllocs: what one FUSE request of the hot path allocates in
// the serving process (go-fuse's request handling and sluice's own), per
// 4 KiB O_DIRECT read and write of an unlimited group and of a limited
// one below its limit, each one round trip to sluice. The race detector
// keeps no allocation counts: this runs without it (test.sh runs it
// apart).
func TestRequestAllocs(t *testing.T) {
	rules := []group.Rule{{Group: "t", UID: new(uint32(4101))}}
	src, mnt, _ := mount(t, Options{AllowOther: true, Rules: rules,
		Limits: []group.LimitSpec{limit(t, "t rbps=1GiB wbps=1GiB")}})
	os.Chmod(src, 0o777)
	const size = 1 << 20
	if err := os.WriteFile(filepath.Join(src, "f"), make([]byte, size), 0o666); err != nil {
		t.Fatal(err)
	}
	// At most this many allocations per request, as measured with
	// go-fuse v2.12.1: its own request handling takes 10 to 11 (reading
	// the request and writing the reply: closures and vectors), the
	// request's context 1; a limited group's request takes 1 more in the
	// stack, the throttle's entry for its piece.
	for _, c := range []struct {
		name        string
		uid         int
		read, write float64
	}{{"unlimited", 4102, 12, 11}, {"limited", 4101, 13, 12}} {
		for _, op := range []string{"read", "write"} {
			most := c.read
			if op == "write" {
				most = c.write
			}
			t.Run(c.name+"/"+op, func(t *testing.T) {
				var per float64
				var err error
				runAs(c.uid, func() {
					fd, oerr := unix.Open(filepath.Join(mnt, "f"), unix.O_RDWR|unix.O_DIRECT, 0)
					if oerr != nil {
						err = oerr
						return
					}
					defer unix.Close(fd)
					// Page-aligned, as O_DIRECT needs.
					buf, merr := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
					if merr != nil {
						err = merr
						return
					}
					defer unix.Munmap(buf)
					io := func(i int) error {
						off := int64(i*4096) % size
						if op == "read" {
							_, err := unix.Pread(fd, buf, off)
							return err
						}
						_, err := unix.Pwrite(fd, buf, off)
						return err
					}
					for i := range 200 { // warm: pools, the page table
						if err = io(i); err != nil {
							return
						}
					}
					const n = 2000
					var before, after runtime.MemStats
					runtime.ReadMemStats(&before)
					for i := range n {
						if err = io(i); err != nil {
							return
						}
					}
					runtime.ReadMemStats(&after)
					per = float64(after.Mallocs-before.Mallocs) / n
				})
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%.2f allocations per 4 KiB %s", per, op)
				if per > most+0.5 {
					t.Errorf("%.2f allocations per 4 KiB %s, want at most %v", per, op, most)
				}
			})
		}
	}
}
