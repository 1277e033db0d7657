package throttle

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// Class is the priority of a request within its group.
type Class uint8

const (
	// Demand requests have a reader (or writer) waiting on them.
	Demand Class = iota
	// Readahead requests are speculative; they go after every queued
	// demand request of the same group and may be cancelled or promoted.
	Readahead
)

func (c Class) String() string {
	switch c {
	case Demand:
		return "demand"
	case Readahead:
		return "readahead"
	}
	return fmt.Sprintf("Class(%d)", uint8(c))
}

// Request is one unit of admission: Bytes and IOs charged to Group in
// direction Dir when the Queue releases it. The caller fills the exported
// fields and must not change them while the request is queued (except
// through Promote).
type Request struct {
	Group *Group
	Dir   Dir
	Bytes int64
	// IOs is the number of device I/Os the request is: normally 1, one
	// max_io piece.
	IOs int64
	// Cost is the device time the request takes, in nanoseconds as the
	// caller's device model prices it; 0 where none does. It is charged
	// to the device's capacity (Tree.SetCapacity), and siblings under a
	// parent that caps nothing in its direction share by it (see Queue).
	Cost  int64
	Class Class
	// Value is the caller's payload; the Queue never looks at it.
	Value any
	// Floor says the Queue released the request ahead of its siblings'
	// turn by fair queueing, for a floor of its group or of an ancestor
	// (see Group.owed); set by Release.
	Floor bool

	q          *Queue // the queue holding the request; nil when not queued
	prev, next *Request
	seq        uint64 // arrival order
	enq        int64  // Push time
	floorAt    *qnode // the parent under which a floor released it
}

// Queued reports whether r is waiting in a Queue.
func (r *Request) Queued() bool { return r.q != nil }

// fifo is an intrusive list of requests.
type fifo struct{ head, tail *Request }

func (f *fifo) pushBack(r *Request) { f.insertAfter(f.tail, r) }

// insertAfter links r after at (at the front if at is nil).
func (f *fifo) insertAfter(at, r *Request) {
	r.prev = at
	if at == nil {
		r.next, f.head = f.head, r
	} else {
		r.next, at.next = at.next, r
	}
	if r.next == nil {
		f.tail = r
	} else {
		r.next.prev = r
	}
}

func (f *fifo) remove(r *Request) {
	if r.prev == nil {
		f.head = r.next
	} else {
		r.prev.next = r.next
	}
	if r.next == nil {
		f.tail = r.prev
	} else {
		r.next.prev = r.prev
	}
	r.prev, r.next = nil, nil
}

// tag is the start-time fair queueing state of one child of a node: its
// start and finish tags in bytes of service, and a stamp that orders equal
// start tags by when they were assigned.
type tag struct {
	start, finish int64
	stamp         uint64
}

// qnode is a group's state in a Queue. As a parent it has a virtual clock
// and its backlogged children; its own requests form one more child, own.
type qnode struct {
	g       *Group
	up      *qnode
	tag           // as a child of up
	backlog int   // queued requests in the subtree
	vclock  int64 // as a parent: the start tag of the last child served
	active  []*qnode
	own     tag
	ownLen  int
	fifo    [2][2]fifo // [Dir][Class]
	// As a child: when the dispatch of its last queued request emptied it,
	// and that request's direction (see anticipate). As a parent: its
	// children that emptied so, in that order.
	emptied    int64
	emptiedDir Dir
	// inflight counts, where the device is shared, the subtree's released
	// requests the device has not finished (see Finished); lastCost is
	// the Cost of the last one released.
	inflight int
	lastCost int64
	// busyNs sums, for a top-level group, the time it had requests queued
	// or in the device, up to busyAt, since when it has been busy if it is.
	busyNs, busyAt int64
	idle           []*qnode
	largest        int64 // as a parent: the most tag it has served one request (see dispatch)
}

// key returns the start tag a child with tag c competes with under parent
// n. A child skipped while it was blocked by its own limits, or away
// between its requests, carries at most one request's worth of lag (the
// largest n has served) into later competition: its tag is raised to
// within that of the parent's virtual clock.
func (n *qnode) key(c *tag) int64 { return max(c.start, n.vclock-n.largest) }

