package fsys

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/group"
	"sluice/stack"
)

// TestSiblingShareOnMount: two tenants under one saturated parent, one
// reading (or writing) 1 MiB blocks and one 4 KiB blocks, each as its own
// uid through a real mount, split the parent by bytes in proportion to
// their weights: of equal weights each gets half within 10 %, of weights
// 200 and 100 two thirds and one third, and of weights 100 and 300 with a
// floor of half the parent for the first, half each; together no more
// than the parent's limit. (2 MiB/s:
// the 4 KiB tenant makes 256 reads or writes a second, one at a time,
// each a FUSE round trip. At 4 MiB/s it fell short of its 512 a second
// under go test -race ./... on a 2-core VM whose host took 0.5-0.9 of
// its cores, at 345, and got 0.68 of an even split for want of speed,
// not of share.)
//
// SOURCE is a tmpfs of its own. On the machine's disk (ext4), with
// another process writing and fsyncing a large file beside the test, the
// 4 KiB writer's one write in flight sat 1.66 s in pwrite(2) while the
// early writebacks queued behind the other process's I/O, and device
// reads of the readers' files, written just before, took up to 96 ms. A
// tenant whose one request is stuck in the backing store asks for nothing
// meanwhile, and idle time earns no credit (see throttle's Fairness): the
// 4 KiB tenant got 0.59-0.80 of an even split writing and 0.55-0.72
// reading, where on the tmpfs, with the same writer beside it, it got
// 0.98-1.00 in every run. That is the backing store's stall, not the
// split this test measures.
func TestSiblingShareOnMount(t *testing.T) {
	if testing.Short() {
		t.Skip("measures rates for 6 s, reading and writing")
	}
	const (
		rate = 2 << 20
		run  = 6 * time.Second
		size = 64 << 20
	)
	for _, c := range []struct {
		dir    string
		wa, wb int64 // the tenants' weights
		floorA int64 // t/a's floor, bytes/s
	}{{"read", 100, 100, 0}, {"write", 100, 100, 0}, {"read", 200, 100, 0}, {"write", 200, 100, 0},
		{"read", 100, 300, 1 << 20}, {"write", 100, 300, 1 << 20}} {
		dir := c.dir
		t.Run(fmt.Sprintf("%s, weights %d and %d, floor %d", dir, c.wa, c.wb, c.floorA), func(t *testing.T) {
			rules := []group.Rule{{Group: "t/a", UID: new(uint32(1001))}, {Group: "t/b", UID: new(uint32(1002))}}
			key := map[string]string{"read": "rbps", "write": "wbps"}[dir]
			la := fmt.Sprintf("t/a weight=%d", c.wa)
			if c.floorA > 0 {
				la += fmt.Sprintf(" %s.min=%d", key, c.floorA)
			}
			opts := Options{Rules: rules, Limits: []group.LimitSpec{limit(t, "t "+key+"=2MiB"),
				limit(t, la), limit(t, fmt.Sprintf("t/b weight=%d", c.wb))},
				Source: tmpfs(t, "size=256m")}
			src, mnt, f := mount(t, opts)
			os.Chmod(src, 0o777)
			if dir == "read" {
				writeRandom(t, filepath.Join(src, "a"), size, 1)
				writeRandom(t, filepath.Join(src, "b"), size, 2)
				for _, n := range []string{"a", "b"} {
					os.Chmod(filepath.Join(src, n), 0o644)
				}
			}
			var wg sync.WaitGroup
			got := map[string]int64{}
			var mu sync.Mutex
			start := time.Now()
			for _, r := range []struct {
				name string
				uid  int
				bs   int
			}{{"a", 1001, 1 << 20}, {"b", 1002, 4 << 10}} {
				wg.Go(func() {
					runAs(r.uid, func() {
						n, err := shareRun(filepath.Join(mnt, r.name), dir == "write", r.bs, start.Add(run))
						if err != nil {
							t.Errorf("%s: %v", r.name, err)
						}
						mu.Lock()
						got[r.name] = n
						mu.Unlock()
					})
				})
			}
			// The split is read from the groups' device bytes between two
			// moments inside the run, past the start and before the end,
			// where both tenants are at work: a 1 MiB request takes a
			// second at 1 MiB/s, and counted whole at the ends of the run
			// it would move a tenant's share by a sixth.
			var m [2][2]stack.GroupMetrics // [moment][tenant]
			for i, at := range []time.Duration{time.Second, run - 500*time.Millisecond} {
				time.Sleep(time.Until(start.Add(at)))
				m[i][0], m[i][1] = groupMetrics(t, f, "t/a"), groupMetrics(t, f, "t/b")
			}
			window := (run - 1500*time.Millisecond).Seconds()
			wg.Wait()
			elapsed := time.Since(start).Seconds()
			dev := func(g stack.GroupMetrics) float64 { return float64(g.RBytes + g.WBytes) }
			a, b := (dev(m[1][0])-dev(m[0][0]))/window, (dev(m[1][1])-dev(m[0][1]))/window
			t.Logf("%s: device bytes from 1 s to %v: t/a (1 MiB blocks) %.2f MiB/s, t/b (4 KiB blocks) %.2f MiB/s; "+
				"over the whole run the tenants moved %.2f and %.2f MiB/s",
				dir, run-500*time.Millisecond, a/(1<<20), b/(1<<20),
				float64(got["a"])/elapsed/(1<<20), float64(got["b"])/elapsed/(1<<20))
			if (a+b)/rate > 1.05 {
				t.Errorf("together %.3f of the parent's limit", (a+b)/rate)
			}
			if got := float64(got["a"]+got["b"]) / elapsed / rate; got > 1.05 {
				t.Errorf("the tenants moved %.3f of the parent's limit over the run", got)
			}
			// stat shows the floor at work: t/a's I/O went first, t/b's
			// never did.
			if fa, fb := groupMetrics(t, f, "t/a").FloorBytes, groupMetrics(t, f, "t/b").FloorBytes; c.floorA > 0 && (fa == 0 || fb != 0) || c.floorA == 0 && fa+fb != 0 {
				t.Errorf("bytes served first for a floor: t/a %d, t/b %d (t/a's floor %d B/s)", fa, fb, c.floorA)
			}
			// t/a's share is its floor where that is more than its
			// weight's; t/b gets the rest.
			shareA := max((a+b)*float64(c.wa)/float64(c.wa+c.wb), float64(c.floorA))
			for name, v := range map[string]float64{"t/a": a, "t/b": b} {
				share := map[string]float64{"t/a": shareA, "t/b": a + b - shareA}[name]
				if v < 0.9*share || v > 1.1*share {
					t.Errorf("%s got %.3f of its share (weights %d and %d, t/a's floor %d B/s; %.2f against %.2f MiB/s)", name, v/share, c.wa, c.wb, c.floorA, a/(1<<20), b/(1<<20))
				}
			}
		})
	}
}

