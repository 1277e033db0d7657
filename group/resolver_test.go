package group

import (
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"
)

// fakeProc is a /proc whose contents a test sets, counting reads.
type fakeProc struct {
	mu         sync.Mutex
	tgid       map[int32]int32
	facts      map[int32]Facts
	ids        map[int32]uint64 // Ident of each thread or process id; 0 if not set
	tgidReads  int
	factsReads int
	identReads int
	lastNeed   Need
}

func (f *fakeProc) ident(id int32) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.identReads++
	return f.ids[id], nil
}

// reuse gives id to a new thread (or process): its Ident changes.
func (f *fakeProc) reuse(id int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = map[int32]uint64{}
	}
	f.ids[id]++
}

func (f *fakeProc) readTgid(tid int32) (int32, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.tgidReads++
	if pid, ok := f.tgid[tid]; ok {
		return pid, nil
	}
	return 0, errors.New("no such thread")
}

func (f *fakeProc) readFacts(pid int32, need Need) (Facts, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.factsReads++
	f.lastNeed = need
	if x, ok := f.facts[pid]; ok {
		return x, nil
	}
	return Facts{}, errors.New("no such process")
}

func (f *fakeProc) reads() (int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tgidReads, f.factsReads
}

func newFake(t *testing.T, rules ...string) (*Resolver, *fakeProc) {
	f := &fakeProc{
		// Process 100 has threads 100, 101, 102; process 200 is single-threaded.
		tgid: map[int32]int32{100: 100, 101: 100, 102: 100, 200: 200},
		facts: map[int32]Facts{
			100: {Comm: "rsync", Cgroups: []string{"/system.slice/backup.service"}, Groups: []uint32{50}},
			200: {Comm: "make"},
			// Thread 101's own name; never to be read, since facts go by process.
			101: {Comm: "rsync-worker"},
		},
	}
	r := NewResolver(mustRules(t, rules...))
	r.ReadTgid, r.ReadFacts, r.Ident = f.readTgid, f.readFacts, f.ident
	return r, f
}

const ms = int64(time.Millisecond)

func TestResolverCaches(t *testing.T) {
	r, f := newFake(t, "sync comm=rsync", "build comm=make")
	check := func(now int64, tid uint32, want string, wantTgid, wantFacts int) {
		t.Helper()
		if got := r.Group(now, 1000, 1000, tid); got != want {
			t.Errorf("Group(%d, tid %d) = %q; want %q", now, tid, got, want)
		}
		if tr, fr := f.reads(); tr != wantTgid || fr != wantFacts {
			t.Errorf("after Group(%d, tid %d): %d tgid reads, %d facts reads; want %d, %d", now, tid, tr, fr, wantTgid, wantFacts)
		}
	}
	check(0, 101, "sync", 1, 1)     // thread 101 → process 100 → rsync
	check(10*ms, 101, "sync", 1, 1) // both cached
	check(20*ms, 102, "sync", 2, 1) // new thread, same process: facts cached
	check(30*ms, 100, "sync", 3, 1)
	check(40*ms, 200, "build", 4, 2)
	check(999*ms, 101, "sync", 4, 2)  // still within 1s of the reads at 0
	check(1000*ms, 101, "sync", 5, 3) // TTL reached: both read again
	check(1001*ms, 102, "sync", 5, 3) // 102's tgid was read at 20ms; facts at 1000ms
	check(1020*ms, 102, "sync", 6, 3)

	// The process renames itself; the change shows once its facts expire.
	f.mu.Lock()
	f.facts[100] = Facts{Comm: "make"}
	f.mu.Unlock()
	check(1500*ms, 101, "sync", 6, 3)
	check(2000*ms, 101, "build", 7, 4)

	// Time going backwards makes entries stale rather than fresh forever.
	check(1*ms, 101, "build", 8, 5)
	if f.lastNeed != (Need{Comm: true}) {
		t.Errorf("read %+v; want only comm", f.lastNeed)
	}
}

func TestResolverTidZeroAndUnknown(t *testing.T) {
	r, f := newFake(t, "sync comm=rsync", "root uid=0", "staff gid=50")
	if got := r.Group(0, 0, 0, 0); got != "root" {
		t.Errorf("tid 0, uid 0: %q", got)
	}
	if got := r.Group(0, 5, 5, 0); got != "default" {
		t.Errorf("tid 0, uid 5: %q", got)
	}
	if got := r.Group(0, 5, 50, 0); got != "staff" {
		t.Errorf("tid 0, gid 50: %q", got)
	}
	if tr, fr := f.reads(); tr != 0 || fr != 0 {
		t.Errorf("tid 0 read /proc: %d, %d", tr, fr)
	}
	// A thread that is gone classifies by ids, and the failure is cached.
	for i := range 3 {
		if got := r.Group(int64(i)*ms, 5, 5, 999); got != "default" {
			t.Errorf("unknown tid: %q", got)
		}
	}
	if tr, fr := f.reads(); tr != 1 || fr != 0 {
		t.Errorf("unknown tid: %d tgid reads, %d facts reads; want 1, 0", tr, fr)
	}
	// Supplementary groups from /proc.
	if got := r.Group(0, 5, 5, 101); got != "sync" {
		t.Errorf("tid 101: %q", got)
	}
	if f.lastNeed != (Need{Comm: true, Groups: true}) {
		t.Errorf("read %+v; want comm and groups", f.lastNeed)
	}
}

