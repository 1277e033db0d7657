package fsys

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/group"
)

var (
	modelSeeds = flag.String("model.seed", "", "TestModel: comma-separated seeds (default: "+
		strings.Trim(fmt.Sprint(modelDefaultSeeds), "[]")+")")
	modelOps     = flag.Int("model.ops", 150, "TestModel: operations per seed")
	modelMaxOpen = flag.Int("model.max-open", 16, "TestModel: the mount's MaxOpen (descriptors kept to reach "+
		"backing objects); the default is below the model's number of objects, so descriptors are closed and "+
		"reopened all along; 0 is sluice's default")
	modelStrictFalloc = flag.Bool("model.strict-falloc", false, "TestModel: fail when the mount refuses "+
		"FALLOC_FL_COLLAPSE_RANGE or FALLOC_FL_INSERT_RANGE (the kernel's FUSE client refuses both with "+
		"EOPNOTSUPP); by default such an op is not applied to the reference either")
)

var modelDefaultSeeds = []uint64{1, 2, 3}

const (
	modelUID        = 4101 // in group "slow", which has a limit: its reads and writes go through the engine
	modelOpTimeout  = 30 * time.Second
	modelLogLen     = 20
	modelMaxHandles = 8
	modelFullEvery  = 10 // compare whole trees, contents too, every this many ops
	modelMaxOff     = 1536 << 10
)

// Names of the model's small name space; paths are one or two of them
// under the model root "r", so operations collide often.
var (
	modelNames   = []string{"a", "b", "c", "x", "y", "z"}
	modelDirs    = []string{"x", "y"}
	modelTargets = []string{"a", "b", "x", "x/a", "y/b", "../a", ".", "nonexistent"}
)

// TestModel runs seeded random sequences of namespace and data operations
// on the mount and, in the same order and as the same user (root, or a
// member of a limited group), on a reference directory of the same file
// system, and requires the same outcome of each: errno, bytes read,
// offsets, and the attributes and contents of every path of both trees.
//
// A longer run of other seeds:
//
//	go test -race -count=1 -run TestModel ./fsys/ -model.seed=7,8,9 -model.ops=2000 -v
func TestModel(t *testing.T) {
	needFUSE(t)
	seeds := modelDefaultSeeds
	if *modelSeeds != "" {
		seeds = nil
		for _, s := range strings.Split(*modelSeeds, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
			if err != nil {
				t.Fatalf("-model.seed: %v", err)
			}
			seeds = append(seeds, v)
		}
	}
	// Modes are given exactly; the kernel applies the caller's umask to
	// both trees alike, and 0 keeps every mode reachable.
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	for _, seed := range seeds {
		// The limited group's files with direct I/O, then through the
		// kernel's page cache; then root's writes through the write cache
		// too (and the limited group's writable opens with direct I/O).
		for _, mode := range modelModes {
			t.Run(fmt.Sprintf("seed=%d/%s", seed, mode.name), func(t *testing.T) { runModel(t, seed, *modelOps, mode) })
		}
	}
}

// modelWorker runs closures on one locked OS thread whose file system uid and
// gid are uid, so the kernel and FUSE see that user.
type modelWorker struct {
	uid int
	ops chan func()
}

func startModelWorker(uid int) *modelWorker {
	w := &modelWorker{uid: uid, ops: make(chan func())}
	started := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the worker
		if uid != 0 {
			unix.Setfsuid(uid)
			unix.Setfsgid(uid)
		}
		close(started)
		for fn := range w.ops {
			fn()
		}
	}()
	<-started
	return w
}

// modelOutcome is what one side of an op returned.
type modelOutcome struct {
	err  error
	n    int64
	data []byte
	info string
	fd   int // a descriptor an open returned, or -1
}

func (o modelOutcome) String() string {
	s := modelErrno(o.err)
	if o.err == nil {
		s = fmt.Sprint(o.n)
		if o.info != "" {
			s += " " + o.info
		}
	}
	return s
}

func modelErrno(err error) string { return errnoStr(err) }

// modelAction is one generated op: the same call on each tree, as uid.
type modelAction struct {
	uid  int
	desc string
	run  func(side int) modelOutcome // side 0: the mount, 1: the reference
	// skipRef, if set, says the mount's outcome makes the op meaningless on
	// the reference (a refusal known to come from the kernel's FUSE client).
	skipRef func(m modelOutcome) bool
	after   func(m, r modelOutcome) // on agreement: update the handle table
	paths   []string                // paths the op names, compared (with their parents) right after it
	h       *modelHandle            // the handle the op used, compared by fstat right after it
}

type modelHandle struct {
	id    int
	uid   int
	path  string
	flags int
	fd    [2]int
}

