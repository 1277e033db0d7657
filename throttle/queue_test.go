package throttle

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// TestFairnessByBytes keeps groups of very different request sizes
// backlogged under a saturated ancestor for 100 simulated seconds: they
// receive equal bytes (to within one large request per level), not equal
// request counts, at every level of the tree.
func TestFairnessByBytes(t *testing.T) {
	const T = 100 * sec
	type load struct {
		path string
		size int64
	}
	for _, tc := range []struct {
		name  string
		limit string
		loads []load
		want  map[string]int64 // share of the limit, in bytes over T
		tol   int64
	}{
		{"4KiB vs 1MiB", "p", []load{{"p/a", 4 * KiB}, {"p/b", MiB}},
			map[string]int64{"p/a": 500 * MiB, "p/b": 500 * MiB}, MiB + 4*KiB},
		{"three levels", "p", []load{{"p/x", MiB}, {"p/y/a", 4 * KiB}, {"p/y/b", 64 * KiB}},
			map[string]int64{"p/x": 500 * MiB, "p/y/a": 250 * MiB, "p/y/b": 250 * MiB}, 2 * MiB},
		{"own requests beside a child", "p", []load{{"p", 4 * KiB}, {"p/c", MiB}},
			map[string]int64{"p": 500 * MiB, "p/c": 500 * MiB}, MiB + 4*KiB},
		{"cousins under a grandparent", "t", []load{{"t/a/x", 8 * KiB}, {"t/a/y", 512 * KiB}, {"t/b", MiB}},
			map[string]int64{"t/a/x": 250 * MiB, "t/a/y": 250 * MiB, "t/b": 500 * MiB}, 2 * MiB},
		{"three siblings", "p", []load{{"p/a", 4 * KiB}, {"p/b", 128 * KiB}, {"p/c", MiB}},
			map[string]int64{"p/a": 1000 * MiB / 3, "p/b": 1000 * MiB / 3, "p/c": 1000 * MiB / 3}, 2 * MiB},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, Config{})
			s.limit(tc.limit, Limits{RBPS: 10 * MiB})
			for _, l := range tc.loads {
				s.backlog(l.path, Read, l.size, 4)
			}
			s.run(T)
			var sum int64
			for g, want := range tc.want {
				within(t, g+" bytes", s.got[g], want, tc.tol)
				sum += s.got[g]
			}
			within(t, "total bytes", sum, 10*MiB*T/sec, MiB)
		})
	}
}

// TestWeights: siblings under a saturated parent share it in proportion
// to their weights, by bytes, whatever their request sizes.
func TestWeights(t *testing.T) {
	const T = 100 * sec
	for _, tc := range []struct {
		name    string
		weights map[string]int64
		sizes   map[string]int64
		want    map[string]int64 // bytes over T of the parent's 10 MiB/s
	}{
		{"200 and 100", map[string]int64{"p/a": 200, "p/b": 100}, map[string]int64{"p/a": 4 * KiB, "p/b": 4 * KiB},
			map[string]int64{"p/a": 2000 * MiB / 3, "p/b": 1000 * MiB / 3}},
		{"200 of 4 KiB and 100 of 1 MiB", map[string]int64{"p/a": 200, "p/b": 100}, map[string]int64{"p/a": 4 * KiB, "p/b": MiB},
			map[string]int64{"p/a": 2000 * MiB / 3, "p/b": 1000 * MiB / 3}},
		{"default beside 300", map[string]int64{"p/a": 0, "p/b": 300}, map[string]int64{"p/a": MiB, "p/b": 64 * KiB},
			map[string]int64{"p/a": 250 * MiB, "p/b": 750 * MiB}},
		{"1 and 10000", map[string]int64{"p/a": 1, "p/b": MaxWeight}, map[string]int64{"p/a": 4 * KiB, "p/b": 4 * KiB},
			map[string]int64{"p/a": 1000 * MiB / 10001, "p/b": 1000 * MiB * 10000 / 10001}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, Config{})
			s.limit("p", Limits{RBPS: 10 * MiB})
			for g, w := range tc.weights {
				s.limit(g, Limits{Weight: w})
				s.backlog(g, Read, tc.sizes[g], 4)
			}
			s.run(T)
			for g, want := range tc.want {
				within(t, g+" bytes", s.got[g], want, 2*MiB)
			}
		})
	}
}

