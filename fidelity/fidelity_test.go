package fidelity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/engine"
	"sluice/fsys"
	"sluice/group"
	"sluice/sim"
	"sluice/stack"
)

const (
	imageSize = 1 << 30   // the ext4 image, sparse
	fileSize  = 512 << 20 // the file the reader reads
	probeSize = 8 << 20   // the file read from sluice's cache to time the FUSE round trip
	bs        = 4 << 10   // the reader's block size
	runFor    = 8 * time.Second

	readerUID = 1001 // the reader, in the limited group
	probeUID  = 1002 // the round-trip probe, in a group it never fills

	seqFor = 1500 * time.Millisecond // sequential bandwidth calibration
	latFor = 1500 * time.Millisecond // random-read latency calibration
)

// Tolerances, sim against real. Bandwidth: the brief's 5 %. The
// readahead figures are ratios of counters that the same stack code
// computes on both sides from the same decisions; they differ only where
// the timing differs (how much budget the group has when a marker page is
// read), so a model whose timing is right agrees on them to a few percent
// and one whose policy differs (readahead budget off in one of the two)
// is off by a factor of ten or more. 10 % relative, or 0.05 absolute for
// fractions (ra_issued/rbytes, ra_used/ra_issued) near 0, where 10 % of
// nothing would fail on a single stray window.
const (
	tolBW    = 0.05
	tolRatio = 0.10
	tolFrac  = 0.05
)

func TestFidelity(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: makes an ext4 file system on a loop device and reads it through a real mount for ~25 s")
	}
	need(t)

	base := t.TempDir()
	// The readers run as other users: they must reach the mount points.
	os.Chmod(base, 0o755)
	os.Chmod(filepath.Dir(base), 0o755)
	src := ext4(t, base)
	data := filepath.Join(src, "data")
	writeFile(t, data, fileSize, 1)
	probe := filepath.Join(src, "probe")
	writeFile(t, probe, probeSize, 2)

	dev := calibrate(t, data)
	opts := stack.DefaultOptions()
	fuseLat := roundTrip(t, base, src, opts, probe)
	t.Logf("calibrated: device %.0f MiB/s, 4k O_DIRECT random read %v mean, %v stdev (%d reads), queue depth %d; FUSE round trip %v (%s)",
		dev.bw/(1<<20), dev.latMean, dev.latStdev, dev.samples, dev.depth, fuseLat, readerKind())

	for _, limits := range []string{"rbps=8MiB", "rbps=32MiB"} {
		t.Run(limits, func(t *testing.T) {
			sc := scenario(t, limits, dev, fuseLat, opts, true)
			res, err := sim.Run(sc)
			if err != nil {
				t.Fatal(err)
			}
			simSide := fromSim(t, res)

			realSide := runReal(t, base, src, opts, limits, data)

			// The same scenario with the readahead budget off in the sim
			// only: the comparison must tell it from the mount.
			wrongRes, err := sim.Run(scenario(t, limits, dev, fuseLat, opts, false))
			if err != nil {
				t.Fatal(err)
			}
			wrong := fromSim(t, wrongRes)

			checks := compare(simSide, realSide)
			wrongChecks := compare(wrong, realSide)
			t.Logf("%s, %v of 4k sequential reads; sim (calibrated scenario), real (mount), and the sim with readahead-budget off as a control:\n%s",
				limits, runFor, table(checks, wrongChecks))
			for _, c := range checks {
				if !c.ok() {
					t.Errorf("%s: sim %s, real %s: %s apart, tolerance %s", c.name, c.fmt(c.sim), c.fmt(c.real), c.diffString(), c.tolString())
				}
			}
			caught := false
			for _, c := range wrongChecks {
				caught = caught || !c.ok()
			}
			if !caught {
				t.Errorf("the comparison does not tell a sim with the readahead budget off from the mount: it checks nothing the budget changes")
			}
		})
	}
}

// need skips the test when the machine cannot run it.
func need(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (loop device, mount, drop_caches, readers as other users)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("skipping: no /dev/fuse: %v", err)
	}
	for _, c := range []string{"mkfs.ext4", "losetup"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("skipping: no %s", c)
		}
	}
}

