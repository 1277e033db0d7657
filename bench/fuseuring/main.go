// Command fuseuring is a minimal read-only FUSE file system that serves one
// regular file, "f", whose contents are read with pread(2) from a backing
// file. It answers the kernel either over the classic /dev/fuse read(2)/
// writev(2) protocol or over FUSE-over-io_uring (Linux 6.14+), so the two
// transports can be compared with the same request handling.
//
//	fuseuring -transport dev|uring -backing PATH [-entries N] [-defer-taskrun=false] MOUNTPOINT
//
// It mounts with mount(2) itself (it must run as root), prints a line
// starting with "ready" once a stat of MOUNTPOINT/f has been answered over
// the chosen transport, serves until SIGINT or SIGTERM, then detaches the
// mount and exits.
//
// With -transport uring, INIT and the requests the kernel never routes to
// the ring (FORGET, INTERRUPT) are read from /dev/fuse; all others are
// served by one io_uring per possible CPU (queue id = CPU index), each owned
// by an OS thread pinned to that CPU (the kernel queues a request on the
// queue of the CPU its caller runs on). Every ring entry has a 288-byte
// header buffer (struct fuse_uring_req_header) and a 1 MiB payload buffer.
// Without -transport uring, one goroutine per CPU reads /dev/fuse.
package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FUSE opcodes (include/uapi/linux/fuse.h).
const (
	opLookup      = 1
	opForget      = 2
	opGetattr     = 3
	opOpen        = 14
	opRead        = 15
	opStatfs      = 17
	opRelease     = 18
	opFlush       = 25
	opInit        = 26
	opOpendir     = 27
	opReaddir     = 28
	opReleasedir  = 29
	opAccess      = 34
	opInterrupt   = 36
	opDestroy     = 38
	opBatchForget = 42
)

// INIT flags, FOPEN flags and sizes (include/uapi/linux/fuse.h).
const (
	fuseAsyncRead    = 1 << 0
	fuseBigWrites    = 1 << 5
	fuseMaxPages     = 1 << 22
	fuseInitExt      = 1 << 30
	fuseOverIOURing2 = 1 << 9 // FUSE_OVER_IO_URING (1ULL << 41) as a flags2 bit

	fopenDirectIO = 1 << 0

	inHeaderSize  = 40 // struct fuse_in_header
	outHeaderSize = 16 // struct fuse_out_header
	attrSize      = 88 // struct fuse_attr
	entryOutSize  = 40 + attrSize
	attrOutSize   = 16 + attrSize
	openOutSize   = 16
	initOutSize   = 64
	statfsOutSize = 80

	maxWrite = 1 << 20
	maxPages = 256

	rootID = 1
	fileID = 2

	// Cache timeouts for entries and attributes: the file never changes,
	// so LOOKUP and GETATTR are not repeated during a measurement.
	cacheSeconds = 3600
)

// io_uring constants (include/uapi/linux/io_uring.h) and the FUSE ring
// protocol (struct fuse_uring_req_header, struct fuse_uring_cmd_req).
const (
	ioringSetupSQE128       = 1 << 10
	ioringSetupSingleIssuer = 1 << 12
	ioringSetupDeferTaskrun = 1 << 13
	ioringFeatSingleMmap    = 1 << 0
	ioringEnterGetevents    = 1 << 0
	ioringOpURingCmd        = 46
	ioringOffSQRing         = 0
	ioringOffCQRing         = 0x8000000
	ioringOffSQEs           = 0x10000000

	sqeSize = 128 // SQE128
	cqeSize = 16

	fuseIOURingCmdRegister       = 1
	fuseIOURingCmdCommitAndFetch = 2

	ringInOut     = 0   // fuse_in_header on fetch, fuse_out_header on commit
	ringOpIn      = 128 // the op's first input argument
	ringEntInOut  = 256 // struct fuse_uring_ent_in_out
	ringHeaderLen = 288
	ringHdrStride = 512
)

var le = binary.LittleEndian

