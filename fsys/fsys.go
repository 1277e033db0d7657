// Package fsys is sluice's FUSE front end: it translates FUSE requests onto
// a backing tree (package backing), and sends the reads and writes of
// callers in a limited group through the engine, charged to their group.
package fsys

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"sluice/backing"
	"sluice/engine"
	"sluice/group"
	"sluice/stack"
	"sluice/throttle"
)

// Options configure a mount.
type Options struct {
	// Options are the engine's, the stack's among them; they must pass
	// stack.Options.Validate (start from stack.DefaultOptions).
	engine.Options

	// Source is the directory passed through. Required unless Mirrors
	// are given.
	Source string
	// Mirrors are directories holding the same content, served as one
	// tree (backing.Mirror) in place of Source: reads go to the mirror
	// ReadPolicy picks, writes to all. Passthrough is off for them.
	Mirrors []string
	// ReadPolicy is a mirror set's read policy (mirror.Names). The
	// default is mirror.Default.
	ReadPolicy string
	// MirrorFaults, for tests and fault drills, injects faults into each
	// mirror's file I/O (see backing.Faults); nil entries for none.
	MirrorFaults []*backing.Faults
	// Tree, when not nil, is served in place of Source and Mirrors: any
	// backing.Tree, such as one held in memory (backing.MemTree) or one
	// wrapped to inject faults by operation and path (backing.FaultTree).
	// Its files without a descriptor are never spliced nor passed
	// through. The mount closes it. The default is nil.
	Tree backing.Tree
	// Journal, when not nil, tells a supervisor every change of the
	// mount's state as it is made, so that a new process can serve the
	// mount should this one die (see Record). Only a mount of Source over
	// /dev/fuse can be supervised. The mount closes it. The default is nil.
	Journal *Journal
	// Mountpoint is where the file system appears. Required.
	Mountpoint string
	// Limits are the initial per-group limits, applied in order.
	Limits []group.LimitSpec
	// Rules classify callers into groups; unmatched callers are in
	// "default".
	Rules []group.Rule
	// AllowOther lets users other than the mounting one use the mount. The
	// default is false.
	AllowOther bool
	// Passthrough lets the opens of a group with no limit anywhere on its
	// path use FUSE passthrough (Linux 6.9+, as root), for reading and
	// writing: the kernel reads and writes the backing file itself, and
	// sluice neither sees nor counts those reads and writes. While a file
	// is open by passthrough, the kernel takes every other open of it only
	// by passthrough too: a limited group's open of it is passed through
	// as well, beyond its limit (stack.ServeOpen; FS.Passthrough counts
	// them). Where the kernel lacks it, with WriteCache, and on mirror
	// sets, opens are served as without it. The default is false; sluice
	// mount turns it on.
	Passthrough bool
	// MaxOpen bounds the directories kept open between operations (see
	// backing.LocalOptions). The default is 1024.
	MaxOpen int
	// GroupMaxOpen bounds the files and directories one group holds open
	// through the mount at once, each holding descriptors of the daemon
	// until it is closed: at the bound the group's opens fail with
	// EMFILE, while other groups' go on. The default, 0, is a quarter of
	// the descriptor limit (RLIMIT_NOFILE, raised to its hard limit at
	// mount).
	GroupMaxOpen int
	// MapDirty bounds the dirty pages the kernel keeps of this mount's
	// files (the mount's max_bytes in /sys/class/bdi, kernel 6.2+): those
	// written through shared mappings and, with WriteCache, by write(). A
	// writer through a mapping in a limited group is paced when it faults
	// pages in again (see stack.Stack.Read), and runs ahead of its limit
	// by about this much at most. 0 is the default: DefaultMapDirty, or
	// DefaultWriteCacheDirty with WriteCache; -1 leaves the kernel's own
	// bound (1 % of its dirty limit, tens of MiB).
	MapDirty int64
	// WriteCache lets the kernel's page cache take the write()s of files
	// not served with direct I/O (FUSE writeback cache): those of groups
	// with no write limit on their path and, under CacheKernel, of those
	// whose write limits write back the mount's dirty bound (64 MiB at
	// least) within stack.WriteCacheDrain. A write() then returns once its
	// data is in the mount's page cache, and the kernel sends sluice the
	// dirty pages in large writes later: at the latest when the file is
	// closed or synced with fsync, which report any error of them. A limited group's writeback is paced, and the kernel
	// holds its writer once the mount's dirty pages reach the bound. Files
	// that other limited groups open for writing are served with direct
	// I/O, so their write()s are paced as without it. The kernel keeps the
	// sizes and times of the mount's files itself, so a file changed on
	// SOURCE behind sluice's back shows its old size until the kernel
	// forgets it. The default is false.
	WriteCache bool
	// CacheMode says how files opened by a limited group are served (see
	// CacheMode). The default is CacheAuto.
	CacheMode CacheMode
	// Transport is how the kernel's requests reach the mount:
	// TransportDev (/dev/fuse), TransportURing (FUSE-over-io_uring; Mount
	// fails where the kernel does not offer it) or TransportAuto (io_uring
	// where the kernel offers it, /dev/fuse otherwise). Both give the same
	// answers; a mirror set's hedged reads are answered early only over
	// /dev/fuse (see answer.go). The default is DefaultTransport.
	Transport string
	// Debug logs every FUSE request. The default is false.
	Debug bool
	// ReadOnly mounts read-only (MS_RDONLY): every write, create or
	// change through the mount fails with EROFS. The default is false.
	ReadOnly bool
	// NoExec mounts noexec (MS_NOEXEC): no file on the mount may be
	// executed (EACCES). The default is false. The mount is always
	// nosuid and nodev.
	NoExec bool
	// Logger receives what the mount reports (a mirror turning stale, the
	// FUSE library's complaints). The default is slog.Default().
	Logger *slog.Logger
}

