// Package lease divides a group's caps among the hosts whose mounts share
// them, as leases of rate: each host asks, for every cap it shares, what
// it may use for the next Lease, and holds its group to that until the
// next answer. The answer is one script run atomically on a Redis server
// (Script): the cap divided by max-min fairness among the hosts by their
// demand, never handing out what another host's unexpired lease holds, so
// the hosts' leases never add up to more than the cap.
//
// A Host is this side of it: it says when to ask, what to ask for (its
// use and whether it wants more, from its running totals), and what rate
// each cap holds at now, from the answers, the failures and the time.
// It is pure: time is passed in, in nanoseconds of the caller's monotonic
// clock, and it never sleeps, reads the clock or starts goroutines; the
// caller sends the requests (package cluster) or models the server
// (the tests, on virtual time).
//
// A lease holds for Lease from when its request was sent, by this host's
// clock: never past its end on the server's clock, which started later,
// so the hosts' clocks are never compared. Where no answer comes, the
// host keeps its lease to its end and then holds each cap at its fallback,
// the cap divided by the hosts the server last said it saw; when answers
// come again, it asks for no more than that fallback for its next
// Rejoin answers, and until the server has seen as many hosts as it saw
// before the gap, so that the hosts still without an answer, which hold
// their fallbacks unknown to a server started afresh, are not crowded
// out by a burst, nor the cap overrun.
package lease

import (
	"cmp"
	_ "embed"
	"fmt"
	"slices"
	"strconv"
	"time"
)

// Script is the Lua script that answers a Request on the server. Its
// arguments are Request.Args; its reply is what ParseReply reads.
//
//go:embed lease.lua
var Script string

// ReleaseScript gives back the leases of the host ARGV[1]: KEYS as
// RedisKeys makes them. A host that stops cleanly runs it, so that
// the others need not wait for its leases to end.
const ReleaseScript = `for k = 1, #KEYS do redis.call('HDEL', KEYS[k], ARGV[1]) end return 0`

// Defaults of Options.
const (
	DefaultLease   = time.Second
	DefaultRenew   = 100 * time.Millisecond
	DefaultTimeout = 500 * time.Millisecond
	DefaultSeen    = time.Minute
	DefaultRejoin  = 2
)

// Options configure a Host. Zero fields take their defaults.
type Options struct {
	// Lease is how long a grant holds, from when its request was sent.
	// The default is 1s.
	Lease time.Duration
	// Renew is how often the host asks: a host's share follows its
	// demand, and another host's, within about two of these. The default
	// is 100ms (ten round trips a second).
	Renew time.Duration
	// Timeout is how long the caller waits for an answer before it
	// reports the request failed. The default is 500ms.
	Timeout time.Duration
	// Seen is how long after its last request a host still counts among
	// those the fallback divides a cap by. The default is 1 minute.
	Seen time.Duration
	// Rejoin is how many answers, after a time without any, the host asks
	// for no more than its fallback; longer while the server has seen
	// fewer hosts than before the gap (a server started afresh: the
	// others may still hold their fallbacks), Seen at most. The default
	// is 2.
	Rejoin int
}

