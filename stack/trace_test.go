package stack

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	tt "sluice/internal/tracetest"
	"sluice/throttle"
)

// TestTrace runs the traces in testdata: a Stack driven by directives on a
// virtual clock, printing the Actions of every call. Run with -rewrite to
// regenerate the expected output.
//
// Every directive that takes t= moves the clock there first (t never goes
// back; without t the clock stays). Byte counts take KiB and MiB suffixes.
// Files are 64 MiB unless set otherwise; the device completes an I/O only
// when a directive says so, instantly, with the file's bytes.
//
//	new [maxio=] [readahead=] [noreadahead] [nobudget] [cache=] [burst=]
//	    [maxwait=]
//	    a new Stack with these Options, at time 0 (a trace starts with the
//	    defaults)
//	file ino=N size=
//	    the size of file N on the device
//	open NAME [ino=1] [whole]
//	    a Handle
//	limit GROUP [t=] [rbps=] [wbps=] [riops=] [wiops=]
//	    SetLimits; an absent field is max
//	read [t=] h= group= off= len= [name=] [count=1] [think=0] [wait]
//	    Read, named name or rK; with wait (or count), each read is driven
//	    to its end before the next starts think later: started I/Os
//	    complete at once and the clock jumps to each wake-up
//	write [t=] h= group= off= len= [name=] / sync [t=] h= group= [name=]
//	    Write (named wK), Sync (named sK)
//	writeback [t=] h= group= off= len= / pay [t=] h= group= off= len=
//	    WriteBack (named wK), Pay (named pK)
//	complete [t=] [io=(ioK, ...)]
//	    complete the started I/Os named, or all, in the order started
//	tick [t=]
//	    Tick at t, or at the last wake-up
//	cancel [t=] REQUEST
//	run [until=]
//	    complete started I/Os and tick at each wake-up, until nothing is
//	    in flight or the next wake-up is after until
//	metrics [GROUP ...]
//	    the nonzero counters of the named groups, or of all, and the cache
//
// Actions print as
//
//	start io1 read ino=1 off=0 len=16KiB default demand
//	done r1 size=4KiB
//	wake 3.90625ms
//
// (a run of requests finishing alike at one time folds into "done
// r4..r9 size=4KiB")
// with the wake-up in force, the last call's, printed once at the end of
// the directive. A directive that moves the clock by itself (run, read
// with wait) puts the time before each action it prints.
func TestTrace(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		x := &trace{}
		x.reset(t, DefaultOptions())
		datadriven.RunTest(t, path, func(t *testing.T, td *datadriven.TestData) string {
			return x.do(t, td)
		})
	})
}

type trace struct {
	s       *Stack
	now     int64
	wake    int64
	size    map[uint64]int64
	handles map[string]*Handle
	reqs    map[string]*Request
	names   map[*Request]string
	count   map[string]int
	ios     map[*IO]string // in flight: the stack reuses a completed read's IO
	nio     int            // I/Os started
	flight  []*IO          // started, not completed, in the order started
	out     *strings.Builder
	stamp   bool // print the time before each action
	called  bool // the directive called into the stack: print the wake-up
}

// tracePage is the content of every page the trace's device returns; the
// stack never looks into it.
var tracePage = make([]byte, PageSize)

func (x *trace) reset(t *testing.T, opts Options) {
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	*x = trace{s: s, wake: -1, size: map[uint64]int64{}, handles: map[string]*Handle{},
		reqs: map[string]*Request{}, names: map[*Request]string{}, count: map[string]int{}, ios: map[*IO]string{}}
}

