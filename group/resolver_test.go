package group

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeProc is a /proc whose contents a test sets, counting reads.
type fakeProc struct {
	mu         sync.Mutex
	tgid       map[int32]int32
	facts      map[int32]Facts
	tgidReads  int
	factsReads int
	lastNeed   Need
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
	r.ReadTgid, r.ReadFacts = f.readTgid, f.readFacts
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
	if tr, fr := f.reads(); tr != 0 || fr != 0 {
		t.Errorf("uid-only rules read /proc: %d, %d", tr, fr)
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
