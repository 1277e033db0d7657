package fsys

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/group"
	"sluice/stack"
)

// TestMain lets the test binary serve as a helper process for work that
// must not run in the process serving the mount.
func TestMain(m *testing.M) {
	if len(os.Args) == 3 {
		switch os.Getenv("SLUICE_FSYS_HELPER") {
		case "mmap":
			os.Exit(mmapSum(os.Args[2]))
		case "sigread":
			os.Exit(sigRead(os.Args[2]))
		case "mmapwrite":
			os.Exit(mmapWrite(os.Args[2]))
		case "mmaperr":
			os.Exit(mmapErrors(os.Args[2]))
		case "exec":
			cmd := exec.Command(os.Args[2])
			cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
			if err := cmd.Run(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	flag.Parse()
	restore := enableTestURing()
	code := m.Run()
	restore()
	os.Exit(code)
}

// transportAll mounts every test mount on one transport: test.sh runs
// the permission, coherence, model and data tests with -transport=uring.
var transportAll = flag.String("transport", "", "mount every test mount on this transport: auto, dev or uring (skipped where the kernel does not offer io_uring)")

// uringSkip, when not empty, is why the kernel offers no io_uring to the
// mounts of a -transport=uring run: each test that mounts is skipped.
var uringSkip string

// enableTestURing, for a -transport=uring run, turns the fuse module's
// enable_uring on where it is off and it can (as root), and returns what
// puts it back as it was.
func enableTestURing() (restore func()) {
	restore = func() {}
	if *transportAll != TransportURing {
		return restore
	}
	if ok, _ := URingOffered(); ok {
		return restore
	}
	if _, err := os.Stat(enableURing); err == nil {
		if err := os.WriteFile(enableURing, []byte("Y\n"), 0o644); err == nil {
			restore = func() { os.WriteFile(enableURing, []byte("N\n"), 0o644) }
		}
	}
	_, uringSkip = URingOffered()
	return restore
}

func helper(what string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	cmd.Args = append([]string{os.Args[0], what}, args...)
	cmd.Env = append(os.Environ(), "SLUICE_FSYS_HELPER="+what)
	return cmd
}

// sigRead reads a file with raw pread calls (no retry on EINTR) on one
// thread while another sends that thread SIGUSR1 every 20 ms, and prints
// "ok N signals" or the error.
func sigRead(path string) int {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGUSR1)
	runtime.LockOSThread()
	tid := unix.Gettid()
	done := make(chan struct{})
	sent := make(chan int)
	go func() {
		n := 0
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				sent <- n
				return
			case <-tick.C:
				if unix.Tgkill(os.Getpid(), tid, syscall.SIGUSR1) == nil {
					n++
				}
			}
		}
	}()
	fd, err := unix.Open(path, unix.O_RDONLY, 0)
	if err != nil {
		fmt.Println("err", err)
		return 1
	}
	buf := make([]byte, 1<<20)
	total := 0
	for {
		n, err := unix.Pread(fd, buf, int64(total))
		if err != nil {
			fmt.Println("err", err)
			return 1
		}
		if n == 0 {
			break
		}
		total += n
	}
	close(done)
	fmt.Println("ok", total, <-sent)
	return 0
}

// mmapSum prints the SHA-256 of a file read through a shared mapping.
func mmapSum(path string) int {
	f, err := os.Open(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st, _ := f.Stat()
	b, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mmap:", err)
		return 1
	}
	sum := sha256.Sum256(b)
	fmt.Println(hex.EncodeToString(sum[:]))
	return 0
}

// needFUSE skips a test that mounts when this machine cannot.
func needFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: mounting needs root (for default_permissions, allow_other and chown)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("skipping: no /dev/fuse: %v", err)
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		if _, err := exec.LookPath("fusermount"); err != nil {
			t.Skip("skipping: no fusermount3 (install fuse3)")
		}
	}
}