func (x *trace) do(t *testing.T, td *datadriven.TestData) string {
	a := tt.New(t, td)
	defer a.Done()
	var b strings.Builder
	x.out, x.stamp, x.called = &b, false, false
	if now := a.Time("t", x.now); now < x.now {
		td.Fatalf(t, "t=%s is before the clock, %s", tt.Time(now), tt.Time(x.now))
	} else {
		x.now = now
	}
	handle := func() *Handle {
		h := x.handles[a.String("h", "")]
		if h == nil {
			td.Fatalf(t, "%s needs h= naming an open handle", td.Cmd)
		}
		return h
	}
	group := func() *throttle.Group {
		p := a.String("group", "")
		if p == "" {
			td.Fatalf(t, "%s needs group=", td.Cmd)
		}
		return x.s.Group(p)
	}
	request := func(kind string) *Request {
		name := a.String("name", "")
		if name == "" {
			x.count[kind]++
			name = fmt.Sprintf("%s%d", kind, x.count[kind])
		}
		if x.reqs[name] != nil {
			td.Fatalf(t, "request %s exists", name)
		}
		r := &Request{}
		x.reqs[name], x.names[r] = r, name
		return r
	}
	switch td.Cmd {
	case "new":
		o := DefaultOptions()
		o.MaxIO = a.Bytes("maxio", o.MaxIO)
		o.Readahead = a.Bytes("readahead", o.Readahead)
		if a.Flag("noreadahead") {
			o.Readahead = 0
		}
		o.ReadaheadBudget = !a.Flag("nobudget")
		o.CacheBytes = a.Bytes("cache", o.CacheBytes)
		o.Burst = time.Duration(a.Time("burst", int64(o.Burst)))
		o.MaxWait = time.Duration(a.Time("maxwait", 0))
		x.reset(t, o)
	case "file":
		x.size[uint64(a.Int("ino", 1))] = a.Bytes("size", 0)
	case "open":
		name := a.Pos("")
		x.handles[name] = &Handle{Ino: uint64(a.Int("ino", 1)), Whole: a.Flag("whole")}
	case "limit":
		p := a.Pos("")
		x.take(x.s.SetLimits(x.now, p, throttle.Limits{
			RBPS: a.Bytes("rbps", 0), WBPS: a.Bytes("wbps", 0),
			RIOPS: a.Int("riops", 0), WIOPS: a.Int("wiops", 0),
		}))
	case "read":
		h, g := handle(), group()
		off, n := a.Bytes("off", 0), a.Bytes("len", 0)
		count, think, wait := a.Int("count", 1), a.Time("think", 0), a.Flag("wait")
		if count > 1 && a.Has("name") {
			td.Fatalf(t, "name= names one read")
		}
		wait = wait || count > 1
		x.stamp = wait
		for i := range count {
			if i > 0 {
				x.now += think
			}
			r := request("r")
			x.take(x.s.Read(x.now, h, g, off+i*n, n, r))
			if wait {
				x.drive(t, td, func() bool { return r.done })
			}
		}
	case "write":
		h, g := handle(), group()
		x.take(x.s.Write(x.now, h, g, a.Bytes("off", 0), a.Bytes("len", 0), request("w")))
	case "writeback":
		h, g := handle(), group()
		x.take(x.s.WriteBack(x.now, h, g, a.Bytes("off", 0), a.Bytes("len", 0), request("w")))
	case "pay":
		h, g := handle(), group()
		x.take(x.s.Pay(x.now, h, g, a.Bytes("off", 0), a.Bytes("len", 0), request("p")))
	case "sync":
		h, g := handle(), group()
		x.take(x.s.Sync(x.now, h, g, request("s")))
	case "complete":
		var ios []*IO
		if names := a.Strings("io"); names != nil {
			for _, n := range names {
				i := slices.IndexFunc(x.flight, func(io *IO) bool { return x.ios[io] == n })
				if i < 0 {
					td.Fatalf(t, "%s is not in flight", n)
				}
				ios = append(ios, x.flight[i])
			}
		} else {
			ios = slices.Clone(x.flight)
		}
		for _, io := range ios {
			x.complete(io)
		}
	case "tick":
		if !a.Has("t") && x.wake >= 0 {
			x.now = max(x.now, x.wake)
		}
		x.take(x.s.Tick(x.now))
	case "cancel":
		name := a.Pos("")
		r := x.reqs[name]
		if r == nil {
			td.Fatalf(t, "no request %s", name)
		}
		x.take(x.s.Cancel(x.now, r))
	case "run":
		until := a.Time("until", 1<<62)
		x.stamp = true
		x.drive(t, td, func() bool { return len(x.flight) == 0 && (x.wake < 0 || x.wake > until) })
	case "metrics":
		x.metrics(a)
	default:
		td.Fatalf(t, "unknown command %s", td.Cmd)
	}
	if x.called {
		fmt.Fprintf(&b, "wake %s\n", tt.Time(x.wake))
	}
	return foldDone(b.String())
}

// doneLine matches a finished request: its time, if stamped, the request
// name's letters and number, and the rest.
var doneLine = regexp.MustCompile(`^(\S+ )?done ([a-z]+)(\d+) (size=\S+)$`)

// foldDone writes a run of three or more lines "T done rK size=S" with the
// same time and size and consecutive K as one line "T done rA..rB size=S".
func foldDone(out string) string {
	lines := strings.SplitAfter(out, "\n")
	var b strings.Builder
	for i := 0; i < len(lines); {
		m := doneLine.FindStringSubmatch(strings.TrimSuffix(lines[i], "\n"))
		j := i + 1
		if m != nil {
			k, _ := strconv.Atoi(m[3])
			for ; j < len(lines); j++ {
				n := doneLine.FindStringSubmatch(strings.TrimSuffix(lines[j], "\n"))
				if n == nil || n[1] != m[1] || n[2] != m[2] || n[4] != m[4] {
					break
				}
				if l, _ := strconv.Atoi(n[3]); l != k+(j-i) {
					break
				}
			}
			if j-i >= 3 {
				fmt.Fprintf(&b, "%sdone %s%s..%s%d %s\n", m[1], m[2], m[3], m[2], k+(j-i-1), m[4])
				i = j
				continue
			}
			j = i + 1
		}
		b.WriteString(lines[i])
		i = j
	}
	return b.String()
}