// server holds the file system state shared by all transports. Everything
// it does per request works on caller-owned buffers: the hot path does not
// allocate.
type server struct {
	transport string
	file      *os.File // the backing file; kept referenced so it stays open
	backing   int      // its fd
	size      int64
	mnt       string
	devFd     int

	rootAttr [attrSize]byte
	fileAttr [attrSize]byte

	initOnce    sync.Once
	initDone    chan struct{}
	initFlags2  uint32 // kernel's fuse_init_in.flags2
	initMinor   uint32
	devServed   []paddedCounter // per /dev/fuse reader: requests other than INIT, FORGET, INTERRUPT
	uringServed []paddedCounter // per io_uring queue: requests served
	connEnded   chan struct{}   // closed when a /dev/fuse reader sees the connection end
	endOnce     sync.Once
	exitMu      sync.Mutex
	ringFlags   atomic.Uint32 // io_uring_setup flags the queues got
}

// paddedCounter keeps each queue's counter on its own cache line.
type paddedCounter struct {
	n atomic.Uint64
	_ [56]byte
}

func main() {
	transport := flag.String("transport", "dev", "dev (read/writev on /dev/fuse) or uring (FUSE-over-io_uring)")
	backingPath := flag.String("backing", "", "file whose contents f serves (required)")
	entries := flag.Int("entries", 16, "io_uring entries per queue (-transport uring)")
	deferTaskrun := flag.Bool("defer-taskrun", true, "set up the rings with IORING_SETUP_SINGLE_ISSUER|IORING_SETUP_DEFER_TASKRUN (falling back to plain rings if the kernel refuses)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: %s -transport dev|uring -backing PATH [-entries N] [-defer-taskrun=false] MOUNTPOINT\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || *backingPath == "" || (*transport != "dev" && *transport != "uring") || *entries < 1 || *entries > 4096 {
		flag.Usage()
		os.Exit(2)
	}
	mnt := flag.Arg(0)

	bf, err := os.Open(*backingPath)
	if err != nil {
		fatalf("%v", err)
	}
	st, err := bf.Stat()
	if err != nil {
		fatalf("%v", err)
	}
	s := &server{
		transport: *transport,
		file:      bf,
		backing:   int(bf.Fd()),
		size:      st.Size(),
		mnt:       mnt,
		initDone:  make(chan struct{}),
		connEnded: make(chan struct{}),
	}
	s.fillAttrs()

	if s.transport == "uring" {
		if err := enableURing(); err != nil {
			fatalf("cannot enable FUSE-over-io_uring: %v", err)
		}
	}

	fd, err := unix.Open("/dev/fuse", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		fatalf("open /dev/fuse: %v", err)
	}
	s.devFd = fd
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other,max_read=%d", fd, maxWrite)
	if err := unix.Mount("sluice-uringbench", mnt, "fuse.uringbench", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		fatalf("mount %s: %v", mnt, err)
	}

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM)
	go func() {
		sig := <-sigs
		s.exit(0, "%v: unmounting %s; %s", sig, mnt, s.counts())
	}()

	readers := 1
	if s.transport == "dev" {
		readers = runtime.NumCPU()
	}
	s.devServed = make([]paddedCounter, readers)
	for i := 0; i < readers; i++ {
		go s.devLoop(&s.devServed[i].n)
	}

	select {
	case <-s.initDone:
	case <-time.After(10 * time.Second):
		s.failf("no FUSE_INIT from the kernel within 10s")
	}

	queues := 0
	if s.transport == "uring" {
		if s.initFlags2&fuseOverIOURing2 == 0 {
			s.failf("the kernel did not offer FUSE_OVER_IO_URING in FUSE_INIT (flags2=%#x, protocol 7.%d); is /sys/module/fuse/parameters/enable_uring Y?", s.initFlags2, s.initMinor)
		}
		queues = possibleCPUs()
		s.uringServed = make([]paddedCounter, queues)
		results := make(chan error, queues)
		for q := 0; q < queues; q++ {
			go s.queueLoop(q, *entries, *deferTaskrun, results)
		}
		for q := 0; q < queues; q++ {
			select {
			case err := <-results:
				if err != nil {
					s.failf("io_uring: %v (see dmesg for FUSE_IO_URING_CMD_REGISTER messages)", err)
				}
			case <-time.After(10 * time.Second):
				s.failf("io_uring queues not registered within 10s")
			}
		}
	}

	// Self-check: one LOOKUP and GETATTR of f must be answered over the
	// chosen transport.
	done := make(chan error, 1)
	go func() {
		_, err := os.Stat(mnt + "/f")
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			s.failf("self-check stat %s/f: %v", mnt, err)
		}
	case <-time.After(10 * time.Second):
		s.failf("self-check stat %s/f did not return within 10s", mnt)
	}
	if s.transport == "uring" {
		if n := total(s.devServed); n != 0 {
			s.failf("%d requests arrived over /dev/fuse instead of io_uring: the kernel did not switch the connection to io_uring (dmesg may say why)", n)
		}
		if total(s.uringServed) == 0 {
			s.failf("the self-check stat was not answered over io_uring")
		}
	}
	setup := ""
	if s.transport == "uring" {
		setup = " setup=SQE128"
		if s.ringFlags.Load()&ioringSetupDeferTaskrun != 0 {
			setup += "|SINGLE_ISSUER|DEFER_TASKRUN"
		}
	}
	fmt.Printf("ready transport=%s queues=%d entries=%d%s pid=%d size=%d\n", s.transport, queues, *entries, setup, os.Getpid(), s.size)
	<-s.connEnded
	s.exit(0, "the FUSE connection ended; %s", s.counts())
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "fuseuring: "+format+"\n", args...)
	os.Exit(1)
}