func TestResolverNoProcRules(t *testing.T) {
	r, f := newFake(t, "a uid=1000", "b uid=1")
	if got := r.Group(0, 1000, 0, 101); got != "a" {
		t.Errorf("Group = %q", got)
	}
	if tr, fr := f.reads(); tr != 0 || fr != 0 || f.identReads != 0 {
		t.Errorf("uid-only rules read /proc: %d, %d, %d idents", tr, fr, f.identReads)
	}
	// Nor does an empty set of tags.
	r.Tags = &Tags{}
	r.Group(0, 1000, 0, 101)
	if tr, fr := f.reads(); tr != 0 || fr != 0 || f.identReads != 0 {
		t.Errorf("uid-only rules with no tags read /proc: %d, %d, %d idents", tr, fr, f.identReads)
	}
}

// TestResolverReuse: an id that a new thread or process has taken over
// within the TTL is resolved anew, never answered from what was read for
// the one before: a cached entry holds the Ident of what it was read for.
func TestResolverReuse(t *testing.T) {
	r, f := newFake(t, "sync comm=rsync", "build comm=make")
	check := func(now int64, tid uint32, want string, wantTgid, wantFacts int) {
		t.Helper()
		if got := r.Group(now, 1000, 1000, tid); got != want {
			t.Errorf("Group(%d, tid %d) = %q; want %q", now, tid, got, want)
		}
		if tr, fr := f.reads(); tr != wantTgid || fr != wantFacts {
			t.Errorf("after Group(%d, tid %d): %d tgid reads, %d facts reads; want %d, %d", now, tid, tr, fr, wantTgid, wantFacts)
		}
	}
	check(0, 101, "sync", 1, 1)
	check(10*ms, 101, "sync", 1, 1) // cached
	check(0, 200, "build", 2, 2)

	// Process 100 (rsync) exits; thread id 101 goes to a thread of new
	// process 300 (make).
	f.mu.Lock()
	delete(f.tgid, 100)
	delete(f.facts, 100)
	f.tgid[101], f.facts[300] = 300, Facts{Comm: "make"}
	f.mu.Unlock()
	f.reuse(101)
	check(20*ms, 101, "build", 3, 3)
	check(30*ms, 101, "build", 3, 3) // the new thread's entry is cached in turn

	// Process 200 (make) exits and a new process 200 (rsync) starts:
	// thread and process id both reused.
	f.mu.Lock()
	f.facts[200] = Facts{Comm: "rsync"}
	f.mu.Unlock()
	f.reuse(200)
	check(40*ms, 200, "sync", 4, 4)

	// A thread of process 200 whose own entry is fresh, but whose
	// process's id was taken over: the thread is new too, since a thread
	// does not outlive its process, and both are read again.
	f.mu.Lock()
	f.tgid[201] = 200
	f.mu.Unlock()
	check(50*ms, 201, "sync", 5, 4)
	f.mu.Lock()
	f.facts[200] = Facts{Comm: "make"}
	f.mu.Unlock()
	f.reuse(200)
	f.reuse(201)
	check(60*ms, 201, "build", 6, 5)

	// Supplementary groups follow the thread in the same way.
	gs := map[int32][]uint32{101: {50}}
	r.ReadGroups = func(tid int32) ([]uint32, error) { return gs[tid], nil }
	if g := r.Groups(70*ms, 101); len(g) != 1 || g[0] != 50 {
		t.Fatalf("groups of thread 101: %v", g)
	}
	gs[101] = []uint32{60}
	if g := r.Groups(80*ms, 101); g[0] != 50 {
		t.Fatalf("groups of thread 101 within the TTL: %v, want the cached [50]", g)
	}
	f.reuse(101)
	if g := r.Groups(90*ms, 101); g[0] != 60 {
		t.Errorf("groups of a new thread 101 within the TTL: %v, want [60]", g)
	}
}