func (o *Options) defaults() {
	if o.Lease <= 0 {
		o.Lease = DefaultLease
	}
	if o.Renew <= 0 {
		o.Renew = DefaultRenew
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Seen <= 0 {
		o.Seen = DefaultSeen
	}
	if o.Rejoin <= 0 {
		o.Rejoin = DefaultRejoin
	}
}

// Key names one shared cap: a group and one of its cap keys ("rbps",
// "wbps", "riops", "wiops").
type Key struct {
	Group string
	Cap   string
}

func (k Key) String() string { return k.Group + " " + k.Cap }

// Usage is what the host tells of one shared cap when it asks: its cap
// here and two running totals, which the Host turns into rates.
type Usage struct {
	Key
	// Limit is the cap as this host's configuration sets it, per second.
	Limit int64
	// Used is the running total of what the group used of it (bytes or
	// I/Os).
	Used int64
	// Waited is the running total, in ns, of the time the group's
	// requests in the cap's direction that a reader or writer waits on
	// waited for the throttle, counted as they go. A group that waited a
	// tenth of the time since it was last measured, and used what it
	// held, wants more than it holds.
	Waited int64
	// Waiting is how long the group's longest-waiting such request has
	// waited so far (0: none waits). One waiting Renew/10 or longer
	// counts as waiting, whatever Waited says: a request held at a lease
	// of almost nothing has not gone yet to be counted there.
	Waiting int64
	// Ops is the running total of the group's I/Os in the cap's
	// direction (for an I/O cap, Used): a group with none for twice the
	// mean time between them has stopped.
	Ops int64
}

// Request is one ask for every cap the host shares.
type Request struct {
	Keys []Key
	// Limits, Demands, Used and Most are per key: the host's cap, its
	// demand per second (-1: as much as it can get), its use per second,
	// and the most it will take (-1: no bound; rejoining after a gap, its
	// fallback).
	Limits, Demands, Used, Most []int64
	// Shares is the host's figures on a device shared by weight
	// (SetShares); "" for none.
	Shares string
}

// Args returns the request's keys and arguments for Script: the Redis
// keys live under "sluice:{name}:", whose braces keep them in one slot of
// a Redis cluster.
func (r Request) Args(name, host string, o Options) (keys []string, args []any) {
	o.defaults()
	args = append(args, host, o.Lease.Milliseconds(), o.Seen.Milliseconds(), r.Shares)
	for i := range r.Keys {
		args = append(args, r.Limits[i], r.Demands[i], r.Used[i], r.Most[i])
	}
	return RedisKeys(name, r.Keys), args
}

// RedisKeys returns the Redis keys of the cluster name's hosts, of their
// figures on a shared device and of the caps ks, in that order, as Script
// and ReleaseScript take them.
func RedisKeys(name string, ks []Key) []string {
	prefix := "sluice:{" + name + "}:"
	keys := []string{prefix + "hosts", prefix + "shares"}
	for _, k := range ks {
		keys = append(keys, prefix+k.Cap+":"+k.Group)
	}
	return keys
}

// Reply is the server's answer to a Request.
type Reply struct {
	// Seen is how many hosts asked within Options.Seen.
	Seen int
	// Per key of the request: the rate granted, the host's fair share
	// (above the grant where other hosts' leases still hold the rest),
	// the use per second of every host holding a lease on it, how many
	// do, and the cap they share (the smallest of theirs).
	Grants, Fairs, Totals, Holders, Caps []int64
	// Pool is every host's figures on a shared device whose lease has
	// not ended (SetShares), this host's included.
	Pool []HostShare
}

// fields is the number of Script's reply fields per cap.
const fields = 5

// ParseReply reads Script's reply for a request of n keys, as a Redis
// client returns it: the server's time and the hosts seen, the number of
// hosts' figures on a shared device and each as a host and its figures,
// then the caps' integers.
func ParseReply(v any, n int) (Reply, error) {
	a, ok := v.([]any)
	if !ok || len(a) < 3 {
		return Reply{}, fmt.Errorf("lease: a reply of %T %v for %d caps", v, v, n)
	}
	var pool []HostShare
	if k, ok := a[2].(int64); !ok || k < 0 || len(a) != 3+2*int(k)+fields*n {
		return Reply{}, fmt.Errorf("lease: a reply of %T %v for %d caps", v, v, n)
	} else {
		for i := range int(k) {
			host, ok1 := a[3+2*i].(string)
			blob, ok2 := a[4+2*i].(string)
			if !ok1 || !ok2 {
				return Reply{}, fmt.Errorf("lease: reply field %d is %T", 3+2*i, a[3+2*i])
			}
			if s, ok := parseShare(host, blob); ok {
				pool = append(pool, s)
			}
		}
		a = append(a[:2:2], a[3+2*k:]...)
	}
	ints := make([]int64, len(a))
	for i, x := range a {
		switch x := x.(type) {
		case int64:
			ints[i] = x
		case string:
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return Reply{}, fmt.Errorf("lease: reply field %d: %v", i, err)
			}
			ints[i] = n
		default:
			return Reply{}, fmt.Errorf("lease: reply field %d is %T", i, x)
		}
	}
	r := Reply{Seen: int(ints[1]), Pool: pool}
	for i := range n {
		f := ints[2+fields*i:]
		r.Grants = append(r.Grants, f[0])
		r.Fairs = append(r.Fairs, f[1])
		r.Totals = append(r.Totals, f[2])
		r.Holders = append(r.Holders, f[3])
		r.Caps = append(r.Caps, f[4])
	}
	return r, nil
}