type modelState struct {
	t         *testing.T
	seed      uint64
	r         *rand.Rand
	root      [2]string // the mount, the reference
	src       string
	abort     string
	workers   map[int]*modelWorker
	handles   []*modelHandle
	nextID    int
	log       []string
	op        int
	ops       int
	warned    map[string]bool
	succeeded map[string]int // ops that succeeded, by kind, for the log
	memfd     int            // holds the bytes of an mmap-write; -1 until the first
}

// modelMode is how a model run mounts, and the limited group's limits.
type modelMode struct {
	name       string
	cache      CacheMode
	writeCache bool
	limits     string
}

// With the write cache the limited group has no write limit, so that its
// writes, as a user other than root, go through the cache too.
var modelModes = []modelMode{
	{"direct", CacheDirect, false, "slow rbps=64MiB wbps=64MiB"},
	{"kernel", CacheKernel, false, "slow rbps=64MiB wbps=64MiB"},
	{"kernel+write-cache", CacheKernel, true, "slow rbps=64MiB"},
}

func runModel(t *testing.T, seed uint64, ops int, mode modelMode) {
	rules := []group.Rule{{Group: "slow", UID: new(uint32(modelUID))}}
	src, mnt, _ := mount(t, Options{AllowOther: true, Rules: rules, MaxOpen: *modelMaxOpen, CacheMode: mode.cache, WriteCache: mode.writeCache,
		Limits: []group.LimitSpec{limit(t, mode.limits)}})
	ref := t.TempDir()
	os.Chmod(filepath.Dir(ref), 0o755)
	m := &modelState{t: t, seed: seed, r: rand.New(rand.NewPCG(seed, 0x5eed)), root: [2]string{mnt, ref}, src: src,
		workers: map[int]*modelWorker{0: startModelWorker(0), modelUID: startModelWorker(modelUID)}, ops: ops,
		warned: map[string]bool{}, memfd: -1, succeeded: map[string]int{}}
	var st unix.Stat_t
	if err := unix.Stat(mnt, &st); err != nil {
		t.Fatal(err)
	}
	m.abort = fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", unix.Minor(st.Dev))
	// Registered after mount: runs first, so no descriptor keeps the mount busy.
	t.Cleanup(m.close)

	// A tree everyone may change: both users act on all of it.
	m.do(-1, &modelAction{uid: 0, desc: "chmod . 0777", run: func(side int) modelOutcome {
		return modelOutcome{err: unix.Chmod(m.root[side], 0o777), fd: -1}
	}})
	for _, p := range []string{"r", "r/x", "r/y"} {
		m.do(-1, &modelAction{uid: 0, desc: "mkdir " + p + " 0777", run: func(side int) modelOutcome {
			return modelOutcome{err: unix.Mkdir(m.path(side, p), 0o777), fd: -1}
		}})
	}
	m.check(-1)
	for i := 0; i < ops; i++ {
		m.op = i
		a := m.gen()
		m.do(i, a)
		m.spot(i, a)
		if (i+1)%modelFullEvery == 0 {
			m.check(i)
		}
	}
	m.op = ops
	for len(m.handles) > 0 {
		m.do(ops, m.closeAction(0))
	}
	m.check(ops)
	m.compareTrees(ops, "source directory", m.src, m.root[1])
	kinds := slices.Sorted(maps.Keys(m.succeeded))
	var b strings.Builder
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s:%d", k, m.succeeded[k])
	}
	t.Logf("ops that succeeded on both sides, by kind:%s", b.String())
}

func (m *modelState) path(side int, p string) string { return filepath.Join(m.root[side], p) }

// close releases every descriptor still open and stops the workers.
func (m *modelState) close() {
	for _, h := range m.handles {
		unix.Close(h.fd[0])
		unix.Close(h.fd[1])
	}
	m.handles = nil
	if m.memfd >= 0 {
		unix.Close(m.memfd)
		m.memfd = -1
	}
	for _, w := range m.workers {
		close(w.ops)
	}
	m.workers = nil
}

// onWorker runs fn as uid, bounded: a call that does not return is a hang,
// and the FUSE connection is aborted so the test can end.
func (m *modelState) onWorker(uid int, what string, fn func()) {
	done := make(chan struct{})
	m.workers[uid].ops <- func() { defer close(done); fn() }
	select {
	case <-done:
		return
	case <-time.After(modelOpTimeout):
	}
	msg := fmt.Sprintf("%s did not return within %v", what, modelOpTimeout)
	m.t.Logf("goroutines of sluice at the hang:\n%s", modelStacks())
	// Abort the FUSE connection, which fails every request in flight: the
	// stuck call returns, and the unmount at cleanup does not wait for it.
	// A forced unmount aborts it (fusectl's abort file too, if mounted).
	os.WriteFile(m.abort, []byte("1"), 0)
	unix.Unmount(m.root[0], unix.MNT_FORCE)
	select {
	case <-done:
		m.fail(msg + " (FUSE connection aborted)")
	case <-time.After(10 * time.Second):
	}
	// Still stuck: the cleanup would be too, so end the process here.
	fmt.Fprintf(os.Stderr, "--- FAIL: %s\n%s", m.t.Name(), m.report(msg+" (still stuck after aborting the FUSE connection)"))
	unix.Unmount(m.root[0], unix.MNT_DETACH)
	os.Exit(2)
}

