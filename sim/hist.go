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
	buckets    map[int]int64
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

func (h *hist) add(v int64) {
	if h.buckets == nil {
		h.buckets = make(map[int]int64)
		h.min = v
	}
	h.n++
	h.min, h.max = min(h.min, v), max(h.max, v)
	f := float64(v)
	h.sum += f
	h.sumSq += f * f
	h.buckets[bucketOf(v)]++
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
	last := 0
	for b := range h.buckets {
		last = max(last, b)
	}
	var seen int64
	for b := 0; b <= last; b++ {
		seen += h.buckets[b]
		if seen >= rank {
			return min(max(lowOf(b), h.min), h.max)
		}
	}
	return h.max
}