func limit(t *testing.T, s string) group.LimitSpec {
	t.Helper()
	l, err := group.ParseLimit(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// mountDirs makes a test directory holding empty src and mnt directories,
// reachable by other users (tests run shells and readers as them).
func mountDirs(t *testing.T) (dir, src, mnt string) {
	t.Helper()
	dir = t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	src, mnt = filepath.Join(dir, "src"), filepath.Join(dir, "mnt")
	for _, d := range []string{src, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, src, mnt
}

// mount serves a fresh source directory and returns it, the mount point
// and the file system. Unmounted when the test ends. Stack options left
// all zero are the defaults.
func mount(t *testing.T, opts Options) (src, mnt string, f *FS) {
	t.Helper()
	needFUSE(t)
	if opts.Options.Options == (stack.Options{}) {
		opts.Options.Options = stack.DefaultOptions()
	}
	_, src, mnt = mountDirs(t)
	switch {
	case opts.Tree != nil:
		src = ""
	case opts.Source == "":
		opts.Source = src
	default:
		src = opts.Source
	}
	opts.Mountpoint = mnt
	f, unmount := serve(t, opts)
	t.Cleanup(unmount)
	return src, mnt, f
}

// passthroughAll mounts every test mount with Options.Passthrough: test.sh
// runs the permission, coherence and model tests with it too.
var passthroughAll = flag.Bool("passthrough", false, "mount every test mount with passthrough")

// serve mounts opts and returns the file system and a function that
// unmounts it and waits until it has stopped; calls after the first do
// nothing.
func serve(t *testing.T, opts Options) (*FS, func()) {
	t.Helper()
	if *passthroughAll {
		opts.Passthrough = true
	}
	if *transportAll != "" {
		if uringSkip != "" {
			t.Skipf("skipping: -transport=%s: %s", *transportAll, uringSkip)
		}
		opts.Transport = *transportAll
	}
	f, err := Mount(opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { f.Wait(); close(done) }()
	return f, sync.OnceFunc(func() {
		if err := f.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
		<-done
	})
}

func writeRandom(t *testing.T, path string, n int, seed uint64) []byte {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return b
}

// patchFile writes n bytes of b at off through a write-only open of path,
// and applies the same change to want.
func patchFile(t *testing.T, path string, want []byte, b byte, n int, off int64) {
	t.Helper()
	wf, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer wf.Close()
	patch := bytes.Repeat([]byte{b}, n)
	if _, err := wf.WriteAt(patch, off); err != nil {
		t.Fatal(err)
	}
	copy(want[off:], patch)
}

// checkReads reads name through the mount at random offsets and sizes and
// whole, and compares with want.
func checkReads(t *testing.T, path string, want []byte, seed uint64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	if sha256.Sum256(got) != sha256.Sum256(want) {
		t.Fatalf("%s: whole-file read differs from the source (%d vs %d bytes)", path, len(got), len(want))
	}
	r := rand.New(rand.NewPCG(seed, 11))
	for i := 0; i < 300; i++ {
		off := r.Int64N(int64(len(want)) + 4096)
		n := 1 + r.IntN(300<<10)
		buf := make([]byte, n)
		m, err := f.ReadAt(buf, off)
		if err != nil && err != io.EOF {
			t.Fatalf("ReadAt(%d, %d): %v", n, off, err)
		}
		off = min(off, int64(len(want)))
		end := min(off+int64(n), int64(len(want)))
		if int64(m) != end-off || !bytes.Equal(buf[:m], want[off:end]) {
			t.Fatalf("ReadAt(%d bytes at %d) = %d bytes, want %d, identical to the source", n, off, m, end-off)
		}
	}
}

// TestReadIdentical: data read through the mount is byte-identical to the
// source, for a limited group (direct I/O, sluice's cache and readahead;
// or the kernel's page cache in front, sluice pacing what it reads) and an
// unlimited one (kernel page cache), with odd file sizes.
func TestReadIdentical(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits []string
		budget bool
		mode   CacheMode
	}{
		{"limited", []string{"default rbps=1GiB riops=max"}, true, CacheDirect},
		{"limited no budget", []string{"default rbps=1GiB"}, false, CacheDirect},
		{"limited kernel cache", []string{"default rbps=1GiB"}, true, CacheKernel},
		{"unlimited", nil, true, CacheAuto},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := Options{CacheMode: tc.mode}
			opts.Options.Options = stack.DefaultOptions()
			opts.ReadaheadBudget = tc.budget
			for _, s := range tc.limits {
				opts.Limits = append(opts.Limits, limit(t, s))
			}
			src, mnt, f := mount(t, opts)
			var total int64
			for i, n := range []int{0, 1, 4095, 4096, 4097, 1<<20 + 123, 5 << 20} {
				total += int64(n)
				name := filepath.Join("d", "f"+string(rune('a'+i)))
				os.MkdirAll(filepath.Join(src, "d"), 0o755)
				want := writeRandom(t, filepath.Join(src, name), n, uint64(i))
				if n == 0 {
					got, err := os.ReadFile(filepath.Join(mnt, name))
					if err != nil || len(got) != 0 {
						t.Fatalf("empty file: %d bytes, %v", len(got), err)
					}
					continue
				}
				checkReads(t, filepath.Join(mnt, name), want, uint64(i))
			}
			m := f.Engine().Metrics()
			var def *struct{ rbytes, app int64 }
			for _, g := range m.Groups {
				if g.Group == "default" {
					def = &struct{ rbytes, app int64 }{g.RBytes, g.AppRBytes}
				}
			}
			if def == nil || def.app == 0 {
				t.Fatalf("no reads counted for default: %+v", m.Groups)
			}
			// Every byte of every file came from the backing files at least
			// once; a limited group's cache means far less than every read.
			if def.rbytes < total {
				t.Errorf("device bytes read %d, less than the %d bytes of the files", def.rbytes, total)
			}
			if tc.mode == CacheDirect && def.rbytes >= def.app {
				t.Errorf("device bytes read %d for %d bytes read by the application: sluice's cache served nothing", def.rbytes, def.app)
			}
			if tc.mode == CacheDirect && f.Backing() != "direct" {
				t.Errorf("backing files read %s, want direct (O_DIRECT) on this file system", f.Backing())
			}
		})
	}
}

// TestFio: fio's own verification through a limited mount, if fio is here.
func TestFio(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("skipping: fio is not installed")
	}
	_, mnt, _ := mount(t, Options{Limits: []group.LimitSpec{limit(t, "default rbps=500MiB wbps=500MiB")}})
	// fio leaves its verify state files in its working directory.
	work := t.TempDir()
	cmd := exec.Command("fio", "--name=verify", "--directory="+mnt, "--size=8M", "--bs=64k",
		"--rw=randwrite", "--verify=crc32c", "--verify_fatal=1", "--do_verify=1", "--ioengine=psync",
		"--output-format=terse")
	cmd.Dir = work
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fio verify failed: %v\n%s", err, out)
	}
	cmd = exec.Command("fio", "--name=verify", "--directory="+mnt, "--size=8M", "--bs=64k",
		"--rw=read", "--verify=crc32c", "--verify_only", "--verify_fatal=1", "--ioengine=psync",
		"--output-format=terse")
	cmd.Dir = work
	out, err = cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("fio verify-only read failed: %v\n%s", err, out)
	}
}