// CacheMode is how files opened by a group with a limit are served: the
// mount's part of stack.ServeOpen, which decides how each open is served.
type CacheMode = stack.CacheMode

// The cache modes (see stack.CacheMode).
const (
	CacheAuto   = stack.CacheAuto
	CacheDirect = stack.CacheDirect
	CacheKernel = stack.CacheKernel
)

// DefaultMapDirty is Options.MapDirty's default.
const DefaultMapDirty = 4 << 20

// DefaultWriteCacheDirty is Options.MapDirty's default with WriteCache:
// on the bench's 2-core VM (bench/speed.sh), 4 KiB writes reached 0.6 of
// native with 4 MiB of dirty pages and all of it with 64 MiB, and 1 MiB
// writes through the cache ran at half the speed of sending each straight
// to sluice with 4 MiB, and 1.5 times it with 64 MiB.
const DefaultWriteCacheDirty = 64 << 20

// maxBackground is the mount's number of background requests in flight
// (the kernel's max_background: asynchronous direct I/O, readahead, and
// the writeback of cached pages), the most the kernel takes. Past it, the
// kernel holds every tenant's next background request, readahead
// included, until one is answered; a limited group's requests wait in
// its throttle while they are in flight, so with a few dozen slots one
// tenant's queued asynchronous reads stalled every other tenant's
// readahead (an unlimited reader of a 64 MiB file took 6.2 times as long
// beside 128 reads queued at 64 KiB/s). A held request costs sluice a
// goroutine and its buffer, which a tenant's synchronous requests from as
// many threads would cost as well.
const maxBackground = 65535

