package throttle

import (
	"fmt"
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

// TestWithinGroupOrder: arrival order per class, demand before readahead,
// no overtaking, and reads and writes queued apart.
func TestWithinGroupOrder(t *testing.T) {
	s := newSim(t, Config{})
	s.limit("g", Limits{RBPS: MiB, WBPS: MiB})
	// Put the group in debt so that everything below queues.
	s.push("g", Read, 4*KiB, Demand)
	s.push("g", Write, 4*KiB, Demand)
	s.run(0)
	s.order = nil
	name := map[*Request]string{}
	add := func(n string, d Dir, c Class) {
		name[s.push("g", d, 4*KiB, c)] = n
	}
	add("ra1", Read, Readahead)
	add("d1", Read, Demand)
	add("w1", Write, Demand)
	add("ra2", Read, Readahead)
	add("d2", Read, Demand)
	add("w2", Write, Demand)
	add("d3", Read, Demand)
	s.run(sec)
	var reads, writes []string
	for _, r := range s.order {
		if r.Dir == Read {
			reads = append(reads, name[r])
		} else {
			writes = append(writes, name[r])
		}
	}
	if got := strings.Join(reads, " "); got != "d1 d2 d3 ra1 ra2" {
		t.Errorf("read order %q, want demand first, each class by arrival", got)
	}
	if got := strings.Join(writes, " "); got != "w1 w2" {
		t.Errorf("write order %q", got)
	}

	// With nothing limited, everything queued goes in one Release: demand
	// first, then by arrival across directions.
	u := newSim(t, Config{})
	names := map[*Request]string{}
	for _, x := range []struct {
		n string
		d Dir
		c Class
	}{{"wra", Write, Readahead}, {"ra", Read, Readahead}, {"w", Write, Demand}, {"d", Read, Demand}} {
		names[u.push("g", x.d, 4*KiB, x.c)] = x.n
	}
	out, next := u.q.Release(0, nil)
	var got []string
	for _, r := range out {
		got = append(got, names[r])
	}
	if strings.Join(got, " ") != "w d wra ra" || next != -1 {
		t.Errorf("unlimited release %v, next %d; want [w d wra ra], -1", got, next)
	}
}

// TestWritesDoNotBlockReads: a group's writes held by wbps do not hold its
// reads.
func TestWritesDoNotBlockReads(t *testing.T) {
	s := newSim(t, Config{})
	s.limit("g", Limits{WBPS: 1})
	s.push("g", Write, MiB, Demand)
	w := s.push("g", Write, MiB, Demand)
	r := s.push("g", Read, MiB, Demand)
	s.run(sec)
	if len(s.order) != 2 || s.order[1] != r || !w.Queued() {
		t.Errorf("released %d; want the first write and the read, second write queued", len(s.order))
	}
}

// TestPromoteAndRemove: a promoted readahead joins the demand requests at
// its arrival position; removed requests are never released and Remove
// reports whether anything was queued.
func TestPromoteAndRemove(t *testing.T) {
	s := newSim(t, Config{})
	s.limit("g", Limits{RBPS: MiB})
	s.push("g", Read, 4*KiB, Demand)
	s.run(0) // in debt from here
	name := map[*Request]string{}
	add := func(n string, c Class) *Request {
		r := s.push("g", Read, 4*KiB, c)
		name[r] = n
		return r
	}
	d1 := add("d1", Demand)
	ra1 := add("ra1", Readahead)
	ra2 := add("ra2", Readahead)
	add("d2", Demand)
	ra3 := add("ra3", Readahead)
	d3 := add("d3", Demand)
	s.q.Promote(ra2)
	s.q.Promote(d1) // already demand: nothing
	if ra2.Class != Demand {
		t.Errorf("promoted request has class %v", ra2.Class)
	}
	if !s.q.Remove(ra3) || s.q.Remove(ra3) {
		t.Errorf("Remove: want true once, then false")
	}
	if !s.q.Remove(d3) || ra3.Queued() || d3.Queued() {
		t.Errorf("removed requests still queued")
	}
	if s.q.Len() != 4 {
		t.Errorf("Len = %d, want 4", s.q.Len())
	}
	s.run(sec)
	var got []string
	for _, r := range s.order[1:] {
		got = append(got, name[r])
	}
	if g := strings.Join(got, " "); g != "d1 ra2 d2 ra1" {
		t.Errorf("order %q, want d1 ra2 d2 ra1", g)
	}
	if s.q.Remove(d1) {
		t.Errorf("Remove of a released request reported true")
	}
	s.q.Promote(ra1) // released: nothing happens
	other := NewQueue(s.tree)
	x := s.push("g", Read, 1, Demand)
	if other.Remove(x) || !x.Queued() {
		t.Errorf("Remove from the wrong queue")
	}
	mustPanic(t, "Push twice", func() { s.q.Push(0, x) })
	mustPanic(t, "Push negative", func() { s.q.Push(0, &Request{Group: x.Group, Bytes: -1}) })
	mustPanic(t, "Push bad class", func() { s.q.Push(0, &Request{Group: x.Group, Class: 9}) })
}

// TestLimitChangeWithQueue: queued requests follow a limit change at once:
// debt is rescaled to the new rate, unlimited releases everything, and a
// newly limited group starts on schedule with no credit.
func TestLimitChangeWithQueue(t *testing.T) {
	s := newSim(t, Config{})
	s.limit("g", Limits{RBPS: MiB})
	for range 8 {
		s.push("g", Read, 256*KiB, Demand)
	}
	s.run(300 * ms)                      // releases at 0 and 250 ms; debt until 500 ms
	s.limit("g", Limits{RBPS: 10 * MiB}) // 200 ms of debt become 20 ms
	s.run(350 * ms)
	// 320 ms, then every 25 ms.
	want := []int64{0, 250 * ms, 320 * ms, 345 * ms}
	if got := s.when; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("release times %v, want %v", got, want)
	}
	s.limit("g", Limits{}) // max: the rest go at once
	out, next := s.q.Release(s.now, nil)
	if len(out) != 4 || next != -1 {
		t.Errorf("after going to max: released %d, next %d; want 4, -1", len(out), next)
	}
	// From max to limited: no debt, no credit.
	s.now = 400 * ms
	s.limit("g", Limits{RBPS: MiB})
	a := s.push("g", Read, 256*KiB, Demand)
	b := s.push("g", Read, 256*KiB, Demand)
	out, next = s.q.Release(s.now, nil)
	if len(out) != 1 || out[0] != a || next != 650*ms || !b.Queued() {
		t.Errorf("after max -> 1MiB/s: released %d, next %d; want a alone, then 650ms", len(out), next)
	}
	// Lowering the rate delays the wake-up: 100 ms of debt at 1 MiB/s is
	// 200 ms at 512 KiB/s.
	s.now = 550 * ms
	s.limit("g", Limits{RBPS: 512 * KiB})
	if _, next = s.q.Release(s.now, nil); next != 750*ms {
		t.Errorf("after lowering the rate: next %d, want 750ms", next)
	}
}