// TestMetadata: readdir, stat, rename, unlink, symlink, mkdir, truncate pass
// through to the source.
func TestMetadata(t *testing.T) {
	src, mnt, _ := mount(t, Options{Limits: []group.LimitSpec{limit(t, "default rbps=100MiB")}})
	writeRandom(t, filepath.Join(src, "a"), 10000, 1)
	os.Mkdir(filepath.Join(src, "dir"), 0o750)

	names := dirNames(t, mnt)
	if strings.Join(names, ",") != "a,dir" {
		t.Fatalf("readdir = %v, want [a dir]", names)
	}
	st, err := os.Stat(filepath.Join(mnt, "a"))
	if err != nil || st.Size() != 10000 || st.Mode().Perm() != 0o644 {
		t.Fatalf("stat a: %v %v", st, err)
	}
	if err := os.Rename(filepath.Join(mnt, "a"), filepath.Join(mnt, "dir", "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "dir", "b")); err != nil {
		t.Fatalf("rename did not reach the source: %v", err)
	}
	if err := os.Symlink("dir/b", filepath.Join(mnt, "link")); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(src, "link")); err != nil || target != "dir/b" {
		t.Fatalf("symlink in source: %q %v", target, err)
	}
	if b, err := os.ReadFile(filepath.Join(mnt, "link")); err != nil || len(b) != 10000 {
		t.Fatalf("read through symlink: %d bytes, %v", len(b), err)
	}
	if err := os.Truncate(filepath.Join(mnt, "dir", "b"), 5000); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(mnt, "dir", "b")); len(b) != 5000 {
		t.Fatalf("after truncate: %d bytes through the mount, want 5000", len(b))
	}
	if err := os.Remove(filepath.Join(mnt, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(mnt, "dir", "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(src, "dir", "b")); !os.IsNotExist(err) {
		t.Fatalf("unlink did not reach the source: %v", err)
	}
}

// TestWriteCoherent: writes through a limited handle are seen by reads
// through another limited handle and by an unlimited reader's page cache.
func TestWriteCoherent(t *testing.T) {
	rules := []group.Rule{{Group: "slow", UID: new(uint32(0))}}
	src, mnt, _ := mount(t, Options{Rules: rules, Limits: []group.LimitSpec{limit(t, "slow rbps=200MiB wbps=200MiB")}})
	want := writeRandom(t, filepath.Join(src, "f"), 3<<20, 3)
	checkReads(t, filepath.Join(mnt, "f"), want, 1)
	f, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	patch := bytes.Repeat([]byte("sluice"), 50000)
	if _, err := f.WriteAt(patch, 12345); err != nil {
		t.Fatal(err)
	}
	copy(want[12345:], patch)
	checkReads(t, filepath.Join(mnt, "f"), want, 2)
	onDisk, _ := os.ReadFile(filepath.Join(src, "f"))
	if !bytes.Equal(onDisk, want) {
		t.Fatal("write did not reach the source intact")
	}
	// Append past the end: the cached partial last page must not hide it.
	if _, err := f.WriteAt([]byte("tail"), int64(len(want))+100); err != nil {
		t.Fatal(err)
	}
	want = append(append(want, make([]byte, 100)...), "tail"...)
	checkReads(t, filepath.Join(mnt, "f"), want, 3)
}

// runAs runs fn on a thread whose file system uid and gid are id, so FUSE
// sees it as that user. The thread ends with fn.
func runAs(id int, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread exits with us
		unix.Setfsuid(id)
		unix.Setfsgid(id)
		fn()
	}()
	<-done
}