// FS is a mounted sluice file system.
type FS struct {
	opts     Options
	eng      *engine.Engine
	tree     backing.Tree
	mirrors  *backing.Mirror // the tree, when it is a mirror set
	late     atomic.Int64    // replies the kernel will refuse: answered early
	resolver atomic.Pointer[group.Resolver]
	tags     group.Tags // process trees charged to a group (Tag)
	server   *fuse.Server
	epoch    time.Time

	// flights are the reads and writes being served (InFlight).
	flights flights
	// devConn is the mount's FUSE device, when known (see watch); stop
	// ends the sweep of interrupted requests, at Wait.
	devConn    syscall.RawConn
	stop       chan struct{}
	stopOnce   sync.Once
	heldBehind atomic.Bool // requests held in SOURCE were left behind

	// passOpens counts, per group, its files open by passthrough.
	passMu    sync.Mutex
	passOpens map[*throttle.Group]int

	mu sync.Mutex
	// groups maps a group name to its throttle group, for caller, which
	// every request runs: a lookup in it under mu costs a quarter of the
	// engine's (Engine.Group cleans the path, lists the group in the
	// metrics, and takes the engine's lock, which every admission, device
	// completion and timer tick holds; see BenchmarkCallerGroup). It
	// caches the lookup only: a group's limits are the group's own
	// (throttle.Group.Limits), changed through Engine.SetLimits, and
	// groups are never removed, so an entry never goes stale.
	groups map[string]*throttle.Group
	files  table[*handle]    // open files by FUSE file handle
	dirs   table[*dirHandle] // open directories by FUSE file handle
	nodes  map[backing.ID]*node
	quota  *openQuota // each group's open files and directories

	// journal tells the supervisor of changes (Options.Journal), once
	// started; nil when none.
	journal *Journal

	// handed says the mount was handed over to another process (Release)
	// or, taken over, is dropped (Discard): its files are closed without
	// a word to the kernel.
	handed atomic.Bool

	// spliceMax is the largest unthrottled read replied by splicing from
	// the backing file (a pipe must hold the reply); 0 turns splicing off.
	spliceMax int

	// dirty is the mount's bound on dirty pages in bytes (MapDirty, or
	// the kernel's own), or -1 when unknown; 0 until the mount has set it,
	// while it already serves.
	dirty atomic.Int64

	full   atomic.Bool  // SOURCE's file system is nearly full (see nearFull)
	fullAt atomic.Int64 // when full was checked, Unix ns

	coldReads     atomic.Int64 // reads past the backing cache (see readCold)
	directOpens   atomic.Int64 // backing files read with O_DIRECT
	bufferedOpens atomic.Int64 // backing files read through the page cache
}

type dirHandle struct {
	mu  sync.Mutex
	dir *backing.Dir
	id  backing.ID
}

