package cost

import "math"

// Dir is an I/O's direction: reads and writes are priced apart.
type Dir uint8

const (
	Read Dir = iota
	Write
)

// HalfLife is about how many I/Os of a direction the model learns over:
// each new one weighs as much as the oldest HalfLife before it together.
const HalfLife = 256

// Model learns the cost of a device's I/Os (see the package doc). The zero
// value is ready: it prices by its prior until it has seen I/Os. It is not
// safe for concurrent use.
type Model struct {
	inflight int
	last     int64 // the last Begin or End
	lastEnd  int64 // the last End
	busy     int64 // time with an I/O in flight, ns
	fit      [2]fit
	mean     float64 // the recent mean I/O's attributed device time, ns (0: none yet)
	pos      map[uint64]int64
}

// Token is an I/O in flight, from Begin to End.
type Token struct {
	at int64
	ok bool
}

// Begin starts an I/O at now.
func (m *Model) Begin(now int64) Token {
	m.advance(now)
	m.inflight++
	return Token{at: now, ok: true}
}

// advance counts the time since the last event as busy if an I/O was in
// flight.
func (m *Model) advance(now int64) {
	if now > m.last && m.inflight > 0 {
		m.busy += now - m.last
	}
	m.last = max(m.last, now)
}

// Busy returns how long, in all until now, an I/O has been in flight, in
// ns.
func (m *Model) Busy(now int64) int64 {
	if now > m.last && m.inflight > 0 {
		return m.busy + now - m.last
	}
	return m.busy
}

// End ends at now the I/O t began, of n bytes in direction d, random or
// sequential, and learns from it. It returns the I/O's latency in ns. An
// End of a zero Token does nothing.
func (m *Model) End(now int64, t Token, d Dir, random bool, n int64) (latency int64) {
	if !t.ok {
		return 0
	}
	m.advance(now)
	m.inflight = max(m.inflight-1, 0)
	a := float64(now - max(t.at, m.lastEnd))
	m.lastEnd = max(m.lastEnd, now)
	m.fit[d&1].add(random, n, a)
	if m.mean == 0 {
		m.mean = a
	} else {
		m.mean += (a - m.mean) / HalfLife
	}
	return now - t.at
}

// Sequential reports whether an I/O of n bytes at off of the file ino
// starts where the file's last one ended, and notes where this one ends.
// A file system's block allocation is not known here: a file's I/Os in
// order are taken as sequential, any other as random.
func (m *Model) Sequential(ino uint64, off, n int64) bool {
	if m.pos == nil {
		m.pos = make(map[uint64]int64)
	}
	end, ok := m.pos[ino]
	if !ok && len(m.pos) >= maxFiles {
		clear(m.pos) // a bound, not an LRU: what is lost is one I/O's guess
	}
	m.pos[ino] = off + n
	return ok && end == off
}

// maxFiles bounds the files whose positions Sequential remembers.
const maxFiles = 4096

// Cost returns the device time, in ns, of an I/O of n bytes in direction
// d, random or sequential; at least 1.
func (m *Model) Cost(d Dir, random bool, n int64) int64 {
	return max(int64(m.fit[d&1].predict(random, n)), 1)
}

// Mean returns the device time of the recent mean I/O in ns, or 0 before
// any I/O ended.
func (m *Model) Mean() float64 { return m.mean }

// The prior a fit starts from, and its weight in I/Os: a sequential I/O
// 50 µs, a random one 200 µs, and 2 ns a byte (500 MB/s), for reads and
// writes alike. With a weight of 2 I/Os it is gone once a few dozen I/Os
// of a kind have been seen, but it settles what the data cannot: the
// split between a cost per I/O and per byte while every I/O has one size.
const priorWeight = 2

func prior(d Dir, random bool, n int64) float64 {
	perIO := 50e3
	if random {
		perIO = 200e3
	}
	return perIO + 2*float64(n)
}

// fit is the weighted least squares of one direction's attributed device
// time y against x = (sequential, random, KiB): the decayed sums of x xᵀ
// and x y, and the solution when it is current.
type fit struct {
	xx    [3][3]float64
	xy    [3]float64
	theta [3]float64
	dirty bool
	n     int64
}

// decay is the factor each sample's weight is multiplied by per new one.
const decay = 1 - 1.0/HalfLife

func features(random bool, n int64) [3]float64 {
	x := [3]float64{1, 0, float64(n) / 1024}
	if random {
		x[0], x[1] = 0, 1
	}
	return x
}

func (f *fit) add(random bool, n int64, y float64) {
	x := features(random, n)
	for i := range 3 {
		for j := range 3 {
			f.xx[i][j] = f.xx[i][j]*decay + x[i]*x[j]
		}
		f.xy[i] = f.xy[i]*decay + x[i]*y
	}
	f.dirty = true
	f.n++
}

func (f *fit) predict(random bool, n int64) float64 {
	if f.n == 0 {
		return prior(Read, random, n)
	}
	if f.dirty {
		f.solve()
	}
	x := features(random, n)
	y := 0.0
	for i := range 3 {
		y += f.theta[i] * x[i]
	}
	return max(y, 1)
}

// solve solves (X'X + R) θ = X'y + R θ₀, R the prior's weight on each
// coefficient (a KiB's weighed as 64 KiB of I/O), by Gaussian elimination
// with partial pivoting; coefficients are kept at 0 or above.
func (f *fit) solve() {
	f.dirty = false
	p := [3]float64{50e3, 200e3, 2 * 1024}
	r := [3]float64{priorWeight, priorWeight, priorWeight * 64 * 64}
	var a [3][4]float64
	for i := range 3 {
		for j := range 3 {
			a[i][j] = f.xx[i][j]
		}
		a[i][i] += r[i]
		a[i][3] = f.xy[i] + r[i]*p[i]
	}
	for c := range 3 {
		piv := c
		for i := c + 1; i < 3; i++ {
			if math.Abs(a[i][c]) > math.Abs(a[piv][c]) {
				piv = i
			}
		}
		a[c], a[piv] = a[piv], a[c]
		if a[c][c] == 0 {
			return
		}
		for i := range 3 {
			if i == c {
				continue
			}
			k := a[i][c] / a[c][c]
			for j := c; j < 4; j++ {
				a[i][j] -= k * a[c][j]
			}
		}
	}
	for i := range 3 {
		f.theta[i] = max(a[i][3]/a[i][i], 0)
	}
}