// ext4 makes an ext4 file system in a sparse image under base, attaches it
// to a loop device with direct I/O (so the loop device reads its image
// without the page cache, as a disk would), mounts it and returns the
// mount point. Everything is undone when the test ends, whatever happens.
func ext4(t *testing.T, base string) string {
	t.Helper()
	img := filepath.Join(base, "ext4.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, imageSize); err != nil {
		t.Fatal(err)
	}
	// No lazy initialisation: ext4lazyinit would write the inode tables
	// behind the measurements.
	run(t, "mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0", img)
	out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", img).CombinedOutput()
	if err != nil {
		t.Logf("losetup --direct-io=on: %v: %s; attaching without direct I/O (the image's page cache then serves sequential 4k reads)", err, out)
		out, err = exec.Command("losetup", "--find", "--show", img).CombinedOutput()
		if err != nil {
			t.Fatalf("losetup: %v: %s", err, out)
		}
	}
	loop := strings.TrimSpace(string(out))
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "-d", loop).CombinedOutput(); err != nil {
			t.Errorf("losetup -d %s: %v: %s", loop, err, out)
		}
	})
	dir := filepath.Join(base, "ext4")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(loop, dir, "ext4", 0, ""); err != nil {
		t.Fatalf("mount %s on %s: %v", loop, dir, err)
	}
	t.Cleanup(func() {
		var err error
		for range 50 {
			if err = unix.Unmount(dir, 0); err != unix.EBUSY {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("umount %s: %v; detaching it lazily", dir, err)
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	os.Chmod(dir, 0o755)
	return dir
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// writeFile writes n bytes of random (non-zero, incompressible) data to
// path, readable by everyone, and makes them durable.
func writeFile(t *testing.T, path string, n int64, seed uint64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := rand.New(rand.NewPCG(seed, 7))
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(r.Uint32()) | 1
	}
	for off := int64(0); off < n; off += int64(len(chunk)) {
		// Every MiB differs from the others.
		for i := 0; i < len(chunk); i += 4096 {
			chunk[i] = byte(off>>20) | 1
		}
		if _, err := f.Write(chunk[:min(int64(len(chunk)), n-off)]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// dropCaches writes back and drops the page cache, dentries and inodes.
func dropCaches(t *testing.T) {
	t.Helper()
	unix.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		t.Fatalf("drop caches: %v", err)
	}
}

// device is what the calibration measured.
type device struct {
	bw                 float64 // bytes per second, sequential 1 MiB O_DIRECT reads
	latMean, latStdev  time.Duration
	latP50, latP99     time.Duration
	samples            int
	depth              int
	seqBytes, seqReads int64
}

// calibrate measures path's device: sequential O_DIRECT read bandwidth
// with 1 MiB reads, then the latency of 4 KiB O_DIRECT reads at random
// offsets, each from a dropped cache.
func calibrate(t *testing.T, path string) device {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s O_DIRECT: %v", path, err)
	}
	defer unix.Close(fd)
	buf, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	pread := func(b []byte, off int64) int {
		for {
			n, err := unix.Pread(fd, b, off)
			if err == unix.EINTR {
				continue
			}
			if err != nil || n <= 0 {
				t.Fatalf("pread %d at %d: %d, %v", len(b), off, n, err)
			}
			return n
		}
	}
	var d device
	dropCaches(t)
	start := time.Now()
	var off int64
	for time.Since(start) < seqFor {
		n := pread(buf, off)
		d.seqBytes += int64(n)
		d.seqReads++
		if off += int64(n); off >= fileSize {
			off = 0
		}
	}
	d.bw = float64(d.seqBytes) / time.Since(start).Seconds()

	dropCaches(t)
	r := rand.New(rand.NewPCG(3, 5))
	var lats []float64
	start = time.Now()
	for time.Since(start) < latFor {
		off := r.Int64N(fileSize/bs) * bs
		t0 := time.Now()
		pread(buf[:bs], off)
		lats = append(lats, float64(time.Since(t0)))
	}
	mean, stdev := moments(lats)
	d.latMean, d.latStdev = time.Duration(mean), time.Duration(stdev)
	d.latP50, d.latP99 = time.Duration(percentile(lats, 50)), time.Duration(percentile(lats, 99))
	d.samples = len(lats)
	d.depth = queueDepth(t, path)
	return d
}

func moments(x []float64) (mean, stdev float64) {
	for _, v := range x {
		mean += v
	}
	mean /= float64(len(x))
	for _, v := range x {
		stdev += (v - mean) * (v - mean)
	}
	return mean, math.Sqrt(stdev / float64(max(len(x)-1, 1)))
}

func percentile(x []float64, p float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[min(len(s)-1, int(p/100*float64(len(s))))]
}

// queueDepth is the request queue depth of the block device holding path,
// 32 when it cannot be read.
func queueDepth(t *testing.T, path string) int {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 32
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/dev/block/%d:%d/queue/nr_requests", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return 32
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 32
	}
	return n
}

// sluice mounts sluice on src at a new directory under base with the
// stack options, a rule putting uid in group g and g's limits. unmount is
// idempotent and also runs when the test ends.
func sluice(t *testing.T, base, src string, o stack.Options, uid uint32, g, limits string) (f *fsys.FS, mnt string, unmount func()) {
	t.Helper()
	mnt, err := os.MkdirTemp(base, "mnt-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(mnt, 0o755)
	l, err := group.ParseLimit(g + " " + limits)
	if err != nil {
		t.Fatal(err)
	}
	f, err = fsys.Mount(fsys.Options{
		Options:    engine.Options{Options: o},
		Source:     src,
		Mountpoint: mnt,
		Rules:      []group.Rule{{Group: g, UID: &uid}},
		Limits:     []group.LimitSpec{l},
		AllowOther: true, // the readers are processes of other users
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { f.Wait(); close(done) }()
	var once sync.Once
	unmount = func() {
		once.Do(func() {
			if err := f.Unmount(); err != nil {
				t.Errorf("unmount %s: %v", mnt, err)
				return
			}
			<-done
		})
	}
	t.Cleanup(unmount)
	return f, mnt, unmount
}

// roundTrip measures the FUSE round trip of a 4 KiB read that sluice
// serves from its cache: the probe file is read once through a limited
// group whose limit is never reached (sluice serves unlimited groups from
// the kernel's page cache, not through its stack), then read again for a
// second; the time per read is the scenario's fuse-latency. It includes
// the reader's own per-call cost, which the simulator charges nowhere
// else.
func roundTrip(t *testing.T, base, src string, o stack.Options, probe string) time.Duration {
	t.Helper()
	_, mnt, unmount := sluice(t, base, src, o, probeUID, "probe", "rbps=1TiB")
	defer unmount()
	path := filepath.Join(mnt, filepath.Base(probe))
	read(t, probeUID, path, probeSize, 0) // into sluice's cache
	r := read(t, probeUID, path, probeSize, time.Second)
	return time.Duration(float64(r.runtime) / float64(r.ios))
}

// scenario is the fidelity scenario as TOML, parsed by the simulator's
// parser (so that a mistake names its key): the calibrated device, the
// mount options the real mount uses, the group's limits and one reader.
func scenario(t *testing.T, limits string, d device, fuseLat time.Duration, o stack.Options, budget bool) *sim.Scenario {
	t.Helper()
	src := fmt.Sprintf(`name = "fidelity: 4k sequential buffered reads at %[1]s on a calibrated loop-device ext4"
seed = 1

[mount]
max-io = %[2]q
readahead = %[3]q
readahead-budget = %[4]t
cache = %[5]q
burst = %[6]q
max-wait = %[7]q
max-read = "1MiB"
fuse-latency = "%[8]dns"

[[device]]
name = "loop"
bandwidth = "%[9]d"
latency = "lognormal(%[10]dns,%[11]dns)"
queue-depth = %[12]d

[[group]]
name = "reader"
limits = %[1]q

[[job]]
name = "reader"
group = "reader"
device = "loop"
rw = "read"
bs = %[13]q
size = %[14]q
runtime = %[15]q
`, limits, group.FormatSize(o.MaxIO), group.FormatSize(o.Readahead), budget && o.ReadaheadBudget,
		group.FormatSize(o.CacheBytes), o.Burst.String(), o.MaxWait.String(), fuseLat.Nanoseconds(),
		int64(d.bw), d.latMean.Nanoseconds(), d.latStdev.Nanoseconds(), d.depth,
		group.FormatSize(bs), group.FormatSize(fileSize), runFor.String())
	sc, err := sim.Parse("fidelity.toml", src)
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return sc
}

// side is one side's figures: the reader's, and its group's counters.
type side struct {
	bw       float64 // bytes per second, as fio reports it
	bytes    int64   // the reader's bytes
	ios      int64
	clatAvg  float64 // ns
	counters stack.Counters
}

func fromSim(t *testing.T, res *sim.Result) side {
	t.Helper()
	kib, err := res.Figure("reader", "bw")
	if err != nil {
		t.Fatal(err)
	}
	s := side{bw: kib * 1024}
	for _, j := range res.Jobs {
		if j.Name == "reader" {
			s.bytes, s.ios, s.clatAvg = j.Bytes, j.IOs, j.Clat.Avg
		}
	}
	s.counters = counters(t, res.Stack)
	return s
}

func counters(t *testing.T, m stack.Metrics) stack.Counters {
	t.Helper()
	for _, g := range m.Groups {
		if g.Group == "reader" {
			return g.Counters
		}
	}
	t.Fatalf("no group reader in %+v", m.Groups)
	return stack.Counters{}
}

// runReal mounts sluice on src with the reader's group and limits, reads
// the data file as the reader from a dropped cache, and returns the
// reader's figures and the group's counters.
func runReal(t *testing.T, base, src string, o stack.Options, limits, data string) side {
	t.Helper()
	dropCaches(t)
	f, mnt, unmount := sluice(t, base, src, o, readerUID, "reader", limits)
	defer unmount()
	r := read(t, readerUID, filepath.Join(mnt, filepath.Base(data)), fileSize, runFor)
	// Readahead still queued or in flight when the reader stopped is
	// counted as it completes, as in the simulator: wait until the
	// counters settle.
	m := f.Engine().Metrics()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		n := f.Engine().Metrics()
		if n.Queued == 0 && counters(t, n) == counters(t, m) {
			break
		}
		m = n
	}
	return side{bw: r.bw(), bytes: r.bytes, ios: r.ios, clatAvg: r.clatAvg, counters: counters(t, m)}
}

// readResult is what a reader measured.
type readResult struct {
	bytes, ios int64
	runtime    time.Duration
	clatAvg    float64 // ns per read
}

func (r readResult) bw() float64 { return float64(r.bytes) / r.runtime.Seconds() }

func readerKind() string {
	if _, err := exec.LookPath("fio"); err == nil {
		return "readers: fio, psync, 4k"
	}
	return "readers: a Go loop of 4k reads (no fio)"
}

// read reads path sequentially in 4 KiB reads as uid: for d, going round
// the file, or once through size bytes when d is 0. With fio installed fio
// reads (a process of its own, as in the seeds); otherwise a Go loop on
// a thread whose file-system ids are uid's.
func read(t *testing.T, uid uint32, path string, size int64, d time.Duration) readResult {
	t.Helper()
	if _, err := exec.LookPath("fio"); err == nil {
		return fio(t, uid, path, size, d)
	}
	return goRead(t, uid, path, size, d)
}

func fio(t *testing.T, uid uint32, path string, size int64, d time.Duration) readResult {
	t.Helper()
	args := []string{"--name=reader", "--filename=" + path, "--readonly", "--rw=read",
		"--bs=" + strconv.Itoa(bs), "--ioengine=psync", "--invalidate=0",
		"--size=" + strconv.FormatInt(size, 10), "--output-format=json"}
	if d > 0 {
		args = append(args, "--time_based", "--runtime="+strconv.FormatInt(d.Milliseconds(), 10)+"ms")
	}
	cmd := exec.Command("fio", args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("fio %s: %v\n%s%s", strings.Join(args, " "), err, stdout.Bytes(), stderr.Bytes())
	}
	out := stdout.Bytes()
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:] // fio may print notes before its JSON
	}
	var res struct {
		Jobs []struct {
			Error int `json:"error"`
			Read  struct {
				IOBytes  int64 `json:"io_bytes"`
				TotalIOs int64 `json:"total_ios"`
				Runtime  int64 `json:"runtime"` // ms
				Clat     struct {
					Mean float64 `json:"mean"`
				} `json:"clat_ns"`
			} `json:"read"`
		} `json:"jobs"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.Jobs) != 1 {
		t.Fatalf("fio's output: %v\n%s%s", err, stdout.Bytes(), stderr.Bytes())
	}
	j := res.Jobs[0]
	if j.Error != 0 || j.Read.Runtime <= 0 || j.Read.TotalIOs <= 0 {
		t.Fatalf("fio read nothing (error %d)\n%s%s", j.Error, stdout.Bytes(), stderr.Bytes())
	}
	return readResult{bytes: j.Read.IOBytes, ios: j.Read.TotalIOs,
		runtime: time.Duration(j.Read.Runtime) * time.Millisecond, clatAvg: j.Read.Clat.Mean}
}

func goRead(t *testing.T, uid uint32, path string, size int64, d time.Duration) readResult {
	t.Helper()
	var r readResult
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		unix.Setfsgid(int(uid))
		unix.Setfsuid(int(uid))
		var f *os.File
		if f, err = os.Open(path); err != nil {
			return
		}
		defer f.Close()
		buf := make([]byte, bs)
		start := time.Now()
		var off int64
		for d > 0 && time.Since(start) < d || d == 0 && off < size {
			var n int
			n, err = f.ReadAt(buf, off)
			if err == io.EOF && n == 0 && d > 0 {
				off, err = 0, nil
				continue
			}
			if err != nil && !errors.Is(err, io.EOF) {
				return
			}
			err = nil
			r.bytes += int64(n)
			r.ios++
			off += int64(n)
		}
		r.runtime = time.Since(start)
		r.clatAvg = float64(r.runtime) / float64(max(r.ios, 1))
	}()
	<-done
	if err != nil {
		t.Fatalf("read %s as uid %d: %v", path, uid, err)
	}
	return r
}

// check is one figure of both sides and its tolerance.
type check struct {
	name      string
	sim, real float64
	rel, abs  float64 // tolerance: relative, or absolute; 0: shown only
	unit      string  // "%" shows fractions as percentages
}

func (c check) diff() float64 {
	if c.abs > 0 {
		return c.sim - c.real
	}
	if c.real == 0 {
		if c.sim == 0 {
			return 0
		}
		return math.Inf(1)
	}
	return c.sim/c.real - 1
}

func (c check) ok() bool {
	switch {
	case c.abs > 0:
		return math.Abs(c.diff()) <= c.abs
	case c.rel > 0:
		return math.Abs(c.diff()) <= c.rel
	}
	return true
}

func (c check) fmt(v float64) string {
	if c.unit == "%" {
		return fmt.Sprintf("%.1f%%", 100*v)
	}
	return fmt.Sprintf("%.2f", v)
}

func (c check) diffString() string {
	if c.abs > 0 {
		return fmt.Sprintf("%+.1f pt", 100*c.diff())
	}
	return fmt.Sprintf("%+.1f%%", 100*c.diff())
}

func (c check) tolString() string {
	switch {
	case c.abs > 0:
		return fmt.Sprintf("±%.0f pt", 100*c.abs)
	case c.rel > 0:
		return fmt.Sprintf("±%.0f%%", 100*c.rel)
	}
	return "-"
}

func ratio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// compare lists the figures of both sides: checked ones with a
// tolerance, the rest for the table.
func compare(s, r side) []check {
	const mib = 1 << 20
	sc, rc := s.counters, r.counters
	return []check{
		{name: "bw (MiB/s)", sim: s.bw / mib, real: r.bw / mib, rel: tolBW},
		{name: "read (MiB)", sim: float64(s.bytes) / mib, real: float64(r.bytes) / mib},
		{name: "clat avg (us)", sim: s.clatAvg / 1e3, real: r.clatAvg / 1e3},
		{name: "app_rbytes (MiB)", sim: float64(sc.AppRBytes) / mib, real: float64(rc.AppRBytes) / mib},
		{name: "rbytes (MiB)", sim: float64(sc.RBytes) / mib, real: float64(rc.RBytes) / mib},
		{name: "rios", sim: float64(sc.RIOs), real: float64(rc.RIOs)},
		{name: "ra_issued (MiB)", sim: float64(sc.RAIssued) / mib, real: float64(rc.RAIssued) / mib},
		{name: "ra_used (MiB)", sim: float64(sc.RAUsed) / mib, real: float64(rc.RAUsed) / mib},
		{name: "ra_wasted (MiB)", sim: float64(sc.RAWasted) / mib, real: float64(rc.RAWasted) / mib},
		{name: "rios per MiB read", sim: ratio(sc.RIOs*mib, sc.AppRBytes), real: ratio(rc.RIOs*mib, rc.AppRBytes), rel: tolRatio},
		{name: "rbytes/app_rbytes", sim: ratio(sc.RBytes, sc.AppRBytes), real: ratio(rc.RBytes, rc.AppRBytes), rel: tolRatio},
		{name: "ra_issued/rbytes", sim: ratio(sc.RAIssued, sc.RBytes), real: ratio(rc.RAIssued, rc.RBytes), abs: tolFrac, unit: "%"},
		{name: "ra_used/ra_issued", sim: ratio(sc.RAUsed, sc.RAIssued), real: ratio(rc.RAUsed, rc.RAIssued), abs: tolFrac, unit: "%"},
	}
}

// table renders the checks and the control's as aligned columns.
func table(checks, control []check) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-20s %12s %12s %9s %8s %4s | %12s %9s %4s\n", "figure", "sim", "real", "diff", "tol", "", "budget off", "diff", "")
	for i, c := range checks {
		w := control[i]
		mark := func(c check) string {
			if c.rel == 0 && c.abs == 0 {
				return ""
			}
			if c.ok() {
				return "ok"
			}
			return "FAIL"
		}
		fmt.Fprintf(&b, "  %-20s %12s %12s %9s %8s %4s | %12s %9s %4s\n", c.name, c.fmt(c.sim), c.fmt(c.real),
			c.diffString(), c.tolString(), mark(c), w.fmt(w.sim), w.diffString(), mark(w))
	}
	return b.String()
}