// modelStacks is the stacks of the goroutines that serve the mount or
// make calls on it.
func modelStacks() string {
	buf := make([]byte, 64<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var keep []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, s := range []string{"go-fuse", "sluice/backing", "sluice/engine", "sluice/stack", "startModelWorker"} {
			if strings.Contains(g, s) {
				keep = append(keep, g)
				break
			}
		}
	}
	return strings.Join(keep, "\n\n")
}

func (m *modelState) fail(msg string) {
	m.t.Helper()
	m.t.Fatal(m.report(msg))
}

// report says where the run failed, how to replay it and what led there.
func (m *modelState) report(msg string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, op %d of %d: %s\n", m.seed, m.op, m.ops, msg)
	fmt.Fprintf(&b, "replay: go test -race -count=1 -run 'TestModel/%s$' ./fsys/ -model.seed=%d -model.ops=%d -model.max-open=%d -v\n",
		strings.TrimPrefix(m.t.Name(), "TestModel/"), m.seed, min(m.op+1, m.ops), *modelMaxOpen)
	fmt.Fprintf(&b, "last %d ops (mount / reference):\n", len(m.log))
	for _, l := range m.log {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	return b.String()
}

func (m *modelState) record(s string) {
	m.log = append(m.log, s)
	if len(m.log) > modelLogLen {
		m.log = m.log[len(m.log)-modelLogLen:]
	}
}

// do runs a on the mount and then on the reference, and compares.
func (m *modelState) do(i int, a *modelAction) {
	m.t.Helper()
	var res [2]modelOutcome
	skipped := false
	m.onWorker(a.uid, fmt.Sprintf("op #%d %s", i, a.desc), func() {
		res[0] = a.run(0)
		if a.skipRef != nil && a.skipRef(res[0]) {
			skipped = true
			return
		}
		res[1] = a.run(1)
	})
	line := fmt.Sprintf("#%d uid=%d %s -> %v / %v", i, a.uid, a.desc, res[0], res[1])
	if skipped {
		line = fmt.Sprintf("#%d uid=%d %s -> %v / (not applied)", i, a.uid, a.desc, res[0])
	}
	m.record(line)
	if skipped {
		return
	}
	if d := modelDiffOutcome(res[0], res[1]); d != "" {
		for _, o := range res {
			if o.err == nil && o.fd >= 0 {
				unix.Close(o.fd)
			}
		}
		m.fail(fmt.Sprintf("%s: %s", a.desc, d))
	}
	if res[0].err == nil {
		kind, _, _ := strings.Cut(a.desc, " ")
		if a.uid == modelUID {
			kind += " (limited)"
		}
		m.succeeded[kind]++
	}
	if a.after != nil {
		a.after(res[0], res[1])
	}
}

func modelDiffOutcome(mo, ro modelOutcome) string {
	if modelErrno(mo.err) != modelErrno(ro.err) {
		return fmt.Sprintf("errno: mount %s, reference %s", modelErrno(mo.err), modelErrno(ro.err))
	}
	if mo.err != nil {
		return ""
	}
	if mo.n != ro.n {
		return fmt.Sprintf("result: mount %d, reference %d", mo.n, ro.n)
	}
	if mo.info != ro.info {
		return fmt.Sprintf("mount %s, reference %s", mo.info, ro.info)
	}
	if !bytes.Equal(mo.data, ro.data) {
		return "bytes differ: " + modelFirstDiff(mo.data, ro.data)
	}
	return ""
}

func modelFirstDiff(a, b []byte) string {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			j := i
			for j < n && a[j] != b[j] {
				j++
			}
			return fmt.Sprintf("first at offset %d (mount %#02x, reference %#02x), %d bytes differ from there",
				i, a[i], b[i], j-i)
		}
	}
	return fmt.Sprintf("length: mount %d, reference %d", len(a), len(b))
}

// ---------------------------------------------------------------- generation

func (m *modelState) pickName() string { return modelNames[m.r.IntN(len(modelNames))] }

func (m *modelState) pickPath() string {
	switch m.r.IntN(5) {
	case 0, 1:
		return "r/" + m.pickName()
	case 2:
		return "r/" + m.pickName() + "/" + m.pickName()
	}
	return "r/" + modelDirs[m.r.IntN(len(modelDirs))] + "/" + m.pickName()
}

