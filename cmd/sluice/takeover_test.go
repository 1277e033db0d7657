package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/backing"
	"sluice/control"
)

// takeoverFile is the size of the file the tenant reads across a
// takeover; its byte at offset i is byte(i*7 + i>>12).
const takeoverFile = 8 << 20

func takeoverByte(i int64) byte { return byte(i*7 + i>>12) }

// takeoverNames is how many names the tenant's directory holds.
const takeoverNames = 2000

// takeoverResult is what the tenant reports.
type takeoverResult struct {
	Ops       int      `json:"ops"`
	Errors    []string `json:"errors"`
	Appends   int      `json:"appends"`
	Names     int      `json:"names"`
	Repeated  int      `json:"repeated"`
	ReadBytes int64    `json:"read_bytes"`
	Seconds   float64  `json:"seconds"`
	LongestMs float64  `json:"longest_ms"`
}

// runTenant is the tenant of TestTakeover, run as a process of its own
// (SLUICE_TAKEOVER_TENANT=MNT): with files and a directory open and its
// working directory in the mount, it reads, appends, stats, creates and
// removes until stdin closes, then finishes its listing and reports.
func runTenant(mnt string) {
	res := takeoverResult{}
	fail := func(format string, args ...any) {
		if len(res.Errors) < 10 {
			res.Errors = append(res.Errors, fmt.Sprintf(format, args...))
		}
	}
	data, err := os.Open(filepath.Join(mnt, "data"))
	if err != nil {
		fmt.Println(`{"errors":["open data: ` + err.Error() + `"]}`)
		return
	}
	logf, err := os.OpenFile(filepath.Join(mnt, "own", "log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Println(`{"errors":["open log: ` + err.Error() + `"]}`)
		return
	}
	dir, err := os.Open(filepath.Join(mnt, "names"))
	if err != nil {
		fmt.Println(`{"errors":["open names: ` + err.Error() + `"]}`)
		return
	}
	if err := os.Chdir(filepath.Join(mnt, "own")); err != nil {
		fmt.Println(`{"errors":["chdir: ` + err.Error() + `"]}`)
		return
	}
	seen := map[string]int{}
	first, err := dir.Readdirnames(10)
	if err != nil {
		fail("readdir before: %v", err)
	}
	for _, n := range first {
		seen[n]++
	}
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	fmt.Println("ready")
	start := time.Now()
	buf := make([]byte, 4096)
	var off int64
loop:
	for i := 0; ; i++ {
		select {
		case <-stop:
			break loop
		default:
		}
		t0 := time.Now()
		n, err := data.ReadAt(buf, off)
		if err != nil || n != len(buf) {
			fail("read at %d: %d, %v", off, n, err)
		} else {
			res.ReadBytes += int64(n)
			for j := range n {
				if buf[j] != takeoverByte(off+int64(j)) {
					fail("read at %d: byte %d differs", off, j)
					break
				}
			}
		}
		off = (off + 1<<20 + 4096) % (takeoverFile - 4096)
		if _, err := fmt.Fprintf(logf, "%d\n", res.Appends); err != nil {
			fail("append %d: %v", res.Appends, err)
		} else {
			res.Appends++
		}
		name := "f" + strconv.Itoa(i%50)
		if err := os.WriteFile(name, []byte(name), 0o644); err != nil {
			fail("create %s: %v", name, err)
		}
		if b, err := os.ReadFile(name); err != nil || string(b) != name {
			fail("read back %s: %q, %v", name, b, err)
		}
		if err := os.Remove(name); err != nil {
			fail("remove %s: %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(mnt, "names", "n"+strconv.Itoa(i%takeoverNames))); err != nil {
			fail("stat: %v", err)
		}
		if _, err := logf.Stat(); err != nil {
			fail("fstat: %v", err)
		}
		res.Ops++
		if d := time.Since(t0).Seconds() * 1000; d > res.LongestMs {
			res.LongestMs = d
		}
	}
	res.Seconds = time.Since(start).Seconds()
	for {
		names, err := dir.Readdirnames(100)
		for _, n := range names {
			seen[n]++
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			fail("readdir after: %v", err)
			break
		}
	}
	res.Names = len(seen)
	for _, c := range seen {
		if c > 1 {
			res.Repeated++
		}
	}
	for _, f := range []*os.File{data, logf, dir} {
		if err := f.Close(); err != nil {
			fail("close %s: %v", f.Name(), err)
		}
	}
	json.NewEncoder(os.Stdout).Encode(res)
}

func init() {
	if mnt := os.Getenv("SLUICE_TAKEOVER_TENANT"); mnt != "" {
		runTenant(mnt)
		os.Exit(0)
	}
}

// tenantExe copies this test binary where uid 4243 may run it as the
// tenant, and returns its path.
func tenantExe(t *testing.T, dir string) string {
	t.Helper()
	exe := filepath.Join(dir, "tenant")
	if b, err := os.ReadFile(os.Args[0]); err != nil || os.WriteFile(exe, b, 0o755) != nil {
		t.Fatalf("copy the test binary: %v", err)
	}
	return exe
}

// fillTenantTree puts in dir what the tenant works on: the file it
// reads, a directory of takeoverNames names, and its own directory.
func fillTenantTree(t *testing.T, dir string) {
	t.Helper()
	data := make([]byte, takeoverFile)
	for i := range data {
		data[i] = takeoverByte(int64(i))
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "names"), 0o755)
	for i := range takeoverNames {
		os.WriteFile(filepath.Join(dir, "names", "n"+strconv.Itoa(i)), nil, 0o644)
	}
	os.Mkdir(filepath.Join(dir, "own"), 0o755)
	os.Chown(filepath.Join(dir, "own"), 4243, 4243)
}

// startTenant starts the tenant (runTenant) as uid 4243 on mnt and
// returns once it works; the function it returns stops it and checks
// that none of its operations failed and its listing had every name
// once, and returns its report.
func startTenant(t *testing.T, exe, mnt string) (stop func() takeoverResult) {
	t.Helper()
	tenant := exec.Command(exe)
	tenant.Env = append(os.Environ(), "SLUICE_TAKEOVER_TENANT="+mnt)
	tenant.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4243, Gid: 4243}}
	stdin, _ := tenant.StdinPipe()
	stdout, _ := tenant.StdoutPipe()
	tenant.Stderr = os.Stderr
	if err := tenant.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tenant.Process.Kill() })
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("the tenant did not start: %q", lines.Text())
	}
	return func() takeoverResult {
		t.Helper()
		stdin.Close()
		var res takeoverResult
		if !lines.Scan() || json.Unmarshal(lines.Bytes(), &res) != nil {
			t.Fatalf("the tenant's report: %q", lines.Text())
		}
		tenant.Wait()
		t.Logf("tenant: %d rounds in %.1f s, longest %.0f ms, %d appends, read %.1f MiB/s", res.Ops, res.Seconds, res.LongestMs, res.Appends, float64(res.ReadBytes)/res.Seconds/(1<<20))
		if len(res.Errors) > 0 {
			t.Errorf("the tenant saw errors: %v", res.Errors)
		}
		if res.Ops == 0 {
			t.Error("the tenant did nothing")
		}
		if res.Names != takeoverNames || res.Repeated != 0 {
			t.Errorf("the listing across the takeovers had %d names (%d twice), want %d once each", res.Names, res.Repeated, takeoverNames)
		}
		return res
	}
}