// failf reports an error after mounting: it detaches the mount and exits.
func (s *server) failf(format string, args ...any) {
	s.exit(1, format, args...)
}

// exit prints a message, detaches the mount and ends the process; closing
// /dev/fuse and the rings at exit ends the FUSE connection. Only the first
// caller gets through; later ones wait for the process to end.
func (s *server) exit(code int, format string, args ...any) {
	s.exitMu.Lock()
	fmt.Fprintf(os.Stderr, "fuseuring: "+format+"\n", args...)
	// EINVAL: no longer mounted there (unmounted from outside).
	if err := unix.Unmount(s.mnt, unix.MNT_DETACH); err != nil && err != unix.EINVAL {
		fmt.Fprintf(os.Stderr, "fuseuring: umount2 %s: %v\n", s.mnt, err)
	}
	os.Exit(code)
}

func total(c []paddedCounter) uint64 {
	var t uint64
	for i := range c {
		t += c[i].n.Load()
	}
	return t
}

// counts reports the requests served per transport, INIT, FORGET and
// INTERRUPT not included.
func (s *server) counts() string {
	var b strings.Builder
	fmt.Fprintf(&b, "requests over /dev/fuse: %d", total(s.devServed))
	if s.transport == "uring" {
		b.WriteString(", over io_uring per queue:")
		for i := range s.uringServed {
			fmt.Fprintf(&b, " %d", s.uringServed[i].n.Load())
		}
	}
	return b.String()
}

// enableURing sets the fuse module parameter that lets connections use
// io_uring; it must be Y before the kernel sends FUSE_INIT.
func enableURing() error {
	const p = "/sys/module/fuse/parameters/enable_uring"
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("%v (kernel without CONFIG_FUSE_IO_URING?)", err)
	}
	if strings.TrimSpace(string(b)) == "Y" {
		return nil
	}
	if err := os.WriteFile(p, []byte("Y\n"), 0o644); err != nil {
		return fmt.Errorf("echo Y > %s: %v", p, err)
	}
	fmt.Fprintf(os.Stderr, "fuseuring: set %s to Y\n", p)
	return nil
}

// possibleCPUs is the kernel's num_possible_cpus(): the number of queues a
// FUSE ring has, all of which need entries before the ring is used.
func possibleCPUs() int {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return runtime.NumCPU()
	}
	n := 0
	for _, r := range strings.Split(strings.TrimSpace(string(b)), ",") {
		lo, hi, found := strings.Cut(r, "-")
		a, err1 := strconv.Atoi(lo)
		c := a
		var err2 error
		if found {
			c, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil {
			return runtime.NumCPU()
		}
		if c+1 > n {
			n = c + 1
		}
	}
	return n
}

