package readahead

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	tt "sluice/internal/tracetest"
)

// TestTrace runs the traces in testdata: readers of one file, each an open
// with its State, reading through a fake page cache the way the kernel's
// filemap_read does (see reader.read), and printing every window they get.
// Run with -rewrite to regenerate the expected output.
//
// Pages are numbered from 0 and are PageSize bytes; byte counts take KiB
// and MiB suffixes. A command without r= acts on reader r, which a trace
// has from the start with max=32 (128 KiB).
//
//	reset [max=32]
//	    a new cache and a fresh reader r with a window of at most max pages
//	open NAME [max=32] [state=OTHER]
//	    a new reader with its own State, or sharing OTHER's
//	read [r=] (off= len= | page= [pages=1]) [count=1]
//	    count reads, each starting where the previous ended; prints one
//	    line per Sync or Async, then the reader's state and the pages read
//	    from the device so far
//	interleave r=(A, B, ...) page=(P, Q, ...) rounds=N
//	    N rounds of one 4 KiB read per reader, reader A at pages P, P+1, ...
//	budget [r=] (seq=(B, ...) | none)
//	    clamp each window by the next budget of seq, in pages, cycling;
//	    none turns the clamp off
//	state [r=] [start= size= async= prev=]
//	    set the named fields of the State, then print it
//	fill page= [pages=1] / drop page=
//	    put pages into the cache without a marker, or take one out with
//	    its marker
//	sync [r=] index= [req=1] / async [r=] index= [req=1]
//	    call State.Sync or State.Async alone, reading nothing
//	clamp [r=] window=(start, size, async) budget=
//	    call State.Clamp
//
// A window line reads
//
//	sync 0+1 {0 4 3} marker 1 clamp 1 {0 2 1} marker 1 fetch 0-1
//
// for a Sync at page 0 for 1 page that returned {Start Size AsyncSize},
// was clamped by a budget of 1 page, and read pages 0 to 1; "alone 5"
// means page 5 of the read was read on its own, outside the window.
func TestTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		x := &trace{}
		x.reset(32)
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			return x.do(t, td)
		})
	})
}

type trace struct {
	c       *pageCache
	readers map[string]*reader
	out     *strings.Builder
	prefix  string // the reader's name before each window line, when several read
}

func (x *trace) reset(maxPages int64) {
	x.c = newPageCache()
	x.readers = map[string]*reader{}
	x.open("r", &State{}, maxPages)
}

func (x *trace) open(name string, st *State, maxPages int64) *reader {
	r := newReader(st, x.c, maxPages)
	r.note = func(kind byte, index, req int64, raw Window, ok bool, budget int64, w Window, fetched []Window, alone int64) {
		b := x.out
		b.WriteString(x.prefix)
		if kind == 'S' {
			b.WriteString("sync")
		} else {
			b.WriteString("async")
		}
		fmt.Fprintf(b, " %d+%d ", index, req)
		if !ok {
			b.WriteString("nothing\n")
			return
		}
		b.WriteString(fmtWindow(raw))
		if budget != noClamp {
			fmt.Fprintf(b, " clamp %d %s", budget, fmtWindow(w))
		}
		b.WriteString(" fetch ")
		if fetched == nil {
			b.WriteString("none")
		}
		for i, f := range fetched {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(fmtRun(f))
		}
		if alone >= 0 {
			fmt.Fprintf(b, " alone %d", alone)
		}
		b.WriteByte('\n')
	}
	x.readers[name] = r
	return r
}

func fmtWindow(w Window) string {
	s := fmt.Sprintf("{%d %d %d}", w.Start, w.Size, w.AsyncSize)
	if m := w.Marker(); m >= 0 {
		s += fmt.Sprintf(" marker %d", m)
	}
	return s
}

func fmtRun(w Window) string {
	if w.Size == 1 {
		return fmt.Sprint(w.Start)
	}
	return fmt.Sprintf("%d-%d", w.Start, w.End()-1)
}

func fmtState(st *State) string {
	return fmt.Sprintf("state {%d %d %d} prev %d", st.Start, st.Size, st.AsyncSize, st.PrevPos)
}