// serving is a sluice serving a mount: its log, and its exit.
type serving struct {
	log     fmt.Stringer
	exited  chan struct{}
	waitErr *error
}

// takeOver has a new sluice take the mount at mnt over from old, and
// returns once old has exited 0 and the new one serves.
func takeOver(t *testing.T, mnt string, old serving) serving {
	t.Helper()
	_, log, exited, waitErr := startTakeover2(t, mnt)
	select {
	case <-old.exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the serving sluice did not exit after the takeover; its log:\n%s", old.log)
	}
	if *old.waitErr != nil {
		t.Fatalf("the serving sluice exited with %v; its log:\n%s", *old.waitErr, old.log)
	}
	if !strings.Contains(old.log.String(), "handed over") {
		t.Errorf("the old sluice's log does not say it handed over:\n%s", old.log)
	}
	if !isMounted(mnt) {
		t.Fatal("the mount went away with the old sluice")
	}
	return serving{log, exited, waitErr}
}

// checkAppends checks that the tenant's log at path holds its n appends
// in order.
func checkAppends(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]string, n)
	for i := range want {
		want[i] = strconv.Itoa(i)
	}
	if got := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n"); !slices.Equal(got, want) {
		t.Errorf("the appended log %s holds %d lines, want 0..%d in order", path, len(got), n-1)
	}
}

