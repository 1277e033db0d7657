package stack

import (
	"fmt"

	"sluice/cost"
	"sluice/throttle"
)

// The device, shared. While the throttle says the device is shared
// (throttle.Tree.Shared: a group has a weight, a floor or a latency
// target with no cap above it), every request is priced in device time
// by the cost model before it is queued, every device I/O is timed from
// its start to its completion to teach the model and the capacity
// controller, and the
// controller's capacity is the throttle's root: nobody waits until the
// device is saturated, and then groups share it by device time, floors
// first (see package cost).
type device struct {
	model cost.Model
	ctl   *cost.Controller
	// elsewhere says other hosts' groups use the device too (SetElsewhere).
	elsewhere bool
}

// SetElsewhere says whether groups of other hosts use the device now
// (package cluster knows): where they do, a group alone here competes for
// it all the same, and the capacity controller may find it saturated.
func (s *Stack) SetElsewhere(v bool) { s.dev.elsewhere = v }

// DeviceMetrics is what the stack knows of the device it shares.
type DeviceMetrics struct {
	// Shared says groups share the device (a weight, floor or latency
	// target with no cap above it). The rest is meaningful only then.
	Shared bool `json:"shared"`
	// Capacity is the device time the device is given a second, as the
	// model prices I/Os (1: one second a second, what a device serving
	// one I/O at a time has); 0 while it is not saturated: nobody waits.
	Capacity float64 `json:"capacity"`
	// Done is the device time the device completed a second in the last
	// period, as the model prices it; Idle the share of that period with
	// no I/O in flight.
	Done float64 `json:"done"`
	Idle float64 `json:"idle"`
	// Saturated says the last period found the device saturated;
	// Backlogged that requests waited on the capacity while it kept up.
	Saturated  bool `json:"saturated"`
	Backlogged bool `json:"backlogged"`
	// Queued says the last period's completions took, on the mean, well
	// more than with room while others competed (cost.State.Queued).
	Queued bool `json:"queued"`
	// The model's device time, in ns, of the recent mean I/O, of a 4 KiB
	// random read and write, and of a 1 MiB sequential read.
	MeanNs    float64 `json:"mean_ns"`
	ReadNs    int64   `json:"read_4k_random_ns"`
	WriteNs   int64   `json:"write_4k_random_ns"`
	SeqReadNs int64   `json:"read_1m_sequential_ns"`
	// Periods and Saturations count the controller's periods, and those
	// in which the device was saturated.
	Periods     int64 `json:"periods"`
	Saturations int64 `json:"saturations"`
}

func costDir(d throttle.Dir) cost.Dir {
	if d == throttle.Write {
		return cost.Write
	}
	return cost.Read
}

// price sets the device cost of a request of n bytes at off of ino in
// direction d, where the device is shared, and returns whether it is
// random.
func (s *Stack) price(req *throttle.Request, ino uint64, d throttle.Dir, off, n int64) bool {
	if !s.tree.Shared() {
		return false
	}
	random := !s.dev.model.Sequential(ino, off, n)
	req.Cost = s.dev.model.Cost(costDir(d), random, n)
	return random
}

// began notes that a device I/O starts at now, where the device is shared.
func (s *Stack) began(now int64) cost.Token {
	if !s.tree.Shared() {
		return cost.Token{}
	}
	return s.dev.model.Begin(now)
}

// ended teaches the model and the controller a device I/O of group g that
// began with t and ended at now, and tells the queue that the k requests
// it was admitted as are finished.
func (s *Stack) ended(now int64, t cost.Token, g *throttle.Group, d throttle.Dir, random bool, n int64, k int) {
	if t == (cost.Token{}) {
		return
	}
	s.queue.Finished(now, g, d, k)
	lat := s.dev.model.End(now, t, costDir(d), random, n)
	var target int64 // the nearest on g's path
	for x := g; x != nil && target == 0; x = x.Parent() {
		target = x.Limits().Target
	}
	s.dev.ctl.Observe(now, costDir(d), random, n, s.dev.model.Cost(costDir(d), random, n), lat, target)
}

// Payment is a finished Pay's read as the cost model waits for it: the
// driver takes it from the request (Request.TakePayment) before reusing
// it, performs the read, and reports it with Paid.
type Payment struct {
	tok    cost.Token
	group  *throttle.Group
	random bool
	pieces int
}

// TakePayment returns what Paid needs of the finished Pay request r, once:
// later calls, and calls for other requests, return a Payment that is not
// Due (as where the device is not shared).
func (r *Request) TakePayment() Payment {
	if !r.pay {
		return Payment{}
	}
	p := Payment{tok: r.tok, group: r.group, random: r.random, pieces: len(r.pieces)}
	r.tok = cost.Token{}
	return p
}

// Paid reports that the driver's own read of a Pay ended at now, with n
// bytes read: where the device is shared, its time teaches the cost model
// and the capacity controller. The driver calls it after every Pay that
// finished without error, whatever its read's outcome; a Payment that is
// not Due needs no call.
func (s *Stack) Paid(now int64, p Payment, n int64) Actions {
	if p.Due() {
		s.ended(now, p.tok, p.group, throttle.Read, p.random, max(n, 0), p.pieces)
	}
	return s.release(now)
}