// ---------------------------------------------------------------- requests

func (s *server) fillAttrs() {
	now := uint64(time.Now().Unix())
	put := func(a []byte, ino uint64, size uint64, mode, nlink uint32) {
		le.PutUint64(a[0:], ino)
		le.PutUint64(a[8:], size)
		le.PutUint64(a[16:], (size+511)/512)
		le.PutUint64(a[24:], now) // atime
		le.PutUint64(a[32:], now) // mtime
		le.PutUint64(a[40:], now) // ctime
		le.PutUint32(a[60:], mode)
		le.PutUint32(a[64:], nlink)
		le.PutUint32(a[80:], 4096) // blksize
	}
	put(s.rootAttr[:], rootID, 4096, unix.S_IFDIR|0o755, 2)
	put(s.fileAttr[:], fileID, uint64(s.size), unix.S_IFREG|0o444, 1)
}

func (s *server) attr(node uint64) []byte {
	switch node {
	case rootID:
		return s.rootAttr[:]
	case fileID:
		return s.fileAttr[:]
	}
	return nil
}

// serve answers one request other than INIT. arg0 holds the op's first
// input argument (its fixed-size struct), rest the input that follows it
// (the name of a LOOKUP). The reply argument is written to out, which may
// overlap rest. It returns the errno (0 for success), the length of the
// reply argument, and whether the op expects a reply at all.
func (s *server) serve(op uint32, node uint64, arg0, rest, out []byte) (syscall.Errno, int, bool) {
	switch op {
	case opRead:
		if node != fileID || len(arg0) < 40 {
			return unix.EBADF, 0, true
		}
		off := int64(le.Uint64(arg0[8:]))
		size := int(le.Uint32(arg0[16:]))
		if size > len(out) {
			size = len(out)
		}
		if off >= s.size {
			return 0, 0, true
		}
		n, err := unix.Pread(s.backing, out[:size], off)
		if err != nil {
			return errnoOf(err), 0, true
		}
		return 0, n, true

	case opLookup:
		name := rest
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		if node != rootID || len(name) != 1 || name[0] != 'f' {
			return unix.ENOENT, 0, true
		}
		clear(out[:entryOutSize])
		le.PutUint64(out[0:], fileID)
		le.PutUint64(out[16:], cacheSeconds) // entry_valid
		le.PutUint64(out[24:], cacheSeconds) // attr_valid
		copy(out[40:], s.fileAttr[:])
		return 0, entryOutSize, true

	case opGetattr:
		a := s.attr(node)
		if a == nil {
			return unix.ENOENT, 0, true
		}
		clear(out[:attrOutSize])
		le.PutUint64(out[0:], cacheSeconds)
		copy(out[16:], a)
		return 0, attrOutSize, true

	case opOpen:
		if node != fileID {
			return unix.EISDIR, 0, true
		}
		if len(arg0) >= 4 && le.Uint32(arg0)&unix.O_ACCMODE != unix.O_RDONLY {
			return unix.EROFS, 0, true
		}
		clear(out[:openOutSize])
		le.PutUint64(out[0:], 1)             // fh
		le.PutUint32(out[8:], fopenDirectIO) // open_flags
		return 0, openOutSize, true

	case opOpendir:
		if node != rootID {
			return unix.ENOTDIR, 0, true
		}
		clear(out[:openOutSize])
		return 0, openOutSize, true

	case opReaddir:
		if node != rootID || len(arg0) < 40 {
			return unix.ENOTDIR, 0, true
		}
		off := le.Uint64(arg0[8:])
		size := int(le.Uint32(arg0[16:]))
		if size > len(out) {
			size = len(out)
		}
		n := 0
		for i := off; i < 3; i++ {
			var ino uint64 = rootID
			name, typ := "..", uint32(unix.DT_DIR)
			switch i {
			case 0:
				name = "."
			case 2:
				name, typ, ino = "f", unix.DT_REG, fileID
			}
			reclen := (24 + len(name) + 7) &^ 7
			if n+reclen > size {
				break
			}
			clear(out[n : n+reclen])
			le.PutUint64(out[n:], ino)
			le.PutUint64(out[n+8:], i+1) // offset of the next entry
			le.PutUint32(out[n+16:], uint32(len(name)))
			le.PutUint32(out[n+20:], typ)
			copy(out[n+24:], name)
			n += reclen
		}
		return 0, n, true

	case opRelease, opReleasedir, opFlush:
		return 0, 0, true

	case opStatfs:
		clear(out[:statfsOutSize])
		blocks := uint64(s.size+4095) / 4096
		le.PutUint64(out[0:], blocks) // blocks; bfree and bavail stay 0
		le.PutUint64(out[24:], 2)     // files
		le.PutUint32(out[40:], 4096)  // bsize
		le.PutUint32(out[44:], 255)   // namelen
		le.PutUint32(out[48:], 4096)  // frsize
		return 0, statfsOutSize, true

	case opForget, opBatchForget, opInterrupt:
		return 0, 0, false

	case opDestroy:
		return 0, 0, true
	}
	return unix.ENOSYS, 0, true
}