// TestTakeover: a new sluice takes a mount over (sluice mount --takeover
// MOUNTPOINT) while a tenant of another uid, in a limited group, holds a
// file open for reading, one for appending and a directory half listed,
// works in the mount and never stops: none of its operations fails, its
// appends are all there in order, its listing has every name once, and
// the limits (a set made at run time among them) hold in the new sluice.
// The old sluice exits 0; the new one takes over again, then unmounts on
// SIGTERM.
func TestTakeover(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	exe := tenantExe(t, dir)
	fillTenantTree(t, src)
	_, oldErr, oldExited, oldWait := startMount(t, mnt, "mount", "--limit", "tenants/a rbps=8MiB", "--group", "tenants/a uid=4243", src, mnt)
	if out, err := sluice("set", mnt, "default wiops=500").CombinedOutput(); err != nil {
		t.Fatalf("set: %v\n%s", err, out)
	}
	stop := startTenant(t, exe, mnt)
	time.Sleep(300 * time.Millisecond) // the tenant at work before the takeover

	before, err := control.Stat(mnt)
	if err != nil {
		t.Fatal(err)
	}
	next := takeOver(t, mnt, serving{oldErr, oldExited, oldWait})
	st, err := control.Stat(mnt)
	if err != nil {
		t.Fatalf("stat after the takeover: %v", err)
	}
	if g := find(st, "default"); g == nil || !strings.Contains(g.Limits, "wiops=500") {
		t.Errorf("the limit set at run time did not carry over: %+v", g)
	}
	if g := find(st, "tenants/a"); g == nil || !strings.Contains(g.Limits, "rbps=8MiB") {
		t.Errorf("the command line's limit did not carry over: %+v", g)
	}
	// The counters go on from where they were.
	if b, a := find(before, "tenants/a"), find(st, "tenants/a"); b == nil || a == nil || b.AppReads == 0 || a.AppReads < b.AppReads || a.AppRBytes < b.AppRBytes {
		t.Errorf("the tenant's counters went from %+v before the takeover to %+v after", b, a)
	}
	time.Sleep(300 * time.Millisecond)
	// And again, from the sluice that took over.
	third := takeOver(t, mnt, next)
	time.Sleep(300 * time.Millisecond)

	res := stop()
	checkAppends(t, filepath.Join(src, "own", "log"), res.Appends)
	if !strings.Contains(third.log.String(), "taken over") {
		t.Errorf("the third sluice's log does not say it took over:\n%s", third.log)
	}
}

