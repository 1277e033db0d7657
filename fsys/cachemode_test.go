package fsys

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sluice/group"
	"sluice/throttle"
)

// readAllAs reads path as uid in 4 KiB read() calls, into keep if not
// nil, and returns the bytes read and how many calls it made.
func readAllAs(t *testing.T, uid int, path string, keep *bytes.Buffer) (n int64, calls int) {
	t.Helper()
	return readAllAsBy(t, uid, path, 4096, keep)
}

// readAllAsBy is readAllAs in read() calls of bs bytes.
func readAllAsBy(t *testing.T, uid int, path string, bs int, keep *bytes.Buffer) (n int64, calls int) {
	t.Helper()
	runAs(uid, func() {
		f, err := os.Open(path)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		buf := make([]byte, bs)
		for {
			m, err := f.Read(buf)
			n += int64(m)
			calls++
			if keep != nil {
				keep.Write(buf[:m])
			}
			if err == io.EOF {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
		}
	})
	return n, calls
}

// TestCacheMode: with --cache-mode auto a group whose read limit is high
// (100 MiB/s) is served through the kernel's page cache: its 4 KiB reads
// reach sluice only as the kernel's readahead, a second read of the file
// not at all, and the limit still holds over the run; a group with a low
// limit (8 MiB/s) is served with direct I/O, every read reaching sluice.
// A new open after the limit changes gets the mode of the new limit;
// direct and kernel force the mode whatever the limit.
func TestCacheMode(t *testing.T) {
	const size = 128 << 20
	for _, tc := range []struct {
		mode         CacheMode
		high, low    bool // kernel cache for the high and the low limit
		name         string
		measuresRate bool
	}{
		{CacheAuto, true, false, "auto", true},
		{CacheDirect, false, false, "direct", false},
		{CacheKernel, true, true, "kernel", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules := []group.Rule{{Group: "hi", UID: new(uint32(1001))}, {Group: "lo", UID: new(uint32(1002))}}
			src, mnt, f := mount(t, Options{Rules: rules, CacheMode: tc.mode,
				Limits: []group.LimitSpec{limit(t, "hi rbps=100MiB"), limit(t, "lo rbps=8MiB")}})
			writeRandom(t, filepath.Join(src, "big"), size, 1)
			writeRandom(t, filepath.Join(src, "small"), 1<<20, 2)
			os.Chmod(filepath.Join(src, "big"), 0o644)
			os.Chmod(filepath.Join(src, "small"), 0o644)
			// The kernel serves a group from its page cache when sluice's
			// count of reads is far below the read() calls made.
			kernel := func(g string, before int64, calls int) bool {
				return groupMetrics(t, f, g).AppReads-before < int64(calls)/4
			}
			start := time.Now()
			n, calls := readAllAs(t, 1001, filepath.Join(mnt, "big"), nil)
			took := time.Since(start)
			if n != size {
				t.Fatalf("read %d bytes of %d", n, size)
			}
			if got := kernel("hi", 0, calls); got != tc.high {
				t.Errorf("group at rbps=100MiB: kernel page cache %v, want %v (%d read() calls, sluice saw %d)",
					got, tc.high, calls, groupMetrics(t, f, "hi").AppReads)
			}
			rate := float64(size) / took.Seconds() / (100 << 20)
			t.Logf("%s: 128 MiB in 4 KiB reads at rbps=100MiB: %v, achieved/limit %.3f; sluice saw %d reads of %d",
				tc.name, took, rate, groupMetrics(t, f, "hi").AppReads, calls)
			if rate > 1.05 {
				t.Errorf("achieved %.3f of rbps=100MiB, want at most 1.05", rate)
			}
			if tc.high {
				// A second read of the file is the kernel's page cache's.
				before := groupMetrics(t, f, "hi").AppReads
				if _, calls := readAllAs(t, 1001, filepath.Join(mnt, "big"), nil); groupMetrics(t, f, "hi").AppReads-before > int64(calls)/100 {
					t.Errorf("a second read of the file reached sluice %d times in %d calls", groupMetrics(t, f, "hi").AppReads-before, calls)
				}
			}
			_, calls = readAllAs(t, 1002, filepath.Join(mnt, "small"), nil)
			if got := kernel("lo", 0, calls); got != tc.low {
				t.Errorf("group at rbps=8MiB: kernel page cache %v, want %v", got, tc.low)
			}
			// Limits changed: the next open follows them.
			f.Engine().SetLimits("hi", throttle.SetAll(throttle.Limits{RBPS: 8 << 20}))
			f.Engine().SetLimits("lo", throttle.SetAll(throttle.Limits{RBPS: 100 << 20}))
			os.WriteFile(filepath.Join(src, "small2"), make([]byte, 1<<20), 0o644)
			before := groupMetrics(t, f, "hi").AppReads
			if _, calls := readAllAs(t, 1001, filepath.Join(mnt, "small2"), nil); kernel("hi", before, calls) != tc.low {
				t.Errorf("after hi's limit went down to 8MiB: kernel page cache %v, want %v", !tc.low, tc.low)
			}
			before = groupMetrics(t, f, "lo").AppReads
			if _, calls := readAllAs(t, 1002, filepath.Join(mnt, "big"), nil); kernel("lo", before, calls) != tc.high {
				t.Errorf("after lo's limit went up to 100MiB: kernel page cache %v, want %v", !tc.high, tc.high)
			}
		})
	}
}
