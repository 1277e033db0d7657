package mirror

import (
	"container/heap"
	"math"
	"testing"
)

// bench drives a policy on virtual time: jobs readers each keep one read
// in flight; a read sent to mirror m at t takes lat(m, t) ns. It returns
// which mirror each read went to, with the time it was sent.
type sent struct {
	at int64
	m  int
}

type completion struct {
	at, start int64
	m, job    int
	off       int64
}

type completions []completion

func (c completions) Len() int { return len(c) }
func (c completions) Less(i, j int) bool {
	return c[i].at < c[j].at || c[i].at == c[j].at && c[i].job < c[j].job
}
func (c completions) Swap(i, j int) { c[i], c[j] = c[j], c[i] }
func (c *completions) Push(x any)   { *c = append(*c, x.(completion)) }
func (c *completions) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// drive runs jobs readers until end. next gives a job's next offset from
// its last one (sequential or random); lat gives a read's service time.
func drive(p Policy, jobs int, end int64, next func(job int, last int64) int64, lat func(m int, now int64) int64) []sent {
	var log []sent
	var q completions
	issue := func(now int64, job int, off int64) {
		r := Read{PID: 100 + job, Off: off, Len: 4096}
		m := p.Pick(now, r)
		p.Started(now, m, r)
		log = append(log, sent{now, m})
		heap.Push(&q, completion{at: now + lat(m, now), start: now, m: m, job: job, off: off})
	}
	for j := range jobs {
		issue(0, j, next(j, -1))
	}
	for q.Len() > 0 {
		c := heap.Pop(&q).(completion)
		if c.at > end {
			break
		}
		p.Done(c.at, c.m, c.start, nil)
		if c.job < 0 {
			continue // a probe: no caller
		}
		issue(c.at, c.job, next(c.job, c.off))
		if pr, ok := p.(Prober); ok {
			if m, ok := pr.Probe(c.at); ok {
				r := Read{Off: c.off, Len: 4096}
				p.Started(c.at, m, r)
				heap.Push(&q, completion{at: c.at + lat(m, c.at), start: c.at, m: m, job: -1})
			}
		}
	}
	return log
}