// Host is one host's side of the leases. It is not safe for concurrent
// use.
type Host struct {
	opts Options
	caps map[Key]*held
	// flying says a request is in flight, sent when it was sent, and
	// keys what it asked for.
	flying bool
	sent   int64
	asked  bool // a request was made
	keys   []Key
	last   int64 // when the last request was sent
	// early is the budget of requests before they are due (Early), at
	// most earlyBurst, earned at earlyRate a second, as of earlyAt.
	early   float64
	earlyAt int64
	next    int64 // when the next request is due
	// answered says the last request was answered; rejoin counts the
	// answers still to take at no more than the fallback.
	answered bool
	rejoin   int
	seen     int
	// before is how many hosts the server said it saw before the last
	// gap in its answers, while the host rejoins (0: it does not): a
	// server started afresh has seen only the hosts back since, and the
	// others hold their fallbacks, of the cap over before, unknown to it.
	// The host holds itself to the same until the server has seen as many
	// again, or until beforeUntil, Seen after the last answer before the
	// gap, when those hosts no longer count as seen.
	before      int
	beforeUntil int64
	stats       Stats
	// shares are the groups' totals on a shared device when last
	// measured, blob what the next request publishes of them (SetShares);
	// pool and allots what the last answer said of every host's.
	shares map[string]*shareState
	blob   string
	pool   []HostShare
	allots map[string]int64
	// heldAt is when an answer last said a host's capacity controller
	// held the device at a capacity, if one ever did.
	heldAt   int64
	everHeld bool
}

// held is one shared cap's state.
type held struct {
	limit        int64
	used, waited int64 // the running totals when last measured
	mops, mallow int64 // the count of I/Os and the allowance then
	// allow is what the group held, integrated over time up to allowAt
	// (bytes or I/Os): what it could have used.
	allow, allowAt int64
	integrated     bool
	// seenOps is the count of I/Os last seen, first seen at lastOpAt.
	seenOps, lastOpAt int64
	opsSeen           bool
	at                int64 // when they were taken, if taken
	taken             bool
	// ops holds the group's I/O totals at the requests of about the last
	// Lease, oldest first, for the mean time between its I/Os.
	ops      []mark
	rate     int64 // use per second between the last two requests
	wants    bool  // wanted more than it held then
	demand   int64 // the demand last asked for
	measured bool  // the group's use was measured once at least
	// recent says the group waited a tenth of the time between the
	// last two polls (Early) at least Renew/10 apart, the last at pollAt
	// with pollWaited waited.
	recent, polled     bool
	pollAt, pollWaited int64
	grant, fair        int64
	granted            bool
	until              int64 // the grant holds until then
	total              int64
	holders            int64
	shared             int64 // the cap the holders share
}

// mark is a cap's use, count of I/Os and allowance at a time.
type mark struct{ at, used, ops, allow int64 }

// coarse is the count of I/Os below which a group's use since it was last
// measured says too little of its rate and of whether it used what it
// held (at 1 MiB/s in pieces of 64 KiB, a Renew sees one or two), and a
// longer time, back to when it had as many, tells it.
const coarse = 16

