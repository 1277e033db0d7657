package fsys

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/group"
)

// fullDiskMmap is what mmapErrors prints when the backing file system is
// full: the writeback of the mapped pages fails, msync reports ENOSPC, and
// so does the next fsync of every other descriptor open at the time (once
// each); a mapping written and unmapped without msync reports it at close.
const fullDiskMmap = "msync=ENOSPC msync-again=ok fsync-other=ENOSPC fsync-readonly=ENOSPC fsync-other-again=ok close=ENOSPC"

// TestFullDisk: a backing file system that fills up fails each writer
// with ENOSPC at the call the README names, limited group or not, and
// loses nothing once space is back; another group's reads and writes go
// on meanwhile, without waiting behind the failing writer.
func TestFullDisk(t *testing.T) {
	needFUSE(t)
	root := loopFS(t, 24<<20, "-m", "0")
	os.Chmod(root, 0o777)
	rules := []group.Rule{{Group: "t", UID: new(uint32(1001))}, {Group: "o", UID: new(uint32(1002))}}
	_, mnt, _ := mount(t, Options{Source: root, AllowOther: true, Rules: rules,
		Limits: []group.LimitSpec{limit(t, "t wbps=64MiB"), limit(t, "o rbps=4MiB wbps=4MiB")}})

	for _, tc := range []struct {
		name string
		uid  int
	}{{"limited", 1001}, {"unlimited", 1003}} {
		t.Run(tc.name, func(t *testing.T) {
			// What the other group reads while the disk is full.
			otherName := "other-" + tc.name
			other := writeRandom(t, filepath.Join(root, otherName), 2<<20, 3)
			os.Chown(filepath.Join(root, otherName), 1002, 1002)
			var err error
			sparse := makeHole(t, tc.uid, filepath.Join(mnt, "sparse-"+tc.name))
			// An unlimited group's writes by passthrough are the kernel's on
			// SOURCE: they fail as on a file there.
			wantMmap := func() string { return fullDiskMmap }
			if *passthroughAll && tc.name == "unlimited" {
				native := makeHole(t, tc.uid, filepath.Join(root, "native-"+tc.name))
				wantMmap = func() string {
					out, err := helper("mmaperr", fmt.Sprintf("%d:%s", tc.uid, native)).CombinedOutput()
					return fmt.Sprintf("%s (%v)", strings.TrimSpace(string(out)), err)
				}
			}
			// Space that is given back once the disk is full, so that a
			// writeback finds room for part of its pages only.
			slack := filepath.Join(mnt, "slack-"+tc.name)
			runAs(tc.uid, func() { err = os.WriteFile(slack, make([]byte, 256<<10), 0o644) })
			if err != nil {
				t.Fatal(err)
			}
			fill := "fill-" + tc.name
			// write() fails with ENOSPC (fillAs fails on any other error).
			fillAs(t, tc.uid, filepath.Join(mnt, fill))

			// The writer keeps failing while the other group reads and
			// writes.
			stop, failing := make(chan struct{}), make(chan int)
			go runAs(tc.uid, func() {
				n := 0
				defer func() { failing <- n }()
				f, err := os.OpenFile(filepath.Join(mnt, fill), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					return
				}
				defer f.Close()
				buf := make([]byte, 64<<10)
				for {
					select {
					case <-stop:
						return
					default:
					}
					if _, err := f.Write(buf); errors.Is(err, syscall.ENOSPC) {
						n++
					}
				}
			})
			start := time.Now()
			var got []byte
			var rerr, werr error
			runAs(1002, func() {
				got, rerr = os.ReadFile(filepath.Join(mnt, otherName))
				werr = os.WriteFile(filepath.Join(mnt, "other-new"), make([]byte, 64<<10), 0o644)
			})
			took := time.Since(start)
			close(stop)
			fails := <-failing
			os.Remove(filepath.Join(mnt, "other-new"))
			t.Logf("the other group read 2 MiB at rbps=4MiB in %v while the writer failed %d writes with ENOSPC", took, fails)
			if rerr != nil || !bytes.Equal(got, other) {
				t.Errorf("the other group's read while the disk was full: %v (%d bytes, equal: %v)", rerr, len(got), bytes.Equal(got, other))
			}
			if !errors.Is(werr, syscall.ENOSPC) {
				t.Errorf("the other group's write on the full disk: %v, want ENOSPC", werr)
			}
			if fails == 0 {
				t.Errorf("the writer's writes did not fail with ENOSPC while the other group ran")
			}
			if took > 10*time.Second {
				t.Errorf("the other group's 2 MiB at rbps=4MiB took %v while the disk was full: it waited behind the failing writer", took)
			}

			if err := os.Remove(slack); err != nil {
				t.Fatal(err)
			}
			waitFree(t, root, 128<<10)
			out, err := helper("mmaperr", fmt.Sprintf("%d:%s", tc.uid, sparse)).CombinedOutput()
			want := wantMmap()
			if *passthroughAll && tc.name == "unlimited" {
				if got := fmt.Sprintf("%s (%v)", strings.TrimSpace(string(out)), err); got != want {
					t.Errorf("writes through a shared mapping on a full disk by passthrough:\n got %s\nwant %s (as on SOURCE)", got, want)
				}
			} else if s := strings.TrimSpace(string(out)); err != nil || s != want {
				t.Errorf("writes through a shared mapping on a full disk:\n got %s (%v)\nwant %s", s, err, want)
			}

			// Space again: the same writes to another file succeed, and
			// the data is in the backing file. (Not to the same file: the
			// kernel reports the error of the writeback at close once more,
			// to the next opener, as an error no fsync has seen yet.)
			// (Through the mount: a file removed on SOURCE keeps its
			// blocks while sluice holds the inode.)
			if err := os.Remove(filepath.Join(mnt, fill)); err != nil {
				t.Fatal(err)
			}
			waitFree(t, root, 8<<20)
			const ok = "msync=ok msync-again=ok fsync-other=ok fsync-readonly=ok fsync-other-again=ok close=ok"
			again := makeHole(t, tc.uid, filepath.Join(mnt, "again-"+tc.name))
			out, err = helper("mmaperr", fmt.Sprintf("%d:%s", tc.uid, again)).CombinedOutput()
			if s := strings.TrimSpace(string(out)); err != nil || s != ok {
				t.Errorf("writes through a shared mapping with space again:\n got %s (%v)\nwant %s", s, err, ok)
			}
			b, err := os.ReadFile(filepath.Join(root, "again-"+tc.name))
			if want := mmapPattern(1 << 20); err != nil || !bytes.Equal(b, want) {
				t.Errorf("backing file after the mapped writes with space again: %v, equal: %v", err, bytes.Equal(b, want))
			}
			runAs(tc.uid, func() {
				err = os.WriteFile(filepath.Join(mnt, fill), make([]byte, 1<<20), 0o644)
			})
			if err != nil {
				t.Errorf("write() with space again: %v", err)
			}
			os.Remove(filepath.Join(mnt, fill))
		})
	}
}

