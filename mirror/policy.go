// Package mirror chooses which copy of a mirror set serves each device
// read. Policies are pure: the time is an argument, nothing sleeps, reads
// a clock or starts a goroutine; the driver (the mount or the simulator)
// tells a policy when a read starts and when it ends, and asks it where
// the next one goes. A policy is not safe for concurrent use.
package mirror

import (
	"fmt"
	"strings"
)

// Read is what a policy knows of a device read.
type Read struct {
	PID int // the caller's process, 0 when unknown
	// File tells apart the open files read, 0 when unknown: a read
	// continues a sequential stream only if it reads the same file.
	File     uint64
	Off, Len int64
}

// Policy picks the mirror for each device read.
type Policy interface {
	// Name is the policy's name as --read-policy takes it.
	Name() string
	// Pick returns the mirror, in [0, mirrors), that serves r.
	Pick(now int64, r Read) int
	// Started reports that r was sent to mirror m.
	Started(now int64, m int, r Read)
	// Done reports that a read sent to m at start finished at now.
	Done(now int64, m int, start int64, err error)
}

// Prober is a policy that reads mirrors it does not use in the
// background now and then, to notice when they have recovered.
type Prober interface {
	// Probe returns a mirror the driver should read now, off the
	// caller's path, reporting Started and Done as for any read.
	Probe(now int64) (m int, ok bool)
}

// Hedger is a policy that hedges slow reads: when a read runs longer than
// HedgeAfter, the driver sends it to another mirror too (HedgeTo) and the
// caller takes the first answer.
type Hedger interface {
	// HedgeAfter returns how long a read sent to mirror m may run before
	// it is hedged; 0 for never.
	HedgeAfter(now int64, m int) int64
	// HedgeTo returns the mirror that a read sent to mirror from at
	// start, still running at now, goes to as well, among those allowed
	// accepts (the driver's: not tried yet, open); ok is false when none
	// is a better bet than waiting on, and the driver asks again a hedge
	// delay later.
	HedgeTo(now int64, from int, start int64, allowed func(m int) bool) (m int, ok bool)
}

// Names lists the policies New knows.
var Names = []string{"adaptive", "pid", "roundrobin", "latency"}

// Default is the policy a mirror set uses unless told otherwise.
const Default = "adaptive"

// DefaultRoundRobin is how many bytes roundrobin reads from one mirror
// before it moves to the next, as btrfs's round-robin policy does.
const DefaultRoundRobin = 256 << 10

// New returns the named policy for a set of mirrors.
func New(name string, mirrors int) (Policy, error) {
	if mirrors < 1 {
		return nil, fmt.Errorf("a mirror set needs at least one mirror, got %d", mirrors)
	}
	switch name {
	case "adaptive":
		return newAdaptive(mirrors), nil
	case "pid":
		return &pid{n: mirrors}, nil
	case "roundrobin":
		return &roundRobin{n: mirrors, per: DefaultRoundRobin}, nil
	case "latency":
		return &latency{sum: make([]int64, mirrors), count: make([]int64, mirrors)}, nil
	}
	return nil, fmt.Errorf("read policy %q: want one of %s", name, strings.Join(Names, ", "))
}

// pid sends a caller's reads to mirror pid mod mirrors, as btrfs does by
// default: half of the readers of a two-way set land on the slower copy.
type pid struct{ n int }

func (p *pid) Name() string                  { return "pid" }
func (p *pid) Pick(_ int64, r Read) int      { return int(uint(r.PID) % uint(p.n)) }
func (p *pid) Started(int64, int, Read)      {}
func (p *pid) Done(int64, int, int64, error) {}

// roundRobin moves to the next mirror after every per bytes read, over
// all readers together (btrfs's round-robin, Linux 6.14).
type roundRobin struct {
	n, cur int
	per    int64
	used   int64
}

func (p *roundRobin) Name() string { return "roundrobin" }
func (p *roundRobin) Pick(_ int64, r Read) int {
	if p.used >= p.per {
		p.cur = (p.cur + 1) % p.n
		p.used = 0
	}
	return p.cur
}
func (p *roundRobin) Started(_ int64, m int, r Read) {
	if m == p.cur {
		p.used += r.Len
	}
}
func (p *roundRobin) Done(int64, int, int64, error) {}

// latency sends every read to the mirror with the lowest average read
// time so far, over its whole life: the policy proposed for btrfs in
// seed 004. A mirror never read has average 0 and is tried first; ties go
// to the lower index. It never forgets, so a mirror that was slow once
// stays unused after it recovers.
type latency struct {
	sum, count []int64
}

func (p *latency) Name() string { return "latency" }
func (p *latency) Pick(int64, Read) int {
	best := 0
	for m := range p.sum {
		// sum[m]/count[m] < sum[best]/count[best], without dividing.
		if p.sum[m]*max(p.count[best], 1) < p.sum[best]*max(p.count[m], 1) {
			best = m
		}
	}
	return best
}
func (p *latency) Started(int64, int, Read) {}
func (p *latency) Done(now int64, m int, start int64, err error) {
	p.sum[m] += now - start
	p.count[m]++
}