func (x *trace) do(t *testing.T, td *datadriven.TestData) string {
	a := tt.New(t, td)
	defer a.Done()
	var b strings.Builder
	x.out, x.prefix = &b, ""
	reader := func() *reader {
		name := a.String("r", "r")
		r := x.readers[name]
		if r == nil {
			td.Fatalf(t, "no reader %s", name)
		}
		return r
	}
	switch td.Cmd {
	case "reset":
		x.reset(a.Int("max", 32))
	case "open":
		name := a.Pos("")
		st := &State{}
		if o := a.String("state", ""); o != "" {
			if x.readers[o] == nil {
				td.Fatalf(t, "no reader %s", o)
			}
			st = x.readers[o].st
		}
		x.open(name, st, a.Int("max", 32))
	case "read":
		r := reader()
		off, n := a.Bytes("off", -1), a.Bytes("len", -1)
		if a.Has("page") {
			off, n = a.Int("page", 0)*PageSize, a.Int("pages", 1)*PageSize
		}
		if off < 0 || n <= 0 {
			td.Fatalf(t, "read needs off= and len=, or page=")
		}
		for i := range a.Int("count", 1) {
			r.read(off+i*n, n)
		}
		fmt.Fprintf(&b, "%s fetched %d\n", fmtState(r.st), x.c.fetched)
	case "interleave":
		names, pages := a.Strings("r"), a.Ints("page")
		if len(names) != len(pages) {
			td.Fatalf(t, "r= and page= differ in length")
		}
		rounds := a.Int("rounds", 1)
		for i := range rounds {
			for k, name := range names {
				r := x.readers[name]
				if r == nil {
					td.Fatalf(t, "no reader %s", name)
				}
				x.prefix = name + ": "
				r.read((pages[k]+i)*PageSize, PageSize)
			}
		}
		x.prefix = ""
		fmt.Fprintf(&b, "fetched %d\n", x.c.fetched)
	case "budget":
		r := reader()
		if a.Flag("none") {
			r.budget = nil
			break
		}
		seq := a.Ints("seq")
		if len(seq) == 0 {
			td.Fatalf(t, "budget needs seq= or none")
		}
		n := 0
		r.budget = func() int64 {
			v := seq[n%len(seq)]
			n++
			return v
		}
	case "state":
		st := reader().st
		st.Start = a.Int("start", st.Start)
		st.Size = a.Int("size", st.Size)
		st.AsyncSize = a.Int("async", st.AsyncSize)
		st.PrevPos = a.Bytes("prev", st.PrevPos)
		b.WriteString(fmtState(st) + "\n")
	case "fill":
		x.c.fill(Window{Start: a.Int("page", 0), Size: a.Int("pages", 1)})
	case "drop":
		// A page leaves the cache with its marker, as in the kernel.
		p := a.Int("page", 0)
		delete(x.c.pages, p)
		delete(x.c.marks, p)
	case "sync", "async":
		r := reader()
		index, req := a.Int("index", 0), a.Int("req", 1)
		if td.Cmd == "sync" {
			fmt.Fprintf(&b, "%s\n", fmtWindow(r.st.Sync(index, req, r.maxPages, x.c)))
		} else if w, ok := r.st.Async(index, req, r.maxPages, x.c); ok {
			fmt.Fprintf(&b, "%s\n", fmtWindow(w))
		} else {
			b.WriteString("nothing\n")
		}
		b.WriteString(fmtState(r.st) + "\n")
	case "clamp":
		r := reader()
		v := a.Ints("window")
		if len(v) != 3 {
			td.Fatalf(t, "window=(start, size, async)")
		}
		w := r.st.Clamp(Window{Start: v[0], Size: v[1], AsyncSize: v[2]}, a.Int("budget", 0))
		fmt.Fprintf(&b, "%s\n%s\n", fmtWindow(w), fmtState(r.st))
	default:
		td.Fatalf(t, "unknown command %s", td.Cmd)
	}
	return b.String()
}