// TestCoherentAcrossGroups: an unlimited reader keeps the file in the
// kernel's page cache; a write by a limited group through its direct-I/O
// handle must not leave that reader with stale pages.
func TestCoherentAcrossGroups(t *testing.T) {
	rules := []group.Rule{{Group: "slow", UID: new(uint32(0))}}
	src, mnt, _ := mount(t, Options{AllowOther: true, Rules: rules,
		Limits: []group.LimitSpec{limit(t, "slow rbps=200MiB wbps=200MiB")}})
	want := writeRandom(t, filepath.Join(src, "f"), 256<<10, 5)
	var rf *os.File
	var err error
	runAs(4321, func() { rf, err = os.Open(filepath.Join(mnt, "f")) })
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	read := func() []byte {
		var b []byte
		runAs(4321, func() {
			b = make([]byte, len(want))
			n, _ := rf.ReadAt(b, 0)
			b = b[:n]
		})
		return b
	}
	if !bytes.Equal(read(), want) {
		t.Fatal("unlimited reader: first read differs from the source")
	}
	patchFile(t, filepath.Join(mnt, "f"), want, 0xA5, 10000, 70000)
	// The kernel's pages are dropped by a notification sent right after the
	// write; give it a moment to land.
	deadline := time.Now().Add(5 * time.Second)
	for !bytes.Equal(read(), want) {
		if time.Now().After(deadline) {
			t.Fatal("unlimited reader still sees stale pages 5s after a limited group's write")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOwner: files and directories created through the mount belong to the
// calling user, not to root.
func TestOwner(t *testing.T) {
	src, mnt, _ := mount(t, Options{AllowOther: true, Limits: []group.LimitSpec{limit(t, "default wbps=100MiB")}})
	if err := os.Chmod(src, 0o777); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", "umask 022 && echo hi > "+mnt+"/file && mkdir "+mnt+"/dir && cat "+mnt+"/file")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4321, Gid: 4322}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("create as uid 4321: %v\n%s", err, out)
	}
	if string(out) != "hi\n" {
		t.Fatalf("read back %q", out)
	}
	for _, name := range []string{"file", "dir"} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(src, name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 4321 || st.Gid != 4322 {
			t.Errorf("%s is owned by %d:%d, want 4321:4322 (the caller)", name, st.Uid, st.Gid)
		}
	}
	// default_permissions: another user cannot write the file (mode 0644).
	var werr error
	if err := runAsGroups(5555, 5555, nil, func() {
		f, err := os.OpenFile(filepath.Join(mnt, "file"), os.O_WRONLY|os.O_APPEND, 0)
		if err == nil {
			_, err = f.Write([]byte("x\n"))
			f.Close()
		}
		werr = err
	}); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(werr, syscall.EACCES) {
		t.Errorf("uid 5555 writing a 0644 file of uid 4321 through the mount: %v, want EACCES", werr)
	}
}

// TestMmapExec: a limited group's files are served with direct I/O, yet
// mmap works and a program stored on the mount runs.
func TestMmapExec(t *testing.T) {
	src, mnt, _ := mount(t, Options{Limits: []group.LimitSpec{limit(t, "default rbps=500MiB")}})
	want := writeRandom(t, filepath.Join(src, "m"), 1<<20+77, 4)
	// The mapping is read by another process: a page fault on a FUSE file
	// blocks its thread outside the Go scheduler's reach, which must not
	// happen in the process that serves the mount.
	out, err := helper("mmap", filepath.Join(mnt, "m")).Output()
	if err != nil {
		t.Fatalf("mmap of a direct-I/O file: %v", err)
	}
	if sum := sha256.Sum256(want); strings.TrimSpace(string(out)) != hex.EncodeToString(sum[:]) {
		t.Fatalf("mmap contents differ from the source: %s", out)
	}
	bin, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Skip("no /bin/true to copy")
	}
	if err := os.WriteFile(filepath.Join(src, "prog"), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// Started from a helper too: forking a child whose exec reads the mount
	// must not stall a thread of the serving process.
	if out, err := helper("exec", filepath.Join(mnt, "prog")).CombinedOutput(); err != nil {
		t.Fatalf("running a program from the mount: %v\n%s", err, out)
	}
}

// TestInterruptedRead: a process killed while its read waits for the
// throttle goes away (the kernel interrupts the request and sluice answers
// EINTR), and its queued I/O leaves the queue.
func TestInterruptedRead(t *testing.T) {
	src, mnt, f := mount(t, Options{Limits: []group.LimitSpec{limit(t, "default rbps=4KiB")}})
	writeRandom(t, filepath.Join(src, "big"), 4<<20, 6)
	cmd := exec.Command("dd", "if="+filepath.Join(mnt, "big"), "of=/dev/null", "bs=1M", "count=4")
	if err := cmd.Start(); err != nil {
		t.Skipf("no dd: %v", err)
	}
	// Wait until the read is queued behind the throttle.
	deadline := time.Now().Add(10 * time.Second)
	for f.Engine().Metrics().Queued == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the read never queued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cmd.Process.Kill()
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		t.Fatal("a killed reader stayed stuck in a throttled read")
	}
	for f.Engine().Metrics().Queued != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d I/Os still queued after the reader died", f.Engine().Metrics().Queued)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTmpfileThrottled: writes to an O_TMPFILE file are charged and paced
// like any other write.
func TestTmpfileThrottled(t *testing.T) {
	_, mnt, f := mount(t, Options{Limits: []group.LimitSpec{limit(t, "default wbps=1MiB")}})
	before := groupMetrics(t, f, "default")
	fd, err := unix.Open(mnt, unix.O_TMPFILE|unix.O_RDWR, 0o600)
	if err == unix.EOPNOTSUPP || err == unix.EISDIR {
		t.Skipf("O_TMPFILE not supported here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	for i := 0; i < 2; i++ {
		if _, err := unix.Pwrite(fd, make([]byte, 1<<20), int64(i)<<20); err != nil {
			t.Fatal(err)
		}
	}
	after := groupMetrics(t, f, "default")
	if wb, wi := after.WBytes-before.WBytes, after.WIOs-before.WIOs; wb != 2<<20 || wi != 16 {
		t.Errorf("O_TMPFILE writes of 2 MiB: wbytes %d wios %d, want 2 MiB in 16 pieces", wb, wi)
	}
	// At 1 MiB/s the last 128 KiB piece of the first MiB cannot start
	// before about 0.87 s, so the pieces together waited at least that long.
	if waited := time.Duration(after.ThrottledNs - before.ThrottledNs); waited < 500*time.Millisecond {
		t.Errorf("O_TMPFILE writes of 2 MiB at wbps=1MiB waited %v for the throttle in all, want at least 0.5s: they were not paced", waited)
	}
}

// groupMetrics returns the named group's figures, failing the test when
// the engine has no such group.
func groupMetrics(t *testing.T, f *FS, name string) stack.GroupMetrics {
	t.Helper()
	m := f.Engine().Metrics()
	for _, g := range m.Groups {
		if g.Group == name {
			return g
		}
	}
	t.Fatalf("no group %q in the metrics: %+v", name, m.Groups)
	return stack.GroupMetrics{}
}

// parseLimits parses a group's limits as metrics show them into values per
// key (0 for max), failing on any other form.
func parseLimits(t *testing.T, s string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			t.Fatalf("limits %q: %q is not KEY=VALUE", s, f)
		}
		var n int64
		var err error
		switch {
		case v == "max":
		case k == "rbps" || k == "wbps":
			n, err = group.ParseSize(v)
		default:
			n, err = strconv.ParseInt(v, 10, 64)
		}
		if err != nil {
			t.Fatalf("limits %q: %v", s, err)
		}
		if _, dup := out[k]; dup {
			t.Fatalf("limits %q: %s twice", s, k)
		}
		out[k] = n
	}
	return out
}

// TestPassthroughWrites: with passthrough, the opens of a group without a
// limit are passed through for reading and writing. Their writes reach
// SOURCE uncounted; a limited group that opens the file meanwhile is
// passed through too and reads them; one that read the file into sluice's
// cache before reads them at its next open; appends land at the end.
func TestPassthroughWrites(t *testing.T) {
	rules := []group.Rule{{Group: "slow", UID: new(uint32(4321))}}
	src, mnt, f := mount(t, Options{Passthrough: true, AllowOther: true, Rules: rules,
		Limits: []group.LimitSpec{limit(t, "slow rbps=1MiB")}})
	path := filepath.Join(mnt, "f")
	want := writeRandom(t, filepath.Join(src, "f"), 1<<20, 8)
	wf := openPassthrough(t, f, path, os.O_WRONLY)
	if pass := fmt.Sprint(f.Passthrough()); pass != "[{default 1 false}]" {
		t.Fatalf("an open for writing by the unlimited group: passthrough opens %v, want [{default 1 false}]", pass)
	}
	patch := func(w *os.File, b byte, n int, off int64) {
		t.Helper()
		p := bytes.Repeat([]byte{b}, n)
		if _, err := w.WriteAt(p, off); err != nil {
			t.Fatal(err)
		}
		copy(want[off:], p)
	}
	patch(wf, 0x5A, 5000, 4000)
	var got []byte
	var err error
	var pass []PassOpens
	runAs(4321, func() {
		var r *os.File
		if r, err = os.Open(path); err == nil {
			pass = f.Passthrough()
			got, err = io.ReadAll(r)
			r.Close()
		}
	})
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the limited group's read while the file is open for writing by passthrough: %d bytes, %v, equal %v", len(got), err, bytes.Equal(got, want))
	}
	if fmt.Sprint(pass) != "[{default 1 false} {slow 1 true}]" {
		t.Errorf("passthrough opens while the limited group had the file open: %v, want [{default 1 false} {slow 1 true}]", pass)
	}
	wf.Close()
	waitNoPassthrough(t, f)

	// The limited group reads through sluice's cache; a write by
	// passthrough drops it.
	runAs(4321, func() { got, err = os.ReadFile(path) })
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("limited read: %d bytes, %v", len(got), err)
	}
	wf = openPassthrough(t, f, path, os.O_WRONLY)
	patch(wf, 0xA5, 7000, 9000)
	wf.Close()
	waitNoPassthrough(t, f)
	runAs(4321, func() { got, err = os.ReadFile(path) })
	if err != nil || !bytes.Equal(got, want) {
		t.Fatal("the limited group read stale data after a write by passthrough")
	}

	af := openPassthrough(t, f, path, os.O_WRONLY|os.O_APPEND)
	if _, err := af.Write([]byte("tail")); err != nil {
		t.Fatal(err)
	}
	af.Close()
	want = append(want, "tail"...)
	if got, err := os.ReadFile(filepath.Join(src, "f")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("SOURCE after an append by passthrough: %d bytes (want %d), %v, equal %v", len(got), len(want), err, bytes.Equal(got, want))
	}
	if def := groupMetrics(t, f, "default").AppWBytes; def != 0 {
		t.Errorf("the default group's writes counted %d bytes, want none (passed through)", def)
	}
}