// Stats are a Host's counts of its requests.
type Stats struct {
	// Trips counts the requests answered, Failures those that were not.
	Trips, Failures int64
	// RTT is the last answer's round trip, ns; RTTMax the largest.
	RTT, RTTMax int64
	// RTTCounts counts the answers' round trips by RTTBounds: entry i
	// those of at most RTTBounds[i] and more than the bound before, the
	// last those above every bound. RTTSum is their sum, ns.
	RTTCounts [len(RTTBounds) + 1]int64
	RTTSum    int64
	// LastAnswer is when the last answer came (0: none yet).
	LastAnswer int64
}

// RTTBounds are the upper bounds of Stats.RTTCounts' buckets, ns: from a
// server on the same host to one past its Timeout.
var RTTBounds = [...]int64{100e3, 250e3, 500e3, 1e6, 2.5e6, 5e6, 10e6, 25e6, 50e6, 100e6, 250e6, 500e6}

// NewHost returns a Host with nothing shared yet; its first request is
// due at once.
func NewHost(o Options) *Host {
	o.defaults()
	return &Host{opts: o, caps: map[Key]*held{}}
}

// Options returns the host's options, defaults filled in.
func (h *Host) Options() Options { return h.opts }

// Next returns when the next request is due (it may be before now), or
// when the one in flight is to be given up (Options.Timeout after it was
// sent) if one is.
func (h *Host) Next() int64 {
	if h.flying {
		return h.sent + int64(h.opts.Timeout)
	}
	return h.next
}

// Due reports whether a request should be sent at now: none is in flight
// and its time has come.
func (h *Host) Due(now int64) bool { return !h.flying && (!h.asked || now >= h.next) }

// Request takes the host's use of every cap it shares at now, in use,
// and returns the request to send (which the caller must answer with
// Answer or Fail). Caps not in use are shared no more. It panics if a
// request is in flight.
func (h *Host) Request(now int64, use []Usage) Request {
	if h.flying {
		panic("lease: a request is in flight")
	}
	var r Request
	keep := make(map[Key]bool, len(use))
	for _, u := range use {
		keep[u.Key] = true
		c := h.caps[u.Key]
		if c == nil {
			c = &held{}
			h.caps[u.Key] = c
		}
		h.integrate(c, now)
		c.observe(now, u.Ops)
		m := h.measure(c, u, now)
		measured := m.ok
		if measured {
			c.rate, c.wants = m.rate, m.wants
			c.used, c.waited, c.mops, c.mallow, c.at = u.Used, u.Waited, u.Ops, c.allow, now
			if m.stopped {
				c.ops = c.ops[:0] // what it did before says nothing of what it does next
			}
		}
		if !c.taken {
			c.used, c.waited, c.mops, c.mallow, c.at, c.taken = u.Used, u.Waited, u.Ops, c.allow, now, true
		}
		if n := len(c.ops); n == 0 || now > c.ops[n-1].at {
			c.ops = append(c.ops, mark{now, u.Used, u.Ops, c.allow})
		}
		for len(c.ops) > 2 && now-c.ops[1].at >= int64(h.opts.Lease) {
			c.ops = c.ops[1:] // the oldest kept is the last a Lease old
		}
		c.limit = u.Limit
		d := int64(-1)
		switch {
		case measured && !c.wants:
			// Room to grow by a sixteenth before the next answer: a
			// group that grows more waits, and then wants more.
			d = c.rate + c.rate/16 + 1
		case !measured && c.measured:
			d = c.demand // the last stands
		}
		c.measured = c.measured || measured
		most := int64(-1)
		if h.rejoining(now) {
			most = h.fallback(c, now)
			if d < 0 || d > most {
				d = most
			}
		}
		c.demand = d
		r.Keys = append(r.Keys, u.Key)
		r.Limits = append(r.Limits, u.Limit)
		r.Demands = append(r.Demands, d)
		r.Used = append(r.Used, c.rate)
		r.Most = append(r.Most, most)
	}
	for k := range h.caps {
		if !keep[k] {
			delete(h.caps, k)
		}
	}
	if !h.asked {
		h.asked, h.early, h.earlyAt = true, earlyBurst, now
	}
	r.Shares = h.blob
	h.flying, h.sent, h.last, h.keys = true, now, now, r.Keys
	return r
}

