package lease

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The tests run hosts on virtual time against the script on an
// in-process Redis (miniredis) whose clock is the virtual one: each host's
// group is a fluid reader that uses what it holds, up to its demand, and
// the figures are what the hosts together served.

const (
	ms    = int64(time.Millisecond)
	sec   = int64(time.Second)
	limit = 100 << 20 // the shared cap, bytes per second
)

var key = Key{Group: "builds", Cap: "rbps"}

type world struct {
	t      *testing.T
	mr     *miniredis.Miniredis
	rdb    *redis.Client
	script *redis.Script
	epoch  time.Time
	now    int64
	rtt    int64
	dt     int64
	down   func(now int64) bool // the server unreachable
	// lose, where set, says whether the link loses the request the
	// world is sending: before the server, or its answer after the
	// server ran the script.
	lose  func() (before, after bool)
	hosts []*simHost
}

type simHost struct {
	name   string
	h      *Host
	skew   int64                   // the host's clock is the world's plus skew
	demand func(now int64) float64 // per second; +Inf: all it can get
	dead   func(now int64) bool
	cut    func(now int64) bool // where set, the host's link to the server is down
	used   float64
	waited int64
	flight *flight
	served float64 // since the last window
	// piece, where set, makes the reader read in pieces of that many
	// bytes, each when its demand has accrued it and the host's token
	// bucket (the lease's rate, a burst of a quarter second) holds it,
	// as a throttled fio does: due is what its demand accrued unread,
	// tokens the bucket's, since the time the piece at the head waits
	// from (0: none waits; a fluid reader waits while its demand is above
	// its rate).
	piece        float64
	due, tokens  float64
	waitingSince int64
}

type flight struct {
	at    int64 // when the answer, or the failure, reaches the host
	reply Reply
	err   error
}

func newWorld(t *testing.T, rtt time.Duration) *world {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	w := &world{t: t, mr: mr, rdb: rdb, script: redis.NewScript(Script), epoch: time.Unix(1.8e9, 0),
		rtt: int64(rtt), down: func(int64) bool { return false }}
	return w
}

func (w *world) add(n int, o Options, demand func(i int, now int64) float64) {
	for range n {
		i := len(w.hosts)
		w.hosts = append(w.hosts, &simHost{name: fmt.Sprintf("h%d", i), h: NewHost(o),
			demand: func(now int64) float64 { return demand(i, now) }, dead: func(int64) bool { return false }})
	}
}

// step moves the world on by dt: answers that arrived are taken, requests
// due are sent, and each host's reader uses what its host holds.
func (w *world) step(dt int64) {
	for _, s := range w.hosts {
		if s.dead(w.now) {
			continue
		}
		local := w.now + s.skew
		if f := s.flight; f != nil && w.now >= f.at {
			s.flight = nil
			if f.err != nil {
				s.h.Fail(local)
			} else {
				s.h.Answer(local, f.reply)
			}
		}
		use := []Usage{{Key: key, Limit: limit, Used: int64(s.used), Waited: s.waited, Waiting: s.waiting(w.now), Ops: s.ops()}}
		if s.flight == nil && (s.h.Due(local) || s.h.Early(local, use)) {
			s.flight = w.send(s, s.h.Request(local, use))
		}
	}
	for _, s := range w.hosts {
		if s.dead(w.now) {
			continue
		}
		if s.h.Stats().Trips == 0 {
			continue // a mount serves once it holds its first leases
		}
		rate := float64(s.held(w.now))
		d := s.demand(w.now)
		if s.piece > 0 {
			s.readPieces(w.now, dt, rate, d)
			continue
		}
		use := min(d, rate) * float64(dt) / float64(sec)
		s.used += use
		s.served += use
		if d > rate {
			s.waited += dt
			if s.waitingSince == 0 {
				s.waitingSince = w.now
			}
		} else {
			s.waitingSince = 0
		}
	}
	w.now += dt
}

// readPieces moves a reader of pieces on by dt at the lease rate and
// demand d, both per second.
func (s *simHost) readPieces(now, dt int64, rate, d float64) {
	sec := float64(sec)
	s.tokens = min(s.tokens+rate*float64(dt)/sec, rate/4)
	if !math.IsInf(d, 1) {
		s.due = min(s.due+d*float64(dt)/sec, 4*s.piece) // fio catches up a little
	} else {
		s.due = s.piece
	}
	for s.due >= s.piece && s.tokens >= s.piece {
		s.due -= s.piece
		s.tokens -= s.piece
		s.used += s.piece
		s.served += s.piece
		s.waitingSince = 0
	}
	if s.due >= s.piece {
		s.waited += dt
		if s.waitingSince == 0 {
			s.waitingSince = now
		}
	}
}

