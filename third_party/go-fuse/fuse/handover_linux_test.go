// Copyright 2026 the Go-FUSE Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package fuse

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// handoverFS serves "file" (handoverSize bytes, byte i is byte(i*7+i>>12),
// read with direct I/O so that every read reaches it) and "hold", whose
// reads wait until release is closed or they are interrupted. It counts
// the requests that reach it, so that a test can tell which of several
// servers served them.
type handoverFS struct {
	defaultRawFileSystem

	calls     atomic.Int64
	unmounted atomic.Bool

	held        chan struct{} // a read of "hold" started (buffered)
	release     chan struct{} // closed: reads of "hold" return their data
	interrupted chan struct{} // a read of "hold" was interrupted (buffered)
}

const handoverSize = 1 << 16

func newHandoverFS() *handoverFS {
	return &handoverFS{
		held:        make(chan struct{}, 16),
		release:     make(chan struct{}),
		interrupted: make(chan struct{}, 16),
	}
}

func handoverByte(i int64) byte { return byte(i*7 + i>>12) }

func (f *handoverFS) attr(id uint64, a *Attr) Status {
	switch id {
	case FUSE_ROOT_ID:
		*a = Attr{Ino: id, Mode: S_IFDIR | 0o755, Nlink: 2}
	case 2:
		*a = Attr{Ino: id, Mode: S_IFREG | 0o644, Nlink: 1, Size: handoverSize}
	case 3:
		*a = Attr{Ino: id, Mode: S_IFREG | 0o644, Nlink: 1, Size: 4096}
	default:
		return ENOENT
	}
	return OK
}

func (f *handoverFS) Lookup(cancel <-chan struct{}, h *InHeader, name string, out *EntryOut) Status {
	f.calls.Add(1)
	var id uint64
	switch name {
	case "file":
		id = 2
	case "hold":
		id = 3
	default:
		return ENOENT
	}
	out.NodeId = id
	return f.attr(id, &out.Attr)
}

func (f *handoverFS) GetAttr(cancel <-chan struct{}, in *GetAttrIn, out *AttrOut) Status {
	f.calls.Add(1)
	return f.attr(in.NodeId, &out.Attr)
}

func (f *handoverFS) Open(cancel <-chan struct{}, in *OpenIn, out *OpenOut) Status {
	f.calls.Add(1)
	out.Fh = in.NodeId
	out.OpenFlags = FOPEN_DIRECT_IO
	return OK
}

func (f *handoverFS) Read(cancel <-chan struct{}, in *ReadIn, buf []byte) (ReadResult, Status) {
	f.calls.Add(1)
	if in.NodeId == 3 {
		f.held <- struct{}{}
		select {
		case <-f.release:
		case <-cancel:
			f.interrupted <- struct{}{}
			return nil, EINTR
		}
	}
	size := int64(handoverSize)
	if in.NodeId == 3 {
		size = 4096
	}
	b := buf[:0]
	for i := int64(in.Offset); i < size && len(b) < int(in.Size); i++ {
		b = append(b, handoverByte(i))
	}
	return ReadResultData(b), OK
}

func (f *handoverFS) OnUnmount() { f.unmounted.Store(true) }

// handoverLog collects a server's log, for lines that should not be
// there.
type handoverLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *handoverLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *handoverLog) check(t *testing.T) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() > 0 {
		t.Logf("server log:\n%s", l.buf.String())
	}
	if strings.Contains(l.buf.String(), "notify reply") {
		t.Error("a wake-up's reply was not dropped silently")
	}
}

func handoverOptions(l *handoverLog) *MountOptions {
	return &MountOptions{DirectMount: true, Logger: log.New(l, "", log.Lmicroseconds)}
}

// handoverMount mounts fs and serves it; served is closed when Serve
// returns.
func handoverMount(t *testing.T, fs RawFileSystem, opts *MountOptions) (srv *Server, mnt string, served chan struct{}) {
	t.Helper()
	mnt = t.TempDir()
	srv, err := NewServer(fs, mnt, opts)
	if err != nil {
		t.Fatal(err)
	}
	served = make(chan struct{})
	go func() { srv.Serve(); close(served) }()
	if err := srv.WaitMount(); err != nil {
		t.Fatal(err)
	}
	return srv, mnt, served
}

// handoverWaitFor waits until cond holds, failing after 10 s.
func handoverWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10 s", what)
		}
	}
}

func handoverWaitClosed(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
	}
}

func handoverMounted(t *testing.T, mnt string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for s := bufio.NewScanner(bytes.NewReader(b)); s.Scan(); {
		if f := strings.Fields(s.Text()); len(f) > 4 && f[4] == mnt {
			return true
		}
	}
	return false
}