// TestTakeoverMirror: TestTakeover's tenant works in a mirror set of two
// mirrors across two takeovers, holding its files and directory open:
// none of its operations fails, its reads are right, its appends are all
// there in order in both mirrors, which hold the same tree at the end,
// and sluice stat shows both mirrors healthy and the read policy set at
// run time (not the command line's).
func TestTakeoverMirror(t *testing.T) {
	needMount(t)
	dir, _, mnt := srcMnt(t)
	exe := tenantExe(t, dir)
	mirrors := []string{filepath.Join(dir, "m0"), filepath.Join(dir, "m1")}
	for _, m := range mirrors {
		os.Mkdir(m, 0o755)
		fillTenantTree(t, m)
	}
	_, oldErr, oldExited, oldWait := startMount(t, mnt, "mount", "--limit", "tenants/a rbps=8MiB", "--group", "tenants/a uid=4243",
		"--mirror", mirrors[0], "--mirror", mirrors[1], "--read-policy", "adaptive", mnt)
	if out, err := sluice("set", mnt, "read-policy=roundrobin").CombinedOutput(); err != nil {
		t.Fatalf("set: %v\n%s", err, out)
	}
	stop := startTenant(t, exe, mnt)
	time.Sleep(300 * time.Millisecond)
	before, err := control.Stat(mnt)
	if err != nil {
		t.Fatal(err)
	}
	next := takeOver(t, mnt, serving{oldErr, oldExited, oldWait})
	// Each mirror's figures go on from where they were.
	if after, err := control.Stat(mnt); err != nil || len(after.Mirrors) != len(before.Mirrors) {
		t.Errorf("stat after the takeover: %v, %d mirrors", err, len(after.Mirrors))
	} else {
		for i, b := range before.Mirrors {
			if a := after.Mirrors[i]; a.Reads < b.Reads || a.Bytes < b.Bytes || b.Reads == 0 && i == 0 {
				t.Errorf("mirror %d's figures went from %d reads, %d bytes before the takeover to %d, %d after", i, b.Reads, b.Bytes, a.Reads, a.Bytes)
			}
		}
	}
	time.Sleep(300 * time.Millisecond)
	third := takeOver(t, mnt, next)
	time.Sleep(300 * time.Millisecond)
	res := stop()
	for _, m := range mirrors {
		checkAppends(t, filepath.Join(m, "own", "log"), res.Appends)
	}
	if a, b := mirrorTree(t, mirrors[0]), mirrorTree(t, mirrors[1]); !slices.Equal(a, b) {
		t.Errorf("the mirrors differ after the takeovers:\n%s\n%s", strings.Join(a, "\n"), strings.Join(b, "\n"))
	}
	st, err := control.Stat(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if st.ReadPolicy != "roundrobin" {
		t.Errorf("read policy %q after the takeovers, want roundrobin (set at run time)", st.ReadPolicy)
	}
	if len(st.Mirrors) != 2 {
		t.Fatalf("%d mirrors after the takeovers", len(st.Mirrors))
	}
	for i, m := range st.Mirrors {
		if m.Dir != mirrors[i] || m.State != backing.Healthy {
			t.Errorf("mirror %d after the takeovers: %s %s", i, m.Dir, m.State)
		}
	}
	out, err := sluice("stat", mnt).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "read policy roundrobin") || strings.Count(string(out), backing.Healthy) < 2 {
		t.Errorf("sluice stat after the takeovers: %v\n%s", err, out)
	}
	if !strings.Contains(third.log.String(), "taken over") {
		t.Errorf("the third sluice's log does not say it took over:\n%s", third.log)
	}
}

