package fsys

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/backing"
	"sluice/group"
	"sluice/stack"
)

// within runs fn and fails the test if it has not returned within d: a
// bound on a call that must not hang, never a measure of its speed. The
// goroutine of a call that hangs is left behind.
func within(t *testing.T, d time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s: no answer within %v", what, d)
	}
}

// errName names an errno for a test's tables: "ok" for nil.
func errName(err error) string {
	var e syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &e):
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// faultMount mounts a FaultTree over a fresh SOURCE with groups t (uid
// 4101) and o (uid 4102) limited by limits; each has a directory of its
// own, t/ and o/, that its uid owns and everyone may write.
func faultMount(t *testing.T, limits ...string) (src, mnt string, ft *backing.FaultTree, f *FS) {
	t.Helper()
	opts, ft, src := faultOptions(t, nil, limits...)
	_, mnt, f = mount(t, opts)
	return src, mnt, ft, f
}

// faultOptions are faultMount's options, its FaultTree holding
// operations through sleep (nil: time.Sleep), and SOURCE, which the
// tree serves.
func faultOptions(t *testing.T, sleep func(time.Duration), limits ...string) (Options, *backing.FaultTree, string) {
	t.Helper()
	_, src, _ := mountDirs(t)
	for i, d := range []string{"t", "o"} {
		if err := os.Mkdir(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(filepath.Join(src, d), 4101+i, 4101+i)
		os.Chmod(filepath.Join(src, d), 0o777)
	}
	local, err := backing.NewLocal(src, backing.LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ft, err := backing.NewFaultTree(local, backing.FaultOptions{Seed: 1, Sleep: sleep})
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Tree: ft, AllowOther: true, Rules: []group.Rule{{Group: "t", UID: new(uint32(4101))}, {Group: "o", UID: new(uint32(4102))}}}
	for _, l := range limits {
		opts.Limits = append(opts.Limits, limit(t, l))
	}
	return opts, ft, src
}

// readCounting reads path to its end in 128 KiB reads and returns the
// bytes read before the first error, and the error.
func readCounting(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 128<<10)
	n := 0
	for {
		m, err := f.Read(buf)
		n += m
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// TestFaultEIO: SOURCE failing reads and writes with EIO in the middle
// of a file (from the 5th backing read, the 3rd write) fails the caller's read or
// write with EIO after the bytes before it, limited group or not, while
// the other group reads its own file meanwhile with no error and the
// right bytes; once SOURCE is well again the same file reads and writes
// in full. (That the failed calls' budget is refunded is
// TestFaultRefund's, on virtual time.)
func TestFaultEIO(t *testing.T) {
	src, mnt, ft, _ := faultMount(t, "t rbps=16MiB wbps=16MiB", "o rbps=16MiB")
	data := writeRandom(t, filepath.Join(src, "t", "f"), 4<<20, 1)
	other := writeRandom(t, filepath.Join(src, "o", "f"), 4<<20, 2)
	for _, c := range []struct {
		name string
		uid  int
	}{{"limited", 4101}, {"unlimited", 4103}} {
		t.Run(c.name, func(t *testing.T) {
			w := filepath.Join("t", "w-"+c.name)
			if err := ft.SetRules(
				backing.FaultRule{Ops: backing.OpRead, Path: "t/f", Err: syscall.EIO, After: 4},
				backing.FaultRule{Ops: backing.OpWrite, Path: w, Err: syscall.EIO, After: 2},
			); err != nil {
				t.Fatal(err)
			}
			// The other group reads meanwhile.
			otherDone := make(chan error, 1)
			go runAs(4102, func() {
				b, err := os.ReadFile(filepath.Join(mnt, "o", "f"))
				if err == nil && !bytes.Equal(b, other) {
					err = errors.New("the bytes differ from SOURCE's")
				}
				otherDone <- err
			})
			var n int
			var rerr, werr error
			within(t, time.Minute, "the reads and writes failing", func() {
				runAs(c.uid, func() {
					n, rerr = readCounting(filepath.Join(mnt, "t", "f"))
					werr = os.WriteFile(filepath.Join(mnt, w), data, 0o644)
				})
			})
			if err := <-otherDone; err != nil {
				t.Errorf("the other group's read while t's failed: %v", err)
			}
			if !errors.Is(rerr, syscall.EIO) || n == 0 || n >= len(data) {
				t.Errorf("read of a file whose backing reads fail from the 5th: %d bytes, then %v; want some bytes, then EIO", n, rerr)
			}
			if !errors.Is(werr, syscall.EIO) {
				t.Errorf("write of a file whose backing writes fail from the 3rd: %v, want EIO", werr)
			}
			if fired := ft.Fired(); fired[0] == 0 || fired[1] == 0 {
				t.Errorf("the faults fired %v times, want both", fired)
			}

			ft.SetRules()
			var got []byte
			runAs(c.uid, func() {
				got, rerr = os.ReadFile(filepath.Join(mnt, "t", "f"))
				werr = os.WriteFile(filepath.Join(mnt, w), data, 0o644)
			})
			if rerr != nil || !bytes.Equal(got, data) {
				t.Errorf("read again with SOURCE well: %d bytes (%v), want SOURCE's %d", len(got), rerr, len(data))
			}
			if b, err := os.ReadFile(filepath.Join(src, w)); werr != nil || err != nil || !bytes.Equal(b, data) {
				t.Errorf("written again with SOURCE well: %v; SOURCE holds %d bytes (%v), want the %d written", werr, len(b), err, len(data))
			}
		})
	}
}

// TestFaultQuota: SOURCE refusing a uid's writes and creates over its
// disk quota (EDQUOT, injected: the kernel these tests run on is built
// without CONFIG_QUOTA, so no file system here enforces one) fails the
// caller's write after the bytes before it and its create at once with
// EDQUOT, limited group or not, while the other group writes its own file
// in full; once under quota again the same write and create succeed.
func TestFaultQuota(t *testing.T) {
	src, mnt, ft, _ := faultMount(t, "t wbps=16MiB", "o wbps=16MiB")
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, c := range []struct {
		name string
		uid  int
	}{{"limited", 4101}, {"unlimited", 4103}} {
		t.Run(c.name, func(t *testing.T) {
			w, created := filepath.Join("t", "w-"+c.name), filepath.Join("t", "c-"+c.name)
			if err := ft.SetRules(
				backing.FaultRule{Ops: backing.OpWrite, Path: w, Err: syscall.EDQUOT, After: 2},
				backing.FaultRule{Ops: backing.OpCreate, Path: created, Err: syscall.EDQUOT},
			); err != nil {
				t.Fatal(err)
			}
			otherDone := make(chan error, 1)
			go runAs(4102, func() {
				p := filepath.Join(mnt, "o", "w-"+c.name)
				err := os.WriteFile(p, data, 0o644)
				if b, rerr := os.ReadFile(filepath.Join(src, "o", "w-"+c.name)); err == nil && (rerr != nil || !bytes.Equal(b, data)) {
					err = fmt.Errorf("SOURCE holds %d bytes (%v), want the %d written", len(b), rerr, len(data))
				}
				otherDone <- err
			})
			var werr, cerr error
			var n int
			within(t, time.Minute, "the writes and creates over quota", func() {
				runAs(c.uid, func() {
					f, err := os.OpenFile(filepath.Join(mnt, w), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
					if err != nil {
						werr = err
						return
					}
					n, werr = f.Write(data)
					f.Close()
					_, cerr = os.Create(filepath.Join(mnt, created))
				})
			})
			if err := <-otherDone; err != nil {
				t.Errorf("the other group's write while t's went over quota: %v", err)
			}
			if !errors.Is(werr, syscall.EDQUOT) || n >= len(data) {
				t.Errorf("write of a file whose backing writes fail from the 3rd: %d bytes, then %v; want fewer than %d, then EDQUOT", n, werr, len(data))
			}
			if !errors.Is(cerr, syscall.EDQUOT) {
				t.Errorf("create over quota: %v, want EDQUOT", cerr)
			}
			if _, err := os.Lstat(filepath.Join(src, created)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the create refused left %s on SOURCE: %v", created, err)
			}
			if fired := ft.Fired(); fired[0] == 0 || fired[1] == 0 {
				t.Errorf("the faults fired %v times, want both", fired)
			}

			ft.SetRules()
			runAs(c.uid, func() {
				werr = os.WriteFile(filepath.Join(mnt, w), data, 0o644)
				var f *os.File
				if f, cerr = os.Create(filepath.Join(mnt, created)); cerr == nil {
					f.Close()
				}
			})
			if b, err := os.ReadFile(filepath.Join(src, w)); werr != nil || err != nil || !bytes.Equal(b, data) {
				t.Errorf("written again under quota: %v; SOURCE holds %d bytes (%v), want the %d written", werr, len(b), err, len(data))
			}
			if cerr != nil {
				t.Errorf("create under quota: %v", cerr)
			}
		})
	}
}

// TestFaultReadOnlySource: SOURCE's file system remounted read-only
// under the mount fails every write, create, mkdir and open for writing
// with EROFS at once, for limited and unlimited groups, while reads go
// on; remounted read-write, writes work again.
func TestFaultReadOnlySource(t *testing.T) {
	needFUSE(t)
	root := loopFS(t, 32<<20)
	os.Chmod(root, 0o777)
	data := writeRandom(t, filepath.Join(root, "f"), 1<<20, 3)
	os.Chmod(filepath.Join(root, "f"), 0o666)
	rules := []group.Rule{{Group: "t", UID: new(uint32(4101))}}
	_, mnt, _ := mount(t, Options{Source: root, AllowOther: true, Rules: rules,
		Limits: []group.LimitSpec{limit(t, "t rbps=8MiB wbps=8MiB")}})
	remount := func(how string) {
		t.Helper()
		if out, err := exec.Command("mount", "-o", "remount,"+how, root).CombinedOutput(); err != nil {
			t.Fatalf("mount -o remount,%s %s: %v\n%s", how, root, err, out)
		}
	}
	remount("ro")
	t.Cleanup(func() { exec.Command("mount", "-o", "remount,rw", root).Run() })
	for _, c := range []struct {
		name string
		uid  int
	}{{"limited", 4101}, {"unlimited", 4102}} {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			var b []byte
			var rerr error
			within(t, 30*time.Second, "the operations on a read-only SOURCE", func() {
				runAs(c.uid, func() {
					_, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_WRONLY, 0)
					got = append(got, "open-write="+errName(err))
					err = os.WriteFile(filepath.Join(mnt, "new-"+c.name), nil, 0o644)
					got = append(got, "create="+errName(err))
					err = os.Mkdir(filepath.Join(mnt, "d-"+c.name), 0o755)
					got = append(got, "mkdir="+errName(err))
					err = os.Truncate(filepath.Join(mnt, "f"), 0)
					got = append(got, "truncate="+errName(err))
					b, rerr = os.ReadFile(filepath.Join(mnt, "f"))
				})
			})
			const want = "open-write=EROFS create=EROFS mkdir=EROFS truncate=EROFS"
			if s := strings.Join(got, " "); s != want {
				t.Errorf("on a read-only SOURCE:\n got %s\nwant %s", s, want)
			}
			if rerr != nil || !bytes.Equal(b, data) {
				t.Errorf("read on a read-only SOURCE: %d bytes (%v), want SOURCE's %d", len(b), rerr, len(data))
			}
		})
	}
	remount("rw")
	var err error
	runAs(4101, func() { err = os.WriteFile(filepath.Join(mnt, "after"), data, 0o644) })
	if b, rerr := os.ReadFile(filepath.Join(root, "after")); err != nil || rerr != nil || !bytes.Equal(b, data) {
		t.Errorf("write with SOURCE read-write again: %v; SOURCE holds %d bytes (%v)", err, len(b), rerr)
	}
}

