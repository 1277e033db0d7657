package throttle

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"testing"
	"time"
)

// FuzzThrottle decodes its input into a run of a Tree and a Queue on
// virtual time, driven as a shell drives them (an operation, then
// Release): requests of 0 B to 4 MiB pushed for groups of a small tree
// (a with children a/x and a/y, a/y with a child a/y/z, and b alone),
// removed, promoted, refunded and finished; limits changed as the engine
// changes them (a LimitChange applied to the current limits, kept only if
// Tree.Check accepts it), from 1 B/s and 1 IOPS to 100 GiB/s and
// math.MaxInt64, and unlimited, with weights and floors; leases; the
// clock moved by 0 ns to an hour or to the returned wake-up. At the end the
// shell follows the wake-ups until the queue is empty. After every
// Release it checks what the package documents:
//
//   - Nothing is lost or released twice: a released request was queued
//     and is no longer (Request.Queued), Len counts what was pushed and
//     neither released nor removed, Release's next wake-up is -1 exactly
//     when the queue is empty and otherwise after now, and following the
//     wake-ups drains the queue ("queued requests never hang"), with at
//     most as many wake-ups that release nothing in a row as there are
//     nested anticipations to end (one per level with children, plus
//     one).
//   - Eligibility: a request is released only when its group and every
//     ancestor are open in its direction (Tree.Eligible, as of before the
//     Release: charges only move schedules later). A request still queued
//     after Release although Eligible at now is held by an anticipation,
//     which only a level limiting its direction's bytes does, and never
//     past Burst: the next wake-up is then at most now+Burst.
//   - Order: within a group and direction, a readahead request is never
//     released while a demand request waits, and a request never
//     overtakes an earlier one of the same class (Promote keeps arrival
//     order among demand requests).
//   - Rate (see checkRate for the bound and its derivation): at every
//     level, in each direction and dimension, over any stretch of time in
//     which its rate does not change, what is charged to it is at most the
//     rate times the time plus Burst, plus the one request that goes into
//     debt, where time a request waited counts from its arrival (a queued
//     request is charged as of when it reached the level).
//   - Budget: 0 <= Budget <= ByteBudget <= the tightest byte cap on the
//     path times Burst (math.MaxInt64 exactly when no level caps the
//     bytes), Budget is 0 while the group is not Eligible, and a level
//     limited afresh starts with no credit.
func FuzzThrottle(f *testing.F) {
	// Seeds: a header byte (Burst), then operations; see fuzzRun.
	f.Add([]byte{})
	// 1 B/s on a, a 4 MiB read in a/x, a 1 B read in a/y, an hour.
	f.Add([]byte{0, opLimit, 0, 0x01, 1, opPush, 1, 0, 6, opPush, 2, 0, 0, opAdvance, 7})
	// 1 IOPS on a/y and 100 GiB/s on b, both directions, with reads
	// and writes of every size, following the wake-ups.
	f.Add([]byte{1, opLimit, 2, 0x0f, 1, 1, 1, 1, opLimit, 4, 0x03, 5, 5,
		opPush, 2, 0, 0, opPush, 2, 1, 3, opPush, 3, 2, 6, opPush, 4, 3, 5, opPush, 4, 0, 8, 0x12, 0x34, 0x56, opPush, 4, 1, 7,
		opAdvance, 8, opAdvance, 8, opAdvance, 3, opAdvance, 8})
	// Unlimited to math.MaxInt64 B/s and back, with readahead promoted,
	// a request removed and a short read refunded.
	f.Add([]byte{2, opLimit, 0, 0x03, 6, 6, opPush, 1, 6, 2, opPush, 1, 0, 2, opPush, 3, 6, 6,
		opPromote, 0, opRemove, 1, opRefund, 0, 3, opLimit, 0, 0x03, 0, 0, opAdvance, 2})
	// Weights and floors under a saturated parent, siblings backlogged.
	f.Add([]byte{3, opLimit, 0, 0x03, 3, 3, opLimit, 1, 0x30, 3, 2, 2, 0, 0, opLimit, 2, 0x10, 3,
		opPush, 1, 0, 4, opPush, 2, 0, 2, opPush, 1, 0, 4, opPush, 2, 0, 2, opPush, 3, 0, 5,
		opAdvance, 8, opAdvance, 8, opAdvance, 4, opPush, 2, 0, 2, opAdvance, 8})
	// A lease below the cap, 1 ns of burst, then an hour.
	f.Add([]byte{1, opLimit, 4, 0x0f, 4, 4, 3, 3, opLease, 4, 2, opPush, 4, 0, 6, opPush, 4, 1, 6,
		opAdvance, 8, opAdvance, 7})
	// A readahead and a demand request pushed together, the readahead
	// promoted before the Release: it goes first, by arrival.
	f.Add([]byte{0, opPush, 0, 6, 0, opPush, 0, 4, 0, opPromote, 0})
	// a reads at 1 MiB/s; a/x, a small reader, empties, so a holds a/y's
	// next read back for a/x's round trip (anticipation), and a/y's
	// write, which no level limits, goes at once nonetheless (as in
	// TestAnticipationOneDirection).
	f.Add([]byte{0, opLimit, 0, 0x01, 3, opPush, 1, 4, 2, opPush, 2, 4, 3, opPush, 2, 0, 3,
		opAdvance, 8, opPush, 1, 0, 2, opAdvance, 8, opAdvance, 8, opAdvance, 2, opPush, 2, 1, 2})
	f.Fuzz(func(t *testing.T, in []byte) {
		if err := fuzzRun(in); err != nil {
			t.Fatal(err)
		}
	})
}

