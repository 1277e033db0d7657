package throttle

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	tt "sluice/internal/tracetest"
)

// TestTrace runs the traces in testdata: a Tree and its Queue driven by
// directives on a virtual clock, printing what each step released and the
// next wake-up. Run with -rewrite to regenerate the expected output.
//
// Every directive that takes t= moves the clock there first (t never goes
// back; without t the clock stays). Byte counts take KiB and MiB suffixes.
//
//	reset [burst=10ms]
//	    a new, empty Tree and Queue at time 0
//	limit GROUP [t=] [rbps=] [wbps=] [riops=] [wiops=] [weight=]
//	      [rbps.min=] [riops.min=]
//	    SetLimits; an absent field is max (unlimited), or no weight, no floor
//	lease GROUP [t=] [rbps=] [dev=D]
//	    SetLease: D of device time a second (absent: no lease)
//	busy [t=] group=G
//	    Queue.BusyNs of G
//	capacity [t=] per-second=D
//	    Tree.SetCapacity: D of device time a second (0: any); prints
//	    whether the device is shared and the capacity in force
//	submit [t=] group=G [bytes=4KiB] [ios=1] [cost=D] [dir=read|write]
//	       [class=demand|readahead] [count=1] [name=L]
//	    Push count requests, labelled L or G#k (k counting per group);
//	    prints the labels
//	release [t=]
//	    Release; prints the labels released and the next wake-up
//	run until=T [keep=(G, ...)] [echo=(G, ...) echo-after=D] [quiet]
//	    Release, jump the clock to each wake-up, until the next one is
//	    after T; the clock is then T. Each release of a kept group pushes a
//	    copy, keeping it backlogged; each release of an echoed group pushes
//	    a copy D later, as a caller with one request at a time does. Prints the releases, consecutive ones
//	    of one kind (group, size, direction, class) folded into one line
//	    of times, labels and sizes (unless quiet), then the bytes released
//	    per group (and their device time, where requests have a cost) and
//	    the next wake-up
//	remove L / promote L / queued
//	    Queue.Remove, Queue.Promote of the request labelled L; Queue.Len
//	charge [t=] group=G bytes= [ios=1] [dir=]
//	refund [t=] group=G bytes= [dir=]
//	    Tree.Charge, Tree.Refund
//	eligible [t=] group=G [dir=]
//	budget [t=] group=G [dir=] [maxio=0]
//	    Tree.Eligible, Tree.Budget (and Tree.ByteBudget, Queue.ShareBudget)
func TestTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		x := &trace{}
		x.reset(Config{})
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			return x.do(t, td)
		})
	})
}

type trace struct {
	tree   *Tree
	q      *Queue
	now    int64
	label  map[*Request]string
	byName map[string]*Request
	count  map[string]int
	out    []*Request
}

func (x *trace) reset(cfg Config) {
	x.tree = New(cfg)
	x.q = NewQueue(x.tree)
	x.now = 0
	x.label = map[*Request]string{}
	x.byName = map[string]*Request{}
	x.count = map[string]int{}
}