// TestFloors: under a saturated parent, a group gets its floor before its
// siblings share the rest by weight, and its share by weight where that is
// more: a floor is a minimum, not an addition.
func TestFloors(t *testing.T) {
	const T = 100 * sec
	for _, tc := range []struct {
		name   string
		limits map[string]Limits
		want   map[string]int64 // bytes over T of the parent's 10 MiB/s
	}{
		{"a floor above its share",
			map[string]Limits{"p/a": {RBPSMin: 4 * MiB}, "p/b": {Weight: 300}, "p/c": {Weight: 300}},
			map[string]int64{"p/a": 400 * MiB, "p/b": 300 * MiB, "p/c": 300 * MiB}},
		{"a floor below its share",
			map[string]Limits{"p/a": {RBPSMin: MiB}, "p/b": {}},
			map[string]int64{"p/a": 500 * MiB, "p/b": 500 * MiB}},
		{"an I/O floor",
			map[string]Limits{"p/a": {RIOPSMin: 512}, "p/b": {Weight: 1000}},
			map[string]int64{"p/a": 200 * MiB, "p/b": 800 * MiB}},
		{"floors of two, a third without",
			map[string]Limits{"p/a": {RBPSMin: 3 * MiB}, "p/b": {RBPSMin: 3 * MiB}, "p/c": {Weight: 10000}},
			map[string]int64{"p/a": 300 * MiB, "p/b": 300 * MiB, "p/c": 400 * MiB}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSim(t, Config{})
			s.limit("p", Limits{RBPS: 10 * MiB})
			for g, l := range tc.limits {
				s.limit(g, l)
				s.backlog(g, Read, 4*KiB, 4)
			}
			s.run(T)
			for g, want := range tc.want {
				within(t, g+" bytes", s.got[g], want, 2*MiB)
			}
		})
	}
}

// TestCheck: limits whose floors exceed a cap on their own level or their
// parent's are refused, with the group, keys and values named.
func TestCheck(t *testing.T) {
	tr := New(Config{})
	tr.SetLimits(0, "p", Limits{RBPS: 10 * MiB, WIOPS: 100})
	tr.SetLimits(0, "p/a", Limits{RBPSMin: 6 * MiB})
	for _, c := range []struct {
		changes map[string]Limits
		want    string
	}{
		{map[string]Limits{"p/b": {RBPSMin: 4 * MiB}}, ""},
		{map[string]Limits{"p/b": {RBPSMin: 5 * MiB}}, "the floors of p's children add up to rbps.min=11534336, above its rbps=10485760"},
		{map[string]Limits{"p": {RBPS: 5 * MiB}}, "the floors of p's children add up to rbps.min=6291456, above its rbps=5242880"},
		{map[string]Limits{"p": {RBPS: 5 * MiB}, "p/a": {}}, ""},
		{map[string]Limits{"p/b": {WIOPSMin: 101}}, "above its wiops=100"},
		{map[string]Limits{"q": {RBPS: MiB, RBPSMin: 2 * MiB}}, "group q: rbps.min=2097152 is above rbps=1048576: a floor may not exceed the cap"},
		{map[string]Limits{"q": {Weight: MaxWeight + 1}}, "group q: weight=10001: want 1 to 10000"},
		{map[string]Limits{"x/y/z": {RBPSMin: 100 * MiB}}, ""},
	} {
		err := tr.Check(c.changes)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("Check(%v): %v, want nil", c.changes, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("Check(%v): %v, want an error with %q", c.changes, err, c.want)
		}
	}
}

