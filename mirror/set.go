package mirror

import (
	"fmt"
	"math/bits"
	"syscall"
)

// MaxMirrors is the most mirrors a Set holds.
const MaxMirrors = 64

// Set is a mirror set's decisions, single-threaded and pure: which
// mirrors are healthy, which one serves each read, when a slow read is
// hedged and on which mirror, which mirror is probed, and how the outcome
// of a write sent to every mirror turns into stale marks. It does no I/O
// and keeps no time: every method is given the time and returns what the
// driver is to do (read on mirror i, call back at t, answer, persist the
// stale marks). The mount's mirror set (package backing) and the
// simulator drive the same Set, so both route, retry and hedge reads
// alike. A Set is not safe for concurrent use: its driver serialises the
// calls.
//
// A caller's read is a Flight. Begin sends it to the mirror the policy
// picks; the driver reports each read's end (Finished) and calls Timer at
// the Step's Wake while the read runs. A read that fails is sent to the
// next mirror not tried at once; one that runs past the policy's hedge
// delay (Hedger) is sent to the mirror the policy names as well, and the
// first answer serves the caller; the reads still running end later and
// are reported like any other, so the policy learns from them.
type Set struct {
	name   string
	policy Policy
	hedger Hedger // policy, when it hedges
	prober Prober // policy, when it probes
	gen    int    // counts policies made: a read reports to the one it started with
	stale  []bool
	live   []int // healthy mirrors, in order: the policy's indices
	stats  []Stats
	sample []int64 // when stats[i].Latency was last updated
}

// Stats are one mirror's read counters.
type Stats struct {
	Reads    int64 // reads sent to it, ended
	Bytes    int64 // bytes they returned
	Errors   int64 // operations that failed on it, reads and writes
	Inflight int   // reads in flight
	// Hedged counts its reads still running after the hedge delay, and
	// sent to another mirror too.
	Hedged int64
	// Latency is a decaying average of its read times, ns (time constant
	// DecayTime); 0 before its first read.
	Latency int64
	// ReadTime is the total time its reads took, ns, from being sent to
	// their answer.
	ReadTime int64
}

// NewSet returns the decisions of a set of mirrors read with the named
// policy; stale, when not nil, marks the mirrors not to use.
func NewSet(mirrors int, policy string, stale []bool) (*Set, error) {
	if mirrors > MaxMirrors {
		return nil, fmt.Errorf("a mirror set has at most %d mirrors, got %d", MaxMirrors, mirrors)
	}
	if _, err := New(policy, mirrors); err != nil {
		return nil, err
	}
	s := &Set{name: policy, stale: make([]bool, mirrors), stats: make([]Stats, mirrors), sample: make([]int64, mirrors)}
	copy(s.stale, stale)
	s.relive()
	return s, nil
}

// relive rebuilds the list of healthy mirrors and the policy over them.
func (s *Set) relive() {
	s.live = s.live[:0]
	for i, st := range s.stale {
		if !st {
			s.live = append(s.live, i)
		}
	}
	s.policy, s.hedger, s.prober = nil, nil, nil
	if len(s.live) > 0 {
		s.policy, _ = New(s.name, len(s.live))
		s.hedger, _ = s.policy.(Hedger)
		s.prober, _ = s.policy.(Prober)
	}
	s.gen++
}

// Mirrors is how many mirrors the set has, healthy or not.
func (s *Set) Mirrors() int { return len(s.stale) }

// Policy is the name of the read policy in force.
func (s *Set) Policy() string { return s.name }

// SetPolicy switches the read policy; reads in flight report their end to
// the policy they started with no more.
func (s *Set) SetPolicy(name string) error {
	if _, err := New(name, len(s.stale)); err != nil {
		return err
	}
	s.name = name
	s.relive()
	return nil
}

// Live lists the healthy mirrors in order. The slice is the Set's: it
// changes when a mirror turns stale or healthy.
func (s *Set) Live() []int { return s.live }

// Stale reports whether mirror i is stale.
func (s *Set) Stale(i int) bool { return s.stale[i] }

