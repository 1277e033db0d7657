package sim

import (
	"math"
	"math/bits"
)

// hist is a latency histogram: exact count, min, max, mean and standard
// deviation, and percentiles from log-linear buckets (64 per power of two,
// 1.6 % wide).
type hist struct {
	n          int64
	min, max   int64
	sum, sumSq float64
	buckets    []int64
}

func bucketOf(v int64) int {
	if v < 64 {
		return int(v)
	}
	e := 63 - bits.LeadingZeros64(uint64(v)) // v in [2^e, 2^(e+1))
	return (e-6)*64 + int(v>>(e-6))
}

// lowOf returns the smallest value in bucket b.
func lowOf(b int) int64 {
	if b < 64 {
		return int64(b)
	}
	e := (b-64)/64 + 6
	m := int64((b-64)%64 + 64)
	return m << (e - 6)
}

func (h *hist) add(v int64) { h.addN(v, 1) }

// addN adds n samples of v.
func (h *hist) addN(v, n int64) {
	if n <= 0 {
		return
	}
	if h.n == 0 {
		h.min = v
	}
	h.n += n
	h.min, h.max = min(h.min, v), max(h.max, v)
	f := float64(v)
	h.sum += f * float64(n)
	h.sumSq += f * f * float64(n)
	b := bucketOf(v)
	for len(h.buckets) <= b {
		h.buckets = append(h.buckets, 0)
	}
	h.buckets[b] += n
}

func (h *hist) mean() float64 {
	if h.n == 0 {
		return 0
	}
	return h.sum / float64(h.n)
}

func (h *hist) stdev() float64 {
	if h.n < 2 {
		return 0
	}
	m := h.mean()
	v := (h.sumSq - float64(h.n)*m*m) / float64(h.n-1)
	return math.Sqrt(max(v, 0))
}

// pct returns the p-th percentile (0 < p <= 100): the low edge of the
// bucket holding it, clamped to [min, max].
func (h *hist) pct(p float64) int64 {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(p / 100 * float64(h.n)))
	var seen int64
	for b := range h.buckets {
		seen += h.buckets[b]
		if seen >= rank {
			return min(max(lowOf(b), h.min), h.max)
		}
	}
	return h.max
}
