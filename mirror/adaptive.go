package mirror

import "math"

// Adaptive's tuning. The defaults suit devices from NVMe (tens of
// microseconds) to spinning disks (milliseconds).
const (
	// DecayTime is the time constant of each mirror's latency estimate:
	// a sample's weight falls to 1/e after this long. A sample above the
	// estimate replaces it at once (a peak is believed immediately, a
	// recovery over a few decay times).
	DecayTime int64 = 100e6 // ns
	// Band is how much a mirror's cost may exceed the cheapest one's and
	// still count as equal: mirrors within it share by queue depth and
	// keep sequential streams.
	Band float64 = 1.5
	// ProbeEvery is how long a mirror may go unread before Probe asks for
	// a read of it in the background, so that a recovered mirror is seen.
	ProbeEvery int64 = 200e6 // ns
	// HedgeFactor and HedgeMin: a read still in flight after HedgeFactor
	// times the best other mirror's average read time (a plain decaying
	// average, not the peak the costs use), and at least HedgeMin, is
	// sent to another mirror as well (HedgeFirst while no mirror has an
	// estimate yet); the first answer serves the caller.
	HedgeFactor       = 2
	HedgeMin    int64 = 2e6  // ns
	HedgeFirst  int64 = 10e6 // ns
	// streams is how many recent read ends each mirror remembers to
	// recognise a sequential stream.
	streams = 8
)

// adaptive is sluice's own policy. Each mirror's cost is its latency
// estimate times (reads in flight + 1), where the estimate is a peak
// EWMA (Finagle's): the largest of a decaying average of completed reads
// and the age of the oldest read still in flight, so a mirror that has
// hung costs more the longer it hangs. Mirrors whose cost is within Band
// of the cheapest are equal: among them a read continuing a recent read
// of the same file on one goes there (a sequential stream stays where
// its readahead is), otherwise the one with fewest reads in flight, ties
// taken in turn. A mirror unread for ProbeEvery is offered for a
// background read (Probe), so a recovered mirror is noticed without a
// caller waiting on it, and a read that runs long is hedged on another
// mirror (HedgeAfter).
type adaptive struct {
	m     []adaptiveMirror
	turn  int
	costs []float64 // Pick's scratch, one per mirror
}

// readEnd is where a read ended: the next read of a sequential stream
// starts there.
type readEnd struct {
	file uint64
	off  int64
}

type adaptiveMirror struct {
	est      float64 // latency estimate (peak EWMA), ns; 0 before the first sample
	avg      float64 // plain EWMA of read times, ns, for hedging
	sampled  int64   // when est was last updated
	picked   int64   // when a read was last sent here
	inflight []int64 // start times of reads in flight
	ends     [streams]readEnd
	next     int // ring index into ends
}

func newAdaptive(mirrors int) *adaptive {
	a := &adaptive{m: make([]adaptiveMirror, mirrors), costs: make([]float64, mirrors)}
	for i := range a.m {
		a.m[i].picked = math.MinInt64 / 2
		for j := range a.m[i].ends {
			a.m[i].ends[j] = readEnd{off: -1}
		}
	}
	return a
}

func (p *adaptive) Name() string { return "adaptive" }

// cost is mirror m's expected wait for one more read at now.
func (p *adaptive) cost(now int64, m *adaptiveMirror) float64 {
	est := m.est
	for _, s := range m.inflight {
		est = max(est, float64(now-s))
	}
	return est * float64(len(m.inflight)+1)
}

func (p *adaptive) Pick(now int64, r Read) int {
	best, known := math.Inf(1), math.Inf(1)
	costs := p.costs
	for i := range p.m {
		costs[i] = p.cost(now, &p.m[i])
		best = min(best, costs[i])
		if costs[i] > 0 {
			known = min(known, costs[i])
		}
	}
	limit := best * Band
	// A sequential stream stays on its mirror while that is in the band
	// of the mirrors measured so far (a mirror never read does not take
	// a stream away; it is tried with other reads).
	for i := range p.m {
		if costs[i] > known*Band {
			continue
		}
		for _, e := range p.m[i].ends {
			if e.off == r.Off && e.file == r.File && r.Off > 0 {
				return i
			}
		}
	}
	pick, depth := -1, 0
	for k := range p.m {
		i := (p.turn + k) % len(p.m)
		if costs[i] > limit {
			continue
		}
		if d := len(p.m[i].inflight); pick < 0 || d < depth {
			pick, depth = i, d
		}
	}
	p.turn = (pick + 1) % len(p.m)
	return pick
}

func (p *adaptive) Started(now int64, i int, r Read) {
	m := &p.m[i]
	m.picked = now
	m.inflight = append(m.inflight, now)
	m.ends[m.next] = readEnd{r.File, r.Off + r.Len}
	m.next = (m.next + 1) % streams
}

func (p *adaptive) Done(now int64, i int, start int64, err error) {
	m := &p.m[i]
	for k, s := range m.inflight {
		if s == start {
			m.inflight = append(m.inflight[:k], m.inflight[k+1:]...)
			break
		}
	}
	sample := float64(now - start)
	if err != nil {
		// A failed read counts as slow as the slowest: it cost the
		// caller a retry elsewhere.
		sample = max(sample, m.est*2, 1e6)
	}
	w := math.Exp(-float64(now-m.sampled) / float64(DecayTime))
	switch {
	case m.est == 0 || sample >= m.est:
		m.est = sample
	default:
		m.est = m.est*w + sample*(1-w)
	}
	if m.avg == 0 {
		m.avg = sample
	} else {
		m.avg = m.avg*w + sample*(1-w)
	}
	m.sampled = now
}

// Probe returns a mirror unread for ProbeEvery and idle, for the driver
// to read in the background (Started and Done as any read): its answer
// refreshes the estimate of a mirror the policy has stopped using.
func (p *adaptive) Probe(now int64) (int, bool) {
	for i := range p.m {
		if m := &p.m[i]; now-m.picked >= ProbeEvery && len(m.inflight) == 0 && m.est > 0 {
			m.picked = now
			return i, true
		}
	}
	return 0, false
}

// HedgeTo returns the mirror, other than from and allowed, of lowest cost,
// passing over any whose oldest read in flight started before this one:
// a mirror stuck for longer than this read has waited is no better bet,
// and hedging onto it would pile reads up on a hung mirror.
func (p *adaptive) HedgeTo(now int64, from int, start int64, allowed func(int) bool) (int, bool) {
	best, pick := math.Inf(1), -1
	for j := range p.m {
		m := &p.m[j]
		if j == from || !allowed(j) || len(m.inflight) > 0 && m.inflight[0] < start {
			continue
		}
		if c := p.cost(now, m); pick < 0 || c < best {
			best, pick = c, j
		}
	}
	return pick, pick >= 0
}

// HedgeAfter returns how long a read sent to mirror i may stay in flight
// before the driver sends it to another mirror too: HedgeFactor times the
// lowest average read time of the other mirrors, at least HedgeMin
// (HedgeFirst when none has been read).
func (p *adaptive) HedgeAfter(now int64, i int) int64 {
	best := math.Inf(1)
	for j := range p.m {
		if j != i && p.m[j].avg > 0 {
			best = min(best, p.m[j].avg)
		}
	}
	if math.IsInf(best, 1) {
		return HedgeFirst
	}
	return max(int64(best*HedgeFactor), HedgeMin)
}