// handoverWaiting returns a function that returns the number of
// requests of the mount's connection the kernel waits for an answer to,
// queued or taken (/sys/fs/fuse/connections/N/waiting), or nil where
// fusectl is missing. Call it while the mount is served.
func handoverWaiting(t *testing.T, mnt string) func() int {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("/sys/fs/fuse/connections/%d/waiting", unix.Major(st.Dev)<<20|unix.Minor(st.Dev))
	if _, err := os.Stat(name); err != nil {
		return nil
	}
	return func() int {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		var n int
		fmt.Sscan(string(b), &n)
		return n
	}
}

// handoverPass passes h as another process would receive it: its Fd over
// a Unix socket (SCM_RIGHTS), closed here once sent, the rest as JSON.
func handoverPass(t *testing.T, h *Handoff) *Handoff {
	t.Helper()
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	var got Handoff
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sp[0])
	defer unix.Close(sp[1])
	if err := unix.Sendmsg(sp[0], []byte{0}, unix.UnixRights(h.Fd), nil, 0); err != nil {
		t.Fatal(err)
	}
	unix.Close(h.Fd)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sp[1], make([]byte, 1), oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages %v: %v", msgs, err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("rights %v: %v", fds, err)
	}
	got.Fd = fds[0]
	return &got
}

// handoverLoad reads "file" through fd, and stats it through fd and by
// name, over and over in several goroutines until stop is closed,
// counting what succeeds and keeping the first failure.
type handoverLoad struct {
	done atomic.Int64
	mu   sync.Mutex
	err  error
	wg   sync.WaitGroup
	stop chan struct{}
}

func startHandoverLoad(mnt string, fd int, workers int) *handoverLoad {
	l := &handoverLoad{stop: make(chan struct{})}
	fail := func(err error) {
		l.mu.Lock()
		if l.err == nil {
			l.err = err
		}
		l.mu.Unlock()
	}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func(w int) {
			defer l.wg.Done()
			buf := make([]byte, 4096)
			for i := int64(w); ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				off := (i * 4093) % (handoverSize - int64(len(buf)))
				n, err := syscall.Pread(fd, buf, off)
				if err != nil || n != len(buf) {
					fail(fmt.Errorf("pread at %d: %d, %v", off, n, err))
					return
				}
				for j := 0; j < n; j++ {
					if buf[j] != handoverByte(off+int64(j)) {
						fail(fmt.Errorf("pread at %d: byte %d is %d", off, j, buf[j]))
						return
					}
				}
				var st syscall.Stat_t
				if err := syscall.Fstat(fd, &st); err != nil || st.Size != handoverSize {
					fail(fmt.Errorf("fstat: size %d, %v", st.Size, err))
					return
				}
				if err := syscall.Stat(filepath.Join(mnt, "file"), &st); err != nil || st.Size != handoverSize {
					fail(fmt.Errorf("stat: size %d, %v", st.Size, err))
					return
				}
				l.done.Add(1)
			}
		}(w)
	}
	return l
}

func (l *handoverLoad) end(t *testing.T) {
	t.Helper()
	close(l.stop)
	ended := make(chan struct{})
	go func() { l.wg.Wait(); close(ended) }()
	handoverWaitClosed(t, "end of the operations (one hangs)", ended)
	if l.err != nil {
		t.Fatalf("an operation failed: %v", l.err)
	}
}