// TestNoIdleAdvantage: a group that joins after its sibling had the parent
// to itself gets no catch-up; from then on they split evenly.
func TestNoIdleAdvantage(t *testing.T) {
	s := newSim(t, Config{})
	s.limit("p", Limits{RBPS: 10 * MiB})
	s.backlog("p/a", Read, 64*KiB, 4)
	s.run(10 * sec)
	within(t, "a alone", s.got["p/a"], 100*MiB, 64*KiB)
	s.got = map[string]int64{}
	s.backlog("p/b", Read, 64*KiB, 4)
	s.run(20 * sec)
	within(t, "a after b joined", s.got["p/a"], 50*MiB, 128*KiB)
	within(t, "b after joining", s.got["p/b"], 50*MiB, 128*KiB)
	// A group that goes idle and comes back restarts at the virtual clock:
	// its idle time is not banked either.
	s.stop("p/b")
	s.run(25 * sec)
	s.got = map[string]int64{}
	s.backlog("p/b", Read, 64*KiB, 4)
	s.run(35 * sec)
	within(t, "a after b returned", s.got["p/a"], 50*MiB, 64*KiB+256*KiB)
	within(t, "b after returning", s.got["p/b"], 50*MiB, 64*KiB+256*KiB)
}

// TestWorkConserving: a sibling blocked by its own limit does not hold back
// another sibling the parent admits, even with an older, smaller tag; and
// the limited sibling still gets its own rate: its schedule keeps running
// while the parent holds its requests (each 1 MiB of the other sibling
// closes the parent for 100 ms, ten times the burst).
func TestWorkConserving(t *testing.T) {
	s := newSim(t, Config{})
	s.limit("p", Limits{RBPS: 10 * MiB})
	s.limit("p/slow", Limits{RBPS: MiB})
	s.backlog("p/slow", Read, 4*KiB, 64)
	s.backlog("p/fast", Read, MiB, 4)
	s.run(10 * sec)
	within(t, "slow", s.got["p/slow"], 10*MiB, 64*KiB)
	within(t, "fast", s.got["p/fast"], 90*MiB, MiB)
	// Raising the slow group's limit gives it no burst of catch-up from
	// the time it was held back: the split becomes even from there.
	s.got = map[string]int64{}
	s.limit("p/slow", Limits{})
	s.run(20 * sec)
	within(t, "slow after its limit lifted", s.got["p/slow"], 50*MiB, MiB+4*KiB)
	within(t, "fast after slow's limit lifted", s.got["p/fast"], 50*MiB, MiB+4*KiB)
}

// TestQueueMisuse: Remove and Promote of a request another queue holds,
// or one already released, do nothing; Push of a queued, negative or
// wrongly classed request panics. (Promotion and removal orders are traced
// in testdata/promote_remove.)
func TestQueueMisuse(t *testing.T) {
	s := newSim(t, Config{})
	s.limit("g", Limits{RBPS: MiB})
	done := s.push("g", Read, 4*KiB, Readahead)
	s.run(0)
	if done.Queued() || s.q.Remove(done) {
		t.Errorf("Remove of a released request reported true")
	}
	s.q.Promote(done)
	if done.Class != Readahead {
		t.Errorf("Promote changed a released request")
	}
	other := NewQueue(s.tree)
	x := s.push("g", Read, 1, Readahead)
	if other.Remove(x) || !x.Queued() {
		t.Errorf("Remove from the wrong queue")
	}
	if other.Promote(x); x.Class != Readahead {
		t.Errorf("Promote by the wrong queue")
	}
	mustPanic(t, "Push twice", func() { s.q.Push(0, x) })
	mustPanic(t, "Push negative", func() { s.q.Push(0, &Request{Group: x.Group, Bytes: -1}) })
	mustPanic(t, "Push bad class", func() { s.q.Push(0, &Request{Group: x.Group, Class: 9}) })
}