func (x *trace) do(t *testing.T, td *datadriven.TestData) string {
	a := tt.New(t, td)
	defer a.Done()
	if now := a.Time("t", x.now); now < x.now {
		td.Fatalf(t, "t=%s is before the clock, %s", tt.Time(now), tt.Time(x.now))
	} else {
		x.now = now
	}
	group := func() *Group {
		p := a.String("group", "")
		if p == "" {
			td.Fatalf(t, "%s needs group=", td.Cmd)
		}
		return x.tree.Group(p)
	}
	dir := func() Dir {
		switch s := a.String("dir", "read"); s {
		case "read":
			return Read
		case "write":
			return Write
		default:
			td.Fatalf(t, "dir=%s: want read or write", s)
		}
		return 0
	}
	request := func() *Request {
		r := x.byName[a.Pos("")]
		if r == nil {
			td.Fatalf(t, "%s: no such request", td.Cmd)
		}
		return r
	}
	var b strings.Builder
	switch td.Cmd {
	case "reset":
		x.reset(Config{Burst: time.Duration(a.Time("burst", 0))})
	case "limit":
		p := a.Pos("")
		x.tree.SetLimits(x.now, p, Limits{
			RBPS: a.Bytes("rbps", 0), WBPS: a.Bytes("wbps", 0),
			RIOPS: a.Int("riops", 0), WIOPS: a.Int("wiops", 0),
			Weight: a.Int("weight", 0), RBPSMin: a.Bytes("rbps.min", 0), RIOPSMin: a.Int("riops.min", 0),
		})
	case "lease":
		x.tree.SetLease(x.now, a.Pos(""), Lease{RBPS: a.Bytes("rbps", 0), Dev: a.Time("dev", 0)})
	case "busy":
		fmt.Fprintf(&b, "busy %s\n", tt.Time(x.q.BusyNs(x.now, group())))
	case "capacity":
		x.tree.SetCapacity(x.now, a.Time("per-second", 0))
		fmt.Fprintf(&b, "shared %v capacity %s/s\n", x.tree.Shared(), tt.Time(x.tree.Capacity()))
	case "submit":
		r := Request{Group: group(), Dir: dir(), Bytes: a.Bytes("bytes", 4*KiB), IOs: a.Int("ios", 1), Cost: a.Time("cost", 0)}
		switch s := a.String("class", "demand"); s {
		case "demand":
			r.Class = Demand
		case "readahead":
			r.Class = Readahead
		default:
			td.Fatalf(t, "class=%s: want demand or readahead", s)
		}
		n, name := a.Int("count", 1), a.String("name", "")
		if name != "" && n != 1 {
			td.Fatalf(t, "name= names one request")
		}
		var labels []string
		for range n {
			labels = append(labels, x.push(r, name))
		}
		b.WriteString(fold(labels) + "\n")
	case "release":
		var next int64
		x.out, next = x.q.Release(x.now, x.out[:0])
		var labels []string
		for _, r := range x.out {
			labels = append(labels, x.released(r))
		}
		if len(labels) == 0 {
			labels = []string{"nothing"}
		}
		fmt.Fprintf(&b, "released %s\nnext %s\n", fold(labels), tt.Time(next))
	case "run":
		keep := map[string]int64{}
		for _, p := range a.Strings("keep") {
			keep[Clean(p)] = 0
		}
		after := a.Time("echo-after", 0)
		for _, p := range a.Strings("echo") {
			keep[Clean(p)] = after
		}
		x.run(t, td, a.Time("until", x.now), keep, a.Flag("quiet"), &b)
	case "remove":
		fmt.Fprintf(&b, "%v\n", x.q.Remove(request()))
	case "promote":
		x.q.Promote(request())
	case "queued":
		fmt.Fprintf(&b, "%d\n", x.q.Len())
	case "charge":
		x.tree.Charge(x.now, group(), dir(), a.Bytes("bytes", 0), a.Int("ios", 1))
	case "refund":
		x.tree.Refund(x.now, group(), dir(), a.Bytes("bytes", 0))
	case "eligible":
		fmt.Fprintf(&b, "%s\n", tt.Time(x.tree.Eligible(x.now, group(), dir())))
	case "budget":
		g, d := group(), dir()
		fmt.Fprintf(&b, "budget %s byte %s share %s\n",
			budget(x.tree.Budget(x.now, g, d, a.Bytes("maxio", 0))),
			budget(x.tree.ByteBudget(x.now, g, d)), budget(x.q.ShareBudget(x.now, g, d)))
	default:
		td.Fatalf(t, "unknown command %s", td.Cmd)
	}
	return b.String()
}

// push queues a copy of r labelled name, or by its group's count.
func (x *trace) push(r Request, name string) string {
	p := &r
	if name == "" {
		x.count[r.Group.Path()]++
		name = fmt.Sprintf("%s#%d", r.Group.Path(), x.count[r.Group.Path()])
	}
	if x.byName[name] != nil {
		panic("trace: label " + name + " used twice")
	}
	x.label[p], x.byName[name] = name, p
	x.q.Push(x.now, p)
	return name
}

// released returns the label of a released request. Labels stay, so that
// a released request can still be named.
func (x *trace) released(r *Request) string { return x.label[r] }

// release is one released request in a run.
type release struct {
	at    int64
	label string
	r     *Request
}