// Queue holds requests waiting for admission and releases them in an order
// that is exact in rate, fair by bytes among siblings, and demand-first
// within a group.
//
// A request is released when its group and every ancestor are open in its
// direction (see Tree.Eligible), and charged to all of them in that moment.
// Within a group, reads and writes queue separately; in each direction
// requests are released in arrival order, demand before readahead, and a
// later request never overtakes an earlier one of the same class. Among
// the groups and own requests under one parent that could go at the same
// moment, the one with the least service in bytes goes first (start-time
// fair queueing with equal weights); a group that was idle restarts at its
// parent's virtual clock and earns no credit for the idle time. A group
// blocked by its own limits never holds back a sibling.
//
// Waiting in the queue is not idle time. A released request is charged to
// each level as of when it reached that level: its Push time for its own
// group, and for each ancestor the moment it had cleared the levels below.
// So a limited group held back by a busy parent keeps its own rate, as if
// each level passed requests upward on its own schedule; the extra credit
// a level gets this way is bounded by how long its requests waited.
//
// The shell's loop: Push (or Remove, Promote, SetLimits, Refund), then
// Release; start the released requests' I/O in release order; arm one
// timer for the returned time and call Release when it fires. A Queue is
// not safe for concurrent use; it shares its Tree's lock.
type Queue struct {
	t     *Tree
	root  *qnode
	nodes map[*Group]*qnode
	n     int
	seq   uint64
	stamp uint64
	wait  int64 // the earliest end of an anticipation that held Release back
	// users counts the top-level groups with requests queued or, where
	// the device is shared, in the device (see Users).
	users int
	// now is the latest time the caller passed in.
	now int64
}

// busy reports whether x has requests queued or in the device.
func (x *qnode) busy() bool { return x.backlog > 0 || x.inflight > 0 }

// settle keeps users after a change of x's counts; was is x.busy() before
// it.
func (q *Queue) settle(x *qnode, was bool) {
	if x.up != q.root {
		return
	}
	switch is := x.busy(); {
	case is && !was:
		q.users++
		x.busyAt = q.now
	case was && !is:
		q.users--
		x.busyNs += max(q.now-x.busyAt, 0)
	}
}

// BusyNs returns how long, in total up to now, the top-level group g had
// requests queued or, where the device is shared, in the device (0 for
// other groups): a group busy all the time is held by the throttle or the
// device, never by its own pace.
func (q *Queue) BusyNs(now int64, g *Group) int64 {
	x := q.nodes[g]
	if x == nil || x.up != q.root {
		return 0
	}
	if x.busy() {
		return x.busyNs + max(now-x.busyAt, 0)
	}
	return x.busyNs
}

// Users returns how many top-level groups have requests queued or, where
// the device is shared, in the device (see Finished): while there is
// one, no one competes with it for the device.
func (q *Queue) Users() int { return q.users }

// Anticipation. A group that sends one small request at a time (a writer
// of 4 KiB blocks, waiting for each) is empty for a moment after each
// admission, while its next request makes its round trip; a sibling with
// big requests queued would take the saturated parent in that moment,
// again and again, and the small group would get far less than its share
// of bytes. So when the dispatch of a group's last request empties it, its
// saturated parent holds back a request of a sibling that the group would
// precede by fair queueing, until the group's next request comes or the
// parent's idle credit is full (at most Burst): the group is served as if
// it had stayed queued, and waiting costs the parent none of its rate, as
// the credit it banks meanwhile pays for the wait. A group that comes back
// within Burst also keeps up to one request's worth of lag (see key), what
// a sibling may have taken while it was away.

// NewQueue returns an empty Queue over t.
func NewQueue(t *Tree) *Queue {
	q := &Queue{t: t, nodes: make(map[*Group]*qnode)}
	q.root = &qnode{g: t.root}
	q.nodes[t.root] = q.root
	return q
}

// Len returns the number of queued requests.
func (q *Queue) Len() int { return q.n }

// Oldest returns, per direction, when the longest-waiting demand request
// queued in g or below it was pushed, ok false where there is none:
// readahead that waits keeps no reader waiting.
func (q *Queue) Oldest(g *Group) (enq [2]int64, ok [2]bool) {
	for x, n := range q.nodes {
		if n.backlog == 0 {
			continue
		}
		y := x
		for y != nil && y != g {
			y = y.up
		}
		if y == nil {
			continue
		}
		for d := range n.fifo {
			if h := n.fifo[d][Demand].head; h != nil && (!ok[d] || h.enq < enq[d]) {
				enq[d], ok[d] = h.enq, true
			}
		}
	}
	return enq, ok
}