// The operations of a fuzz input, one byte each (modulo opCount) followed
// by their arguments.
const (
	opPush    = iota // group, dir and class, size[, 3 bytes]: push, Release unless class's bit 2
	opAdvance        // step: move the clock (or to the next wake-up), following wake-ups
	opLimit          // group, keys, a value per key: a LimitChange, if Check accepts it
	opLease          // group, value: a lease of every cap (0: none)
	opRemove         // index: remove a queued request
	opPromote        // index: promote a queued request
	opRefund         // index, fraction: refund part of a released request, Finished
	opRelease        // Release at now
	opCount
)

var (
	fuzzPaths = []string{"a", "a/x", "a/y", "a/y/z", "b"}
	fuzzSizes = []int64{1, 512, 4096, 64 * KiB, 128 * KiB, MiB, 4 * MiB} // then 0 (a ticket), then any up to 4 MiB
	fuzzBPS   = []int64{0, 1, 4096, MiB, 10 * MiB, 100 * GiB, math.MaxInt64, 1000}
	fuzzIOPS  = []int64{0, 1, 10, 100, 1000, 1_000_000, math.MaxInt64, 3}
	fuzzSteps = []int64{0, 1, 1000, ms, 10 * ms, 100 * ms, sec, 3600 * sec} // then: to the next wake-up
	fuzzBurst = []time.Duration{0, 1, time.Millisecond, 100 * time.Millisecond, time.Second}
)

// Bounds on one input's work.
const (
	fuzzMaxOps   = 256
	fuzzMaxWakes = 64 // wake-ups followed by one opAdvance
)

type fuzzIn struct {
	b []byte
	i int
}

func (in *fuzzIn) more() bool { return in.i < len(in.b) }

func (in *fuzzIn) byte() byte {
	if in.i >= len(in.b) {
		return 0
	}
	in.i++
	return in.b[in.i-1]
}

// fuzzReq is the fuzzer's record of one request.
type fuzzReq struct {
	r        *Request
	id       int // push order
	g        int // index in fuzzPaths
	state    int // queued, released, removed
	done     bool
	shared   bool // released while the Tree was Shared
	pushed   int64
	released int64
}

const (
	stQueued = iota
	stReleased
	stRemoved
)

// fuzzMeter is the rate check's state of one level, direction and
// dimension, over the current stretch of one rate (see checkRate).
type fuzzMeter struct {
	rate int64
	p    int64 // units charged (less refunded) in the stretch so far
	min  i128  // min over the stretch's charges k of p_k*1e9 - rate*arrival_k
	any  bool
}

type fuzzState struct {
	tree   *Tree
	q      *Queue
	burst  int64
	now    int64
	groups []*Group
	up     [][]int // per group, the indices of it and its ancestors
	reqs   []*fuzzReq
	queued int
	meters [5][2][2]fuzzMeter // [group][Dir][bytes, ios]
	out    []*Request
	next   int64
	empty  int // wake-ups in a row that released nothing
}