// Due reports whether the driver must report p's read with Paid.
func (p Payment) Due() bool { return p.tok != (cost.Token{}) }

// steer runs the capacity controller at now, before a release: at the end
// of each period it decides the device's capacity for the next.
func (s *Stack) steer(now int64) {
	if !s.tree.Shared() {
		return
	}
	if s.dev.ctl.Tick(now, s.dev.model.Busy(now)) || s.tree.Capacity() != s.dev.ctl.Capacity() {
		s.tree.SetCapacity(now, s.dev.ctl.Capacity())
	}
}

// steered notes, after a release at now, whether requests wait on the
// device's capacity alone, and returns when the controller is due next
// (-1: not).
func (s *Stack) steered(now int64) int64 {
	if !s.tree.Shared() {
		return -1
	}
	if s.queue.Len() > 0 && s.tree.DeviceBacklog(now) {
		s.dev.ctl.Backlog(now)
	}
	if u := s.queue.Users(); u > 1 || u > 0 && s.dev.elsewhere {
		s.dev.ctl.Contended(now)
	}
	return s.dev.ctl.Next()
}

// deviceMetrics returns what the stack knows of the device.
func (s *Stack) deviceMetrics() DeviceMetrics {
	st := s.dev.ctl.State
	m := &s.dev.model
	return DeviceMetrics{
		Shared:    s.tree.Shared(),
		Capacity:  float64(s.tree.Capacity()) / 1e9,
		Done:      float64(st.Done) / 1e9,
		Idle:      st.Idle,
		Saturated: st.Saturated, Backlogged: st.Backlogged, Queued: st.Queued,
		MeanNs:    m.Mean(),
		ReadNs:    m.Cost(cost.Read, true, 4096),
		WriteNs:   m.Cost(cost.Write, true, 4096),
		SeqReadNs: m.Cost(cost.Read, false, 1<<20),
		Periods:   st.Periods, Saturations: st.Saturations,
	}
}

// State says in a few words what the last period found and what the
// device is given: "saturated now, given 0.97 s of device time a second".
func (d DeviceMetrics) State() string {
	given := "it has room, nobody waits"
	if d.Capacity > 0 {
		given = fmt.Sprintf("given %.2f s of device time a second", d.Capacity)
	}
	switch {
	case d.Saturated:
		return "saturated now, " + given
	case d.Backlogged:
		return "holding requests back, " + given
	}
	return given
}

// refUnits returns device time of cost ns in reference I/Os: 4 KiB
// random reads, as the model prices them now. Hosts that share a device
// price its time each by their own model, learned from what each sees of
// it (one whose queue in the device is deeper sees every I/O take
// longer); in reference I/Os they count alike.
func (s *Stack) refUnits(ns int64) float64 {
	return float64(ns) / float64(max(s.dev.model.Cost(cost.Read, true, 4096), 1))
}

// Sharing is what the stack tells of the device's top-level groups where
// the hosts of a cluster share SOURCE's device by weight (package cluster).
type Sharing struct {
	// Device is the device as this host sees it.
	Device DeviceMetrics
	// Held says the capacity controller holds the device at a capacity:
	// it found it saturated lately (the capacity may not be in force:
	// see throttle.Tree.SetCapacity).
	Held   bool
	Groups []GroupShare
}

// GroupShare is one top-level group's running totals on a shared device.
type GroupShare struct {
	Group  string
	Weight int64 // the group's weight, or the default
	// Units is the device time charged to it in reference I/Os (4 KiB
	// random reads, as this host's model priced them when charged), in
	// millionths; BusyNs the time it had requests queued or in the device,
	// WaitedNs the time its readers and writers waited for the throttle,
	// in ns since the mount began; Waiting is how long its longest-waiting
	// request has waited now (0: none waits); Ops counts its device I/Os.
	Units, BusyNs, WaitedNs, Waiting, Ops int64
}

// Sharing returns, where the device is shared, the device's state and
// every top-level group's totals at now; the zero Sharing where it is not.
func (s *Stack) Sharing(now int64) Sharing {
	if !s.tree.Shared() {
		return Sharing{}
	}
	out := Sharing{Device: s.deviceMetrics(), Held: s.dev.ctl.Capacity() != 0}
	for _, g := range s.tree.Groups() {
		if g.Parent() != nil {
			continue
		}
		x := GroupShare{Group: g.Path(), Weight: g.Limits().WeightOrDefault(), BusyNs: s.queue.BusyNs(now, g)}
		if c := s.stats[g]; c != nil {
			x.Units = int64(c.units * 1e6)
			x.WaitedNs = c.RDemandNs + c.WThrottledNs
			x.Ops = c.RIOs + c.WIOs
		}
		w := s.longestWait(now, g)
		x.Waiting = max(w[0], w[1])
		out.Groups = append(out.Groups, x)
	}
	return out
}