func (q *Queue) node(g *Group) *qnode {
	if n := q.nodes[g]; n != nil {
		return n
	}
	n := &qnode{g: g, up: q.node(g.up)}
	q.nodes[g] = n
	return n
}

func (q *Queue) nextStamp() uint64 { q.stamp++; return q.stamp }

// Push queues r at now. It does not admit r even if r could go at once:
// the caller calls Release next. Push panics if r is already queued, has no
// group or a group of another Tree, or has an invalid direction, class or
// a negative size.
func (q *Queue) Push(now int64, r *Request) {
	q.t.check(r.Group, r.Dir)
	switch {
	case r.q != nil:
		panic("throttle: Push of a queued request")
	case r.Class > Readahead:
		panic("throttle: Push with invalid " + r.Class.String())
	case r.Bytes < 0 || r.IOs < 0 || r.Cost < 0:
		panic(fmt.Sprintf("throttle: Push of %d bytes, %d ios, %d ns", r.Bytes, r.IOs, r.Cost))
	}
	q.now = max(q.now, now)
	n := q.node(r.Group)
	q.seq++
	r.q, r.seq, r.enq, r.Floor, r.floorAt = q, q.seq, now, false, nil
	n.fifo[r.Dir][r.Class].pushBack(r)
	if n.ownLen == 0 {
		n.own.start, n.own.stamp = max(n.vclock, n.own.finish), q.nextStamp()
	}
	n.ownLen++
	for x := n; x != q.root; x = x.up {
		if x.backlog == 0 {
			x.start, x.stamp = max(x.up.vclock, x.finish), q.nextStamp()
			if x.emptied != 0 && now-x.emptied <= q.t.burst {
				// Back after a round trip, not after being idle: it keeps
				// up to one request's worth of lag (see anticipation).
				x.start = x.finish
			}
			x.up.active = append(x.up.active, x)
			if i := slices.Index(x.up.idle, x); i >= 0 {
				x.up.idle = slices.Delete(x.up.idle, i, i+1)
			}
		}
		was := x.busy()
		x.backlog++
		q.settle(x, was)
	}
	q.root.backlog++
	q.n++
}

// unlink takes r out of its fifo and updates the backlog counts, without
// touching fairness tags.
func (q *Queue) unlink(r *Request) *qnode {
	n := q.nodes[r.Group]
	n.fifo[r.Dir][r.Class].remove(r)
	r.q = nil
	n.ownLen--
	for x := n; x != q.root; x = x.up {
		was := x.busy()
		x.backlog--
		q.settle(x, was)
		if x.backlog == 0 {
			i := slices.Index(x.up.active, x)
			x.up.active = slices.Delete(x.up.active, i, i+1)
		}
	}
	q.root.backlog--
	q.n--
	return n
}

// Remove cancels r (an interrupted read, a cancelled readahead). It
// reports false, and does nothing, if r is not queued in q. The next
// wake-up may move later; the caller may call Release to learn it.
func (q *Queue) Remove(r *Request) bool {
	if r.q != q {
		return false
	}
	q.unlink(r)
	return true
}

// Promote turns a queued readahead request into a demand request (a reader
// now needs its pages). It takes its place among the group's demand
// requests by arrival. Promote does nothing if r is not queued in q or is
// already a demand request.
func (q *Queue) Promote(r *Request) {
	if r.q != q || r.Class == Demand {
		return
	}
	n := q.nodes[r.Group]
	n.fifo[r.Dir][r.Class].remove(r)
	r.Class = Demand
	f := &n.fifo[r.Dir][Demand]
	at := f.tail
	for at != nil && at.seq > r.seq {
		at = at.prev
	}
	f.insertAfter(at, r)
}

// retryAfter is how long after now Release asks to be called again when
// its own state says a request is due yet none could go: 1 ms.
const retryAfter = int64(1e6)