// ops is the reader's I/Os so far: its pieces, or for a fluid reader
// as many as pieces of 64 KiB would be.
func (s *simHost) ops() int64 {
	if s.piece > 0 {
		return int64(s.used / s.piece)
	}
	return int64(s.used / (64 << 10))
}

// waiting is how long the piece at the head has waited at now.
func (s *simHost) waiting(now int64) int64 {
	if s.waitingSince == 0 {
		return 0
	}
	return now - s.waitingSince
}

// held is the rate s's group holds at the world's now.
func (s *simHost) held(now int64) int64 {
	hs := s.h.Holds(now + s.skew)
	if len(hs) == 0 {
		return 0
	}
	return hs[0].Rate
}

// send runs req on the server halfway through the round trip, or fails
// it after the timeout where the server cannot be reached.
func (w *world) send(s *simHost, req Request) *flight {
	o := s.h.Options()
	var before, after bool
	if w.lose != nil {
		before, after = w.lose()
	}
	if w.down(w.now) || s.cut != nil && s.cut(w.now) || before {
		return &flight{at: w.now + int64(o.Timeout), err: fmt.Errorf("unreachable")}
	}
	w.mr.SetTime(w.epoch.Add(time.Duration(w.now + w.rtt/2)))
	keys, args := req.Args("test", s.name, o)
	v, err := w.script.Run(context.Background(), w.rdb, keys, args...).Result()
	if err != nil {
		w.t.Fatalf("the script: %v", err)
	}
	r, err := ParseReply(v, len(req.Keys))
	if err != nil {
		w.t.Fatal(err)
	}
	if after {
		return &flight{at: w.now + int64(o.Timeout), err: fmt.Errorf("answer lost")}
	}
	return &flight{at: w.now + w.rtt, reply: r}
}

// run steps the world in steps of w.dt (1 ms unless set) until end and returns what the hosts
// served in each window of length win, per second, as a fraction of the
// cap, and per host.
func (w *world) run(end, win int64) (total []float64, per [][]float64) {
	for w.now < end {
		next := w.now + win
		for w.now < next {
			w.step(max(w.dt, ms))
		}
		var sum float64
		row := make([]float64, len(w.hosts))
		for i, s := range w.hosts {
			row[i] = s.served * float64(sec) / float64(win) / limit
			sum += row[i]
			s.served = 0
		}
		total, per = append(total, sum), append(per, row)
	}
	return total, per
}

func backlogged(int, int64) float64 { return math.Inf(1) }

// TestEqualShares: four hosts reading as fast as they can share the cap
// equally, and together get all of it and no more.
func TestEqualShares(t *testing.T) {
	w := newWorld(t, time.Millisecond)
	w.add(4, Options{}, backlogged)
	total, per := w.run(5*sec, sec)
	for i, x := range total {
		if x > 1.0 || i > 0 && x < 0.99 {
			t.Errorf("second %d: the hosts served %.4f of the cap, want 0.99-1.0", i, x)
		}
	}
	for i, x := range per[len(per)-1] {
		if x < 0.24 || x > 0.26 {
			t.Errorf("host %d served %.4f of the cap in the last second, want a quarter", i, x)
		}
	}
}

// TestDemandMoves: readers start and stop on different hosts every two
// seconds; the busy hosts take the idle ones' share within a lease, and
// the hosts together never serve more than the cap.
func TestDemandMoves(t *testing.T) {
	for _, rtt := range []time.Duration{time.Millisecond, 5 * time.Millisecond} {
		t.Run(rtt.String(), func(t *testing.T) {
			w := newWorld(t, rtt)
			// Host 3 always reads 10 MiB/s.
			w.add(4, Options{}, moving(10<<20))
			total, _ := w.run(14*sec, 100*ms)
			for i, x := range total {
				if x > 1.0 {
					t.Errorf("%d ms: the hosts served %.4f of the cap, more than it", i*100, x)
				}
			}
			if m := mean(settled(total)); m < 0.98 {
				t.Errorf("settled, the hosts served %.4f of the cap, want at least 0.98", m)
			}
			if m := mean(total[20:]); m < 0.95 {
				t.Errorf("over the run, the hosts served %.4f of the cap, want at least 0.95", m)
			}
			for _, s := range w.hosts {
				st := s.h.Stats()
				if st.Trips > 14*20 {
					t.Errorf("%s asked %d times in 14 s, more than 20 a second", s.name, st.Trips)
				}
				// Every round trip took the world's rtt: all in its bucket.
				b := 0
				for b < len(RTTBounds) && int64(rtt) > RTTBounds[b] {
					b++
				}
				if st.RTTCounts[b] != st.Trips || st.RTTSum != st.Trips*int64(rtt) {
					t.Errorf("%s: %d round trips of %v counted as %v (sum %v), want all in bucket %d", s.name, st.Trips, rtt, st.RTTCounts, time.Duration(st.RTTSum), b)
				}
			}
		})
	}
}