func (m *modelState) pickUID() int {
	if m.r.IntN(2) == 0 {
		return 0
	}
	return modelUID
}

func (m *modelState) pickFileMode() uint32 {
	modes := []uint32{0o644, 0o666, 0o600, 0o640, 0o444, 0o000, 0o755, 0o777, 0o700, 0o200}
	mode := modes[m.r.IntN(len(modes))]
	if m.r.IntN(4) == 0 {
		mode = uint32(m.r.IntN(0o1000))
	}
	if m.r.IntN(8) == 0 {
		mode |= []uint32{unix.S_ISUID, unix.S_ISGID, unix.S_ISVTX}[m.r.IntN(3)]
	}
	return mode
}

func (m *modelState) pickDirMode() uint32 {
	modes := []uint32{0o777, 0o777, 0o777, 0o777, 0o755, 0o700, 0o555, 0o000}
	mode := modes[m.r.IntN(len(modes))]
	if m.r.IntN(8) == 0 {
		mode |= []uint32{unix.S_ISUID, unix.S_ISGID, unix.S_ISVTX}[m.r.IntN(3)]
	}
	return mode
}

// pickSize is an I/O size from 1 byte to 300 KiB, mostly small.
func (m *modelState) pickSize() int {
	switch m.r.IntN(6) {
	case 0:
		return 1 + m.r.IntN(16)
	case 1, 2:
		return 1 + m.r.IntN(4096)
	case 3:
		return 1 + m.r.IntN(64<<10)
	case 4:
		return 4096 * (1 + m.r.IntN(16))
	}
	return 1 + m.r.IntN(300<<10)
}

// pickOffset is an offset in a file of size sz: inside, at the end or
// beyond it, below modelMaxOff.
func (m *modelState) pickOffset(sz int64) int64 {
	var off int64
	switch m.r.IntN(6) {
	case 0:
		off = 0
	case 1:
		off = sz
	case 2:
		off = sz + m.r.Int64N(256<<10)
	case 3:
		off = 4096 * m.r.Int64N(sz/4096+2)
	default:
		off = m.r.Int64N(sz + 1)
	}
	return min(off, modelMaxOff-m.r.Int64N(4096))
}

func (m *modelState) randomBytes(n int) []byte {
	b := make([]byte, n+7)
	if m.r.IntN(4) == 0 {
		c := byte(m.r.Uint32())
		for i := range b {
			b[i] = c
		}
		return b[:n]
	}
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], m.r.Uint64())
	}
	return b[:n]
}

// refSize is the reference's size of a handle's file (or of a path).
func (m *modelState) refSize(fd int, p string) int64 {
	var st unix.Stat_t
	var err error
	if fd >= 0 {
		err = unix.Fstat(fd, &st)
	} else {
		err = unix.Stat(m.path(1, p), &st)
	}
	if err != nil {
		return 0
	}
	return st.Size
}

func (m *modelState) gen() *modelAction {
	if len(m.handles) > 0 && m.r.IntN(100) < 55 {
		return m.genHandleOp(m.handles[m.r.IntN(len(m.handles))])
	}
	switch k := m.r.IntN(100); {
	case k < 16:
		return m.genOpen(true)
	case k < 34:
		return m.genOpen(false)
	case k < 40:
		return m.genTruncate()
	case k < 48:
		return m.genChmod()
	case k < 56:
		return m.genMkdir()
	case k < 62:
		return m.genRmdir()
	case k < 72:
		return m.genUnlink()
	case k < 78:
		return m.genLink()
	case k < 84:
		return m.genSymlink()
	default:
		return m.genRename()
	}
}

func modelFlags(flags int) string {
	var s []string
	switch flags & unix.O_ACCMODE {
	case unix.O_RDONLY:
		s = append(s, "O_RDONLY")
	case unix.O_WRONLY:
		s = append(s, "O_WRONLY")
	default:
		s = append(s, "O_RDWR")
	}
	for _, f := range []struct {
		bit  int
		name string
	}{{unix.O_CREAT, "O_CREAT"}, {unix.O_EXCL, "O_EXCL"}, {unix.O_TRUNC, "O_TRUNC"}, {unix.O_APPEND, "O_APPEND"}} {
		if flags&f.bit != 0 {
			s = append(s, f.name)
		}
	}
	return strings.Join(s, "|")
}

