package mirror

import (
	"strings"
	"testing"
)

func TestNew(t *testing.T) {
	for _, name := range Names {
		p, err := New(name, 2)
		if err != nil || p.Name() != name {
			t.Errorf("New(%q) = %v, %v", name, p, err)
		}
	}
	if _, err := New("fastest", 2); err == nil || !strings.Contains(err.Error(), "adaptive, pid, roundrobin, latency") {
		t.Errorf("unknown policy: %v; want the names listed", err)
	}
	if _, err := New("pid", 0); err == nil {
		t.Error("a set of no mirrors was accepted")
	}
}

// TestPID: a caller's reads all go to pid mod mirrors.
func TestPID(t *testing.T) {
	p, _ := New("pid", 3)
	for pid, want := range map[int]int{0: 0, 1: 1, 2: 2, 3: 0, 1001: 2} {
		for range 3 {
			if got := p.Pick(0, Read{PID: pid, Len: 4096}); got != want {
				t.Fatalf("pid %d read from mirror %d, want %d", pid, got, want)
			}
		}
	}
}

// TestRoundRobin: every 256 KiB read moves to the next mirror, whoever
// reads.
func TestRoundRobin(t *testing.T) {
	p, _ := New("roundrobin", 2)
	var got []int
	for i := range 8 {
		m := p.Pick(0, Read{PID: i, Len: 128 << 10})
		p.Started(0, m, Read{Len: 128 << 10})
		got = append(got, m)
	}
	want := []int{0, 0, 1, 1, 0, 0, 1, 1}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("mirrors %v, want %v", got, want)
		}
	}
}

// TestLatency: reads go to the mirror of lowest lifetime average; an
// unread mirror is tried first; a mirror slow once stays unused.
func TestLatency(t *testing.T) {
	p, _ := New("latency", 2)
	if m := p.Pick(0, Read{}); m != 0 {
		t.Fatalf("first read to %d, want 0", m)
	}
	p.Done(100, 0, 0, nil) // mirror 0: 100 ns
	if m := p.Pick(100, Read{}); m != 1 {
		t.Fatalf("unread mirror not tried: %d", m)
	}
	p.Done(1100, 1, 100, nil) // mirror 1: 1000 ns
	for range 10 {
		if m := p.Pick(2000, Read{}); m != 0 {
			t.Fatalf("read to %d, want the faster mirror 0", m)
		}
	}
	p.Done(1e9, 0, 0, nil) // mirror 0 stalls once for 1 s
	for range 1000 {
		p.Done(2e9, 1, 2e9-50, nil) // mirror 1 is now fast
	}
	if m := p.Pick(2e9, Read{}); m != 1 {
		t.Fatalf("read to %d after mirror 0 stalled, want 1", m)
	}
}