// openPassthrough opens path on f's mount with flag and returns it once
// it is open by passthrough: a file's earlier opens, released by the
// kernel after their close returned, may still count as open otherwise,
// and keep a new open from passthrough (see FS.ioMode). It skips the test
// where the kernel passes nothing through.
func openPassthrough(t *testing.T, f *FS, path string, flag int) *os.File {
	t.Helper()
	for range 100 {
		fh, err := os.OpenFile(path, flag, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(f.Passthrough()) > 0 {
			return fh
		}
		fh.Close()
		time.Sleep(10 * time.Millisecond)
	}
	t.Skip("skipping: the kernel refused passthrough for the open (needs Linux 6.9+ and root)")
	return nil
}

// TestSetLimitLive: a limit set on a running mount changes only the keys
// it names and is in force at once: reads are paced at the new rate.
func TestSetLimitLive(t *testing.T) {
	opts := Options{Limits: []group.LimitSpec{limit(t, "default rbps=1GiB riops=1000")}}
	opts.Options.Options = stack.DefaultOptions()
	opts.Readahead = 0 // one 4 KiB read at a fresh offset is one device I/O
	src, mnt, f := mount(t, opts)
	const size = 64 << 20
	if err := os.WriteFile(filepath.Join(src, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(src, "f"), size); err != nil {
		t.Fatal(err)
	}

	f.SetLimit(limit(t, "default riops=20"))
	got := parseLimits(t, groupMetrics(t, f, "default").Limits)
	want := map[string]int64{"rbps": 1 << 30, "wbps": 0, "riops": 20, "wiops": 0}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("limits after setting riops=20 on rbps=1GiB riops=1000: %v, want %v (0 is max)", got, want)
	}

	fh, err := os.Open(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	pages := rand.New(rand.NewPCG(20, 1000)).Perm(size / 4096)
	buf := make([]byte, 4096)
	before := groupMetrics(t, f, "default").RIOs
	start := time.Now()
	reads := 0
	for time.Since(start) < time.Second && reads < len(pages) {
		if _, err := fh.ReadAt(buf, int64(pages[reads])*4096); err != nil {
			t.Fatal(err)
		}
		reads++
	}
	elapsed := time.Since(start).Seconds()
	rios := groupMetrics(t, f, "default").RIOs - before
	if rios < int64(reads) {
		t.Fatalf("%d reads at fresh offsets made %d device reads: the reads did not reach sluice", reads, rios)
	}
	// The burst (10ms at 20/s) is less than one I/O; one more may be in
	// flight when the window closes.
	if limit := 20*elapsed + 2; float64(rios) > limit {
		t.Errorf("riops=20 set live: %d device reads in %.2fs (%.0f/s), want at most %.0f", rios, elapsed, float64(rios)/elapsed, limit)
	}
	if rate := float64(reads) / elapsed; rate > 100 {
		t.Errorf("riops=20 set live: the reader achieved %.0f reads/s, near the old limit of 1000, not the new 20", rate)
	}
}

// TestMountErrors: a missing source, a file as mount point and a busy mount
// point are refused with messages that say which.
func TestMountErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	for _, tc := range []struct {
		src, mnt, want string
	}{
		{filepath.Join(dir, "nope"), dir, "SOURCE " + filepath.Join(dir, "nope") + " does not exist"},
		{dir, file, "MOUNTPOINT " + file + " is not a directory"},
		{dir, "", "MOUNTPOINT is required"},
	} {
		_, err := Mount(Options{Source: tc.src, Mountpoint: tc.mnt})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Mount(%q, %q) = %v, want %q", tc.src, tc.mnt, err, tc.want)
		}
	}
	_, mnt, _ := mount(t, Options{})
	_, err := Mount(Options{Source: dir, Mountpoint: mnt})
	if err == nil || !strings.Contains(err.Error(), "is busy") {
		t.Errorf("mount on a busy mount point: %v, want 'is busy'", err)
	}
	// Limits whose floors exceed a cap, in either order.
	sub := filepath.Join(dir, "sub")
	os.Mkdir(sub, 0o755)
	for _, specs := range [][]string{{"t rbps=1MiB", "t/a rbps.min=1MiB", "t/b rbps.min=1KiB"}, {"t/a rbps.min=2MiB", "t rbps=1MiB"}} {
		var ls []group.LimitSpec
		for _, s := range specs {
			ls = append(ls, limit(t, s))
		}
		opts := Options{Source: dir, Mountpoint: sub, Limits: ls}
		opts.Options.Options = stack.DefaultOptions()
		_, err := Mount(opts)
		if want := "--limit: the floors of t's children add up to rbps.min="; err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Mount with limits %q: %v, want %q", specs, err, want)
		}
	}
}