// Release admits every request that may go at now, charges each to its
// group and ancestors, and appends them to out in release order. It
// returns the extended out and the next time a queued request becomes
// eligible, which is always later than now, or -1 if the queue is empty.
// The caller arms one timer for next and calls Release again then, or
// earlier after Push, Remove, Promote, Tree.SetLimits or Tree.Refund. A
// call at any time is safe; an early one releases nothing new.
func (q *Queue) Release(now int64, out []*Request) ([]*Request, int64) {
	q.now = max(q.now, now)
	for {
		q.wait = math.MaxInt64
		r := q.pick(now, q.root, [2]bool{true, true})
		if r == nil {
			break
		}
		q.dispatch(now, r)
		out = append(out, r)
	}
	if q.n == 0 {
		return out, -1
	}
	next := q.next(q.root, [2]int64{math.MinInt64, math.MinInt64})
	if next <= now {
		next = q.wait // due, but held back by an anticipation
	} else {
		next = min(next, q.wait)
	}
	if next <= now {
		// pick admits everything whose gates are open, so this does not
		// happen; if it ever did, the caller tries again a little later
		// rather than spin or stop: a policy never panics under its driver.
		next = now + retryAfter
	}
	return out, next
}

// pick returns the request to release next at now from n's subtree, or
// nil if none may go. ok tells which directions n's ancestors admit.
// An anticipation at n holds back n's requests of the anticipated
// request's direction only: reads and writes queue independently, so the
// other direction is picked from n's subtree as if the held one were shut.
func (q *Queue) pick(now int64, n *qnode, ok [2]bool) *Request {
	for d := range ok {
		ok[d] = ok[d] && n.g.open(now, Dir(d))
	}
	for ok[Read] || ok[Write] {
		r, held := q.pickOpen(now, n, ok)
		if r != nil || held == nil {
			return r
		}
		ok[held.Dir] = false
	}
	return nil
}

// pickOpen is pick once n's own limits are applied to ok. When an
// anticipation at n holds back the request it would release, it returns
// nil and that request.
func (q *Queue) pickOpen(now int64, n *qnode, ok [2]bool) (r, held *Request) {
	if r := q.pickOwed(now, n, ok); r != nil {
		return r, nil
	}
	slices.SortFunc(n.active, func(a, b *qnode) int {
		return cmp.Or(cmp.Compare(n.key(&a.tag), n.key(&b.tag)), cmp.Compare(a.stamp, b.stamp))
	})
	ownKey, ownDone := n.key(&n.own), n.ownLen == 0
	ant := func(k int64, r *Request) (*Request, *Request) {
		if a := q.anticipate(now, n, k, r); a != nil {
			return a, nil
		}
		return nil, r
	}
	for _, c := range n.active {
		k := n.key(&c.tag)
		if !ownDone && (ownKey < k || ownKey == k && n.own.stamp < c.stamp) {
			ownDone = true
			if r := n.head(ok); r != nil {
				return ant(ownKey, r)
			}
		}
		if r := q.pick(now, c, ok); r != nil {
			return ant(k, r)
		}
	}
	if !ownDone {
		if r := n.head(ok); r != nil {
			return ant(ownKey, r)
		}
	}
	return nil, nil
}

// pickOwed returns the request to release next at now from a child of n
// that got less than one of its floors in a direction ok admits (see
// Group.owed), the child furthest behind first, from the directions it is
// owed in; or nil. Floors go before fair queueing and its anticipation:
// what a floor owes is the child's whatever its siblings' tags.
func (q *Queue) pickOwed(now int64, n *qnode, ok [2]bool) *Request {
	if q.t.floored == 0 {
		return nil
	}
	type owed struct {
		c    *qnode
		dirs [2]bool
		at   int64
	}
	var all []owed
	for _, c := range n.active {
		o := owed{c: c, at: math.MaxInt64}
		for d := range ok {
			if at, yes := c.g.owed(now, Dir(d)); ok[d] && yes {
				o.dirs[d], o.at = true, min(o.at, at)
			}
		}
		if o.at != math.MaxInt64 {
			all = append(all, o)
		}
	}
	slices.SortFunc(all, func(a, b owed) int { return cmp.Compare(a.at, b.at) })
	for _, o := range all {
		if r := q.pick(now, o.c, o.dirs); r != nil {
			r.Floor, r.floorAt = true, n
			return r
		}
	}
	return nil
}