func fuzzRun(b []byte) error {
	in := &fuzzIn{b: b}
	cfg := Config{Burst: fuzzBurst[int(in.byte())%len(fuzzBurst)]}
	s := &fuzzState{tree: New(cfg), now: 1_000_000_007, next: -1}
	cfg.EnsureDefaults()
	s.burst = int64(cfg.Burst)
	s.q = NewQueue(s.tree)
	for _, p := range fuzzPaths {
		s.groups = append(s.groups, s.tree.Group(p))
	}
	for _, g := range s.groups {
		var up []int
		for x := g; x != nil; x = x.Parent() {
			for j, y := range s.groups {
				if y == x {
					up = append(up, j)
				}
			}
		}
		s.up = append(s.up, up)
	}
	for ops := 0; in.more() && ops < fuzzMaxOps; ops++ {
		if err := s.op(in); err != nil {
			return fmt.Errorf("op %d (input byte %d): %w", ops, in.i, err)
		}
	}
	// Follow the wake-ups until the queue is empty.
	if err := s.release(false); err != nil {
		return err
	}
	for wakes := 0; s.next != -1; wakes++ {
		if wakes > 4*(s.queued+1)*(len(s.groups)+2) {
			return fmt.Errorf("t=%d: %d requests still queued after %d wake-ups", s.now, s.queued, wakes)
		}
		s.now = s.next
		if err := s.release(true); err != nil {
			return err
		}
	}
	if s.queued != 0 || s.q.Len() != 0 {
		return fmt.Errorf("t=%d: queue empty by its wake-up, yet %d queued (Len %d)", s.now, s.queued, s.q.Len())
	}
	for _, r := range s.reqs {
		if r.state == stQueued || r.r.Queued() {
			return fmt.Errorf("request %d lost: neither released nor removed", r.id)
		}
	}
	return nil
}

// op decodes and applies one operation, then Releases.
func (s *fuzzState) op(in *fuzzIn) error {
	op := in.byte() % opCount
	switch op {
	case opPush:
		g := int(in.byte()) % len(s.groups)
		dc := in.byte()
		r := &Request{Group: s.groups[g], Dir: Dir(dc & 1), Class: Class(dc >> 1 & 1), IOs: 1}
		switch k := int(in.byte()) % (len(fuzzSizes) + 2); {
		case k < len(fuzzSizes):
			r.Bytes = fuzzSizes[k]
		case k == len(fuzzSizes):
			r.IOs = 0 // a ticket: no bytes, no I/Os
		default:
			v := int64(in.byte())<<16 | int64(in.byte())<<8 | int64(in.byte())
			r.Bytes = 1 + v*4%(4*MiB) // up to 4 MiB, in steps of 4 B
		}
		fr := &fuzzReq{r: r, id: len(s.reqs), g: g, pushed: s.now}
		r.Value = fr
		s.reqs = append(s.reqs, fr)
		s.q.Push(s.now, r)
		s.queued++
		if dc&4 != 0 {
			return nil // pushed with others before the Release
		}
	case opAdvance:
		step := int(in.byte()) % (len(fuzzSteps) + 1)
		target := s.now
		if step < len(fuzzSteps) {
			target += fuzzSteps[step]
		} else if s.next != -1 {
			target = s.next
		}
		for wakes := 0; s.next != -1 && s.next <= target && wakes < fuzzMaxWakes; wakes++ {
			s.now = s.next
			if err := s.release(true); err != nil {
				return err
			}
		}
		s.now = max(s.now, target)
	case opLimit:
		g := int(in.byte()) % len(s.groups)
		mask := in.byte()
		var c LimitChange
		val := func(tab []int64) int64 { return tab[int(in.byte())%len(tab)] }
		for i, k := range []Keys{KeyRBPS, KeyWBPS, KeyRIOPS, KeyWIOPS} {
			if mask&(1<<i) != 0 {
				c.Keys |= k
				tab := fuzzBPS
				if i >= 2 {
					tab = fuzzIOPS
				}
				*Fields[i].At(&c.To) = val(tab)
			}
		}
		if mask&0x10 != 0 {
			c.Keys |= KeyWeight
			c.To.Weight = []int64{0, 1, 100, MaxWeight}[in.byte()%4]
		}
		if mask&0x20 != 0 {
			c.Keys |= KeyRBPSMin | KeyWBPSMin | KeyRIOPSMin | KeyWIOPSMin
			c.To.RBPSMin, c.To.WBPSMin = val(fuzzBPS[:6]), val(fuzzBPS[:6])
			c.To.RIOPSMin, c.To.WIOPSMin = val(fuzzIOPS[:5]), val(fuzzIOPS[:5])
		}
		path := fuzzPaths[g]
		l := c.Apply(s.groups[g].Limits())
		if s.tree.Check(map[string]Limits{path: l}) != nil {
			return nil // refused, as the engine refuses it
		}
		before := s.bytesLimited()
		s.tree.SetLimits(s.now, path, l)
		if err := s.limitsChanged(before); err != nil {
			return err
		}
	case opLease:
		g := int(in.byte()) % len(s.groups)
		v := in.byte()
		var l Lease
		if v != 0 {
			l = Lease{RBPS: fuzzBPS[1+int(v)%4], WBPS: fuzzBPS[1+int(v>>2)%4], RIOPS: fuzzIOPS[1+int(v>>4)%4], WIOPS: fuzzIOPS[1+int(v>>6)%4]}
		}
		before := s.bytesLimited()
		s.tree.SetLease(s.now, fuzzPaths[g], l)
		if err := s.limitsChanged(before); err != nil {
			return err
		}
	case opRemove, opPromote:
		k := int(in.byte())
		if s.queued == 0 {
			break
		}
		r := s.nth(k%s.queued, func(r *fuzzReq) bool { return r.state == stQueued })
		if op == opPromote {
			s.q.Promote(r.r)
			break
		}
		if !s.q.Remove(r.r) || r.r.Queued() {
			return fmt.Errorf("Remove of queued request %d failed", r.id)
		}
		r.state = stRemoved
		s.queued--
	case opRefund:
		k, frac := int(in.byte()), int64(in.byte())
		var n int
		for _, r := range s.reqs {
			if r.state == stReleased && !r.done {
				n++
			}
		}
		if n == 0 {
			break
		}
		r := s.nth(k%n, func(r *fuzzReq) bool { return r.state == stReleased && !r.done })
		r.done = true
		short := r.r.Bytes * frac / 255
		s.tree.Refund(s.now, r.r.Group, r.r.Dir, short)
		for _, x := range s.up[r.g] {
			m := &s.meters[x][r.r.Dir][dimBytes]
			m.p -= short
		}
		if r.shared {
			s.q.Finished(s.now, r.r.Group, r.r.Dir, 1)
		}
	case opRelease:
	}
	return s.release(false)
}