// Mount checks opts, mounts, and returns once the file system serves. It
// sets the process's umask to 0 (each caller's own umask is applied to what
// it creates) and raises its soft descriptor limit to the hard one.
func Mount(opts Options) (*FS, error) {
	switch {
	case opts.Tree != nil && (opts.Source != "" || len(opts.Mirrors) > 0):
		return nil, fmt.Errorf("a Tree is served in place of SOURCE and mirrors: give none of them")
	case opts.Tree != nil:
	case len(opts.Mirrors) > 0 && opts.Source != "":
		return nil, fmt.Errorf("SOURCE %s and mirrors given: a mirror set is served in place of SOURCE", opts.Source)
	case len(opts.Mirrors) == 1:
		return nil, fmt.Errorf("a mirror set needs two mirrors or more, got one (%s): serve it as SOURCE", opts.Mirrors[0])
	case len(opts.Mirrors) > 0:
		for _, d := range opts.Mirrors {
			if err := checkDir("mirror", d); err != nil {
				return nil, err
			}
		}
	default:
		if err := checkDir("SOURCE", opts.Source); err != nil {
			return nil, err
		}
	}
	if err := checkDir("MOUNTPOINT", opts.Mountpoint); err != nil {
		return nil, err
	}
	if mounted(opts.Mountpoint) {
		var st syscall.Statfs_t
		if err := syscall.Statfs(opts.Mountpoint, &st); errors.Is(err, syscall.ENOTCONN) {
			return nil, deadMountpoint(opts.Mountpoint)
		}
		return nil, fmt.Errorf("MOUNTPOINT %s is busy: something is already mounted there (unmount it first: fusermount3 -u %s)", opts.Mountpoint, opts.Mountpoint)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("FUSE is unavailable: %v (load the fuse module and install fuse3)", err)
	}
	if opts.GroupMaxOpen < 0 {
		return nil, fmt.Errorf("GroupMaxOpen %d: want 0 (a quarter of the descriptor limit) or more", opts.GroupMaxOpen)
	}
	if err := checkJournal(opts); err != nil {
		return nil, err
	}
	if opts.Journal != nil && opts.Transport != TransportURing {
		opts.Transport = TransportDev // a new process serves /dev/fuse
	}
	uring, err := transport(&opts)
	if err != nil {
		return nil, err
	}
	raiseNoFile()
	eopts := opts.Options
	if eopts.Dying == nil {
		eopts.Dying = dying
	}
	eng, err := engine.New(eopts)
	if err != nil {
		return nil, err
	}
	f := &FS{
		opts: opts, eng: eng, epoch: time.Now(),
		groups: make(map[string]*throttle.Group),
		nodes:  make(map[backing.ID]*node),
		quota:  newOpenQuota(groupMaxOpen(opts.GroupMaxOpen)),
	}
	lopts := backing.LocalOptions{MaxOpen: opts.MaxOpen}
	if opts.Journal != nil {
		lopts.Refs = opts.Journal.refs
	}
	switch {
	case opts.Tree != nil:
		f.tree = opts.Tree
	case len(opts.Mirrors) > 0:
		f.opts.Passthrough = false
		f.mirrors, err = backing.NewMirror(opts.Mirrors, backing.MirrorOptions{
			LocalOptions: lopts, Policy: opts.ReadPolicy, Faults: opts.MirrorFaults,
			Now: func() int64 { return int64(time.Since(f.epoch)) },
			Log: func(format string, args ...any) { f.log().Warn(fmt.Sprintf(format, args...), "component", "mirror") },
		})
		f.tree = f.mirrors
	default:
		f.tree, err = backing.NewLocal(opts.Source, lopts)
		if err != nil {
			err = fmt.Errorf("SOURCE %s: %v", opts.Source, err)
		}
	}
	if err != nil {
		eng.Close()
		return nil, err
	}
	f.group(group.Default)
	f.SetRules(opts.Rules)
	// The limits, applied in order, must hold together (a floor within
	// its caps): checked as a whole, so that their order does not matter.
	if _, err := eng.SetAllLimits(group.Combine(nil, opts.Limits)); err != nil {
		f.tree.Close()
		eng.Close()
		return nil, fmt.Errorf("--limit: %v", err)
	}

	mo, dirty := f.mountOptions(uring)
	fs := quotaRaw{&raw{RawFileSystem: fuse.NewDefaultRawFileSystem(), f: f}, f.quota}
	server, err := fuse.NewServer(fs, opts.Mountpoint, &mo)
	if err != nil {
		f.tree.Close()
		eng.Close()
		return nil, fmt.Errorf("mount %s on %s: %w", f.source(), opts.Mountpoint, err)
	}
	f.server = server
	f.stop = make(chan struct{})
	if opts.Journal != nil {
		if err := f.startJournal(true); err != nil {
			close(f.stop)
			server.Unmount()
			f.tree.Close()
			eng.Close()
			return nil, fmt.Errorf("mount %s on %s: supervised: %w", f.source(), opts.Mountpoint, err)
		}
		go f.checkpoints()
	}
	// A request taken from an io_uring queue is answered in its entry
	// alone: replies written to /dev/fuse ahead of the handler (early
	// answers, and the sweep's EINTR to a killed caller held in SOURCE)
	// are refused there, and are off. A hedged read's caller waits for
	// the mirror that answers first.
	if dev := fuseDevice(server); dev != nil {
		f.watch(dev, !server.IOUring())
	}
	if f.mirrors != nil && !server.IOUring() {
		if dev := fuseDevice(server); dev != nil {
			if a := answerer(dev, &f.late); a != nil {
				f.mirrors.SetAnswer(a)
			}
		}
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		close(f.stop)
		server.Unmount()
		f.tree.Close()
		eng.Close()
		return nil, fmt.Errorf("mount %s on %s: %w", f.source(), opts.Mountpoint, err)
	}
	if opts.Transport == TransportURing && !server.IOUring() {
		close(f.stop)
		server.Unmount()
		f.tree.Close()
		eng.Close()
		return nil, fmt.Errorf("transport %s: the kernel did not take the mount's io_uring queues (its log, dmesg, may say why); use transport %s or %s", TransportURing, TransportAuto, TransportDev)
	}
	f.spliceMax = pipeMax() - 2*4096
	// The kernel caps a FUSE mount's readahead at 128KiB; larger windows
	// that still fit a splice pipe make unthrottled sequential reads cheaper.
	// Best effort: it needs root, and nothing breaks without it.
	ra := 128 << 10
	for ra*2 <= f.spliceMax && ra*2 <= 1<<20 {
		ra *= 2
	}
	setBDI(opts.Mountpoint, "read_ahead_kb", strconv.Itoa(ra>>10))
	// Also best effort (kernel 6.2+): without it, a writer through a
	// mapping runs further ahead of its limit before it is paced.
	if dirty > 0 {
		setBDI(opts.Mountpoint, "max_bytes", strconv.FormatInt(dirty, 10))
	}
	// The bound in force, for the write cache's rule (see writesCached):
	// the kernel's own when it took none of sluice's.
	f.dirty.Store(dirty)
	if b, err := getBDI(opts.Mountpoint, "max_bytes"); err == nil && b > 0 {
		f.dirty.Store(b)
	}
	return f, nil
}