// ext4Shutdown is EXT4_IOC_SHUTDOWN, and ext4GoingNoLogFlush its flag
// that stops the file system at once, as a disk pulled out would.
const (
	ext4Shutdown        = 0x8004587d
	ext4GoingNoLogFlush = 2
)

// TestFaultSourceGone: SOURCE's file system cannot be unmounted under
// the mount (EBUSY: sluice holds it open); detached lazily (umount -l),
// it goes on serving through the mount, as it does a process holding a
// descriptor into it; and once that file system stops (an ext4 shut
// down, as a disk pulled out), every operation through the mount, of a
// limited group or not, fails as the same operation fails for that
// process, none hangs, and the mount still answers and unmounts.
func TestFaultSourceGone(t *testing.T) {
	needFUSE(t)
	root := loopFS(t, 32<<20)
	os.Chmod(root, 0o777)
	for _, n := range []string{"f1", "f2", "h"} {
		writeRandom(t, filepath.Join(root, n), 1<<20, 5)
		os.Chmod(filepath.Join(root, n), 0o666)
	}
	rules := []group.Rule{{Group: "t", UID: new(uint32(4101))}}
	_, mnt, f := mount(t, Options{Source: root, AllowOther: true, Rules: rules,
		Limits: []group.LimitSpec{limit(t, "t rbps=8MiB wbps=8MiB")}})
	dfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	hfd, err := unix.Openat(dfd, "h", unix.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(hfd)
	users := []struct {
		name string
		uid  int
		h    *os.File // h, opened through the mount before SOURCE went
	}{{name: "limited", uid: 4101}, {name: "unlimited", uid: 4102}}
	for i := range users {
		runAs(users[i].uid, func() { users[i].h, err = os.Open(filepath.Join(mnt, "h")) })
		if err != nil {
			t.Fatal(err)
		}
		defer users[i].h.Close()
	}

	// The operations, each on what no earlier one touched (a page
	// cache or a listing kept would answer without SOURCE).
	native := func(phase string, off int64) string {
		var r []string
		say := func(what string, err error) { r = append(r, what+"="+errName(err)) }
		buf := make([]byte, 64<<10)
		fd, err := unix.Openat(dfd, "f"+phase, unix.O_RDONLY, 0)
		if err == nil {
			_, err = unix.Pread(fd, buf, 0)
			unix.Close(fd)
		}
		say("read", err)
		_, err = unix.Pread(hfd, buf, off)
		say("read-open", err)
		fd, err = unix.Openat(dfd, "native"+phase, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
		if err == nil {
			_, err = unix.Write(fd, buf)
			unix.Close(fd)
		}
		say("create", err)
		say("mkdir", unix.Mkdirat(dfd, "nd"+phase, 0o755))
		return strings.Join(r, " ")
	}
	through := func(phase string, off int64, uid int, name string, h *os.File) string {
		var r []string
		say := func(what string, err error) { r = append(r, what+"="+errName(err)) }
		buf := make([]byte, 64<<10)
		runAs(uid, func() {
			rf, err := os.Open(filepath.Join(mnt, "f"+phase))
			if err == nil {
				_, err = rf.ReadAt(buf, 0)
				rf.Close()
			}
			say("read", err)
			_, err = h.ReadAt(buf, off)
			say("read-open", err)
			say("create", os.WriteFile(filepath.Join(mnt, name+phase), buf, 0o644))
			say("mkdir", os.Mkdir(filepath.Join(mnt, name+"d"+phase), 0o755))
		})
		return strings.Join(r, " ")
	}
	check := func(phase string, off int64) {
		t.Helper()
		want := native(phase, off)
		for _, u := range users {
			var got string
			within(t, 30*time.Second, "operations through the mount ("+phase+", "+u.name+")", func() {
				got = through(phase, off, u.uid, u.name, u.h)
			})
			if got != want {
				t.Errorf("%s: %s group through the mount:\n got %s\nwant %s (as a process holding SOURCE open)", phase, u.name, got, want)
			}
		}
		t.Logf("%s: %s", phase, want)
	}

	if err := unix.Unmount(root, 0); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("umount of SOURCE's file system under the mount: %v, want EBUSY", err)
	}
	if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
		t.Fatalf("umount -l of SOURCE's file system: %v", err)
	}
	check("1", 0)
	if err := unix.IoctlSetPointerInt(dfd, ext4Shutdown, ext4GoingNoLogFlush); err != nil {
		t.Skipf("skipping the stopped file system: EXT4_IOC_SHUTDOWN: %v", err)
	}
	check("2", 768<<10)
	if _, err := os.Stat(mnt); err != nil {
		t.Errorf("stat of the mount point with SOURCE stopped: %v", err)
	}
	f.Engine().Metrics()
}

