package device

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"time"
)

// Dist is a distribution of durations: a constant, uniform between two
// bounds, exponential with a mean, or lognormal with a mean and standard
// deviation. The zero value is the constant 0.
type Dist struct {
	Kind    string // "const", "uniform", "exp", "lognormal"
	A, B    time.Duration
	mu, sig float64 // lognormal parameters of the underlying normal
}

// ParseDist parses "100us", "uniform(50us,150us)", "exp(100us)" or
// "lognormal(100us,30us)" (mean and standard deviation).
func ParseDist(s string) (Dist, error) {
	s = strings.ReplaceAll(s, " ", "")
	open := strings.IndexByte(s, '(')
	if open < 0 {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return Dist{}, fmt.Errorf("%q: want a duration (100us) or uniform(A,B), exp(MEAN), lognormal(MEAN,STDEV)", s)
		}
		return Dist{Kind: "const", A: d}, nil
	}
	if !strings.HasSuffix(s, ")") {
		return Dist{}, fmt.Errorf("%q: missing ')'", s)
	}
	kind, args := s[:open], strings.Split(s[open+1:len(s)-1], ",")
	var ds []time.Duration
	for _, a := range args {
		d, err := time.ParseDuration(a)
		if err != nil || d < 0 {
			return Dist{}, fmt.Errorf("%q: %q is not a duration such as 100us", s, a)
		}
		ds = append(ds, d)
	}
	want := map[string]int{"uniform": 2, "exp": 1, "lognormal": 2}
	n, ok := want[kind]
	switch {
	case !ok:
		return Dist{}, fmt.Errorf("%q: unknown distribution %q; want uniform, exp or lognormal", s, kind)
	case len(ds) != n:
		return Dist{}, fmt.Errorf("%q: %s takes %d durations", s, kind, n)
	}
	d := Dist{Kind: kind, A: ds[0]}
	if n == 2 {
		d.B = ds[1]
	}
	switch {
	case kind == "uniform" && d.B < d.A:
		return Dist{}, fmt.Errorf("%q: the upper bound is below the lower", s)
	case kind == "lognormal":
		if d.A == 0 {
			return Dist{}, fmt.Errorf("%q: the mean must be positive", s)
		}
		m, v := float64(d.A), float64(d.B)*float64(d.B)
		d.sig = math.Sqrt(math.Log(1 + v/(m*m)))
		d.mu = math.Log(m) - d.sig*d.sig/2
	}
	return d, nil
}

func (d Dist) String() string {
	switch d.Kind {
	case "uniform", "lognormal":
		return fmt.Sprintf("%s(%v,%v)", d.Kind, d.A, d.B)
	case "exp":
		return fmt.Sprintf("exp(%v)", d.A)
	}
	return d.A.String()
}

// Sample draws a duration in nanoseconds.
func (d Dist) Sample(r *rand.Rand) int64 {
	switch d.Kind {
	case "uniform":
		if d.B == d.A {
			return int64(d.A)
		}
		return int64(d.A) + r.Int64N(int64(d.B-d.A)+1)
	case "exp":
		return int64(r.ExpFloat64() * float64(d.A))
	case "lognormal":
		return int64(math.Exp(d.mu + d.sig*r.NormFloat64()))
	}
	return int64(d.A)
}

// Window is a span of virtual time, [At, Until).
type Window struct {
	At, Until time.Duration
}

func (w Window) has(now int64) bool { return now >= int64(w.At) && now < int64(w.Until) }

// Slowdown multiplies the service time of I/Os started within its window.
type Slowdown struct {
	Window
	Factor float64
}

// Fault fails I/Os of an op started within its window.
type Fault struct {
	Window
	Op Op
}

// ErrInjected is the error of an I/O failed by a Fault.
var ErrInjected = errors.New("device: injected I/O error")