// initReply answers FUSE_INIT into out and returns the reply length.
func (s *server) initReply(arg []byte, out []byte) int {
	var major, minor, readahead, flags2 uint32
	if len(arg) >= 16 {
		major = le.Uint32(arg[0:])
		minor = le.Uint32(arg[4:])
		readahead = le.Uint32(arg[8:])
	}
	if len(arg) >= 20 && le.Uint32(arg[12:])&fuseInitExt != 0 {
		flags2 = le.Uint32(arg[16:])
	}
	s.initFlags2 = flags2
	s.initMinor = minor
	if major != 7 {
		fmt.Fprintf(os.Stderr, "fuseuring: kernel speaks FUSE %d.%d, want 7.x\n", major, minor)
	}
	clear(out[:initOutSize])
	le.PutUint32(out[0:], 7)
	le.PutUint32(out[4:], min(minor, 42))
	le.PutUint32(out[8:], readahead)
	le.PutUint32(out[12:], fuseAsyncRead|fuseBigWrites|fuseMaxPages|fuseInitExt)
	le.PutUint16(out[16:], 12) // max_background
	le.PutUint16(out[18:], 9)  // congestion_threshold
	le.PutUint32(out[20:], maxWrite)
	le.PutUint32(out[24:], 1) // time_gran
	le.PutUint16(out[28:], maxPages)
	if s.transport == "uring" {
		le.PutUint32(out[32:], fuseOverIOURing2)
	}
	return initOutSize
}

func errnoOf(err error) syscall.Errno {
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return unix.EIO
}

// ---------------------------------------------------------------- /dev/fuse