// TestHandover hands a mount under continuous reads and stats (through a
// file opened before the first handover, and by name) from server to
// server several times, passing the descriptor over a Unix socket and
// the rest as JSON, each server's file system its own. No operation
// fails or hangs; a server's file system gets no request once its
// Handover has returned, and each next one serves; a server released
// returns from Serve without OnUnmount and its Unmount does nothing; a
// server from NewServerFrom released before Serve just closes its
// descriptor; and the last server unmounts.
func TestHandover(t *testing.T) {
	const servers = 6
	var logs [servers]handoverLog
	var fss [servers]*handoverFS
	var srvs [servers]*Server
	var served [servers]chan struct{}
	for i := range fss {
		fss[i] = newHandoverFS()
	}
	defer func() {
		for i := range logs {
			logs[i].check(t)
		}
	}()
	var mnt string
	srvs[0], mnt, served[0] = handoverMount(t, fss[0], handoverOptions(&logs[0]))

	fd, err := syscall.Open(filepath.Join(mnt, "file"), syscall.O_RDONLY, 0)
	if err != nil {
		srvs[0].Unmount()
		t.Fatal(err)
	}
	load := startHandoverLoad(mnt, fd, 4)
	ended := false
	defer func() {
		if !ended {
			load.end(t)
			syscall.Close(fd)
			for _, s := range srvs {
				if s != nil {
					s.Unmount()
				}
			}
		}
	}()

	var after [servers]int64 // fss[i].calls when srvs[i].Handover returned
	for i := 1; i < servers; i++ {
		// Requests of the previous server first.
		base := load.done.Load()
		handoverWaitFor(t, "operations", func() bool { return load.done.Load() >= base+50 })

		h, err := srvs[i-1].Handover(10 * time.Second)
		if err != nil {
			t.Fatalf("Handover %d: %v", i, err)
		}
		after[i-1] = fss[i-1].calls.Load()
		h = handoverPass(t, h)

		if i == 1 {
			// One taken over but dropped before it serves: Release
			// closes its descriptor, Wait returns.
			d, err := unix.FcntlInt(uintptr(h.Fd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			dh := *h
			dh.Fd = d
			dropped := newHandoverFS()
			ds, err := NewServerFrom(dropped, mnt, &dh, handoverOptions(&logs[0]))
			if err != nil {
				t.Fatal(err)
			}
			ds.Release()
			waited := make(chan struct{})
			go func() { ds.Wait(); close(waited) }()
			handoverWaitClosed(t, "Wait of a server released before Serve", waited)
			ds.Serve() // returns at once
			if _, err := unix.FcntlInt(uintptr(d), unix.F_GETFD, 0); err != syscall.EBADF {
				t.Errorf("the descriptor of a server released before Serve is open (%v)", err)
			}
			if n := dropped.calls.Load(); n != 0 || dropped.unmounted.Load() {
				t.Errorf("a server released before Serve: %d calls, unmounted %v", n, dropped.unmounted.Load())
			}
		}

		srvs[i], err = NewServerFrom(fss[i], mnt, h, handoverOptions(&logs[i]))
		if err != nil {
			t.Fatalf("NewServerFrom %d: %v", i, err)
		}
		served[i] = make(chan struct{})
		go func(s *Server, c chan struct{}) { s.Serve(); close(c) }(srvs[i], served[i])
		if err := srvs[i].WaitMount(); err != nil {
			t.Fatalf("WaitMount %d: %v", i, err)
		}

		srvs[i-1].Release()
		handoverWaitClosed(t, fmt.Sprintf("return of Serve %d after Release", i-1), served[i-1])
		srvs[i-1].Wait()
		if err := srvs[i-1].Unmount(); err != nil || !handoverMounted(t, mnt) {
			t.Fatalf("Unmount of released server %d: %v, mounted %v", i-1, err, handoverMounted(t, mnt))
		}

		base = fss[i].calls.Load()
		handoverWaitFor(t, fmt.Sprintf("requests served by server %d", i), func() bool { return fss[i].calls.Load() >= base+50 })
	}
	load.end(t)
	ended = true

	for i := 0; i < servers-1; i++ {
		if n := fss[i].calls.Load(); n != after[i] {
			t.Errorf("server %d: %d requests reached its file system after Handover returned", i, n-after[i])
		}
		if fss[i].unmounted.Load() {
			t.Errorf("server %d: OnUnmount called after Release", i)
		}
		t.Logf("server %d: %d requests", i, after[i])
	}
	t.Logf("server %d: %d requests; %d operations", servers-1, fss[servers-1].calls.Load(), load.done.Load())

	syscall.Close(fd)
	last := srvs[servers-1]
	if err := last.Unmount(); err != nil {
		t.Fatalf("Unmount: %v", err)
	}
	handoverWaitClosed(t, "return of the last Serve after Unmount", served[servers-1])
	if !fss[servers-1].unmounted.Load() {
		t.Error("the last server's OnUnmount was not called")
	}
	if handoverMounted(t, mnt) {
		t.Errorf("%s still mounted", mnt)
	}
}

// TestHandoverTimeout: a Handover whose wait elapses with a read held in
// the file system fails, and the server serves on (stats made meanwhile
// and afterwards succeed; the held read completes). A second Handover
// once nothing is held succeeds, and Resume undoes it.
func TestHandoverTimeout(t *testing.T) {
	var l handoverLog
	defer l.check(t)
	fs := newHandoverFS()
	srv, mnt, served := handoverMount(t, fs, handoverOptions(&l))
	defer srv.Unmount()

	fd, err := syscall.Open(filepath.Join(mnt, "file"), syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	load := startHandoverLoad(mnt, fd, 2)

	heldDone := make(chan error, 1)
	go func() {
		b, err := os.ReadFile(filepath.Join(mnt, "hold"))
		if err == nil && (len(b) != 4096 || b[4095] != handoverByte(4095)) {
			err = fmt.Errorf("read %d bytes", len(b))
		}
		heldDone <- err
	}()
	handoverWaitClosed(t, "held read", fs.held)

	if h, err := srv.Handover(50 * time.Millisecond); err == nil {
		unix.Close(h.Fd)
		t.Fatal("Handover succeeded with a read held in the file system")
	} else {
		t.Logf("Handover: %v", err)
	}
	base := load.done.Load()
	handoverWaitFor(t, "operations after the failed Handover", func() bool { return load.done.Load() >= base+50 })
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(mnt, "file"), &st); err != nil {
		t.Fatalf("stat after the failed Handover: %v", err)
	}

	close(fs.release)
	select {
	case err := <-heldDone:
		if err != nil {
			t.Fatalf("held read: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held read did not complete")
	}
	load.end(t)

	h, err := srv.Handover(10 * time.Second)
	if err != nil {
		t.Fatalf("Handover with nothing held: %v", err)
	}
	srv.Resume()
	unix.Close(h.Fd)
	if err := syscall.Stat(filepath.Join(mnt, "file"), &st); err != nil {
		t.Fatalf("stat after Resume: %v", err)
	}
	syscall.Close(fd)
	if err := srv.Unmount(); err != nil {
		t.Fatalf("Unmount: %v", err)
	}
	handoverWaitClosed(t, "return of Serve after Unmount", served)
	if !fs.unmounted.Load() {
		t.Error("OnUnmount not called")
	}
}

// TestHandoverResume: after a successful Handover the server serves
// nothing (a stat waits in the kernel); Resume makes it serve again (the
// stat, and the load, go on), and Serve, Wait and Unmount work as
// before.
func TestHandoverResume(t *testing.T) {
	var l handoverLog
	defer l.check(t)
	fs := newHandoverFS()
	srv, mnt, served := handoverMount(t, fs, handoverOptions(&l))
	defer srv.Unmount()

	fd, err := syscall.Open(filepath.Join(mnt, "file"), syscall.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	waiting := handoverWaiting(t, mnt)
	load := startHandoverLoad(mnt, fd, 4)
	for round := 0; round < 3; round++ {
		base := load.done.Load()
		handoverWaitFor(t, "operations", func() bool { return load.done.Load() >= base+50 })
		h, err := srv.Handover(10 * time.Second)
		if err != nil {
			t.Fatalf("Handover: %v", err)
		}
		calls := fs.calls.Load()
		statted := make(chan error, 1)
		go func() {
			var st syscall.Stat_t
			statted <- syscall.Stat(filepath.Join(mnt, "file"), &st)
		}()
		// The load's requests and the stat's wait in the kernel.
		if waiting != nil {
			handoverWaitFor(t, "requests queued in the kernel", func() bool { return waiting() >= 5 })
		}
		waited := make(chan struct{})
		go func() { srv.Wait(); close(waited) }()
		select {
		case <-served:
			t.Fatal("Serve returned after Handover")
		case <-waited:
			t.Fatal("Wait returned after Handover")
		case err := <-statted:
			t.Fatalf("a stat was answered after Handover (%v)", err)
		default:
		}
		if n := fs.calls.Load(); n != calls {
			t.Fatalf("%d requests reached the file system after Handover", n-calls)
		}

		srv.Resume()
		unix.Close(h.Fd)
		select {
		case err := <-statted:
			if err != nil {
				t.Fatalf("stat: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the stat made after Handover was not answered after Resume")
		}
		base = fs.calls.Load()
		handoverWaitFor(t, "requests served after Resume", func() bool { return fs.calls.Load() >= base+50 })
		select {
		case <-waited:
			t.Fatal("Wait returned after Resume")
		default:
		}
	}
	load.end(t)
	syscall.Close(fd)
	if err := srv.Unmount(); err != nil {
		t.Fatalf("Unmount: %v", err)
	}
	handoverWaitClosed(t, "return of Serve after Unmount", served)
	srv.Wait()
	if !fs.unmounted.Load() {
		t.Error("OnUnmount not called")
	}
}

// TestHandoverInterrupt: a read held in the file system until its caller
// gives up keeps a reader reading during the handover, so that its
// INTERRUPT (the caller killed) is served and the handover completes;
// the next server then serves and unmounts.
func TestHandoverInterrupt(t *testing.T) {
	var l [2]handoverLog
	defer l[0].check(t)
	defer l[1].check(t)
	fs := newHandoverFS()
	srv, mnt, served := handoverMount(t, fs, handoverOptions(&l[0]))
	var next *Server
	defer func() {
		if next != nil {
			next.Unmount()
		} else {
			srv.Unmount()
		}
	}()

	dd := exec.Command("dd", "if="+filepath.Join(mnt, "hold"), "of=/dev/null", "bs=4096", "count=1", "iflag=direct")
	if err := dd.Start(); err != nil {
		t.Fatal(err)
	}
	defer dd.Wait()
	handoverWaitClosed(t, "held read", fs.held)

	type result struct {
		h   *Handoff
		err error
	}
	handed := make(chan result, 1)
	go func() {
		h, err := srv.Handover(30 * time.Second)
		handed <- result{h, err}
	}()
	handoverWaitFor(t, "Handover to stop the readers", func() bool {
		srv.fuseFD.reqMu.Lock()
		defer srv.fuseFD.reqMu.Unlock()
		return srv.fuseFD.ho.stopping
	})
	dd.Process.Signal(syscall.SIGKILL)
	handoverWaitClosed(t, "interrupt of the held read", fs.interrupted)
	var res result
	select {
	case res = <-handed:
	case <-time.After(20 * time.Second):
		t.Fatal("Handover did not return within 20 s of the held read's end")
	}
	if res.err != nil {
		t.Fatalf("Handover: %v", res.err)
	}

	fs2 := newHandoverFS()
	next, err := NewServerFrom(fs2, mnt, handoverPass(t, res.h), handoverOptions(&l[1]))
	if err != nil {
		t.Fatal(err)
	}
	served2 := make(chan struct{})
	go func() { next.Serve(); close(served2) }()
	srv.Release()
	handoverWaitClosed(t, "return of Serve after Release", served)

	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(mnt, "file"), &st); err != nil {
		t.Fatalf("stat through the next server: %v", err)
	}
	if fs2.calls.Load() == 0 {
		t.Error("the next server's file system got no request")
	}
	if err := next.Unmount(); err != nil {
		t.Fatalf("Unmount: %v", err)
	}
	handoverWaitClosed(t, "return of the next Serve after Unmount", served2)
	if fs.unmounted.Load() || !fs2.unmounted.Load() {
		t.Errorf("OnUnmount: released server %v, next %v", fs.unmounted.Load(), fs2.unmounted.Load())
	}
}

// TestHandoverRefused: a server not serving (before Serve, after
// unmount) or already handing over refuses to hand over; Release of a
// server serving, not handed over, is ignored; and NewServerFrom refuses
// a Handoff it cannot serve, leaving the descriptor to the caller.
func TestHandoverRefused(t *testing.T) {
	var l handoverLog
	defer l.check(t)
	fs := newHandoverFS()
	mnt := t.TempDir()
	srv, err := NewServer(fs, mnt, handoverOptions(&l))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Handover(time.Second); err == nil {
		t.Error("Handover before Serve succeeded")
	}
	served := make(chan struct{})
	go func() { srv.Serve(); close(served) }()
	if err := srv.WaitMount(); err != nil {
		t.Fatal(err)
	}
	srv.Release() // serving, not handed over: ignored
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(mnt, "file"), &st); err != nil {
		t.Fatalf("stat after a Release without Handover: %v", err)
	}

	h, err := srv.Handover(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Handover(time.Second); err == nil {
		t.Error("a second Handover succeeded")
	}
	devNull, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	for name, bad := range map[string]func(*Handoff){
		"minor":    func(h *Handoff) { h.Minor++ },
		"major":    func(h *Handoff) { h.Init.Major++ },
		"maxwrite": func(h *Handoff) { h.MaxWrite = 0 },
		"fd":       func(h *Handoff) { h.Fd = int(devNull.Fd()) },
	} {
		b := *h
		bad(&b)
		if _, err := NewServerFrom(newHandoverFS(), mnt, &b, nil); err == nil {
			t.Errorf("NewServerFrom with a bad %s succeeded", name)
		}
	}
	if _, err := unix.FcntlInt(uintptr(h.Fd), unix.F_GETFD, 0); err != nil {
		t.Errorf("the Handoff's descriptor after refusals: %v", err)
	}
	srv.Resume()
	unix.Close(h.Fd)
	if err := syscall.Stat(filepath.Join(mnt, "file"), &st); err != nil {
		t.Fatalf("stat after Resume: %v", err)
	}
	if err := srv.Unmount(); err != nil {
		t.Fatal(err)
	}
	handoverWaitClosed(t, "return of Serve after Unmount", served)
	if _, err := srv.Handover(time.Second); err == nil {
		t.Error("Handover after unmount succeeded")
	}
}