// nth returns the k-th request (from 0) of those ok accepts.
func (s *fuzzState) nth(k int, ok func(*fuzzReq) bool) *fuzzReq {
	for _, r := range s.reqs {
		if ok(r) {
			if k == 0 {
				return r
			}
			k--
		}
	}
	panic("fuzz: no such request")
}

// bytesLimited tells, per group and direction, whether the group itself
// caps its bytes.
func (s *fuzzState) bytesLimited() (l [5][2]bool) {
	for g, x := range s.groups {
		for d := range 2 {
			l[g][d] = x.Caps().BPS(Dir(d)) != 0
		}
	}
	return l
}

// limitsChanged starts a new stretch of the rate check for each meter
// whose rate changed, and checks that a byte cap set afresh starts with no
// credit ("going from unlimited to limited starts with no debt and no
// credit").
func (s *fuzzState) limitsChanged(before [5][2]bool) error {
	for g, x := range s.groups {
		c := x.Caps()
		for d := range 2 {
			for k, rate := range []int64{c.BPS(Dir(d)), c.IOPS(Dir(d))} {
				if m := &s.meters[g][d][k]; m.rate != rate {
					*m = fuzzMeter{rate: rate}
				}
			}
			if !before[g][d] && c.BPS(Dir(d)) != 0 {
				if b := s.tree.ByteBudget(s.now, x, Dir(d)); b != 0 {
					return fmt.Errorf("t=%d: %s %v bytes limited afresh (%v), byte budget %d, want 0", s.now, x.Path(), Dir(d), c, b)
				}
			}
		}
	}
	return nil
}