// TestSplitCharging: a 1 MiB write split into eight 128 KiB pieces of one
// I/O each runs at exactly wiops, and its bytes are charged once: with
// wbps at exactly the pieces' bytes per second, the byte schedule ends
// with the I/O schedule.
func TestSplitCharging(t *testing.T) {
	tree := New(Config{})
	g := tree.Group("w")
	tree.SetLimits(0, "w", Limits{WIOPS: 100, WBPS: 100 * 128 * KiB})
	q := NewQueue(tree)
	const writes = 50
	for range writes {
		for range 8 {
			q.Push(0, &Request{Group: g, Dir: Write, Bytes: 128 * KiB, IOs: 1})
		}
	}
	var now int64
	var out []*Request
	n := 0
	for q.Len() > 0 {
		var next int64
		out, next = q.Release(now, out[:0])
		for range out {
			if want := int64(n) * 10 * ms; now != want {
				t.Fatalf("piece %d released at %d, want %d (100 IOs/s)", n, now, want)
			}
			n++
		}
		if next > 0 {
			now = next
		}
	}
	if n != 8*writes {
		t.Errorf("released %d pieces, want %d", n, 8*writes)
	}
	if got := tree.Eligible(now, g, Write); got != 4*sec {
		t.Errorf("400 IOs end the schedule at %d, want 4s", got)
	}
	// 5 ms after the end, 5 ms of byte credit (less than Burst): the byte
	// schedule ended at 4 s too, 50 MiB at 12.5 MiB/s.
	if got := tree.ByteBudget(4*sec+5*ms, g, Write); got != 64*KiB {
		t.Errorf("byte credit 5 ms after the end = %d, want 64KiB", got)
	}
}

// TestReleaseEverythingDue: one Release call admits all that is due, not
// one request per call: a wake-up 1 ms late at 100 MiB/s releases the 25
// requests of 4 KiB the schedule allowed.
func TestReleaseEverythingDue(t *testing.T) {
	tree := New(Config{})
	g := tree.Group("g")
	tree.SetLimits(0, "g", Limits{RBPS: 100 * MiB})
	q := NewQueue(tree)
	for range 1000 {
		q.Push(0, &Request{Group: g, Dir: Read, Bytes: 4 * KiB, IOs: 1})
	}
	out, next := q.Release(0, nil)
	if len(out) != 1 || next != 39062 {
		t.Fatalf("released %d, next %d; want 1, 39062", len(out), next)
	}
	// 4 KiB at 100 MiB/s is 39062.5 ns; at 1 ms the schedule admits the
	// requests due at 39062, 78125, ... 976562 ns: 25 of them.
	out, next = q.Release(ms, nil)
	if len(out) != 25 || next != 26*4*KiB*sec/(100*MiB) {
		t.Errorf("late wake-up released %d, next %d; want 25, %d", len(out), next, 26*4*KiB*sec/(100*MiB))
	}
}

// TestNeverHangs applies random pushes, removals, promotions, limit
// changes and refunds to a random tree and checks after every step that
// the queue reports a future wake-up while it holds requests, that waking
// then always releases something, that per group and class the arrival
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
		release = func(wake bool) {
			t.Helper()
			var next int64
			out, next = q.Release(now, out[:0])
			if wake && len(out) == 0 {
				t.Fatalf("seed %d t=%d: woken at the returned time, nothing released", seed, now)
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