// Early reports whether a request should be sent at now, before it is
// due, given the host's use so far in use (as Request takes it): where a
// cap's group went from using what it held to wanting more (measure), or
// the other way, or stopped, or still waits and got less than its fair
// share while other hosts' leases held the rest. Not within Renew/10 of
// the last request, and on average no more often than Renew does.
func (h *Host) Early(now int64, use []Usage) bool {
	early := false
	for _, u := range use {
		c := h.caps[u.Key]
		if c == nil {
			early = true
			continue
		}
		if !c.polled {
			c.polled, c.pollAt, c.pollWaited = true, now, u.Waited
		}
		if dt := now - c.pollAt; dt >= int64(h.opts.Renew)/10 {
			c.recent = (u.Waited-c.pollWaited)*10 >= dt || h.stuck(u)
			c.pollAt, c.pollWaited = now, u.Waited
		}
		h.integrate(c, now)
		c.observe(now, u.Ops)
		m := h.measure(c, u, now)
		switch {
		case m.ok && m.wants && c.demand >= 0, // more than it asked for
			c.recent && c.grant < c.fair-c.fair/32, // others held its share
			m.ok && !m.wants && c.demand < 0,       // no more than it holds
			m.stopped && c.demand > 1:              // nothing
			early = true
		}
	}
	if !early || h.flying || !h.answered || now < h.last+int64(h.opts.Renew)/10 {
		return false
	}
	h.early = min(earlyBurst, h.early+float64(now-h.earlyAt)*earlyRate/float64(time.Second))
	h.earlyAt = now
	if h.early < 1 {
		return false
	}
	h.early--
	return true
}

// A host asks early at most earlyRate times a second on average, and
// earlyBurst times in a row, besides its requests every Renew.
const (
	earlyRate  = 10
	earlyBurst = 4
)

// stuck reports whether u's group has a request waiting Renew/10 or
// longer.
func (h *Host) stuck(u Usage) bool { return u.Waiting >= int64(h.opts.Renew)/10 }

// Answer takes the reply to the request in flight, at now.
func (h *Host) Answer(now int64, r Reply) {
	if !h.flying {
		return
	}
	until := h.sent + int64(h.opts.Lease)
	rtt := now - h.sent
	h.stats.Trips++
	h.stats.RTT, h.stats.RTTMax, h.stats.LastAnswer = rtt, max(h.stats.RTTMax, rtt), now
	i := 0
	for i < len(RTTBounds) && rtt > RTTBounds[i] {
		i++
	}
	h.stats.RTTCounts[i]++
	h.stats.RTTSum += rtt
	// Rejoining, the host takes no more than its fallback over the hosts
	// it saw before the gap too: a server started afresh has seen only
	// those that asked since, and one host's whole cap would hold the
	// others' shares until it renewed.
	rejoining := h.rejoining(now)
	rejoinSeen := max(h.seen, r.Seen, 1)
	if rejoining {
		rejoinSeen = max(rejoinSeen, h.before)
	}
	h.seen = max(r.Seen, 1)
	if h.before > 0 && (r.Seen >= h.before || now >= h.beforeUntil) {
		h.before = 0 // every host of before is back, or counts no more
	}
	for i, k := range h.keys {
		c := h.caps[k]
		if c == nil || i >= len(r.Grants) {
			continue
		}
		h.integrate(c, now)
		c.grant, c.fair, c.until, c.granted = r.Grants[i], r.Fairs[i], until, true
		c.total, c.holders, c.shared = r.Totals[i], r.Holders[i], r.Caps[i]
		if rejoining {
			c.grant = min(c.grant, fallback(c, rejoinSeen))
		}
	}
	switch {
	case h.rejoin > 0:
		h.rejoin--
	case !h.answered && h.stats.Trips > 1:
		h.rejoin = h.opts.Rejoin - 1
	}
	for _, x := range r.Pool {
		if x.Capacity {
			h.heldAt, h.everHeld = now, true
		}
	}
	h.pool = r.Pool
	h.allots = Allot(r.Pool, h.everHeld && now-h.heldAt <= int64(ShareHold), h.allots)
	h.answered = true
	h.next = h.sent + int64(h.opts.Renew)
	h.flying = false
}

