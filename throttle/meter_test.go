package throttle

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// floorNs returns floor(units*1e9/rate) computed with big integers.
func floorNs(units *big.Int, rate int64) int64 {
	n := new(big.Int).Mul(units, big.NewInt(nsPerSec))
	n.Quo(n, big.NewInt(rate))
	if !n.IsInt64() {
		panic("out of range")
	}
	return n.Int64()
}

// TestExactByteRate releases 10^6 requests of random sizes, each queued
// behind the previous one, at an odd byte rate, jumping the clock to every
// returned wake-up. Every release happens at exactly
// start + floor(bytes before it * 1e9 / rate): the schedule never drifts
// and loses nothing to rounding, over 14 simulated hours.
func TestExactByteRate(t *testing.T) {
	const rate = 10_000_007
	n := 1_000_000
	if testing.Short() {
		n = 50_000
	}
	const t0 = 123_456_789
	tree := New(Config{})
	g := tree.Group("a")
	tree.SetLimits(t0, "a", Limits{RBPS: rate})
	q := NewQueue(tree)
	rng := rand.New(rand.NewPCG(1, 2))
	reqs := make([]*Request, n)
	for i := range reqs {
		reqs[i] = &Request{Group: g, Dir: Read, Bytes: rng.Int64N(MiB) + 1, IOs: 1}
	}
	q.Push(t0, reqs[0])
	q.Push(t0, reqs[1])
	now, total := int64(t0), new(big.Int)
	var out []*Request
	for i := range n {
		var next int64
		out, next = q.Release(now, out[:0])
		if len(out) != 1 || out[0] != reqs[i] {
			t.Fatalf("t=%d: released %d requests, want request %d alone", now, len(out), i)
		}
		if want := t0 + floorNs(total, rate); now != want {
			t.Fatalf("request %d released at %d, want %d", i, now, want)
		}
		total.Add(total, big.NewInt(reqs[i].Bytes))
		if i+2 < n {
			q.Push(now, reqs[i+2])
		}
		if i+1 < n {
			now = next
		} else if next != -1 {
			t.Fatalf("next = %d after the last release, want -1", next)
		}
	}
	want := t0 + floorNs(total, rate)
	if got := tree.Eligible(now, g, Read); got != want {
		t.Fatalf("final schedule %d, want start + floor(%v*1e9/%d) = %d", got, total, rate, want)
	}
}

// TestExactIOPS checks the I/O schedule the same way: riops=100 gives 10^4
// I/Os in exactly 100 s, and an odd rate (7/s) stays exact at every I/O.
func TestExactIOPS(t *testing.T) {
	for _, tc := range []struct {
		riops int64
		n     int
	}{{100, 10_000}, {7, 1_000}, {999_983, 100_000}} {
		tree := New(Config{})
		g := tree.Group("a")
		tree.SetLimits(0, "a", Limits{RIOPS: tc.riops})
		q := NewQueue(tree)
		for range tc.n {
			q.Push(0, &Request{Group: g, Dir: Read, Bytes: 4 * KiB, IOs: 1})
		}
		var now int64
		var out []*Request
		released := 0
		for q.Len() > 0 {
			var next int64
			out, next = q.Release(now, out[:0])
			for range out {
				if want := floorNs(big.NewInt(int64(released)), tc.riops); now != want {
					t.Fatalf("riops=%d: I/O %d released at %d, want %d", tc.riops, released, now, want)
				}
				released++
			}
			if next != -1 {
				now = next
			}
		}
		if released != tc.n {
			t.Fatalf("riops=%d: released %d, want %d", tc.riops, released, tc.n)
		}
		if got, want := tree.Eligible(now, g, Read), floorNs(big.NewInt(int64(tc.n)), tc.riops); got != want {
			t.Errorf("riops=%d: %d I/Os end the schedule at %d, want %d", tc.riops, tc.n, got, want)
		}
	}
	// The headline figure: 10^4 I/Os at 100/s take exactly 100 s.
	if got := floorNs(big.NewInt(10_000), 100); got != 100*sec {
		t.Fatalf("floorNs = %d", got)
	}
}