// TestResolverReuseTagged: a process that takes over the id of a tagged
// process, or of a thread of one, is not in the tag's group, though the
// tagged one's answer is still cached.
func TestResolverReuseTagged(t *testing.T) {
	r, f := newFake(t, "build comm=make")
	type proc struct {
		ppid  int32
		start uint64
	}
	procs := map[int32]proc{1: {0, 1}, 100: {1, 10}, 200: {1, 20}}
	r.Tags = &Tags{
		ReadStat: func(pid int32) (int32, uint64, error) {
			p, ok := procs[pid]
			if !ok {
				return 0, 0, errors.New("no such process")
			}
			return p.ppid, p.start, nil
		},
		ReadCgroup: func(int32) (string, error) { return "", nil },
	}
	if err := r.Tags.Tag(100, "batch"); err != nil {
		t.Fatal(err)
	}
	if g := r.Group(0, 1000, 1000, 101); g != "batch" {
		t.Fatalf("thread 101 of tagged process 100: %q", g)
	}
	// Process 100 exits; a new process 100 (make) starts, not a
	// descendant of the tagged one.
	procs[100] = proc{1, 99}
	f.mu.Lock()
	f.facts[100] = Facts{Comm: "make"}
	f.mu.Unlock()
	f.reuse(100)
	f.reuse(101)
	if g := r.Group(10*ms, 1000, 1000, 101); g != "build" {
		t.Errorf("a new process reusing a tagged id, within the TTL: %q, want build", g)
	}
	if g := r.Group(20*ms, 1000, 1000, 100); g != "build" {
		t.Errorf("a new process reusing a tagged id, within the TTL: %q, want build", g)
	}
}

func TestResolverNoCache(t *testing.T) {
	r, f := newFake(t, "sync comm=rsync")
	r.TTL = -1
	for range 3 {
		r.Group(0, 0, 0, 101)
	}
	if tr, fr := f.reads(); tr != 3 || fr != 3 {
		t.Errorf("TTL<0: %d, %d reads; want 3, 3", tr, fr)
	}
}

func TestResolverBound(t *testing.T) {
	r, f := newFake(t, "sync comm=rsync")
	r.MaxEntries = 8
	for tid := int32(1000); tid < 1100; tid++ {
		f.tgid[tid] = 100
		r.Group(0, 0, 0, uint32(tid))
		if n := len(r.tgids); n > 8 {
			t.Fatalf("%d tid entries; want at most 8", n)
		}
	}
	// The newest entry survives eviction.
	tr, _ := f.reads()
	r.Group(0, 0, 0, 1099)
	if tr2, _ := f.reads(); tr2 != tr {
		t.Errorf("newest entry was evicted")
	}
}

func TestResolverConcurrent(t *testing.T) {
	r, f := newFake(t, "sync comm=rsync", "build comm=make")
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				tid := []uint32{100, 101, 102, 200, 0}[(g+i)%5]
				want := map[uint32]string{100: "sync", 101: "sync", 102: "sync", 200: "build", 0: "default"}[tid]
				if got := r.Group(int64(i)*ms, 1, 1, tid); got != want {
					panic(fmt.Sprintf("tid %d: %q; want %q", tid, got, want))
				}
			}
		})
	}
	wg.Wait()
	if _, fr := f.reads(); fr == 0 {
		t.Errorf("no reads")
	}
}

// TestResolverGroups: a caller's supplementary groups are its thread's
// own, read once per thread within the TTL and again after it.
func TestResolverGroups(t *testing.T) {
	r := NewResolver(mustRules(t, "tenant uid=7"))
	r.Ident = func(int32) (uint64, error) { return 0, nil }
	reads := 0
	r.ReadGroups = func(tid int32) ([]uint32, error) {
		reads++
		if tid == 101 {
			return []uint32{50}, nil
		}
		return nil, errors.New("no such thread")
	}
	sec := int64(time.Second)
	if g := r.Groups(0, 101); len(g) != 1 || g[0] != 50 {
		t.Fatalf("Groups of thread 101 = %v, want [50]", g)
	}
	if g := r.Groups(sec/2, 101); len(g) != 1 || reads != 1 {
		t.Fatalf("within the TTL: %v after %d reads, want [50] after 1", g, reads)
	}
	r.Groups(2*sec, 101)
	if reads != 2 {
		t.Fatalf("%d reads after the TTL, want 2", reads)
	}
	if g := r.Groups(2*sec, 102); g != nil {
		t.Fatalf("Groups of an unreadable thread = %v, want none", g)
	}
	if g := r.Groups(2*sec, 0); g != nil || reads != 3 {
		t.Fatalf("Groups of tid 0 = %v after %d reads, want none and no read", g, reads)
	}
}

// The per-request cost of classifying by /proc: a cached answer (with the
// thread's Ident taken, as on every request), against what an Ident and
// a read of /proc/PID/stat each cost.
func BenchmarkResolverCached(b *testing.B) {
	r := NewResolver(&Classifier{Rules: []Rule{{Group: "sync", Comm: "rsync"}}})
	tid := uint32(syscall.Gettid())
	r.Group(0, 1, 1, tid)
	for b.Loop() {
		r.Group(1, 1, 1, tid)
	}
}

func BenchmarkIdent(b *testing.B) {
	tid := int32(syscall.Gettid())
	for b.Loop() {
		Ident(tid)
	}
}

func BenchmarkReadStat(b *testing.B) {
	tid := int32(syscall.Gettid())
	for b.Loop() {
		ReadStat(tid)
	}
}