// run drives the queue as a shell does: Release at the clock, act on what
// comes out, jump to the returned wake-up. It checks that the queue never
// asks to be woken for nothing and never stops while it holds requests.
func (x *trace) run(t *testing.T, td *datadriven.TestData, until int64, keep map[string]int64, quiet bool, b *strings.Builder) {
	var log []release
	got, cost := map[string]int64{}, map[string]int64{}
	var order []string
	woke := false
	var next int64
	type echo struct {
		at int64
		r  Request
	}
	var echoes []echo // copies to push later, in time order
	for {
		pushed := false
		for len(echoes) > 0 && echoes[0].at <= x.now {
			x.push(echoes[0].r, "")
			echoes, pushed = echoes[1:], true
		}
		x.out, next = x.q.Release(x.now, x.out[:0])
		if woke && !pushed && len(x.out) == 0 && (next < 0 || next > x.now+x.tree.burst) {
			// (A wake-up may find the parent waiting for a sibling that
			// is between requests; then the next one is that wait's end.)
			td.Fatalf(t, "t=%s: woken at the returned time but nothing released", tt.Time(x.now))
		}
		if x.q.Len() > 0 && next <= x.now || x.q.Len() == 0 && next != -1 {
			td.Fatalf(t, "t=%s: %d queued, next %d", tt.Time(x.now), x.q.Len(), next)
		}
		woke = false
		for _, r := range x.out {
			log = append(log, release{x.now, x.released(r), r})
			p := r.Group.Path()
			if _, ok := got[p]; !ok {
				order = append(order, p)
			}
			got[p] += r.Bytes
			cost[p] += r.Cost
			if d, ok := keep[p]; ok {
				c := Request{Group: r.Group, Dir: r.Dir, Bytes: r.Bytes, IOs: r.IOs, Class: r.Class, Cost: r.Cost}
				if d == 0 {
					x.push(c, "")
				} else {
					echoes = append(echoes, echo{x.now + d, c})
				}
			}
		}
		if len(x.out) > 0 {
			continue
		}
		if len(echoes) > 0 && (next < 0 || echoes[0].at < next) {
			next = echoes[0].at
		}
		if next < 0 || next > until {
			break
		}
		x.now, woke = next, true
	}
	x.now = until
	if !quiet {
		for i := 0; i < len(log); {
			j := i + 1
			same := func(r, o *Request) bool {
				return r.Group == o.Group && r.Bytes == o.Bytes && r.Dir == o.Dir && r.Class == o.Class
			}
			for j < len(log) && same(log[j].r, log[i].r) {
				j++
			}
			at := tt.Time(log[i].at)
			if j-i > 1 {
				at += ".." + tt.Time(log[j-1].at)
			}
			var labels []string
			for _, l := range log[i:j] {
				labels = append(labels, l.label)
			}
			size := tt.Bytes(log[i].r.Bytes)
			if j-i > 1 {
				size = fmt.Sprintf("%dx%s", j-i, size)
			}
			if r := log[i].r; r.Dir != Read {
				size += " " + r.Dir.String()
			}
			if r := log[i].r; r.Class != Demand {
				size += " " + r.Class.String()
			}
			fmt.Fprintf(b, "%s %s %s\n", at, fold(labels), size)
			i = j
		}
	}
	var totals []string
	for _, p := range order {
		t := p + "=" + tt.Bytes(got[p])
		if cost[p] != 0 {
			t += "/" + tt.Time(cost[p])
		}
		totals = append(totals, t)
	}
	if totals == nil {
		totals = []string{"nothing"}
	}
	fmt.Fprintf(b, "released %s\nnext %s\n", strings.Join(totals, " "), tt.Time(next))
}

// fold joins labels, writing a run of three or more labels G#k, G#k+1, ...
// as G#k..G#m.
func fold(labels []string) string {
	split := func(l string) (string, int) {
		var n int
		if i := strings.LastIndexByte(l, '#'); i >= 0 {
			if _, err := fmt.Sscanf(l[i+1:], "%d", &n); err == nil {
				return l[:i], n
			}
		}
		return l, -1
	}
	var parts []string
	for i := 0; i < len(labels); {
		g, n := split(labels[i])
		j := i + 1
		for n >= 0 && j < len(labels) {
			g2, n2 := split(labels[j])
			if g2 != g || n2 != n+(j-i) {
				break
			}
			j++
		}
		if j-i >= 3 {
			parts = append(parts, labels[i]+".."+labels[j-1])
		} else {
			parts = append(parts, labels[i:j]...)
		}
		i = j
	}
	return strings.Join(parts, " ")
}

func budget(n int64) string {
	if n == 1<<63-1 {
		return "max"
	}
	return tt.Bytes(n)
}