// TestMeterRescaleExact checks that a rate change keeps the outstanding
// debt's meaning exactly: (tat-now)*rate + rem, the debt in units times
// 1e9, is the same before and after, for random rates and debts.
func TestMeterRescaleExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	debt := func(m meter, now int64) *big.Int {
		d := new(big.Int).Mul(big.NewInt(m.tat-now), big.NewInt(m.rate))
		return d.Add(d, new(big.Int).SetUint64(m.rem))
	}
	for range 10_000 {
		old, rate := rng.Int64N(1e10)+1, rng.Int64N(1e10)+1
		now := rng.Int64N(1e12)
		m := meter{rate: old, tat: now}
		m.charge(now, 0, rng.Int64N(1e9))
		before := debt(m, now)
		m.setRate(now, rate)
		after := debt(m, now)
		// The new debt is floor(before/rate) ns plus a remainder: exactly
		// before, when scaled back.
		if before.Cmp(after) != 0 || m.rem >= uint64(rate) {
			t.Fatalf("rate %d -> %d: debt %v became %v (rem %d)", old, rate, before, after, m.rem)
		}
	}
}

// TestMeterEdges covers overflow and the unlimited cases of the meter
// arithmetic.
func TestMeterEdges(t *testing.T) {
	if q, r := mulAddDiv(math.MaxInt64, nsPerSec, 0, 1); q != math.MaxInt64 || r != 0 {
		t.Errorf("overflowing quotient = %d, %d; want saturation", q, r)
	}
	if q, r := mulAddDiv(1<<62, nsPerSec, 5, 1<<40); q != (1<<22)*nsPerSec || r != 5 {
		t.Errorf("128-bit quotient = %d, %d", q, r)
	}
	m := meter{rate: 1, tat: 0}
	m.charge(0, 0, math.MaxInt64)
	if m.tat != math.MaxInt64 {
		t.Errorf("huge charge: tat %d, want saturated", m.tat)
	}
	m.charge(0, 0, 1)
	if m.tat != math.MaxInt64 {
		t.Errorf("charge past saturation: tat %d", m.tat)
	}
	u := meter{}
	u.charge(5, 0, 100)
	if !u.open(0) || u.credit(0, 0) != math.MaxInt64 {
		t.Errorf("unlimited meter is limited: %+v", u)
	}
	for _, tc := range []struct{ a, b, want int64 }{
		{math.MaxInt64, 1, math.MaxInt64},
		{math.MinInt64, -1, math.MinInt64},
		{-5, 3, -2},
	} {
		if got := satAdd(tc.a, tc.b); got != tc.want {
			t.Errorf("satAdd(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
	if got := satSub(math.MinInt64+1, 10); got != math.MinInt64 {
		t.Errorf("satSub underflow = %d", got)
	}
	if got := satSub(0, math.MinInt64); got != math.MaxInt64 {
		t.Errorf("satSub(0, MinInt64) = %d", got)
	}
}

// TestMeterPay: a Meter paid in pieces of any size, at any pace, is due
// exactly when the units paid take at its rate from the first payment,
// and idle time earns no credit.
func TestMeterPay(t *testing.T) {
	m := NewMeter(3 << 20) // 3 MiB/s
	now := int64(0)
	for _, n := range []int64{1, 4095, 1 << 20, 7, 1<<20 - 4103, 1 << 20} {
		now = max(now, m.Pay(now, n))
	}
	if now != 1e9 {
		t.Fatalf("3 MiB paid at 3 MiB/s due at %d ns, want 1e9", now)
	}
	// An idle second earns nothing: the next MiB is due a third of a
	// second after it is paid.
	now += 1e9
	if due := m.Pay(now, 1<<20); due != now+333_333_333 {
		t.Fatalf("1 MiB paid after an idle second due at +%d ns, want +333333333", due-now)
	}
	if due := NewMeter(0).Pay(5, 1<<30); due != 5 {
		t.Fatalf("an unlimited meter's payment due at %d, want now (5)", due)
	}
}