// genOpen opens (or creates) a path and keeps the handle in the table, or
// closes it at once.
func (m *modelState) genOpen(create bool) *modelAction {
	uid, p := m.pickUID(), m.pickPath()
	flags := []int{unix.O_RDONLY, unix.O_WRONLY, unix.O_RDWR, unix.O_RDWR}[m.r.IntN(4)]
	var mode uint32
	if create {
		flags |= unix.O_CREAT
		if m.r.IntN(2) == 0 {
			flags |= unix.O_EXCL
		}
		mode = m.pickFileMode()
	}
	if m.r.IntN(5) == 0 {
		flags |= unix.O_APPEND
	}
	if m.r.IntN(8) == 0 {
		flags |= unix.O_TRUNC
	}
	keep := m.r.IntN(4) != 0
	desc := fmt.Sprintf("open %s %s", p, modelFlags(flags))
	if create {
		desc += fmt.Sprintf(" %#o", mode)
	}
	if !keep {
		desc += " (closed at once)"
	}
	a := &modelAction{uid: uid, desc: desc, paths: []string{p}}
	a.run = func(side int) modelOutcome {
		fd, err := unix.Open(m.path(side, p), flags|unix.O_CLOEXEC, mode)
		if err != nil {
			return modelOutcome{err: err, fd: -1}
		}
		if !keep {
			return modelOutcome{err: unix.Close(fd), fd: -1}
		}
		return modelOutcome{fd: fd}
	}
	a.after = func(mo, ro modelOutcome) {
		if !keep || mo.err != nil {
			return
		}
		if len(m.handles) >= modelMaxHandles {
			// Too many: the oldest goes, on both sides.
			h := m.handles[0]
			m.handles = m.handles[1:]
			unix.Close(h.fd[0])
			unix.Close(h.fd[1])
			m.record(fmt.Sprintf("   (h%d closed: table full)", h.id))
		}
		m.nextID++
		h := &modelHandle{id: m.nextID, uid: uid, path: p, flags: flags, fd: [2]int{mo.fd, ro.fd}}
		m.handles = append(m.handles, h)
		m.record(fmt.Sprintf("   (h%d = that open)", h.id))
		a.h = h
	}
	return a
}

// closeAction closes handle k. It leaves the table at once: a close
// releases the descriptor even when it fails, so it is never closed twice.
func (m *modelState) closeAction(k int) *modelAction {
	h := m.handles[k]
	m.handles = append(m.handles[:k], m.handles[k+1:]...)
	return &modelAction{uid: h.uid, desc: fmt.Sprintf("close h%d(%s)", h.id, h.path),
		run: func(side int) modelOutcome { return modelOutcome{err: unix.Close(h.fd[side]), fd: -1} }}
}

var modelFallocModes = []struct {
	mode int
	name string
}{
	{0, "0"},
	{unix.FALLOC_FL_KEEP_SIZE, "KEEP_SIZE"},
	{unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, "PUNCH_HOLE|KEEP_SIZE"},
	{unix.FALLOC_FL_ZERO_RANGE, "ZERO_RANGE"},
	{unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE, "ZERO_RANGE|KEEP_SIZE"},
	{unix.FALLOC_FL_COLLAPSE_RANGE, "COLLAPSE_RANGE"},
	{unix.FALLOC_FL_INSERT_RANGE, "INSERT_RANGE"},
}