// anticipate returns r, which n would release next with key k, unless a
// child of n that emptied less than Burst ago, in r's direction, would go
// before it by fair queueing when it comes back: then nil, and the Queue's
// wait notes when that anticipation ends. Only a level limiting r's bytes,
// with too little credit for r, anticipates, and never past the moment its
// idle credit reaches Burst: the credit it banks meanwhile covers the
// wait, and nothing of its rate is lost (see anticipation).
func (q *Queue) anticipate(now int64, n *qnode, k int64, r *Request) *Request {
	if len(n.idle) == 0 {
		return r
	}
	live := n.idle[:0]
	for _, c := range n.idle {
		if c.emptied+q.t.burst > now || c.inflight > 0 && c.emptied+holdInFlight > now {
			live = append(live, c)
		}
	}
	clear(n.idle[len(live):])
	n.idle = live
	m, need := &n.g.m[r.Dir][dimBytes], r.Bytes
	dev := m.rate == 0 && n.g.dev.rate != 0
	if dev {
		m, need = &n.g.dev, r.Cost
	}
	if m.rate == 0 || !dev && m.credit(now, q.t.burst) >= need {
		return r
	}
	// Waiting past full credit would waste the parent's rate: a group
	// slower than its share is not waited for beyond that. A saturated
	// device is waited on whatever its credit, as a disk scheduler idles
	// for a reader between its requests (BFQ's slice_idle): the request
	// held back would otherwise sit in the device ahead of the reader's
	// next one, and a reader with a few requests at a time would get its
	// share only of what the device serves while it has one in flight.
	full := m.tat + q.t.burst
	if dev {
		full = math.MaxInt64
	}
	end := int64(-1)
	var mine int64 // the weight of n's child that r is of
	if dev {
		rc := q.nodes[r.Group]
		for rc.up != n && rc != n {
			rc = rc.up
		}
		mine = rc.g.limits.WeightOrDefault()
	}
	for _, c := range n.idle {
		// c comes back with its finish tag as its start (see Push).
		if c.emptiedDir == r.Dir && n.key(&tag{start: c.finish}) < k && c.g.open(now, r.Dir) {
			e := min(c.emptied+q.t.burst, full)
			switch {
			case dev && c.inflight > 0 && r.Cost < holdRatio*c.lastCost && c.g.limits.WeightOrDefault() <= mine:
				// c waits on the device, not on its caller, and r is
				// no larger than c's requests, of a group weighing as
				// much: held back, r would leave a device that serves
				// several at once with less to do, for no one's share
				// (BFQ idles in such a symmetric case no more).
				continue
			case dev && c.inflight > 0:
				// Its requests are in the device, maybe behind a larger
				// one, and r is larger still: sent now, it would take
				// the device from c's next request for much longer than
				// c's own take; or c weighs more, and would get no more
				// than a group of r's weight if r's took the device
				// while c's next are on their way. c comes back when
				// they finish.
				e = c.emptied + holdInFlight
			}
			if e > now {
				end = max(end, e)
			}
		}
	}
	if end < 0 {
		return r
	}
	q.wait = min(q.wait, end)
	return nil
}

// head returns the group's own request to go next among the directions ok
// admits: demand before readahead, then by arrival.
func (n *qnode) head(ok [2]bool) *Request {
	var best *Request
	for d := range ok {
		if !ok[d] {
			continue
		}
		r := n.fifo[d][Demand].head
		if r == nil {
			r = n.fifo[d][Readahead].head
		}
		if r != nil && (best == nil || r.Class < best.Class || r.Class == best.Class && r.seq < best.seq) {
			best = r
		}
	}
	return best
}

// dispatch removes r, charges it and advances the fairness tags on the way
// up: each level serves its child's start tag, and the child's next start
// is its finish, start + Bytes.
func (q *Queue) dispatch(now int64, r *Request) {
	n := q.unlink(r)
	q.t.charge(now, r.enq, r.Group, r.Dir, r.Bytes, r.IOs, r.Cost)
	// A child of weight w is served r.Bytes*DefaultWeight/w of tag: twice
	// the weight, half the tag, twice the bytes for the same progress.
	// Under a parent that caps nothing in r's direction, the device is
	// what the children share: they are served its device time instead,
	// where the request has one.
	serve := func(parent *qnode, c *tag, backlogged bool, w int64) {
		s := parent.key(c)
		if parent != r.floorAt {
			// A release for a floor is out of fair queueing's turn: it
			// moves the child's tag (a floor is a minimum, not an
			// addition) but not the parent's clock, which would lift
			// its siblings' keys together and leave their order to
			// chance.
			parent.vclock = s
		}
		units := r.Bytes
		if r.Cost > 0 && !parent.g.capped(r.Dir) {
			units = r.Cost
		}
		service := units * DefaultWeight / w
		parent.largest = max(parent.largest, service)
		c.finish = satAdd(s, service)
		if backlogged {
			c.start, c.stamp = c.finish, q.nextStamp()
		}
	}
	serve(n, &n.own, n.ownLen > 0, DefaultWeight)
	for x := n; x != q.root; x = x.up {
		if q.t.shared {
			was := x.busy()
			x.inflight++
			q.settle(x, was)
			x.lastCost = r.Cost
		}
		serve(x.up, &x.tag, x.backlog > 0, x.g.limits.WeightOrDefault())
		if x.backlog == 0 && (x.up.g.m[r.Dir][dimBytes].rate != 0 || x.up.g.dev.rate != 0) {
			x.emptied, x.emptiedDir = now, r.Dir
			if !slices.Contains(x.up.idle, x) {
				x.up.idle = append(x.up.idle, x)
			}
		}
	}
}

