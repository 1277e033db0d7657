package throttle

import (
	"math"
	"math/big"
	"testing"
	"time"
)

const GiB = 1 << 30

// TestExtremeLimits: at 1 B/s, 1 IOPS, 100 GiB/s and math.MaxInt64 B/s,
// with bursts of 10 ms, 2^62 ns and math.MaxInt64 ns, requests of 1 B
// to 2^62 B are released exactly when the bytes before them take at the
// rate (to the ns, or saturated at math.MaxInt64, never wrapped), the
// budget after an idle time is the rate times that time capped at the
// burst (saturated, never negative), and no arithmetic panics.
func TestExtremeLimits(t *testing.T) {
	for _, l := range []Limits{{RBPS: 1}, {RIOPS: 1}, {RBPS: 100 * GiB}, {RBPS: math.MaxInt64}, {RBPS: 100 * GiB, RIOPS: 1}} {
		for _, burst := range []time.Duration{10 * time.Millisecond, 1 << 62, math.MaxInt64} {
			for _, size := range []int64{1, 4096, 100 * GiB, 1 << 62} {
				tree := New(Config{Burst: burst})
				g := tree.Group("a")
				const t0 = 1_000_000_007
				tree.SetLimits(t0, "a", l)
				q := NewQueue(tree)
				// Idle from t0 to idle: the budget is the credit.
				idle := int64(t0 + 1<<40)
				want := credit(l.RBPS, min(idle-t0, int64(burst)))
				if got := tree.ByteBudget(idle, g, Read); got != want {
					t.Errorf("%v burst %v: byte budget after %d ns idle = %d, want %d", l, burst, idle-t0, got, want)
				}
				if got := tree.Budget(idle, g, Read, 1<<20); got < 0 {
					t.Errorf("%v burst %v: budget %d", l, burst, got)
				}
				// Three requests in a row, each released when the ones
				// before are paid for (after the credit the burst left).
				reqs := []*Request{{Group: g, Dir: Read, Bytes: size, IOs: 1}, {Group: g, Dir: Read, Bytes: size, IOs: 1}, {Group: g, Dir: Read, Bytes: size, IOs: 1}}
				start := max(t0, satSub(idle, int64(burst)))
				now := idle
				for _, r := range reqs {
					q.Push(now, r)
				}
				var out []*Request
				var next int64
				var at []int64 // when each was released
				for len(at) < len(reqs) {
					out, next = q.Release(now, out[:0])
					for range out {
						at = append(at, now)
					}
					if len(at) == len(reqs) {
						break
					}
					if next <= now {
						t.Fatalf("%v burst %v size %d: %d queued, next wake-up %d at %d", l, burst, size, len(reqs)-len(at), next, now)
					}
					now = next
				}
				for k, got := range at {
					want := idle
					if l.RBPS != 0 {
						want = max(want, satNs(start, new(big.Int).Mul(big.NewInt(int64(k)), big.NewInt(size)), l.RBPS))
					}
					if l.RIOPS != 0 {
						want = max(want, satNs(start, big.NewInt(int64(k)), l.RIOPS))
					}
					if got != want {
						t.Errorf("%v burst %v: request %d of %d B released at %d, want %d", l, burst, k, size, got, want)
					}
				}
				if now < idle {
					t.Fatalf("%v burst %v size %d: time went back to %d", l, burst, size, now)
				}
			}
		}
	}
}

// credit is rate times d ns, in whole units, saturated at math.MaxInt64;
// math.MaxInt64 for no rate.
func credit(rate, d int64) int64 {
	if rate == 0 {
		return math.MaxInt64
	}
	n := new(big.Int).Mul(big.NewInt(rate), big.NewInt(d))
	n.Quo(n, big.NewInt(nsPerSec))
	if !n.IsInt64() {
		return math.MaxInt64
	}
	return n.Int64()
}

// satNs is start plus units at rate, in whole ns, saturated.
func satNs(start int64, units *big.Int, rate int64) int64 {
	n := new(big.Int).Mul(units, big.NewInt(nsPerSec))
	n.Quo(n, big.NewInt(rate))
	n.Add(n, big.NewInt(start))
	if !n.IsInt64() {
		return math.MaxInt64
	}
	return n.Int64()
}

// TestLimitEveryMillisecond: a limit changed every millisecond among 1
// B/s, 1 IOPS, 100 GiB/s and none, for 20 virtual seconds, while
// requests of 1 B to 1 GiB keep coming: the queue always names a future
// wake-up while it holds requests, time only goes forward, and once the
// limit is lifted everything is released at once.
func TestLimitEveryMillisecond(t *testing.T) {
	limits := []Limits{{RBPS: 1}, {RIOPS: 1}, {RBPS: 100 * GiB}, {}, {RBPS: 100 * GiB, RIOPS: 1}}
	sizes := []int64{1, 4096, 1 << 20, GiB}
	tree := New(Config{})
	g := tree.Group("a")
	q := NewQueue(tree)
	var out []*Request
	queued, released := 0, 0
	for step := range 20_000 {
		now := int64(step) * 1e6
		tree.SetLimits(now, "a", limits[step%len(limits)])
		if step%3 == 0 {
			q.Push(now, &Request{Group: g, Dir: Read, Bytes: sizes[step%len(sizes)], IOs: 1})
			queued++
		}
		var next int64
		out, next = q.Release(now, out[:0])
		released += len(out)
		if q.Len() != queued-released || q.Len() > 0 && next <= now || q.Len() == 0 && next != -1 {
			t.Fatalf("step %d: %d queued, next wake-up %d at %d", step, q.Len(), next, now)
		}
	}
	now := int64(20_000) * 1e6
	tree.SetLimits(now, "a", Limits{})
	out, next := q.Release(now, out[:0])
	if released += len(out); released != queued || next != -1 {
		t.Fatalf("limit lifted: %d of %d released, next %d", released, queued, next)
	}
}
