package backing

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

func newFaultTree(t *testing.T, inner Tree, opts FaultOptions) *FaultTree {
	t.Helper()
	ft, err := NewFaultTree(inner, opts)
	if err != nil {
		t.Fatal(err)
	}
	return ft
}

// TestFaultTreeRules: a rule fires for its operations on the paths its
// pattern matches, and only there; the faulted operation does not reach
// the inner tree; paths follow renames, of the object and of a directory
// above it; the files and directories opened through the tree are
// faulted by the path of their object.
func TestFaultTreeRules(t *testing.T) {
	mem := NewMemTree(MemOptions{})
	ft := newFaultTree(t, mem, FaultOptions{Rules: []FaultRule{
		{Ops: OpCreate | OpMkdir, Path: "d/*.tmp", Err: syscall.EROFS},
		{Ops: OpRead | OpReaddir, Path: "d/**", Err: syscall.EIO},
		{Ops: OpXattr, Path: "x", Err: syscall.ENOTSUP},
	}})
	me := &Cred{}
	d, err := ft.Mkdir(me, RootID, "d", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := ft.Create(me, d.ID, "a.tmp", syscall.O_RDWR, 0o644); err != syscall.EROFS {
		t.Fatalf("create d/a.tmp: %v, want EROFS", err)
	}
	if _, err := mem.Lookup(d.ID, "a.tmp"); err != syscall.ENOENT {
		t.Fatalf("the faulted create reached the tree: lookup %v", err)
	}
	if _, err := ft.Mkdir(me, d.ID, "b.tmp", 0o755); err != syscall.EROFS {
		t.Fatalf("mkdir d/b.tmp: %v, want EROFS", err)
	}
	if _, _, err := ft.Create(me, RootID, "a.tmp", syscall.O_RDWR, 0o644); err != nil {
		t.Fatalf("create a.tmp, outside d: %v", err)
	}
	e, f, err := ft.Create(me, d.ID, "f", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Fd() != -1 {
		t.Errorf("a file opened through the fault tree has descriptor %d, want -1", f.Fd())
	}
	if _, err := f.WriteAt([]byte("data"), 0); err != nil {
		t.Fatalf("write d/f: %v", err)
	}
	b := make([]byte, 4)
	if _, err := f.ReadAt(b, 0); err != syscall.EIO {
		t.Fatalf("read d/f: %v, want EIO", err)
	}
	if dir, err := ft.OpenDir(d.ID); err != nil {
		t.Fatal(err)
	} else {
		if _, _, err := dir.Peek(); err != syscall.EIO {
			t.Errorf("readdir d: %v, want EIO", err)
		}
		dir.Close()
	}
	// The file moves out of d: its reads go through.
	if err := ft.Rename(d.ID, "f", RootID, "f", 0); err != nil {
		t.Fatal(err)
	}
	if n, err := f.ReadAt(b, 0); err != nil || string(b[:n]) != "data" {
		t.Fatalf("read of f moved out of d: %q, %v", b[:n], err)
	}
	// A directory moved under d takes what it holds along.
	s, err := ft.Mkdir(me, RootID, "s", 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if err := ft.Rename(RootID, "f", s.ID, "f", 0); err != nil {
		t.Fatal(err)
	}
	if err := ft.Rename(RootID, "s", d.ID, "s", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(b, 0); err != syscall.EIO {
		t.Fatalf("read of d/s/f: %v, want EIO", err)
	}
	g, err := ft.Open(e.ID, syscall.O_RDONLY)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.ReadAt(b, 0); err != syscall.EIO {
		t.Fatalf("read of d/s/f opened again: %v, want EIO", err)
	}
	g.Close()
	// The operation decides as much as the path.
	if _, err := ft.Getattr(e.ID); err != nil {
		t.Fatalf("getattr d/s/f: %v", err)
	}
	x, err := ft.Mknod(me, RootID, "x", syscall.S_IFREG|0o644, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := ft.Setxattr(x.ID, "user.a", nil, 0); err != syscall.ENOTSUP {
		t.Fatalf("setxattr x: %v, want ENOTSUP", err)
	}
	if err := ft.Setxattr(e.ID, "user.a", nil, 0); err != nil {
		t.Fatalf("setxattr d/s/f: %v", err)
	}
	if got := ft.Fired(); got[0] != 2 || got[1] != 4 || got[2] != 1 {
		t.Errorf("rules fired %v times, want [2 4 1]", got)
	}
}

// TestFaultTreeAfter: a rule with After lets that many matching
// operations through, then fires (Limit times when set), and counts only
// the operations it matches.
func TestFaultTreeAfter(t *testing.T) {
	mem := NewMemTree(MemOptions{})
	ft := newFaultTree(t, mem, FaultOptions{Rules: []FaultRule{
		{Ops: OpRead, Path: "f", Err: syscall.EIO, After: 3, Limit: 2},
	}})
	me := &Cred{}
	_, f, err := ft.Create(me, RootID, "f", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, g, err := ft.Create(me, RootID, "g", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	f.WriteAt([]byte("data"), 0)
	b := make([]byte, 4)
	var got []string
	for i := range 7 {
		if i == 1 {
			g.ReadAt(b, 0) // another path: not counted
		}
		_, err := f.ReadAt(b, 0)
		got = append(got, errnoName(err))
	}
	if s := strings.Join(got, " "); s != "ok ok ok EIO EIO ok ok" {
		t.Errorf("reads of f with After 3, Limit 2: %s, want ok ok ok EIO EIO ok ok", s)
	}
}

// errnoName names an error for a test's table: "ok" for nil.
func errnoName(err error) string {
	if err == nil {
		return "ok"
	}
	if e, ok := err.(syscall.Errno); ok && e == syscall.EIO {
		return "EIO"
	}
	return err.Error()
}

// TestFaultTreeSeed: a rule with a chance faults the same operations for
// the same seed, other ones for another seed, and about the share asked.
func TestFaultTreeSeed(t *testing.T) {
	pattern := func(seed uint64) string {
		ft := newFaultTree(t, NewMemTree(MemOptions{}), FaultOptions{Seed: seed, Rules: []FaultRule{
			{Ops: OpGetattr, Prob: 0.25, Err: syscall.EIO},
			{Ops: OpStatfs, Err: syscall.EIO}, // draws nothing
		}})
		var b strings.Builder
		for range 400 {
			ft.Statfs(RootID)
			if _, err := ft.Getattr(RootID); err != nil {
				b.WriteByte('x')
			} else {
				b.WriteByte('.')
			}
		}
		return b.String()
	}
	a, b, c := pattern(1), pattern(1), pattern(2)
	if a != b {
		t.Fatalf("seed 1 twice gave two patterns:\n%s\n%s", a, b)
	}
	if a == c {
		t.Fatalf("seeds 1 and 2 gave the same pattern %s", a)
	}
	if n := strings.Count(a, "x"); n < 60 || n > 140 {
		t.Errorf("%d of 400 operations faulted at a chance of 0.25", n)
	}
}

// TestFaultTreeDelays: every matching rule applies in order, their
// delays summed into one call of the sleep function given, until the
// first with an error, whose error the operation returns; a rule stops
// at its limit; SetRules changes the rules of a live tree.
func TestFaultTreeDelays(t *testing.T) {
	var slept []time.Duration
	ft := newFaultTree(t, NewMemTree(MemOptions{}), FaultOptions{
		Sleep: func(d time.Duration) { slept = append(slept, d) },
		Rules: []FaultRule{
			{Ops: OpWrite | OpSync, Delay: 5 * time.Millisecond},
			{Ops: OpAny, Path: "slow", Delay: time.Second, Limit: 2},
			{Ops: OpSync, Err: syscall.EIO},
			{Ops: OpSync, Delay: time.Hour}, // after an error: never consulted
		},
	})
	_, f, err := ft.Create(&Cred{}, RootID, "slow", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	want := []time.Duration{time.Second} // the create
	if _, err := f.WriteAt([]byte("x"), 0); err != nil {
		t.Fatal(err)
	}
	want = append(want, time.Second+5*time.Millisecond)
	if err := f.Sync(false); err != syscall.EIO {
		t.Fatalf("sync: %v, want EIO", err)
	}
	want = append(want, 5*time.Millisecond) // the second rule is spent
	if _, err := f.ReadAt(make([]byte, 1), 0); err != nil {
		t.Fatal(err)
	}
	if len(slept) != len(want) {
		t.Fatalf("slept %v, want %v", slept, want)
	}
	for i := range want {
		if slept[i] != want[i] {
			t.Fatalf("slept %v, want %v", slept, want)
		}
	}
	if got := ft.Fired(); got[0] != 2 || got[1] != 2 || got[2] != 1 || got[3] != 0 {
		t.Errorf("rules fired %v times, want [2 2 1 0]", got)
	}
	if err := ft.SetRules(); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(false); err != nil {
		t.Fatalf("sync with no rules: %v", err)
	}
}

// TestFaultTreeVirtualTime: with the default sleep, a delay passes on
// the clock of a synctest bubble, all of it and no more.
func TestFaultTreeVirtualTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ft := newFaultTree(t, NewMemTree(MemOptions{}), FaultOptions{Rules: []FaultRule{
			{Ops: OpLookup, Delay: 10 * time.Second, Err: syscall.ETIMEDOUT},
		}})
		start := time.Now()
		if _, err := ft.Lookup(RootID, "x"); err != syscall.ETIMEDOUT {
			t.Fatalf("lookup: %v, want ETIMEDOUT", err)
		}
		if d := time.Since(start); d != 10*time.Second {
			t.Fatalf("the lookup took %v, want 10s", d)
		}
	})
}

// TestFaultTreeLocal: a fault tree over a Local tree wraps its files: no
// descriptor, no read past the cache, and a truncate through Setattr of
// a wrapped file reaches the file.
func TestFaultTreeLocal(t *testing.T) {
	local, err := NewLocal(t.TempDir(), LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ft := newFaultTree(t, local, FaultOptions{})
	defer ft.Close()
	e, f, err := ft.Create(&Cred{Uid: uint32(syscall.Geteuid()), Gid: uint32(syscall.Getegid())}, RootID, "f", syscall.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Fd() != -1 {
		t.Errorf("descriptor %d, want -1", f.Fd())
	}
	if _, err := f.WriteAt(make([]byte, 3*ColdAlign), 0); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := f.ReadCold(make([]byte, ColdAlign), 0); ok {
		t.Error("a wrapped file read past the cache")
	}
	st, err := ft.Setattr(e.ID, f, SetAttr{Size: u64(5)})
	if err != nil || st.Size != 5 {
		t.Fatalf("truncate through the wrapped file: size %d, %v", st.Size, err)
	}
}

// TestFaultRuleValidate: invalid rules are refused, naming the field.
func TestFaultRuleValidate(t *testing.T) {
	for _, tc := range []struct {
		rule FaultRule
		want string
	}{
		{FaultRule{}, "Ops"},
		{FaultRule{Ops: OpAny + 1}, "Ops"},
		{FaultRule{Ops: OpRead, Prob: 1.5}, "Prob"},
		{FaultRule{Ops: OpRead, Delay: -1}, "Delay"},
		{FaultRule{Ops: OpRead, Limit: -1}, "Limit"},
		{FaultRule{Ops: OpRead, After: -1}, "After"},
		{FaultRule{Ops: OpRead, Path: "a/["}, "Path"},
	} {
		_, err := NewFaultTree(NewMemTree(MemOptions{}), FaultOptions{Rules: []FaultRule{{Ops: OpRead}, tc.rule}})
		if err == nil || !strings.Contains(err.Error(), "rule 1: FaultRule."+tc.want) {
			t.Errorf("%+v: %v, want an error about %s", tc.rule, err, tc.want)
		}
	}
	if s := (OpRead | OpWrite).String(); s != "read|write" {
		t.Errorf("OpRead|OpWrite is %q", s)
	}
}

// TestFaultTreeSerial: a Serial rule serves its delay one operation at a
// time, as a disk: eight reads sent together at 1 ms each finish 1 ms
// apart, the last after 8 ms (on a synctest bubble's clock), where a rule
// that is not Serial holds each for its own 1 ms.
func TestFaultTreeSerial(t *testing.T) {
	for _, serial := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			ft := newFaultTree(t, NewMemTree(MemOptions{}), FaultOptions{Rules: []FaultRule{
				{Ops: OpRead, Delay: time.Millisecond, Serial: serial},
			}})
			_, f, err := ft.Create(&Cred{}, RootID, "disk", syscall.O_RDWR, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			done := readTimes([]*File{f}, 8)
			for i, d := range done {
				want := time.Millisecond
				if serial {
					want = time.Duration(i+1) * time.Millisecond
				}
				if d != want {
					t.Fatalf("serial %v: reads finished at %v, want the %dth at %v", serial, done, i+1, want)
				}
			}
		})
	}
}

// TestFaultTreeSharedDisk: the Serial rules of two trees given one Disk
// serve one read at a time between them: four reads on each, sent
// together at 1 ms each, finish 1 ms apart, the last after 8 ms.
func TestFaultTreeSharedDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		disk := NewDisk()
		var files []*File
		for i := range 2 {
			ft := newFaultTree(t, NewMemTree(MemOptions{}), FaultOptions{Rules: []FaultRule{
				{Ops: OpRead, Delay: time.Millisecond, Serial: true, Disk: disk},
			}})
			_, f, err := ft.Create(&Cred{}, RootID, fmt.Sprint("disk", i), syscall.O_RDWR, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			files = append(files, f)
		}
		done := readTimes(files, 8)
		for i, d := range done {
			if want := time.Duration(i+1) * time.Millisecond; d != want {
				t.Fatalf("reads on two trees of one disk finished at %v, want the %dth at %v", done, i+1, want)
			}
		}
	})
}

// readTimes reads a byte of each of files in turn, n reads sent together,
// and returns when each finished after they were sent, sorted.
func readTimes(files []*File, n int) []time.Duration {
	start := time.Now()
	var mu sync.Mutex
	var done []time.Duration
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			files[i%len(files)].ReadAt(make([]byte, 1), 0)
			mu.Lock()
			done = append(done, time.Since(start))
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(done)
	return done
}
