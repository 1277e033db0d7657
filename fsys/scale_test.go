package fsys

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	return procFDs(t, os.Getpid())
}

// procFDs counts the open descriptors of process pid.
func procFDs(t *testing.T, pid int) int {
	t.Helper()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// parallel runs fn(i) for i in [0, n) on workers goroutines.
func parallel(n, workers int, fn func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
}

var sluiceBuild struct {
	once sync.Once
	exe  []byte // the built command
	skip string
	err  error
}

// sluiceBinary builds the sluice command once per test binary run, without
// the race detector whatever this test binary was built with, so that a
// test can serve a mount at full speed from another process. Each test
// gets its own copy in its temporary directory, removed with it.
func sluiceBinary(t *testing.T) string {
	t.Helper()
	b := &sluiceBuild
	b.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = "/usr/local/go/bin/go"
			if _, err := os.Stat(goTool); err != nil {
				b.skip = "skipping: no go toolchain (neither go on PATH nor /usr/local/go/bin/go) to build the sluice command"
				return
			}
		}
		wd, err := os.Getwd()
		if err != nil {
			b.err = err
			return
		}
		root := filepath.Dir(wd) // the module root: this package is sluice/fsys
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
			b.err = fmt.Errorf("no module root above %s: %v", wd, err)
			return
		}
		dir, err := os.MkdirTemp("", "sluice-test-bin-")
		if err != nil {
			b.err = err
			return
		}
		bin := filepath.Join(dir, "sluice")
		cmd := exec.Command(goTool, "build", "-o", bin, "sluice/cmd/sluice")
		cmd.Dir = root
		// Drop -race should GOFLAGS carry it: the point is a server
		// without the race detector's cost.
		var flags []string
		for _, f := range strings.Fields(os.Getenv("GOFLAGS")) {
			if f != "-race" && f != "-race=true" && f != "--race" {
				flags = append(flags, f)
			}
		}
		cmd.Env = append(os.Environ(), "GOFLAGS="+strings.Join(flags, " "))
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			os.RemoveAll(dir)
			b.err = fmt.Errorf("%s build -o %s sluice/cmd/sluice in %s: %v\n%s", goTool, bin, root, err, out)
			return
		}
		t.Logf("built the sluice command in %v", time.Since(start).Round(time.Millisecond))
		b.exe, b.err = os.ReadFile(bin)
		os.RemoveAll(dir)
	})
	if b.skip != "" {
		t.Skip(b.skip)
	}
	if b.err != nil {
		t.Fatal(b.err)
	}
	bin := filepath.Join(t.TempDir(), "sluice")
	if err := os.WriteFile(bin, b.exe, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// sluiceMount serves a fresh source directory from a sluice process run
// with args (flags only) and returns the source, the mount point and the
// process. The mount goes away when the test ends: SIGTERM, then a lazy
// unmount and SIGKILL should the process not exit in time.
func sluiceMount(t *testing.T, args ...string) (src, mnt string, proc *os.Process) {
	t.Helper()
	needFUSE(t)
	bin := sluiceBinary(t)
	dir, src, mnt := mountDirs(t)
	logPath := filepath.Join(dir, "sluice.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	log := func() string {
		b, _ := os.ReadFile(logPath)
		return string(b)
	}
	cmd := exec.Command(bin, append(append([]string{"mount"}, args...), src, mnt)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		start := time.Now()
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			if waitErr != nil {
				t.Errorf("sluice exited with %v after SIGTERM; its output:\n%s", waitErr, log())
			} else {
				t.Logf("sluice unmounted and exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
			}
			return
		case <-time.After(30 * time.Second):
		}
		t.Errorf("sluice did not exit within 30s of SIGTERM; detaching the mount and killing it; its output:\n%s", log())
		if out, err := exec.Command("fusermount3", "-uz", mnt).CombinedOutput(); err != nil {
			t.Logf("fusermount3 -uz %s: %v %s", mnt, err, out)
			unix.Unmount(mnt, unix.MNT_DETACH)
		}
		cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(20 * time.Second)
	for !listedInMounts(mnt) {
		select {
		case <-exited:
			t.Fatalf("sluice exited before mounting (%v); its output:\n%s", waitErr, log())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not mounted after 20s; sluice's output:\n%s", log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return src, mnt, cmd.Process
}

// listedInMounts reports whether path is a mount point in /proc/mounts.
func listedInMounts(path string) bool {
	b, _ := os.ReadFile("/proc/mounts")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == path {
			return true
		}
	}
	return false
}

// TestScaleWalk: a limited group stats and reads each of 100,000 files
// through the mount without a failure, sluice does not keep a descriptor
// per file it has seen, and a directory of 100,000 entries lists whole.
//
// The mount is served by the sluice command built without the race
// detector, in its own process: served from this test binary under -race,
// the walk takes minutes. Its descriptors are counted in /proc/PID/fd.
func TestScaleWalk(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: creates and walks 200,000 files")
	}
	needFUSE(t)
	dirs, perDir, listLen := 100, 1000, 100000
	if n, err := strconv.Atoi(os.Getenv("SLUICE_SCALE_DIRS")); err == nil && n > 0 {
		dirs, listLen = n, n*perDir // a smaller run: SLUICE_SCALE_DIRS directories
	}
	const workers = 4
	// Far fewer descriptors than files: a server keeping one per file it
	// has seen would hold 100,000.
	const maxOpen = 256
	src, mnt, proc := sluiceMount(t, "--allow-other", "--max-open", strconv.Itoa(maxOpen),
		"--group", "slow uid=4101", "--limit", "slow rbps=1GiB")
	fdsBefore := procFDs(t, proc.Pid)
	// Besides the descriptors kept to reach objects: standard streams,
	// /dev/fuse, the control socket, the source's root and the runtime's
	// epoll and pipes.
	fdBound := maxOpen + 64

	start := time.Now()
	var mu sync.Mutex
	var failures []string
	failed := map[string]int{}
	fail := func(kind, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failed[kind]++
		if len(failures) < 8 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	report := func(what string) string {
		mu.Lock()
		defer mu.Unlock()
		if len(failed) == 0 {
			return ""
		}
		s := fmt.Sprintf("%s: failed calls by kind %v; first ones:\n  %s", what, failed, strings.Join(failures, "\n  "))
		failures, failed = nil, map[string]int{}
		return s
	}
	content := func(d, i int) string { return fmt.Sprintf("%07d-%08d", d, i) }
	parallel(dirs, workers, func(d int) {
		dir := filepath.Join(src, fmt.Sprintf("d%03d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			fail("mkdir", "mkdir in SOURCE: %v", err)
			return
		}
		for i := 0; i < perDir; i++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", i)), []byte(content(d, i)), 0o644); err != nil {
				fail("create", "create in SOURCE: %v", err)
				return
			}
		}
	})
	if r := report("building the tree in SOURCE"); r != "" {
		t.Fatal(r)
	}
	t.Logf("created %d files in SOURCE in %v", dirs*perDir, time.Since(start).Round(time.Millisecond))

	// Stop walking in time to list the large directory and unmount before
	// the test binary's deadline.
	stopAt := time.Now().Add(time.Hour)
	if d, ok := t.Deadline(); ok {
		stopAt = d.Add(-90 * time.Second)
	}
	start = time.Now()
	var calls, walked int64
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := runAsGroups(4101, 4101, nil, func() {
				var n, files int64
				for d := range next {
					if time.Now().After(stopAt) {
						continue
					}
					files += int64(perDir)
					dir := filepath.Join(mnt, fmt.Sprintf("d%03d", d))
					ents, err := os.ReadDir(dir)
					n++
					if err != nil || len(ents) != perDir {
						fail("readdir", "readdir %s: %d entries, %v; want %d", dir, len(ents), err, perDir)
						continue
					}
					for i := 0; i < perDir; i++ {
						p := filepath.Join(dir, fmt.Sprintf("f%04d", i))
						var st unix.Stat_t
						if err := unix.Lstat(p, &st); err != nil || st.Size != 16 {
							fail("lstat "+errnoStr(err), "lstat %s: size %d, %v", p, st.Size, err)
							continue
						}
						fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
						if err != nil {
							fail("open "+errnoStr(err), "open %s: %v", p, err)
							continue
						}
						buf := make([]byte, 64)
						m, err := unix.Read(fd, buf)
						unix.Close(fd)
						n += 2
						if err != nil || string(buf[:max(m, 0)]) != content(d, i) {
							fail("read "+errnoStr(err), "read %s: %q, %v; want %q", p, buf[:max(m, 0)], err, content(d, i))
						}
					}
				}
				mu.Lock()
				calls += n
				walked += files
				mu.Unlock()
			})
			if err != nil {
				fail("setfsuid", "becoming uid 4101: %v", err)
			}
		}()
	}
	for d := 0; d < dirs; d++ {
		next <- d
	}
	close(next)
	wg.Wait()
	took := time.Since(start)
	t.Logf("walked %d files through the mount as a limited group (%d stat and read calls) in %v", walked, calls, took.Round(time.Millisecond))
	if r := report(fmt.Sprintf("walking %d files through the mount as a limited group", walked)); r != "" {
		if strings.Contains(r, "EINTR") {
			r += "\n(EINTR: sluice answered with EINTR the FUSE interrupt the kernel sends when a signal, such as the Go runtime's preemption signal, reaches a thread waiting on the request)"
		}
		t.Error(r)
	}
	if walked < int64(dirs*perDir) {
		t.Fatalf("walked only %d of %d files in %v (%.2f ms a file) before the test's deadline: give it a longer -timeout",
			walked, dirs*perDir, took.Round(time.Second), float64(took.Milliseconds())/float64(max(walked, 1)))
	}
	fdsWalk := procFDs(t, proc.Pid)
	t.Logf("sluice's open descriptors (--max-open %d): %d once mounted, %d after the walk", maxOpen, fdsBefore, fdsWalk)
	if fdsWalk >= fdBound || fdsWalk-fdsBefore >= 5000 {
		t.Errorf("after reading %d files through the mount sluice holds %d descriptors, %d more than once mounted: want fewer than %d with --max-open %d: the descriptors it keeps are not bounded",
			dirs*perDir, fdsWalk, fdsWalk-fdsBefore, fdBound, maxOpen)
	}

	start = time.Now()
	big := filepath.Join(src, "big")
	if err := os.Mkdir(big, 0o755); err != nil {
		t.Fatal(err)
	}
	parallel(workers, workers, func(w int) {
		for i := w; i < listLen; i += workers {
			if err := unix.Mknod(filepath.Join(big, fmt.Sprintf("e%06d", i)), unix.S_IFREG|0o644, 0); err != nil {
				fail("create", "create in SOURCE: %v", err)
				return
			}
		}
	})
	if r := report("building the large directory in SOURCE"); r != "" {
		t.Fatal(r)
	}
	t.Logf("created %d entries in one directory in %v", listLen, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	var ents []os.DirEntry
	var err error
	asUser(t, u4101, func() { ents, err = os.ReadDir(filepath.Join(mnt, "big")) })
	t.Logf("listed them through the mount in %v", time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("listing a directory of %d entries through the mount: %v (after %d entries)", listLen, err, len(ents))
	}
	seen := make(map[string]bool, len(ents))
	for _, e := range ents {
		seen[e.Name()] = true
	}
	var missing []string
	for i := 0; i < listLen; i++ {
		if n := fmt.Sprintf("e%06d", i); !seen[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 || len(ents) != listLen {
		t.Errorf("listing a directory of %d entries through the mount: %d entries, %d distinct, %d missing (first: %v)",
			listLen, len(ents), len(seen), len(missing), missing[:min(len(missing), 5)])
	}
	fdsList := procFDs(t, proc.Pid)
	t.Logf("sluice's open descriptors after the listing: %d", fdsList)
	if fdsList >= fdBound {
		t.Errorf("after listing %d entries through the mount sluice holds %d descriptors: want fewer than %d with --max-open %d",
			listLen, fdsList, fdBound, maxOpen)
	}
}