// StaleMarks returns which mirrors are stale, for recording.
func (s *Set) StaleMarks() []bool { return append([]bool(nil), s.stale...) }

// MarkStale marks mirror i stale unless it is the last healthy one (then
// ok is false: its failure is the operation's). changed says that the
// marks changed, and the driver must record them before the operation
// that failed on i is answered: a mark lost by a restart would serve the
// stale mirror again.
func (s *Set) MarkStale(i int) (changed, ok bool) {
	if s.stale[i] {
		return false, true
	}
	if len(s.live) <= 1 {
		return false, false
	}
	s.stale[i] = true
	s.relive()
	return true, true
}

// SetStale sets the stale marks at once, for a set opening or recovering;
// at least one mirror must stay healthy.
func (s *Set) SetStale(stale []bool) error {
	healthy := false
	for _, st := range stale {
		healthy = healthy || !st
	}
	if !healthy || len(stale) != len(s.stale) {
		return fmt.Errorf("%d stale marks for %d mirrors, none healthy", len(stale), len(s.stale))
	}
	copy(s.stale, stale)
	s.relive()
	return nil
}

// Add grows the set by one mirror, stale, and returns its index (the
// set's last): it serves no read until Revive brings it in, once the
// driver has made its copy equal (a resync). The healthy mirrors, the
// policy and its state are as they were, and a read begun before the
// call never goes to the new mirror. A set of MaxMirrors mirrors is
// refused. The driver records the new mirror's stale mark before it
// writes to it, so that a restart keeps it stale.
func (s *Set) Add() (int, error) {
	if len(s.stale) >= MaxMirrors {
		return 0, fmt.Errorf("a mirror set has at most %d mirrors: this one has them all", MaxMirrors)
	}
	s.stale = append(s.stale, true)
	s.stats = append(s.stats, Stats{})
	s.sample = append(s.sample, 0)
	return len(s.stale) - 1, nil
}

// Revive marks mirror i healthy again, its copy made equal (a resync).
func (s *Set) Revive(i int) {
	if s.stale[i] {
		s.stale[i] = false
		s.relive()
	}
}

// Stats returns a copy of each mirror's counters.
func (s *Set) Stats() []Stats { return append([]Stats(nil), s.stats...) }

// Stat returns mirror i's counters.
func (s *Set) Stat(i int) Stats { return s.stats[i] }

// Carry takes on mirror i's counters from another process that served
// the set (a takeover): all but Inflight, which counts this process's own
// reads.
func (s *Set) Carry(i int, st Stats) {
	st.Inflight = s.stats[i].Inflight
	s.stats[i] = st
}

// Failed counts an operation that failed on mirror i without marking it
// stale (a read-only operation that another mirror may serve).
func (s *Set) Failed(i int) { s.stats[i].Errors++ }

// Outcome is how one mirror's part of an operation sent to several ended.
type Outcome uint8

const (
	// OK: the mirror did it.
	OK Outcome = iota
	// Failed: the mirror failed where another may have succeeded.
	Failed
	// Gone: the object was removed meanwhile, on this mirror and on one
	// that succeeded: no divergence.
	Gone
)

// Fanout sorts out an operation sent to the mirrors on (healthy when it
// was sent), out[k] being mirror on[k]'s outcome. When none succeeded, ok
// is false and the operation fails (with the first mirror's error, the
// driver's to keep); otherwise each mirror that failed is counted and
// marked stale (all but the last healthy one). marked lists the mirrors
// newly marked: the driver records the marks before the operation is
// answered.
func (s *Set) Fanout(on []int, out []Outcome) (ok bool, marked []int) {
	for _, o := range out {
		ok = ok || o == OK
	}
	if !ok {
		return false, nil
	}
	for k, i := range on {
		if out[k] == Failed {
			s.stats[i].Errors++
			if c, _ := s.MarkStale(i); c {
				marked = append(marked, i)
			}
		}
	}
	return true, marked
}

