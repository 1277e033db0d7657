package device

import (
	"bytes"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"
)

// TestMemPattern: unwritten bytes read as the pattern, written ones as
// written, and a read past the end is short with io.EOF.
func TestMemPattern(t *testing.T) {
	m := NewMem(3 * memPage)
	if _, err := m.WriteAt([]byte("hello"), memPage-2); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4*memPage)
	n, err := m.ReadAt(buf, 0)
	if n != 3*memPage || err == nil {
		t.Fatalf("read %d bytes, err %v; want %d and EOF", n, err, 3*memPage)
	}
	for i := range n {
		want := Pattern(int64(i))
		if i >= memPage-2 && i < memPage+3 {
			want = "hello"[i-(memPage-2)]
		}
		if buf[i] != want {
			t.Fatalf("byte %d = %d, want %d", i, buf[i], want)
		}
	}
	if len(m.pages) != 2 {
		t.Fatalf("%d pages held, want the 2 written", len(m.pages))
	}
}

// TestFaulty: latency is slept (virtual under synctest) and errors replace
// the call.
func TestFaulty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		f := &Faulty{File: NewMem(memPage),
			Delay: func(op Op, off, n int64) time.Duration { return time.Duration(n) * time.Microsecond },
			Fail: func(op Op, off, n int64) error {
				if op == Write {
					return boom
				}
				return nil
			}}
		start := time.Now()
		buf := make([]byte, 100)
		if _, err := f.ReadAt(buf, 0); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 100*time.Microsecond {
			t.Fatalf("read took %v, want 100us", d)
		}
		if _, err := f.WriteAt(buf, 0); err != boom {
			t.Fatalf("write: %v, want the injected error", err)
		}
	})
}

// TestModel: I/Os share the bandwidth, wait for a free slot, slow down in a
// slowdown window, fail in a fault window, and the same seed gives the
// same times.
func TestModel(t *testing.T) {
	const ms = int64(time.Millisecond)
	m := &Model{Bandwidth: 1 << 20, Latency: Dist{Kind: "const", A: time.Millisecond}, QueueDepth: 2,
		Slow:   []Slowdown{{Window{10 * time.Second, 11 * time.Second}, 4}},
		Faults: []Fault{{Window{20 * time.Second, 21 * time.Second}, Read}}}
	a, _ := m.Start(0, Read, 0, 1<<20)     // 1 s of transfer
	b, _ := m.Start(0, Read, 1<<20, 1<<20) // shares the channel: after a
	c, _ := m.Start(0, Read, 0, 0)         // no slot free until a completes
	if a != 1000*ms || b != 2000*ms || c != a+ms {
		t.Fatalf("completions %d %d %d ms; want 1000 2000 1001", a/ms, b/ms, c/ms)
	}
	d, _ := m.Start(10*int64(time.Second), Read, 0, 0)
	if d-10*int64(time.Second) != 4*ms {
		t.Fatalf("slowed I/O took %d ms, want 4", (d-10*int64(time.Second))/ms)
	}
	if _, err := m.Start(20*int64(time.Second), Read, 0, 4096); err != ErrInjected {
		t.Fatalf("read in the fault window: %v", err)
	}
	if _, err := m.Start(20*int64(time.Second), Write, 0, 4096); err != nil {
		t.Fatalf("write in a read fault window: %v", err)
	}
	lat, _ := ParseDist("lognormal(100us,30us)")
	run := func() []int64 {
		x := &Model{Latency: lat, QueueDepth: 4}
		x.Seed(7)
		var out []int64
		for i := range 100 {
			at, _ := x.Start(int64(i)*ms, Read, int64(i)*4096, 4096)
			out = append(out, at)
		}
		return out
	}
	if r1, r2 := run(), run(); !bytes.Equal(enc(r1), enc(r2)) {
		t.Fatal("same seed, different completions")
	}
}