// TestFloorRefusedLive: a live change that would put a floor above a cap
// is refused, and the limits in force stay.
func TestFloorRefusedLive(t *testing.T) {
	_, _, f := mount(t, Options{Limits: []group.LimitSpec{limit(t, "t rbps=2MiB"), limit(t, "t/a rbps.min=1MiB")}})
	for _, c := range []struct{ spec, want string }{
		{"t/b rbps.min=1536KiB", "the floors of t's children add up to rbps.min=2621440, above its rbps=2097152"},
		{"t rbps=512KiB", "above its rbps=524288"},
		{"t/a rbps=512KiB", "group t/a: rbps.min=1048576 is above rbps=524288"},
	} {
		if err := f.SetLimit(limit(t, c.spec)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetLimit(%q): %v, want %q", c.spec, err, c.want)
		}
	}
	for g, want := range map[string]string{"t": "rbps=2MiB wbps=max riops=max wiops=max", "t/a": "rbps=max wbps=max riops=max wiops=max rbps.min=1MiB"} {
		if got := groupMetrics(t, f, g).Limits; got != want {
			t.Errorf("%s's limits after the refused changes: %s, want %s", g, got, want)
		}
	}
}

// TestSignalledRead: a reader that catches signals while its read waits
// for the throttle gets its data, not EINTR (a read of a local file is
// never interrupted); only a caller being killed is answered at once
// (TestInterruptedRead).
func TestSignalledRead(t *testing.T) {
	src, mnt, _ := mount(t, Options{Limits: []group.LimitSpec{limit(t, "default rbps=512KiB")}})
	writeRandom(t, filepath.Join(src, "f"), 1<<20, 11)
	out, err := helper("sigread", filepath.Join(mnt, "f")).CombinedOutput()
	var n, signals int
	if _, serr := fmt.Sscanf(string(out), "ok %d %d", &n, &signals); err != nil || serr != nil || n != 1<<20 {
		t.Fatalf("signalled reader: %v, %q; want all 1 MiB read", err, out)
	}
	if signals < 10 {
		t.Fatalf("only %d signals reached the reader during its read", signals)
	}
}