// TestFaultHungRead: a backing read that never returns holds its reader
// only: the same group's other files, the other group's and an
// unlimited reader's read meanwhile, with the right bytes; the mount
// counts the held read in flight, older at each look, and once its
// reader is killed the mount unmounts with the read still held.
func TestFaultHungRead(t *testing.T) {
	needFUSE(t)
	release := make(chan struct{})
	unhang := sync.OnceFunc(func() { close(release) })
	defer unhang()
	const hang = time.Duration(math.MaxInt64)
	opts, ft, src := faultOptions(t, func(d time.Duration) {
		if d == hang {
			<-release
			return
		}
		time.Sleep(d)
	}, "t rbps=16MiB", "o rbps=16MiB")
	_, _, mnt := mountDirs(t)
	opts.Mountpoint = mnt
	opts.Options.Options = stack.DefaultOptions()
	want := map[string][]byte{}
	for i, p := range []string{"t/hung", "t/f", "o/f"} {
		want[p] = writeRandom(t, filepath.Join(src, p), 1<<20, uint64(10+i))
	}
	if err := ft.SetRules(backing.FaultRule{Ops: backing.OpRead, Path: "t/hung", Delay: hang}); err != nil {
		t.Fatal(err)
	}
	f, unmount := serve(t, opts)
	defer unmount()

	cat := exec.Command("cat", filepath.Join(mnt, "t", "hung"))
	cat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4101, Gid: 4101}}
	if err := cat.Start(); err != nil {
		t.Fatal(err)
	}
	catDone := make(chan error, 1)
	go func() { catDone <- cat.Wait() }()
	defer cat.Process.Kill()
	// Until the read is held in SOURCE.
	for deadline := time.Now().Add(10 * time.Second); ft.Fired()[0] == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the read of t/hung did not reach SOURCE within 10 s")
		}
	}
	for _, r := range []struct {
		uid  int
		path string
	}{{4101, "t/f"}, {4102, "o/f"}, {4103, "t/f"}, {4103, "o/f"}} {
		var b []byte
		var err error
		within(t, 30*time.Second, fmt.Sprintf("uid %d reading %s beside the held read", r.uid, r.path), func() {
			runAs(r.uid, func() { b, err = os.ReadFile(filepath.Join(mnt, r.path)) })
		})
		if err != nil || !bytes.Equal(b, want[r.path]) {
			t.Errorf("uid %d read %s beside the held read: %d bytes (%v), want SOURCE's %d", r.uid, r.path, len(b), err, len(want[r.path]))
		}
	}
	first := f.InFlight()
	time.Sleep(10 * time.Millisecond)
	again := f.InFlight()
	t.Logf("in flight: %+v, then %+v", first, again)
	if len(again) != 1 || again[0].Group != "t" || again[0].Requests != 1 || len(first) != 1 || again[0].OldestNs <= first[0].OldestNs {
		t.Errorf("in flight with one read held in SOURCE: %+v, then %+v; want t's one request, older the second time", first, again)
	}
	select {
	case err := <-catDone:
		t.Fatalf("the reader of the held file returned: %v", err)
	default:
	}
	cat.Process.Kill()
	within(t, 30*time.Second, "the killed reader of the held file", func() { <-catDone })
	start := time.Now()
	within(t, 60*time.Second, "unmounting with a read held in SOURCE", unmount)
	t.Logf("unmounted in %v with the read held in SOURCE", time.Since(start))
}