func (m *modelState) genHandleOp(h *modelHandle) *modelAction {
	hs := fmt.Sprintf("h%d(%s %s)", h.id, h.path, modelFlags(h.flags))
	a := &modelAction{uid: h.uid, h: h, paths: []string{h.path}}
	sz := m.refSize(h.fd[1], "")
	switch k := m.r.IntN(100); {
	case k < 8:
		return m.closeAction(modelIndex(m.handles, h))
	case k < 26, k < 34:
		positional := k < 26
		off, data := m.pickOffset(sz), m.randomBytes(m.pickSize())
		if positional {
			a.desc = fmt.Sprintf("pwrite %s off=%d len=%d", hs, off, len(data))
		} else {
			a.desc = fmt.Sprintf("write %s len=%d", hs, len(data))
		}
		a.run = func(side int) modelOutcome {
			var n int
			var err error
			if positional {
				n, err = unix.Pwrite(h.fd[side], data, off)
			} else {
				n, err = unix.Write(h.fd[side], data)
			}
			return modelOutcome{n: int64(n), err: err, fd: -1}
		}
	case k < 52, k < 58:
		positional := k < 52
		off, n := m.pickOffset(sz), m.pickSize()
		if m.r.IntN(3) == 0 {
			off = m.r.Int64N(sz + 1)
		}
		if positional {
			a.desc = fmt.Sprintf("pread %s off=%d len=%d", hs, off, n)
		} else {
			a.desc = fmt.Sprintf("read %s len=%d", hs, n)
		}
		a.run = func(side int) modelOutcome {
			buf := make([]byte, n)
			var got int
			var err error
			if positional {
				got, err = unix.Pread(h.fd[side], buf, off)
			} else {
				got, err = unix.Read(h.fd[side], buf)
			}
			if err != nil {
				return modelOutcome{err: err, fd: -1}
			}
			return modelOutcome{n: int64(got), data: buf[:got], fd: -1}
		}
	case k < 63 && m.refIsReg(h.fd[1]):
		// Regular files only: a directory's offsets are cookies of its
		// file system, which FUSE does not pass on.
		whence := []int{unix.SEEK_SET, unix.SEEK_CUR, unix.SEEK_END}[m.r.IntN(3)]
		off := m.r.Int64N(sz+8192) - 4096
		if whence == unix.SEEK_SET {
			off = m.pickOffset(sz)
		}
		a.desc = fmt.Sprintf("lseek %s %d whence=%d", hs, off, whence)
		a.run = func(side int) modelOutcome {
			n, err := unix.Seek(h.fd[side], off, whence)
			return modelOutcome{n: n, err: err, fd: -1}
		}
	case k < 70:
		a.desc = "fstat " + hs
		a.run = func(side int) modelOutcome {
			var st unix.Stat_t
			if err := unix.Fstat(h.fd[side], &st); err != nil {
				return modelOutcome{err: err, fd: -1}
			}
			return modelOutcome{info: modelStat(&st), fd: -1}
		}
	case k < 78:
		size := m.truncSize(sz)
		a.desc = fmt.Sprintf("ftruncate %s %d", hs, size)
		a.run = func(side int) modelOutcome { return modelOutcome{err: unix.Ftruncate(h.fd[side], size), fd: -1} }
	case k < 82:
		mode := m.pickFileMode()
		a.desc = fmt.Sprintf("fchmod %s %#o", hs, mode)
		a.run = func(side int) modelOutcome { return modelOutcome{err: unix.Fchmod(h.fd[side], mode), fd: -1} }
	case k < 91 || sz == 0:
		fm := modelFallocModes[m.r.IntN(len(modelFallocModes))]
		var off, length int64
		shift := fm.mode == unix.FALLOC_FL_COLLAPSE_RANGE || fm.mode == unix.FALLOC_FL_INSERT_RANGE
		if shift {
			off = 4096 * m.r.Int64N(sz/4096+2)
			length = 4096 * (1 + m.r.Int64N(32))
		} else {
			off = m.pickOffset(sz)
			length = 1 + m.r.Int64N(256<<10)
		}
		a.desc = fmt.Sprintf("fallocate %s %s off=%d len=%d", hs, fm.name, off, length)
		a.run = func(side int) modelOutcome {
			return modelOutcome{err: unix.Fallocate(h.fd[side], uint32(fm.mode), off, length), fd: -1}
		}
		if shift && !*modelStrictFalloc {
			a.skipRef = func(mo modelOutcome) bool {
				if mo.err != unix.EOPNOTSUPP {
					return false
				}
				if !m.warned[fm.name] {
					m.warned[fm.name] = true
					m.t.Logf("the mount refuses fallocate %s with EOPNOTSUPP (the kernel's FUSE client does); "+
						"such ops are not applied to the reference (-model.strict-falloc fails instead)", fm.name)
				}
				return true
			}
		}
	default:
		// A write through a shared mapping of the file, inside its size,
		// made durable with msync: the kernel's own writeback, which
		// reaches sluice without a caller.
		off := m.r.Int64N(sz)
		n := min(int64(m.pickSize()), sz-off)
		data := m.randomBytes(int(n))
		a.desc = fmt.Sprintf("mmap-write %s off=%d len=%d", hs, off, n)
		a.run = func(side int) modelOutcome { return m.mmapWrite(h.fd[side], data, off) }
	}
	return a
}

// mmapWrite writes data at off of fd through a shared mapping and msyncs it.
// The bytes are copied into the mapping by a pread from a memfd, so the
// page faults on the mount are taken inside a system call: a goroutine
// faulting in user code could not stop for the garbage collector while the
// mount, served by this process, waits for it.
func (m *modelState) mmapWrite(fd int, data []byte, off int64) modelOutcome {
	if m.memfd < 0 {
		mfd, err := unix.MemfdCreate("model", unix.MFD_CLOEXEC)
		if err != nil {
			m.t.Fatalf("memfd_create: %v", err)
		}
		m.memfd = mfd
	}
	if _, err := unix.Pwrite(m.memfd, data, 0); err != nil {
		m.t.Fatalf("memfd: %v", err)
	}
	pg := off &^ 4095
	mem, err := unix.Mmap(fd, pg, int(off-pg)+len(data), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return modelOutcome{err: err, fd: -1}
	}
	defer unix.Munmap(mem)
	n, err := unix.Pread(m.memfd, mem[off-pg:], 0)
	if err == nil {
		err = unix.Msync(mem, unix.MS_SYNC)
	}
	return modelOutcome{n: int64(n), err: err, fd: -1}
}

func (m *modelState) refIsReg(fd int) bool {
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFREG
}