// TestModelSeek: a random I/O (one not starting where the previous read
// or write ended) pays the positioning time, a sequential one does not;
// positioning holds the one channel, so random I/Os pay it in series
// however many slots are free; a flush neither pays nor moves the head.
func TestModelSeek(t *testing.T) {
	const ms = int64(time.Millisecond)
	m := &Model{Latency: Dist{Kind: "const", A: time.Millisecond}, Seek: Dist{Kind: "const", A: 4 * time.Millisecond}, QueueDepth: 8}
	// The first I/O has nowhere to follow: random.
	if at, _ := m.Start(0, Read, 1<<20, 4096); at != 4*ms {
		t.Fatalf("first read done at %d ms, want 4 (the seek; latency 1 runs beside it)", at/ms)
	}
	// Where it ended: sequential, the latency alone.
	if at, _ := m.Start(10*ms, Read, 1<<20+4096, 4096); at != 11*ms {
		t.Fatalf("sequential read done at %d ms, want 11", at/ms)
	}
	if at, _ := m.Start(20*ms, Flush, 0, 0); at != 21*ms {
		t.Fatalf("flush done at %d ms, want 21", at/ms)
	}
	// Still sequential after the flush; a write follows a read too.
	if at, _ := m.Start(30*ms, Write, 1<<20+8192, 4096); at != 31*ms {
		t.Fatalf("write after the flush done at %d ms, want 31 (sequential)", at/ms)
	}
	// Back to where the last one started: random.
	if at, _ := m.Start(40*ms, Read, 1<<20+8192, 4096); at != 44*ms {
		t.Fatalf("re-read done at %d ms, want 44 (a seek)", at/ms)
	}
	if m.Stats.Seeks != 2 {
		t.Fatalf("%d seeks counted, want 2", m.Stats.Seeks)
	}
	// Eight random reads at once, eight slots: one head, so 4 ms each in
	// series, and their 0.1 ms of bytes; eight sequential ones pay the
	// seek to the run once, then only their bytes.
	const us = int64(time.Microsecond)
	m.Bandwidth = 4096 * 10000
	var rnd, seq []int64
	for i := range int64(8) {
		at, _ := m.Start(100*ms, Read, (i*7919%64)<<30, 4096)
		rnd = append(rnd, (at-100*ms)/us)
	}
	for i := range int64(8) {
		at, _ := m.Start(200*ms, Read, 5<<40+i*4096, 4096)
		seq = append(seq, (at-200*ms)/us)
	}
	if want := []int64{4100, 8200, 12300, 16400, 20500, 24600, 28700, 32800}; !slices.Equal(rnd, want) {
		t.Errorf("random reads done after %v us, want %v", rnd, want)
	}
	if want := []int64{4100, 4200, 4300, 4400, 4500, 4600, 4700, 4800}; !slices.Equal(seq, want) {
		t.Errorf("sequential reads done after %v us, want %v", seq, want)
	}
	if m.Stats.Seeks != 11 {
		t.Errorf("%d seeks counted, want 11", m.Stats.Seeks)
	}
	// A slowdown multiplies the seek too.
	m.Slow = []Slowdown{{Window{time.Second, 2 * time.Second}, 3}}
	if at, _ := m.Start(1000*ms, Read, 0, 4096); at-1000*ms != 12300*us {
		t.Errorf("slowed random read took %d us, want 12300", (at-1000*ms)/us)
	}
}

// TestModelWriteBandwidth: writes cross the channel at WriteBandwidth,
// reads at Bandwidth, and writes at Bandwidth when it is not set.
func TestModelWriteBandwidth(t *testing.T) {
	const ms = int64(time.Millisecond)
	m := &Model{Bandwidth: 2 << 20, WriteBandwidth: 1 << 20, QueueDepth: 1}
	if at, _ := m.Start(0, Read, 0, 1<<20); at != 500*ms {
		t.Errorf("1 MiB read at 2 MiB/s done at %d ms, want 500", at/ms)
	}
	if at, _ := m.Start(1000*ms, Write, 1<<20, 1<<20); at != 2000*ms {
		t.Errorf("1 MiB write at 1 MiB/s done at %d ms, want 2000", at/ms)
	}
	m = &Model{Bandwidth: 2 << 20}
	if at, _ := m.Start(0, Write, 0, 1<<20); at != 500*ms {
		t.Errorf("1 MiB write without a write bandwidth done at %d ms, want 500", at/ms)
	}
}

// TestModelQueueDepth: with more I/Os in flight than slots, each waits
// for a slot, and latency grows with the number in flight: k at once on
// QueueDepth slots take ceil(k/QueueDepth) service times for the last.
func TestModelQueueDepth(t *testing.T) {
	const ms = int64(time.Millisecond)
	mean := func(k int) float64 {
		m := &Model{Latency: Dist{Kind: "const", A: time.Millisecond}, QueueDepth: 4}
		var sum int64
		for i := range k {
			at, _ := m.Start(0, Read, int64(i)*4096, 4096)
			sum += at
		}
		return float64(sum) / float64(k) / float64(ms)
	}
	for _, c := range []struct {
		k    int
		want float64
	}{{1, 1}, {4, 1}, {8, 1.5}, {16, 2.5}} {
		if got := mean(c.k); got != c.want {
			t.Errorf("%d I/Os at once on 4 slots: mean latency %.2f ms, want %.2f", c.k, got, c.want)
		}
	}
}

func enc(v []int64) []byte {
	var b []byte
	for _, x := range v {
		for i := range 8 {
			b = append(b, byte(x>>(8*i)))
		}
	}
	return b
}

// TestParseDist: the forms and their errors.
func TestParseDist(t *testing.T) {
	for _, s := range []string{"100us", "uniform(50us,150us)", "exp(1ms)", "lognormal(100us, 30us)"} {
		if _, err := ParseDist(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, s := range []string{"fast", "gauss(1ms)", "uniform(2ms,1ms)", "exp(1ms,2ms)", "lognormal(0s,1ms)", "exp(1ms"} {
		if _, err := ParseDist(s); err == nil {
			t.Errorf("%s: no error", s)
		}
	}
}
