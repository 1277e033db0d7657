package sim

import (
	"sluice/stack"
)

// The run's timeline: the kinds of event, the event, and the queue that
// orders them by time and, at the same time, by push (runner.push).

// kind is what an event does.
type kind uint8

const (
	evJob    kind = iota // a job starts its threads
	evSubmit             // a FUSE request (or sync) reaches sluice
	evReply              // its answer reaches the caller
	evDevice             // a device I/O completes
	evMirror             // a device I/O of the mirror set completes (see mirrorset.go)
	evWake               // the stack's wake-up
	evNext               // a thread goes on after a batch of cached reads
	evProbe              // a read policy's background read completes
	evHedge              // a mirror read has run long: send it to another mirror too
)

// event is one entry of the run's timeline, ordered by (at, seq). Events
// are values in a hand-rolled heap: no closure or allocation per event.
type event struct {
	at   int64
	seq  uint64
	kind kind
	c    *call     // evSubmit, evReply
	t    *thread   // evNext
	j    *jobRun   // evJob
	io   *stack.IO // evDevice, evMirror, evHedge
	n    int64     // the I/O's bytes; evWake: the time the stack asked for
	err  error     // evDevice, evMirror, evProbe: the I/O's outcome
	dev  int       // evDevice, evMirror, evProbe: the device, and its series
	mir  mirrorTag // evMirror, evHedge, evProbe: the mirror set's own
}

// events is the queue of what happens next, in order of time and, at
// the same time, of push. The heap holds small keys without pointers, so
// that moving them is cheap and costs the collector nothing; the events
// themselves wait in slots of their own until popped.
type events struct {
	heap  []eventKey
	slots []event
	free  []int32
}

type eventKey struct {
	at   int64
	seq  uint64
	slot int32
}

func (k eventKey) before(o eventKey) bool {
	return k.at < o.at || k.at == o.at && k.seq < o.seq
}

func (q *events) len() int { return len(q.heap) }

func (q *events) push(e event) {
	var slot int32
	if n := len(q.free); n > 0 {
		slot, q.free = q.free[n-1], q.free[:n-1]
		q.slots[slot] = e
	} else {
		slot = int32(len(q.slots))
		q.slots = append(q.slots, e)
	}
	k := eventKey{e.at, e.seq, slot}
	h := append(q.heap, k)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if !k.before(h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = k
	q.heap = h
}

func (q *events) pop() event {
	h := q.heap
	top := h[0]
	n := len(h) - 1
	last := h[n]
	h = h[:n]
	if n > 0 {
		i := 0
		for {
			l := 2*i + 1
			if l >= n {
				break
			}
			m := l
			if r := l + 1; r < n && h[r].before(h[l]) {
				m = r
			}
			if !h[m].before(last) {
				break
			}
			h[i] = h[m]
			i = m
		}
		h[i] = last
	}
	q.heap = h
	e := q.slots[top.slot]
	q.slots[top.slot] = event{} // what it points to is the collector's again
	q.free = append(q.free, top.slot)
	return e
}

func (r *runner) push(e event) {
	r.seq++
	e.seq = r.seq
	r.q.push(e)
}
