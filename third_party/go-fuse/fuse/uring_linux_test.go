// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// uringFS serves one file, "file", of uringSize bytes (byte i is
// byte(i*7)), into which writes are recorded, and a name, "block", whose
// reads wait until they are interrupted.
type uringFS struct {
	defaultRawFileSystem

	mu      sync.Mutex
	written []byte

	blocked     chan struct{} // a read of "block" started
	interrupted chan struct{} // and its cancel channel was closed

	held    chan struct{} // a read of "holdN" started
	release chan struct{} // closed: reads of "holdN" return
}

const uringSize = 3 << 20

func (f *uringFS) Lookup(cancel <-chan struct{}, h *InHeader, name string, out *EntryOut) Status {
	var id uint64
	switch name {
	case "file":
		id = 2
	case "block":
		id = 3
	default:
		var i int
		if _, err := fmt.Sscanf(name, "hold%d", &i); err != nil {
			return ENOENT
		}
		id = 100 + uint64(i)
	}
	out.NodeId = id
	out.Attr = Attr{Ino: id, Mode: S_IFREG | 0o644, Nlink: 1, Size: uringSize}
	return OK
}

func (f *uringFS) GetAttr(cancel <-chan struct{}, in *GetAttrIn, out *AttrOut) Status {
	mode := uint32(S_IFDIR | 0o755)
	if in.NodeId != FUSE_ROOT_ID {
		mode = S_IFREG | 0o644
	}
	out.Attr = Attr{Ino: in.NodeId, Mode: mode, Nlink: 1, Size: uringSize}
	return OK
}

func (f *uringFS) Open(cancel <-chan struct{}, in *OpenIn, out *OpenOut) Status {
	out.OpenFlags = FOPEN_DIRECT_IO
	return OK
}

func (f *uringFS) Read(cancel <-chan struct{}, in *ReadIn, buf []byte) (ReadResult, Status) {
	if in.NodeId >= 100 {
		f.held <- struct{}{}
		<-f.release
		return ReadResultData(buf[:1]), OK
	}
	if in.NodeId == 3 {
		f.blocked <- struct{}{}
		<-cancel
		close(f.interrupted)
		return nil, EINTR
	}
	n := max(0, min(len(buf), uringSize-int(in.Offset)))
	for i := 0; i < n; i++ {
		buf[i] = byte((int(in.Offset) + i) * 7)
	}
	return ReadResultData(buf[:n]), OK
}

func (f *uringFS) Write(cancel <-chan struct{}, in *WriteIn, data []byte) (uint32, Status) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.written = append(f.written, data...)
	return uint32(len(data)), OK
}

func (f *uringFS) GetXAttr(cancel <-chan struct{}, h *InHeader, attr string, dest []byte) (uint32, Status) {
	v := "value of " + attr
	if len(dest) < len(v) {
		return uint32(len(v)), ERANGE
	}
	return uint32(copy(dest, v)), OK
}

// enableURing turns the fuse module's enable_uring on for the test,
// skipping it where that cannot be done.
func enableURing(t *testing.T) {
	const p = "/sys/module/fuse/parameters/enable_uring"
	b, err := os.ReadFile(p)
	if err != nil {
		t.Skipf("skipping: no FUSE-over-io_uring in this kernel: %v", err)
	}
	if strings.TrimSpace(string(b)) == "Y" {
		return
	}
	if err := os.WriteFile(p, []byte("Y\n"), 0o644); err != nil {
		t.Skipf("skipping: cannot turn %s on: %v", p, err)
	}
	t.Cleanup(func() { os.WriteFile(p, []byte("N\n"), 0o644) })
}