func modelIndex(hs []*modelHandle, h *modelHandle) int {
	for i, x := range hs {
		if x == h {
			return i
		}
	}
	return -1
}

func (m *modelState) truncSize(sz int64) int64 {
	switch m.r.IntN(4) {
	case 0:
		return 0
	case 1:
		return m.r.Int64N(sz + 1)
	case 2:
		return sz + 1 + m.r.Int64N(128<<10)
	}
	return 4096 * m.r.Int64N(modelMaxOff/4096)
}

func modelStat(st *unix.Stat_t) string {
	return fmt.Sprintf("type=%#o mode=%#o size=%d nlink=%d uid=%d gid=%d",
		st.Mode&unix.S_IFMT, st.Mode&0o7777, st.Size, st.Nlink, st.Uid, st.Gid)
}

func (m *modelState) pathAction(desc string, fn func(side int) error, paths ...string) *modelAction {
	return &modelAction{uid: m.pickUID(), desc: desc, paths: paths,
		run: func(side int) modelOutcome { return modelOutcome{err: fn(side), fd: -1} }}
}

func (m *modelState) genTruncate() *modelAction {
	p := m.pickPath()
	size := m.truncSize(m.refSize(-1, p))
	return m.pathAction(fmt.Sprintf("truncate %s %d", p, size), func(side int) error {
		return unix.Truncate(m.path(side, p), size)
	}, p)
}

func (m *modelState) genChmod() *modelAction {
	p := m.pickPath()
	var mode uint32
	if m.r.IntN(2) == 0 {
		mode = m.pickFileMode()
	} else {
		mode = m.pickDirMode()
	}
	return m.pathAction(fmt.Sprintf("chmod %s %#o", p, mode), func(side int) error {
		return unix.Chmod(m.path(side, p), mode)
	}, p)
}

func (m *modelState) genMkdir() *modelAction {
	p, mode := m.pickPath(), m.pickDirMode()
	return m.pathAction(fmt.Sprintf("mkdir %s %#o", p, mode), func(side int) error {
		return unix.Mkdir(m.path(side, p), mode)
	}, p)
}

func (m *modelState) genRmdir() *modelAction {
	p := m.pickPath()
	return m.pathAction("rmdir "+p, func(side int) error { return unix.Rmdir(m.path(side, p)) }, p)
}

func (m *modelState) genUnlink() *modelAction {
	p := m.pickPath()
	return m.pathAction("unlink "+p, func(side int) error { return unix.Unlink(m.path(side, p)) }, p)
}

func (m *modelState) genLink() *modelAction {
	p, q := m.pickPath(), m.pickPath()
	return m.pathAction(fmt.Sprintf("link %s %s", p, q), func(side int) error {
		return unix.Link(m.path(side, p), m.path(side, q))
	}, p, q)
}

func (m *modelState) genSymlink() *modelAction {
	target, p := modelTargets[m.r.IntN(len(modelTargets))], m.pickPath()
	return m.pathAction(fmt.Sprintf("symlink %s -> %s", p, target), func(side int) error {
		return unix.Symlink(target, m.path(side, p))
	}, p)
}

func (m *modelState) genRename() *modelAction {
	p, q := m.pickPath(), m.pickPath()
	var flags uint
	name := "0"
	switch m.r.IntN(4) {
	case 0:
		flags, name = unix.RENAME_NOREPLACE, "NOREPLACE"
	case 1:
		flags, name = unix.RENAME_EXCHANGE, "EXCHANGE"
	}
	return m.pathAction(fmt.Sprintf("rename %s %s %s", p, q, name), func(side int) error {
		return unix.Renameat2(unix.AT_FDCWD, m.path(side, p), unix.AT_FDCWD, m.path(side, q), flags)
	}, p, q)
}

// ---------------------------------------------------------------- trees

// modelEntry is what the model compares of one path.
type modelEntry struct {
	stat   string
	target string
	names  string
	data   []byte
	err    string
}

// modelEntryOf describes path p: its attributes and symlink target, and with
// full also a directory's entries or a regular file's bytes.
func modelEntryOf(p string, full bool) (modelEntry, []string) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return modelEntry{err: "lstat: " + modelErrno(err)}, nil
	}
	e := modelEntry{stat: modelStat(&st)}
	var names []string
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		t, err := os.Readlink(p)
		if err != nil {
			e.err = "readlink: " + modelErrno(err)
		}
		e.target = t
	case unix.S_IFREG:
		if full {
			b, err := os.ReadFile(p)
			if err != nil {
				e.err = "read: " + modelErrno(err)
			}
			e.data = b
		}
	case unix.S_IFDIR:
		if full {
			ents, err := os.ReadDir(p)
			if err != nil {
				e.err = "readdir: " + modelErrno(err)
			}
			for _, d := range ents {
				names = append(names, d.Name())
			}
			e.names = strings.Join(names, ",")
		}
	}
	return e, names
}