// release calls Release at now and checks its outcome; wake says the
// shell was woken at the time the last Release returned.
func (s *fuzzState) release(wake bool) error {
	var elig [5][2]int64
	for g, x := range s.groups {
		for d := range 2 {
			elig[g][d] = s.tree.Eligible(s.now, x, Dir(d))
		}
	}
	prev := s.next
	s.out, s.next = s.q.Release(s.now, s.out[:0])
	if s.next != -1 && s.next <= s.now || (s.next == -1) != (s.q.Len() == 0) {
		return fmt.Errorf("t=%d: %d queued, next wake-up %d", s.now, s.q.Len(), s.next)
	}
	if wake && len(s.out) == 0 {
		// Only the end of one of nested anticipations, each at most
		// Burst away.
		if s.empty++; s.empty > len(s.groups)+1 {
			return fmt.Errorf("t=%d: %d wake-ups in a row released nothing (woken for %d; next %d)", s.now, s.empty, prev, s.next)
		}
	} else if len(s.out) > 0 {
		s.empty = 0
	}
	for _, r := range s.out {
		fr, _ := r.Value.(*fuzzReq)
		if fr == nil || fr.r != r {
			return fmt.Errorf("t=%d: released a request never pushed", s.now)
		}
		if fr.state != stQueued {
			return fmt.Errorf("t=%d: released request %d, which is not queued (state %d)", s.now, fr.id, fr.state)
		}
		if r.Queued() {
			return fmt.Errorf("t=%d: released request %d still Queued", s.now, fr.id)
		}
		if e := elig[fr.g][r.Dir]; e != s.now {
			return fmt.Errorf("t=%d: released request %d (%s %v) eligible only at %d", s.now, fr.id, r.Group.Path(), r.Dir, e)
		}
		for _, x := range s.reqs {
			if x.state != stQueued || x == fr || x.r.Group != r.Group || x.r.Dir != r.Dir {
				continue
			}
			if r.Class == Readahead && x.r.Class == Demand {
				return fmt.Errorf("t=%d: readahead %d of %s %v released while demand %d waits", s.now, fr.id, r.Group.Path(), r.Dir, x.id)
			}
			if x.r.Class == r.Class && x.id < fr.id {
				return fmt.Errorf("t=%d: %v %d of %s %v released before %d, which came earlier", s.now, r.Class, fr.id, r.Group.Path(), r.Dir, x.id)
			}
		}
		fr.state, fr.released, fr.shared = stReleased, s.now, s.tree.Shared()
		s.queued--
		if err := s.checkRate(fr); err != nil {
			return err
		}
	}
	if s.q.Len() != s.queued {
		return fmt.Errorf("t=%d: Len %d, want %d", s.now, s.q.Len(), s.queued)
	}
	// Held although eligible: only by an anticipation, at a level
	// limiting the request's bytes, and for at most Burst.
	for _, fr := range s.reqs {
		if fr.state != stQueued || s.tree.Eligible(s.now, fr.r.Group, fr.r.Dir) != s.now {
			continue
		}
		if fr.r.Group.PathLimits().BPS(fr.r.Dir) == 0 {
			return fmt.Errorf("t=%d: request %d (%s %v, %d B) eligible, no level caps its bytes, yet still queued after Release (next %d)",
				s.now, fr.id, fr.r.Group.Path(), fr.r.Dir, fr.r.Bytes, s.next)
		}
		if s.next > satAdd(s.now, s.burst) {
			return fmt.Errorf("t=%d: request %d (%s %v) eligible yet held until %d, past Burst %d", s.now, fr.id, fr.r.Group.Path(), fr.r.Dir, s.next, s.burst)
		}
	}
	return s.checkBudgets()
}

// checkRate checks, at the release of r, the rate bound at every level of
// r's path, in r's direction, for bytes and for I/Os, then counts r.
//
// The bound, from the package's documentation: a level admits a request
// when its schedule (tat) is not after now, whatever its size, and
// charging c units at rate R as of time a sets tat = max(tat, a-Burst) +
// c/R, exactly, the remainder carried (the exact schedule E = tat +
// rem/R, of which tat is the floor); a queued request is charged to a
// level as of when it reached it, which is at or after its arrival (Push
// time). A refund of x units moves E back by at most x/R. So, while R
// stays the same, after the charge of a request k that arrived at a_k,
// E >= a_k - Burst + c_k/R, and every later charge and refund adds its
// units (less refunds) over R. If a later request m is admitted at t_m,
// tat <= t_m before its charge, so E < t_m + 1ns, and
//
//	(C - X) * 1e9 < R * (t_m - a_k + Burst + 1ns)
//
// where C is the units charged to the level from k up to but not including
// m and X those refunded in between. That is, what a level admits over a
// window from an arrival to an admission is at most its rate times the
// window plus Burst, plus one request: the last, which goes into debt.
// The window starts at the arrival, not the admission, of the first
// request, since time waiting in the queue is not idle time (see Queue).
func (s *fuzzState) checkRate(fr *fuzzReq) error {
	r := fr.r
	for _, x := range s.up[fr.g] {
		for k, units := range []int64{r.Bytes, r.IOs} {
			m := &s.meters[x][r.Dir][k]
			if m.rate == 0 {
				continue
			}
			// p*1e9 - R*(t_m + Burst + 1) < min_k (p_k*1e9 - R*a_k)
			lhs := mul128(m.p, nsPerSec).sub(mul128(m.rate, satAdd(satAdd(s.now, s.burst), 1)))
			if m.any && !lhs.less(m.min) {
				return fmt.Errorf("t=%d: %s %v %s at %d/s: request %d (%d B, %d I/Os, pushed at %d) released past the rate: since an earlier arrival, %d units charged before it, more than the rate allows over the time plus Burst %d",
					s.now, s.groups[x].Path(), r.Dir, []string{"bytes", "I/Os"}[k], m.rate, fr.id, r.Bytes, r.IOs, fr.pushed, m.p, s.burst)
			}
			v := mul128(m.p, nsPerSec).sub(mul128(m.rate, fr.pushed))
			if !m.any || v.less(m.min) {
				m.min, m.any = v, true
			}
			m.p += units
		}
	}
	return nil
}