// share is the fraction of reads sent in [from, to) that went to m.
func share(log []sent, m int, from, to int64) float64 {
	n, on := 0, 0
	for _, s := range log {
		if s.at >= from && s.at < to {
			n++
			if s.m == m {
				on++
			}
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return float64(on) / float64(n)
}

// random offsets, the same for every run.
func random(job int, last int64) int64 {
	x := uint64(last+int64(job)*7919) * 6364136223846793005
	return int64(x>>40) * 4096
}

func sequential(job int, last int64) int64 {
	if last < 0 {
		return int64(job) << 30
	}
	return last + 4096
}

const ms = int64(1e6)

// TestAdaptiveSlowMirror: one of two identical mirrors turns 10× slower at
// 1 s and recovers at 3 s. Within 200 ms of the slowdown ≥ 90 % of new
// reads avoid it; within 2 s of the recovery the split is even again.
func TestAdaptiveSlowMirror(t *testing.T) {
	p, _ := New("adaptive", 2)
	lat := func(m int, now int64) int64 {
		if m == 1 && now >= 1000*ms && now < 3000*ms {
			return 2 * ms
		}
		return 200_000
	}
	log := drive(p, 4, 6000*ms, random, lat)
	if s := share(log, 1, 500*ms, 1000*ms); math.Abs(s-0.5) > 0.1 {
		t.Errorf("before the slowdown mirror 1 took %.2f of reads, want 0.5 ± 0.1", s)
	}
	if s := share(log, 1, 1200*ms, 3000*ms); s > 0.1 {
		t.Errorf("from 200 ms after the slowdown mirror 1 took %.2f of reads, want ≤ 0.10", s)
	}
	if s := share(log, 1, 5000*ms, 6000*ms); math.Abs(s-0.5) > 0.1 {
		t.Errorf("2 s after the recovery mirror 1 took %.2f of reads, want 0.5 ± 0.1", s)
	}
}

// TestAdaptiveIdentical: identical mirrors share random reads evenly, for
// two and three mirrors and from one to eight readers.
func TestAdaptiveIdentical(t *testing.T) {
	for _, mirrors := range []int{2, 3} {
		for _, jobs := range []int{1, 4, 8} {
			p, _ := New("adaptive", mirrors)
			log := drive(p, jobs, 2000*ms, random, func(int, int64) int64 { return 100_000 })
			for m := range mirrors {
				want := 1 / float64(mirrors)
				if s := share(log, m, 0, 2000*ms); math.Abs(s-want) > 0.1*want {
					t.Errorf("%d mirrors, %d jobs: mirror %d took %.3f of reads, want %.3f ± 10%%", mirrors, jobs, m, s, want)
				}
			}
		}
	}
}

// TestAdaptiveSequential: a sequential reader stays on one mirror of an
// identical pair; two sequential readers each keep theirs.
func TestAdaptiveSequential(t *testing.T) {
	for _, c := range []struct {
		name       string
		jobs       int
		sameOffset bool // each job its own file, all at the same offsets
	}{{"one reader", 1, false}, {"two readers", 2, false}, {"four files in step", 4, true}} {
		t.Run(c.name, func(t *testing.T) {
			p, _ := New("adaptive", 2)
			var q completions
			last := make([]int, c.jobs)
			read := func(job int, prev int64) Read {
				if !c.sameOffset {
					return Read{Off: sequential(job, prev), Len: 4096}
				}
				return Read{File: uint64(job + 1), Off: prev + 4096, Len: 4096}
			}
			moves := 0
			for j := range c.jobs {
				r := read(j, -4096)
				m := p.Pick(0, r)
				p.Started(0, m, r)
				last[j] = m
				heap.Push(&q, completion{at: 100_000, m: m, job: j, off: r.Off})
			}
			for range 10000 {
				d := heap.Pop(&q).(completion)
				p.Done(d.at, d.m, d.start, nil)
				r := read(d.job, d.off)
				m := p.Pick(d.at, r)
				p.Started(d.at, m, r)
				if m != last[d.job] {
					moves++
					last[d.job] = m
				}
				heap.Push(&q, completion{at: d.at + 100_000, start: d.at, m: m, job: d.job, off: r.Off})
			}
			if moves > 0 {
				t.Errorf("streams moved %d times in 10000 reads", moves)
			}
			if per := countEach(last, 2); c.jobs > 1 && (per[0] != c.jobs/2 || per[1] != c.jobs/2) {
				t.Errorf("%d sequential readers' mirrors %v; want half on each", c.jobs, last)
			}
		})
	}
}

// countEach counts the values of ms by mirror.
func countEach(ms []int, mirrors int) []int {
	n := make([]int, mirrors)
	for _, m := range ms {
		n[m]++
	}
	return n
}

// TestAdaptiveHung: a mirror whose read has not come back for far longer
// than its usual latency gets no new reads, though its estimate (from
// completed reads) is still low and the other mirror is as busy.
func TestAdaptiveHung(t *testing.T) {
	p, _ := New("adaptive", 2)
	// A read every 50 µs, each taking 100 µs: about two in flight.
	var q completions
	now, hungAt, on0 := int64(0), int64(100*ms), 0
	hung := false
	for now < 200*ms {
		for q.Len() > 0 && q[0].at <= now {
			c := heap.Pop(&q).(completion)
			p.Done(c.at, c.m, c.start, nil)
		}
		r := Read{Off: random(0, now), Len: 4096}
		m := p.Pick(now, r)
		p.Started(now, m, r)
		switch {
		case m == 0 && now >= hungAt && !hung:
			hung = true // mirror 0 takes this read and never answers
		case m == 0 && now > hungAt+ms:
			on0++
			fallthrough
		default:
			heap.Push(&q, completion{at: now + 100_000, start: now, m: m})
		}
		now += 50_000
	}
	if !hung {
		t.Fatal("mirror 0 got no read after 100 ms")
	}
	if on0 > 0 {
		t.Errorf("%d reads sent to a mirror hung for over 1 ms (10× its latency)", on0)
	}
}

// TestAdaptiveErrors: a mirror failing its reads is avoided like a slow one.
func TestAdaptiveErrors(t *testing.T) {
	p, _ := New("adaptive", 2)
	now := int64(0)
	on1 := 0
	for i := range 1000 {
		r := Read{Off: random(0, now), Len: 4096}
		m := p.Pick(now, r)
		p.Started(now, m, r)
		var err error
		if m == 1 {
			err = errFailed
			if i > 10 {
				on1++
			}
		}
		p.Done(now+100_000, m, now, err)
		now += 100_000
	}
	// Probes every ProbeEvery: 100 ms of reads holds at most one.
	if max := int(1000*100_000/ProbeEvery) + 1; on1 > max {
		t.Errorf("failing mirror got %d reads of 1000, want ≤ %d (probes)", on1, max)
	}
}

type failed struct{}

func (failed) Error() string { return "failed" }

var errFailed error = failed{}

// TestAdaptiveHedge: a read is hedged after HedgeFactor times the best
// other mirror's estimate, never sooner than HedgeMin, and after
// HedgeFirst while nothing is known.
func TestAdaptiveHedge(t *testing.T) {
	p, _ := New("adaptive", 2)
	h := p.(Hedger)
	if d := h.HedgeAfter(0, 0); d != HedgeFirst {
		t.Errorf("hedge with no estimates: %d, want %d", d, HedgeFirst)
	}
	p.Started(0, 0, Read{})
	p.Done(100_000, 0, 0, nil) // mirror 0: 100 µs
	p.Started(0, 1, Read{})
	p.Done(10*ms, 1, 0, nil) // mirror 1: 10 ms
	if d := h.HedgeAfter(10*ms, 1); d != HedgeMin {
		t.Errorf("a read on the slow mirror is hedged after %d ns, want %d (%d × 100 µs, at least HedgeMin)", d, HedgeMin, HedgeFactor)
	}
	if d := h.HedgeAfter(10*ms, 0); d != HedgeFactor*10*ms {
		t.Errorf("a read on the fast mirror is hedged after %d ns, want %d × the slow one's 10 ms", d, HedgeFactor)
	}
}

// TestAdaptiveProbe: a mirror left unused is offered for a background
// read once per ProbeEvery, and only while idle.
func TestAdaptiveProbe(t *testing.T) {
	p, _ := New("adaptive", 2)
	pr := p.(Prober)
	for m := range 2 {
		p.Started(0, m, Read{})
		p.Done(100_000, m, 0, nil)
	}
	if _, ok := pr.Probe(ProbeEvery - 1); ok {
		t.Error("probe before ProbeEvery")
	}
	m, ok := pr.Probe(ProbeEvery)
	if !ok {
		t.Fatal("no probe after ProbeEvery")
	}
	if m2, ok := pr.Probe(ProbeEvery); ok && m2 == m {
		t.Errorf("mirror %d offered twice at once", m)
	}
	p.Started(ProbeEvery, m, Read{})
	if m3, ok := pr.Probe(3 * ProbeEvery); ok && m3 == m {
		t.Errorf("mirror %d offered while its probe is in flight", m)
	}
}

// TestAdaptiveHedgeIgnoresPeaks: one slow read of the fast mirror raises
// its cost at once, but not how long a read elsewhere waits before it is
// hedged there.
func TestAdaptiveHedgeIgnoresPeaks(t *testing.T) {
	p, _ := New("adaptive", 2)
	now := int64(0)
	for range 1000 {
		p.Started(now, 0, Read{})
		p.Done(now+100_000, 0, now, nil)
		now += 100_000
	}
	// One read takes 20 ms while the others go on answering in 100 µs.
	slow := now
	p.Started(slow, 0, Read{})
	for now < slow+20*ms {
		p.Started(now, 0, Read{})
		p.Done(now+100_000, 0, now, nil)
		now += 100_000
	}
	p.Done(now, 0, slow, nil)
	if d := p.(Hedger).HedgeAfter(now, 1); d > 3*HedgeMin {
		t.Errorf("after one outlier of the fast mirror a read elsewhere is hedged after %v ns, want about HedgeMin", d)
	}
}

// TestAdaptiveHedgeTo: a hedge goes to the cheapest mirror the driver
// allows, but not to one whose oldest read in flight started before the
// read being hedged: that mirror is stuck for longer than the read has
// waited, and hedges would pile up on it.
func TestAdaptiveHedgeTo(t *testing.T) {
	p, _ := New("adaptive", 3)
	h := p.(Hedger)
	all := func(int) bool { return true }
	for m := range 3 {
		p.Started(0, m, Read{})
		p.Done(100_000*int64(m+1), m, 0, nil) // 100, 200, 300 µs
	}
	now := int64(ms)
	if m, ok := h.HedgeTo(now, 0, now-HedgeMin, all); !ok || m != 1 {
		t.Errorf("hedge of a read on mirror 0: %d, %v; want mirror 1, the cheapest other", m, ok)
	}
	if m, ok := h.HedgeTo(now, 0, now-HedgeMin, func(m int) bool { return m != 1 }); !ok || m != 2 {
		t.Errorf("hedge with mirror 1 tried: %d, %v; want mirror 2", m, ok)
	}
	// Mirror 1 hangs on a read sent before the one on mirror 0.
	p.Started(now, 1, Read{})
	now += 50 * ms
	p.Started(now, 0, Read{})
	now += HedgeMin
	if m, ok := h.HedgeTo(now, 0, now-HedgeMin, all); !ok || m != 2 {
		t.Errorf("hedge with mirror 1 stuck: %d, %v; want mirror 2", m, ok)
	}
	if m, ok := h.HedgeTo(now, 0, now-HedgeMin, func(m int) bool { return m != 2 }); ok {
		t.Errorf("hedge with mirror 1 stuck and mirror 2 tried: mirror %d, want none", m)
	}
	// A read sent before mirror 1's stuck one may still go there.
	if m, ok := h.HedgeTo(now, 2, 0, func(m int) bool { return m != 0 }); !ok || m != 1 {
		t.Errorf("hedge of a read older than mirror 1's: %d, %v; want mirror 1", m, ok)
	}
}