// modelSnapshot describes every path under root, contents included.
func modelSnapshot(root string) map[string]modelEntry {
	out := map[string]modelEntry{}
	var walk func(rel string)
	walk = func(rel string) {
		e, names := modelEntryOf(filepath.Join(root, rel), true)
		out[rel] = e
		for _, n := range names {
			walk(filepath.Join(rel, n))
		}
	}
	walk(".")
	return out
}

// spot compares, right after an op, the attributes of the paths it named
// and of their parents, and of the handle it used; cheap enough for every
// op, where a whole tree is compared every modelFullEvery ops.
func (m *modelState) spot(i int, a *modelAction) {
	m.t.Helper()
	var rels []string
	seen := map[string]bool{}
	for _, p := range a.paths {
		for ; p != "." && !seen[p]; p = filepath.Dir(p) {
			seen[p] = true
			rels = append(rels, p)
		}
	}
	sort.Strings(rels)
	h := a.h
	if h != nil && modelIndex(m.handles, h) < 0 {
		h = nil // closed by the op
	}
	var ents [2][]modelEntry
	var fst [2]string
	m.onWorker(0, fmt.Sprintf("comparison after op #%d", i), func() {
		for side := range 2 {
			for _, p := range rels {
				e, _ := modelEntryOf(m.path(side, p), false)
				ents[side] = append(ents[side], e)
			}
			if h != nil {
				var st unix.Stat_t
				if err := unix.Fstat(h.fd[side], &st); err != nil {
					fst[side] = "fstat: " + modelErrno(err)
				} else {
					fst[side] = modelStat(&st)
				}
			}
		}
	})
	var diffs []string
	for k, p := range rels {
		diffs = append(diffs, modelDiffEntry(p, "mount", ents[0][k], ents[1][k], false)...)
	}
	if fst[0] != fst[1] {
		diffs = append(diffs, fmt.Sprintf("fstat h%d: mount %s\n      reference %s", h.id, fst[0], fst[1]))
	}
	if len(diffs) > 0 {
		m.fail(fmt.Sprintf("after op #%d the mount differs from the reference:\n    %s", i, strings.Join(diffs, "\n    ")))
	}
}

func modelDiffEntry(p, what string, ea, eb modelEntry, full bool) []string {
	var diffs []string
	if ea.err != eb.err {
		diffs = append(diffs, fmt.Sprintf("%s: %s error %q, reference %q", p, what, ea.err, eb.err))
	}
	if ea.stat != eb.stat {
		diffs = append(diffs, fmt.Sprintf("%s: %s %s\n      reference %s", p, what, ea.stat, eb.stat))
	}
	if ea.target != eb.target {
		diffs = append(diffs, fmt.Sprintf("%s: symlink target %q on the %s, %q on the reference", p, ea.target, what, eb.target))
	}
	if ea.names != eb.names {
		diffs = append(diffs, fmt.Sprintf("%s: entries [%s] on the %s, [%s] on the reference", p, ea.names, what, eb.names))
	}
	if full && !bytes.Equal(ea.data, eb.data) {
		diffs = append(diffs, fmt.Sprintf("%s: contents differ (%s vs reference): %s", p, what, modelFirstDiff(ea.data, eb.data)))
	}
	return diffs
}

// check compares the whole of the mount's tree with the reference's.
func (m *modelState) check(i int) {
	m.t.Helper()
	m.compareTrees(i, "mount", m.root[0], m.root[1])
}

func (m *modelState) compareTrees(i int, what, a, b string) {
	m.t.Helper()
	var sa, sb map[string]modelEntry
	m.onWorker(0, fmt.Sprintf("tree comparison after op #%d", i), func() {
		sa, sb = modelSnapshot(a), modelSnapshot(b)
	})
	keys := map[string]bool{}
	for k := range sa {
		keys[k] = true
	}
	for k := range sb {
		keys[k] = true
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	var diffs []string
	for _, k := range sorted {
		ea, oka := sa[k]
		eb, okb := sb[k]
		switch {
		case !oka:
			diffs = append(diffs, fmt.Sprintf("%s: missing on the %s, reference has %s", k, what, eb.stat))
		case !okb:
			diffs = append(diffs, fmt.Sprintf("%s: on the %s (%s), not on the reference", k, what, ea.stat))
		default:
			diffs = append(diffs, modelDiffEntry(k, what, ea, eb, true)...)
		}
	}
	if len(diffs) > 0 {
		m.fail(fmt.Sprintf("tree comparison after op #%d: the %s differs from the reference:\n    %s",
			i, what, strings.Join(diffs, "\n    ")))
	}
}