// TestPassthroughCounted: the files a group has open by passthrough are
// counted per group (sluice stat's passthrough line), their reads are
// left out of the group's counters, and a limit set on the group while
// they are open is reported as escaped by them until they are opened
// again. The kernel holds a file in one I/O mode at a time: while the
// file is open by passthrough, an open that must reach sluice fails (the
// kernel's EIO), and a file open through the page cache is not passed
// through (the kernel would fail that open).
func TestPassthroughCounted(t *testing.T) {
	src, mnt, f := mount(t, Options{Passthrough: true})
	want := writeRandom(t, filepath.Join(src, "f"), 1<<20, 9)
	fh, err := os.Open(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	pass := f.Passthrough()
	if len(pass) == 0 {
		t.Skip("skipping: the kernel refused passthrough for the open (needs Linux 6.9+ and root)")
	}
	if fmt.Sprint(pass) != "[{default 1 false}]" {
		t.Fatalf("passthrough opens %v, want [{default 1 false}]", pass)
	}
	before := groupMetrics(t, f, "default").AppRBytes
	got, err := io.ReadAll(fh)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read by passthrough: %d bytes, %v", len(got), err)
	}
	if after := groupMetrics(t, f, "default").AppRBytes; after != before {
		t.Errorf("the group's reads counted %d bytes of a passthrough read, want none", after-before)
	}
	// The now limited group's open of the file open by passthrough is
	// passed through too (the kernel takes no other), and counted as
	// beyond its limit.
	f.SetLimit(limit(t, "default rbps=1GiB"))
	if pass := f.Passthrough(); fmt.Sprint(pass) != "[{default 1 true}]" {
		t.Errorf("after a limit on the group: %v, want [{default 1 true}]", pass)
	}
	o, err := os.Open(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatalf("open by the now limited group while open by passthrough: %v", err)
	}
	if pass := f.Passthrough(); fmt.Sprint(pass) != "[{default 2 true}]" {
		t.Errorf("with a second open by the limited group: %v, want [{default 2 true}]", pass)
	}
	if got, err := io.ReadAll(o); err != nil || !bytes.Equal(got, want) {
		t.Errorf("read by the limited group's passed-through open: %d bytes, %v", len(got), err)
	}
	o.Close()
	fh.Close()
	waitNoPassthrough(t, f)
	// Limited at a rate the page cache serves, the group's opens go
	// through it; while one is open, an unlimited open is not passed
	// through either.
	r1, err := os.Open(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	f.SetLimit(limit(t, "default rbps=max"))
	r, err := os.Open(filepath.Join(mnt, "f"))
	if err != nil {
		t.Fatalf("read-only open while open through the page cache: %v", err)
	}
	if pass := f.Passthrough(); len(pass) != 0 {
		t.Errorf("an open of a file open through the page cache: passed through %v, want not", pass)
	}
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, want) {
		t.Errorf("read through the page cache: %d bytes, %v", len(got), err)
	}
	r.Close()
}

// waitNoPassthrough waits for the kernel's releases of the files closed
// by passthrough (it sends them after close returns).
func waitNoPassthrough(t *testing.T, f *FS) {
	t.Helper()
	for i := 0; i < 100 && len(f.Passthrough()) > 0; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	if pass := f.Passthrough(); len(pass) != 0 {
		t.Fatalf("after every passthrough file closed: %v, want none", pass)
	}
}
