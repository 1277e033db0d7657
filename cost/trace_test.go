package cost

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	tt "sluice/internal/tracetest"
)

// TestTrace runs the traces in testdata on virtual time. Run with -rewrite
// to regenerate the expected output.
//
//	reset
//	    a new Model and a Controller with default Options, at time 0
//	serve ios=N [qd=1] [parallel=1] kinds=(K, ...)
//	    a device serving parallel I/Os at a time, in arrival order, with
//	    qd I/Os kept in flight by its callers, each the next of kinds in
//	    turn; a kind is DIR:PATTERN:SIZE:SERVICE, e.g. read:random:4KiB:250us
//	    (a sequential kind's I/Os follow each other in one file). Each I/O
//	    is Begun when sent and Ended when served; prints, per kind, the
//	    model's cost against the service time, and the clock
//	cost dir=read|write pattern=random|sequential bytes=N
//	    Model.Cost
//	observe [t=] count=N latency=D [cost=D] [bytes=4KiB] [target=D]
//	    Controller.Observe of count completions of 4 KiB random reads
//	backlog [t=]
//	    Controller.Backlog
//	contended [t=]
//	    Controller.Contended
//	tick t= busy=D
//	    Controller.Tick with the model's busy time; prints the state
func TestTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		x := &trace{}
		x.reset()
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			return x.do(t, td)
		})
	})
}

type trace struct {
	m   *Model
	c   *Controller
	now int64
}

func (x *trace) reset() {
	x.m, x.c, x.now = &Model{}, NewController(Options{}), 0
}

type kind struct {
	name    string
	d       Dir
	random  bool
	n, serv int64
	off     int64
	ino     uint64
}

func parseKind(t *testing.T, td *datadriven.TestData, s string, ino uint64) kind {
	p := strings.Split(s, ":")
	if len(p) != 4 {
		td.Fatalf(t, "kind %q: want DIR:PATTERN:SIZE:SERVICE", s)
	}
	k := kind{name: s, ino: ino}
	switch p[0] {
	case "read":
	case "write":
		k.d = Write
	default:
		td.Fatalf(t, "kind %q: direction read or write", s)
	}
	switch p[1] {
	case "random":
		k.random = true
	case "sequential":
	default:
		td.Fatalf(t, "kind %q: pattern random or sequential", s)
	}
	var err error
	if k.n, err = tt.ParseBytes(p[2]); err != nil {
		td.Fatalf(t, "kind %q: %v", s, err)
	}
	d, err := time.ParseDuration(p[3])
	if err != nil {
		td.Fatalf(t, "kind %q: %v", s, err)
	}
	k.serv = int64(d)
	return k
}

func (x *trace) do(t *testing.T, td *datadriven.TestData) string {
	a := tt.New(t, td)
	defer a.Done()
	if now := a.Time("t", x.now); now < x.now {
		td.Fatalf(t, "t=%s is before the clock, %s", tt.Time(now), tt.Time(x.now))
	} else {
		x.now = now
	}
	dir := func() Dir {
		if a.String("dir", "read") == "write" {
			return Write
		}
		return Read
	}
	var b strings.Builder
	switch td.Cmd {
	case "reset":
		x.reset()
	case "serve":
		var kinds []kind
		for i, s := range a.Strings("kinds") {
			kinds = append(kinds, parseKind(t, td, s, uint64(i+1)))
		}
		x.serve(kinds, a.Int("ios", 100), int(a.Int("qd", 1)), int(a.Int("parallel", 1)))
		for _, k := range kinds {
			got := x.m.Cost(k.d, k.random, k.n)
			fmt.Fprintf(&b, "%s: cost %s, %.3f of its service\n", k.name, tt.Time(got), float64(got)/float64(k.serv))
		}
		fmt.Fprintf(&b, "clock %s\n", tt.Time(x.now))
	case "cost":
		random := a.String("pattern", "random") == "random"
		fmt.Fprintf(&b, "%s\n", tt.Time(x.m.Cost(dir(), random, a.Bytes("bytes", 4096))))
	case "observe":
		lat := a.Time("latency", 0)
		c, n, target := a.Time("cost", 250_000), a.Bytes("bytes", 4096), a.Time("target", 0)
		for range a.Int("count", 1) {
			x.c.Observe(x.now, Read, true, n, c, lat, target)
		}
	case "backlog":
		x.c.Backlog(x.now)
	case "contended":
		x.c.Contended(x.now)
	case "tick":
		changed := x.c.Tick(x.now, a.Time("busy", 0))
		s := x.c.State
		fmt.Fprintf(&b, "saturated %v backlogged %v done %s/s idle %.2f capacity %s/s changed %v next %s\n",
			s.Saturated, s.Backlogged, tt.Time(s.Done), s.Idle, tt.Time(s.Capacity), changed, tt.Time(x.c.Next()))
		if s.Queued {
			b.WriteString("queued\n")
		}
	default:
		td.Fatalf(t, "unknown command %s", td.Cmd)
	}
	return b.String()
}

// serve runs ios I/Os of kinds, in turn, through a device that serves
// parallel at a time in arrival order, qd kept in flight.
func (x *trace) serve(kinds []kind, ios int64, qd, parallel int) {
	type io struct {
		k    *kind
		tok  Token
		seq  bool
		done int64
	}
	slots := make([]int64, parallel) // when each slot frees
	var flight []io
	next := 0
	send := func() {
		k := &kinds[next%len(kinds)]
		next++
		off := k.off
		if k.random {
			off = int64(next) * 1 << 30 // never where the last ended
		}
		seq := x.m.Sequential(k.ino, off, k.n)
		k.off = off + k.n
		s := 0
		for i := range slots {
			if slots[i] < slots[s] {
				s = i
			}
		}
		done := max(x.now, slots[s]) + k.serv
		slots[s] = done
		flight = append(flight, io{k: k, tok: x.m.Begin(x.now), seq: seq, done: done})
	}
	for sent := int64(0); sent < ios || len(flight) > 0; {
		for len(flight) < qd && sent < ios {
			send()
			sent++
		}
		first := 0
		for i := range flight {
			if flight[i].done < flight[first].done {
				first = i
			}
		}
		f := flight[first]
		flight = append(flight[:first], flight[first+1:]...)
		x.now = f.done
		x.m.End(x.now, f.tok, f.k.d, !f.seq, f.k.n)
	}
}