// mirrorTree lists what mirror dir holds, less the set's own files: each
// path with its type and a digest of a regular file's content.
func mirrorTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if filepath.Dir(rel) == "." && strings.HasPrefix(rel, backing.StateFile) {
			return nil
		}
		line := rel + " " + d.Type().String()
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += fmt.Sprintf(" %d %08x", len(b), crc32.ChecksumIEEE(b))
		}
		out = append(out, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// startTakeover2 runs sluice mount --takeover [ARGS...] MNT and returns
// once it serves the mount.
func startTakeover2(t *testing.T, mnt string, args ...string) (cmd *exec.Cmd, stderr *safeBuffer, exited chan struct{}, waitErr *error) {
	t.Helper()
	cmd = sluice(append(append([]string{"mount", "--takeover"}, args...), mnt)...)
	stderr = &safeBuffer{}
	exited, waitErr = runCmd(t, cmd, stderr)
	waitLogWithin(t, serving{stderr, exited, waitErr}, "serving, taken over", 1, 20*time.Second)
	return cmd, stderr, exited, waitErr
}

// safeBuffer is a buffer a process's output is copied into while the
// test reads it.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTakeoverFio: six takeovers, one a second, under two tenants' fio
// runs: one writing random blocks of 4 KiB to 256 KiB and verifying them
// (crc32c) as uid 4244, in no limited group, and one reading at random as
// uid 4243 in a group held to 8 MiB/s. Both runs end without an error or
// a block that fails to verify, and the limited reader reads at its limit
// over the run, takeovers included. With passthrough (the default) the
// writer's file is the kernel's to write through its registration, which
// the takeovers carry; without, every write reaches sluice.
func TestTakeoverFio(t *testing.T) {
	needMount(t)
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("skipping: fio is not installed")
	}
	for _, pass := range []string{"true", "false"} {
		t.Run("passthrough="+pass, func(t *testing.T) { takeoverFio(t, pass) })
	}
}

func takeoverFio(t *testing.T, pass string) {
	_, src, mnt := srcMnt(t)
	prepareFioPair(t, src)
	_, oldErr, oldExited, _ := startMount(t, mnt, "mount", "--passthrough="+pass, "--limit", "tenants/a rbps=8MiB", "--group", "tenants/a uid=4243", src, mnt)
	p := startFioPair(t, mnt, "8s")
	exited := oldExited
	for range 6 {
		time.Sleep(time.Second)
		_, _, x, _ := startTakeover2(t, mnt)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			t.Fatal("the serving sluice did not exit after a takeover")
		}
		exited = x
	}
	// Never above the limit; below it by the takeovers' pauses at most
	// (each a few tens of ms, longer on a loaded machine: a pause is time
	// the reader does not get back).
	p.check(t, "6 takeovers", oldErr, 0.90)
}

// fioLimit is the limited reader's limit in TestTakeoverFio and
// TestSuperviseFio.
const fioLimit = 8 << 20

// prepareFioPair makes in src the directories of the fio runs of
// startFioPair, and the file the reader reads.
func prepareFioPair(t *testing.T, src string) {
	t.Helper()
	for _, d := range []struct {
		name string
		uid  int
	}{{"r", 4243}, {"w", 4244}} {
		os.Mkdir(filepath.Join(src, d.name), 0o755)
		os.Chown(filepath.Join(src, d.name), d.uid, d.uid)
	}
	f, err := os.Create(filepath.Join(src, "r", "file"))
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 64<<20))
	f.Close()
	os.Chown(filepath.Join(src, "r", "file"), 4243, 4243)
}

// fioPair is two fio runs on a mount for runtime: one writing random
// blocks of 4 KiB to 256 KiB and verifying them (crc32c) as uid 4244, in
// no limited group, and one reading 64 KiB at random as uid 4243, in a
// group held to fioLimit.
type fioPair struct {
	reader, writer *exec.Cmd
	rout, wout     *bytes.Buffer
}