// TestFaultExtremeLimits: limits at the extremes on a mount. At 1 B/s a
// reader held by the throttle returns at once when killed (SIGKILL or
// SIGTERM); at 1 IOPS and at 100 GiB/s reads complete with the right
// bytes; with the limit changed every millisecond among 1 B/s, 1 IOPS,
// 100 GiB/s and none for 2 s while two readers read, nothing panics and,
// the limit lifted, the readers finish with the right bytes; and the
// mount unmounts.
func TestFaultExtremeLimits(t *testing.T) {
	rules := []group.Rule{{Group: "t", UID: new(uint32(4101))}}
	src, mnt, f := mount(t, Options{AllowOther: true, Rules: rules, Limits: []group.LimitSpec{limit(t, "t rbps=1")}})
	small := writeRandom(t, filepath.Join(src, "small"), 8<<10, 21)
	big := writeRandom(t, filepath.Join(src, "big"), 16<<20, 22)

	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		dd := exec.Command("dd", "if="+filepath.Join(mnt, "big"), "of=/dev/null", "bs=64k")
		dd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4101, Gid: 4101}}
		if err := dd.Start(); err != nil {
			t.Fatal(err)
		}
		// Until it waits in the throttle: its first 64 KiB take 18 hours.
		for deadline := time.Now().Add(10 * time.Second); len(f.InFlight()) == 0; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("dd's read at 1 B/s never reached the mount")
			}
		}
		dd.Process.Signal(sig)
		within(t, 10*time.Second, fmt.Sprintf("a reader at 1 B/s sent %v", sig), func() { dd.Wait() })
	}

	read := func(name string, want []byte) error {
		var b []byte
		var err error
		runAs(4101, func() { b, err = os.ReadFile(filepath.Join(mnt, name)) })
		if err == nil && !bytes.Equal(b, want) {
			err = fmt.Errorf("%s: %d bytes, not SOURCE's %d", name, len(b), len(want))
		}
		return err
	}
	for _, c := range []struct {
		spec, name string
		want       []byte
	}{{"t rbps=max riops=1", "small", small}, {"t rbps=100GiB riops=max", "big", big}} {
		f.SetLimit(limit(t, c.spec))
		var err error
		within(t, 30*time.Second, "a read at "+c.spec, func() { err = read(c.name, c.want) })
		if err != nil {
			t.Errorf("read at %s: %v", c.spec, err)
		}
	}

	specs := []group.LimitSpec{limit(t, "t rbps=1 riops=max"), limit(t, "t rbps=max riops=1"),
		limit(t, "t rbps=100GiB riops=max"), limit(t, "t rbps=max riops=max")}
	stop := make(chan struct{})
	changed := make(chan int)
	go func() {
		n := 0
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				changed <- n
				return
			case <-tick.C:
				f.SetLimit(specs[n%len(specs)])
				n++
			}
		}
	}()
	errs := make(chan error, 2)
	for _, r := range []struct {
		name string
		want []byte
	}{{"big", big}, {"small", small}} {
		go func() {
			var err error
			for i := 0; err == nil; i++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				err = read(r.name, r.want)
			}
			errs <- err
		}()
	}
	time.Sleep(2 * time.Second)
	close(stop)
	n := <-changed
	f.SetLimit(limit(t, "t rbps=max riops=max"))
	within(t, 30*time.Second, "the readers once the limit changing every millisecond was lifted", func() {
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("read while the limit changed every millisecond: %v", err)
			}
		}
	})
	t.Logf("the limit changed %d times in 2 s", n)
}