// holdInFlight is how long, at most, a saturated device holds back a
// request for a group that would precede it and whose own requests are
// still in the device (see anticipate).
const holdInFlight = int64(100e6)

// holdRatio is how many times larger than a group's last request a
// request must be to be held back while the group's are in the device.
const holdRatio = 4

// Finished tells the queue that k requests of g in direction d, which it
// released while the device was shared, were finished by the device at
// now (or never reach it: a request that moves no data). A group with
// none left in the device and none queued is anticipated for up to Burst
// from then, as a reader between its requests (see anticipate): a
// device's turn for a group starts when its requests come back, not when
// they were sent.
func (q *Queue) Finished(now int64, g *Group, d Dir, k int) {
	q.t.check(g, d)
	q.now = max(q.now, now)
	n := q.node(g)
	for x := n; x != q.root; x = x.up {
		was := x.busy()
		x.inflight = max(x.inflight-k, 0)
		q.settle(x, was)
		if x.up == q.root && x.inflight == 0 && x.backlog == 0 && q.root.g.dev.rate != 0 {
			x.emptied, x.emptiedDir = now, d
			if !slices.Contains(q.root.idle, x) {
				q.root.idle = append(q.root.idle, x)
			}
		}
	}
}

// next returns the earliest time at which a queued request in n's subtree
// becomes eligible, given the latest schedule of n's ancestors per
// direction, or math.MaxInt64 if the subtree is empty.
func (q *Queue) next(n *qnode, gate [2]int64) int64 {
	for d := range gate {
		gate[d] = max(gate[d], n.g.gate(Dir(d)))
	}
	e := int64(math.MaxInt64)
	if n.ownLen > 0 {
		for d := range gate {
			if n.fifo[d][Demand].head != nil || n.fifo[d][Readahead].head != nil {
				e = min(e, gate[d])
			}
		}
	}
	for _, c := range n.active {
		e = min(e, q.next(c, gate))
	}
	return e
}

// ShareBudget returns how many bytes g may ask for in direction d at now
// without its own requests waiting long behind them: at g's own level the
// byte credit (as Tree.ByteBudget), and at each ancestor limiting d's bytes
// the larger of its credit and g's fair share of Burst worth of its rate
// (the rate divided among the subtrees below it that have requests queued,
// g's own counted, level by level; Burst is taken as at least
// DefaultBurst here). A sibling keeping a shared parent in
// debt thus does not take a group's share of the parent: the group may
// still queue its share, and fair queueing serves it. IOPS limits do not
// enter it. It is math.MaxInt64 when no level limits d's bytes.
func (q *Queue) ShareBudget(now int64, g *Group, d Dir) int64 {
	q.t.check(g, d)
	burst := q.t.burst
	b := g.m[d][dimBytes].credit(now, burst)
	frac := 1.0
	for c := q.node(g); c != q.root && c.up != q.root; c = c.up {
		x := c.up
		n := len(x.active)
		if c.backlog == 0 {
			n++ // g's branch, about to queue
		}
		if x.ownLen > 0 {
			n++
		}
		frac /= float64(max(n, 1))
		m := &x.g.m[d][dimBytes]
		if m.rate == 0 {
			continue
		}
		share := int64(float64(m.rate) * float64(max(burst, int64(DefaultBurst))) / nsPerSec * frac)
		b = min(b, max(m.credit(now, burst), share))
	}
	return b
}