func startFioPair(t *testing.T, mnt, runtime string) *fioPair {
	t.Helper()
	fio := func(uid uint32, args ...string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command("fio", append([]string{"--ioengine=psync", "--time_based", "--runtime=" + runtime, "--output-format=json"}, args...)...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
		out := new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd, out
	}
	p := &fioPair{}
	p.reader, p.rout = fio(4243, "--name=r", "--filename="+filepath.Join(mnt, "r", "file"), "--readonly", "--rw=randread", "--bs=64k", "--size=64M")
	p.writer, p.wout = fio(4244, "--name=w", "--directory="+filepath.Join(mnt, "w"), "--rw=randwrite", "--bsrange=4k-256k", "--size=32M",
		"--verify=crc32c", "--verify_backlog=16", "--do_verify=1", "--verify_fatal=1")
	return p
}

// check waits for both runs, which must end without an error or a block
// that fails to verify, and the limited reader read at minRatio to 1.02
// of its limit over the run, across what the runs went through (what).
func (p *fioPair) check(t *testing.T, what string, log fmt.Stringer, minRatio float64) {
	t.Helper()
	rerr, werr := p.reader.Wait(), p.writer.Wait()
	if rerr != nil || werr != nil {
		t.Fatalf("fio failed: reader %v, writer %v\nreader:\n%s\nwriter:\n%s\nsluice:\n%s", rerr, werr, p.rout, p.wout, log)
	}
	type job struct {
		Error int `json:"error"`
		Read  struct {
			IOBytes int64 `json:"io_bytes"`
			Runtime int64 `json:"runtime"` // ms
			Clat    struct {
				Max int64 `json:"max"`
			} `json:"clat_ns"`
		} `json:"read"`
		Write struct {
			IOBytes int64 `json:"io_bytes"`
			Clat    struct {
				Max int64 `json:"max"`
			} `json:"clat_ns"`
		} `json:"write"`
	}
	parse := func(b *bytes.Buffer) job {
		var r struct{ Jobs []job }
		out := b.Bytes()
		if i := bytes.IndexByte(out, '{'); i > 0 {
			out = out[i:]
		}
		if err := json.Unmarshal(out, &r); err != nil || len(r.Jobs) != 1 {
			t.Fatalf("fio's output: %v\n%s", err, b)
		}
		return r.Jobs[0]
	}
	r, w := parse(p.rout), parse(p.wout)
	if r.Error != 0 || w.Error != 0 {
		t.Fatalf("fio jobs ended with errors %d and %d", r.Error, w.Error)
	}
	if w.Write.IOBytes == 0 {
		t.Fatal("the writer wrote nothing")
	}
	ratio := float64(r.Read.IOBytes) / (float64(r.Read.Runtime) / 1000) / fioLimit
	t.Logf("limited reader at %.3f of its limit, its longest read %.1f ms; the writer wrote %d MiB and verified it across %s, its longest write %.1f ms, its longest verifying read %.1f ms",
		ratio, float64(r.Read.Clat.Max)/1e6, w.Write.IOBytes>>20, what, float64(w.Write.Clat.Max)/1e6, float64(w.Read.Clat.Max)/1e6)
	if ratio < minRatio || ratio > 1.02 {
		t.Errorf("the limited reader read at %.3f of its limit across %s, want %.2f to 1.02", ratio, what, minRatio)
	}
}

// TestTakeoverRefused: a takeover that cannot be made says why, naming
// the flag, and leaves the mount with the sluice serving it: of another
// SOURCE than the mount's, of a mirror set while it resyncs, of a
// directory no sluice serves, or with too many arguments. Once the resync
// has ended, the mirror set, a mirror added while it served among them,
// is taken over.
func TestTakeoverRefused(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	os.WriteFile(filepath.Join(src, "f"), []byte("served"), 0o644)
	_, _, exited, _ := startMount(t, mnt, "mount", src, mnt)
	a, b, c, mmnt := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c"), filepath.Join(dir, "mmnt")
	for _, d := range []string{a, b, c, mmnt} {
		os.Mkdir(d, 0o755)
	}
	// Enough to resync for a few seconds at 1 MiB/s.
	big := make([]byte, 3<<20)
	for _, d := range []string{a, b} {
		os.WriteFile(filepath.Join(d, "big"), big, 0o644)
	}
	_, _, mexited, _ := startMount(t, mmnt, "mount", "--mirror", a, "--mirror", b, mmnt)
	if out, err := sluice("mirror", "add", "--no-resync", mmnt, c).CombinedOutput(); err != nil {
		t.Fatalf("mirror add: %v\n%s", err, out)
	}
	if err := control.Resync(mmnt, 1<<20); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"mount", "--takeover", dir, mnt}, "--takeover: the mount serves " + src + " on " + mnt + ", not " + dir + " on " + mnt},
		{[]string{"mount", "--takeover", mmnt}, "--takeover " + mmnt + ": a resync is running"},
		{[]string{"mount", "--takeover", src}, "--takeover " + src + ": no sluice mount at " + src},
		{[]string{"mount", "--takeover", src, src, mnt}, "--takeover takes MOUNTPOINT"},
		{[]string{"mount", "--takeover", "--log-level", "debug", mnt}, "--takeover " + mnt + " runs with the mount's own command line, so --log-level would be dropped"},
	} {
		out, err := sluice(c.args...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("sluice %s: %v, want an error saying %q:\n%s", strings.Join(c.args, " "), err, c.want, out)
		}
	}
	select {
	case <-exited:
		t.Fatal("the sluice serving the mount exited after refused takeovers")
	case <-mexited:
		t.Fatal("the sluice serving the mirror set exited after a refused takeover")
	default:
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(b) != "served" {
		t.Errorf("after refused takeovers the mount reads %q, %v", b, err)
	}
	st, err := control.Stat(mmnt)
	if err != nil {
		t.Fatalf("after a refused takeover the mirror set's control socket: %v", err)
	}
	if len(st.Mirrors) != 3 || st.Mirrors[2].State != backing.Resyncing {
		t.Errorf("the resync did not go on after the refused takeover: %+v", st.Mirrors)
	}
	for deadline := time.Now().Add(30 * time.Second); st.LastResync == ""; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the resync did not end within 30 s")
		}
		if st, err = control.Stat(mmnt); err != nil {
			t.Fatal(err)
		}
	}
	if st.LastResync != "ok" {
		t.Fatalf("the resync ended with %s", st.LastResync)
	}
	startTakeover2(t, mmnt)
	select {
	case <-mexited:
	case <-time.After(20 * time.Second):
		t.Fatal("the sluice serving the mirror set did not exit after the takeover once the resync ended")
	}
	if st, err = control.Stat(mmnt); err != nil {
		t.Fatal(err)
	}
	if len(st.Mirrors) != 3 {
		t.Fatalf("after the takeover the set has %d mirrors, want the 3 it had", len(st.Mirrors))
	}
	for _, m := range st.Mirrors {
		if m.State != backing.Healthy {
			t.Errorf("after the takeover mirror %s is %s", m.Dir, m.State)
		}
	}
	if b, err := os.ReadFile(filepath.Join(mmnt, "big")); err != nil || len(b) != len(big) {
		t.Errorf("after the takeover the mirror set reads %d bytes, %v", len(b), err)
	}
}