// waitFree waits until the file system of dir has n bytes available: a
// file removed through the mount gives its blocks back once the kernel has
// forgotten its inode and the removal is committed.
func waitFree(t *testing.T, dir string, n uint64) {
	t.Helper()
	var sfs unix.Statfs_t
	for start := time.Now(); ; {
		syscall.Sync()
		if err := unix.Statfs(dir, &sfs); err != nil {
			t.Fatal(err)
		}
		if sfs.Bavail*uint64(sfs.Bsize) >= n {
			return
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("%s: %d KiB available 10 s after a removal, want %d KiB", dir, sfs.Bavail*uint64(sfs.Bsize)>>10, n>>10)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// makeHole creates path as uid: 1 MiB with no blocks, which writes
// through a mapping allocate at writeback.
func makeHole(t *testing.T, uid int, path string) string {
	t.Helper()
	var err error
	runAs(uid, func() {
		var f *os.File
		if f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
			err = f.Truncate(1 << 20)
			f.Close()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// numArg splits a helper process's argument N:PATH.
func numArg(arg string) (n int, path string, ok bool) {
	s, path, _ := strings.Cut(arg, ":")
	n, err := strconv.Atoi(s)
	if err != nil {
		fmt.Println("bad argument:", arg)
		return 0, "", false
	}
	return n, path, true
}

// mmapErrors (helper process "mmaperr", argument UID:PATH) writes PATH, a
// file of 1 MiB, through shared mappings as UID and prints what each call
// returned: msync, msync again, fsync of two descriptors opened before
// the write (one read-only), the first of them again, and close of a
// descriptor whose mapping was written and unmapped without msync.
func mmapErrors(arg string) int {
	uid, path, ok := numArg(arg)
	if !ok {
		return 2
	}
	if err := syscall.Setgid(uid); err != nil {
		fmt.Println("setgid:", err)
		return 2
	}
	if err := syscall.Setuid(uid); err != nil {
		fmt.Println("setuid:", err)
		return 2
	}
	const size = 1 << 20
	open := func(flags int) int {
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			fmt.Println("open:", err)
			os.Exit(2)
		}
		return fd
	}
	mapWrite := func(fd int) []byte {
		m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			fmt.Println("mmap:", err)
			os.Exit(2)
		}
		// A page the file system cannot allocate at the fault (as ext4
		// for a file's hole when it is full) is a SIGBUS.
		debug.SetPanicOnFault(true)
		defer func() {
			if recover() != nil {
				fmt.Println("write=SIGBUS")
				os.Exit(0)
			}
		}()
		copy(m, mmapPattern(size))
		return m
	}
	fd, other, ro := open(unix.O_RDWR), open(unix.O_RDWR), open(unix.O_RDONLY)
	m := mapWrite(fd)
	var res []string
	say := func(what string, err error) { res = append(res, what+"="+errnoStr(err)) }
	say("msync", unix.Msync(m, unix.MS_SYNC))
	say("msync-again", unix.Msync(m, unix.MS_SYNC))
	say("fsync-other", unix.Fsync(other))
	say("fsync-readonly", unix.Fsync(ro))
	say("fsync-other-again", unix.Fsync(other))
	unix.Munmap(m)
	unix.Close(fd)
	unix.Close(other)
	unix.Close(ro)
	fd = open(unix.O_RDWR)
	unix.Munmap(mapWrite(fd))
	say("close", unix.Close(fd))
	fmt.Println(strings.Join(res, " "))
	return 0
}