// TestIOUring: with MountOptions.IOUring, reads (of 4 KiB, and of 1 MiB
// in place), a 1 MiB write, an extended attribute and an interrupted
// read are served over the rings, and unmounting ends them.
func TestIOUring(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: mounting with mount(2) needs root")
	}
	enableURing(t)
	fs := &uringFS{blocked: make(chan struct{}, 1), interrupted: make(chan struct{})}
	mnt := t.TempDir()
	opts := &MountOptions{DirectMount: true, MaxWrite: 1 << 20, IOUring: true, IOUringDepth: 4}
	ms, err := NewServer(fs, mnt, opts)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { ms.Serve(); close(served) }()
	unmounted := false
	defer func() {
		if !unmounted {
			ms.Unmount()
		}
	}()
	if err := ms.WaitMount(); err != nil {
		t.Fatal(err)
	}
	if !ms.IOUring() {
		t.Fatal("the server does not use io_uring, though the kernel offers it")
	}

	want := make([]byte, uringSize)
	for i := range want {
		want[i] = byte(i * 7)
	}
	f, err := os.Open(filepath.Join(mnt, "file"))
	if err != nil {
		t.Fatal(err)
	}
	small := make([]byte, 4096)
	if n, err := f.ReadAt(small, 8192); n != len(small) || err != nil || !bytes.Equal(small, want[8192:8192+4096]) {
		t.Errorf("4 KiB read: %d bytes, %v, equal %v", n, err, bytes.Equal(small, want[8192:8192+4096]))
	}
	big := make([]byte, 1<<20)
	if n, err := f.ReadAt(big, 12345); n != len(big) || err != nil || !bytes.Equal(big, want[12345:12345+1<<20]) {
		t.Errorf("1 MiB read: %d bytes, %v, equal %v", n, err, bytes.Equal(big, want[12345:12345+1<<20]))
	}
	f.Close()

	w, err := os.OpenFile(filepath.Join(mnt, "file"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	data := want[1 : 1+1<<20]
	if n, err := w.Write(data); n != len(data) || err != nil {
		t.Errorf("1 MiB write: %d bytes, %v", n, err)
	}
	w.Close()
	fs.mu.Lock()
	if !bytes.Equal(fs.written, data) {
		t.Errorf("the file system got %d bytes written, want the %d written", len(fs.written), len(data))
	}
	fs.mu.Unlock()

	v := make([]byte, 64)
	if n, err := syscall.Getxattr(filepath.Join(mnt, "file"), "user.x", v); err != nil || string(v[:n]) != "value of user.x" {
		t.Errorf("getxattr: %q, %v", v[:max(n, 0)], err)
	}

	// A read interrupted by a signal: the INTERRUPT comes over /dev/fuse
	// and cancels the request taken from a ring.
	dd := exec.Command("dd", "if="+filepath.Join(mnt, "block"), "of=/dev/null", "bs=4096", "count=1", "iflag=direct")
	if err := dd.Start(); err != nil {
		t.Fatal(err)
	}
	<-fs.blocked
	dd.Process.Signal(syscall.SIGKILL)
	select {
	case <-fs.interrupted:
	case <-time.After(10 * time.Second):
		t.Error("the blocked read was not interrupted within 10 s of its caller's SIGKILL")
	}
	dd.Wait()

	t.Logf("requests served over io_uring: %d", ms.uring.served.Load())
	if n := ms.uring.served.Load(); n == 0 {
		t.Error("no request was served over io_uring")
	}
	if err := ms.Unmount(); err != nil {
		t.Fatal(err)
	}
	unmounted = true
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return within 10 s of the unmount")
	}
}