// TestTakeoverNewFlags: a takeover given SOURCE MOUNTPOINT and flags runs
// with them, its limits applied over those in force (a limit set at run
// time on another key stays), and a later takeover of MOUNTPOINT alone
// runs with that command line.
func TestTakeoverNewFlags(t *testing.T) {
	needMount(t)
	_, src, mnt := srcMnt(t)
	_, _, exited, _ := startMount(t, mnt, "mount", "--limit", "default rbps=10MiB", src, mnt)
	if out, err := sluice("set", mnt, "default wiops=500").CombinedOutput(); err != nil {
		t.Fatalf("set: %v\n%s", err, out)
	}
	_, log, next, _ := startTakeover2(t, mnt, "--limit", "default rbps=5MiB", "--limit", "b riops=50", "--write-cache", src)
	<-exited
	limits := func(g string) string {
		st, err := control.Stat(mnt)
		if err != nil {
			t.Fatal(err)
		}
		if m := find(st, g); m != nil {
			return m.Limits
		}
		return ""
	}
	if l := limits("default"); l != "rbps=5MiB wbps=max riops=max wiops=500" {
		t.Errorf("after a takeover with --limit, default has %q", l)
	}
	if l := limits("b"); l != "rbps=max wbps=max riops=50 wiops=max" {
		t.Errorf("after a takeover with --limit, b has %q", l)
	}
	if !strings.Contains(log.String(), "--write-cache stays as the mount was made") {
		t.Errorf("a takeover with --write-cache on a mount made without it did not say it stays off:\n%s", log)
	}
	startTakeover2(t, mnt)
	<-next
	if l := limits("b"); l != "rbps=max wbps=max riops=50 wiops=max" {
		t.Errorf("after a takeover of MOUNTPOINT alone, b has %q", l)
	}
}