// Send is a read sent to one mirror.
type Send struct {
	Mirror int   // which, in the set
	Start  int64 // when, ns
	k, gen int   // its index in the policy's list, and the policy's generation
	hedge  int64 // how long it may run before it is hedged; 0: never
}

// Flight is one caller's read of the set, from the first mirror it is
// sent to until its answer is decided and every read of it has ended.
// The driver holds it (a zero Flight is not valid: Begin makes it) and
// passes it back to the Set.
type Flight struct {
	r       Read
	tried   uint64 // mirrors tried, not open for this read, or added since it began
	pending int    // reads sent and not ended
	most    int    // mirrors open for it when it began
	last    Send   // the read sent last: a hedge goes from it
	hedgeAt int64  // when Timer hedges; 0: never
	over    bool   // the answer is decided
	err     error  // the last read's error
}

// Read is what the flight reads.
func (f *Flight) Read() Read { return f.r }

// Over reports whether the flight's answer is decided.
func (f *Flight) Over() bool { return f.over }

// Idle reports whether every read of the flight has ended.
func (f *Flight) Idle() bool { return f.pending == 0 }

// Most is the most reads the flight makes: one on each mirror of the set
// open for it when it began.
func (f *Flight) Most() int { return f.most }

// Step is what the driver of a flight does next.
type Step struct {
	// Send, when Sending, is a read to start now on Send.Mirror, whose
	// end the driver reports with Finished.
	Send    Send
	Sending bool
	// Probe, when Probing, is a background read of Probe.Mirror for the
	// policy (Prober), not the caller's: the driver starts it off the
	// caller's path and reports its end with Done.
	Probe   Send
	Probing bool
	// Wake is when the driver calls Timer, 0 for never; it replaces the
	// Wake of every earlier step of the flight.
	Wake int64
	// Done says the caller's answer is decided: the data of the read
	// Served when Err is nil, else the error Err.
	Done   bool
	Served Send
	Err    error
	// Report says the read that ended failed, and its mirror's failures
	// reached a power of two: worth a line in the log.
	Report bool
}

// Begin starts a caller's read r: it is sent to the mirror the policy
// picks, or to the first healthy one of those open when the pick is not
// (closed has bit i set for a mirror i the read cannot go to). Under
// the same call the policy may ask for a probe.
func (s *Set) Begin(now int64, r Read, closed uint64) (Flight, Step) {
	// Mirrors added later (Add) are not the flight's: it never reads
	// them, whatever Revive does meanwhile.
	f := Flight{r: r, tried: closed | ^(uint64(1)<<len(s.stale) - 1)}
	f.most = bits.OnesCount64(^f.tried)
	st := s.pick(now, &f)
	if !st.Sending {
		return f, st
	}
	if s.prober != nil {
		if k, ok := s.prober.Probe(now); ok && closed&(1<<s.live[k]) == 0 {
			st.Probe, st.Probing = s.begin(now, s.live[k], k, r), true
		}
	}
	return f, st
}

// pick sends f to the mirror the policy picks, or to the next healthy
// one free for it; with none left, the flight is over with its last
// error (EIO when no read was made).
func (s *Set) pick(now int64, f *Flight) Step {
	i, k := -1, -1
	if len(s.live) > 0 {
		k = s.policy.Pick(now, f.r)
		i = s.live[k]
	}
	if i < 0 || !f.free(i) {
		if k = s.untried(f); k < 0 {
			f.over, f.hedgeAt = true, 0
			err := f.err
			if err == nil {
				err = syscall.EIO
			}
			return Step{Done: true, Err: err}
		}
		i = s.live[k]
	}
	return s.send(now, f, i, k)
}

// free reports whether mirror i may take another read of f.
func (f *Flight) free(i int) bool { return f.tried&(1<<i) == 0 }

// untried returns the policy index of the first healthy mirror free for
// f, -1 for none.
func (s *Set) untried(f *Flight) int {
	for k, i := range s.live {
		if f.free(i) {
			return k
		}
	}
	return -1
}