// TestIOUringFallback: where the kernel does not offer io_uring (the
// fuse module's enable_uring off), a mount asking for it serves over
// /dev/fuse.
func TestIOUringFallback(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: mounting with mount(2) needs root")
	}
	const p = "/sys/module/fuse/parameters/enable_uring"
	b, err := os.ReadFile(p)
	if err != nil {
		t.Skipf("skipping: no FUSE-over-io_uring in this kernel: %v", err)
	}
	if strings.TrimSpace(string(b)) == "Y" {
		if err := os.WriteFile(p, []byte("N\n"), 0o644); err != nil {
			t.Skipf("skipping: cannot turn %s off: %v", p, err)
		}
		t.Cleanup(func() { os.WriteFile(p, []byte("Y\n"), 0o644) })
	}
	fs := &uringFS{}
	mnt := t.TempDir()
	ms, err := NewServer(fs, mnt, &MountOptions{DirectMount: true, IOUring: true})
	if err != nil {
		t.Fatal(err)
	}
	go ms.Serve()
	defer ms.Unmount()
	if err := ms.WaitMount(); err != nil {
		t.Fatal(err)
	}
	if ms.IOUring() {
		t.Fatal("the server says it uses io_uring, which the kernel did not offer")
	}
	small := make([]byte, 4096)
	f, err := os.Open(filepath.Join(mnt, "file"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if n, err := f.ReadAt(small, 4096); n != len(small) || err != nil || small[1] != byte(4097*7%256) {
		t.Errorf("4 KiB read over /dev/fuse: %d bytes, %v", n, err)
	}
}

// TestIOUringGiveUp: rings that cannot all be set up before the kernel
// would use them are given up, and /dev/fuse serves (the kernel, which
// holds requests back once it granted io_uring, is made to give up too);
// a failure after that leaves the last queue short, still served over
// io_uring.
func TestIOUringGiveUp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: mounting with mount(2) needs root")
	}
	enableURing(t)
	const depth = 2
	last := (uringQueues() - 1) * depth // the last queue's first entry
	for _, tc := range []struct {
		fail  int
		uring bool
	}{{last, false}, {last + 1, true}} {
		uringFailEntry = tc.fail
		fs := &uringFS{}
		mnt := t.TempDir()
		ms, err := NewServer(fs, mnt, &MountOptions{DirectMount: true, IOUring: true, IOUringDepth: depth})
		uringFailEntry = -1
		if err != nil {
			t.Fatal(err)
		}
		go ms.Serve()
		if err := ms.WaitMount(); err != nil {
			ms.Unmount()
			t.Fatal(err)
		}
		if ms.IOUring() != tc.uring {
			t.Errorf("entry %d failing: IOUring() %v, want %v", tc.fail, ms.IOUring(), tc.uring)
		}
		done := make(chan error, 1)
		go func() {
			small := make([]byte, 4096)
			f, err := os.Open(filepath.Join(mnt, "file"))
			if err == nil {
				_, err = f.ReadAt(small, 0)
				f.Close()
			}
			done <- err
		}()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("entry %d failing: read: %v", tc.fail, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("entry %d failing: a read hung 10 s", tc.fail)
			syscall.Unmount(mnt, syscall.MNT_DETACH)
		}
		if err := ms.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
		}
	}
}

// TestIOUringGrows: requests held in the file system take entries of
// their own, the queues growing past the depth they started with, so
// that the requests behind them are not kept waiting in the kernel.
func TestIOUringGrows(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: mounting with mount(2) needs root")
	}
	enableURing(t)
	const readers = 12
	fs := &uringFS{held: make(chan struct{}, readers), release: make(chan struct{})}
	mnt := t.TempDir()
	ms, err := NewServer(fs, mnt, &MountOptions{DirectMount: true, IOUring: true, IOUringDepth: 1})
	if err != nil {
		t.Fatal(err)
	}
	go ms.Serve()
	defer ms.Unmount()
	if err := ms.WaitMount(); err != nil {
		t.Fatal(err)
	}
	if !ms.IOUring() {
		t.Fatal("the server does not use io_uring, though the kernel offers it")
	}
	var dds []*exec.Cmd
	defer func() {
		for _, dd := range dds {
			dd.Wait()
		}
	}()
	released := false
	defer func() {
		if !released {
			close(fs.release)
		}
	}()
	for i := 0; i < readers; i++ {
		dd := exec.Command("dd", fmt.Sprintf("if=%s/hold%d", mnt, i), "of=/dev/null", "bs=4096", "count=1", "iflag=direct")
		if err := dd.Start(); err != nil {
			t.Fatal(err)
		}
		dds = append(dds, dd)
	}
	// More reads held at once than the queues' entries to start with.
	want := len(ms.uring.queues) + 1
	for i := 0; i < want; i++ {
		select {
		case <-fs.held:
		case <-time.After(10 * time.Second):
			for _, q := range ms.uring.queues {
				t.Logf("queue %d: %d entries, %d idle", q.qid, q.n.Load(), q.idle.Load())
			}
			t.Fatalf("%d of %d reads reached the file system within 10 s, the others held back by the %d queues' 1 entry each", i, readers, len(ms.uring.queues))
		}
	}
	close(fs.release)
	released = true
}