// TestNeverHangs applies random pushes, removals, promotions, limit
// changes and refunds to a random tree and checks after every step that
// the queue reports a future wake-up while it holds requests, that waking
// then releases something (or ends one of nested anticipations), that per
// group and class the arrival
// order holds, and that everything drains once the limits are lifted.
func TestNeverHangs(t *testing.T) {
	paths := []string{"a", "a/x", "a/y", "a/y/z", "b", "b/c"}
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 99))
		tree := New(Config{})
		q := NewQueue(tree)
		var now int64
		var queued []*Request
		seq := 0
		randLimits := func() Limits {
			pick := func() int64 {
				if rng.IntN(2) == 0 {
					return 0
				}
				return rng.Int64N(10*MiB) + 1
			}
			return Limits{RBPS: pick(), WBPS: pick(), RIOPS: rng.Int64N(2) * (rng.Int64N(1000) + 1), WIOPS: rng.Int64N(2) * (rng.Int64N(1000) + 1)}
		}
		for _, p := range paths {
			tree.SetLimits(now, p, randLimits())
		}
		var out []*Request
		var release func(wake bool)
		empty := 0 // wake-ups in a row that released nothing
		release = func(wake bool) {
			t.Helper()
			var next int64
			out, next = q.Release(now, out[:0])
			if wake && len(out) == 0 {
				// Only the end of one anticipation while another, nested
				// in the same subtree, still runs: the next wake-up is an
				// anticipation's end too, and this happens at most once
				// per level.
				if empty++; empty > 4 || next > now+int64(DefaultBurst) {
					t.Fatalf("seed %d t=%d: woken at the returned time, nothing released (next %d)", seed, now, next)
				}
			} else {
				empty = 0
			}
			for _, r := range out {
				id := r.Value.(int)
				// FIFO within group, direction and class: nothing of the
				// same kind that arrived earlier is still waiting (a
				// promoted readahead takes its place by arrival).
				for _, x := range queued {
					if x != r && x.Group == r.Group && x.Dir == r.Dir && x.Class == r.Class && x.Value.(int) < id {
						t.Fatalf("seed %d: %v request %d released before %d, which came earlier", seed, r.Class, id, x.Value.(int))
					}
				}
				for i, x := range queued {
					if x == r {
						queued = append(queued[:i], queued[i+1:]...)
						break
					}
				}
			}
			if q.Len() != len(queued) {
				t.Fatalf("seed %d: Len %d, want %d", seed, q.Len(), len(queued))
			}
			if (q.Len() == 0) != (next == -1) || next != -1 && next <= now {
				t.Fatalf("seed %d t=%d: %d queued, next %d", seed, now, q.Len(), next)
			}
			if next != -1 && rng.IntN(3) == 0 {
				now = next
				release(true)
			}
		}
		for range 3000 {
			switch rng.IntN(8) {
			case 0, 1, 2:
				seq++
				r := &Request{Group: tree.Group(paths[rng.IntN(len(paths))]), Dir: Dir(rng.IntN(2)),
					Bytes: rng.Int64N(MiB), IOs: rng.Int64N(3), Class: Class(rng.IntN(2)), Value: seq}
				q.Push(now, r)
				queued = append(queued, r)
			case 3:
				if len(queued) > 0 {
					r := queued[rng.IntN(len(queued))]
					if !q.Remove(r) {
						t.Fatalf("Remove of a queued request failed")
					}
					queued = slicesDelete(queued, r)
				}
			case 4:
				if len(queued) > 0 {
					q.Promote(queued[rng.IntN(len(queued))])
				}
			case 5:
				tree.SetLimits(now, paths[rng.IntN(len(paths))], randLimits())
			case 6:
				tree.Refund(now, tree.Group(paths[rng.IntN(len(paths))]), Dir(rng.IntN(2)), rng.Int64N(MiB))
			case 7:
				now += rng.Int64N(50 * ms)
			}
			release(false)
		}
		for _, p := range paths {
			tree.SetLimits(now, p, Limits{})
		}
		if out, next := q.Release(now, nil); q.Len() != 0 || next != -1 || len(out) != len(queued) {
			t.Fatalf("seed %d: after lifting all limits %d remain, next %d", seed, q.Len(), next)
		}
	}
}

func slicesDelete(s []*Request, r *Request) []*Request {
	for i, x := range s {
		if x == r {
			return append(s[:i], s[i+1:]...)
		}
	}
	return s
}

