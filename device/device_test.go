package device

import (
	"bytes"
	"errors"
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
	a, _ := m.Start(0, Read, 1<<20) // 1 s of transfer
	b, _ := m.Start(0, Read, 1<<20) // shares the channel: after a
	c, _ := m.Start(0, Read, 0)     // no slot free until a completes
	if a != 1000*ms || b != 2000*ms || c != a+ms {
		t.Fatalf("completions %d %d %d ms; want 1000 2000 1001", a/ms, b/ms, c/ms)
	}
	d, _ := m.Start(10*int64(time.Second), Read, 0)
	if d-10*int64(time.Second) != 4*ms {
		t.Fatalf("slowed I/O took %d ms, want 4", (d-10*int64(time.Second))/ms)
	}
	if _, err := m.Start(20*int64(time.Second), Read, 4096); err != ErrInjected {
		t.Fatalf("read in the fault window: %v", err)
	}
	if _, err := m.Start(20*int64(time.Second), Write, 4096); err != nil {
		t.Fatalf("write in a read fault window: %v", err)
	}
	lat, _ := ParseDist("lognormal(100us,30us)")
	run := func() []int64 {
		x := &Model{Latency: lat, QueueDepth: 4}
		x.Seed(7)
		var out []int64
		for i := range 100 {
			at, _ := x.Start(int64(i)*ms, Read, 4096)
			out = append(out, at)
		}
		return out
	}
	if r1, r2 := run(), run(); !bytes.Equal(enc(r1), enc(r2)) {
		t.Fatal("same seed, different completions")
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