// moving is the demand of four hosts whose readers move every 2 s: host
// i < 3 reads all it can in the phases where bit i of the phase number is
// set, host 3 always at last (per second).
func moving(last float64) func(i int, now int64) float64 {
	return func(i int, now int64) float64 {
		switch {
		case i == 3:
			return last
		case (now/(2*sec)+1)&(1<<i) != 0:
			return math.Inf(1)
		}
		return 0
	}
}

// settled returns the windows of 100 ms of a run of moving readers that
// come a lease or more after the last change, the hosts settled.
func settled(total []float64) []float64 {
	var out []float64
	for i, x := range total {
		if i%20 >= int(DefaultLease/time.Duration(100*ms)) {
			out = append(out, x)
		}
	}
	return out
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// TestOutage: the server unreachable for 10 s. Each host keeps its lease
// to its end, then holds its fallback, the cap over the hosts seen, so
// the hosts never serve more than the cap together; once the server is
// back they take their shares again within 2 s, with no burst.
func TestOutage(t *testing.T) {
	for _, afresh := range []bool{false, true} {
		t.Run(map[bool]string{false: "kept", true: "afresh"}[afresh], func(t *testing.T) { outage(t, afresh) })
	}
}

// outage is TestOutage with the server's keys kept over the outage, or
// lost (a server started afresh); either way, no host is starved of its
// share when it comes back: none asks for more than its fallback over
// the hosts it saw before, however few the new server has seen.
func outage(t *testing.T, afresh bool) {
	w := newWorld(t, time.Millisecond)
	w.down = func(now int64) bool { return now >= 5*sec && now < 15*sec }
	// Host 0 reads 20 MiB/s, the others all they can get.
	w.add(4, Options{}, func(i int, now int64) float64 {
		if i == 0 {
			return 20 << 20
		}
		return math.Inf(1)
	})
	total, per := w.run(15*sec, 100*ms)
	if afresh {
		w.mr.FlushAll()
	}
	t2, p2 := w.run(20*sec, 100*ms)
	total, per = append(total, t2...), append(per, p2...)
	for i, x := range total {
		if x > 1.0 {
			t.Errorf("%d ms: the hosts served %.4f of the cap, more than it", i*100, x)
		}
	}
	// In the outage, once the leases ended: each a quarter, host 0 its 20 MiB/s.
	for i := 62; i < 150; i++ {
		if got, want := per[i][1], 0.25; math.Abs(got-want) > 0.001 {
			t.Errorf("%d ms into the outage: host 1 served %.4f of the cap, want its fallback %.2f", i*100, got, want)
			break
		}
	}
	for i := 151; i < len(per); i++ {
		for h := 1; h < 4; h++ {
			if per[i][h] < 0.2 {
				t.Errorf("%d ms, the server back: host %d served %.4f of the cap, want a share of it", i*100, h, per[i][h])
			}
		}
	}
	if m := mean(total[170:]); m < 0.98 {
		t.Errorf("from 2 s after the server came back: %.4f of the cap, want at least 0.98", m)
	}
	if st := w.hosts[1].h.Stats(); st.Failures == 0 || st.Failures > 10*sec/int64(DefaultTimeout)+1 {
		t.Errorf("host 1 failed %d requests in a 10 s outage, want one each %v", st.Failures, DefaultTimeout)
	}
}

// TestStaggeredReturn: the server down for 10 s and started afresh, the
// hosts reaching it again one by one, 300 ms apart (as a Redis client
// does that redials once a second after failed dials). A host back holds
// itself to its fallback, the cap over the hosts it saw before, until the
// server has seen as many again: those still without an answer hold
// theirs, which the server knows nothing of. The hosts never serve more
// than the cap together; once every host is back they share it as
// before, host 3 its tenth and the others the rest, within 2 s. A host
// that never comes back holds the others to their fallbacks until it
// would no longer count as seen (Options.Seen after its last request),
// and no longer.
func TestStaggeredReturn(t *testing.T) {
	for _, dies := range []bool{false, true} {
		t.Run(map[bool]string{false: "all back", true: "one never back"}[dies], func(t *testing.T) {
			w := newWorld(t, time.Millisecond)
			w.down = func(now int64) bool { return now >= 5*sec && now < 15*sec }
			o := Options{}
			if dies {
				o.Seen = 12 * time.Second
			}
			w.add(4, o, func(i int, now int64) float64 {
				if i == 3 {
					return limit / 10
				}
				return math.Inf(1)
			})
			for i, s := range w.hosts {
				s.cut = func(now int64) bool { return now >= 5*sec && now < 15*sec+int64(i)*300*ms }
			}
			if dies {
				w.hosts[3].dead = func(now int64) bool { return now >= 10*sec }
			}
			total, per := w.run(15*sec, 100*ms)
			w.mr.FlushAll()
			t2, p2 := w.run(22*sec, 100*ms)
			total, per = append(total, t2...), append(per, p2...)
			for i, x := range total {
				if x > 1.0 {
					t.Errorf("%d ms: the hosts served %.4f of the cap, more than it: %.3f", i*100, x, per[i])
				}
			}
			from, want := 185, 0.3 // 2 s after the last came back (its failure, and a Renew)
			if dies {
				// The dead host last asked about 5 s: the others hold a
				// quarter until 17 s, then share the cap in thirds.
				for i := 151; i < 168; i++ {
					for h := range 3 {
						if got := per[i][h]; math.Abs(got-0.25) > 0.001 {
							t.Errorf("%d ms: host %d served %.4f of the cap, want its fallback 0.25 while host 3 counts as seen", i*100, h, got)
						}
					}
				}
				from, want = 190, 1.0/3
			}
			for i := from; i < len(per); i++ {
				for h := range 3 {
					if got := per[i][h]; math.Abs(got-want) > 0.01 {
						t.Errorf("%d ms: host %d served %.4f of the cap, want %.3f", i*100, h, got, want)
					}
				}
			}
		})
	}
}

// TestPacedHost: beside three hosts reading all they can, one reads a
// tenth of the cap, paced, in pieces of 64 KiB: a Renew sees one piece of
// it or two, never its rate. It gets its tenth, and the others the rest:
// the cap is served whole.
func TestPacedHost(t *testing.T) {
	w := newWorld(t, time.Millisecond)
	w.add(4, Options{}, func(i int, now int64) float64 {
		if i == 0 {
			return limit / 10
		}
		return math.Inf(1)
	})
	for _, s := range w.hosts {
		s.piece = 64 << 10
	}
	total, per := w.run(10*sec, sec)
	for i := 2; i < len(total); i++ {
		if total[i] < 0.98 || total[i] > 1.0 || per[i][0] < 0.098 {
			t.Errorf("second %d: the hosts served %.4f of the cap, the paced one %.4f; want 0.98-1.0, and its tenth", i, total[i], per[i][0])
		}
	}
}

// TestLossyLink: the link loses one request in ten, half of them on the
// way to the server and half on the way back (the script ran: the server
// recorded a grant the host never heard of). With readers moving between
// hosts as in TestDemandMoves, the hosts serve 0.95 of the cap or more
// once settled. They may serve more than the cap for moments: a host
// whose answer was lost goes on at the lease it had, which the server
// may have given in part to others, and one that heard nothing for a
// lease holds its fallback, a quarter here: never more than the cap and a
// quarter (how often is logged).
func TestLossyLink(t *testing.T) {
	w := newWorld(t, time.Millisecond)
	rng := rand.New(rand.NewPCG(7, 7))
	w.lose = func() (bool, bool) {
		x := rng.Float64()
		return x < 0.05, x >= 0.05 && x < 0.1
	}
	w.add(4, Options{}, moving(math.Inf(1)))
	total, per := w.run(14*sec, 100*ms)
	steady := settled(total)
	over := 0
	for i, x := range total {
		if x > 1.0 {
			over++
			t.Logf("%d ms: the hosts served %.4f of the cap: %.3f", i*100, x, per[i])
		}
		if x > 1.25 {
			t.Errorf("%d ms: the hosts served %.4f of the cap, more than the cap and a host's fallback", i*100, x)
		}
	}
	if m := mean(steady); m < 0.95 {
		t.Errorf("settled, with a tenth of the requests lost, the hosts served %.4f of the cap, want at least 0.95", m)
	}
	var failed, trips int64
	for _, s := range w.hosts {
		failed += s.h.Stats().Failures
		trips += s.h.Stats().Trips
	}
	if r := float64(failed) / float64(failed+trips); r < 0.05 || r > 0.15 {
		t.Errorf("%d of %d requests failed, want about a tenth", failed, failed+trips)
	}
	t.Logf("settled: %.4f of the cap; %d of %d requests lost; %d windows of 100 ms of %d above the cap", mean(steady), failed, failed+trips, over, len(total))
}

// TestHostDies: a host that stops asking holds its lease to its end only;
// the others share its part from then on.
func TestHostDies(t *testing.T) {
	w := newWorld(t, time.Millisecond)
	w.add(2, Options{}, backlogged)
	w.hosts[1].dead = func(now int64) bool { return now >= 3*sec }
	total, _ := w.run(6*sec, 100*ms)
	// From 3 s: host 0 alone; its half, then all once host 1's lease
	// ended and host 0 asked again.
	end := 30 + int(DefaultLease/time.Duration(100*ms)) + 2
	if m := mean(total[end:]); m < 0.98 {
		t.Errorf("from %d ms: %.4f of the cap, want at least 0.98", end*100, m)
	}
	for i := 30; i < end-3; i++ {
		if total[i] > 0.51 {
			t.Errorf("%d ms: %.4f of the cap while the dead host's lease held", i*100, total[i])
		}
	}
}

// TestSkew: the hosts' clocks set hours apart change nothing: what each
// served is what it serves with the clocks together.
func TestSkew(t *testing.T) {
	run := func(skews []int64) [][]float64 {
		w := newWorld(t, 2*time.Millisecond)
		w.add(3, Options{}, func(i int, now int64) float64 {
			if i == 0 && now > 2*sec {
				return 5 << 20
			}
			return math.Inf(1)
		})
		for i, s := range w.hosts {
			s.skew = skews[i]
		}
		_, per := w.run(4*sec, sec)
		return per
	}
	want := run([]int64{0, 0, 0})
	got := run([]int64{-3 * 3600 * sec, 2 * 3600 * sec, 17 * sec})
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("per host and second, clocks apart: %.4f; together: %.4f", got, want)
	}
}