// devLoop reads requests from /dev/fuse with read(2) and answers them with
// writev(2) (header and reply argument as two iovecs), counting the
// requests it serves in served. It returns when the connection ends.
func (s *server) devLoop(served *atomic.Uint64) {
	buf := make([]byte, maxWrite+64*1024)
	out := make([]byte, maxWrite)
	var hdr [outHeaderSize]byte
	var iov [2]unix.Iovec
	iov[0].Base = &hdr[0]
	iov[0].SetLen(outHeaderSize)
	iov[1].Base = &out[0]
	for {
		n, err := unix.Read(s.devFd, buf)
		if err != nil {
			switch err {
			case unix.EINTR, unix.EAGAIN, unix.ENOENT:
				continue
			case unix.ENODEV: // unmounted or aborted
				s.endOnce.Do(func() { close(s.connEnded) })
				return
			}
			fmt.Fprintf(os.Stderr, "fuseuring: read /dev/fuse: %v\n", err)
			s.endOnce.Do(func() { close(s.connEnded) })
			return
		}
		if n < inHeaderSize {
			continue
		}
		op := le.Uint32(buf[4:])
		unique := le.Uint64(buf[8:])
		node := le.Uint64(buf[16:])
		body := buf[inHeaderSize:n]

		var errno syscall.Errno
		var m int
		reply := true
		if op == opInit {
			m = s.initReply(body, out)
		} else {
			if op != opForget && op != opBatchForget && op != opInterrupt {
				served.Add(1)
			}
			errno, m, reply = s.serve(op, node, body, body, out)
		}
		if !reply {
			continue
		}
		le.PutUint32(hdr[0:], uint32(outHeaderSize+m))
		le.PutUint32(hdr[4:], uint32(-int32(errno)))
		le.PutUint64(hdr[8:], unique)
		cnt := 1
		if m > 0 {
			iov[1].SetLen(m)
			cnt = 2
		}
		_, _, e := unix.Syscall(unix.SYS_WRITEV, uintptr(s.devFd), uintptr(unsafe.Pointer(&iov[0])), uintptr(cnt))
		if e != 0 && e != unix.ENOENT { // ENOENT: the request was interrupted
			fmt.Fprintf(os.Stderr, "fuseuring: writev /dev/fuse (op %d): %v\n", op, e)
		}
		if op == opInit {
			s.initOnce.Do(func() { close(s.initDone) })
		}
	}
}

// ---------------------------------------------------------------- io_uring

// ioURingParams is struct io_uring_params.
type ioURingParams struct {
	sqEntries    uint32
	cqEntries    uint32
	flags        uint32
	sqThreadCPU  uint32
	sqThreadIdle uint32
	features     uint32
	wqFd         uint32
	resv         [3]uint32
	sqOff        [10]uint32 // head tail ring_mask ring_entries flags dropped array resv1 user_addr(u64)
	cqOff        [10]uint32 // head tail ring_mask ring_entries overflow cqes flags resv1 user_addr(u64)
}

// uring is one io_uring instance with its mapped rings.
type uring struct {
	fd        int
	sqHead    *uint32
	sqTail    *uint32
	sqMask    uint32
	sqArray   []uint32
	sqes      []byte
	cqHead    *uint32
	cqTail    *uint32
	cqMask    uint32
	cqes      []byte
	localTail uint32
}

func u32At(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }

func newURing(entries int, flags uint32) (*uring, error) {
	var p ioURingParams
	p.flags = flags
	fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if e != 0 {
		return nil, fmt.Errorf("io_uring_setup(flags=%#x): %w", flags, e)
	}
	r := &uring{fd: int(fd)}
	sqLen := int(p.sqOff[6] + p.sqEntries*4)
	cqLen := int(p.cqOff[5] + p.cqEntries*cqeSize)
	prot, mflags := unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE
	var sqRing, cqRing []byte
	var err error
	if p.features&ioringFeatSingleMmap != 0 {
		sqRing, err = unix.Mmap(r.fd, ioringOffSQRing, max(sqLen, cqLen), prot, mflags)
		cqRing = sqRing
	} else {
		sqRing, err = unix.Mmap(r.fd, ioringOffSQRing, sqLen, prot, mflags)
		if err == nil {
			cqRing, err = unix.Mmap(r.fd, ioringOffCQRing, cqLen, prot, mflags)
		}
	}
	if err != nil {
		unix.Close(r.fd)
		return nil, fmt.Errorf("mmap io_uring rings: %w", err)
	}
	r.sqes, err = unix.Mmap(r.fd, ioringOffSQEs, int(p.sqEntries)*sqeSize, prot, mflags)
	if err != nil {
		unix.Close(r.fd)
		return nil, fmt.Errorf("mmap io_uring SQEs: %w", err)
	}
	r.sqHead = u32At(sqRing, p.sqOff[0])
	r.sqTail = u32At(sqRing, p.sqOff[1])
	r.sqMask = *u32At(sqRing, p.sqOff[2])
	r.sqArray = unsafe.Slice(u32At(sqRing, p.sqOff[6]), p.sqEntries)
	r.cqHead = u32At(cqRing, p.cqOff[0])
	r.cqTail = u32At(cqRing, p.cqOff[1])
	r.cqMask = *u32At(cqRing, p.cqOff[2])
	r.cqes = cqRing[p.cqOff[5] : p.cqOff[5]+p.cqEntries*cqeSize]
	r.localTail = atomic.LoadUint32(r.sqTail)
	return r, nil
}