// mountOptions are the FUSE options of the mount, and the bound on its
// dirty pages it asks for (see Options.MapDirty).
func (f *FS) mountOptions(uring bool) (fuse.MountOptions, int64) {
	var arena fuse.RequestArena
	if j := f.opts.Journal; j != nil && j.arena != nil {
		arena = j.arena
	}
	mo := fuse.MountOptions{
		RequestArena:  arena,
		AllowOther:    f.opts.AllowOther,
		FsName:        f.source(),
		Name:          "sluice",
		MaxWrite:      maxWrite,
		MaxReadAhead:  1 << 20,
		MaxBackground: maxBackground,
		Debug:         f.opts.Debug,
		// The FUSE library's lines: its per-request trace (Debug) at
		// debug level, its complaints as warnings.
		Logger: slog.NewLogLogger(lateReplies{f.log().Handler(), &f.late}, map[bool]slog.Level{true: slog.LevelDebug, false: slog.LevelWarn}[f.opts.Debug]),
		// The kernel checks every caller's permissions against the modes
		// and POSIX ACLs sluice reports, for root and non-root mounts alike.
		Options:   []string{"default_permissions"},
		EnableAcl: true,
		// As root, mount(2) directly: no fusermount3 needed.
		DirectMount: true,
		IOUring:     uring,
		// Two goroutines wait in read(2) for the next request, not
		// GOMAXPROCS+1 (4 to 5 here, see spareProcs): the kernel hands
		// requests to them in turn, and at a few hundred requests a
		// second each of 3 waits over 10 ms, after which the Go runtime
		// takes its P back and its monitor thread wakes every 20 µs for
		// a millisecond, every time. A throttled 4 KiB read at 1 MiB/s
		// (bench/wait.sh 5 1, one run of each on a loaded VM) took
		// 344.8 µs of CPU and 6.76 context switches with two, against
		// 401.9 µs and 9.12. With two, a request that comes while the
		// other reader starts on one is read at once.
		MaxReaders: 2,
		// ASYNC_DIO: without it the kernel keeps one direct read and one
		// direct write in flight per handle. DONT_MASK: the caller's umask
		// is applied where the object is created, together with default
		// ACLs. HANDLE_KILLPRIV_V2: writes and truncates by callers without
		// CAP_FSETID are flagged, and sluice clears set-id bits as SOURCE
		// would. READDIRPLUS_AUTO: the kernel asks for the entries'
		// attributes with a listing (READDIRPLUS, one lookup of each in
		// SOURCE) only where the lister goes on to stat them, as ls -l
		// does, and for names alone otherwise: a listing of names ran
		// 3.3 times as fast, one with a stat of each entry as fast.
		ExtraCapabilities: fuse.CAP_ASYNC_DIO | fuse.CAP_DIRECT_IO_ALLOW_MMAP |
			fuse.CAP_DONT_MASK | fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_READDIRPLUS_AUTO,
	}
	// Mount flags: nosuid and nodev always (as fusermount mounts), ro and
	// noexec when asked. go-fuse makes MS_ flags of nosuid, nodev and
	// noexec; ro reaches fusermount as an option, and mount(2) as
	// MS_RDONLY (and in its data, which the kernel reads as the same).
	mo.Options = append(mo.Options, "nosuid", "nodev")
	mo.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV
	if f.opts.ReadOnly {
		mo.Options = append(mo.Options, "ro")
		mo.DirectMountFlags |= syscall.MS_RDONLY
	}
	if f.opts.NoExec {
		mo.Options = append(mo.Options, "noexec")
	}
	dirty := cmp.Or(f.opts.MapDirty, DefaultMapDirty)
	if f.opts.WriteCache {
		// The kernel passes nothing through with its write cache.
		f.opts.Passthrough = false
		mo.ExtraCapabilities |= fuse.CAP_WRITEBACK_CACHE
		dirty = cmp.Or(f.opts.MapDirty, DefaultWriteCacheDirty)
	}
	if !f.opts.Passthrough {
		mo.DisabledCapabilities |= fuse.CAP_PASSTHROUGH
	}
	return mo, dirty
}