// TestHundredHosts: a hundred hosts, a third of them reading at a time
// and the third moving every 3 s, serve 0.98 of the cap or more over the
// run, and never more than the cap in any second.
func TestHundredHosts(t *testing.T) {
	if testing.Short() || raceOn {
		t.Skip("skipping: a hundred hosts for 12 s of virtual time take minutes with the race detector or -short; test.sh runs it without")
	}
	w := newWorld(t, time.Millisecond)
	w.dt = 2 * ms
	w.add(100, Options{}, func(i int, now int64) float64 {
		if (int(now/(3*sec))+i)%3 == 0 {
			return math.Inf(1)
		}
		return 0
	})
	total, _ := w.run(12*sec, sec)
	for i, x := range total {
		if x > 1.0 {
			t.Errorf("second %d: the hosts served %.4f of the cap, more than it", i, x)
		}
	}
	if m := mean(total[1:]); m < 0.98 {
		t.Errorf("the hosts served %.4f of the cap after the first second (%.4f), want at least 0.98", m, total)
	}
	var trips int64
	for _, s := range w.hosts {
		trips += s.h.Stats().Trips
	}
	if perSec := float64(trips) / 100 / 12; perSec > 20 {
		t.Errorf("a host asked %.1f times a second, more than 20", perSec)
	}
}

// TestHugeCap: a group reading 100 GiB/s under a cap of 200 GiB/s asks
// for its rate and a sixteenth: its bytes over a Renew, in ns, are past
// what an int64 holds.
func TestHugeCap(t *testing.T) {
	const capBPS, rate = 200 << 30, 100 << 30
	h := NewHost(Options{})
	use := func(used int64) []Usage {
		return []Usage{{Key: key, Limit: capBPS, Used: used, Ops: used >> 20}}
	}
	h.Request(0, use(0))
	h.Answer(ms, Reply{Seen: 1, Grants: []int64{capBPS}, Fairs: []int64{capBPS}, Totals: []int64{0}, Holders: []int64{1}, Caps: []int64{capBPS}})
	r := h.Request(100*ms, use(rate/10))
	if got := r.Used[0]; got < rate*99/100 || got > rate*101/100 {
		t.Errorf("use %d B/s, want %d", got, int64(rate))
	}
	if got, want := r.Demands[0], int64(rate)+rate/16; got < want*99/100 || got > want*101/100 {
		t.Errorf("demand %d B/s, want %d", got, want)
	}
}