// TestOldest: a group's longest-waiting request, per direction, counts
// the requests queued below it, and no other group's.
func TestOldest(t *testing.T) {
	tree := New(Config{})
	tree.SetLimits(0, "p", Limits{RBPS: 1, WBPS: 1})
	q := NewQueue(tree)
	p, a, b := tree.Group("p"), tree.Group("p/a"), tree.Group("b")
	for _, r := range []*Request{
		{Group: a, Dir: Read, Bytes: 4096},
		{Group: p, Dir: Read, Bytes: 4096},
		{Group: b, Dir: Write, Bytes: 4096},
	} {
		q.Push(int64(len(q.nodes))*ms, r)
	}
	// Nothing is released: p admits one byte a second, and b's write is
	// queued until Release runs.
	if enq, ok := q.Oldest(p); !ok[Read] || ok[Write] || enq[Read] != q.nodes[a].fifo[Read][Demand].head.enq {
		t.Errorf("Oldest(p) = %v, %v; want a's read, no write", enq, ok)
	}
	if _, ok := q.Oldest(b); ok[Read] || !ok[Write] {
		t.Errorf("Oldest(b) = %v; want its write alone", ok)
	}
	if _, ok := q.Oldest(tree.Group("c")); ok[Read] || ok[Write] {
		t.Errorf("Oldest(c) = %v; want nothing", ok)
	}
	// Readahead keeps no reader waiting, however long it waits.
	c := tree.Group("p/c")
	q.Push(0, &Request{Group: c, Dir: Read, Bytes: 4096, Class: Readahead})
	if _, ok := q.Oldest(c); ok[Read] || ok[Write] {
		t.Errorf("Oldest(p/c) = %v with readahead alone queued; want nothing", ok)
	}
	if enq, _ := q.Oldest(p); enq[Read] != q.nodes[a].fifo[Read][Demand].head.enq {
		t.Errorf("Oldest(p) = %v with p/c's older readahead queued; want a's read still", enq)
	}
}

// TestAnticipationOneDirection: a parent limiting reads holds back a
// sibling's read while a small reader makes its round trip
// (anticipation), and only reads: a write pushed meanwhile, which no
// level limits, goes at once (reads and writes queue independently).
func TestAnticipationOneDirection(t *testing.T) {
	tree := New(Config{})
	tree.SetLimits(0, "p", Limits{RBPS: MiB})
	q := NewQueue(tree)
	a, b := tree.Group("p/a"), tree.Group("p/b")
	release := func(now int64, want ...*Request) int64 {
		t.Helper()
		out, next := q.Release(now, nil)
		if len(out) != len(want) {
			t.Fatalf("t=%d: released %d requests, want %d", now, len(out), len(want))
		}
		for i := range out {
			if out[i] != want[i] {
				t.Fatalf("t=%d: released %+v, want %+v", now, *out[i], *want[i])
			}
		}
		return next
	}
	push := func(now int64, g *Group, d Dir, bytes int64) *Request {
		r := &Request{Group: g, Dir: d, Bytes: bytes, IOs: 1}
		q.Push(now, r)
		return r
	}
	a1, b1, b2 := push(0, a, Read, 4*KiB), push(0, b, Read, 64*KiB), push(0, b, Read, 64*KiB)
	now := release(0, a1) // a empties, p owes 4 KiB
	release(now, b1)      // b's turn: p owes 64 KiB
	a2 := push(now, a, Read, 4*KiB)
	now = release(now)     // a is back before b's next
	now = release(now, a2) // a empties again
	next := release(now)   // b2 waits for a's round trip, at most Burst
	if !b2.Queued() || next > now+int64(DefaultBurst) {
		t.Fatalf("t=%d: b's read queued %v, next %d; want it held until at most %d", now, b2.Queued(), next, now+int64(DefaultBurst))
	}
	now += 1000
	w := push(now, b, Write, 4*KiB)
	release(now, w) // nothing limits writes
	release(next, b2)
}