// raiseNoFile raises the soft descriptor limit to the hard one: open
// files of every tenant are descriptors of this process.
func raiseNoFile() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

// Wait blocks until the file system is unmounted.
func (f *FS) Wait() {
	served := make(chan struct{})
	go func() { f.server.Wait(); close(served) }()
	held := !f.untilServed(served)
	f.stopOnce.Do(func() { close(f.stop) })
	if f.handed.Load() {
		// Handed over (Release): the connection, its passthrough
		// registrations and the mount are the other process's.
		f.closeQuietly()
		return
	}
	// Files the kernel never released (their RELEASE was still queued when
	// the connection ended) are closed here, so nothing keeps SOURCE's file
	// system busy once the mount is gone. With requests held in SOURCE,
	// the files they read wait for them: they are closed in the
	// background.
	release := func() {
		for _, h := range f.files.drain() {
			h.release()
		}
		for _, d := range f.dirs.drain() {
			d.dir.Close()
		}
	}
	if held {
		// The engine would wait engine.CloseWait for the device reads
		// held.
		go release()
		go f.eng.Close()
	} else {
		release()
		f.eng.Close()
	}
	f.tree.Close()
}

// UnmountWait is how long Unmount retries while the mount is busy.
const UnmountWait = 5 * time.Second

// Unmount unmounts the file system, retrying while it is busy for up to
// UnmountWait. Once unmounted, it waits StuckWait at most for requests
// held in SOURCE (see StuckWait). A mount handed over (Release) or
// dropped (Discard) is another process's: Unmount does nothing.
func (f *FS) Unmount() error {
	if f.handed.Load() {
		return nil // the mount is the other process's
	}
	errc := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(UnmountWait)
		for {
			err := f.server.Unmount()
			if err == nil || time.Now().After(deadline) {
				errc <- err
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	done := make(chan struct{})
	var err error
	go func() { err = <-errc; close(done) }()
	if f.untilServed(done) {
		return err
	}
	return nil
}

// Engine returns the engine serving the mount.
func (f *FS) Engine() *engine.Engine { return f.eng }

// SetRules replaces the classification rules: requests from now on are
// charged to the group of the first rule they match, or the default
// group. Requests in flight keep their groups.
func (f *FS) SetRules(rules []group.Rule) {
	for _, r := range rules {
		f.group(r.Group)
	}
	r := group.NewResolver(&group.Classifier{Rules: slices.Clone(rules)})
	r.Tags = &f.tags
	f.resolver.Store(r)
}

// Tag charges process pid and every process it starts to group name from
// now on, ahead of the rules, until it exits (sluice exec).
func (f *FS) Tag(pid int32, name string) error {
	if err := group.ValidName(name); err != nil {
		return err
	}
	f.group(name)
	return f.tags.Tag(pid, name)
}

// PassOpens is how many open files of one group the kernel reads by
// passthrough: their reads never reach sluice, so the group's counters
// leave them out, and a limit the group got after they opened holds them
// only from their next open.
type PassOpens struct {
	Group   string `json:"group"`
	Opens   int    `json:"opens"`
	Limited bool   `json:"limited"` // the group has a limit now
}

// Passthrough lists, per group with any, the files open by passthrough,
// by group name.
func (f *FS) Passthrough() []PassOpens {
	f.passMu.Lock()
	defer f.passMu.Unlock()
	var out []PassOpens
	for g, n := range f.passOpens {
		out = append(out, PassOpens{Group: g.Path(), Opens: n, Limited: g.Limited()})
	}
	slices.SortFunc(out, func(a, b PassOpens) int { return strings.Compare(a.Group, b.Group) })
	return out
}

// passOpen counts an open by passthrough of group g in (+1) or out (-1).
func (f *FS) passOpen(g *throttle.Group, d int) {
	f.passMu.Lock()
	defer f.passMu.Unlock()
	if f.passOpens == nil {
		f.passOpens = map[*throttle.Group]int{}
	}
	if f.passOpens[g] += d; f.passOpens[g] <= 0 {
		delete(f.passOpens, g)
	}
}

// Mirrors is the mirror set served, nil when the mount serves SOURCE.
func (f *FS) Mirrors() *backing.Mirror { return f.mirrors }

// Backing says how backing files are read: "direct" (O_DIRECT), "buffered"
// (the backing file system refused O_DIRECT), "mixed", or "none" before any
// throttled read.
func (f *FS) Backing() string {
	d, b := f.directOpens.Load(), f.bufferedOpens.Load()
	switch {
	case d > 0 && b > 0:
		return "mixed"
	case d > 0:
		return "direct"
	case b > 0:
		return "buffered"
	}
	return "none"
}

// ColdReads is how many reads went past SOURCE's page cache (see
// readCold).
func (f *FS) ColdReads() int64 { return f.coldReads.Load() }

// SetLimit applies one limit spec live; keys it does not name keep their
// values, or none where the result would not hold (a floor above a cap;
// see throttle.Tree.Check). It is Engine().SetLimits(l.Group,
// l.LimitChange).
func (f *FS) SetLimit(l group.LimitSpec) error {
	_, _, err := f.eng.SetLimits(l.Group, l.LimitChange)
	return err
}

// group returns the throttle group for name, from groups (see there).
func (f *FS) group(name string) *throttle.Group {
	f.mu.Lock()
	g := f.groups[name]
	f.mu.Unlock()
	if g == nil {
		g = f.eng.Group(name)
		f.mu.Lock()
		f.groups[name] = g
		f.mu.Unlock()
	}
	return g
}

// caller classifies the request's caller; ok is false when the kernel gave
// no caller (then the file's opener is charged).
func (f *FS) caller(ctx context.Context) (*throttle.Group, bool) {
	c, ok := fuse.FromContext(ctx)
	if !ok {
		return f.group(group.Default), false
	}
	name := f.resolver.Load().Group(int64(time.Since(f.epoch)), c.Uid, c.Gid, c.Pid)
	return f.group(name), c.Pid != 0
}

func (f *FS) log() *slog.Logger {
	if f.opts.Logger != nil {
		return f.opts.Logger
	}
	return slog.Default()
}

// source names what is served, for mount tables and messages: SOURCE, or
// the mirrors joined by colons.
func (f *FS) source() string {
	if len(f.opts.Mirrors) > 0 {
		return strings.Join(f.opts.Mirrors, ":")
	}
	if f.opts.Tree != nil && f.opts.Source == "" {
		return "sluice"
	}
	return f.opts.Source
}

// deadMountpoint is the error of a mount over a FUSE mount whose server
// died: its files were lost with the server, and nothing can take it over.
func deadMountpoint(path string) error {
	return fmt.Errorf("MOUNTPOINT %s is a FUSE mount whose server died, and its open files with it: unmount it first (sluice mount --unmount-dead SOURCE %s, or fusermount3 -uz %s); a mount made with --supervise outlives its server", path, path, path)
}

func checkDir(what, path string) error {
	if path == "" {
		return fmt.Errorf("%s is required", what)
	}
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s %s does not exist", what, path)
	}
	if errors.Is(err, syscall.ENOTCONN) {
		if what == "MOUNTPOINT" {
			return deadMountpoint(path)
		}
		return fmt.Errorf("%s %s is a FUSE mount whose server died: unmount it first (fusermount3 -u %s)", what, path, path)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %v", what, path, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s %s is not a directory", what, path)
	}
	return nil
}

// mounted reports whether path is a mount point already.
func mounted(path string) bool {
	var a, b syscall.Stat_t
	if syscall.Stat(path, &a) != nil || syscall.Stat(path+"/..", &b) != nil {
		return false
	}
	return a.Dev != b.Dev || a.Ino == b.Ino
}

// pipeMax is the largest pipe an unprivileged splice may grow.
func pipeMax() int {
	b, err := os.ReadFile("/proc/sys/fs/pipe-max-size")
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// setBDI writes value to the setting name of the mount's own backing
// device info in /sys/class/bdi: read_ahead_kb is the window of groups that
// use the kernel's page cache, max_bytes bounds its dirty pages.
func setBDI(mountpoint, name, value string) error {
	path, err := bdiPath(mountpoint, name)
	if err != nil {
		return err
	}
	return os.WriteFile(path, []byte(value), 0)
}

// getBDI reads the number in the mount's backing device setting name.
func getBDI(mountpoint, name string) (int64, error) {
	path, err := bdiPath(mountpoint, name)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// bdiPath is the file of the mount's backing device setting name.
func bdiPath(mountpoint, name string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(mountpoint, &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("/sys/class/bdi/%d:%d/%s", unix.Major(st.Dev), unix.Minor(st.Dev), name), nil
}