// checkBudgets checks Budget and ByteBudget of every group and direction.
func (s *fuzzState) checkBudgets() error {
	for _, x := range s.groups {
		for d := range Dir(2) {
			bb := s.tree.ByteBudget(s.now, x, d)
			b := s.tree.Budget(s.now, x, d, 128*KiB)
			want := int64(math.MaxInt64) // the least cap times Burst
			for y := x; y != nil; y = y.Parent() {
				if r := y.Caps().BPS(d); r != 0 {
					hi, lo := bits.Mul64(uint64(r), uint64(s.burst))
					if hi < nsPerSec {
						q, _ := bits.Div64(hi, lo, nsPerSec)
						want = min(want, clampInt64(q))
					}
				}
			}
			limited := x.PathLimits().BPS(d) != 0
			switch {
			case b < 0 || b > bb:
				return fmt.Errorf("t=%d: %s %v: Budget %d, ByteBudget %d", s.now, x.Path(), d, b, bb)
			case bb > want || !limited && bb != math.MaxInt64:
				return fmt.Errorf("t=%d: %s %v: ByteBudget %d, above the caps' Burst worth %d", s.now, x.Path(), d, bb, want)
			case s.tree.Eligible(s.now, x, d) > s.now && b != 0:
				return fmt.Errorf("t=%d: %s %v: Budget %d while not eligible until %d", s.now, x.Path(), d, b, s.tree.Eligible(s.now, x, d))
			}
		}
	}
	return nil
}

// i128 is a signed 128-bit integer, two's complement, for the rate
// check's products of rates and times.
type i128 struct {
	hi int64
	lo uint64
}

func mul128(a, b int64) i128 {
	neg := (a < 0) != (b < 0)
	ua, ub := uint64(a), uint64(b)
	if a < 0 {
		ua = -ua
	}
	if b < 0 {
		ub = -ub
	}
	hi, lo := bits.Mul64(ua, ub)
	x := i128{int64(hi), lo}
	if neg {
		x = i128{}.sub(x)
	}
	return x
}

func (x i128) sub(y i128) i128 {
	lo, borrow := bits.Sub64(x.lo, y.lo, 0)
	return i128{x.hi - y.hi - int64(borrow), lo}
}

func (x i128) less(y i128) bool { return x.hi < y.hi || x.hi == y.hi && x.lo < y.lo }

// TestI128: the rate check's arithmetic against math/big's.
func TestI128(t *testing.T) {
	vals := []int64{0, 1, -1, 7, -7, nsPerSec, math.MaxInt64, math.MinInt64 + 1, 1 << 40, -(1 << 40)}
	for _, a := range vals {
		for _, b := range vals {
			for _, c := range vals {
				for _, d := range vals {
					x, y := mul128(a, b), mul128(c, d)
					if got, want := x.less(y), mul128big(a, b).Cmp(mul128big(c, d)) < 0; got != want {
						t.Errorf("%d*%d < %d*%d: got %v", a, b, c, d, got)
					}
					// x - y < 0 exactly when x < y (no overflow at these sizes).
					if got := x.sub(y).less(i128{}); got != x.less(y) {
						t.Errorf("%d*%d - %d*%d < 0: got %v", a, b, c, d, got)
					}
				}
			}
		}
	}
}

func mul128big(a, b int64) *big.Int { return new(big.Int).Mul(big.NewInt(a), big.NewInt(b)) }