// Model is a disk on virtual time. Each I/O holds one of QueueDepth slots
// from its start until it completes; its service is a latency drawn from
// Latency, and its bytes cross one channel of Bandwidth bytes per second
// (WriteBandwidth for writes, when set) shared by every I/O in service.
// A random I/O, one whose offset is not where the previous read or write
// ended, first pays a positioning time drawn from Seek, on the same
// channel: a disk has one head, so random I/Os cost device time in series,
// however many are in flight, and sequential ones pay only their bytes.
// Flushes wait for every I/O started before them. Model is not safe for
// concurrent use.
type Model struct {
	Name           string
	Bandwidth      int64 // bytes per second; 0 is unlimited
	WriteBandwidth int64 // bytes per second of writes; 0 is Bandwidth
	Latency        Dist
	Seek           Dist // positioning time of a random I/O; zero: none
	QueueDepth     int  // 0 is 1
	Slow           []Slowdown
	Faults         []Fault

	rng     *rand.Rand
	seekRNG *rand.Rand // Seek's own stream: Latency's draws are the same with or without it
	slots   []int64    // when each slot frees
	channel int64      // when the channel frees
	last    int64      // latest completion so far
	head    int64      // where the previous read or write ended
	moved   bool       // whether one was started: the first is random

	Stats ModelStats
}

// ModelStats are a model's counters.
type ModelStats struct {
	Reads, Writes, Flushes int64
	RBytes, WBytes         int64
	Errors                 int64
	Seeks                  int64 // random I/Os, which paid a positioning time
	BusyNs                 int64 // time with at least one I/O in service
}

// Seed sets the model's random source; the same seed gives the same
// latencies.
func (m *Model) Seed(seed uint64) {
	m.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	m.seekRNG = rand.New(rand.NewPCG(seed, seed^0x5eec))
}

// Start starts an I/O of n bytes at offset off (on the device: the
// caller places each file somewhere) at now and returns when it
// completes, and the error it completes with. A flush has no offset.
func (m *Model) Start(now int64, op Op, off, n int64) (int64, error) {
	if m.rng == nil {
		m.Seed(0)
	}
	if m.slots == nil {
		m.slots = make([]int64, max(m.QueueDepth, 1))
	}
	slot := 0
	for i, t := range m.slots {
		if t < m.slots[slot] {
			slot = i
		}
	}
	begin := max(now, m.slots[slot])
	factor := 1.0
	for _, s := range m.Slow {
		if s.has(begin) {
			factor *= s.Factor
		}
	}
	lat := int64(float64(m.Latency.Sample(m.rng)) * factor)
	done := begin + lat
	if op == Flush {
		done = max(done, m.last)
	} else if n > 0 {
		var busy int64 // time on the channel: positioning, then the bytes
		if m.moved && off == m.head {
			// Sequential: the head is where this I/O starts.
		} else if seek := m.Seek.Sample(m.seekRNG); seek > 0 {
			busy = int64(float64(seek) * factor)
			m.Stats.Seeks++
		}
		m.head, m.moved = off+n, true
		bw := m.Bandwidth
		if op == Write && m.WriteBandwidth > 0 {
			bw = m.WriteBandwidth
		}
		if bw > 0 {
			busy += int64(float64(n) * 1e9 / float64(bw) * factor)
		}
		if bw > 0 || busy > 0 {
			start := max(begin, m.channel)
			m.channel = start + busy
			done = max(done, m.channel)
		}
	}
	if done > m.last {
		m.Stats.BusyNs += done - max(begin, m.last)
		m.last = done
	}
	m.slots[slot] = done
	var err error
	for _, f := range m.Faults {
		if f.Op == op && f.has(begin) {
			err = ErrInjected
		}
	}
	switch op {
	case Read:
		m.Stats.Reads++
		m.Stats.RBytes += n
	case Write:
		m.Stats.Writes++
		m.Stats.WBytes += n
	case Flush:
		m.Stats.Flushes++
	}
	if err != nil {
		m.Stats.Errors++
	}
	return done, err
}