// Fail takes the loss of the request in flight, at now: no answer, or an
// error. The next request is due a Renew later.
func (h *Host) Fail(now int64) {
	if !h.flying {
		return
	}
	h.stats.Failures++
	h.flying = false
	h.next = now + int64(h.opts.Renew)
	if h.answered {
		h.answered = false
		h.rejoin = 0
		if h.before == 0 { // not still rejoining after an earlier gap
			h.beforeUntil = h.stats.LastAnswer + int64(h.opts.Seen)
		}
		h.before = max(h.before, h.seen)
	}
}

// rejoining reports whether the host holds itself to its fallback at now:
// it has no answer since a gap, or is within Rejoin answers of its first,
// or the server has not yet seen the hosts it saw before the gap.
func (h *Host) rejoining(now int64) bool {
	return !h.answered || h.rejoin > 0 || h.before > 0 && now < h.beforeUntil
}

// measurement is what a group's use since it was last measured says.
type measurement struct {
	ok      bool  // it says enough to act on
	rate    int64 // the group's use per second
	wants   bool  // it waited and used what it held
	stopped bool  // it has stopped
}

// measure reads what c's group used, waited and held since it was last
// measured (u its totals at now): whether it wants more, and its rate.
// Over less than a Renew this says little of a group whose I/Os come in
// pieces (at 1 MiB/s in reads of 64 KiB, 10 ms may see none, and a lease
// sized to that holds its next read): sooner, it is acted on only where
// the group wants more or has stopped; otherwise its last demand stands.
func (h *Host) measure(c *held, u Usage, now int64) measurement {
	dt := now - c.at
	if !c.taken || dt < int64(h.opts.Renew)/10 {
		return measurement{}
	}
	rate := perSec(u.Used-c.used, dt)
	used, allow := u.Used-c.used, c.allow-c.mallow
	if u.Ops-c.mops < coarse {
		// Too few I/Os to tell: back to the last mark with enough
		// since, or the oldest (a Lease ago).
		b := c.ops[0]
		for i := len(c.ops) - 1; i >= 0; i-- {
			if u.Ops-c.ops[i].ops >= coarse {
				b = c.ops[i]
				break
			}
		}
		if b.at < c.at {
			used, allow = u.Used-b.used, c.allow-b.allow
			rate = max(rate, perSec(used, now-b.at))
		}
	}
	// It wants more where it waited and used what it held: waits alone
	// do not say it, for a read of 64 KiB at 1 MiB/s waits 50 ms however
	// evenly the reads come. A lease too small to admit an I/O a Renew is
	// used in full by a group that waits.
	piece := int64(1)
	if n := u.Ops - c.ops[0].ops; n > 0 {
		piece = max(1, (u.Used-c.ops[0].used)/n)
	}
	full := used*100 >= allow*97 || h.heldRate(c, now) < perSec(piece, int64(h.opts.Renew))
	m := measurement{rate: rate, wants: ((u.Waited-c.waited)*10 >= dt || h.stuck(u)) && full}
	if u.Waiting == 0 && c.lastOpAt < now && (c.rate == 0 && u.Used == c.used || c.stopped(now, u.Ops)) {
		m.rate, m.stopped = 0, true
	}
	m.ok = dt >= int64(h.opts.Renew) || m.wants || m.stopped
	return m
}