// drive completes what is in flight and ticks at each wake-up until done
// reports true.
func (x *trace) drive(t *testing.T, td *datadriven.TestData, done func() bool) {
	for range 100000 {
		for len(x.flight) > 0 {
			x.complete(x.flight[0])
		}
		if done() {
			return
		}
		if x.wake < 0 {
			td.Fatalf(t, "t=%s: waiting with no wake-up", tt.Time(x.now))
		}
		x.now = max(x.now, x.wake)
		x.take(x.s.Tick(x.now))
	}
	td.Fatalf(t, "t=%s: does not settle", tt.Time(x.now))
}

// complete finishes io on the device: a read with the file's bytes from
// its offset (short or none past the end), a write or flush in full.
func (x *trace) complete(io *IO) {
	i := slices.Index(x.flight, io)
	x.flight = slices.Delete(x.flight, i, i+1)
	delete(x.ios, io)
	if io.Op != OpRead {
		x.take(x.s.Wrote(x.now, io, io.Len, nil))
		return
	}
	size, ok := x.size[io.Ino]
	if !ok {
		size = 64 * MiB
	}
	var pages [][]byte
	for off := io.Off; off < min(io.Off+io.Len, size); off += PageSize {
		pages = append(pages, tracePage[:min(PageSize, size-off)])
	}
	x.take(x.s.Complete(x.now, io, pages, nil))
}

// take prints a's actions and keeps its I/Os in flight. Each call's
// wake-up replaces the last; the one in force is printed when the
// directive ends.
func (x *trace) take(a Actions) {
	at := ""
	if x.stamp {
		at = tt.Time(x.now) + " "
	}
	for _, io := range a.Start {
		x.flight = append(x.flight, io)
		x.nio++
		name := fmt.Sprintf("io%d", x.nio)
		x.ios[io] = name
		switch io.Op {
		case OpRead:
			fmt.Fprintf(x.out, "%sstart %s read ino=%d off=%s len=%s %s %s\n", at, name, io.Ino,
				tt.Bytes(io.Off), tt.Bytes(io.Len), io.group.Path(), io.Class)
		case OpWrite:
			fmt.Fprintf(x.out, "%sstart %s write ino=%d off=%s len=%s %s\n", at, name, io.Ino,
				tt.Bytes(io.Off), tt.Bytes(io.Len), io.group.Path())
		case OpFlush:
			fmt.Fprintf(x.out, "%sstart %s flush ino=%d %s\n", at, name, io.Ino, io.group.Path())
		case OpWriteback:
			fmt.Fprintf(x.out, "%sstart %s writeback ino=%d off=%s len=%s %s\n", at, name, io.Ino,
				tt.Bytes(io.Off), tt.Bytes(io.Len), io.group.Path())
		}
	}
	for _, r := range a.Done {
		fmt.Fprintf(x.out, "%sdone %s size=%s", at, x.names[r], tt.Bytes(r.Size()))
		if r.Err != nil {
			fmt.Fprintf(x.out, " err=%q", r.Err)
		}
		x.out.WriteByte('\n')
	}
	x.wake, x.called = a.Wake, true
}

func (x *trace) metrics(a *tt.Args) {
	m := x.s.Metrics()
	var want []string
	for p := a.Pos(""); p != ""; p = a.Pos("") {
		want = append(want, throttle.Clean(p))
	}
	for _, g := range m.Groups {
		if want != nil && !slices.Contains(want, g.Group) {
			continue
		}
		var f []string
		add := func(name string, v int64, bytes bool) {
			switch {
			case v == 0:
			case bytes:
				f = append(f, name+"="+tt.Bytes(v))
			default:
				f = append(f, fmt.Sprintf("%s=%d", name, v))
			}
		}
		add("app_reads", g.AppReads, false)
		add("app_rbytes", g.AppRBytes, true)
		add("app_writes", g.AppWrites, false)
		add("app_wbytes", g.AppWBytes, true)
		add("rios", g.RIOs, false)
		add("rbytes", g.RBytes, true)
		add("wios", g.WIOs, false)
		add("wbytes", g.WBytes, true)
		add("ra_issued", g.RAIssued, true)
		add("ra_used", g.RAUsed, true)
		add("ra_wasted", g.RAWasted, true)
		add("wb_callerless", g.WritebackBytes, true)
		add("wb_early", g.WritebackEarly, true)
		add("dirty", g.Dirty, true)
		if g.ThrottledNs != 0 {
			f = append(f, "throttled="+tt.Time(g.ThrottledNs))
		}
		if g.RDemandNs != g.ThrottledNs-g.WThrottledNs {
			// Readahead waited: readers were held for less.
			f = append(f, "readers_held="+tt.Time(g.RDemandNs))
		}
		fmt.Fprintf(x.out, "%s: %s\n", g.Group, strings.Join(f, " "))
	}
	fmt.Fprintf(x.out, "cache %s, %d I/Os queued\n", tt.Bytes(m.CacheBytes), m.Queued)
}