// getSQE returns the next free 128-byte SQE, zeroed.
func (r *uring) getSQE() []byte {
	idx := r.localTail & r.sqMask
	r.sqArray[idx] = idx
	r.localTail++
	sqe := r.sqes[idx*sqeSize : (idx+1)*sqeSize]
	clear(sqe)
	return sqe
}

// enter publishes the queued SQEs and calls io_uring_enter, waiting for at
// least minComplete completions.
func (r *uring) enter(minComplete uint32) error {
	atomic.StoreUint32(r.sqTail, r.localTail)
	for {
		toSubmit := r.localTail - atomic.LoadUint32(r.sqHead)
		var flags uintptr
		if minComplete > 0 {
			flags = ioringEnterGetevents
		}
		_, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(toSubmit), uintptr(minComplete), flags, 0, 0)
		if e == 0 {
			if minComplete == 0 && r.localTail != atomic.LoadUint32(r.sqHead) {
				continue
			}
			return nil
		}
		if e == unix.EINTR || e == unix.EAGAIN || e == unix.EBUSY {
			continue
		}
		return e
	}
}

// queueEntry is one registered ring entry: its header and payload buffers
// and the 2-element iovec array that describes them.
type queueEntry struct {
	hdr     []byte
	payload []byte
	iovAddr uintptr
}