// TestServiceUpgrade runs the unit's command line as systemd runs a
// Type=notify service and sends its main process SIGUSR2, as `systemctl
// kill --signal=SIGUSR2 --kill-whom=main` does: the binary on disk takes the mount
// over, the old main process tells the service manager the new one's pid
// (MAINPID=), which says READY=1 itself, and the old one exits 0, the
// mount served all along; SIGTERM to the new main process unmounts.
func TestServiceUpgrade(t *testing.T) {
	needMount(t)
	dir, src, mnt := srcMnt(t)
	os.WriteFile(filepath.Join(src, "hello"), []byte("hello"), 0o644)
	inst := "up"
	os.WriteFile(filepath.Join(dir, inst+".toml"), []byte(fmt.Sprintf("source = %q\nmountpoint = %q\n", src, mnt)), 0o644)
	_, start := unitCommands(t, inst, "/usr/local/bin/sluice", os.Args[0], "/etc/sluice/", dir+"/")
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	sock := filepath.Join(dir, "notify")
	msgs := notifyListener(t, sock)
	old := exec.Command(start[0][0], start[0][1:]...)
	old.Env = append(os.Environ(), "SLUICE_AS_MAIN=1", "NOTIFY_SOCKET="+sock)
	// The log to a file: the new process writes where the old one does,
	// and a pipe would keep the old one's Wait until the new one exits.
	logf, err := os.Create(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	logs := logFile{logf.Name()}
	old.Stderr = logf
	if err := old.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { old.Wait(); close(exited) }()
	t.Cleanup(func() { old.Process.Kill(); <-exited })
	next := func(want string) string {
		t.Helper()
		for timeout := time.After(20 * time.Second); ; {
			select {
			case m := <-msgs:
				for _, l := range strings.Split(m, "\n") {
					if strings.HasPrefix(l, want) {
						return strings.TrimPrefix(l, want)
					}
				}
			case <-timeout:
				t.Fatalf("no %s within 20 s; the log:\n%s", want, logs)
			}
		}
	}
	next("READY=1")
	old.Process.Signal(syscall.SIGUSR2)
	pid, err := strconv.Atoi(strings.TrimSpace(next("MAINPID=")))
	if err != nil || pid == old.Process.Pid {
		t.Fatalf("MAINPID=%d (%v): want the new process's pid", pid, err)
	}
	next("READY=1")
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatalf("the old main process did not exit; the log:\n%s", logs)
	}
	if !old.ProcessState.Success() {
		t.Errorf("the old main process exited with %v", old.ProcessState)
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	if b, err := os.ReadFile(filepath.Join(mnt, "hello")); err != nil || string(b) != "hello" {
		t.Fatalf("after the upgrade the mount reads %q, %v; the log:\n%s", b, err, logs)
	}
	if _, err := control.Stat(mnt); err != nil {
		t.Fatalf("after the upgrade the control socket: %v", err)
	}
	p.Signal(syscall.SIGTERM)
	for deadline := time.Now().Add(10 * time.Second); isMounted(mnt); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still mounted 10 s after SIGTERM to the new main process; the log:\n%s", logs)
		}
	}
	for _, want := range []string{"upgrade: a new sluice takes the mount over", "serving, taken over", "handed over"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, logs)
		}
	}
}

// logFile is a log written to a file, read whole when printed.
type logFile struct{ path string }

func (l logFile) String() string {
	b, _ := os.ReadFile(l.path)
	return string(b)
}