// tmpfs mounts a tmpfs with the given options on a fresh directory and
// returns it; it is unmounted when the test ends.
func tmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "none", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount -t tmpfs -o %s: %v %s", opts, err, out)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// shareRun reads path (or writes it, created) in bs blocks until the
// deadline and returns the bytes moved.
func shareRun(path string, write bool, bs int, deadline time.Time) (int64, error) {
	flags := os.O_RDONLY
	if write {
		flags = os.O_WRONLY | os.O_CREATE | os.O_TRUNC
	}
	fh, err := os.OpenFile(path, flags, 0o644)
	if err != nil {
		return 0, err
	}
	defer fh.Close()
	buf := make([]byte, bs)
	var n int64
	for time.Now().Before(deadline) {
		var m int
		if write {
			m, err = fh.Write(buf)
		} else {
			m, err = fh.Read(buf)
		}
		n += int64(m)
		if err == io.EOF {
			return n, errors.New("read the whole file within the run; make it larger")
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// TestIOPSLimitKeepsReadaheadOnMount: an IOPS limit does not turn
// readahead off. A tenant at riops=10 reading 1 MiB sequentially in 4 KiB
// reads through a real mount makes whole readahead I/Os (at most 16 per
// MiB: the window ramps up to 128 KiB), where a page-by-page reader would
// make 256 and take 25 s.
func TestIOPSLimitKeepsReadaheadOnMount(t *testing.T) {
	if testing.Short() {
		t.Skip("reads at 10 IOPS for about 2 s")
	}
	rules := []group.Rule{{Group: "t", UID: new(uint32(1001))}}
	src, mnt, f := mount(t, Options{Rules: rules, Limits: []group.LimitSpec{limit(t, "t riops=10")}})
	want := writeRandom(t, filepath.Join(src, "a"), 1<<20, 3)
	os.Chmod(filepath.Join(src, "a"), 0o644)
	var got bytes.Buffer
	readAllAs(t, 1001, filepath.Join(mnt, "a"), &got)
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("read %d bytes, not the file's %d", got.Len(), len(want))
	}
	m := groupMetrics(t, f, "t")
	t.Logf("1 MiB in 4 KiB reads at riops=10: %d device reads, %d bytes, readahead issued %d used %d",
		m.RIOs, m.RBytes, m.RAIssued, m.RAUsed)
	if m.RIOs > 16 {
		t.Errorf("%d device reads for 1 MiB; want at most 16 (readahead kept under an IOPS limit)", m.RIOs)
	}
	if m.RAUsed < 3*m.RBytes/4 {
		t.Errorf("readahead used %d of %d bytes read; want most", m.RAUsed, m.RBytes)
	}
}