// perSec is n over dt ns, per second, 0 at least; float, for a rate of
// 100 GiB/s over a second is past an int64 in ns.
func perSec(n, dt int64) int64 { return max(0, int64(float64(n)*float64(time.Second)/float64(dt))) }

// heldRate is what c's group may use at now: its lease, or its fallback.
func (h *Host) heldRate(c *held, now int64) int64 {
	if c.granted && c.until > now {
		return max(c.grant, 1)
	}
	return h.fallback(c, now)
}

// integrate adds what c's group held since it was last integrated to
// its allowance, at the rate it holds at now (a lease that ended since
// counts to now: a Renew at most, where requests go).
func (h *Host) integrate(c *held, now int64) {
	if c.integrated && now > c.allowAt {
		c.allow += int64(float64(h.heldRate(c, now)) * float64(now-c.allowAt) / float64(time.Second))
	}
	c.allowAt, c.integrated = now, true
}

// stopped reports whether c's group, with no I/O seen at now, has had
// none for twice the mean time between its I/Os over the last Lease (ops
// its total now), or had none in it: it has stopped, and gives its share
// back at once.
func (c *held) stopped(now, ops int64) bool {
	if len(c.ops) == 0 {
		return true
	}
	old := c.ops[0]
	n, span := ops-old.ops, now-old.at
	return n == 0 || (now-c.lastOpAt)*n >= 2*span
}

// observe notes when c's group last did I/O, as seen at now (its total
// ops): to the poll (Early) or the request that saw it.
func (c *held) observe(now, ops int64) {
	if ops != c.seenOps || !c.opsSeen {
		c.seenOps, c.lastOpAt, c.opsSeen = ops, now, true
	}
}

// fallback is what c holds without a lease at now: its cap shared
// equally by the hosts seen, and while the host rejoins, by those seen
// before the gap if more (a server started afresh has seen fewer).
func (h *Host) fallback(c *held, now int64) int64 {
	if h.before > 0 && now < h.beforeUntil {
		return fallback(c, max(h.seen, h.before))
	}
	return fallback(c, h.seen)
}

// fallback is c's cap shared equally by seen hosts.
func fallback(c *held, seen int) int64 { return max(c.limit/int64(max(seen, 1)), 1) }

// Held is what one shared cap holds at a time.
type Held struct {
	Key
	// Rate is what the group may use here, per second; at least 1.
	Rate int64
	// Leased says Rate is a lease's; otherwise it is the fallback.
	Leased bool
	// Limit is this host's cap; Shared the one the holders share.
	Limit, Shared int64
	// Use is this host's use per second between its last two requests,
	// and Wants says it wanted more than it held then.
	Use   int64
	Wants bool
	// Total is every holder's use per second and Holders how many hold a
	// lease, as of the last answer.
	Total, Holders int64
	// Until is when the lease ends (Leased only).
	Until int64
}

// Holds returns what each shared cap holds at now, by key.
func (h *Host) Holds(now int64) []Held {
	out := make([]Held, 0, len(h.caps))
	for k, c := range h.caps {
		x := Held{Key: k, Limit: c.limit, Shared: c.shared, Use: c.rate, Wants: c.wants,
			Total: c.total, Holders: c.holders}
		x.Rate = h.heldRate(c, now)
		if c.granted && c.until > now {
			x.Leased, x.Until = true, c.until
		}
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b Held) int {
		return cmp.Or(cmp.Compare(a.Group, b.Group), cmp.Compare(a.Cap, b.Cap))
	})
	return out
}

// Seen returns how many hosts the server last said it saw (1 before any
// answer).
func (h *Host) Seen() int { return max(h.seen, 1) }

// Answered reports whether the last request was answered.
func (h *Host) Answered() bool { return h.answered }

// Stats returns the host's counts of its requests.
func (h *Host) Stats() Stats { return h.stats }