// send sends f to mirror i (policy index k).
func (s *Set) send(now int64, f *Flight, i, k int) Step {
	f.tried |= 1 << i
	f.pending++
	sn := s.begin(now, i, k, f.r)
	if s.hedger != nil && s.untried(f) >= 0 {
		sn.hedge = s.hedger.HedgeAfter(sn.Start, k)
	}
	f.last, f.hedgeAt = sn, 0
	if sn.hedge > 0 {
		f.hedgeAt = sn.Start + sn.hedge
	}
	return Step{Send: sn, Sending: true, Wake: f.hedgeAt}
}

// begin counts a read of r sent to mirror i (policy index k).
func (s *Set) begin(now int64, i, k int, r Read) Send {
	s.policy.Started(now, k, r)
	s.stats[i].Inflight++
	return Send{Mirror: i, Start: now, k: k, gen: s.gen}
}

// Timer is the driver's call at a step's Wake: a read still running then
// is sent to the mirror the policy names as well (Hedger's HedgeTo), or,
// when the policy would rather wait on it, the flight wakes again a hedge
// delay later. A call before the flight's Wake, or after its answer is
// decided, does nothing.
func (s *Set) Timer(now int64, f *Flight) Step {
	if f.over || f.hedgeAt == 0 || now < f.hedgeAt {
		return Step{Wake: f.hedgeAt}
	}
	from := f.last
	var st Step
	switch {
	case s.hedger != nil && from.gen == s.gen:
		allowed := func(k int) bool { return f.free(s.live[k]) }
		if k, ok := s.hedger.HedgeTo(now, from.k, from.Start, allowed); ok {
			st = s.send(now, f, s.live[k], k)
		}
	default:
		// The policy changed meanwhile: the mirror it picks, or the next.
		if s.untried(f) >= 0 {
			st = s.pick(now, f)
		}
	}
	switch {
	case st.Sending:
		s.stats[from.Mirror].Hedged++
	case s.untried(f) >= 0 && from.hedge > 0:
		// The read's own mirror is still the best bet: ask again later.
		f.hedgeAt = now + from.hedge
		st.Wake = f.hedgeAt
	default:
		f.hedgeAt = 0
	}
	return st
}

// Finished reports the end of a read of f sent as sn, which read n bytes
// or failed with err. The first read to succeed serves the caller; a
// read that fails, with none of the flight's others running, is sent to
// the next mirror not tried.
func (s *Set) Finished(now int64, f *Flight, sn Send, n int, err error) Step {
	report := s.Done(now, sn, n, err)
	f.pending--
	switch {
	case f.over:
		return Step{Report: report}
	case err == nil:
		f.over, f.hedgeAt = true, 0
		return Step{Done: true, Served: sn, Report: report}
	}
	f.err = err
	if f.pending > 0 {
		return Step{Wake: f.hedgeAt, Report: report}
	}
	st := s.pick(now, f)
	st.Report = report
	return st
}

// Done counts the end of a read sent as sn, a flight's or a probe's, and
// tells the policy it started with; report says it failed and is worth a
// line in the log.
func (s *Set) Done(now int64, sn Send, n int, err error) (report bool) {
	c := &s.stats[sn.Mirror]
	c.Inflight--
	c.Reads++
	c.Bytes += int64(n)
	c.ReadTime += now - sn.Start
	s.decay(sn.Mirror, now, now-sn.Start)
	if s.gen == sn.gen {
		s.policy.Done(now, sn.k, sn.Start, err)
	}
	if err == nil {
		return false
	}
	c.Errors++
	return c.Errors&(c.Errors-1) == 0
}

// decay folds a read time into mirror i's latency average.
func (s *Set) decay(i int, now, d int64) {
	st := &s.stats[i]
	if st.Latency == 0 {
		st.Latency, s.sample[i] = d, now
		return
	}
	w := float64(now-s.sample[i]) / float64(DecayTime)
	w = min(w, 1)
	st.Latency += int64(float64(d-st.Latency) * w)
	s.sample[i] = now
}