// queueLoop owns queue qid: it pins its OS thread to CPU qid, sets up an
// io_uring, registers `entries` ring entries with the FUSE connection,
// reports the outcome on results and then serves requests until the
// connection ends.
func (s *server) queueLoop(qid, entries int, deferTaskrun bool, results chan<- error) {
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(qid)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		fmt.Fprintf(os.Stderr, "fuseuring: queue %d: cannot pin to CPU %d: %v\n", qid, qid, err)
	}

	flags := uint32(ioringSetupSQE128)
	if deferTaskrun {
		flags |= ioringSetupSingleIssuer | ioringSetupDeferTaskrun
	}
	r, err := newURing(entries, flags)
	if deferTaskrun && errors.Is(err, unix.EINVAL) {
		flags = ioringSetupSQE128
		r, err = newURing(entries, flags)
	}
	if err != nil {
		results <- fmt.Errorf("queue %d: %v", qid, err)
		return
	}
	s.ringFlags.Store(flags)

	// One anonymous mapping per queue: headers and iovecs first, then the
	// page-aligned payload buffers.
	hdrArea := (entries*(ringHdrStride+32) + 4095) &^ 4095
	mem, err := unix.Mmap(-1, 0, hdrArea+entries*maxWrite, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_POPULATE)
	if err != nil {
		results <- fmt.Errorf("queue %d: mmap buffers: %v", qid, err)
		return
	}
	ents := make([]queueEntry, entries)
	iovs := unsafe.Slice((*unix.Iovec)(unsafe.Pointer(&mem[entries*ringHdrStride])), 2*entries)
	for i := range ents {
		e := &ents[i]
		e.hdr = mem[i*ringHdrStride : i*ringHdrStride+ringHeaderLen]
		e.payload = mem[hdrArea+i*maxWrite : hdrArea+(i+1)*maxWrite]
		iovs[2*i].Base = &e.hdr[0]
		iovs[2*i].SetLen(ringHeaderLen)
		iovs[2*i+1].Base = &e.payload[0]
		iovs[2*i+1].SetLen(maxWrite)
		e.iovAddr = uintptr(unsafe.Pointer(&iovs[2*i]))
	}

	prep := func(i int, cmd uint32, commitID uint64) {
		sqe := r.getSQE()
		sqe[0] = ioringOpURingCmd
		le.PutUint32(sqe[4:], uint32(s.devFd))
		le.PutUint32(sqe[8:], cmd) // cmd_op
		le.PutUint64(sqe[16:], uint64(ents[i].iovAddr))
		le.PutUint32(sqe[24:], 2) // len: number of iovecs
		le.PutUint64(sqe[32:], uint64(i))
		// struct fuse_uring_cmd_req in the command area at offset 48.
		le.PutUint64(sqe[56:], commitID)
		le.PutUint16(sqe[64:], uint16(qid))
	}

	for i := range ents {
		prep(i, fuseIOURingCmdRegister, 0)
	}
	if err := r.enter(0); err != nil {
		results <- fmt.Errorf("queue %d: io_uring_enter (register): %v", qid, err)
		return
	}
	// A REGISTER that the kernel accepts stays pending; one it refuses
	// completes at once with the error.
	if _, _, e := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), 0, 0, ioringEnterGetevents, 0, 0); e != 0 && e != unix.EINTR {
		results <- fmt.Errorf("queue %d: io_uring_enter: %v", qid, e)
		return
	}
	live := entries
	var regErr error
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	var pendingReq []int
	for ; head != tail; head++ {
		cqe := r.cqes[(head&r.cqMask)*cqeSize:]
		i := int(le.Uint64(cqe[0:]))
		res := int32(le.Uint32(cqe[8:]))
		if res < 0 {
			live--
			if regErr == nil {
				regErr = fmt.Errorf("queue %d: FUSE_IO_URING_CMD_REGISTER failed: %v (%s)", qid, syscall.Errno(-res), unix.ErrnoName(syscall.Errno(-res)))
			}
			continue
		}
		pendingReq = append(pendingReq, i)
	}
	atomic.StoreUint32(r.cqHead, head)
	results <- regErr
	if regErr != nil {
		return
	}

	counter := &s.uringServed[qid].n
	handle := func(i int) {
		e := &ents[i]
		h := e.hdr
		op := le.Uint32(h[ringInOut+4:])
		unique := le.Uint64(h[ringInOut+8:])
		node := le.Uint64(h[ringInOut+16:])
		commitID := le.Uint64(h[ringEntInOut+8:])
		psz := le.Uint32(h[ringEntInOut+16:])
		if int(psz) > len(e.payload) {
			psz = uint32(len(e.payload))
		}
		errno, n, _ := s.serve(op, node, h[ringOpIn:ringEntInOut], e.payload[:psz], e.payload)
		if errno != 0 {
			n = 0
		}
		le.PutUint32(h[ringInOut:], uint32(outHeaderSize+n))
		le.PutUint32(h[ringInOut+4:], uint32(-int32(errno)))
		le.PutUint64(h[ringInOut+8:], unique)
		le.PutUint32(h[ringEntInOut+16:], uint32(n)) // payload_sz
		counter.Add(1)
		prep(i, fuseIOURingCmdCommitAndFetch, commitID)
	}
	for _, i := range pendingReq {
		handle(i)
	}

	reported := false
	for live > 0 {
		if err := r.enter(1); err != nil {
			fmt.Fprintf(os.Stderr, "fuseuring: queue %d: io_uring_enter: %v\n", qid, err)
			return
		}
		head := *r.cqHead
		tail := atomic.LoadUint32(r.cqTail)
		for ; head != tail; head++ {
			cqe := r.cqes[(head&r.cqMask)*cqeSize:]
			i := int(le.Uint64(cqe[0:]))
			res := int32(le.Uint32(cqe[8:]))
			if res == 0 {
				handle(i)
				continue
			}
			// The entry is no longer owned by the kernel: the connection
			// ended (ENOTCONN, ECANCELED) or a commit was refused.
			live--
			errno := syscall.Errno(-res)
			if errno != unix.ENOTCONN && errno != unix.ECANCELED && !reported {
				fmt.Fprintf(os.Stderr, "fuseuring: queue %d: entry %d completed with %v\n", qid, i, errno)
				reported = true
			}
		}
		atomic.StoreUint32(r.cqHead, head)
	}
}
